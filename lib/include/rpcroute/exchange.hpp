#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

/// One call sent upstream. Upstream ids are the calls' positions (0, 1, …), so answers are matched
/// whatever ids the client used.
struct UpstreamCall {
  std::string_view method;
  std::string_view params;
};

/// One HTTP exchange with one provider, classified per call (DESIGN.md section 7). The router,
/// `bench` and `probe` all go through this, so they judge answers the same way.
struct Exchange {
  HttpResponse http;
  std::optional<jsonrpc::Response> response;
  // Inline room for one call (the usual exchange): no allocation for it.
  boost::container::small_vector<Classification, 1> per_call;
  boost::container::small_vector<const jsonrpc::Reply*, 1> replies;  // into response; null where the call got no answer
  Classification overall;                      // what the breaker and rate-limit marks see

  Exchange() = default;
  Exchange(Exchange&&) = default;
  Exchange& operator=(Exchange&&) = default;
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  [[nodiscard]] double latency_ms() const { return static_cast<double>(http.latency_us) / 1000.0; }
};

/// Moves the answer's buffer out of `ex`, keeping only `part` (a view into it, such as a reply's
/// result): a large result is handed on without a copy. `ex.response` must not be used after.
/// A `part` that does not point into the buffer is copied.
[[nodiscard]] std::string take_part(Exchange& ex, std::string_view part);

/// The client's response {"jsonrpc":"2.0","id":ID,"result":RESULT}, built in the answer's own
/// buffer: the provider's envelope around `result` (a view into it) is replaced, moving the result
/// at most once — not at all when the two ids have the same length. A large result is forwarded
/// without a copy. `ex.response` must not be used after. Copies when the buffer has no room.
[[nodiscard]] std::string take_as_response(Exchange& ex, std::string_view result, std::string_view id);

/// A single call is sent as an object, several as a batch.
[[nodiscard]] std::string upstream_body(std::span<const UpstreamCall> calls);

/// Classifies a provider's HTTP answer to `call_count` calls sent with upstream_body(). With the
/// calls, a head answer (eth_blockNumber) that is not a quantity ("0x", "-0x1", a JSON number) is a
/// provider failure (bad_response), not a result.
[[nodiscard]] Exchange classify_exchange(HttpResponse http, std::size_t call_count, std::int64_t now_ms,
                                         const Profile& profile, std::span<const UpstreamCall> calls = {});

/// Sends calls to one provider and classifies the answer.
[[nodiscard]] asio::awaitable<Exchange> send_exchange(Engine& engine, const Provider& provider,
                                                      std::span<const UpstreamCall> calls, std::int64_t timeout_ms,
                                                      const Clock& clock, const Profile& profile);

/// Records an exchange in the state the way live traffic does: one attempt (breaker, rate-limit
/// mark) and one latency sample per call.
struct RecordOptions {
  bool trial = false;          // sent while the breaker was open (recovery probe, trial request)
  bool timeout_trips = true;   // false when the overall deadline, not the provider's timeout, cut it short
};
void record_exchange(StateStore& store, const HealthConfig& health, std::string_view key,
                     std::span<const UpstreamCall> calls, const Exchange& exchange, std::int64_t now_ms,
                     double jitter, RecordOptions options = {});

}  // namespace rpcroute
