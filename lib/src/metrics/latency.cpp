#include <algorithm>
#include <cmath>
#include <vector>

#include "rpcroute/metrics.hpp"

namespace rpcroute {

double quantile_in_place(std::span<double> values, double q) {
  if (values.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  auto nth = values.begin() +
             static_cast<std::ptrdiff_t>(std::clamp<std::size_t>(rank, 1, values.size()) - 1);
  std::nth_element(values.begin(), nth, values.end());  // what a full sort would put there
  return *nth;
}

double quantile(std::vector<double> values, double q) { return quantile_in_place(values, q); }

LatencyStats summarize(const std::deque<Sample>* samples, std::int64_t now_ms,
                       std::int64_t window_ms) {
  LatencyStats s;
  if (samples == nullptr) return s;
  // Called for every provider of every plan by the latency strategies: one buffer per thread.
  thread_local std::vector<double> latencies;
  latencies.clear();
  for (auto it = samples->rbegin(); it != samples->rend(); ++it) {
    if (it->t_ms < now_ms - window_ms) break;  // time-ordered, newest last
    ++s.calls;
    s.newest_ms = std::max(s.newest_ms, it->t_ms);
    if (it->outcome == Outcome::success || it->outcome == Outcome::rpc_error) {
      ++s.answered;
      latencies.push_back(static_cast<double>(it->latency_us) / 1000.0);
    }
  }
  if (s.calls > 0) s.success_rate = static_cast<double>(s.answered) / s.calls;
  if (!latencies.empty()) s.p50_ms = quantile_in_place(latencies, 0.5);
  return s;
}

LatencyStats with_prior(const LatencyStats& own, const SharedLatency* shared, int min_calls) {
  if (shared == nullptr || shared->calls <= 0 || own.calls >= min_calls) return own;
  const int k = std::min(min_calls - own.calls, shared->calls);
  const double share = static_cast<double>(shared->answered) / shared->calls;
  const double prior_answered = k * share;
  LatencyStats out = own;
  out.prior = k;
  out.calls = own.calls + k;
  const double answered = own.answered + prior_answered;
  out.success_rate = answered / out.calls;
  out.answered = own.answered + static_cast<int>(std::lround(prior_answered));
  if (shared->answered > 0) {
    out.answered = std::max(out.answered, 1);
    out.p50_ms = (own.answered * own.p50_ms + prior_answered * shared->p50_ms) / answered;
  }
  out.newest_ms = std::max(own.newest_ms, shared->newest_ms);
  return out;
}

}  // namespace rpcroute
