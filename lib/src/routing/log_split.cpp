#include "rpcroute/log_split.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <regex>

#include "rpcroute/json.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

namespace log_split_detail {

std::string lowered(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

/// "2,000" → 2000, "2k" → 2000, "10000" → 10000; nullopt for 0 or absurd figures.
std::optional<std::uint64_t> figure(const std::string& text) {
  std::uint64_t n = 0;
  bool any = false;
  for (char c : text) {
    if (c == ',' || c == '_') continue;
    if (c == 'k') {
      n *= 1000;
      break;
    }
    if (c < '0' || c > '9') break;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
    any = true;
    if (n > 1'000'000'000) return std::nullopt;
  }
  if (!any || n == 0) return std::nullopt;
  return n;
}

std::optional<std::uint64_t> first_match(const std::string& m, const std::vector<std::regex>& res) {
  for (const auto& re : res) {
    std::smatch match;
    if (std::regex_search(m, match, re)) {
      if (auto n = figure(match[1].str())) return n;
    }
  }
  return std::nullopt;
}

#define RPCROUTE_NUM "([0-9][0-9,_]*k?)"

const std::vector<std::regex>& block_limit_patterns() {
  static const std::vector<std::regex> res = [] {
    std::vector<std::regex> v;
    for (const char* p : {
             "up to a " RPCROUTE_NUM " block range",                      // Alchemy
             "limited to a " RPCROUTE_NUM " (?:blocks? )?range",          // QuickNode
             "max(?:imum)? (?:block )?range(?: is)?:? " RPCROUTE_NUM,     // Cloudflare, BSC
             "max(?:imum)? block range (?:of |is |= )?" RPCROUTE_NUM,     // reth, erigon, Morph
             "range [0-9,]+ exceeds (?:the )?limit of " RPCROUTE_NUM,     // Infura
             "exceeds server limit, narrow your filter:? " RPCROUTE_NUM,  // Erigon
             "range (?:is )?too (?:large|wide|big)[^0-9]*(?:max(?:imum)?|limit)(?: "
             "is)?:? " RPCROUTE_NUM,
             "limit of " RPCROUTE_NUM " blocks",                                       // BlastAPI
             "ranges? (?:over|above|exceeding|greater than) " RPCROUTE_NUM " blocks",  // PublicNode
             "exceeds? (?:the )?(?:limit of )?" RPCROUTE_NUM " blocks",
             "block range (?:limit|size) (?:is |of )?" RPCROUTE_NUM,  // Chainstack, Ankr
             "at most " RPCROUTE_NUM " blocks",
         }) {
      v.emplace_back(p, std::regex::ECMAScript | std::regex::optimize);
    }
    return v;
  }();
  return res;
}

const std::vector<std::regex>& result_limit_patterns() {
  static const std::vector<std::regex> res = [] {
    std::vector<std::regex> v;
    for (const char* p : {
             "more than " RPCROUTE_NUM " (?:results|logs)",  // geth, Infura
             "max(?:imum)? results:? " RPCROUTE_NUM,         // reth
             "cap of " RPCROUTE_NUM " logs",                 // Alchemy
             "limited to " RPCROUTE_NUM " (?:results|logs)",
             "too many logs, narrow your filter:? " RPCROUTE_NUM,  // Erigon
         }) {
      v.emplace_back(p, std::regex::ECMAScript | std::regex::optimize);
    }
    return v;
  }();
  return res;
}

#undef RPCROUTE_NUM

}  // namespace log_split_detail

LogRangeError read_log_range_error(std::string_view message) {
  namespace d = log_split_detail;
  const std::string m = d::lowered(message.substr(0, 2048));
  LogRangeError out;
  // Not about the size, though worded with a range: a bad or unreachable range (geth, Nethermind
  // and dRPC say so for fromBlock after toBlock or past the node's head). Halving does not help.
  if (m.find("invalid block range") != std::string::npos) return out;
  // Size words first: a message that says none of them is not about the request's size.
  for (std::string_view needle : {"block range",
                                  "blocks range",
                                  "range too large",
                                  "range is too large",
                                  "range too wide",
                                  "range is too wide",
                                  "too many blocks",
                                  "max range",
                                  "maximum range",
                                  "query returned more",
                                  "more than",
                                  "max results",
                                  "response size exceeded",
                                  "log response size",
                                  "too many logs",
                                  "too many results",
                                  "is limited to",
                                  "ranges over",
                                  "exceed maximum block range",
                                  "exceeds max block range",
                                  "range exceeds",
                                  "exceeds the range",
                                  "too wide",
                                  "result set too large",
                                  "response is too big",
                                  "query exceeds max",
                                  "block range too",
                                  "exceeds server limit"}) {
    if (m.find(needle) != std::string::npos) {
      out.too_large = true;
      break;
    }
  }
  // Infura: "range 1000000 exceeds limit of 10000" (a bare "exceeds limit of" may be a rate).
  if (!out.too_large && m.find("range") != std::string::npos &&
      m.find("exceeds limit of") != std::string::npos)
    out.too_large = true;
  if (!out.too_large) return out;
  out.block_limit = d::first_match(m, d::block_limit_patterns());
  out.result_limit = d::first_match(m, d::result_limit_patterns());
  // "more than 10000 results" alone is a result limit, not a range: a bare "10000 range" figure is
  // read as blocks only when no result wording claims it.
  if (out.result_limit && out.block_limit == out.result_limit &&
      m.find("block") == std::string::npos)
    out.block_limit.reset();
  return out;
}

std::optional<std::uint64_t> log_range_limit(const Provider& provider, const ProviderState* state) {
  std::optional<std::uint64_t> limit = provider.limits.max_block_range;
  if (state != nullptr && state->log_limit.blocks > 0)
    limit = std::min(limit.value_or(state->log_limit.blocks), state->log_limit.blocks);
  return limit;
}

std::vector<BlockSpan> split_span(BlockSpan span, std::uint64_t chunk) {
  chunk = std::max<std::uint64_t>(chunk, 1);
  std::vector<BlockSpan> parts;
  if (span.to < span.from) return {span};
  parts.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(span.blocks() / chunk + 1, 1024)));
  for (std::uint64_t from = span.from;;) {
    const std::uint64_t to = span.to - from + 1 <= chunk ? span.to : from + chunk - 1;
    parts.push_back({from, to});
    if (to == span.to) break;
    from = to + 1;
  }
  return parts;
}

