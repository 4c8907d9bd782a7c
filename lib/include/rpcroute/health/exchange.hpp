#pragma once
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

/// One call sent upstream. Upstream ids are the router's own, not the client's: answers are matched
/// whatever ids the client used.
struct UpstreamCall {
  std::string_view method;
  std::string_view params;
};

/// The ids of one upstream request's calls: first, first + 1, …, first + count - 1. Unique in the
/// process, so that an answer left over on a keep-alive connection (an unsolicited extra response,
/// a late answer) never passes for the answer to a later request.
struct UpstreamIds {
  std::uint64_t first = 0;
  std::size_t count = 0;
};

/// Reserves `count` fresh upstream ids.
[[nodiscard]] UpstreamIds reserve_upstream_ids(std::size_t count);

/// One HTTP exchange with one provider, classified per call (DESIGN.md section 7). The router,
/// `bench` and `probe` all go through this, so they judge answers the same way.
struct Exchange {
  HttpResponse http;
  std::optional<jsonrpc::Response> response;
  // Inline room for one call (the usual exchange): no allocation for it.
  boost::container::small_vector<Classification, 1> per_call;
  boost::container::small_vector<const jsonrpc::Reply*, 1>
      replies;             // into response; null where the call got no answer
  Classification overall;  // what the breaker and rate-limit marks see

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
[[nodiscard]] std::string take_as_response(Exchange& ex, std::string_view result,
                                           std::string_view id);

/// A single call is sent as an object, several as a batch; call i gets the id ids.first + i.
[[nodiscard]] std::string upstream_body(std::span<const UpstreamCall> calls, UpstreamIds ids);

/// Classifies a provider's HTTP answer to the calls sent with upstream_body(calls, ids). An answer
/// must carry exactly the ids sent (the same token: 7, not 7.0), each once, in the shape sent (an
/// object for one call); anything else is not the answer to this request (a provider failure).
/// With the calls, a head answer (eth_blockNumber) that is not a quantity ("0x", "-0x1", a JSON
/// number) is a provider failure (bad_response), not a result.
[[nodiscard]] Exchange classify_exchange(HttpResponse http, UpstreamIds ids, std::int64_t now_ms,
                                         const Profile& profile,
                                         std::span<const UpstreamCall> calls = {});

/// Whether an exchange's answer shows its connection out of step (an answer to another request, or
/// not an answer at all): the connection is then closed rather than reused.
[[nodiscard]] bool connection_suspect(const Exchange& exchange);

/// The response cap for calls to one provider: the largest of the calls' methods' caps (their
/// method overrides' max_response_mb, else the provider's limits.max_response_mb, else the
/// default).
[[nodiscard]] std::uint64_t max_response_bytes(std::span<const UpstreamCall> calls,
                                               const Provider& provider, const Profile& profile);

/// Sends calls to one provider and classifies the answer.
[[nodiscard]] asio::awaitable<Exchange> send_exchange(Transport& transport,
                                                      const Provider& provider,
                                                      std::span<const UpstreamCall> calls,
                                                      std::int64_t timeout_ms, const Clock& clock,
                                                      const Profile& profile);

/// Records an exchange in the state the way live traffic does: one attempt (breaker, rate-limit
/// mark) and one latency sample per call.
struct RecordOptions {
  bool trial = false;  // sent while the breaker was open (recovery probe, trial request)
  bool timeout_trips =
      true;  // false when the overall deadline, not the provider's timeout, cut it short
  /// Over the provider's WebSocket: its breaker (ws_breaker) and its samples ("<method>@ws").
  TransportKind transport = TransportKind::http;
};
void record_exchange(HealthSink& sink, const HealthConfig& health, std::string_view key,
                     std::span<const UpstreamCall> calls, const Exchange& exchange,
                     std::int64_t now_ms, double jitter, RecordOptions options = {});

}  // namespace rpcroute
