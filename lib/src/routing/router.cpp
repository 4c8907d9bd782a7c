#include "rpcroute/router.hpp"

#include <algorithm>
#include <climits>

#include <boost/container/small_vector.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include "rpcroute/blocks.hpp"
#include "rpcroute/exchange.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/methods.hpp"

namespace rpcroute {

namespace {

std::optional<std::string> json_string_value(std::string_view raw) {
  if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return std::nullopt;
  return std::string(raw.substr(1, raw.size() - 2));
}

/// Answers that say the node has no state for the block asked: it is not archival.
bool says_missing_state(std::string_view message) {
  std::string m(message);
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  for (std::string_view needle : {"missing trie node", "state not available", "historical state", "state is not available",
                                  "state histories haven't been fully indexed", "pruned"}) {
    if (m.find(needle) != std::string::npos) return true;
  }
  return false;
}

/// A broadcast transaction that another provider already has is not an error.
bool says_already_known(std::string_view message) {
  std::string m(message);
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  for (std::string_view needle : {"already known", "known transaction", "already imported", "already exists",
                                  "alreadyknown", "already in the pool", "already have"}) {
    if (m.find(needle) != std::string::npos) return true;
  }
  return false;
}

/// The "number" of a block object (the answer to eth_getBlockByNumber("latest")).
std::optional<std::uint64_t> block_number_of(std::string_view block_json) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(block_json.data(), block_json.size(), true).get(root)) return std::nullopt;
  simdjson::dom::element number;
  if (root.at_key("number").get(number)) return std::nullopt;
  std::string_view s;
  if (number.get_string().get(s)) return std::nullopt;
  return jsonrpc::parse_quantity(fmt::format("\"{}\"", s));
}

}  // namespace

struct Router::Item {
  std::size_t index = 0;
  const jsonrpc::Call* call = nullptr;
  Plan plan;
  std::size_t next = 0;
  bool unknown_spent = false;
  std::optional<std::string> held_error;  // a JSON-RPC error answer to return if nobody does better
  std::string held_provider;
  double held_latency_ms = 0;
  bool done = false;
  bool keep_result = true;  // RouteOptions::keep_result
  CallOutcome out;
};

Classification Router::scrubbed(const Classification& c) const {
  // A provider may echo the URL (and its key) in an error message: our report never repeats it.
  Classification out = c;
  if (!profile_.secrets.empty() || !profile_.url_paths.empty()) out.message = profile_.scrub(std::move(out.message));
  return out;
}

Router::Router(const Profile& profile, Engine& engine, StateStore& store, const Clock& clock, Random& rng)
    : profile_(profile), engine_(engine), store_(store), clock_(clock), rng_(rng),
      planner_(profile, store, clock, rng, traffic_) {}

Plan Router::plan(const Chain& chain, std::string_view method, std::string_view params, const RouteOptions& options) {
  return planner_.plan(chain, method, params, options);
}

