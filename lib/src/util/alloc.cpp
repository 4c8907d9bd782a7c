// Global operator new/delete with per-thread free lists (see rpcroute/alloc.hpp).
//
// Layout of a block: [16-byte header: class index | user bytes]. The header is written once when
// the block comes from malloc; a cached block keeps it, and its first user word links the free
// list. Blocks above kMaxCached, and every block once the thread's cache has been torn down, carry
// the class kUncached and go straight back to free().

#include "rpcroute/alloc.hpp"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace rpcroute::alloc {
namespace {

constexpr std::uint32_t kUncached = 0xffffffffu;
static_assert(class_of(kMaxCached) == kClasses - 1 && class_size(kClasses - 1) == kMaxCached);
static_assert(class_size(class_of(1)) == 16 && class_size(class_of(1025)) == 1280);

struct Block {
  Block* next;
};

constexpr auto kClassSize = [] {
  std::array<std::uint32_t, kClasses> t{};
  for (std::size_t k = 0; k < kClasses; ++k) t[k] = static_cast<std::uint32_t>(class_size(k));
  return t;
}();

// Trivially constructible and destructible: usable before main and after the thread's other
// thread_local objects are gone, with no guard on the fast path.
struct Cache {
  Block* head[kClasses];
  std::size_t count[kClasses];
  std::size_t bytes;
  // 0 until the thread's first cached block arms the reaper, 1 while caching, 2 once torn down at
  // thread exit (everything goes to free() from then on): one compare on the fast paths.
  unsigned char mode;
};
constexpr unsigned char kUnarmed = 0, kActive = 1, kDead = 2;
thread_local Cache t_cache;

void drain(Cache& c) {
  for (std::size_t k = 0; k < kClasses; ++k) {
    while (Block* b = c.head[k]) {
      c.head[k] = b->next;
      std::free(reinterpret_cast<char*>(b) - kHeader);
    }
    c.count[k] = 0;
  }
  c.bytes = 0;
}

// Armed on a thread's first cached block: returns the cache to malloc when the thread ends.
struct Reaper {
  ~Reaper() {
    drain(t_cache);
    t_cache.mode = kDead;
  }
};

[[gnu::noinline]] void arm_reaper() {
  t_cache.mode = kActive;
  static thread_local Reaper reaper;
  (void)&reaper;
}

[[gnu::noinline]] void* from_malloc(std::size_t bytes, std::uint32_t cls) {
  if (bytes > SIZE_MAX - kHeader) throw std::bad_alloc();
  for (;;) {
    if (void* raw = std::malloc(bytes + kHeader)) {
      *static_cast<std::uint32_t*>(raw) = cls;
      return static_cast<char*>(raw) + kHeader;
    }
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

inline void* allocate(std::size_t n) {
  Cache& c = t_cache;
  if (n <= kMaxCached && c.mode != kDead) [[likely]] {
    const std::size_t k = class_of(n);
    if (Block* b = c.head[k]) {
      c.head[k] = b->next;
      --c.count[k];
      c.bytes -= kClassSize[k];
      return b;
    }
    return from_malloc(kClassSize[k], static_cast<std::uint32_t>(k));
  }
  return from_malloc(n, kUncached);
}

[[gnu::noinline]] void release_slow(void* p) noexcept;

inline void release(void* p) noexcept {
  if (!p) return;
  const std::uint32_t k = *reinterpret_cast<const std::uint32_t*>(static_cast<char*>(p) - kHeader);
  Cache& c = t_cache;
  if (k != kUncached && c.mode == kActive && c.bytes + kClassSize[k] <= kCacheBudget) [[likely]] {
    Block* b = static_cast<Block*>(p);
    b->next = c.head[k];
    c.head[k] = b;
    ++c.count[k];
    c.bytes += kClassSize[k];
    return;
  }
  release_slow(p);
}

/// The first block a thread frees (arms the reaper, then caches it), and every block that is not
/// cached: too large, over budget, or after the thread's cache is gone.
void release_slow(void* p) noexcept {
  Cache& c = t_cache;
  if (c.mode == kUnarmed) {
    arm_reaper();
    release(p);
    return;
  }
  std::free(static_cast<char*>(p) - kHeader);
}

}  // namespace

Stats thread_stats() {
  Stats s;
  s.active = true;
  s.cached_bytes = t_cache.bytes;
  for (std::size_t k = 0; k < kClasses; ++k) s.cached_blocks += t_cache.count[k];
  return s;
}

}  // namespace rpcroute::alloc

// The replaceable forms. libstdc++'s array and nothrow forms call these; the aligned forms keep
// their own aligned_alloc/free pair and never meet these blocks.
void* operator new(std::size_t n) { return rpcroute::alloc::allocate(n); }
void* operator new[](std::size_t n) { return rpcroute::alloc::allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return rpcroute::alloc::allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return rpcroute::alloc::allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { rpcroute::alloc::release(p); }
void operator delete[](void* p) noexcept { rpcroute::alloc::release(p); }
void operator delete(void* p, std::size_t) noexcept { rpcroute::alloc::release(p); }
void operator delete[](void* p, std::size_t) noexcept { rpcroute::alloc::release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { rpcroute::alloc::release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { rpcroute::alloc::release(p); }
