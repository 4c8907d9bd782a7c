// Fuzzes what rpcroute does with a provider's answer: jsonrpc::parse_response (copying and in
// place) and the classification of DESIGN.md section 7 (classify_exchange, classify_http_status,
// classify_rpc_error, retry_after_ms).
//
// Input: a first line "STATUS CALLS RETRY-AFTER…" (HTTP status, number of calls sent, the rest of
// the line is the Retry-After header; anything missing or unreadable takes 200, 1 and none), then
// the response body. Seeds are readable and hand-editable that way.
//
// Invariants checked besides "no crash, no exception":
// - parsing in place (the engine's path) and parsing a copy give the same answer;
// - whatever the plain path accepts, the full path reads the same way (jsonrpc::detail);
// - every call gets exactly one classification; a matched reply points into the parsed response
//   and has the id of its call; a reply with a result is a success, one with an error is
//   classified from its code and message;
// - the exchange's overall class is the class of one of its calls, chosen as the breaker needs;
// - a retry-after is unknown (-1) or between 0 and 7 days.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>

#include "check.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"

namespace {

using namespace rpcroute;

constexpr std::int64_t kNowMs = 1'700'000'000'000;  // a fixed "now": the target must be deterministic
constexpr std::int64_t kWeekMs = 7LL * 86'400'000;

struct Input {
  long status = 200;
  std::size_t calls = 1;
  std::string retry_after;
  std::string_view body;
};

Input split(std::string_view text) {
  Input in;
  auto eol = text.find('\n');
  if (eol == std::string_view::npos) {
    in.body = text;
    return in;
  }
  auto head = text.substr(0, eol);
  in.body = text.substr(eol + 1);
  auto next_word = [&head]() {
    while (!head.empty() && head.front() == ' ') head.remove_prefix(1);
    auto end = std::min(head.find(' '), head.size());
    auto w = head.substr(0, end);
    head.remove_prefix(end);
    return w;
  };
  auto status = next_word();
  long s = 0;
  if (std::from_chars(status.data(), status.data() + status.size(), s).ec == std::errc() && s >= 0 && s < 1000) {
    in.status = s;
  }
  auto calls = next_word();
  std::size_t n = 0;
  if (std::from_chars(calls.data(), calls.data() + calls.size(), n).ec == std::errc() && n >= 1 && n <= 64) {
    in.calls = n;
  }
  while (!head.empty() && head.front() == ' ') head.remove_prefix(1);
  in.retry_after = std::string(head);
  return in;
}

bool same_reply(const jsonrpc::Reply& a, const jsonrpc::Reply& b) {
  if (a.id != b.id || a.result != b.result || a.error.has_value() != b.error.has_value()) return false;
  return !a.error || (a.error->code == b.error->code && a.error->message == b.error->message &&
                      a.error->data == b.error->data);
}

void check_retry_after(std::int64_t ms) { FUZZ_CHECK(ms == -1 || (ms >= 0 && ms <= kWeekMs)); }

void check_parsers_agree(std::string_view body) {
  if (auto plain = jsonrpc::detail::parse_plain_response(body)) {
    auto full = jsonrpc::detail::parse_full_response(body);
    FUZZ_CHECK(full.has_value());
    FUZZ_CHECK(plain->batch == full->batch && plain->replies.size() == full->replies.size());
    for (std::size_t i = 0; i < plain->replies.size(); ++i) FUZZ_CHECK(same_reply(plain->replies[i], full->replies[i]));
  }
  auto copied = jsonrpc::parse_response(body);
  std::string buffer(body);
  buffer.reserve(buffer.size() + 64);  // simdjson's padding, as the engine reserves it
  auto in_place = jsonrpc::parse_response(buffer, buffer.capacity());
  FUZZ_CHECK(copied.has_value() == in_place.has_value());
  if (!copied) {
    FUZZ_CHECK(copied.error() == in_place.error());
    return;
  }
  FUZZ_CHECK(copied->batch == in_place->batch);
  FUZZ_CHECK(copied->replies.size() == in_place->replies.size());
  FUZZ_CHECK(copied->batch || copied->replies.size() == 1);
  for (std::size_t i = 0; i < copied->replies.size(); ++i) {
    const auto& r = copied->replies[i];
    FUZZ_CHECK(same_reply(r, in_place->replies[i]));
    FUZZ_CHECK(r.result.has_value() != r.error.has_value());
    if (r.error) {
      check_retry_after(retry_after_ms("", r.error->message, r.error->data, kNowMs));
      (void)classify_rpc_error(r.error->code, r.error->message);
    }
  }
}

void check_exchange(const Input& in) {
  HttpResponse http;
  http.status = in.status;
  http.body = std::string(in.body);
  http.retry_after = in.retry_after;
  Profile profile;
  Exchange ex = classify_exchange(std::move(http), UpstreamIds{0, in.calls}, kNowMs, profile);

  FUZZ_CHECK(ex.per_call.size() == in.calls);
  FUZZ_CHECK(ex.replies.size() == in.calls);
  bool overall_is_one_of_them = false;
  for (std::size_t i = 0; i < in.calls; ++i) {
    const auto& c = ex.per_call[i];
    check_retry_after(c.retry_after_ms);
    overall_is_one_of_them |= c.cls == ex.overall.cls && c.outcome == ex.overall.outcome;
    if (const auto* r = ex.replies[i]) {
      FUZZ_CHECK(ex.response.has_value());
      const auto& all = ex.response->replies;
      FUZZ_CHECK(r >= all.data() && r < all.data() + all.size());
      FUZZ_CHECK(jsonrpc::same_id(r->id, std::to_string(i)));
      if (r->result) {
        FUZZ_CHECK(c.cls == OutcomeClass::success && c.outcome == Outcome::success);
      } else {
        FUZZ_CHECK(c.cls == classify_rpc_error(r->error->code, r->error->message));
      }
    } else {
      FUZZ_CHECK(c.cls != OutcomeClass::success);
    }
    if (in.status < 200 || in.status > 299) {
      FUZZ_CHECK(c.outcome == Outcome::rate_limited || c.outcome == Outcome::http_error);
      FUZZ_CHECK(in.status != 429 || c.cls == OutcomeClass::rate_limited);
    }
  }
  FUZZ_CHECK(overall_is_one_of_them);
  bool any_rate_limited = std::any_of(ex.per_call.begin(), ex.per_call.end(),
                                      [](const Classification& c) { return c.cls == OutcomeClass::rate_limited; });
  FUZZ_CHECK(any_rate_limited == (ex.overall.cls == OutcomeClass::rate_limited));

  auto status_only = classify_http_status(in.status, in.body, in.retry_after, kNowMs);
  FUZZ_CHECK(status_only.cls == OutcomeClass::rate_limited || status_only.cls == OutcomeClass::provider_failure);
  check_retry_after(status_only.retry_after_ms);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in = split(rpcroute::fuzz::as_text(data, size));
  check_parsers_agree(in.body);
  check_exchange(in);
  check_retry_after(retry_after_ms(in.retry_after, in.body, in.body, kNowMs));
  return 0;
}
