#include "rpcroute/executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "executor_parts.hpp"
#include "rpcroute/judge.hpp"
#include "rpcroute/log_split.hpp"
#include "rpcroute/methods.hpp"

namespace rpcroute {

namespace {

/// Why a call ends unavailable, in the words of the 503 details.
std::string give_up_reason(GiveUp why, std::string_view provider, Outcome outcome) {
  switch (why) {
    case GiveUp::maybe_sent:
      return fmt::format("not retried elsewhere: the transaction may have reached {} ({})",
                         provider, outcome_name(outcome));
    case GiveUp::attempt_limit:
      return "attempt limit reached";
    case GiveUp::exhausted:
    case GiveUp::none:
      break;
  }
  return "every candidate failed";
}

std::string answer_error(const jsonrpc::Reply& r) {
  return jsonrpc::error_object(r.error->code, r.error->message, r.error->data);
}

}  // namespace

Executor::Executor(const Profile& profile, Planner& planner, Transport& transport,
                   HealthStore& store, const Clock& clock, Random& rng, LocalTraffic& traffic)
    : profile_(profile),
      planner_(planner),
      transport_(transport),
      store_(store),
      clock_(clock),
      rng_(rng),
      traffic_(traffic),
      hedges_(profile_hedges(profile)) {}

asio::awaitable<std::vector<CallOutcome>> Executor::route(const Chain& chain,
                                                          std::span<const jsonrpc::Call> calls,
                                                          RouteOptions options) {
  // One coroutine for the whole request: the steps are plain functions, so that an attempt costs
  // no coroutine frame beyond the transport's.
  std::vector<CallOutcome> outs(calls.size());
  std::vector<Item> items;
  items.reserve(calls.size());
  // The overall deadline: --timeout, else the profile's, stretched for methods whose attempts may
  // take longer (debug_*, trace_*).
  std::int64_t timeout_ms = profile_.routing.timeout_ms;
  for (const auto& call : calls) {
    if (call.valid()) timeout_ms = std::max(timeout_ms, default_method_timeout_ms(call.method));
  }
  if (options.timeout_ms) timeout_ms = *options.timeout_ms;
  Run run{chain,
          options,
          options.max_attempts.value_or(profile_.routing.max_attempts.value_or(INT_MAX)),
          timeout_ms,
          clock_.mono_us() + timeout_ms * 1000,
          options.hedge.value_or(hedges_)};

  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& call = calls[i];
    if (answer_locally(run, call, outs[i])) continue;
    // Built in place: `items` was reserved for every call, so references to it stay valid.
    Item& item = items.emplace_back();
    item.index = i;
    item.call = &call;
    item.keep_result = options.keep_result;
    if (chain.rewrite_latest) rewrite_latest(chain, item);
    item.plan = planner_.plan(chain, call.method, item.call->params, options);
    // Every provider is over its quota: wait for the first token when it comes within the deadline,
    // rather than fail a script that calls in a tight loop.
    while (auto wait = quota_wait(item.plan, run.deadline_us)) {
      asio::steady_timer timer(co_await asio::this_coro::executor,
                               std::chrono::milliseconds(*wait));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      item.plan = planner_.plan(chain, call.method, item.call->params, options);
    }
    planned(run, item);
    if (!item.done && item.plan.policy.broadcast)
      co_await route_broadcast(chain, item, run.deadline_us);
  }

  Round round;
  while (next_round(run, items, round)) {
    if (round.group.empty()) continue;  // the deadline ended them
    if (options.verify_chain_id && !co_await check_chain(run, round)) continue;
    // Named locals: g++ 12 destroys temporaries inside a co_await expression twice.
    HttpRequest request = start_round(run, round);
    if (const HedgeConfig* hedge = hedge_for(run, round)) {
      co_await hedged_round(run, round, std::move(request), *hedge);
      continue;
    }
    HttpResponse answer = co_await transport_.perform(std::move(request));
    settle_round(run, round, std::move(answer));
  }

  for (auto& item : items) outs[item.index] = std::move(item.out);
  co_return outs;
}

