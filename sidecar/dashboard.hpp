#pragma once
// What the live dashboard shows (GET /, /dashboard/state, /dashboard/events): a bounded ring of
// the last routing decisions, filled where a JSON-RPC job finishes, and per provider × method
// latency time series. Fixed-size slots reused in place: recording a decision allocates nothing.
// Never a body, a param, a URL or a header: names of methods, chains and providers only.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "labels.hpp"
#include "rpcroute/asio_compat.hpp"
#include "rpcroute/executor.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/outcome.hpp"

namespace rpcroute::sidecar {

struct Connection;

/// A name copied into a fixed buffer, cut at N-1 bytes: a method name is the client's text and
/// must not grow a slot. Copied as is (one memcpy on the request path); printable() is what the
/// feed shows of it.
template <std::size_t N>
struct ShortName {
  std::array<char, N> text{};
  std::uint8_t size = 0;

  void assign(std::string_view s) {
    static_assert(N < 256);
    size = static_cast<std::uint8_t>(std::min(s.size(), N - 1));
    if (size > 0)
      std::memcpy(text.data(), s.data(), size);  // "" may have no data (a cache hit's provider)
  }
  [[nodiscard]] std::string_view view() const { return {text.data(), size}; }
  /// Printable ASCII only (anything else becomes '?'): it can neither break the JSON nor drive
  /// a terminal.
  [[nodiscard]] std::string printable() const {
    std::string out(view());
    for (char& c : out) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x7f) c = '?';
    }
    return out;
  }
};

/// One routed call as the feed shows it.
struct Decision {
  static constexpr std::size_t kMaxAttempts = 4;  // more are counted, not listed
  struct Attempt {
    ShortName<48> provider;
    Outcome outcome = Outcome::success;
    OutcomeClass cls = OutcomeClass::success;
    float latency_ms = 0;
    TransportKind transport = TransportKind::http;  // over HTTP or the provider's WebSocket
  };
  std::uint64_t seq = 0;  // 1, 2, ...: the SSE event id
  std::int64_t at_ms = 0;
  ShortName<48> profile;
  ShortName<48> chain;
  ShortName<64> method;
  ShortName<48> provider;                         // who answered; empty when nobody did
  TransportKind transport = TransportKind::http;  // how the answer came (issue 18)
  CallOutcome::Status status = CallOutcome::Status::result;
  std::uint32_t attempt_count = 0;
  std::array<Attempt, kMaxAttempts> attempts{};
  float total_ms = 0;
  bool cache_hit = false;  // answered from the answer cache: no attempt, no provider
  CallOutcome::Hedge hedge = CallOutcome::Hedge::none;  // a hedge fired, and who won
};

/// What a chain's calls did besides routing (issue 22), counted always: plain increments in the
/// profile's runtime (one slot per chain), no lookups. Cache counts are those of the cache's own
/// stats (a bypass, a hit, a miss), split by chain; hedges as /metrics counts them.
struct ChainActivity {
  std::uint64_t cache_hits = 0;
  std::uint64_t cache_misses = 0;
  std::uint64_t cache_bypasses = 0;
  std::uint64_t hedges_fired = 0;  // a second provider was asked
  std::uint64_t hedges_won = 0;    // ... and answered first
  void on_hedge(CallOutcome::Hedge h) {
    if (h == CallOutcome::Hedge::none) return;
    ++hedges_fired;
    hedges_won += h == CallOutcome::Hedge::hedge_won ? 1 : 0;
  }
};

/// The last `capacity` decisions; the slots are allocated once.
class DecisionRing {
 public:
  explicit DecisionRing(std::size_t capacity) : slots_(capacity == 0 ? 1 : capacity) {}
  /// The slot of the next decision (the oldest one's, reused), its seq set.
  Decision& next() {
    Decision& d = slots_[next_seq_ % slots_.size()];
    d.seq = next_seq_++;
    return d;
  }
  /// The decision numbered `seq`, or null when it is not recorded yet or already overwritten.
  [[nodiscard]] const Decision* at(std::uint64_t seq) const {
    if (seq < first_seq() || seq >= next_seq_) return nullptr;
    return &slots_[seq % slots_.size()];
  }
  [[nodiscard]] std::uint64_t first_seq() const {
    return next_seq_ > slots_.size() ? next_seq_ - slots_.size() : 1;
  }
  [[nodiscard]] std::uint64_t next_seq() const { return next_seq_; }
  [[nodiscard]] std::size_t capacity() const { return slots_.size(); }

 private:
  std::vector<Decision> slots_;
  std::uint64_t next_seq_ = 1;
};

/// p50 and p90 of latencies per time window (kWindowMs each, the last kWindows), from fixed
/// geometric buckets: a series has the same size whatever the traffic.
class LatencySeries {
 public:
  static constexpr std::int64_t kWindowMs = 10'000;
  static constexpr std::size_t kWindows = 30;  // 5 minutes
  static constexpr std::size_t kBuckets = 32;  // 0.05 ms × 1.5^k: up to ~14 s, then the last

