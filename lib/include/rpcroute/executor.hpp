#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/hedge.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/planner.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

struct Exchange;

/// One exchange with one provider, as the caller of the router sees it.
struct AttemptRecord {
  std::string provider;
  Classification result;
  long http_status = 0;
  double latency_ms = 0;
  TransportKind transport = TransportKind::http;
};

/// The answer to one call.
struct CallOutcome {
  enum class Status { result, rpc_error, unavailable, invalid, local };
  Status status = Status::result;
  std::string response;  // complete JSON-RPC response with the client's id; empty for notifications
  std::string result;    // raw result (result and local)
  std::string error;     // raw error object (rpc_error, unavailable, invalid)
  std::string provider;  // who answered; empty when nobody did
  TransportKind transport = TransportKind::http;  // how the answer came (issue 18)
  double upstream_latency_ms = 0;
  std::vector<AttemptRecord> attempts;
  std::vector<Exclusion> excluded;
  std::int64_t retry_after_ms = -1;
  std::string unavailable_reason;  // unavailable: why ("no eligible provider", "deadline of 1500 ms
                                   // exceeded")
  Strategy strategy = Strategy::load_balanced;
  /// eth_blockNumber: the provider answered this lower height; the answer was raised to the
  /// high-water mark so that it never goes backwards.
  std::optional<std::uint64_t> raised_from;
  bool broadcast = false;  // sent to every eligible provider at once
  /// A hedge fired (issue 19): the next candidate was asked while the first attempt was slow, and
  /// which of the two gave the answer (neither: both failed, or the call went on elsewhere).
  enum class Hedge : std::uint8_t { none, first_won, hedge_won, neither };
  Hedge hedge = Hedge::none;
  /// The answering provider's last observed height after the answer (X-Rpcroute-Block); 0 unknown.
  /// A split eth_getLogs: the lowest among the providers of its parts.
  std::uint64_t provider_height = 0;
  /// A `null` from a provider behind the height the lookup needs was asked again of a provider at
  /// or past it (issue 19): how many times (X-Rpcroute-Empty-Retries, `--json` meta).
  int empty_retries = 0;
};

/// "first", "hedge", "neither" ("" for none): headers, --json meta and /metrics say it so.
[[nodiscard]] std::string_view hedge_name(CallOutcome::Hedge h);

/// Runs the calls of one request through their plans: batches calls bound for the same provider,
/// sends through the transport, classifies, records what happened to health, and fails over as
/// judge() decides. Everything it learns (heights, filters, archival, sticky senders) goes to the
/// health store and the process's traffic, which the planner reads.
///
///   Executor executor(profile, planner, transport, store, clock, rng, traffic);
///   auto answers = co_await executor.route(chain, body.calls, {});
class Executor {
 public:
  Executor(const Profile& profile, Planner& planner, Transport& transport, HealthStore& store,
           const Clock& clock, Random& rng, LocalTraffic& traffic);

  /// Routes calls (one, or the items of a batch) on one chain. Answers come back in call order.
  [[nodiscard]] asio::awaitable<std::vector<CallOutcome>> route(
      const Chain& chain, std::span<const jsonrpc::Call> calls, RouteOptions options);

  /// Waits for work that outlives route(): the remaining sends of a broadcast. Call before exit.
  [[nodiscard]] asio::awaitable<void> drain();

  struct Item;
  struct Round;
  struct Broadcast;