bool Executor::answer_locally(const Run& run, const jsonrpc::Call& call, CallOutcome& o) const {
  if (!call.valid()) {
    o.status = CallOutcome::Status::invalid;
    auto message = fmt::format("invalid request: {}", call.invalid_reason);
    o.error = jsonrpc::error_object(jsonrpc::kInvalidRequest, message);
    o.response = jsonrpc::make_error(call.reply_id(), jsonrpc::kInvalidRequest, message);
    return true;
  }
  if (call.method == "eth_chainId" && !every_provider_elsewhere(run.chain)) {
    o.status = CallOutcome::Status::local;
    o.result = jsonrpc::to_quantity(run.chain.chain_id);
    o.response = call.has_id() ? jsonrpc::make_result(call.id, o.result) : std::string();
    o.strategy = run.options.strategy.value_or(profile_.routing.default_strategy);
    return true;
  }
  // Subscriptions live on a WebSocket (the sidecar's ws_session.cpp answers them there): over
  // HTTP, a provider would answer something vaguer, or nothing at all.
  if (call.method == "eth_subscribe" || call.method == "eth_unsubscribe") {
    o.status = CallOutcome::Status::local;
    const auto message = fmt::format(
        "{} needs a WebSocket: HTTP cannot carry subscription events; connect with ws:// to the "
        "same sidecar URL (rpcroute serve)",
        call.method);
    o.error = jsonrpc::error_object(jsonrpc::kMethodNotFound, message);
    o.response =
        call.has_id() ? jsonrpc::make_error(call.id, jsonrpc::kMethodNotFound, message) : "";
    o.strategy = run.options.strategy.value_or(profile_.routing.default_strategy);
    return true;
  }
  return false;
}

bool Executor::every_provider_elsewhere(const Chain& chain) const {
  // Only for eth_chainId: a lookup per provider, the keys built once by the planner.
  for (const auto& p : chain.providers) {
    const ProviderState* ps = store_.provider(planner_.provider_key_for(chain, p));
    if (ps == nullptr || ps->probe.chain_id == 0 || ps->probe.chain_id == chain.chain_id)
      return false;
  }
  return !chain.providers.empty();
}

std::optional<std::int64_t> Executor::quota_wait(const Plan& plan, std::int64_t deadline_us) const {
  if (!plan.candidates.empty()) return std::nullopt;
  std::int64_t wait = -1;
  for (const auto& e : plan.excluded) {
    if (e.kind == ExclusionKind::quota) {
      wait = wait < 0 ? e.retry_in_ms : std::min(wait, e.retry_in_ms);
    } else if (e.kind != ExclusionKind::caller && e.kind != ExclusionKind::policy &&
               e.kind != ExclusionKind::method) {
      return std::nullopt;  // something other than quotas stands in the way
    }
  }
  if (wait < 0 || clock_.mono_us() + wait * 1000 >= deadline_us) return std::nullopt;
  return wait;
}

void Executor::planned(const Run& run, Item& item) {
  item.out.strategy = item.plan.strategy;
  item.out.excluded = item.plan.excluded;
  if (item.plan.strategy == Strategy::round_robin) {
    store_.record(CursorEvent{planner_.chain_key_for(run.chain), 1}, profile_.health);
  }
  if (item.plan.candidates.empty()) finish_unavailable(item, run.chain, "no eligible provider");
}

bool Executor::next_round(Run& run, std::vector<Item>& items, Round& round) {
  round.group.clear();
  round.upstream.clear();
  if (run.options.cancel != nullptr && run.options.cancel->requested()) {
    for (auto& it : items) {
      if (!it.done) finish_unavailable(it, run.chain, "cancelled: the client left");
    }
    return false;
  }
  auto leader = std::find_if(items.begin(), items.end(), [](const Item& it) { return !it.done; });
  if (leader == items.end()) return false;
  round.leader = &*leader;
  round.cand = leader->plan.candidates[leader->next];
  const Provider& provider = *round.cand.provider;
  const ProviderState* ps = store_.provider(round.cand.key);

  // Calls bound for the same provider go in one batch, up to its max_batch (one call at a time
  // when probe found it does not answer batches); the rest go in the next rounds.
  std::size_t cap = provider.limits.max_batch.value_or(SIZE_MAX);
  if (ps != nullptr && ps->probe.batch == false) cap = 1;
  for (auto& it : items) {
    if (round.group.size() >= cap) break;
    if (!it.done && it.plan.candidates[it.next].key == round.cand.key) round.group.push_back(&it);
  }
  const auto remaining_ms = (run.deadline_us - clock_.mono_us()) / 1000;
  if (remaining_ms <= 0) {
    for (auto* it : round.group) {
      finish_unavailable(*it, run.chain, fmt::format("deadline of {} ms exceeded", run.timeout_ms));
    }
    round.group.clear();
    return true;
  }
  round.full_timeout = attempt_timeout_ms(leader->call->method, provider, leader->plan.policy);
  round.attempt_timeout = std::min<std::int64_t>(round.full_timeout, remaining_ms);
  return true;
}

