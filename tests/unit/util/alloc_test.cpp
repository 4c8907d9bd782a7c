#include "rpcroute/alloc.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <new>
#include <thread>
#include <vector>

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_alloc_test {

using namespace rpcroute::alloc;

TEST_CASE("alloc: every size up to kMaxCached maps to the smallest class that holds it") {
  for (std::size_t n = 1; n <= kMaxCached; ++n) {
    const std::size_t k = class_of(n);
    REQUIRE(k < kClasses);
    REQUIRE(class_size(k) >= n);
    if (k > 0) REQUIRE(class_size(k - 1) < n);
  }
  CHECK(class_of(0) == 0);
  CHECK(class_size(kClasses - 1) == kMaxCached);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RPCROUTE_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define RPCROUTE_UNDER_ASAN 1
#endif

// Holds for any operator new: the caching one, or the runtime's (-DRPCROUTE_CACHING_NEW=OFF).
// Not under ASan, whose allocator reports an impossible size as an error instead of throwing.
#ifndef RPCROUTE_UNDER_ASAN
TEST_CASE("alloc: impossible sizes fail cleanly") {
  volatile std::size_t huge = SIZE_MAX - 4; // volatile: the compiler must not judge it up front
  CHECK_THROWS_AS(::operator new(huge), std::bad_alloc);
  CHECK(::operator new(huge, std::nothrow) == nullptr);
  CHECK(::operator new[](huge / 2, std::nothrow) == nullptr);
}
#endif

// The cache itself: only where it is linked (not with -DRPCROUTE_CACHING_NEW=OFF, nor under the
// sanitizers).
#ifdef RPCROUTE_HAS_ALLOC

TEST_CASE("alloc: a freed block is handed out again for any size of its class") {
  REQUIRE(thread_stats().active);
  void* p = ::operator new(1500);
  const auto before = thread_stats();
  ::operator delete(p);
  const auto after = thread_stats();
  CHECK(after.cached_bytes == before.cached_bytes + class_size(class_of(1500)));
  CHECK(after.cached_blocks == before.cached_blocks + 1);
  void* q = ::operator new(1300); // same 1536-byte class
  CHECK(q == p);
  CHECK(thread_stats().cached_bytes == before.cached_bytes);
  ::operator delete(q);
}

TEST_CASE("alloc: blocks are 16-byte aligned and usable to their requested size") {
  std::vector<char*> blocks;
  for (std::size_t n : {1, 7, 16, 17, 100, 1024, 1025, 2129, 4096, 4097, 100000}) {
    auto* p = static_cast<char*>(::operator new(n));
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 16 == 0);
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<char>(i);
    blocks.push_back(p);
  }
  for (char* p : blocks) ::operator delete(p);
}

TEST_CASE("alloc: blocks above kMaxCached go back to malloc at once") {
  const auto before = thread_stats();
  void* p = ::operator new(kMaxCached + 1);
  ::operator delete(p);
  CHECK(thread_stats().cached_bytes == before.cached_bytes);
}

TEST_CASE("alloc: a thread keeps at most kCacheBudget bytes of freed blocks") {
  std::vector<void*> blocks;
  const std::size_t n = 2 * kCacheBudget / kMaxCached;
  for (std::size_t i = 0; i < n; ++i) blocks.push_back(::operator new(kMaxCached));
  for (void* p : blocks) ::operator delete(p);
  const auto s = thread_stats();
  CHECK(s.cached_bytes <= kCacheBudget);
  CHECK(s.cached_bytes + kMaxCached > kCacheBudget); // filled up to the budget, not beyond
}

TEST_CASE("alloc: blocks cross threads, and a thread's cache is returned when it ends") {
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(::operator new(48 + i));
  std::size_t cached_there = 0;
  std::thread t([&] {
    for (void* p : blocks) ::operator delete(p); // freed on another thread: its cache takes them
    cached_there = thread_stats().cached_blocks;
    std::vector<int> v(1000, 7); // and that thread allocates and frees after
  });
  t.join();
  CHECK(cached_there >= 64);
}

#endif

}  // namespace unit_alloc_test
