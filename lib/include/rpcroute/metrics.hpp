#pragma once
#include <cstdint>
#include <deque>
#include <span>

#include "rpcroute/state.hpp"

namespace rpcroute {

/// What the latency strategies know about one method on one provider, over a window.
struct LatencyStats {
  int calls = 0;              // attempts in the window
  int answered = 0;           // attempts the provider answered (result or JSON-RPC error)
  double success_rate = 1.0;  // answered / calls; 1 without data
  double p50_ms = 0;          // median latency of answered attempts; 0 without data
  std::int64_t newest_ms = 0;
  int prior = 0;  // of `calls`, how many stand for the shared summary (with_prior())

  [[nodiscard]] bool has_latency() const { return answered > 0; }
};

[[nodiscard]] LatencyStats summarize(const std::deque<Sample>* samples, std::int64_t now_ms,
                                     std::int64_t window_ms);

/// This host's own figures with what all hosts on one Redis measured as a prior (issue 20): the
/// shared summary stands for min_calls - own.calls attempts (at most its own count), at its
/// success rate and median, so a host with no samples ranks by what the others saw, and its own
/// samples take over entirely once it has min_calls of them. Null or empty `shared`: `own`.
[[nodiscard]] LatencyStats with_prior(const LatencyStats& own, const SharedLatency* shared,
                                      int min_calls);

/// Quantile q in [0, 1] of a non-empty sample set (nearest-rank on a sorted copy).
[[nodiscard]] double quantile(std::vector<double> values, double q);
/// The same, reordering `values` (no copy).
[[nodiscard]] double quantile_in_place(std::span<double> values, double q);

}  // namespace rpcroute