HttpRequest Executor::start_round(const Run& run, Round& round) {
  const Provider& provider = *round.cand.provider;
  round.upstream.reserve(round.group.size());
  for (auto* it : round.group) round.upstream.push_back({it->call->method, it->call->params});
  if (round.chain_check) round.upstream.push_back({"eth_chainId", "[]"});
  if (provider.rate_limit) {
    store_.record(QuotaEvent{std::string(round.cand.key), clock_.now_ms(),
                             static_cast<double>(round.upstream.size()), *provider.rate_limit},
                  profile_.health);
  }
  round.trial = round.cand.breaker != BreakerState::closed;
  if (round.trial) ++traffic_.half_open_trials[std::string(round.cand.key)];
  round.started_ms = clock_.now_ms();
  traffic_.attempts.start(&provider, round.leader->call->method, round.started_ms);
  const std::span<const UpstreamCall> calls(round.upstream.data(), round.upstream.size());
  // send_exchange's steps, in route()'s frame: a coroutine level less per attempt.
  round.ids = reserve_upstream_ids(calls.size());
  round.transport = round.cand.transport == TransportKind::ws && calls.size() == 1
                        ? TransportKind::ws
                        : TransportKind::http;
  // The transport tells the two apart by the scheme (the sidecar's sends ws:// and wss:// to the
  // provider's socket, the upstream ids unique on it).
  HttpRequest request{round.transport == TransportKind::ws ? provider.ws_url : provider.url,
                      upstream_body(calls, round.ids), &provider.headers, round.attempt_timeout,
                      max_response_bytes(calls, provider, profile_)};
  request.cancel = run.options.cancel;
  request.tls = &provider.tls;
  request.http = provider.http;
  request.provider = &provider;
  return request;
}

void Executor::settle_round(const Run& run, Round& round, HttpResponse answer) {
  // Abandoned, not failed: nothing is learned or held against the provider (next_round ends the
  // calls).
  if (answer.error == TransportError::cancelled) {
    if (round.trial) --traffic_.half_open_trials[std::string(round.cand.key)];
    return;
  }
  Exchange ex = classify_round(run, round, std::move(answer));
  if (round.chain_check && !settle_chain_check(run, round, ex)) return;
  settle_exchange(run, round, ex, true);
}

Exchange Executor::classify_round(const Run& run, const Round& round, HttpResponse answer) {
  const std::span<const UpstreamCall> calls(round.upstream.data(), round.upstream.size());
  const auto now = clock_.now_ms();  // one clock read for both (each is a vDSO call)
  Exchange ex = classify_exchange(std::move(answer), round.ids, now, profile_, calls);
  if (connection_suspect(ex)) transport_.close_connection(ex.http.connection);
  refuse_doubtful_heads(store_, profile_, run.chain, *round.cand.provider, round.cand.key, calls,
                        ex, now);
  return ex;
}

void Executor::settle_exchange(const Run& run, Round& round, Exchange& ex, bool judge_calls) {
  const Provider& provider = *round.cand.provider;
  const std::string_view key = round.cand.key;
  // The chain id check's eth_chainId (last) is ours, not traffic: no latency sample of it.
  const std::span<const UpstreamCall> calls(round.upstream.data(),
                                            round.upstream.size() - (round.chain_check ? 1 : 0));
  if (round.trial) --traffic_.half_open_trials[std::string(key)];
  traffic_.attempts.finish(&provider, round.started_ms);
  const auto now = clock_.now_ms();
  record_exchange(store_, profile_.health, key, calls, ex, now, rng_.uniform(),
                  {.trial = round.cand.breaker == BreakerState::open,
                   .timeout_trips = round.attempt_timeout == round.full_timeout,
                   .transport = round.transport});
  const double latency_ms = ex.latency_ms();
  for (std::size_t g = 0; g < round.group.size(); ++g) {
    Item& item = *round.group[g];
    item.out.attempts.push_back(
        {provider.id, scrubbed(ex.per_call[g]), ex.http.status, latency_ms, round.transport});
    if (judge_calls) settle_item(run, round, ex, g, now);
  }
}

