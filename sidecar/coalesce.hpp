#pragma once
// Coalescing (issue 19): identical reads in flight at once — same chain, method and canonical
// params (cache_key), started while the chain's head stood at the same height — share one upstream
// request. The first is routed; the others wait for it and get its answer under their own ids, so
// a failure is one failure (one health event), not one per client. When the first cannot answer
// for them (its client left, an internal error), the first of them leads a new flight that the
// others join. The table is bounded (kMaxFlights; keys at most kMaxKeyParams of params).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/router.hpp"

namespace rpcroute::sidecar {

/// `response` (a JSON-RPC response this process wrote: {"jsonrpc":"2.0","id":OLD,...}) with the
/// id `new_id` instead of `old_id`; empty when it does not start that way.
[[nodiscard]] std::string reid_response(std::string_view response, std::string_view old_id,
                                        std::string_view new_id);

/// Which of the calls may share a flight: a read the catalogue knows (not a send, not a filter
/// call, not a method outside the catalogue such as anvil_mine) that names something to read — a
/// block, a hash or a constant. Head reads without params (eth_blockNumber, eth_gasPrice) are
/// answered by nodes in microseconds and stay off this path; eth_chainId is answered from the
/// profile.
[[nodiscard]] bool coalescable(std::string_view method);

struct CoalesceStats {
  std::uint64_t leaders = 0;   // flights routed
  std::uint64_t joined = 0;    // calls answered by another call's flight
  std::uint64_t rerouted = 0;  // joined, but the flight could not answer for them
};

class Coalescer {
 public:
  /// At most this many flights at once; beyond, calls are routed on their own.
  static constexpr std::size_t kMaxFlights = 4096;

  /// Routes one call (`calls` holds exactly one, with an id) through `router`, or joins the flight
  /// of an identical call under `key` started at the same `head`. A flight at another head leaves
  /// the table to a new one; a flight that cannot answer for its followers (its client left)
  /// hands them to a new flight, led by the first of them.
  [[nodiscard]] asio::awaitable<std::vector<CallOutcome>> route(
      Router& router, const Chain& chain, std::span<const jsonrpc::Call> calls,
      const RouteOptions& options, std::string_view key, std::uint64_t head);

  [[nodiscard]] const CoalesceStats& stats() const { return stats_; }
  [[nodiscard]] std::size_t in_flight() const { return flights_.size(); }
  /// Calls waiting now for another call's flight.
  [[nodiscard]] std::size_t waiting() const { return waiting_; }

 private:
  struct Flight;
  std::unordered_map<std::string_view, std::shared_ptr<Flight>> flights_;  // keys in the flights
  CoalesceStats stats_;
  std::size_t waiting_ = 0;
};

}  // namespace rpcroute::sidecar
