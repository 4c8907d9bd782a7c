#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "rpcroute/transport/error.hpp"

namespace rpcroute {

/// The classes of DESIGN.md section 7: what the router does with an answer.
enum class OutcomeClass {
  success,
  deterministic,     // returned to the client; no failover
  capability,        // next provider; breaker untouched
  rate_limited,      // next provider; provider marked rate-limited
  provider_failure,  // next provider; counts toward the breaker
  unknown,           // -32000 with an unknown message: one more provider, then returned
};

/// What happened on one attempt, finer than the class. Local failures (connect, timeout) are
/// kept apart from what the provider answered.
enum class Outcome {
  success,
  rpc_error,       // the provider answered with a JSON-RPC error
  rate_limited,    // HTTP 429 or a rate-limit error
  connect_failed,  // refused: the request provably never left
  dns_failed,      // could not resolve: never left
  tls_failed,
  timeout,
  transport_error,  // reset, closed, nothing received
  http_error,       // HTTP status other than 2xx and 429
  bad_response,     // not JSON, truncated, not a JSON-RPC response
  wrong_id,         // an answer for another request
  too_large,        // the answer outgrew the response cap (max_response_mb): abandoned
  out_of_memory,    // this process ran out of memory taking the answer: that attempt failed
};
/// The last Outcome, for code that walks them all.
inline constexpr Outcome kLastOutcome = Outcome::out_of_memory;

[[nodiscard]] std::string_view outcome_name(Outcome o);
[[nodiscard]] std::string_view class_name(OutcomeClass c);
[[nodiscard]] std::optional<Outcome> parse_outcome(std::string_view name);

/// One classified attempt result.
struct Classification {
  Outcome outcome = Outcome::success;
  OutcomeClass cls = OutcomeClass::success;
  std::string message;
  std::int64_t retry_after_ms = -1;  // from Retry-After, error data or the message; -1 unknown

  [[nodiscard]] bool counts_for_breaker() const { return cls == OutcomeClass::provider_failure; }
  /// True when the request provably never reached the provider (safe to resend a transaction).
  [[nodiscard]] bool never_sent() const {
    return outcome == Outcome::connect_failed || outcome == Outcome::dns_failed;
  }
};

/// The class of a JSON-RPC error object. Message patterns are checked before codes, because nodes
/// reuse codes loosely (anvil's -32602 "BlockOutOfRangeError" is a capability error).
[[nodiscard]] OutcomeClass classify_rpc_error(std::int64_t code, std::string_view message);

/// Whether an error message says the node lacks the state or history of the block asked (pruned:
/// an archive provider has it), as opposed to not having reached the block yet or a bad request.
/// The router teaches `archival_seen: false` from it (tests/fixtures/provider-errors.json,
/// `missing_state`).
[[nodiscard]] bool says_missing_state(std::string_view message);

/// One row of the message table, exposed so tests can enumerate it.
struct MessageRule {
  std::string_view needle;   // lower-case substring
  std::string_view needle2;  // optional second substring that must also occur
  OutcomeClass cls;
};
struct CodeRule {
  std::int64_t code;
  OutcomeClass cls;
};
[[nodiscard]] std::span<const MessageRule> message_rules();
[[nodiscard]] std::span<const CodeRule> code_rules();

/// How long a rate-limited provider should be left alone, from a Retry-After header (seconds or
/// HTTP date), error data (retry_after, backoff_seconds) or "try again in N seconds". -1: unknown.
[[nodiscard]] std::int64_t retry_after_ms(std::string_view retry_after_header,
                                          std::string_view error_message,
                                          std::string_view error_data_json, std::int64_t now_ms);

/// Classifies a transport failure.
[[nodiscard]] Classification classify_transport(TransportError e, std::string message);

/// What we print of a provider's text (an error message, a body) in our own reports: control
/// characters, DEL, C1 controls and bytes that are not UTF-8 become escapes ("\n", "\x1b"), so the
/// text can neither drive a terminal nor forge a line; longer than kMaxReportBytes, it is cut on a
/// character boundary and ends "… (N bytes)". The node's own JSON-RPC error, relayed to a client,
/// is never passed through this.
///   report_text("bad\x1b[2J") == "bad\\x1b[2J"
[[nodiscard]] std::string report_text(std::string_view upstream_text);
inline constexpr std::size_t kMaxReportBytes = 512;

/// Classifies an HTTP answer that is not 2xx (429 → rate limited, else provider failure unless the
/// body is a rate-limit error).
[[nodiscard]] Classification classify_http_status(long status, std::string_view body,
                                                  std::string_view retry_after_header,
                                                  std::int64_t now_ms);

}  // namespace rpcroute
