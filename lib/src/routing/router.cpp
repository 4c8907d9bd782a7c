#include "rpcroute/router.hpp"

#include <algorithm>
#include <climits>

#include <fmt/format.h>
#include <simdjson.h>

#include "rpcroute/exchange.hpp"
#include "rpcroute/json.hpp"

namespace rpcroute {

bool is_transaction_send(std::string_view method) {
  return method == "eth_sendRawTransaction" || method == "eth_sendTransaction";
}

namespace {

bool creates_filter(std::string_view m) {
  return m == "eth_newFilter" || m == "eth_newBlockFilter" || m == "eth_newPendingTransactionFilter";
}
bool uses_filter(std::string_view m) {
  return m == "eth_getFilterChanges" || m == "eth_getFilterLogs" || m == "eth_uninstallFilter";
}

/// The first element of a params array when it is a string ("0x1" for a filter id).
std::optional<std::string> first_string_param(std::string_view params) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(params.data(), params.size(), true).get(root)) return std::nullopt;
  simdjson::dom::array arr;
  if (root.get_array().get(arr) || arr.size() == 0) return std::nullopt;
  std::string_view s;
  if (arr.at(0).get_string().get(s)) return std::nullopt;
  return std::string(s);
}

std::optional<std::string> json_string_value(std::string_view raw) {
  if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return std::nullopt;
  return std::string(raw.substr(1, raw.size() - 2));
}

std::string seconds_text(std::int64_t ms) { return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0); }

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
  CallOutcome out;
};

Router::Router(const Profile& profile, Engine& engine, StateStore& store, const Clock& clock, Random& rng)
    : profile_(profile), engine_(engine), store_(store), clock_(clock), rng_(rng) {}

const std::string& Router::key_for(const Chain& chain, const Provider& provider) {
  auto it = keys_.find(&provider);
  if (it == keys_.end()) it = keys_.emplace(&provider, provider_key(profile_.name, chain.name, provider)).first;
  return it->second;
}

