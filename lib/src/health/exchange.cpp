#include "rpcroute/health/exchange.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>

#include "rpcroute/jsonrpc.hpp"

namespace rpcroute {

namespace {

/// Rate limits matter most, then failures: the exchange's class as the breaker sees it.
OutcomeClass overall_class(std::span<const Classification> per_call) {
  bool failure = false, success = false;
  for (const auto& c : per_call) {
    if (c.cls == OutcomeClass::rate_limited) return OutcomeClass::rate_limited;
    failure |= c.cls == OutcomeClass::provider_failure;
    success |= c.cls == OutcomeClass::success;
  }
  if (failure) return OutcomeClass::provider_failure;
  if (success) return OutcomeClass::success;
  return per_call.empty() ? OutcomeClass::success : per_call.front().cls;
}

Classification reply_class(const jsonrpc::Reply& r, std::string_view retry_after_header,
                           std::int64_t now_ms) {
  Classification c;
  if (r.result) return c;
  c.cls = classify_rpc_error(r.error->code, r.error->message);
  c.outcome = c.cls == OutcomeClass::rate_limited ? Outcome::rate_limited : Outcome::rpc_error;
  c.message = fmt::format("{}: {}", r.error->code, r.error->message);
  if (c.cls == OutcomeClass::rate_limited) {
    c.retry_after_ms = retry_after_ms(retry_after_header, r.error->message, r.error->data, now_ms);
  }
  return c;
}

Classification failure(Outcome o, std::string message) {
  return Classification{o, OutcomeClass::provider_failure, std::move(message), -1};
}

}  // namespace

namespace {

/// Whether `part` is a view into `body` (where a reply's result normally points).
bool points_into(const std::string& body, std::string_view part) {
  return part.data() >= body.data() && part.data() + part.size() <= body.data() + body.size();
}

}  // namespace

std::string take_part(Exchange& ex, std::string_view part) {
  auto& body = ex.http.body;
  if (!points_into(body, part)) return std::string(part);
  const auto offset = static_cast<std::size_t>(part.data() - body.data());
  std::string out = std::move(body);
  body.clear();
  if (offset > 0) std::memmove(out.data(), out.data() + offset, part.size());
  out.resize(part.size());
  return out;
}

std::string take_as_response(Exchange& ex, std::string_view result, std::string_view id) {
  if (id.empty()) id = "null";
  auto& body = ex.http.body;
  using jsonrpc::kResultHead, jsonrpc::kResultMiddle;
  const std::size_t prefix = kResultHead.size() + id.size() + kResultMiddle.size();
  const std::size_t need = prefix + result.size() + 1;
  if (!points_into(body, result) || need > body.capacity()) return jsonrpc::make_result(id, result);
  const auto offset = static_cast<std::size_t>(result.data() - body.data());
  std::string out = std::move(body);
  body.clear();
  if (out.size() < need) out.resize(need);  // within the capacity: the result's bytes stay put
  if (offset != prefix) std::memmove(out.data() + prefix, out.data() + offset, result.size());
  char* p = out.data();
  std::memcpy(p, kResultHead.data(), kResultHead.size());
  std::memcpy(p + kResultHead.size(), id.data(), id.size());
  std::memcpy(p + kResultHead.size() + id.size(), kResultMiddle.data(), kResultMiddle.size());
  p[prefix + result.size()] = '}';
  out.resize(need);
  return out;
}

UpstreamIds reserve_upstream_ids(std::size_t count) {
  // Process-wide (the sidecar's threads share the counter); starts at 1 so that no upstream call
  // carries the 0 every call used to have.
  static std::atomic<std::uint64_t> next{1};
  return UpstreamIds{next.fetch_add(count, std::memory_order_relaxed), count};
}

std::string upstream_body(std::span<const UpstreamCall> calls, UpstreamIds ids) {
  assert(ids.count == calls.size());
  if (calls.size() == 1)
    return jsonrpc::make_call(std::to_string(ids.first), calls[0].method, calls[0].params);
  std::string body;
  body.push_back('[');
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) body.push_back(',');
    jsonrpc::append_call(body, std::to_string(ids.first + i), calls[i].method, calls[i].params);
  }
  body.push_back(']');
  return body;
}