void Router::finish_unavailable(Item& item, const Chain& chain, std::string_view why) {
  auto& out = item.out;
  item.done = true;
  out.status = CallOutcome::Status::unavailable;
  out.unavailable_reason = why;
  std::int64_t retry = -1;
  for (const auto& e : out.excluded) {
    if (e.retry_in_ms > 0) retry = retry < 0 ? e.retry_in_ms : std::min(retry, e.retry_in_ms);
  }
  if (retry < 0) {
    for (const auto& a : out.attempts) {
      if (a.result.cls == OutcomeClass::rate_limited && a.result.retry_after_ms >= 0) {
        retry = retry < 0 ? a.result.retry_after_ms : std::min(retry, a.result.retry_after_ms);
      }
    }
  }
  out.retry_after_ms = retry;
  json::Writer data;
  data.begin_object();
  data.key("attempts");
  data.begin_array();
  for (const auto& a : out.attempts) {
    data.begin_object();
    data.key("provider");
    data.value(a.provider);
    data.key("outcome");
    data.value(outcome_name(a.result.outcome));
    data.key("class");
    data.value(class_name(a.result.cls));
    data.key("http_status");
    data.value(static_cast<std::int64_t>(a.http_status));
    data.key("latency_ms");
    data.value(a.latency_ms);
    data.key("message");
    data.value(a.result.message);
    data.end_object();
  }
  data.end_array();
  data.key("excluded");
  data.begin_array();
  for (const auto& e : out.excluded) {
    data.begin_object();
    data.key("provider");
    data.value(e.provider);
    data.key("kind");
    data.value(exclusion_kind_name(e.kind));
    data.key("reason");
    data.value(e.reason);
    data.end_object();
  }
  data.end_array();
  if (retry >= 0) {
    data.key("retry_after_ms");
    data.value(retry);
  }
  data.end_object();
  auto message = fmt::format("no provider could serve {} on {}: {}", item.call->method, chain.name, why);
  out.error = jsonrpc::error_object(jsonrpc::kNoProvider, message, data.str());
  out.response = item.call->has_id() ? jsonrpc::make_error(item.call->id, jsonrpc::kNoProvider, message, data.str())
                                     : std::string();
}

void Router::on_success(const Chain& chain, const Candidate& cand, Item& item, std::int64_t now,
                        std::string_view result) {
  const auto& call = *item.call;
  auto& out = item.out;
  const std::string& ckey = planner_.chain_key_for(chain);
  if (call.method == "eth_blockNumber") {
    if (auto h = jsonrpc::parse_quantity(result)) {
      observe_height(store_, profile_, chain, *cand.provider, Height{*h, now}, rng_.uniform(), cand.key);
      // Never backwards: an answer below the high-water mark is raised to it while the mark is
      // fresh and the providers still reach it. A mark nobody has confirmed for a whole horizon, or
      // that the providers' head no longer supports (a restarted or reset chain: every provider
      // went back; a lone liar's height), is gone and the lower answer resets it at once.
      auto& chains = store_.state().chains;
      auto it = chains.find(ckey);
      const bool has_mark = it != chains.end() && it->second.high_water.t_ms > 0;
      if (has_mark && *h < it->second.high_water.block && height_fresh(it->second.high_water, now, chain) &&
          mark_supported(store_.state(), profile_, chain, it->second.high_water, now)) {
        out.raised_from = *h;
        out.result = jsonrpc::to_quantity(it->second.high_water.block);
      } else {
        store_.record(HighWaterEvent{ckey, Height{*h, now}, has_mark && *h < it->second.high_water.block},
                      profile_.health);
      }
    }
  } else if (call.method == "eth_getBlockByNumber" && item.plan.need.block &&
             item.plan.need.block->kind == BlockRef::Kind::latest) {
    if (auto h = block_number_of(result)) {
      observe_height(store_, profile_, chain, *cand.provider, Height{*h, now}, rng_.uniform(), cand.key);
      // Only a height the head rule believes may raise the mark.
      if (mark_supported(store_.state(), profile_, chain, Height{*h, now}, now)) {
        store_.record(HighWaterEvent{ckey, Height{*h, now}, false}, profile_.health);
      }
    }
  } else if (method_info(call.method).filter == FilterRole::creates) {
    if (auto id = json_string_value(result)) {
      store_.record(FilterEvent{filter_key(profile_.name, chain, *id), FilterPin{cand.provider->id, now}},
                    profile_.health);
    }
  }
  if (item.plan.needs_archive && !cand.provider->archival) {
    store_.record(ArchivalEvent{std::string(cand.key), ArchivalSeen{true, now}}, profile_.health);
  }
  if (!item.plan.sticky.empty()) {
    traffic_.sticky.stick(chain.name, item.plan.sticky, cand.provider->id, now);
    if (method_info(call.method).replay_unsafe) {
      if (auto hash = json_string_value(result)) {
        traffic_.sticky.stick(chain.name, StickyKey{StickyKey::Kind::transaction, *hash}, cand.provider->id, now);
      }
    }
  }
}

