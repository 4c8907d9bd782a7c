// Global operator new/delete with per-thread free lists (see rpcroute/alloc.hpp).
//
// Layout of a block: [16-byte header: class index | user bytes]. The header is written once when
// the block comes from malloc; a cached block keeps it, and its first user word links the free list.
// Blocks above kMaxCached, and every block once the thread's cache has been torn down, carry the
// class kUncached and go straight back to free().

#include "rpcroute/alloc.hpp"

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

// Trivially constructible and destructible: usable before main and after the thread's other
// thread_local objects are gone, with no guard on the fast path.
struct Cache {
  Block* head[kClasses];
  std::size_t count[kClasses];
  std::size_t bytes;
  bool reaper_armed;
  bool dead; // torn down at thread exit: everything goes to free() from now on
};
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
    t_cache.dead = true;
  }
};

[[gnu::noinline]] void arm_reaper() {
  t_cache.reaper_armed = true;
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
  if (n <= kMaxCached && !c.dead) [[likely]] {
    const std::size_t k = class_of(n);
    if (Block* b = c.head[k]) {
      c.head[k] = b->next;
      --c.count[k];
      c.bytes -= class_size(k);
      return b;
    }
    return from_malloc(class_size(k), static_cast<std::uint32_t>(k));
  }
  return from_malloc(n, kUncached);
}

inline void release(void* p) noexcept {
  if (!p) return;
  char* raw = static_cast<char*>(p) - kHeader;
  const std::uint32_t k = *reinterpret_cast<const std::uint32_t*>(raw);
  Cache& c = t_cache;
  if (k != kUncached && !c.dead && c.bytes + class_size(k) <= kCacheBudget) [[likely]] {
    if (!c.reaper_armed) [[unlikely]] arm_reaper();
    Block* b = static_cast<Block*>(p);
    b->next = c.head[k];
    c.head[k] = b;
    ++c.count[k];
    c.bytes += class_size(k);
    return;
  }
  std::free(raw);
}

} // namespace

Stats thread_stats() {
  Stats s;
  s.active = true;
  s.cached_bytes = t_cache.bytes;
  for (std::size_t k = 0; k < kClasses; ++k) s.cached_blocks += t_cache.count[k];
  return s;
}

} // namespace rpcroute::alloc

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
