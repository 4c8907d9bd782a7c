#pragma once
// The background watch of providers (DESIGN.md section 11), usable without the sidecar: a head
// poller per provider that keeps heights, latency and breakers fresh between client requests, and a
// recovery probe that closes an open breaker as soon as a provider answers again when no provider
// of its chain is usable. The sidecar only schedules them (Server::run).

#include <cstdint>
#include <optional>
#include <string_view>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

struct FinalityVotes;  // blocks.hpp

/// One provider to watch and what to watch it with; all of it outlives the loops.
struct PollTarget {
  Transport& transport;
  HealthStore& store;
  const Clock& clock;
  Random& rng;
  const Profile& profile;
  const Chain& chain;
  const Provider& provider;
  /// The chain's finality votes, shared by the pollers of its providers (the sidecar holds one per
  /// chain); null: a finality report is judged alone (judge_finality()).
  FinalityVotes* votes = nullptr;
};

/// The poll interval: the chain's block time, within 1 s and 30 s.
[[nodiscard]] std::int64_t poll_interval_ms(const Chain& chain);
/// A poll's timeout: the provider's, at most 5 s and at most the interval (at least 2 s), so that
/// a silent node is noticed within a couple of block times.
[[nodiscard]] std::int64_t poll_timeout_ms(const Provider& provider, std::int64_t interval_ms);
/// The wait after a failed poll: doubled, but not beyond the breaker's recovery time (within the
/// interval and 60 s), because these polls are what closes a half-open breaker when clients are
/// all served by healthier providers.
[[nodiscard]] std::int64_t poll_backoff_ms(std::int64_t wait_ms, std::int64_t interval_ms,
                                           const HealthConfig& health);
/// The recovery probe's waits: 250 ms first, doubled after each failure up to 1 s.
inline constexpr std::int64_t kRecoveryFirstMs = 250;
inline constexpr std::int64_t kRecoveryMaxMs = 1'000;
[[nodiscard]] std::int64_t recovery_backoff_ms(std::int64_t wait_ms);
/// While a provider that answered its last poll is waiting for the next, the poller looks this
/// often whether traffic saw it fail since: if so it polls at once (probe on failure), and a poll
/// that fails after a success is retried this soon, so that /healthz turns within a couple of
/// seconds.
inline constexpr std::int64_t kWatchSliceMs = 250;

/// How long a provider's last success vouches for it on /healthz: three poll intervals and a
/// poll's timeout (5 s on a chain of 1 s blocks, 41 s on one of 12 s blocks).
[[nodiscard]] std::int64_t liveness_window_ms(const Chain& chain, const Provider& provider);
/// Why a provider does not count as up for /healthz, or empty when it does: its breaker closed
/// (half-open is not up until a probe succeeds), its last exchange a success and, when `fresh`
/// (the background polls keep a live provider's success fresh), that success within
/// liveness_window_ms.
[[nodiscard]] std::string liveness_problem(const ProviderState* state, const Chain& chain,
                                           const Provider& provider, std::int64_t now_ms,
                                           bool fresh);

/// When every provider of the chain was seen on another chain than the profile's: the warning
/// `serve` prints once the first probes are in ("every provider of chain 'x' is on another
/// chain ..."); else empty.
[[nodiscard]] std::string wrong_chain_warning(const HealthView& view, const Profile& profile,
                                              const Chain& chain);

/// Some provider of the chain was seen on the profile's chain id.
[[nodiscard]] bool chain_id_confirmed(const HealthView& view, const Profile& profile,
                                      const Chain& chain);

/// Every provider of the chain has its breaker open at `now_ms`.
[[nodiscard]] bool no_provider_usable(const HealthView& view, const Profile& profile,
                                      const Chain& chain, std::int64_t now_ms);

/// One eth_blockNumber to the provider, recorded like live traffic; a height it answers is
/// observed (observe_height). True when the provider answered.
[[nodiscard]] asio::awaitable<bool> poll_head_once(const PollTarget& target,
                                                   std::int64_t timeout_ms,
                                                   RecordOptions options = {});

/// The `number` of a block object (an eth_getBlockByNumber answer); nullopt for null or anything
/// else.
[[nodiscard]] std::optional<std::uint64_t> block_object_number(std::string_view block_json);

/// When the poller asks a provider for its `safe` and `finalized` blocks: at the first poll, then
/// whenever its head has moved kFinalityStepBlocks since (finality moves by epochs, not blocks),
/// and every kFinalityEveryPolls polls anyway; a provider that answered neither tag is asked half
/// as often each time, down to one poll in 8 × kFinalityEveryPolls.
inline constexpr std::uint64_t kFinalityStepBlocks = 8;
inline constexpr int kFinalityEveryPolls = 32;
struct FinalityPace {
  bool asked = false;
  std::uint64_t last_head = 0;
  int polls = 0;   // head polls since the last finality poll
  int misses = 0;  // finality polls in a row that learned nothing
  [[nodiscard]] bool due(std::uint64_t head) const;
  void done(std::uint64_t head, bool answered);
};

/// eth_getBlockByNumber("safe") and ("finalized") to the provider; what it answers is judged by
/// judge_finality() (the head rule, and the quorum of `votes`) and recorded as a FinalityEvent on
/// the chain (a tag it does not know is left out). True when either was answered.
[[nodiscard]] asio::awaitable<bool> poll_finality_once(const PollTarget& target,
                                                       std::int64_t timeout_ms);

/// A full probe first (chain id, archive, batch), then the head at the chain's block time, backing
/// off while it fails, until `stop` is true (read after every wait).
[[nodiscard]] asio::awaitable<void> poll_provider(PollTarget target, const bool& stop);
/// While no provider of the chain is usable, probes this one if its breaker is open, backing off
/// from 250 ms to 1 s; a success closes the breaker. Until `stop` is true.
[[nodiscard]] asio::awaitable<void> recover_provider(PollTarget target, const bool& stop);

}  // namespace rpcroute
