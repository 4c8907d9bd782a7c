#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "cache.hpp"
#include "coalesce.hpp"
#include "labels.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/shared/store.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute::sidecar {

/// Counters and histograms of the sidecar, rendered in the Prometheus text format.
class Metrics {
 public:
  void on_call(const std::string& profile, const std::string& chain, std::string_view method,
               const CallOutcome& out);
  void on_http(int status) { ++http_[status]; }
  void in_flight(int delta) { in_flight_ += delta; }
  [[nodiscard]] std::int64_t in_flight() const { return in_flight_; }
  void on_cancelled() { ++cancelled_; }
  void on_refused(std::string_view limit) { ++refused_[std::string(limit)]; }
  /// WebSocket clients (ws_session.cpp): one more or one less open; a close and its code (1006
  /// when the socket ended without a close frame).
  void websocket_open(int delta) { websockets_ += delta; }
  void on_websocket_close(int code) { ++websocket_closes_[code]; }
  void websocket_upstream_subscriptions(std::size_t n) { websocket_upstream_subs_ = n; }
  /// WebSocket clients open now, and subscriptions held upstream (the dashboard shows both).
  [[nodiscard]] std::int64_t websockets() const { return websockets_; }
  [[nodiscard]] std::size_t websocket_upstream_subscriptions() const {
    return websocket_upstream_subs_;
  }
  /// The sidecar's edge right now: open connections and request-body bytes held.
  void edge(std::size_t connections, std::size_t request_bytes) {
    connections_ = connections;
    request_bytes_ = request_bytes;
  }

  /// The shared state's link (issue 20): up or not, fallbacks, refreshes, refused writes.
  [[nodiscard]] static std::string render_shared(const shared::SharedStatus& s);

  /// The answer cache's and the coalescer's counters as of now.
  void cache(const CacheStats& cache, const CoalesceStats& coalesce) {
    cache_ = cache;
    coalesce_ = coalesce;
  }

  /// Everything, with breaker, rate-limit and height gauges read from the state.
  [[nodiscard]] std::string render(const std::vector<const Profile*>& profiles, const State& state,
                                   std::int64_t now_ms) const;

 private:
  static constexpr std::array<double, 14> kBucketsMs{0.5, 1,   2.5, 5,    10,   25,   50,
                                                     100, 250, 500, 1000, 2500, 5000, 10000};
  struct Histogram {
    std::array<std::uint64_t, kBucketsMs.size()> buckets{};
    std::uint64_t count = 0;
    double sum_s = 0;
  };
  using CallKey = std::tuple<std::string, std::string, std::string, std::string,
                             std::string>;  // profile chain method provider status
  using AttemptKey = std::tuple<std::string, std::string, std::string, std::string,
                                std::string>;  // profile chain provider outcome transport
  using ProviderKey = std::tuple<std::string, std::string, std::string>;
  using LatencyKey = std::tuple<std::string, std::string, std::string,
                                std::string>;  // profile chain provider transport

  std::map<CallKey, std::uint64_t, LabelLess> calls_;
  std::map<AttemptKey, std::uint64_t, LabelLess> attempts_;
  std::map<LatencyKey, Histogram, LabelLess> latency_;
  std::map<ProviderKey, std::uint64_t, LabelLess> hedges_;  // profile chain winner
  std::map<int, std::uint64_t> http_;
  std::int64_t in_flight_ = 0;
  std::size_t connections_ = 0;
  std::size_t request_bytes_ = 0;
  std::uint64_t cancelled_ = 0;
  CacheStats cache_;
  CoalesceStats coalesce_;
  void render_cache(std::string& out) const;
  std::map<std::string, std::uint64_t, std::less<>> refused_;
  std::int64_t websockets_ = 0;
  std::map<int, std::uint64_t> websocket_closes_;
  std::size_t websocket_upstream_subs_ = 0;
  std::map<std::string, bool, std::less<>> methods_seen_;

  // The last labels counted under and where their values live (std::map never moves them):
  // steady traffic counts without walking the maps. Status and outcome names are static text,
  // compared by address.
  struct LastCall {
    std::string profile, chain, method, provider;  // method as the client sent it
    const char* status = nullptr;
    std::uint64_t* count = nullptr;
  } last_call_;
  struct LastAttempt {
    std::string profile, chain, provider;
    const char* outcome = nullptr;
    TransportKind transport = TransportKind::http;
    std::uint64_t* count = nullptr;
    Histogram* latency = nullptr;
  } last_attempt_;
};

}  // namespace rpcroute::sidecar
