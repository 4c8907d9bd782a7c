#pragma once
#include <cstdio>
#include <cstdlib>
#include <string_view>

// A broken invariant is a finding like a crash: say which one and abort, so that libFuzzer keeps
// the input as a crash artifact. Unlike assert(), this holds in every build type.
#define FUZZ_CHECK(cond) ((cond) ? static_cast<void>(0) : ::rpcroute::fuzz::broken(#cond, __FILE__, __LINE__))

namespace rpcroute::fuzz {

[[noreturn]] inline void broken(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
  std::abort();
}

inline std::string_view as_text(const unsigned char* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace rpcroute::fuzz
