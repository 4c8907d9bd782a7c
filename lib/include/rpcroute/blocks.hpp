#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "rpcroute/config.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute {

/// One block a request names: a tag, a number, or a hash (EIP-1898 or eth_getLogs blockHash).
struct BlockRef {
  enum class Kind { latest, pending, safe, finalized, earliest, number, hash };
  Kind kind = Kind::latest;
  std::uint64_t number = 0;  // Kind::number

  [[nodiscard]] bool is_head_relative() const {
    return kind == Kind::latest || kind == Kind::pending || kind == Kind::safe || kind == Kind::finalized;
  }
};

/// What a request needs of a chain's history (DESIGN.md section 8): the block it reads, or for
/// eth_getLogs the range it scans. Methods without a block parameter need nothing.
struct BlockNeed {
  std::optional<BlockRef> block;  // the single block parameter, when the method has one
  std::optional<BlockRef> from;   // eth_getLogs
  std::optional<BlockRef> to;     // eth_getLogs
  [[nodiscard]] bool any() const { return block || from || to; }
};

/// Reads the block parameter of `method` from its raw params (a JSON array). A missing optional
/// parameter is `latest`, as nodes assume; params that cannot be read yield no need (the provider
/// will answer the error).
[[nodiscard]] BlockNeed analyze_block_need(std::string_view method, std::string_view params);

/// Where in the params array a method's block parameter sits, or -1 (exposed for tests).
[[nodiscard]] int block_param_index(std::string_view method);

/// How long a height observation says something about now: max(60 s, 5 block times).
[[nodiscard]] std::int64_t height_horizon_ms(const Chain& chain);

/// An observed height moved forward by the blocks the chain has likely made since, counting at most
/// height_horizon_ms of elapsed time. Observations older than the horizon are not estimated from.
[[nodiscard]] std::uint64_t estimate_height(const Height& h, std::int64_t now_ms, const Chain& chain);
[[nodiscard]] bool height_fresh(const Height& h, std::int64_t now_ms, const Chain& chain);

/// The best height known for a chain: the greatest fresh observation among the high-water mark
/// and the providers on the right chain, as observed (not moved forward: a chain that stopped, like
/// an idle anvil, must not make a fresh observation look behind an older one). 0: nothing fresh.
[[nodiscard]] std::uint64_t best_known_height(const State& state, const Profile& profile, const Chain& chain,
                                              std::int64_t now_ms);

/// The lowest block a request reads, resolved against the head (0 for `earliest`); nullopt when it
/// reads only the head, a hash, or the head is unknown.
[[nodiscard]] std::optional<std::uint64_t> oldest_block(const BlockNeed& need, std::uint64_t head);
/// The highest block number a request names explicitly (by number), or nullopt.
[[nodiscard]] std::optional<std::uint64_t> highest_numbered_block(const BlockNeed& need);
/// The eth_getLogs range size in blocks (to - from + 1), resolving tags against the head; nullopt
/// when unknown (a tag without a known head, a blockHash query).
[[nodiscard]] std::optional<std::uint64_t> log_range_blocks(const BlockNeed& need, std::uint64_t head);

/// Records one height observation of a provider and judges its lag against the chain's head: it
/// marks when the provider fell more than max_lag_blocks behind, clears the mark when it caught up,
/// and trips its breaker (reason "lag: ...") once it has stayed behind longer than lag_trip_ms.
/// Every height a process learns (answers, probes, the sidecar's poll) goes through here.
/// `key`: the provider's state key when the caller has it (the router does), else computed.
void observe_height(StateStore& store, const Profile& profile, const Chain& chain, const Provider& provider,
                    const Height& height, double jitter, std::string_view key = {});
/// The judgement half of observe_height() on the provider's latest known height, for callers that
/// record several heights at once first (probe judges after every provider has answered).
void judge_lag(StateStore& store, const Profile& profile, const Chain& chain, const Provider& provider, double jitter,
               std::string_view key = {});

}  // namespace rpcroute
