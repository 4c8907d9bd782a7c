// A one-shot `call` never uses a provider on the wrong network, even with no probe run before
// (issue 21): a provider whose chain id the state does not hold is asked for it alongside the first
// request to it (eth_chainId last in the round's batch, or alone when it does not answer batches or
// the round is hedged), the id is remembered with the probe's findings in the state file, and a
// provider on another chain is left out as the probe's exclusion would leave it out. With the id
// in the state, nothing extra is sent.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "executor_parts.hpp"
#include "rpcroute/jsonrpc.hpp"

namespace rpcroute {

namespace {
constexpr std::string_view kChainIdMethod = "eth_chainId";
}  // namespace

asio::awaitable<bool> Executor::check_chain(const Run& run, Round& round) {
  round.chain_check = false;
  const ProviderState* ps = store_.provider(round.cand.key);
  if (ps != nullptr && ps->probe.chain_id != 0) {
    // Known. One on another chain is excluded by the planner, unless this request learned it.
    if (ps->probe.chain_id == run.chain.chain_id) co_return true;
    skip_wrong_chain(run, round, ps->probe.chain_id);
    co_return false;
  }
  if (asks_in_batch(round.cand)) {
    // Within the provider's max_batch: a call that would not fit goes in the next round.
    if (round.group.size() >= round.cand.provider->limits.max_batch.value_or(SIZE_MAX))
      round.group.pop_back();
    round.chain_check = true;  // start_round puts eth_chainId last in the batch
    co_return true;
  }
  const Provider& provider = *round.cand.provider;
  const auto remaining_ms = (run.deadline_us - clock_.mono_us()) / 1000;
  if (remaining_ms <= 0) co_return true;  // next_round ends the calls
  const auto timeout =
      std::min(attempt_timeout_ms(kChainIdMethod, provider, profile_.policy_for(kChainIdMethod)),
               remaining_ms);
  const std::vector<UpstreamCall> upstream{{kChainIdMethod, "[]"}};
  Exchange ex = co_await send_exchange(transport_, provider, upstream, timeout, clock_, profile_);
  // The attempt counts for health; our own eth_chainId is no latency sample of traffic.
  record_exchange(store_, profile_.health, round.cand.key, {}, ex, clock_.now_ms(), rng_.uniform(),
                  {.trial = round.cand.breaker == BreakerState::open});
  // Unanswered: the round goes on, and its own outcome says what the provider is worth.
  const auto seen = learn_chain_id(round.cand, ex, 0);
  if (!seen || *seen == run.chain.chain_id) co_return true;
  skip_wrong_chain(run, round, *seen);
  co_return false;
}

bool Executor::asks_in_batch(const Candidate& cand) const {
  const ProviderState* ps = store_.provider(cand.key);
  return (ps == nullptr || ps->probe.batch != false) &&
         cand.provider->limits.max_batch.value_or(SIZE_MAX) > 1;
}

bool Executor::chain_unknown(const Candidate& cand) const {
  const ProviderState* ps = store_.provider(cand.key);
  return ps == nullptr || ps->probe.chain_id == 0;
}

std::optional<std::uint64_t> Executor::other_chain(const Run& run, const Round& round,
                                                   const Exchange& ex) {
  const auto seen = learn_chain_id(round.cand, ex, round.group.size());
  if (!seen || *seen == run.chain.chain_id) return std::nullopt;
  return seen;
}

void Executor::settle_other_chain(Round& round, const Exchange& ex) {
  // Its answers are another chain's: none is delivered nor judged. The exchange itself is
  // recorded (the provider did answer).
  forget_round(round);
  const std::span<const UpstreamCall> calls(round.upstream.data(), round.upstream.size() - 1);
  record_exchange(store_, profile_.health, round.cand.key, calls, ex, clock_.now_ms(),
                  rng_.uniform(), {.trial = round.cand.breaker == BreakerState::open});
}

bool Executor::settle_chain_check(const Run& run, Round& round, const Exchange& ex) {
  const auto seen = other_chain(run, round, ex);
  if (!seen) return true;
  settle_other_chain(round, ex);
  skip_wrong_chain(run, round, *seen);
  return false;
}

std::optional<std::uint64_t> Executor::learn_chain_id(const Candidate& cand, const Exchange& ex,
                                                      std::size_t index) {
  std::optional<std::uint64_t> seen;
  if (index < ex.replies.size() && ex.replies[index] != nullptr && ex.replies[index]->result &&
      ex.per_call[index].cls == OutcomeClass::success) {
    seen = jsonrpc::parse_quantity(*ex.replies[index]->result);
    if (seen == 0U) seen.reset();
  }
  // One answer to the whole batch: it refused the batch as such; next time it is asked alone.
  const bool refused_batch = index > 0 && ex.response && !ex.response->batch;
  if (!seen && !refused_batch) return std::nullopt;
  // The probe's findings with the chain id (or batch) filled in and their time kept: replayed onto
  // a state file where a probe has written since, the newer probe wins (apply_event: ProbeEvent).
  const ProviderState* ps = store_.provider(cand.key);
  ProbeFindings findings = ps != nullptr ? ps->probe : ProbeFindings{};
  if (seen)
    findings.chain_id = *seen;
  else
    findings.batch = false;
  store_.record(ProbeEvent{std::string(cand.key), std::move(findings)}, profile_.health);
  return seen;
}

void Executor::skip_wrong_chain(const Run& run, Round& round, std::uint64_t seen) {
  const auto reason =
      fmt::format("wrong chain id {} (the profile says {}), seen by this request's chain id check",
                  seen, run.chain.chain_id);
  for (Item* item : round.group) {
    item->out.excluded.push_back({round.cand.provider->id, reason, 0, ExclusionKind::chain_id});
    if (++item->next >= item->plan.candidates.size())
      finish_unavailable(*item, run.chain, "no eligible provider");
  }
}

}  // namespace rpcroute