  void add(std::int64_t now_ms, double ms);
  struct Point {
    std::int64_t start_ms = 0;
    std::uint32_t count = 0;
    double p50_ms = 0;
    double p90_ms = 0;
  };
  /// The windows of the last kWindows × kWindowMs that saw traffic, oldest first.
  [[nodiscard]] std::vector<Point> points(std::int64_t now_ms) const;
  /// The upper bound of bucket `i` (the last is open: its bound is twice the one before).
  [[nodiscard]] static double bucket_bound(std::size_t i);
  [[nodiscard]] static std::size_t bucket_of(double ms);

 private:
  struct Window {
    std::int64_t index = -1;  // now_ms / kWindowMs of its traffic; -1: never used
    std::uint32_t count = 0;
    std::array<std::uint32_t, kBuckets> buckets{};
  };
  [[nodiscard]] static double quantile(const Window& w, double q);
  std::array<Window, kWindows> windows_{};
};

/// Per provider of a chain: what the feed adds to the health state (share of first attempts).
struct ProviderTraffic {
  std::uint64_t first = 0;     // calls whose first attempt went to it
  std::uint64_t attempts = 0;  // attempts of any position
  std::uint64_t answered = 0;  // attempts it answered (success or the node's own error)
};

/// The dashboard's memory: the decision ring always (one slot copy per call), the time series and
/// traffic counts only while someone watches (a stream open, or state read in the last
/// kWatchMs): an unwatched sidecar pays no map lookups per request.
class Dashboard {
 public:
  static constexpr std::size_t kDefaultCapacity = 512;
  static constexpr std::size_t kMaxSeries = 512;  // method names are the clients': bounded
  static constexpr std::int64_t kWatchMs = 5 * 60'000;

  explicit Dashboard(std::size_t capacity = kDefaultCapacity) : ring_(capacity) {}

  /// One call's outcome into the ring (and the series while watched). `total_ms`: the request's
  /// time in the sidecar.
  void record(std::string_view profile, std::string_view chain, std::string_view method,
              const CallOutcome& out, std::int64_t now_ms, double total_ms);
  /// A call answered from the answer cache into the ring: no provider, no attempt.
  void record_hit(std::string_view profile, std::string_view chain, std::string_view method,
                  std::int64_t now_ms, double total_ms);
  /// Someone looks: series and counts are kept for kWatchMs from `now_ms`.
  void watched(std::int64_t now_ms) { watched_until_ms_ = now_ms + kWatchMs; }
  [[nodiscard]] bool is_watched(std::int64_t now_ms) const {
    return streams_ > 0 || now_ms < watched_until_ms_;
  }

  [[nodiscard]] const DecisionRing& ring() const { return ring_; }
  /// The series of one chain's providers, as [{provider, method, points: [[t, n, p50, p90]]}].
  void write_series_json(json::Writer& w, std::string_view profile, std::string_view chain,
                         std::int64_t now_ms) const;
  /// The traffic counts of one provider (zeros when none).
  [[nodiscard]] ProviderTraffic traffic(std::string_view profile, std::string_view chain,
                                        std::string_view provider) const;
  /// Calls with a first attempt on a chain (the denominator of the first-attempt share).
  [[nodiscard]] std::uint64_t chain_firsts(std::string_view profile, std::string_view chain) const;

  /// The Server-Sent Events stream of decisions on an answered GET /dashboard/events: writes the
  /// head (with `header_lines`, the CORS headers) then the decisions from the ring, polled every
  /// kStreamTickMs. A reader that falls a whole ring behind, or cannot take a write within
  /// kStreamWriteMs (the server's sweeper cancels it through `conn`), is dropped: it never holds
  /// the others. Returns when the client leaves or the server drains.
  [[nodiscard]] asio::awaitable<void> stream(asio::ip::tcp::socket& socket, Connection& conn,
                                             std::string header_lines, const bool& draining,
                                             std::int64_t now_ms);
  static constexpr std::size_t kMaxStreams = 32;
  static constexpr int kStreamTickMs = 200;
  static constexpr int kStreamWriteMs = 5'000;
  static constexpr int kHeartbeatMs = 15'000;
  static constexpr int kStreamSocketBuffer = 64 * 1024;
  [[nodiscard]] std::size_t streams() const { return streams_; }
  [[nodiscard]] std::uint64_t dropped_streams() const { return dropped_streams_; }

 private:
  void count(std::string_view profile, std::string_view chain, std::string_view method,
             const CallOutcome& out, std::int64_t now_ms);
  using Key3 = std::tuple<std::string, std::string, std::string>;
  using Key4 = std::tuple<std::string, std::string, std::string, std::string>;

  DecisionRing ring_;
  std::int64_t watched_until_ms_ = 0;
  std::size_t streams_ = 0;
  std::uint64_t dropped_streams_ = 0;
  std::map<Key4, LatencySeries, LabelLess> series_;     // profile chain provider method
  std::map<Key3, ProviderTraffic, LabelLess> traffic_;  // profile chain provider
  std::map<std::tuple<std::string, std::string>, std::uint64_t, LabelLess> firsts_;
};

/// One decision as the feed's JSON object.
void write_decision_json(json::Writer& w, const Decision& d);

}  // namespace rpcroute::sidecar
