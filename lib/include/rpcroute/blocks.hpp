#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"

namespace rpcroute {

struct Exchange;
struct UpstreamCall;

/// One block a request names: a tag, a number, or a hash (EIP-1898 or eth_getLogs blockHash).
struct BlockRef {
  enum class Kind { latest, pending, safe, finalized, earliest, number, hash };
  Kind kind = Kind::latest;
  std::uint64_t number = 0;  // Kind::number

  [[nodiscard]] bool is_head_relative() const {
    return kind == Kind::latest || kind == Kind::pending || kind == Kind::safe ||
           kind == Kind::finalized;
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
[[nodiscard]] std::uint64_t estimate_height(const Height& h, std::int64_t now_ms,
                                            const Chain& chain);
[[nodiscard]] bool height_fresh(const Height& h, std::int64_t now_ms, const Chain& chain);

/// Where a chain observed at `h` stands at `t_ms`: moved forward by the blocks likely made since
/// (capped at the horizon), never back when `t_ms` is earlier.
[[nodiscard]] std::uint64_t height_at(const Height& h, std::int64_t t_ms, const Chain& chain);

/// How far a height may stand above what the other providers support before it is not believed:
/// max(1000 blocks, one hour of blocks). Dev chains mine hundreds at once; no honest node leads by
/// more than an hour.
[[nodiscard]] std::uint64_t jump_allowance(const Chain& chain);
/// No chain is this long (2^40 blocks: 8 700 years at 4 blocks a second): a head above it is a lie.
inline constexpr std::uint64_t kMaxPlausibleHeight = 1ULL << 40;

/// One provider's latest height, as the head rule sees it.
struct HeadClaim {
  Height height;       // t_ms 0: none
  bool counts = true;  // it may set the head (right chain; breaker not open where that matters)
};

/// What the head rule made of one claim.
enum class ClaimVerdict {
  none,         // no fresh height, or it does not count
  believed,     // part of the chain's head
  absurd,       // above kMaxPlausibleHeight
  implausible,  // more than jump_allowance above what the other providers support
  unconfirmed,  // 3+ providers: ahead of the head a quorum reaches by more than max_lag_blocks
};
[[nodiscard]] constexpr bool quarantined(ClaimVerdict v) {
  return v == ClaimVerdict::absurd || v == ClaimVerdict::implausible ||
         v == ClaimVerdict::unconfirmed;
}

struct ClaimJudgement {
  ClaimVerdict verdict = ClaimVerdict::none;
  std::uint64_t base = 0;  // implausible: the height the others support; unconfirmed: the head
};

/// The chain's head by one rule for the router, lag judgements, probe and the sidecar (DECISIONS.md
/// "One head"). Among fresh counting claims: absurd ones and those more than jump_allowance above
/// the (lower) median of the others are not believed; the head is the highest believed height that
/// half of the believed claims (at least one; two of three) reach within max_lag_blocks, each moved
/// forward to the claim's time. With three or more, a claim alone ahead of that head is
/// unconfirmed.
///
///   auto head = chain_head(claims, judgements, chain, now);  // head.head: a real observation
struct ChainHead {
  std::optional<Height> head;
  std::size_t believed = 0;
};
[[nodiscard]] ChainHead chain_head(std::span<const HeadClaim> claims,
                                   std::span<ClaimJudgement> judgements, const Chain& chain,
                                   std::int64_t now_ms);

/// Blocks `h` stands behind `head`, like for like: `h` moved forward to the head's time when it was
/// seen earlier (the benefit of the doubt), never the other way (an idle chain does not move).
/// Negative when ahead. Depends on the two observations only, not on now: a lag lasts while both
/// are fresh.
[[nodiscard]] std::int64_t lag_behind(const Height& h, const Height& head, const Chain& chain);

/// The claims of a chain's providers in `view` (in profile order). `with_open`: providers whose
/// breaker is open count too (for the never-backwards mark: a dead provider's height still
/// happened).
void head_claims(std::vector<HeadClaim>& out, const HealthView& view, const Profile& profile,
                 const Chain& chain, std::int64_t now_ms, bool with_open);

/// The best height known for a chain: chain_head() over the providers whose breaker is not open,
/// else the fresh high-water mark; 0 when nothing is fresh. `key`: the chain's chain_key() when the
/// caller has it (the sidecar does), else computed.
[[nodiscard]] std::uint64_t best_known_height(const HealthView& view, const Profile& profile,
                                              const Chain& chain, std::int64_t now_ms,
                                              std::string_view key = {});

/// The chain's head seen elsewhere than on `provider` (the WebSocket stall detector's "the head
/// moved on"): the highest claim of another provider that chain_head() believes, judged among every
/// provider whose breaker is not open (`provider` too: leaving it out would leave two, and a liar
/// of two within the jump allowance is believed), or the fresh high-water mark (raised by believed
/// heights only) when higher; 0 when neither. `key`: the chain's chain_key().
[[nodiscard]] std::uint64_t head_elsewhere(const HealthView& view, const Profile& profile,
                                           const Chain& chain, const Provider& provider,
                                           std::string_view key, std::int64_t now_ms);

/// What each provider of a chain last reported of `safe` and `finalized` (profile order), for the
/// quorum a chain's finality marks need. In memory only, held by whoever runs the chain's pollers
/// (the sidecar: one per chain): after a restart each provider is asked again at its first poll.
struct FinalityVotes {
  struct Vote {
    bool asked = false;  // not yet: counts as reaching nothing while its head is believed
    Height safe;         // t_ms 0: not reported (that tag unanswered, or above the head)
    Height finalized;
  };
  std::vector<Vote> by_provider;
};

/// The marks a quorum of votes reach, per tag: among the providers whose head claim chain_head()
/// believes (`judgements`), those that reported the tag, or were not asked yet (they reach
/// nothing), the value more than half reach — the lower median: one alone, the lower of two, two
/// of three, three of four. Height{} when that is nothing.
struct FinalityMarks {
  Height safe;
  Height finalized;
};
[[nodiscard]] FinalityMarks finality_quorum(std::span<const FinalityVotes::Vote> votes,
                                            std::span<const ClaimJudgement> judgements);

/// What `provider` reported of `safe` and `finalized` (t_ms 0: not answered), judged by the head
/// rule now (DECISIONS.md "Finality follows the head"): nothing when chain_head() does not believe
/// its own head claim (absurd, a jump, unconfirmed, none fresh, breaker open, another chain); a
/// tag above the chain's believed head (moved forward to now) is left out; with `votes`, the
/// report becomes the provider's vote and the event carries the quorum's marks
/// (finality_quorum()). The event's `head` is the believed head: a chain mark above it is dropped
/// (apply_event), so that a mark from before this rule does not keep poisoning the cache.
[[nodiscard]] std::optional<FinalityEvent> judge_finality(
    const HealthView& view, const Profile& profile, const Chain& chain, const Provider& provider,
    Height safe, Height finalized, FinalityVotes* votes, std::int64_t now_ms);

/// Whether the high-water mark is still where the providers are: within max_lag_blocks of the head
/// of every fresh claim (open breakers included: a dead provider's height still happened). A mark
/// they no longer reach — a restarted or reset chain, or a lone liar's height — is not raised to.
[[nodiscard]] bool mark_supported(const HealthView& view, const Profile& profile,
                                  const Chain& chain, const Height& mark, std::int64_t now_ms);

/// Raises the chain's never-backwards mark to `height`, which `provider` was seen at (the
/// sidecar's head poll), when mark_supported() believes it and the provider is not on another
/// chain: the same rule as a client's `latest` block answer. Returns whether it recorded it.
bool raise_mark(HealthStore& store, const Profile& profile, const Chain& chain,
                const Provider& provider, const Height& height);

/// Checks the eth_blockNumber answers in `ex` before anyone believes them: one that chain_head()
/// would quarantine (absurd, a jump, unconfirmed) becomes a provider failure (bad_response), and
/// its height is recorded so that the provider stays quarantined while the claim is fresh. `key`:
/// the provider's state key. Returns whether an answer was refused.
bool refuse_doubtful_heads(HealthStore& store, const Profile& profile, const Chain& chain,
                           const Provider& provider, std::string_view key,
                           std::span<const UpstreamCall> calls, Exchange& ex, std::int64_t now_ms);

/// Why a quarantined claim is not believed, for exclusions and probe verdicts.
[[nodiscard]] std::string claim_doubt(const Height& h, const ClaimJudgement& j, const Chain& chain);

/// The lowest block a request reads, resolved against the head (0 for `earliest`); nullopt when it
/// reads only the head, a hash, or the head is unknown.
[[nodiscard]] std::optional<std::uint64_t> oldest_block(const BlockNeed& need, std::uint64_t head);
/// The highest block number a request names explicitly (by number), or nullopt.
[[nodiscard]] std::optional<std::uint64_t> highest_numbered_block(const BlockNeed& need);
/// The eth_getLogs range size in blocks (to - from + 1), resolving tags against the head; nullopt
/// when unknown (a tag without a known head, a blockHash query).
[[nodiscard]] std::optional<std::uint64_t> log_range_blocks(const BlockNeed& need,
                                                            std::uint64_t head);

/// Records one height observation of a provider and judges its lag against the chain's head
/// (chain_head, lag_behind): it marks when the provider fell more than max_lag_blocks behind,
/// clears the mark when it caught up, and trips its breaker (reason "lag: ...") once it has stayed
/// behind longer than lag_trip_ms. A provider whose claim is not believed is not judged for lag.
/// Every height a process learns (answers, probes, the sidecar's poll) goes through here.
/// `key`: the provider's state key when the caller has it (the router does), else computed.
void observe_height(HealthStore& store, const Profile& profile, const Chain& chain,
                    const Provider& provider, const Height& height, double jitter,
                    std::string_view key = {});
/// The judgement half of observe_height() on the provider's latest known height, for callers that
/// record several heights at once first (probe judges after every provider has answered).
void judge_lag(HealthStore& store, const Profile& profile, const Chain& chain,
               const Provider& provider, double jitter, std::string_view key = {});

}  // namespace rpcroute
