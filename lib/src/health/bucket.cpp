#include "rpcroute/health/bucket.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

namespace rpcroute {

double bucket_level(const Bucket& b, const Quota& quota, std::int64_t now_ms) {
  if (b.t_ms == 0) return quota.burst;
  const double elapsed_s = static_cast<double>(std::max<std::int64_t>(0, now_ms - b.t_ms)) / 1000.0;
  return std::min(quota.burst, b.tokens + elapsed_s * quota.rps);
}

std::int64_t bucket_wait_ms(const Bucket& b, const Quota& quota, std::int64_t now_ms) {
  const double level = bucket_level(b, quota, now_ms);
  if (level >= 1.0) return 0;
  if (quota.rps <= 0) return INT64_MAX / 4;
  return static_cast<std::int64_t>(std::ceil((1.0 - level) / quota.rps * 1000.0));
}

}  // namespace rpcroute