namespace {

/// Our ids are plain decimal integers: an answer's id is ours only as that exact token (no 7.0,
/// no "7"). Whitespace around a raw token is not part of it.
bool is_our_id(std::string_view token, std::string_view want) {
  while (!token.empty() && (token.front() == ' ' || token.front() == '\t' ||
                            token.front() == '\n' || token.front() == '\r'))
    token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' || token.back() == '\n' ||
                            token.back() == '\r'))
    token.remove_suffix(1);
  return token == want;
}

/// One answer for a whole batch: the provider refused the batch as such. An error in it is about
/// the batch, not about one call: a rate limit, a capability ("batch requests not supported": the
/// next provider may take it) or a provider failure counts as such; an error that would be handed
/// to the caller (deterministic, unknown: -32600) is the batch refused, as no call has an answer of
/// its own (judge's return_error reads one).
Classification single_answer_to_batch(const jsonrpc::Reply& reply, const std::string& retry_after,
                                      std::int64_t now_ms) {
  if (!reply.error) return failure(Outcome::bad_response, "a single answer to a batch");
  auto c = reply_class(reply, retry_after, now_ms);
  if (c.cls == OutcomeClass::deterministic || c.cls == OutcomeClass::unknown)
    c = failure(Outcome::bad_response, "a single error answer to a batch: " + c.message);
  return c;
}

/// Each call's answer in a batch answer (or a single call's), by our ids.
void match_replies(Exchange& ex, UpstreamIds ids, std::int64_t now_ms, const Profile& profile,
                   std::span<const UpstreamCall> calls) {
  const std::size_t n = ids.count;
  const auto& h = ex.http;
  const auto& replies = ex.response->replies;
  bool any_ours = false;
  for (std::size_t i = 0; i < n; ++i) {
    const auto want = std::to_string(ids.first + i);
    for (const auto& r : replies) {
      if (!is_our_id(r.id, want)) continue;
      any_ours = true;
      if (ex.replies[i] != nullptr) {  // two answers for one call: neither can be trusted
        ex.replies[i] = nullptr;
        ex.per_call[i] = failure(Outcome::bad_response, "two answers for one call in the batch");
        break;
      }
      ex.replies[i] = &r;
    }
    if (ex.replies[i] != nullptr) {
      ex.per_call[i] = reply_class(*ex.replies[i], h.retry_after, now_ms);
      if (i < calls.size() && calls[i].method == "eth_blockNumber" && ex.replies[i]->result &&
          !jsonrpc::parse_quantity(*ex.replies[i]->result)) {
        // A head nobody can read must not pass for one (the client would get it verbatim).
        auto shown = std::string(ex.replies[i]->result->substr(0, 40));
        ex.per_call[i] = failure(
            Outcome::bad_response,
            fmt::format("eth_blockNumber answered {}, not a block number", profile.scrub(shown)));
      }
    } else if (ex.per_call[i].outcome == Outcome::bad_response) {
      continue;
    } else if (n == 1 && replies.size() == 1) {
      ex.per_call[i] = failure(Outcome::wrong_id,
                               fmt::format("answer has id {} instead of {}",
                                           replies[0].id.empty() ? "none" : replies[0].id, want));
    } else {
      ex.per_call[i] = failure(Outcome::bad_response, "no answer for this call in the batch");
    }
  }
  // A whole batch answered under other ids: the answer to another request, as for one call
  // (`call`'s chain id check makes a first request a batch: chain_check.cpp).
  if (!any_ours && n > 1 && replies.size() == n) {
    for (std::size_t i = 0; i < n; ++i) {
      ex.per_call[i] =
          failure(Outcome::wrong_id,
                  fmt::format("answer has id {} instead of {}",
                              replies[i].id.empty() ? "none" : replies[i].id, ids.first + i));
    }
  }
}

}  // namespace