struct Router::Broadcast {
  explicit Broadcast(const asio::any_io_executor& ex) : wake(ex, asio::steady_timer::time_point::max()) {}
  asio::steady_timer wake;
  std::size_t pending = 0;
  bool winner = false;
  std::string result;
  std::string provider;
  double latency_ms = 0;
  std::optional<std::string> error;  // the answer that was an error, returned if nobody succeeds
  bool error_known = false;          // it says "already known"
  std::string error_provider;
  double error_latency_ms = 0;
  std::vector<AttemptRecord> attempts;
};


asio::awaitable<void> Router::route_broadcast(const Chain& chain, Item& item, std::int64_t deadline_us) {
  auto ex = co_await asio::this_coro::executor;
  auto b = std::make_shared<Broadcast>(ex);
  const auto& call = *item.call;
  b->pending = item.plan.candidates.size();
  for (const auto& cand : item.plan.candidates) {
    ++background_;
    asio::co_spawn(ex, broadcast_send(b, &chain, cand, call.method, call.params, deadline_us), asio::detached);
  }
  if (!b->winner && b->pending > 0) {
    boost::system::error_code ec;
    co_await b->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  auto& out = item.out;
  out.broadcast = true;
  out.attempts = b->attempts;
  item.done = true;
  if (b->winner) {
    out.status = CallOutcome::Status::result;
    out.result = b->result;
    out.provider = b->provider;
    out.upstream_latency_ms = b->latency_ms;
    out.response = call.has_id() ? jsonrpc::make_result(call.id, out.result) : std::string();
    co_return;
  }
  if (b->error) {
    out.status = CallOutcome::Status::rpc_error;
    out.provider = b->error_provider;
    out.upstream_latency_ms = b->error_latency_ms;
    out.error = *b->error;
    out.response = call.has_id() ? fmt::format(R"({{"jsonrpc":"2.0","id":{},"error":{}}})", call.id, out.error)
                                 : std::string();
    co_return;
  }
  finish_unavailable(item, chain, "the broadcast reached no provider");
}

asio::awaitable<void> Router::broadcast_send(std::shared_ptr<Broadcast> b, const Chain* chain, Candidate cand,
                                             std::string method, std::string params, std::int64_t deadline_us) {
  const Provider& provider = *cand.provider;
  const auto policy = profile_.policy_for(method);
  const auto remaining_ms = std::max<std::int64_t>(1, (deadline_us - steady_us()) / 1000);
  const auto timeout = std::min(attempt_timeout_ms(method, provider, policy), remaining_ms);
  const UpstreamCall one{method, params};
  const std::vector<UpstreamCall> upstream{one};
  if (provider.rate_limit) {
    store_.record(QuotaEvent{std::string(cand.key), clock_.now_ms(), 1.0, *provider.rate_limit}, profile_.health);
  }
  Exchange ex = co_await send_exchange(engine_, provider, upstream, timeout, clock_, profile_);
  const auto now = clock_.now_ms();
  record_exchange(store_, profile_.health, cand.key, upstream, ex, now, rng_.uniform(),
                  {.trial = cand.breaker == BreakerState::open});
  const auto& c = ex.per_call[0];
  const jsonrpc::Reply* reply = ex.replies[0];
  const double latency_ms = ex.latency_ms();
  b->attempts.push_back({provider.id, scrubbed(c), ex.http.status, latency_ms});
  if (c.cls == OutcomeClass::success && !b->winner) {
    b->winner = true;
    b->result = *reply->result;
    b->provider = provider.id;
    b->latency_ms = latency_ms;
    b->wake.cancel();
  } else if (reply != nullptr && reply->error &&
             (c.cls == OutcomeClass::deterministic || c.cls == OutcomeClass::unknown)) {
    // "already known" from one provider while another accepted the transaction is not an error.
    // When nobody accepted it, "already known" (it is in a pool) is returned before any other
    // error, then the first error that came.
    const bool known = says_already_known(reply->error->message);
    if (!b->error || (known && !b->error_known)) {
      b->error = jsonrpc::error_object(reply->error->code, reply->error->message, reply->error->data);
      b->error_known = known;
      b->error_provider = provider.id;
      b->error_latency_ms = latency_ms;
    }
  }
  (void)chain;
  if (--b->pending == 0) b->wake.cancel();
  if (--background_ == 0 && drained_) drained_->cancel();
}

asio::awaitable<void> Router::drain() {
  while (background_ > 0) {
    drained_.emplace(co_await asio::this_coro::executor, asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await drained_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  drained_.reset();
}

asio::awaitable<std::vector<CallOutcome>> Router::route(const Chain& chain, std::span<const jsonrpc::Call> calls,
                                                       RouteOptions options) {
  std::vector<CallOutcome> outs(calls.size());
  std::vector<Item> items;
  items.reserve(calls.size());
  const int max_attempts = options.max_attempts.value_or(profile_.routing.max_attempts.value_or(INT_MAX));
  const std::string& ckey = planner_.chain_key_for(chain);

  // The overall deadline: --timeout, else the profile's, stretched for methods whose attempts may
  // take longer (debug_*, trace_*).
  std::int64_t timeout_ms = profile_.routing.timeout_ms;
  for (const auto& call : calls) {
    if (call.valid()) timeout_ms = std::max(timeout_ms, default_method_timeout_ms(call.method));
  }
  if (options.timeout_ms) timeout_ms = *options.timeout_ms;
  const auto deadline_us = steady_us() + timeout_ms * 1000;

  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& call = calls[i];
    auto& o = outs[i];
    if (!call.valid()) {
      o.status = CallOutcome::Status::invalid;
      auto message = fmt::format("invalid request: {}", call.invalid_reason);
      o.error = jsonrpc::error_object(jsonrpc::kInvalidRequest, message);
      o.response = jsonrpc::make_error(call.reply_id(), jsonrpc::kInvalidRequest, message);
      continue;
    }
    if (call.method == "eth_chainId") {
      o.status = CallOutcome::Status::local;
      o.result = jsonrpc::to_quantity(chain.chain_id);
      o.response = call.has_id() ? jsonrpc::make_result(call.id, o.result) : std::string();
      o.strategy = options.strategy.value_or(profile_.routing.default_strategy);
      continue;
    }
    // Built in place: `items` was reserved for every call, so references to it stay valid.
    Item& item = items.emplace_back();
    item.index = i;
    item.call = &call;
    item.keep_result = options.keep_result;
    item.plan = plan(chain, call.method, call.params, options);
    // Every provider is over its quota: wait for the first token when it comes within the deadline,
    // rather than fail a script that calls in a tight loop.
    for (;;) {
      if (!item.plan.candidates.empty()) break;
      std::int64_t wait = -1;
      bool only_quota = true;
      for (const auto& e : item.plan.excluded) {
        if (e.kind == ExclusionKind::quota) {
          wait = wait < 0 ? e.retry_in_ms : std::min(wait, e.retry_in_ms);
        } else if (e.kind != ExclusionKind::caller && e.kind != ExclusionKind::policy &&
                   e.kind != ExclusionKind::method) {
          only_quota = false;
        }
      }
      if (wait < 0 || !only_quota || steady_us() + wait * 1000 >= deadline_us) break;
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(wait));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      item.plan = plan(chain, call.method, call.params, options);
    }
    item.out.strategy = item.plan.strategy;
    item.out.excluded = item.plan.excluded;
    if (item.plan.strategy == Strategy::round_robin) store_.record(CursorEvent{ckey, 1}, profile_.health);
    if (item.plan.candidates.empty()) {
      finish_unavailable(item, chain, "no eligible provider");
    } else if (item.plan.policy.broadcast) {
      co_await route_broadcast(chain, item, deadline_us);
    }
  }

  for (;;) {
    if (options.cancel != nullptr && options.cancel->requested()) {
      for (auto& it : items) {
        if (!it.done) finish_unavailable(it, chain, "cancelled: the client left");
      }
      break;
    }
    Item* leader = nullptr;
    for (auto& it : items) {
      if (!it.done) {
        leader = &it;
        break;
      }
    }
    if (leader == nullptr) break;
    const Candidate cand = leader->plan.candidates[leader->next];
    const Provider& provider = *cand.provider;
    const ProviderState* ps = nullptr;
    if (auto it = store_.state().providers.find(cand.key); it != store_.state().providers.end()) ps = &it->second;

    // Calls bound for the same provider go in one batch, up to its max_batch (one call at a time
    // when probe found it does not answer batches); the rest go in the next rounds.
    std::size_t cap = provider.limits.max_batch.value_or(SIZE_MAX);
    if (ps != nullptr && ps->probe.batch == false) cap = 1;
    boost::container::small_vector<Item*, 4> group;  // no allocation for the usual single call
    for (auto& it : items) {
      if (group.size() >= cap) break;
      if (!it.done && it.plan.candidates[it.next].key == cand.key) group.push_back(&it);
    }

    const auto remaining_ms = (deadline_us - steady_us()) / 1000;
    if (remaining_ms <= 0) {
      for (auto* it : group) finish_unavailable(*it, chain, fmt::format("deadline of {} ms exceeded", timeout_ms));
      continue;
    }
    const std::int64_t full_timeout = attempt_timeout_ms(leader->call->method, provider, leader->plan.policy);
    const std::int64_t attempt_timeout = std::min<std::int64_t>(full_timeout, remaining_ms);

    boost::container::small_vector<UpstreamCall, 4> upstream;
    upstream.reserve(group.size());
    for (auto* it : group) upstream.push_back({it->call->method, it->call->params});

    if (provider.rate_limit) {
      store_.record(QuotaEvent{std::string(cand.key), clock_.now_ms(), static_cast<double>(group.size()), *provider.rate_limit},
                    profile_.health);
    }
    const bool trial = cand.breaker != BreakerState::closed;
    if (trial) ++traffic_.half_open_trials[std::string(cand.key)];
    const auto started_ms = clock_.now_ms();
    traffic_.attempts.start(&provider, leader->call->method, started_ms);
    const std::span<const UpstreamCall> upstream_calls(upstream.data(), upstream.size());
    // send_exchange's steps, in this frame: a coroutine level less per attempt. Named locals: g++ 12
    // destroys temporaries inside a co_await expression twice.
    const UpstreamIds ids = reserve_upstream_ids(upstream_calls.size());
    HttpRequest request{provider.url, upstream_body(upstream_calls, ids), &provider.headers, attempt_timeout,
                        max_response_bytes(upstream_calls, provider, profile_)};
    request.cancel = options.cancel;
    HttpResponse answer = co_await engine_.perform(std::move(request));
    // Abandoned, not failed: nothing is learned or held against the provider (the loop's top ends
    // the calls).
    if (answer.error == TransportError::cancelled) {
      if (trial) --traffic_.half_open_trials[std::string(cand.key)];
      continue;
    }
    Exchange ex = classify_exchange(std::move(answer), ids, clock_.now_ms(), profile_, upstream_calls);
    if (connection_suspect(ex)) engine_.close_connection(ex.http.connection);
    refuse_doubtful_heads(store_, profile_, chain, provider, cand.key, upstream_calls, ex, clock_.now_ms());
    if (trial) --traffic_.half_open_trials[std::string(cand.key)];
    traffic_.attempts.finish(&provider, started_ms);
    const auto now = clock_.now_ms();
    record_exchange(store_, profile_.health, cand.key, upstream_calls, ex, now, rng_.uniform(),
                    {.trial = cand.breaker == BreakerState::open, .timeout_trips = attempt_timeout == full_timeout});
    const auto& http = ex.http;
    const auto& per_item = ex.per_call;
    const auto& replies = ex.replies;

    const double latency_ms = static_cast<double>(http.latency_us) / 1000.0;
    for (std::size_t g = 0; g < group.size(); ++g) {
      Item& item = *group[g];
      const auto& c = per_item[g];
      const auto& call = *item.call;
      item.out.attempts.push_back({provider.id, scrubbed(c), http.status, latency_ms});
      const jsonrpc::Reply* reply = replies[g];
      auto answer_error = [&](const jsonrpc::Reply& r) {
        return jsonrpc::error_object(r.error->code, r.error->message, r.error->data);
      };
      auto finish_with_error = [&](std::string error_obj, const std::string& who, double lat) {
        item.done = true;
        item.out.status = CallOutcome::Status::rpc_error;
        item.out.provider = who;
        item.out.upstream_latency_ms = lat;
        item.out.response = call.has_id() ? fmt::format(R"({{"jsonrpc":"2.0","id":{},"error":{}}})", call.id, error_obj)
                                          : std::string();
        item.out.error = std::move(error_obj);
      };

      if (c.cls == OutcomeClass::success) {
        item.done = true;
        auto& out = item.out;
        out.status = CallOutcome::Status::result;
        out.provider = provider.id;
        out.upstream_latency_ms = latency_ms;
        const std::string_view result = *reply->result;  // into the answer's buffer
        on_success(chain, cand, item, now, result);
        // A large result is handed on without a copy: moved out of the answer's buffer (call),
        // or made the client's response in that buffer (the sidecar, which needs only that).
        const bool alone = group.size() == 1;
        if (out.raised_from) {  // the answer was raised to the high-water mark: out.result holds it
          if (call.has_id()) out.response = jsonrpc::make_result(call.id, out.result);
        } else if (item.keep_result) {
          out.result = alone ? take_part(ex, result) : std::string(result);
          if (call.has_id()) out.response = jsonrpc::make_result(call.id, out.result);
        } else if (call.has_id()) {
          out.response = alone ? take_as_response(ex, result, call.id) : jsonrpc::make_result(call.id, result);
        }
        continue;
      }
      if (c.cls == OutcomeClass::deterministic) {
        finish_with_error(answer_error(*reply), provider.id, latency_ms);
        continue;
      }
      if (c.cls == OutcomeClass::capability && reply != nullptr && reply->error && item.plan.needs_archive &&
          !provider.archival && says_missing_state(reply->error->message)) {
        store_.record(ArchivalEvent{std::string(cand.key), ArchivalSeen{false, now}}, profile_.health);
      }
      if (reply != nullptr && reply->error && (c.cls == OutcomeClass::capability || c.cls == OutcomeClass::unknown)) {
        item.held_error = answer_error(*reply);
        item.held_provider = provider.id;
        item.held_latency_ms = latency_ms;
      }
      bool more = item.next + 1 < item.plan.candidates.size() &&
                  static_cast<int>(item.out.attempts.size()) < max_attempts;
      if (c.cls == OutcomeClass::unknown) {
        if (item.unknown_spent || !more) {
          finish_with_error(*item.held_error, item.held_provider, item.held_latency_ms);
          continue;
        }
        item.unknown_spent = true;
      }
      if (method_info(call.method).replay_unsafe && !c.never_sent() && c.cls != OutcomeClass::capability) {
        if (item.held_error) {  // the node answered: its word, not ours
          finish_with_error(*item.held_error, item.held_provider, item.held_latency_ms);
          continue;
        }
        finish_unavailable(item, chain,
                           fmt::format("not retried elsewhere: the transaction may have reached {} ({})", provider.id,
                                       outcome_name(c.outcome)));
        continue;
      }
      if (!more) {
        if (item.held_error) {
          finish_with_error(*item.held_error, item.held_provider, item.held_latency_ms);
        } else {
          finish_unavailable(item, chain,
                             item.next + 1 < item.plan.candidates.size() ? "attempt limit reached" : "every candidate failed");
        }
        continue;
      }
      ++item.next;
    }
  }

  for (auto& item : items) outs[item.index] = std::move(item.out);
  co_return outs;
}

}  // namespace rpcroute