std::optional<std::string> logs_params_for(std::string_view params, BlockSpan span) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(params.data(), params.size()).get(root) != simdjson::SUCCESS)
    return std::nullopt;
  simdjson::dom::array arr;
  if (root.get_array().get(arr) != simdjson::SUCCESS || arr.size() != 1) return std::nullopt;
  simdjson::dom::object filter;
  if (arr.at(0).get_object().get(filter) != simdjson::SUCCESS) return std::nullopt;
  json::Writer w;
  w.begin_array();
  w.begin_object();
  for (auto field : filter) {
    if (field.key == "fromBlock" || field.key == "toBlock") continue;
    w.key(field.key);
    w.raw(simdjson::minify(field.value));
  }
  w.key("fromBlock");
  w.value(fmt::format("0x{:x}", span.from));
  w.key("toBlock");
  w.value(fmt::format("0x{:x}", span.to));
  w.end_object();
  w.end_array();
  return w.take();
}

bool append_log_array(std::string& merged, std::string_view array) {
  auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!array.empty() && is_space(array.front())) array.remove_prefix(1);
  while (!array.empty() && is_space(array.back())) array.remove_suffix(1);
  if (array.size() < 2 || array.front() != '[' || array.back() != ']') return false;
  array = array.substr(1, array.size() - 2);
  while (!array.empty() && is_space(array.front())) array.remove_prefix(1);
  while (!array.empty() && is_space(array.back())) array.remove_suffix(1);
  if (array.empty()) return true;
  if (!merged.empty()) merged.push_back(',');
  merged.append(array);
  return true;
}

}  // namespace rpcroute