Exchange classify_exchange(HttpResponse http, UpstreamIds ids, std::int64_t now_ms,
                           const Profile& profile, std::span<const UpstreamCall> calls) {
  const std::size_t n = ids.count;
  Exchange ex;
  ex.http = std::move(http);
  ex.http.body.reserve(ex.http.body.size() + 64);  // simdjson's padding: parse in place
  ex.per_call.resize(n);
  ex.replies.assign(n, nullptr);
  auto all = [&](const Classification& c) { std::fill(ex.per_call.begin(), ex.per_call.end(), c); };
  const auto& h = ex.http;

  if (h.error != TransportError::none) {
    all(classify_transport(h.error, profile.scrub(h.error_message)));
  } else if (h.status < 200 || h.status > 299) {
    all(classify_http_status(h.status, h.body, h.retry_after, now_ms));
  } else if (auto resp = jsonrpc::parse_response(h.body, ex.http.body.capacity()); !resp) {
    all(failure(Outcome::bad_response, resp.error()));
  } else {
    ex.response = std::move(*resp);
    const auto& replies = ex.response->replies;
    if (!ex.response->batch && n > 1) {
      // One answer for a whole batch: the provider refused the batch as such.
      all(single_answer_to_batch(replies.front(), h.retry_after, now_ms));
    } else if (ex.response->batch && n == 1) {
      // A single call is sent as an object: a batch back answers something else.
      all(failure(Outcome::bad_response, "a batch answer to a single call"));
    } else {
      match_replies(ex, ids, now_ms, profile, calls);
    }
  }

  // Every message quotes the provider (its error, its status body, an id it sent): scrubbed of
  // secrets, then escaped and cut, once, before anything prints or stores it.
  for (auto& c : ex.per_call) {
    if (!c.message.empty()) c.message = report_text(profile.scrub(std::move(c.message)));
  }

  ex.overall.cls =
      overall_class(std::span<const Classification>(ex.per_call.data(), ex.per_call.size()));
  for (const auto& c : ex.per_call) {
    if (c.cls == ex.overall.cls) {
      ex.overall = c;
      break;
    }
  }
  return ex;
}

bool connection_suspect(const Exchange& ex) {
  return std::any_of(ex.per_call.begin(), ex.per_call.end(), [](const Classification& c) {
    return c.outcome == Outcome::wrong_id || c.outcome == Outcome::bad_response;
  });
}

std::uint64_t max_response_bytes(std::span<const UpstreamCall> calls, const Provider& provider,
                                 const Profile& profile) {
  const std::uint64_t base = provider.limits.max_response_bytes.value_or(kDefaultMaxResponseBytes);
  std::uint64_t cap = 0;
  for (const auto& c : calls)
    cap = std::max(cap, profile.policy_for(c.method).max_response_bytes.value_or(base));
  return cap == 0 ? base : cap;
}

asio::awaitable<Exchange> send_exchange(Transport& transport, const Provider& provider,
                                        std::span<const UpstreamCall> calls,
                                        std::int64_t timeout_ms, const Clock& clock,
                                        const Profile& profile) {
  // A named request: g++ 12 destroys temporaries inside a co_await expression twice.
  const UpstreamIds ids = reserve_upstream_ids(calls.size());
  HttpRequest request{provider.url, upstream_body(calls, ids), &provider.headers, timeout_ms,
                      max_response_bytes(calls, provider, profile)};
  request.tls = &provider.tls;
  request.http = provider.http;
  HttpResponse http = co_await transport.perform(std::move(request));
  Exchange ex = classify_exchange(std::move(http), ids, clock.now_ms(), profile, calls);
  if (connection_suspect(ex)) transport.close_connection(ex.http.connection);
  co_return ex;
}

void record_exchange(HealthSink& sink, const HealthConfig& health, std::string_view key,
                     std::span<const UpstreamCall> calls, const Exchange& ex, std::int64_t now_ms,
                     double jitter, RecordOptions options) {
  AttemptEvent attempt;
  attempt.key.assign(key);
  attempt.t_ms = now_ms;
  attempt.cls = ex.overall.cls;
  attempt.reason = std::string(outcome_name(ex.overall.outcome));
  attempt.retry_after_ms = ex.overall.retry_after_ms;
  attempt.jitter = jitter;
  attempt.trip = options.timeout_trips && attempt.cls == OutcomeClass::provider_failure &&
                 trips_at_once(ex.overall.outcome);
  attempt.trial = options.trial;
  attempt.ws = options.transport == TransportKind::ws;
  sink.record(std::move(attempt), health);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    sink.record(SampleEvent{std::string(key), sample_method(calls[i].method, options.transport),
                            Sample{now_ms, ex.http.latency_us, ex.per_call[i].outcome}},
                health);
  }
}

}  // namespace rpcroute