Plan Router::plan(const Chain& chain, std::string_view method, std::string_view params, const RouteOptions& options) {
  Plan plan;
  plan.policy = profile_.policy_for(method);
  plan.strategy = options.strategy.value_or(plan.policy.strategy.value_or(profile_.routing.default_strategy));
  const auto now = clock_.now_ms();
  const auto& state = store_.state();
  const auto window = plan.strategy == Strategy::latency_weighted ? profile_.strategies.latency_weighted.window_ms
                                                                  : profile_.strategies.fastest.window_ms;
  const auto& breaker_cfg = profile_.health.circuit_breaker;
  const bool needs_stats = options.with_stats || plan.strategy == Strategy::fastest ||
                           plan.strategy == Strategy::latency_weighted;

  std::optional<std::string> pinned;
  if (uses_filter(method)) {
    if (auto id = first_string_param(params)) {
      if (auto it = state.filters.find(filter_key(profile_.name, chain.name, *id)); it != state.filters.end()) {
        pinned = it->second.provider;
      }
    }
  }

  // Lag is judged on fresh heights only: an old observation says nothing about now.
  const auto fresh_ms = std::max<std::int64_t>(10'000, 3 * chain.block_time_ms);
  const auto ckey = chain_key(profile_.name, chain.name);
  std::uint64_t best_height = 0;
  if (auto it = state.chains.find(ckey); it != state.chains.end() && it->second.high_water.t_ms >= now - fresh_ms) {
    best_height = it->second.high_water.block;
  }
  for (const auto& p : chain.providers) {
    auto it = state.providers.find(key_for(chain, p));
    if (it == state.providers.end()) continue;
    const auto& ps = it->second;
    bool right_chain = ps.probe.chain_id == 0 || ps.probe.chain_id == chain.chain_id;
    if (right_chain && ps.height.t_ms >= now - fresh_ms) best_height = std::max(best_height, ps.height.block);
  }

  for (std::size_t i = 0; i < chain.providers.size(); ++i) {
    const Provider& p = chain.providers[i];
    auto exclude = [&](std::string reason, std::int64_t retry_in = 0) {
      plan.excluded.push_back({p.id, std::move(reason), retry_in});
    };
    if (options.provider && p.id != *options.provider) {
      exclude(fmt::format("not selected (only {} was requested)", *options.provider));
      continue;
    }
    if (!plan.policy.providers.empty() &&
        std::find(plan.policy.providers.begin(), plan.policy.providers.end(), p.id) == plan.policy.providers.end()) {
      exclude(fmt::format("the method policy for {} restricts it to other providers", method));
      continue;
    }
    if (pinned && *pinned != p.id) {
      exclude(fmt::format("the filter lives on {}", *pinned));
      continue;
    }
    if (!p.methods.permits(method)) {
      exclude(fmt::format("{} is denied by the provider's method list", method));
      continue;
    }
    Candidate c;
    c.provider = &p;
    c.position = i;
    c.key = key_for(chain, p);
    const ProviderState* ps = nullptr;
    if (auto it = state.providers.find(c.key); it != state.providers.end()) ps = &it->second;
    if (ps != nullptr) {
      if (ps->probe.chain_id != 0 && ps->probe.chain_id != chain.chain_id) {
        exclude(fmt::format("wrong chain id {} (the profile says {}), seen by probe {} ago", ps->probe.chain_id,
                            chain.chain_id, seconds_text(now - ps->probe.t_ms)));
        continue;
      }
      auto eff = ps->breaker.effective_state(now);
      if (eff == BreakerState::open) {
        auto retry = ps->breaker.retry_in_ms(now);
        exclude(fmt::format("circuit breaker open ({}); half-opens in {}", ps->breaker.reason.empty() ? "failures" : ps->breaker.reason,
                            seconds_text(retry)),
                retry);
        continue;
      }
      if (eff == BreakerState::half_open) {
        auto it = half_open_in_flight_.find(c.key);
        if (it != half_open_in_flight_.end() && it->second >= breaker_cfg.half_open_max_inflight) {
          exclude("circuit breaker half-open with its trial request in flight");
          continue;
        }
      }
      if (ps->height.t_ms >= now - fresh_ms && best_height > ps->height.block + chain.max_lag_blocks) {
        exclude(fmt::format("lagging {} blocks behind (height {}, best {}; max_lag_blocks {})",
                            best_height - ps->height.block, ps->height.block, best_height, chain.max_lag_blocks));
        continue;
      }
      c.breaker = eff;
      c.rate_limited_until_ms = ps->rate_limited_until_ms;
      c.tier = tier_of(eff, ps->rate_limited(now));
      if (needs_stats) {
        auto m = ps->methods.find(method);
        c.stats = summarize(m == ps->methods.end() ? nullptr : &m->second, now, window);
      }
    }
    plan.candidates.push_back(std::move(c));
  }

  RankInput in;
  in.strategy = plan.strategy;
  in.params = &profile_.strategies;
  in.rng = &rng_;
  if (auto it = state.chains.find(ckey); it != state.chains.end()) {
    in.rr_cursor = it->second.rr_cursor;
  }
  rank_candidates(plan.candidates, in);
  return plan;
}

void Router::finish_unavailable(Item& item, const Chain& chain, std::string_view why) {
  auto& out = item.out;
  item.done = true;
  out.status = CallOutcome::Status::unavailable;
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

asio::awaitable<std::vector<CallOutcome>> Router::route(const Chain& chain, std::span<const jsonrpc::Call> calls,
                                                       RouteOptions options) {
  std::vector<CallOutcome> outs(calls.size());
  std::vector<Item> items;
  items.reserve(calls.size());
  const auto timeout_ms = options.timeout_ms.value_or(profile_.routing.timeout_ms);
  const auto deadline_us = steady_us() + timeout_ms * 1000;
  const int max_attempts = options.max_attempts.value_or(profile_.routing.max_attempts.value_or(INT_MAX));
  const auto ckey = chain_key(profile_.name, chain.name);

  std::vector<std::size_t> item_of(calls.size(), SIZE_MAX);
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
    Item item;
    item.index = i;
    item.call = &call;
    item.plan = plan(chain, call.method, call.params, options);
    item.out.strategy = item.plan.strategy;
    item.out.excluded = item.plan.excluded;
    if (item.plan.strategy == Strategy::round_robin) store_.record(CursorEvent{ckey, 1}, profile_.health);
    if (item.plan.candidates.empty()) finish_unavailable(item, chain, "no eligible provider");
    item_of[i] = items.size();
    items.push_back(std::move(item));
  }

  for (;;) {
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
    std::vector<Item*> group;
    for (auto& it : items) {
      if (!it.done && it.plan.candidates[it.next].key == cand.key) group.push_back(&it);
    }

    const auto remaining_ms = (deadline_us - steady_us()) / 1000;
    if (remaining_ms <= 0) {
      for (auto* it : group) finish_unavailable(*it, chain, fmt::format("deadline of {} ms exceeded", timeout_ms));
      continue;
    }
    std::int64_t attempt_timeout = std::min<std::int64_t>(provider.timeout_ms, remaining_ms);
    if (leader->plan.policy.timeout_ms) attempt_timeout = std::min(attempt_timeout, *leader->plan.policy.timeout_ms);

    std::vector<UpstreamCall> upstream;
    upstream.reserve(group.size());
    for (auto* it : group) upstream.push_back({it->call->method, it->call->params});

    const bool trial = cand.breaker == BreakerState::half_open;
    if (trial) ++half_open_in_flight_[cand.key];
    Exchange ex = co_await send_exchange(engine_, provider, upstream, attempt_timeout, clock_, profile_);
    if (trial) --half_open_in_flight_[cand.key];
    const auto now = clock_.now_ms();
    record_exchange(store_, profile_.health, cand.key, upstream, ex, now, rng_.uniform());
    const auto& http = ex.http;
    const auto& per_item = ex.per_call;
    const auto& replies = ex.replies;

    const double latency_ms = static_cast<double>(http.latency_us) / 1000.0;
    for (std::size_t g = 0; g < group.size(); ++g) {
      Item& item = *group[g];
      const auto& c = per_item[g];
      const auto& call = *item.call;
      item.out.attempts.push_back({provider.id, c, http.status, latency_ms});
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
        item.out.status = CallOutcome::Status::result;
        item.out.result = group.size() == 1 ? take_part(ex, *reply->result) : std::string(*reply->result);
        item.out.provider = provider.id;
        item.out.upstream_latency_ms = latency_ms;
        item.out.response = call.has_id() ? jsonrpc::make_result(call.id, item.out.result) : std::string();
        if (call.method == "eth_blockNumber") {
          if (auto h = jsonrpc::parse_quantity(item.out.result)) {
            store_.record(HeightEvent{cand.key, Height{*h, now}}, profile_.health);
            store_.record(HighWaterEvent{ckey, Height{*h, now}}, profile_.health);
          }
        } else if (creates_filter(call.method)) {
          if (auto id = json_string_value(item.out.result)) {
            store_.record(FilterEvent{filter_key(profile_.name, chain.name, *id), FilterPin{provider.id, now}},
                          profile_.health);
          }
        }
        continue;
      }
      if (c.cls == OutcomeClass::deterministic) {
        finish_with_error(answer_error(*reply), provider.id, latency_ms);
        continue;
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
      if (is_transaction_send(call.method) && !c.never_sent() && c.cls != OutcomeClass::capability) {
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