// ---- The router's side: route_logs() -------------------------------------------------------

namespace rpcroute {

namespace log_split_detail {

struct ErrorParts {
  std::int64_t code = jsonrpc::kInternalError;
  std::string message;
  std::string data;  // raw JSON, empty when absent
};

ErrorParts error_parts(std::string_view object) {
  ErrorParts out;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(object.data(), object.size()).get(root) != simdjson::SUCCESS) return out;
  std::int64_t code = 0;
  if (root["code"].get_int64().get(code) == simdjson::SUCCESS) out.code = code;
  std::string_view message;
  if (root["message"].get_string().get(message) == simdjson::SUCCESS) out.message = message;
  simdjson::dom::element data;
  if (root["data"].get(data) == simdjson::SUCCESS) out.data = simdjson::minify(data);
  return out;
}

std::optional<std::uint64_t> resolve(const BlockRef& ref, std::uint64_t head) {
  switch (ref.kind) {
    case BlockRef::Kind::number:
      return ref.number;
    case BlockRef::Kind::earliest:
      return 0;
    case BlockRef::Kind::latest:
    case BlockRef::Kind::pending:
      if (head == 0) return std::nullopt;
      return head;
    default:
      return std::nullopt;  // safe/finalized/hash: not split
  }
}

bool needs_head(const BlockRef& ref) {
  return ref.kind == BlockRef::Kind::latest || ref.kind == BlockRef::Kind::pending;
}

constexpr std::size_t kMaxLogAttempts = 64;  // attempt records kept for the merged answer
/// A part that fails this close to the split's deadline ran out of the deadline's time.
constexpr std::int64_t kDeadlineMarginUs = 25'000;

}  // namespace log_split_detail

struct Router::LogJob {
  LogJob(const Chain& c, const jsonrpc::Call& k, RouteOptions o)
      : chain(c), call(k), options(std::move(o)) {}
  const Chain& chain;
  const jsonrpc::Call& call;
  RouteOptions options;  // keep_result on: the parts' results are merged
  std::size_t bytes = 0;
  std::size_t requests = 0;
  std::optional<CallOutcome> failure;
  std::vector<std::string> providers;  // who answered parts, first seen first
  std::vector<AttemptRecord> attempts;
  std::vector<Exclusion> excluded;
  double latency_ms = 0;
  std::uint64_t height = 0;  // the lowest provider height among the parts' answers
  // One deadline for the whole call, parts and head lookups included (not one per part).
  std::int64_t timeout_ms = 0;
  std::int64_t deadline_us = 0;  // on the clock's monotonic time
  std::size_t parts_done = 0;
};

std::optional<RouteOptions> Router::part_options(LogJob& job) const {
  const std::int64_t left_ms = (job.deadline_us - clock_.mono_us()) / 1000;
  if (left_ms <= 0) {
    fail_logs_deadline(job);
    return std::nullopt;
  }
  RouteOptions o = job.options;
  o.timeout_ms = left_ms;
  return o;
}

void Router::fail_logs_deadline(LogJob& job) const {
  if (job.failure) return;
  CallOutcome out;
  out.status = CallOutcome::Status::unavailable;
  out.unavailable_reason =
      fmt::format("the split range did not finish within the deadline of {} ms ({} parts answered)",
                  job.timeout_ms, job.parts_done);
  const auto message = fmt::format("no provider could serve eth_getLogs on {}: {}", job.chain.name,
                                   out.unavailable_reason);
  out.error = jsonrpc::error_object(jsonrpc::kNoProvider, message);
  if (job.call.has_id())
    out.response = jsonrpc::make_error(job.call.id, jsonrpc::kNoProvider, message);
  out.attempts = job.attempts;
  out.excluded = job.excluded;
  job.failure = std::move(out);
}

