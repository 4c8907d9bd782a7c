#include <algorithm>
#include <cmath>
#include <vector>

#include "rpcroute/metrics.hpp"

namespace rpcroute {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

LatencyStats summarize(const std::deque<Sample>* samples, std::int64_t now_ms, std::int64_t window_ms) {
  LatencyStats s;
  if (samples == nullptr) return s;
  std::vector<double> latencies;
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
  if (!latencies.empty()) s.p50_ms = quantile(std::move(latencies), 0.5);
  return s;
}

}  // namespace rpcroute
