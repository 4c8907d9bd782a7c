// The JSON-RPC job of the handlers: a body parsed for the router, and the router's outcomes turned
// into the reply with its X-Rpcroute-* headers.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>

#include "handlers.hpp"
#include "rpcroute/json.hpp"

namespace rpcroute::sidecar {

namespace http = boost::beast::http;
using namespace std::string_view_literals;

bool Handlers::prepare_rpc(const std::string& body, const Route& route, Reply& reply, RpcJob& job,
                           bool no_cache, std::string_view min_block) {
  if (!find_chain(route.target, reply, job)) return false;
  auto parsed = config_.plain_json ? jsonrpc::parse_body(body, body.capacity())
                                   : jsonrpc::detail::parse_full_body(body, body.capacity());
  if (!parsed) {
    reply.body = jsonrpc::make_error("null", parsed.error().code, parsed.error().message);
    return false;
  }
  job.parsed = std::move(*parsed);
  // A batch over --max-batch: its first items are routed and each of the others gets its own
  // error, so a client that matches answers by id fails only those calls (JSON-RPC 2.0 answers a
  // valid batch with an array, never with one error).
  job.routed = std::min(job.parsed.calls.size(), config_.max_batch);
  RouteOptions& options = job.options;
  options = RouteOptions{};
  options.strategy = route.target.strategy ? route.target.strategy : config_.strategy;
  options.provider = route.target.provider;
  options.keep_result = false;  // only responses are written: large results become them in place
  // Issue 18: a single request may go over a provider's WebSocket, as its `transport:` says.
  options.websocket = !job.parsed.batch;
  if (!min_block.empty()) {  // issue 19: served only by a provider known at or past the block
    const bool hex = min_block.starts_with("0x") || min_block.starts_with("0X");
    const char* first = min_block.data() + (hex ? 2 : 0);
    const char* last = min_block.data() + min_block.size();
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(first, last, n, hex ? 16 : 10);
    if (ec != std::errc() || end != last || first == last) {
      reply.status = http::status::bad_request;
      reply.body = json_error_body("bad X-Rpcroute-Min-Block (a block number: 123 or 0x7b)");
      return false;
    }
    options.min_block = n;
    no_cache = true;  // the cache does not know which provider's height its answer came from
  }
  next_request_id(job);
  job.started_us = config_.dashboard ? steady_us() : 0;
  job.cache_header = "MISS";
  job.shared = job.keep = false;
  if (!job.parsed.batch && job.routed == 1 && consult_cache(no_cache, route.target, job, reply))
    return false;  // answered from the cache
  return true;
}

bool Handlers::find_chain(const RpcTarget& target, Reply& reply, RpcJob& job) {
  const std::shared_ptr<ProfileRuntime>& rt = runtime(target.profile);
  if (!rt) {
    reply.status = http::status::not_found;
    reply.body = json_error_body(fmt::format("unknown profile '{}'", target.profile));
    return false;
  }
  const Chain* chain =
      target.chain.empty() ? &rt->profile.chains.front() : rt->profile.find_chain(target.chain);
  if (chain == nullptr) {
    json::Writer names;
    names.begin_array();
    for (const auto& c : rt->profile.chains) names.value(c.name);
    names.end_array();
    reply.status = http::status::not_found;
    reply.body = json_error_body(
        fmt::format("unknown chain '{}' in profile '{}'", target.chain, rt->profile.name), "chains",
        names.str());
    return false;
  }
  if (target.provider && chain->find_provider(*target.provider) == nullptr) {
    reply.status = http::status::not_found;
    reply.body = json_error_body(
        fmt::format("unknown provider '{}' on chain {}", *target.provider, chain->name));
    return false;
  }
  if (job.rt != rt) job.rt = rt;  // a connection's requests keep their profile: no count to touch
  job.chain = chain;
  return true;
}

void Handlers::next_request_id(RpcJob& job) {
  // {:08x}{:08x} of the prefix and the counter, without fmt or an allocation.
  char* const text = job.request_id_text;
  if (request_prefix_ > 0xffffffffULL || request_counter_ + 1 > 0xffffffffULL) {
    const auto r = fmt::format_to_n(text, sizeof job.request_id_text, "{:08x}{:08x}",
                                    request_prefix_, ++request_counter_);
    job.request_id = std::string_view(text, std::min(r.size, sizeof job.request_id_text));
    return;
  }
  // Two hex digits per step from a table.
  static constexpr auto kHexPairs = [] {
    std::array<char, 512> t{};
    constexpr char hex[] = "0123456789abcdef";
    for (int b = 0; b < 256; ++b) {
      t[2 * static_cast<std::size_t>(b)] = hex[b >> 4];
      t[2 * static_cast<std::size_t>(b) + 1] = hex[b & 0xf];
    }
    return t;
  }();
  std::uint64_t v = (static_cast<std::uint64_t>(request_prefix_ & 0xffffffffULL) << 32) |
                    (static_cast<std::uint64_t>(++request_counter_) & 0xffffffffULL);
  for (int i = 7; i >= 0; --i, v >>= 8) std::memcpy(text + 2 * i, &kHexPairs[2 * (v & 0xff)], 2);
  job.request_id = std::string_view(text, 16);
}

namespace {

/// What the outcomes of one request add up to, for the status and the headers.
struct Tally {
  std::string providers;  // comma-separated, each once
  double latency = 0;     // the slowest call's
  std::size_t attempts = 0;
  std::size_t unavailable = 0;
  std::size_t routed = 0;  // calls that reached the routing (not invalid, not answered locally)
  std::int64_t retry_after = -1;
  Strategy strategy = Strategy::load_balanced;
  std::string hedges;       // the hedged calls' winners, comma-separated ("hedge", "first,neither")
  std::uint64_t block = 0;  // the lowest height of the providers that answered (0: none known)
  std::int64_t empty_retries = 0;  // nulls from providers behind, asked again (issue 19)
  bool ws = false;                 // an answer came over a provider's WebSocket (issue 18)
};

void count(Tally& t, const CallOutcome& o) {
  t.attempts += o.attempts.size();
  t.empty_retries += o.empty_retries;
  t.latency = std::max(t.latency, o.upstream_latency_ms);
  if (o.provider_height > 0)
    t.block = t.block == 0 ? o.provider_height : std::min(t.block, o.provider_height);
  if (o.hedge != CallOutcome::Hedge::none) {
    if (!t.hedges.empty()) t.hedges += ',';
    t.hedges += hedge_name(o.hedge);
  }
  if (!o.provider.empty() && o.transport == TransportKind::ws) t.ws = true;
  if (!o.provider.empty() && t.providers.find(o.provider) == std::string::npos) {
    t.providers += t.providers.empty() ? o.provider : "," + o.provider;
  }
  if (o.status != CallOutcome::Status::invalid && o.status != CallOutcome::Status::local)
    ++t.routed;
  if (o.status == CallOutcome::Status::unavailable) {
    ++t.unavailable;
    if (o.retry_after_ms >= 0)
      t.retry_after =
          t.retry_after < 0 ? o.retry_after_ms : std::min(t.retry_after, o.retry_after_ms);
  }
}

/// Milliseconds with 3 decimals at `p`. Latencies are whole microseconds, so integer arithmetic
/// writes what to_chars(fixed, 3) would, at a fraction of its cost; anything else (never seen)
/// takes to_chars, and any double in fixed notation fits the 400 bytes reserved for it.
char* put_latency(char* p, double latency) {
  if (const double us = latency * 1000.0; latency >= 0 && latency < 1e12 && us == std::floor(us)) {
    const auto whole = static_cast<std::uint64_t>(us);
    p = std::to_chars(p, p + 24, whole / 1000).ptr;
    const auto frac = static_cast<unsigned>(whole % 1000);
    *p++ = '.';
    *p++ = static_cast<char>('0' + frac / 100);
    *p++ = static_cast<char>('0' + frac / 10 % 10);
    *p++ = static_cast<char>('0' + frac % 10);
    return p;
  }
  return std::to_chars(p, p + 400, latency, std::chars_format::fixed, 3).ptr;
}

/// The six X-Rpcroute headers of every RPC answer, written through a cursor in one append.
void put_rpcroute_headers(std::string& lines, const Tally& t, std::string_view request_id,
                          std::string_view cache) {
  const std::string_view provider_list =
      t.providers.empty() ? "-"sv : std::string_view(t.providers);
  const std::string_view strategy_text = strategy_name(t.strategy);
  const auto at = lines.size();
  lines.resize(at + 600 + provider_list.size() + strategy_text.size() + request_id.size() +
               t.hedges.size());  // fixed parts < 250
  char* p = lines.data() + at;
  auto put = [&p](std::string_view piece) {
    std::memcpy(p, piece.data(), piece.size());
    p += piece.size();
  };
  put("X-Rpcroute-Provider: "sv);
  put(provider_list);
  put("\r\nX-Rpcroute-Upstream-Latency: "sv);
  p = put_latency(p, t.latency);
  put("\r\nX-Rpcroute-Attempts: "sv);
  p = std::to_chars(p, p + 24, t.attempts).ptr;
  put("\r\nX-Rpcroute-Strategy: "sv);
  put(strategy_text);
  put("\r\nX-Rpcroute-Cache: "sv);
  put(cache);
  put("\r\nX-Rpcroute-Request-Id: "sv);
  put(request_id);
  put("\r\n"sv);
  if (t.block > 0) {  // issue 19: the serving provider's known height
    put("X-Rpcroute-Block: "sv);
    p = std::to_chars(p, p + 24, t.block).ptr;
    put("\r\n"sv);
  }
  if (t.empty_retries > 0) {  // issue 19: a null from a provider behind was asked again
    put("X-Rpcroute-Empty-Retries: "sv);
    p = std::to_chars(p, p + 24, t.empty_retries).ptr;
    put("\r\n"sv);
  }
  if (t.ws) put("X-Rpcroute-Transport: ws\r\n"sv);  // issue 18: absent, HTTP
  if (!t.hedges.empty()) {  // issue 19: a hedge fired, and which attempt answered
    put("X-Rpcroute-Hedge: "sv);
    put(t.hedges);
    put("\r\n"sv);
  }
  lines.resize(static_cast<std::size_t>(p - lines.data()));
}

}  // namespace

void Handlers::finish_rpc(RpcJob& job, std::vector<CallOutcome>& outs, Reply& reply) {
  Tally tally;
  if (!outs.empty()) tally.strategy = outs.front().strategy;
  if (job.keep && outs.size() == 1) keep_answer(job, outs.front());
  ChainActivity& activity =
      job.rt->activity[static_cast<std::size_t>(job.chain - job.rt->profile.chains.data())];
  for (std::size_t i = 0; i < outs.size(); ++i) {
    metrics_.on_call(job.rt->profile.name, job.chain->name, job.parsed.calls[i].method, outs[i]);
    count(tally, outs[i]);
    activity.on_hedge(outs[i].hedge);
  }
  if (config_.dashboard) record_decisions(job, outs);
  write_rpc_body(job, outs, reply);
  if (reply.body.empty()) reply.status = http::status::no_content;  // notifications only
  if (tally.routed > 0 && tally.unavailable == tally.routed) {
    reply.status = http::status::service_unavailable;
    if (tally.retry_after >= 0)
      reply.header("Retry-After", std::to_string((tally.retry_after + 999) / 1000));
  }
  if (config_.verbose) reply.provider = tally.providers;
  reply.attempts = tally.attempts;
  put_rpcroute_headers(reply.header_lines, tally, job.request_id, job.cache_header);
}

void Handlers::finish_hit(const RpcJob& job, const std::string& result, Reply& reply) {
  const std::string_view id = job.parsed.calls.front().id;
  std::string& body = reply.body;
  body.reserve(jsonrpc::kResultHead.size() + id.size() + jsonrpc::kResultMiddle.size() +
               result.size() + 1);
  body.append(jsonrpc::kResultHead).append(id).append(jsonrpc::kResultMiddle).append(result);
  body.push_back('}');
  if (config_.verbose) {
    reply.rpc_method = job.parsed.calls.front().method;
    reply.provider = "cache";
  }
  Tally tally;
  tally.strategy = job.options.strategy.value_or(job.rt->profile.routing.default_strategy);
  put_rpcroute_headers(reply.header_lines, tally, job.request_id, "HIT");
}

void Handlers::record_decisions(const RpcJob& job, const std::vector<CallOutcome>& outs) {
  // One slot per call in the dashboard's ring (no allocation); invalid calls were never routed.
  const double total_ms = static_cast<double>(steady_us() - job.started_us) / 1000.0;
  const auto now = clock_.now_ms();
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].status == CallOutcome::Status::invalid) continue;
    dashboard_.record(job.rt->profile.name, job.chain->name, job.parsed.calls[i].method, outs[i],
                      now, total_ms);
  }
}

void Handlers::write_rpc_body(const RpcJob& job, std::vector<CallOutcome>& outs, Reply& reply) {
  const jsonrpc::Body& parsed = job.parsed;
  if (!parsed.batch) {
    reply.body = std::move(outs.front().response);
    if (config_.verbose) reply.rpc_method = parsed.calls.front().method;
    return;
  }
  std::string body = "[";
  for (const auto& o : outs) {
    if (o.response.empty()) continue;
    if (body.size() > 1) body.push_back(',');
    body += o.response;
  }
  const auto& calls = parsed.calls;
  for (std::size_t i = outs.size(); i < calls.size(); ++i) {
    if (!calls[i].has_id() && calls[i].valid()) continue;  // a notification: no answer
    if (body.size() > 1) body.push_back(',');
    body += jsonrpc::make_error(
        calls[i].reply_id(), jsonrpc::kInvalidRequest,
        fmt::format("invalid request: item {} of a batch of {} is beyond the limit of {} "
                    "(--max-batch)",
                    i + 1, calls.size(), config_.max_batch));
  }
  body.push_back(']');
  reply.body = body.size() > 2 ? std::move(body) : std::string();
}

}  // namespace rpcroute::sidecar