 private:
  struct Run;
  /// Answers a call that needs no provider (invalid, eth_chainId); false when it needs one.
  bool answer_locally(const Run& run, const jsonrpc::Call& call, CallOutcome& out) const;
  /// Every provider of the chain was seen on another chain: eth_chainId is then planned like any
  /// call (and refused with the wrong ids), not answered with the profile's id.
  [[nodiscard]] bool every_provider_elsewhere(const Chain& chain) const;
  /// The quota wait before a call whose every provider is over its quota, or nullopt.
  [[nodiscard]] std::optional<std::int64_t> quota_wait(const Plan& plan,
                                                       std::int64_t deadline_us) const;
  void planned(const Run& run, Item& item);
  /// The next provider and the calls bound for it; false when every call is done.
  bool next_round(Run& run, std::vector<Item>& items, Round& round);
  [[nodiscard]] HttpRequest start_round(const Run& run, Round& round);
  void settle_round(const Run& run, Round& round, HttpResponse answer);
  /// settle_round's two halves: classify an answer (not cancelled), then record what it teaches
  /// and, when `judge_calls`, judge its calls (a hedge's answer that came too late is only
  /// recorded).
  [[nodiscard]] Exchange classify_round(const Run& run, const Round& round, HttpResponse answer);
  void settle_exchange(const Run& run, Round& round, Exchange& ex, bool judge_calls);
  /// An attempt that was abandoned: it leaves the traffic counts, nothing is recorded.
  void forget_round(const Round& round);
  /// The hedge settings for this round, or null when it is not hedged (hedge.cpp).
  [[nodiscard]] const HedgeConfig* hedge_for(const Run& run, const Round& round) const;
  // chain_check.cpp: RouteOptions::verify_chain_id. Before a round: false when the provider is on
  // another chain (its calls moved on); may ask it alone, else marks the round to ask in its batch.
  [[nodiscard]] asio::awaitable<bool> check_chain(const Run& run, Round& round);
  /// The provider's chain id can be asked in a round's batch (it takes batches of two).
  [[nodiscard]] bool asks_in_batch(const Candidate& cand) const;
  [[nodiscard]] bool chain_unknown(const Candidate& cand) const;
  /// After a round that asked: the other chain id the provider is on, learned; else nullopt.
  std::optional<std::uint64_t> other_chain(const Run& run, const Round& round, const Exchange& ex);
  /// A round answered from another chain: recorded for health, its answers neither judged nor
  /// delivered.
  void settle_other_chain(Round& round, const Exchange& ex);
  /// After a round that asked: false when the provider is on another chain (its calls moved on).
  bool settle_chain_check(const Run& run, Round& round, const Exchange& ex);
  /// The chain id the answer to call `index` gives, remembered with the probe's findings.
  std::optional<std::uint64_t> learn_chain_id(const Candidate& cand, const Exchange& ex,
                                              std::size_t index);
  void skip_wrong_chain(const Run& run, Round& round, std::uint64_t seen);
  /// The round's attempt, and a second one on the next candidate if the first is slow; the
  /// first good answer is settled, the other attempt cancelled and forgotten (hedge.cpp).
  [[nodiscard]] asio::awaitable<void> hedged_round(const Run& run, Round& first,
                                                   HttpRequest request, const HedgeConfig& config);
  void settle_item(const Run& run, const Round& round, Exchange& ex, std::size_t g,
                   std::int64_t now);
  void deliver(const Run& run, const Round& round, Exchange& ex, std::size_t g, std::int64_t now);
  // not_yet.cpp (issue 19): a `null` from a provider behind the height the lookup needs.
  /// True when call `g`'s null answer is not final: its item moved on to a candidate known at or
  /// past that height, the null held.
  bool retry_not_yet(const Run& run, const Round& round, const Exchange& ex, std::size_t g);
  /// The height a lookup's answer needs (its block number, else the chain's best height); 0 none.
  [[nodiscard]] std::uint64_t not_yet_height(const Chain& chain, const Item& item,
                                             std::int64_t now) const;
  /// Ends the call with the null it holds; false when it holds none.
  static bool deliver_held_null(Item& item);
  /// The chain's best known height: the head rule's, or the high-water mark when fresh, higher and
  /// still supported; 0 when nothing is known.
  [[nodiscard]] std::uint64_t best_height(const Chain& chain, std::int64_t now) const;
  /// `rewrite_latest` (tag_rewrite.cpp): the item's `latest` sent as the chain's best height.
  void rewrite_latest(const Chain& chain, Item& item) const;

  void finish_unavailable(Item& item, const Chain& chain, std::string_view why);
  /// What a success teaches (heights, the high-water mark, filters, archival, the sticky sender);
  /// `result` is a view into the answer. Raising an eth_blockNumber answer sets out.raised_from and
  /// out.result.
  void on_success(const Chain& chain, const Candidate& cand, Item& item, std::int64_t now,
                  std::string_view result);
  void learn_height(const Chain& chain, const Candidate& cand, Item& item, std::int64_t now,
                    std::string_view result);
  [[nodiscard]] Classification scrubbed(const Classification& c) const;

  [[nodiscard]] asio::awaitable<void> route_broadcast(const Chain& chain, Item& item,
                                                      std::int64_t deadline_us);
  [[nodiscard]] asio::awaitable<void> broadcast_send(std::shared_ptr<Broadcast> b,
                                                     const Chain* chain, Candidate cand,
                                                     std::string method, std::string params,
                                                     std::int64_t deadline_us);

  const Profile& profile_;
  Planner& planner_;
  Transport& transport_;
  HealthStore& store_;
  const Clock& clock_;
  Random& rng_;
  LocalTraffic& traffic_;
  bool hedges_ = false;  // some chain or method override hedges (profile_hedges)
  // A budget per chain and hedge settings. Not by the settings' address: a plan holds a copy of
  // its method's policy, so that address was new on every call, and so was the budget (a full
  // burst each time: never capped).
  using HedgeKey = std::tuple<const Chain*, double, std::int64_t, std::int64_t, double>;
  std::map<HedgeKey, HedgeBudget> hedge_budgets_;
  int background_ = 0;                         // broadcast sends still in flight
  std::optional<asio::steady_timer> drained_;  // woken when background_ reaches 0
};

}  // namespace rpcroute