asio::awaitable<std::vector<CallOutcome>> Router::route_with_logs(
    const Chain& chain, std::span<const jsonrpc::Call> calls, RouteOptions options) {
  std::vector<CallOutcome> outs(calls.size());
  std::vector<jsonrpc::Call> others;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].valid() && calls[i].method == "eth_getLogs") {
      outs[i] = co_await route_logs(chain, calls[i], options);
    } else {
      others.push_back(calls[i]);
      where.push_back(i);
    }
  }
  if (!others.empty()) {
    auto rest = co_await executor_.route(chain, others, std::move(options));
    for (std::size_t k = 0; k < rest.size(); ++k) outs[where[k]] = std::move(rest[k]);
  }
  co_return outs;
}

asio::awaitable<std::optional<std::uint64_t>> Router::known_head(LogJob& job) {
  auto options = part_options(job);  // within the job's deadline
  if (!options) co_return std::nullopt;
  const std::vector<jsonrpc::Call> ask{{"1", "eth_blockNumber", "[]", ""}};
  auto outs = co_await executor_.route(job.chain, ask, *options);
  if (outs.empty() || outs[0].status != CallOutcome::Status::result) co_return std::nullopt;
  co_return jsonrpc::parse_quantity(outs[0].result);
}

void Router::fail_logs(LogJob& job, std::int64_t code, const std::string& message) {
  if (job.failure) return;
  CallOutcome out;
  out.status = CallOutcome::Status::rpc_error;
  out.error = jsonrpc::error_object(code, message);
  if (job.call.has_id()) out.response = jsonrpc::make_error(job.call.id, code, message);
  out.attempts = job.attempts;
  out.excluded = job.excluded;
  job.failure = std::move(out);
}

asio::awaitable<void> Router::fetch_logs(LogJob& job, BlockSpan span, int depth,
                                         std::string& into) {
  namespace d = log_split_detail;
  if (job.failure) co_return;
  auto params = logs_params_for(job.call.params, span);
  if (!params) {
    fail_logs(job, jsonrpc::kInvalidParams, "eth_getLogs: the filter cannot be split");
    co_return;
  }
  if (++job.requests > kMaxLogParts) {
    fail_logs(job, -32005,
              fmt::format("eth_getLogs: more than {} parts needed for blocks {}-{}; narrow the "
                          "range or the filter",
                          kMaxLogParts, span.from, span.to));
    co_return;
  }
  auto options = part_options(job);
  if (!options) co_return;
  const std::vector<jsonrpc::Call> part{
      {job.call.has_id() ? job.call.id : std::string("1"), "eth_getLogs", std::move(*params), ""}};
  auto outs = co_await executor_.route(job.chain, part, *options);
  CallOutcome& out = outs[0];
  for (auto& a : out.attempts) {
    if (job.attempts.size() < d::kMaxLogAttempts) job.attempts.push_back(std::move(a));
  }
  if (out.status == CallOutcome::Status::result) {
    const std::size_t before = into.size();
    if (!append_log_array(into, out.result)) {
      fail_logs(job, jsonrpc::kInternalError,
                fmt::format("eth_getLogs blocks {}-{}: {} answered something other than an array",
                            span.from, span.to, out.provider));
      co_return;
    }
    job.bytes += into.size() - before;
    if (job.bytes > kDefaultMaxResponseBytes) {
      fail_logs(job, -32005,
                fmt::format("eth_getLogs: the merged answer passed {} MiB; narrow the range or "
                            "the filter",
                            kDefaultMaxResponseBytes >> 20));
      co_return;
    }
    ++job.parts_done;
    job.latency_ms = std::max(job.latency_ms, out.upstream_latency_ms);
    if (out.provider_height > 0)
      job.height =
          job.height == 0 ? out.provider_height : std::min(job.height, out.provider_height);
    if (std::find(job.providers.begin(), job.providers.end(), out.provider) == job.providers.end())
      job.providers.push_back(out.provider);
    co_return;
  }
  if (out.status == CallOutcome::Status::rpc_error) {
    const auto error = d::error_parts(out.error);
    const auto size = read_log_range_error(error.message);
    if (size.too_large && span.blocks() > 1 && depth < kMaxLogHalvings) {
      const std::uint64_t chunk = size.block_limit && *size.block_limit < span.blocks()
                                      ? *size.block_limit
                                      : (span.blocks() + 1) / 2;
      for (const auto& sub : split_span(span, chunk)) {
        co_await fetch_logs(job, sub, depth + 1, into);
        if (job.failure) co_return;
      }
      co_return;
    }
    fail_logs(job, error.code,
              fmt::format("eth_getLogs blocks {}-{} (part of a split range) failed at {}: {}",
                          span.from, span.to, out.provider, error.message));
    co_return;
  }
  // Out of time: the one deadline's error, not the part's (its timeout was what was left). The
  // margin: a part's timer (libcurl's own clock, whole milliseconds) may end a few ms before it.
  if (clock_.mono_us() + d::kDeadlineMarginUs >= job.deadline_us ||
      out.unavailable_reason.starts_with("deadline of")) {
    fail_logs_deadline(job);
    co_return;
  }
  // Unavailable (every candidate failed): the whole request is, with its details.
  if (!job.failure) {
    out.attempts = job.attempts;
    job.failure = std::move(out);
  }
}

