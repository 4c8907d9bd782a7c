#include <fmt/format.h>

#include <algorithm>
#include <cassert>

#include "rpcroute/blocks.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/jsonrpc.hpp"

namespace rpcroute {

std::uint64_t height_at(const Height& h, std::int64_t t_ms, const Chain& chain) {
  if (chain.block_time_ms <= 0 || t_ms <= h.t_ms) return h.block;
  const auto elapsed = std::min<std::int64_t>(t_ms - h.t_ms, height_horizon_ms(chain));
  return h.block + static_cast<std::uint64_t>(elapsed / chain.block_time_ms);
}

std::uint64_t jump_allowance(const Chain& chain) {
  return std::max<std::uint64_t>(
      1000, static_cast<std::uint64_t>(3'600'000 / std::max<std::int64_t>(1, chain.block_time_ms)));
}

std::int64_t lag_behind(const Height& h, const Height& head, const Chain& chain) {
  return static_cast<std::int64_t>(head.block) -
         static_cast<std::int64_t>(height_at(h, head.t_ms, chain));
}

ChainHead chain_head(std::span<const HeadClaim> claims, std::span<ClaimJudgement> judgements,
                     const Chain& chain, std::int64_t now_ms) {
  assert(judgements.size() == claims.size());
  // Per-thread buffers: planning runs this for every call and never suspends.
  thread_local std::vector<std::size_t> live;
  thread_local std::vector<std::uint64_t> others;
  live.clear();
  for (std::size_t i = 0; i < claims.size(); ++i) {
    judgements[i] = {};
    const auto& c = claims[i];
    if (!c.counts || !height_fresh(c.height, now_ms, chain)) continue;
    if (c.height.block > kMaxPlausibleHeight) {
      judgements[i].verdict = ClaimVerdict::absurd;
      continue;
    }
    live.push_back(i);
  }
  // A jump: a claim far above the (lower) median of the others, moved to its time. With one claim
  // there is nothing to compare: a single provider is believed unless absurd.
  const auto allowance = jump_allowance(chain);
  if (live.size() >= 2) {
    for (auto i : live) {
      others.clear();
      for (auto j : live) {
        if (j != i) others.push_back(height_at(claims[j].height, claims[i].height.t_ms, chain));
      }
      std::sort(others.begin(), others.end(), std::greater<>());
      const auto base = others[others.size() / 2];
      if (claims[i].height.block > base + allowance)
        judgements[i] = {ClaimVerdict::implausible, base};
    }
    std::erase_if(
        live, [&](std::size_t i) { return judgements[i].verdict == ClaimVerdict::implausible; });
  }
  if (live.empty()) return {};

  // The head: the highest claim that half of the believed claims (two of three) reach within
  // max_lag_blocks, each moved forward to that claim's time.
  const std::size_t quorum = (live.size() + 1) / 2;
  const auto tol = chain.max_lag_blocks;
  std::optional<std::size_t> best;
  for (auto i : live) {
    const auto& hi = claims[i].height;
    std::size_t support = 0;
    for (auto j : live)
      support += height_at(claims[j].height, hi.t_ms, chain) + tol >= hi.block ? 1 : 0;
    if (support < quorum) continue;
    if (!best || hi.block > claims[*best].height.block ||
        (hi.block == claims[*best].height.block && hi.t_ms > claims[*best].height.t_ms)) {
      best = i;
    }
  }
  if (!best) {  // three or more, all apart: the lower median
    others.clear();
    std::sort(live.begin(), live.end(), [&](std::size_t a, std::size_t b) {
      return claims[a].height.block > claims[b].height.block;
    });
    best = live[live.size() / 2];
  }
  ChainHead out;
  out.head = claims[*best].height;
  for (auto i : live) {
    const bool ahead =
        claims[i].height.block > height_at(*out.head, claims[i].height.t_ms, chain) + tol;
    if (live.size() >= 3 && ahead) {
      judgements[i] = {ClaimVerdict::unconfirmed, out.head->block};
    } else {
      judgements[i] = {ClaimVerdict::believed, 0};
      ++out.believed;
    }
  }
  return out;
}

std::string claim_doubt(const Height& h, const ClaimJudgement& j, const Chain& chain) {
  switch (j.verdict) {
    case ClaimVerdict::absurd:
      return fmt::format("height {} is not believed: no chain is that long", h.block);
    case ClaimVerdict::implausible:
      return fmt::format(
          "height {} is not believed: {} blocks above what the other providers reach (~{}; jump "
          "allowance {})",
          h.block, h.block - j.base, j.base, jump_allowance(chain));
    case ClaimVerdict::unconfirmed:
      return fmt::format(
          "height {} is not believed: {} blocks ahead of the head {} the other providers confirm "
          "(max_lag_blocks {})",
          h.block, h.block - j.base, j.base, chain.max_lag_blocks);
    default:
      return {};
  }
}

void head_claims(std::vector<HeadClaim>& out, const HealthView& view, const Profile& profile,
                 const Chain& chain, std::int64_t now_ms, bool with_open) {
  out.assign(chain.providers.size(), HeadClaim{Height{}, false});
  thread_local std::string key;  // one buffer for every lookup
  for (std::size_t i = 0; i < chain.providers.size(); ++i) {
    provider_key_into(key, profile.name, chain.name, chain.providers[i]);
    const ProviderState* found = view.provider(key);
    if (found == nullptr) continue;
    const auto& ps = *found;
    const bool right_chain = ps.probe.chain_id == 0 || ps.probe.chain_id == chain.chain_id;
    const bool open = ps.breaker.effective_state(now_ms) == BreakerState::open;
    out[i] = {ps.height, right_chain && (with_open || !open)};
  }
}

namespace {

std::size_t index_of(const Chain& chain, const Provider& provider) {
  for (std::size_t i = 0; i < chain.providers.size(); ++i) {
    if (chain.providers[i].id == provider.id) return i;
  }
  return chain.providers.size();
}

/// The chain's fresh high-water mark, else 0.
std::uint64_t fresh_mark(const HealthView& view, const Profile& profile, const Chain& chain,
                         std::string_view key, std::int64_t now_ms) {
  std::string computed;
  if (key.empty()) key = computed = chain_key(profile.name, chain);
  const ChainState* cs = view.chain(key);
  return cs != nullptr && height_fresh(cs->high_water, now_ms, chain) ? cs->high_water.block : 0;
}

/// The chain's claims in `view` judged by chain_head(). The vectors are this thread's, valid until
/// the next call: callers that may nest (raise_mark, refuse_doubtful_heads) keep their own.
struct Judged {
  const std::vector<HeadClaim>& claims;
  const std::vector<ClaimJudgement>& judgements;
  ChainHead head;
};
Judged judge_claims(const HealthView& view, const Profile& profile, const Chain& chain,
                    std::int64_t now_ms, bool with_open) {
  thread_local std::vector<HeadClaim> claims;
  thread_local std::vector<ClaimJudgement> judgements;
  head_claims(claims, view, profile, chain, now_ms, with_open);
  judgements.resize(claims.size());
  const auto head = chain_head(claims, judgements, chain, now_ms);
  return {claims, judgements, head};
}

}  // namespace

std::uint64_t best_known_height(const HealthView& view, const Profile& profile, const Chain& chain,
                                std::int64_t now_ms, std::string_view key) {
  if (const auto j = judge_claims(view, profile, chain, now_ms, false); j.head.head)
    return j.head.head->block;
  return fresh_mark(view, profile, chain, key, now_ms);
}

std::uint64_t head_elsewhere(const HealthView& view, const Profile& profile, const Chain& chain,
                             const Provider& provider, std::string_view key, std::int64_t now_ms) {
  const auto j = judge_claims(view, profile, chain, now_ms, false);
  // The mark too: only believed heights raise it, and the provider's own HTTP polls may be what
  // moves it while its socket is silent.
  std::uint64_t best = fresh_mark(view, profile, chain, key, now_ms);
  for (std::size_t i = 0; i < j.claims.size(); ++i) {
    if (chain.providers[i].id == provider.id) continue;
    if (j.judgements[i].verdict == ClaimVerdict::believed)
      best = std::max(best, j.claims[i].height.block);
  }
  return best;
}

FinalityMarks finality_quorum(std::span<const FinalityVotes::Vote> votes,
                              std::span<const ClaimJudgement> judgements) {
  thread_local std::vector<Height> reached;
  auto mark = [&](Height FinalityVotes::Vote::*tag) {
    reached.clear();
    for (std::size_t i = 0; i < votes.size() && i < judgements.size(); ++i) {
      if (judgements[i].verdict != ClaimVerdict::believed) continue;
      const auto& v = votes[i];
      if (!v.asked)
        reached.push_back(Height{});  // not asked yet: holds the mark back until it is
      else if ((v.*tag).t_ms != 0)
        reached.push_back(v.*tag);
    }
    if (reached.empty()) return Height{};
    std::sort(reached.begin(), reached.end(),
              [](const Height& a, const Height& b) { return a.block > b.block; });
    const Height median = reached[reached.size() / 2];
    return median.t_ms == 0 ? Height{} : median;
  };
  return {mark(&FinalityVotes::Vote::safe), mark(&FinalityVotes::Vote::finalized)};
}

std::optional<FinalityEvent> judge_finality(const HealthView& view, const Profile& profile,
                                            const Chain& chain, const Provider& provider,
                                            Height safe, Height finalized, FinalityVotes* votes,
                                            std::int64_t now_ms) {
  const auto idx = index_of(chain, provider);
  if (idx == chain.providers.size()) return std::nullopt;
  const auto [claims, judgements, head] = judge_claims(view, profile, chain, now_ms, false);
  if (votes != nullptr) votes->by_provider.resize(chain.providers.size());
  if (!head.head || judgements[idx].verdict != ClaimVerdict::believed) {
    // Its head is not believed: neither is what it says is final, now or from before.
    if (votes != nullptr) votes->by_provider[idx] = {true, {}, {}};
    return std::nullopt;
  }
  const auto ceiling = height_at(*head.head, now_ms, chain);
  if (safe.block > ceiling) safe = {};
  if (finalized.block > ceiling) finalized = {};
  FinalityEvent event{chain_key(profile.name, chain), safe, finalized, ceiling};
  if (votes != nullptr) {
    votes->by_provider[idx] = {true, safe, finalized};
    const auto marks = finality_quorum(votes->by_provider, judgements);
    event.safe = marks.safe;
    event.finalized = marks.finalized;
  }
  return event;
}

bool mark_supported(const HealthView& view, const Profile& profile, const Chain& chain,
                    const Height& mark, std::int64_t now_ms) {
  const auto head = judge_claims(view, profile, chain, now_ms, true).head;
  return head.head && mark.block <= height_at(*head.head, now_ms, chain) + chain.max_lag_blocks;
}

bool raise_mark(HealthStore& store, const Profile& profile, const Chain& chain,
                const Provider& provider, const Height& height) {
  // Not a provider on another chain (its heights are not this chain's), and only a height the head
  // rule believes: a lone claim the others do not confirm (a liar, a jump, an absurd figure) never
  // moves the mark.
  const ProviderState* ps = store.provider(provider_key(profile.name, chain.name, provider));
  if (ps != nullptr && ps->probe.chain_id != 0 && ps->probe.chain_id != chain.chain_id)
    return false;
  auto key = chain_key(profile.name, chain);
  if (const ChainState* cs = store.chain(key); cs != nullptr && height.block < cs->high_water.block)
    return false;  // below the mark: nothing to raise (a lower mark is reset by answers only)
  if (!mark_supported(store, profile, chain, height, height.t_ms)) return false;
  store.record(HighWaterEvent{std::move(key), height, false}, profile.health);
  return true;
}

bool refuse_doubtful_heads(HealthStore& store, const Profile& profile, const Chain& chain,
                           const Provider& provider, std::string_view key,
                           std::span<const UpstreamCall> calls, Exchange& ex, std::int64_t now_ms) {
  const auto idx = index_of(chain, provider);
  if (idx == chain.providers.size()) return false;
  bool refused = false;
  thread_local std::vector<HeadClaim> claims;
  thread_local std::vector<ClaimJudgement> judgements;
  for (std::size_t i = 0; i < calls.size() && i < ex.per_call.size(); ++i) {
    if (calls[i].method != "eth_blockNumber" || ex.per_call[i].cls != OutcomeClass::success)
      continue;
    const auto* reply = ex.replies[i];
    if (reply == nullptr || !reply->result) continue;
    const auto h = jsonrpc::parse_quantity(*reply->result);
    if (!h) continue;
    head_claims(claims, store, profile, chain, now_ms, false);
    claims[idx] = {Height{*h, now_ms}, true};
    judgements.resize(claims.size());
    (void)chain_head(claims, judgements, chain, now_ms);
    if (!quarantined(judgements[idx].verdict)) continue;
    ex.per_call[i] = Classification{
        Outcome::bad_response, OutcomeClass::provider_failure,
        "eth_blockNumber: " + claim_doubt(Height{*h, now_ms}, judgements[idx], chain), -1};
    if (ex.overall.cls != OutcomeClass::rate_limited) ex.overall = ex.per_call[i];
    // Kept as its claim: the provider stays quarantined while it is fresh.
    store.record(HeightEvent{std::string(key), Height{*h, now_ms}}, profile.health);
    refused = true;
  }
  return refused;
}

void observe_height(HealthStore& store, const Profile& profile, const Chain& chain,
                    const Provider& provider, const Height& height, double jitter,
                    std::string_view key) {
  std::string computed;
  if (key.empty()) key = computed = provider_key(profile.name, chain.name, provider);
  store.record(HeightEvent{std::string(key), height}, profile.health);
  judge_lag(store, profile, chain, provider, jitter, key);
}

void judge_lag(HealthStore& store, const Profile& profile, const Chain& chain,
               const Provider& provider, double jitter, std::string_view key) {
  std::string computed;
  if (key.empty()) key = computed = provider_key(profile.name, chain.name, provider);
  const ProviderState* found = store.provider(key);
  if (found == nullptr || found->height.t_ms == 0) return;
  const auto& ps = *found;
  const Height height = ps.height;
  if (ps.lag.t_ms > height.t_ms) return;  // judged on a newer observation already
  const auto idx = index_of(chain, provider);
  if (idx == chain.providers.size()) return;
  thread_local std::vector<HeadClaim> claims;
  thread_local std::vector<ClaimJudgement> judgements;
  head_claims(claims, store, profile, chain, height.t_ms, false);
  // Judged even while its own breaker is open, so that a half-open provider still behind trips
  // again.
  claims[idx].counts = ps.probe.chain_id == 0 || ps.probe.chain_id == chain.chain_id;
  judgements.resize(claims.size());
  const auto head = chain_head(claims, judgements, chain, height.t_ms);
  const bool believed = judgements[idx].verdict == ClaimVerdict::believed;
  const auto lag = believed && head.head ? lag_behind(height, *head.head, chain) : 0;
  const bool behind = lag > static_cast<std::int64_t>(chain.max_lag_blocks);
  if (!behind) {
    if (ps.lag.behind_since_ms != 0)
      store.record(LagEvent{std::string(key), LagMark{0, height.t_ms}}, profile.health);
    return;
  }
  const auto since = ps.lag.behind_since_ms != 0 ? ps.lag.behind_since_ms : height.t_ms;
  store.record(
      LagEvent{std::string(key), LagMark{since, height.t_ms, static_cast<std::uint64_t>(lag)}},
      profile.health);
  const auto behind_for = height.t_ms - since;
  if (behind_for < chain.lag_trip_ms) return;
  if (ps.breaker.effective_state(height.t_ms) == BreakerState::open) return;
  AttemptEvent trip;
  trip.key.assign(key);
  trip.t_ms = height.t_ms;
  trip.cls = OutcomeClass::provider_failure;
  trip.reason = fmt::format("lag: {} blocks behind for {:.1f}s (max_lag_blocks {}, lag_trip_ms {})",
                            lag, static_cast<double>(behind_for) / 1000.0, chain.max_lag_blocks,
                            chain.lag_trip_ms);
  trip.jitter = jitter;
  trip.trip = true;
  store.record(std::move(trip), profile.health);
}

}  // namespace rpcroute
