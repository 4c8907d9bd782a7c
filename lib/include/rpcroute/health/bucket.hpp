#pragma once
#include <cstdint>

#include "rpcroute/config.hpp"

namespace rpcroute {

/// A quota token bucket (DESIGN.md section 6) as data, so that processes share it. t_ms 0: never
/// drawn from, i.e. full.
struct Bucket {
  double tokens = 0;
  std::int64_t t_ms = 0;
};

/// Tokens in a bucket at `now_ms`: refilled at `quota.rps` up to `quota.burst`. May be negative
/// when several processes overdrew it; it then refills from below zero.
[[nodiscard]] double bucket_level(const Bucket& b, const Quota& quota, std::int64_t now_ms);
/// Milliseconds until the bucket holds a whole token (0 when it does).
[[nodiscard]] std::int64_t bucket_wait_ms(const Bucket& b, const Quota& quota, std::int64_t now_ms);

}  // namespace rpcroute
