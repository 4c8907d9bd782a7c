// Empty and not-yet results (issue 19): a `null` receipt, block or transaction from a provider
// that is behind the height where the client may have seen it is asked again of a provider known
// at or past that height before null is returned. And the `latest` tag rewrite, which sends reads
// at that same height.
#include <algorithm>

#include "executor_parts.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/methods.hpp"
#include "rpcroute/tag_rewrite.hpp"

namespace rpcroute {

namespace {

/// At most this many more providers are asked after a not-yet null (within the attempt limit and
/// the deadline).
constexpr int kMaxEmptyRetries = 2;

/// A provider's last observed height (not an estimate: "known at or past"); 0 when never seen.
std::uint64_t observed_block(const HealthView& view, std::string_view key) {
  const ProviderState* ps = view.provider(key);
  return ps != nullptr && ps->height.t_ms > 0 ? ps->height.block : 0;
}

}  // namespace

std::uint64_t Executor::not_yet_height(const Chain& chain, const Item& item,
                                       std::int64_t now) const {
  const auto& block = item.plan.need.block;
  if (block && block->kind == BlockRef::Kind::number) return block->number;
  // `earliest` every node has; a `pending` block is each node's own (null on some by design).
  if (block && (block->kind == BlockRef::Kind::earliest || block->kind == BlockRef::Kind::pending))
    return 0;
  // By hash (or a tag): the chain's best height. The hash may be in any block up to there.
  return best_height(chain, now);
}

std::uint64_t Executor::best_height(const Chain& chain, std::int64_t now) const {
  std::uint64_t best = best_known_height(store_, profile_, chain, now);
  if (const ChainState* cs = store_.chain(planner_.chain_key_for(chain));
      cs != nullptr && cs->high_water.block > best && height_fresh(cs->high_water, now, chain) &&
      mark_supported(store_, profile_, chain, cs->high_water, now)) {
    best = cs->high_water.block;
  }
  return best;
}

void Executor::rewrite_latest(const Chain& chain, Item& item) const {
  const std::uint64_t height = best_height(chain, clock_.now_ms());
  if (height == 0) return;  // nothing known: the tag goes as the client wrote it
  auto params = rewrite_latest_params(item.call->method, item.call->params, height);
  if (!params) return;
  item.rewritten = *item.call;
  item.rewritten.params = std::move(*params);
  item.call = &item.rewritten;
}

bool Executor::retry_not_yet(const Run& run, const Round& round, const Exchange& ex,
                             std::size_t g) {
  Item& item = *round.group[g];
  const jsonrpc::Reply* reply = ex.replies[g];
  if (reply == nullptr || !reply->result || *reply->result != "null") return false;
  if (!method_info(item.call->method).null_not_yet || !item.plan.policy.retry_empty) return false;
  if (item.out.empty_retries >= kMaxEmptyRetries ||
      static_cast<int>(item.out.attempts.size()) >= run.max_attempts)
    return false;
  const std::uint64_t wanted = not_yet_height(run.chain, item, clock_.now_ms());
  // A provider at or past the height said null: a genuine null.
  if (wanted == 0 || observed_block(store_, round.cand.key) >= wanted) return false;
  const auto& cands = item.plan.candidates;
  for (std::size_t k = item.next + 1; k < cands.size(); ++k) {
    if (observed_block(store_, cands[k].key) < wanted) continue;
    item.next = k;
    ++item.out.empty_retries;
    item.held_null_provider = round.cand.provider->id;
    item.held_null_latency_ms = ex.latency_ms();
    item.held_null_height = observed_block(store_, round.cand.key);
    return true;
  }
  return false;  // nobody known at the height: the null stands
}

bool Executor::deliver_held_null(Item& item) {
  if (!item.held_null_provider) return false;
  auto& out = item.out;
  item.done = true;
  out.status = CallOutcome::Status::result;
  out.provider = *item.held_null_provider;
  out.upstream_latency_ms = item.held_null_latency_ms;
  out.provider_height = item.held_null_height;
  out.error.clear();
  if (item.keep_result) out.result = "null";
  if (item.call->has_id()) out.response = jsonrpc::make_result(item.call->id, "null");
  return true;
}

}  // namespace rpcroute
