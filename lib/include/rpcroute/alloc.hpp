#pragma once
// The binary's global operator new/delete (lib/src/util/alloc.cpp): every thread keeps the blocks
// it frees, up to 4 KiB each and kCacheBudget bytes in all, on free lists by size class and hands
// them out again before asking malloc. A request through the sidecar allocates and frees the same
// shapes every time (coroutine frames of 1–2 KiB, which glibc's tcache does not hold, strings,
// vectors); reusing them takes the allocator off the hot path. Blocks are plain malloc blocks with
// a 16-byte header that names their class, so any thread may free any block.
//
// Linked into `rpcroute` and the unit tests; not into sanitizer builds, whose own allocator must
// see every allocation, nor when configured with -DRPCROUTE_CACHING_NEW=OFF (to measure without
// it).

#include <cstddef>

namespace rpcroute::alloc {

inline constexpr std::size_t kHeader = 16;     // keeps __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16)
inline constexpr std::size_t kSmallStep = 16;  // classes of 16 bytes up to kSmallMax
inline constexpr std::size_t kSmallMax = 1024;
inline constexpr std::size_t kLargeStep = 256;  // then of 256 bytes up to kMaxCached
inline constexpr std::size_t kMaxCached = 4096;
inline constexpr std::size_t kClasses =
    kSmallMax / kSmallStep + (kMaxCached - kSmallMax) / kLargeStep;
inline constexpr std::size_t kCacheBudget = 4u << 20;  // bytes of freed blocks a thread may keep

constexpr std::size_t class_of(std::size_t n) {
  if (n == 0) n = 1;
  return n <= kSmallMax ? (n - 1) / kSmallStep
                        : kSmallMax / kSmallStep + (n - kSmallMax - 1) / kLargeStep;
}
constexpr std::size_t class_size(std::size_t c) {
  return c < kSmallMax / kSmallStep ? (c + 1) * kSmallStep
                                    : kSmallMax + (c + 1 - kSmallMax / kSmallStep) * kLargeStep;
}

struct Stats {
  bool active = false;           // this binary uses the caching operator new
  std::size_t cached_bytes = 0;  // this thread's free lists
  std::size_t cached_blocks = 0;
};
Stats thread_stats();  // defined by alloc.cpp; only call where it is linked

}  // namespace rpcroute::alloc