void Executor::forget_round(const Round& round) {
  if (round.trial) --traffic_.half_open_trials[std::string(round.cand.key)];
  traffic_.attempts.finish(round.cand.provider, round.started_ms);
}

void Executor::settle_item(const Run& run, const Round& round, Exchange& ex, std::size_t g,
                           std::int64_t now) {
  Item& item = *round.group[g];
  const Provider& provider = *round.cand.provider;
  const auto& c = ex.per_call[g];
  const jsonrpc::Reply* reply = ex.replies[g];
  const double latency_ms = ex.latency_ms();
  // A provider that states its eth_getLogs range limit: remembered, so that the next call splits
  // up front (log_split.cpp).
  if (reply != nullptr && reply->error && item.call->method == "eth_getLogs") {
    if (auto limit = read_log_range_error(reply->error->message).block_limit) {
      store_.record(LogLimitEvent{std::string(round.cand.key), LogLimit{*limit, now}},
                    profile_.health);
    }
  }
  const Decision d = judge(c,
                           {.replay_unsafe = method_info(item.call->method).replay_unsafe,
                            .max_attempts = run.max_attempts},
                           {.attempts = static_cast<int>(item.out.attempts.size()),
                            .candidate = item.next,
                            .candidates = item.plan.candidates.size(),
                            .unknown_spent = item.unknown_spent,
                            .holding_error = item.held_error.has_value(),
                            .answer_has_error = reply != nullptr && reply->error.has_value()});
  auto finish_with_error = [&](std::string error_obj, const std::string& who, double lat) {
    item.done = true;
    item.out.status = CallOutcome::Status::rpc_error;
    item.out.provider = who;
    item.out.upstream_latency_ms = lat;
    item.out.response = error_response(*item.call, error_obj);
    item.out.error = std::move(error_obj);
  };
  switch (d.action) {
    case Action::deliver:
      if (retry_not_yet(run, round, ex, g)) return;
      deliver(run, round, ex, g, now);
      return;
    case Action::return_error:
      finish_with_error(answer_error(*reply), provider.id, latency_ms);
      item.out.transport = round.transport;
      return;
    default:
      break;
  }
  if (c.cls == OutcomeClass::capability && reply != nullptr && reply->error &&
      item.plan.needs_archive && !provider.archival && says_missing_state(reply->error->message)) {
    store_.record(ArchivalEvent{std::string(round.cand.key), ArchivalSeen{false, now}},
                  profile_.health);
  }
  if (d.hold) {
    item.held_error = answer_error(*reply);
    item.held_provider = provider.id;
    item.held_latency_ms = latency_ms;
  }
  if (d.spend_unknown) item.unknown_spent = true;
  switch (d.action) {
    case Action::return_held:
      if (deliver_held_null(item)) return;  // the null, rather than an error after it
      finish_with_error(*item.held_error, item.held_provider, item.held_latency_ms);
      return;
    case Action::give_up:
      finish_unavailable(item, run.chain, give_up_reason(d.why, provider.id, c.outcome));
      return;
    default:
      ++item.next;
      return;
  }
}

void Executor::deliver(const Run& run, const Round& round, Exchange& ex, std::size_t g,
                       std::int64_t now) {
  Item& item = *round.group[g];
  const auto& call = *item.call;
  auto& out = item.out;
  item.done = true;
  out.status = CallOutcome::Status::result;
  out.provider = round.cand.provider->id;
  out.transport = round.transport;
  out.upstream_latency_ms = ex.latency_ms();
  const std::string_view result = *ex.replies[g]->result;  // into the answer's buffer
  on_success(run.chain, round.cand, item, now, result);
  if (const ProviderState* ps = store_.provider(round.cand.key))
    out.provider_height = ps->height.block;
  // A large result is handed on without a copy: moved out of the answer's buffer (call),
  // or made the client's response in that buffer (the sidecar, which needs only that).
  const bool alone = round.group.size() == 1;
  if (out.raised_from) {  // the answer was raised to the high-water mark: out.result holds it
    if (call.has_id()) out.response = jsonrpc::make_result(call.id, out.result);
  } else if (item.keep_result) {
    out.result = alone ? take_part(ex, result) : std::string(result);
    if (call.has_id()) out.response = jsonrpc::make_result(call.id, out.result);
  } else if (call.has_id()) {
    out.response =
        alone ? take_as_response(ex, result, call.id) : jsonrpc::make_result(call.id, result);
  }
}

}  // namespace rpcroute