asio::awaitable<void> Router::fetch_logs_parts(LogJob& job, std::vector<BlockSpan> parts,
                                               std::string& merged) {
  if (parts.size() > kMaxLogParts) {
    fail_logs(job, -32005,
              fmt::format("eth_getLogs: {} parts needed (more than {}); narrow the range or the "
                          "filter",
                          parts.size(), kMaxLogParts));
    co_return;
  }
  // Parts in flight: at most kLogSplitConcurrency workers, each taking the next part; results
  // land in their slots and are merged in block order once all are in.
  std::vector<std::string> results(parts.size());
  std::size_t next = 0;
  std::size_t live = std::min(kLogSplitConcurrency, parts.size());
  std::exception_ptr error;
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer done(ex, asio::steady_timer::time_point::max());
  auto worker = [&]() -> asio::awaitable<void> {
    while (next < parts.size() && !job.failure) {
      const std::size_t i = next++;
      co_await fetch_logs(job, parts[i], 0, results[i]);
    }
  };
  for (std::size_t k = live; k > 0; --k) {
    asio::co_spawn(ex, worker(), [&](const std::exception_ptr& e) {
      if (e && !error) error = e;
      if (--live == 0) done.cancel();
    });
  }
  while (live > 0) {
    boost::system::error_code ec;
    co_await done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (error) std::rethrow_exception(error);
  for (auto& r : results) {
    if (r.empty()) continue;
    if (!merged.empty()) merged.push_back(',');
    merged += r;
  }
}

// NOLINTNEXTLINE(readability-function-size): one decision list — whole, up front, or on error.
asio::awaitable<CallOutcome> Router::route_logs(const Chain& chain, const jsonrpc::Call& call,
                                                const RouteOptions& options) {
  namespace d = log_split_detail;
  const BlockNeed need = analyze_block_need("eth_getLogs", call.params);
  Plan plan = planner_.plan(chain, "eth_getLogs", call.params, options);
  // Up front: every provider that would take the call is out because of its range limit; parts
  // of the widest limit among them go to the providers that take that much.
  std::optional<std::uint64_t> chunk;
  if (plan.candidates.empty()) {
    for (const auto& e : plan.excluded) {
      if (e.kind != ExclusionKind::limit) continue;
      const Provider* p = chain.find_provider(e.provider);
      if (p == nullptr) continue;
      const auto limit = log_range_limit(*p, store_.provider(planner_.provider_key_for(chain, *p)));
      if (limit) chunk = std::max(chunk.value_or(0), *limit);
    }
  }
  LogJob job{chain, call, options};
  job.options.keep_result = true;
  job.excluded = plan.excluded;
  job.timeout_ms = options.timeout_ms.value_or(
      std::max(profile_.routing.timeout_ms, default_method_timeout_ms("eth_getLogs")));
  job.deadline_us = clock_.mono_us() + job.timeout_ms * 1000;

  std::optional<BlockSpan> span;
  auto resolve_span = [&](std::uint64_t head) -> std::optional<BlockSpan> {
    if (!need.from || !need.to) return std::nullopt;  // blockHash, or unreadable: never split
    auto from = d::resolve(*need.from, head);
    auto to = d::resolve(*need.to, head);
    if (!from || !to || *from > *to) return std::nullopt;
    return BlockSpan{*from, *to};
  };
  // Before a split the head is asked (one eth_blockNumber): tags resolve against it, and the span
  // stops there. A node answers a range past its head with the blocks it has (or an error for a
  // range that starts past it): parts past the head would only fail or add nothing.
  auto split_span_now = [&](std::optional<std::uint64_t> head) -> std::optional<BlockSpan> {
    auto s = resolve_span(head.value_or(plan.head));
    if (s && head && s->to > *head && s->from <= *head) s->to = *head;
    return s;
  };

  std::string merged;
  if (chunk && need.from && need.to) {
    span = split_span_now(co_await known_head(job));
    if (job.failure) co_return std::move(*job.failure);
  }
  if (chunk && span) {
    co_await fetch_logs_parts(job, split_span(*span, *chunk), merged);
  } else {
    // Whole, as the client wrote it; split only if the answer says it is too large.
    const std::vector<jsonrpc::Call> whole{call};
    // Its deadline is the job's (the executor computes the same); what is left after it goes to
    // the parts. Its result is the caller's as it is, so it is kept only if the caller wants it:
    // the sidecar's answer is then made in the provider's buffer, without a copy of what may be
    // the largest answer a provider sends.
    RouteOptions whole_options = job.options;
    whole_options.keep_result = options.keep_result;
    auto outs = co_await executor_.route(chain, whole, whole_options);
    CallOutcome out = std::move(outs[0]);
    if (out.status != CallOutcome::Status::rpc_error || !need.from || !need.to ||
        !read_log_range_error(d::error_parts(out.error).message).too_large) {
      co_return out;
    }
    span = split_span_now(co_await known_head(job));
    if (job.failure) co_return std::move(*job.failure);
    if (!span || span->blocks() < 2) co_return out;
    job.attempts = std::move(out.attempts);
    const auto stated = read_log_range_error(d::error_parts(out.error).message).block_limit;
    const std::uint64_t size =
        stated && *stated < span->blocks() ? *stated : (span->blocks() + 1) / 2;
    co_await fetch_logs_parts(job, split_span(*span, size), merged);
  }

  if (job.failure) co_return std::move(*job.failure);
  CallOutcome out;
  out.status = CallOutcome::Status::result;
  out.strategy = plan.strategy;
  out.attempts = std::move(job.attempts);
  out.excluded = std::move(job.excluded);
  out.upstream_latency_ms = job.latency_ms;
  out.provider_height = job.height;
  for (const auto& p : job.providers) {
    if (!out.provider.empty()) out.provider += ',';
    out.provider += p;
  }
  out.result.reserve(merged.size() + 2);
  out.result += '[';
  out.result += merged;
  out.result += ']';
  if (call.has_id()) out.response = jsonrpc::make_result(call.id, out.result);
  if (!options.keep_result) out.result.clear();
  co_return out;
}

}  // namespace rpcroute
