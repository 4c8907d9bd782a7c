#include "rpcroute/router.hpp"

#include <algorithm>
#include <climits>

#include <boost/container/small_vector.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include "rpcroute/blocks.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/methods.hpp"

namespace rpcroute {

namespace {

/// The first element of a params array when it is a string ("0x1" for a filter id).
std::optional<std::string> first_string_param(std::string_view params) {
  thread_local simdjson::dom::parser parser;
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

/// Whether a provider serves old state: the profile decides when it says; otherwise the newest of
/// what probe found and what answers showed. nullopt: unknown (treated as able).
std::optional<bool> archival_of(const Provider& p, const ProviderState* ps) {
  if (p.archival) return p.archival;
  if (ps == nullptr) return std::nullopt;
  if (ps->archival_seen.archival && ps->archival_seen.t_ms >= ps->probe.t_ms) return ps->archival_seen.archival;
  return ps->probe.archival;
}

std::string_view archival_source(const Provider& p, const ProviderState* ps) {
  if (p.archival) return "the profile says archival: false";
  if (ps != nullptr && ps->archival_seen.archival && ps->archival_seen.t_ms >= ps->probe.t_ms) {
    return "an answer showed missing state";
  }
  return "probe found no state at block 1";
}

}  // namespace

std::string_view exclusion_kind_name(ExclusionKind k) {
  switch (k) {
    case ExclusionKind::caller: return "caller";
    case ExclusionKind::policy: return "policy";
    case ExclusionKind::filter: return "filter";
    case ExclusionKind::method: return "method";
    case ExclusionKind::chain_id: return "chain_id";
    case ExclusionKind::breaker: return "breaker";
    case ExclusionKind::half_open: return "half_open";
    case ExclusionKind::lag: return "lag";
    case ExclusionKind::archive: return "archive";
    case ExclusionKind::height: return "height";
    case ExclusionKind::limit: return "limit";
    case ExclusionKind::quota: return "quota";
    case ExclusionKind::quarantine: return "quarantine";
  }
  return "?";
}

void AttemptsInFlight::start(const Provider* p, std::string_view method, std::int64_t t_ms) {
  by_provider_[p].push_back({method, t_ms});
}

void AttemptsInFlight::finish(const Provider* p, std::int64_t start_ms) {
  auto it = by_provider_.find(p);
  if (it == by_provider_.end()) return;
  auto& v = it->second;
  auto a = std::find_if(v.begin(), v.end(), [&](const Attempt& x) { return x.start_ms == start_ms; });
  if (a != v.end()) v.erase(a);
}

const AttemptsInFlight::Attempt* AttemptsInFlight::oldest(const Provider* p) const {
  auto it = by_provider_.find(p);
  if (it == by_provider_.end() || it->second.empty()) return nullptr;
  return &*std::min_element(it->second.begin(), it->second.end(),
                            [](const Attempt& a, const Attempt& b) { return a.start_ms < b.start_ms; });
}

namespace {
// Ten times the median, never under 250 ms (a local node answers in a millisecond, and a busy
// machine pauses longer than that); 1 s when the provider has no latency data yet.
constexpr std::int64_t kStallFloorMs = 250;
constexpr std::int64_t kStallColdMs = 1'000;
}  // namespace

bool attempt_stalled(std::int64_t age_ms, double p50_ms) {
  if (age_ms < kStallFloorMs) return false;
  if (p50_ms <= 0) return age_ms >= kStallColdMs;
  return static_cast<double>(age_ms) >= 10.0 * p50_ms;
}

bool Router::stalled(const Provider& p, const ProviderState* ps, std::int64_t now) const {
  const auto* a = in_flight_.oldest(&p);
  if (a == nullptr) return false;
  const auto age = now - a->start_ms;
  if (age < kStallFloorMs) return false;  // the common case: no statistics needed
  double p50 = 0;
  if (ps != nullptr) {
    if (auto m = ps->methods.find(a->method); m != ps->methods.end()) {
      p50 = summarize(&m->second, now, profile_.strategies.fastest.window_ms).p50_ms;
    }
  }
  return attempt_stalled(age, p50);
}

struct Router::Item {
  std::size_t index = 0;
  const jsonrpc::Call* call = nullptr;
  Plan plan;
  BlockNeed need;
  bool needs_archive = false;
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

Router::Router(const Profile& profile, Transport& transport, HealthStore& store, const Clock& clock, Random& rng)
    : profile_(profile), transport_(transport), store_(store), clock_(clock), rng_(rng) {}

const std::string& Router::key_for(const Chain& chain, const Provider& provider) {
  auto it = keys_.find(&provider);
  if (it == keys_.end()) it = keys_.emplace(&provider, provider_key(profile_.name, chain.name, provider)).first;
  return it->second;
}

const std::string& Router::chain_key_for(const Chain& chain) {
  auto it = chain_keys_.find(&chain);
  if (it == chain_keys_.end()) it = chain_keys_.emplace(&chain, chain_key(profile_.name, chain)).first;
  return it->second;
}

Plan Router::plan(const Chain& chain, std::string_view method, std::string_view params, const RouteOptions& options) {
  Plan plan;
  plan.policy = profile_.policy_for(method);
  plan.strategy = options.strategy.value_or(plan.policy.strategy.value_or(profile_.routing.default_strategy));
  const auto now = clock_.now_ms();
  const auto window = plan.strategy == Strategy::latency_weighted ? profile_.strategies.latency_weighted.window_ms
                                                                  : profile_.strategies.fastest.window_ms;
  const auto& breaker_cfg = profile_.health.circuit_breaker;
  const bool needs_stats = options.with_stats || plan.strategy == Strategy::fastest ||
                           plan.strategy == Strategy::latency_weighted;

  std::optional<std::string> pinned;
  if (method_info(method).filter == FilterRole::reads) {
    if (auto id = first_string_param(params)) {
      if (const FilterPin* pin = store_.filter(filter_key(profile_.name, chain, *id)); pin != nullptr) {
        pinned = pin->provider;
      }
    }
  }

  // Heights: one rule (chain_head) over the providers' fresh observations, shared with lag
  // judgements, probe and the sidecar. The head is taken over providers not shut out by their
  // breaker (a dead provider's last height would make every live one look behind); lag compares
  // like with like (lag_behind), so an exclusion lasts while both heights are fresh. The mark
  // counts for the head (archive and block decisions) only when no provider height is fresh; lag
  // is never measured against it.
  const std::string& ckey = chain_key_for(chain);
  // Per-thread buffers: plan() runs for every call and never suspends.
  thread_local std::vector<const ProviderState*> states;
  thread_local std::vector<std::optional<std::uint64_t>> estimates;
  thread_local std::vector<HeadClaim> claims;
  thread_local std::vector<ClaimJudgement> judgements;
  states.assign(chain.providers.size(), nullptr);
  estimates.assign(chain.providers.size(), std::nullopt);
  claims.assign(chain.providers.size(), HeadClaim{Height{}, false});
  judgements.assign(chain.providers.size(), ClaimJudgement{});
  plan.candidates.reserve(chain.providers.size());
  for (std::size_t i = 0; i < chain.providers.size(); ++i) {
    const ProviderState* found = store_.provider(key_for(chain, chain.providers[i]));
    if (found == nullptr) continue;
    const auto& ps = *found;
    states[i] = &ps;
    const bool right_chain = ps.probe.chain_id == 0 || ps.probe.chain_id == chain.chain_id;
    claims[i] = {ps.height, right_chain && ps.breaker.effective_state(now) != BreakerState::open};
    if (right_chain && height_fresh(ps.height, now, chain) && ps.height.block <= kMaxPlausibleHeight) {
      estimates[i] = estimate_height(ps.height, now, chain);
    }
  }
  const std::optional<Height> reference = chain_head(claims, judgements, chain, now).head;
  if (reference) {
    plan.head = reference->block;
  } else if (const ChainState* cs = store_.chain(ckey); cs != nullptr && height_fresh(cs->high_water, now, chain)) {
    plan.head = cs->high_water.block;
  }

  plan.need = analyze_block_need(method, params);
  if (plan.need.any()) {
    bool earliest = false;
    for (const auto* ref : {&plan.need.block, &plan.need.from, &plan.need.to}) {
      earliest = earliest || (*ref && (*ref)->kind == BlockRef::Kind::earliest);
    }
    const auto oldest = oldest_block(plan.need, plan.head);
    plan.needs_archive =
        earliest || (oldest && plan.head > 0 && *oldest + chain.archival_threshold < plan.head);
  }
  const auto highest = highest_numbered_block(plan.need);
  // Blocks an eth_getLogs call scans; 0 when not known (a tag without a head, a blockHash query).
  const std::uint64_t log_range = method == "eth_getLogs" ? log_range_blocks(plan.need, plan.head).value_or(0) : 0;
  std::vector<Candidate> lagging;
  std::vector<Candidate> open;  // open breakers that pass every other filter: trials when nothing else is usable

  for (std::size_t i = 0; i < chain.providers.size(); ++i) {
    const Provider& p = chain.providers[i];
    const ProviderState* ps = states[i];
    bool is_open = false;  // excluded by its breaker already; later filters only decide whether it could be a trial
    auto exclude = [&](ExclusionKind kind, std::string reason, std::int64_t retry_in = 0) {
      if (!is_open) plan.excluded.push_back({p.id, std::move(reason), retry_in, kind});
    };
    if (options.provider && p.id != *options.provider) {
      exclude(ExclusionKind::caller, fmt::format("not selected (only {} was requested)", *options.provider));
      continue;
    }
    if (!plan.policy.providers.empty() &&
        std::find(plan.policy.providers.begin(), plan.policy.providers.end(), p.id) == plan.policy.providers.end()) {
      exclude(ExclusionKind::policy, fmt::format("the method policy for {} restricts it to other providers", method));
      continue;
    }
    if (pinned && *pinned != p.id) {
      exclude(ExclusionKind::filter, fmt::format("the filter lives on {}", *pinned));
      continue;
    }
    if (!p.methods.permits(method)) {
      exclude(ExclusionKind::method, fmt::format("{} is denied by the provider's method list", method));
      continue;
    }
    Candidate c;
    c.provider = &p;
    c.position = i;
    c.key = key_for(chain, p);
    if (ps != nullptr) {
      if (ps->probe.chain_id != 0 && ps->probe.chain_id != chain.chain_id) {
        exclude(ExclusionKind::chain_id,
                fmt::format("wrong chain id {} (the profile says {}), seen by probe {} ago", ps->probe.chain_id,
                            chain.chain_id, seconds_text(now - ps->probe.t_ms)));
        continue;
      }
      auto eff = ps->breaker.effective_state(now);
      if (eff == BreakerState::open) {
        auto retry = ps->breaker.retry_in_ms(now);
        exclude(ExclusionKind::breaker,
                fmt::format("circuit breaker open ({}); half-opens in {}",
                            ps->breaker.reason.empty() ? "failures" : ps->breaker.reason, seconds_text(retry)),
                retry);
        is_open = true;
      }
      if (eff != BreakerState::closed) {
        auto it = half_open_in_flight_.find(c.key);
        if (it != half_open_in_flight_.end() && it->second >= breaker_cfg.half_open_max_inflight) {
          exclude(ExclusionKind::half_open, "circuit breaker half-open with its trial request in flight");
          continue;
        }
      }
      c.breaker = eff;
      c.rate_limited_until_ms = ps->rate_limited_until_ms;
      c.tier = tier_of(is_open ? BreakerState::half_open : eff, ps->rate_limited(now));
      if (needs_stats) {
        auto m = ps->methods.find(method);
        c.stats = summarize(m == ps->methods.end() ? nullptr : &m->second, now, window);
      }
    }
    if (stalled(p, ps, now)) c.tier = Tier::stalled;
    if (plan.needs_archive && archival_of(p, ps) == false) {
      auto oldest = oldest_block(plan.need, plan.head);
      exclude(ExclusionKind::archive,
              fmt::format("not archival ({}); the request reads block {} (head ~{}, archival_threshold {})",
                          archival_source(p, ps), oldest ? std::to_string(*oldest) : std::string("earliest"),
                          plan.head, chain.archival_threshold));
      continue;
    }
    if (highest && estimates[i] && *estimates[i] < *highest && plan.head >= *highest) {
      exclude(ExclusionKind::height,
              fmt::format("block {} is above its height (~{}; head ~{})", *highest, *estimates[i], plan.head));
      continue;
    }
    if (log_range > 0 && p.limits.max_block_range && log_range > *p.limits.max_block_range) {
      const std::uint64_t limit = *p.limits.max_block_range;
      exclude(ExclusionKind::limit,
              fmt::format("eth_getLogs over {} blocks exceeds its max_block_range {}", log_range, limit));
      continue;
    }
    if (p.rate_limit) {
      const Bucket bucket = ps != nullptr ? ps->quota : Bucket{};
      if (auto wait = bucket_wait_ms(bucket, *p.rate_limit, now); wait > 0) {
        exclude(ExclusionKind::quota,
                fmt::format("quota used up (rate_limit {} rps, burst {}); a token in {} ms", p.rate_limit->rps,
                            p.rate_limit->burst, wait),
                wait);
        continue;
      }
    }
    if (is_open) {
      open.push_back(std::move(c));
      continue;
    }
    if (quarantined(judgements[i].verdict)) {
      exclude(ExclusionKind::quarantine, claim_doubt(ps->height, judgements[i], chain));
      lagging.push_back(std::move(c));
      continue;
    }
    if (judgements[i].verdict == ClaimVerdict::believed) {
      const auto lag = reference ? lag_behind(ps->height, *reference, chain) : 0;
      // The judgement made when its height was seen (probe compares every provider at once) stands
      // while that height is fresh, even after the others' newer heights would give it the benefit
      // of the doubt: one rule for rank, /status and routing, with the horizon of a height.
      const bool judged_behind = ps->lag.behind_since_ms != 0 && ps->lag.t_ms >= ps->height.t_ms;
      if (lag > static_cast<std::int64_t>(chain.max_lag_blocks)) {
        exclude(ExclusionKind::lag, fmt::format("lagging {} blocks behind (height ~{}, best {}; max_lag_blocks {})", lag,
                                                height_at(ps->height, reference->t_ms, chain), reference->block,
                                                chain.max_lag_blocks));
        lagging.push_back(std::move(c));
        continue;
      }
      if (judged_behind) {
        exclude(ExclusionKind::lag, fmt::format("lagging {} blocks behind (height {} seen {} ago; max_lag_blocks {})",
                                                ps->lag.blocks, ps->height.block, seconds_text(now - ps->height.t_ms),
                                                chain.max_lag_blocks));
        lagging.push_back(std::move(c));
        continue;
      }
    }
    plan.candidates.push_back(std::move(c));
  }
  // A lagging or quarantined provider is better than none: when that alone left nothing to try,
  // they are tried (eth_blockNumber answers still never go below the mark, and a doubtful head answer
  // is still refused).
  if (plan.candidates.empty() && !lagging.empty()) {
    plan.lag_fallback = true;
    std::erase_if(plan.excluded, [](const Exclusion& e) {
      return e.kind == ExclusionKind::lag || e.kind == ExclusionKind::quarantine;
    });
    plan.candidates = std::move(lagging);
  }
  // Nothing usable at all: rather than refuse everyone until a recovery timeout passes, each open
  // breaker lets one request through as a trial (half_open_max_inflight at a time); a success
  // closes it. A node that came back is used by the next request, not 30 s later.
  if (plan.candidates.empty() && !open.empty()) {
    plan.breaker_trial = true;
    std::erase_if(plan.excluded, [&](const Exclusion& e) {
      return e.kind == ExclusionKind::breaker &&
             std::any_of(open.begin(), open.end(), [&](const Candidate& c) { return c.provider->id == e.provider; });
    });
    plan.candidates = std::move(open);
  }

  RankInput in;
  in.strategy = plan.strategy;
  in.params = &profile_.strategies;
  in.rng = &rng_;
  if (const ChainState* cs = store_.chain(ckey); cs != nullptr) in.rr_cursor = cs->rr_cursor;
  rank_candidates(plan.candidates, in);
  keep_sticky_first(chain, plan, method, params, now);
  return plan;
}

void Router::keep_sticky_first(const Chain& chain, Plan& plan, std::string_view method, std::string_view params,
                               std::int64_t now) {
  // A sender's nonce lookups, sends and receipt polls go where its last ones went (one mempool),
  // whatever the strategy drew, as long as that provider is in the best tier.
  plan.sticky = sticky_key(method, params);
  auto id = sticky_.find(chain.name, plan.sticky, now);
  if (!id || plan.candidates.empty()) return;
  auto& cands = plan.candidates;
  auto it = std::find_if(cands.begin(), cands.end(), [&](const Candidate& c) { return c.provider->id == *id; });
  if (it == cands.end() || it->tier != cands.front().tier) return;
  std::rotate(cands.begin(), it, it + 1);
  for (auto& c : cands) c.first_probability = 0;
  cands.front().first_probability = 1.0;
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
  const std::string& ckey = chain_key_for(chain);
  if (call.method == "eth_blockNumber") {
    if (auto h = jsonrpc::parse_quantity(result)) {
      observe_height(store_, profile_, chain, *cand.provider, Height{*h, now}, rng_.uniform(), cand.key);
      // Never backwards: an answer below the high-water mark is raised to it while the mark is
      // fresh and the providers still reach it. A mark nobody has confirmed for a whole horizon, or
      // that the providers' head no longer supports (a restarted or reset chain: every provider
      // went back; a lone liar's height), is gone and the lower answer resets it at once.
      const ChainState* cs = store_.chain(ckey);
      const bool has_mark = cs != nullptr && cs->high_water.t_ms > 0;
      if (has_mark && *h < cs->high_water.block && height_fresh(cs->high_water, now, chain) &&
          mark_supported(store_, profile_, chain, cs->high_water, now)) {
        out.raised_from = *h;
        out.result = jsonrpc::to_quantity(cs->high_water.block);
      } else {
        store_.record(HighWaterEvent{ckey, Height{*h, now}, has_mark && *h < cs->high_water.block}, profile_.health);
      }
    }
  } else if (call.method == "eth_getBlockByNumber" && item.plan.need.block &&
             item.plan.need.block->kind == BlockRef::Kind::latest) {
    if (auto h = block_number_of(result)) {
      observe_height(store_, profile_, chain, *cand.provider, Height{*h, now}, rng_.uniform(), cand.key);
      // Only a height the head rule believes may raise the mark.
      if (mark_supported(store_, profile_, chain, Height{*h, now}, now)) {
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
    sticky_.stick(chain.name, item.plan.sticky, cand.provider->id, now);
    if (method_info(call.method).replay_unsafe) {
      if (auto hash = json_string_value(result)) {
        sticky_.stick(chain.name, StickyKey{StickyKey::Kind::transaction, *hash}, cand.provider->id, now);
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
  const auto remaining_ms = std::max<std::int64_t>(1, (deadline_us - clock_.mono_us()) / 1000);
  const auto timeout = std::min(attempt_timeout_ms(method, provider, policy), remaining_ms);
  const UpstreamCall one{method, params};
  const std::vector<UpstreamCall> upstream{one};
  if (provider.rate_limit) {
    store_.record(QuotaEvent{std::string(cand.key), clock_.now_ms(), 1.0, *provider.rate_limit}, profile_.health);
  }
  Exchange ex = co_await send_exchange(transport_, provider, upstream, timeout, clock_, profile_);
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
  const std::string& ckey = chain_key_for(chain);

  // The overall deadline: --timeout, else the profile's, stretched for methods whose attempts may
  // take longer (debug_*, trace_*).
  std::int64_t timeout_ms = profile_.routing.timeout_ms;
  for (const auto& call : calls) {
    if (call.valid()) timeout_ms = std::max(timeout_ms, default_method_timeout_ms(call.method));
  }
  if (options.timeout_ms) timeout_ms = *options.timeout_ms;
  const auto deadline_us = clock_.mono_us() + timeout_ms * 1000;

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
      if (wait < 0 || !only_quota || clock_.mono_us() + wait * 1000 >= deadline_us) break;
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
    const ProviderState* ps = store_.provider(cand.key);

    // Calls bound for the same provider go in one batch, up to its max_batch (one call at a time
    // when probe found it does not answer batches); the rest go in the next rounds.
    std::size_t cap = provider.limits.max_batch.value_or(SIZE_MAX);
    if (ps != nullptr && ps->probe.batch == false) cap = 1;
    boost::container::small_vector<Item*, 4> group;  // no allocation for the usual single call
    for (auto& it : items) {
      if (group.size() >= cap) break;
      if (!it.done && it.plan.candidates[it.next].key == cand.key) group.push_back(&it);
    }

    const auto remaining_ms = (deadline_us - clock_.mono_us()) / 1000;
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
    if (trial) ++half_open_in_flight_[std::string(cand.key)];
    const auto started_ms = clock_.now_ms();
    in_flight_.start(&provider, leader->call->method, started_ms);
    const std::span<const UpstreamCall> upstream_calls(upstream.data(), upstream.size());
    // send_exchange's steps, in this frame: a coroutine level less per attempt. Named locals: g++ 12
    // destroys temporaries inside a co_await expression twice.
    const UpstreamIds ids = reserve_upstream_ids(upstream_calls.size());
    HttpRequest request{provider.url, upstream_body(upstream_calls, ids), &provider.headers, attempt_timeout,
                        max_response_bytes(upstream_calls, provider, profile_)};
    request.cancel = options.cancel;
    HttpResponse answer = co_await transport_.perform(std::move(request));
    // Abandoned, not failed: nothing is learned or held against the provider (the loop's top ends
    // the calls).
    if (answer.error == TransportError::cancelled) {
      if (trial) --half_open_in_flight_[std::string(cand.key)];
      continue;
    }
    Exchange ex = classify_exchange(std::move(answer), ids, clock_.now_ms(), profile_, upstream_calls);
    if (connection_suspect(ex)) transport_.close_connection(ex.http.connection);
    refuse_doubtful_heads(store_, profile_, chain, provider, cand.key, upstream_calls, ex, clock_.now_ms());
    if (trial) --half_open_in_flight_[std::string(cand.key)];
    in_flight_.finish(&provider, started_ms);
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
