// Fuzzes state file loading: parse_state, then what a command does with what it loaded (prune,
// serialize_state on save).
//
// Invariants checked besides "no crash, no exception":
// - whatever parse_state accepts serializes to a file that parse_state accepts again, and that file
//   is a fixed point: serialize(parse(serialize(s))) == serialize(s) (nothing is lost or changed
//   by a load/save cycle after the first);
// - the reloaded state has the same providers, chains, filters and sample counts.
#include <cstdint>
#include <string>

#include "check.hpp"
#include "rpcroute/state.hpp"

namespace {

using namespace rpcroute;

constexpr std::int64_t kNowMs = 1'700'000'000'000;

std::size_t sample_count(const State& s) {
  std::size_t n = 0;
  for (const auto& [key, ps] : s.providers) {
    for (const auto& [method, samples] : ps.methods) n += samples.size();
  }
  return n;
}

void check_round_trip(const State& state) {
  std::string first = serialize_state(state, kNowMs);
  auto again = parse_state(first);
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(again->providers.size() == state.providers.size());
  FUZZ_CHECK(again->chains.size() == state.chains.size());
  FUZZ_CHECK(again->filters.size() == state.filters.size());
  FUZZ_CHECK(sample_count(*again) == sample_count(state));
  FUZZ_CHECK(serialize_state(*again, kNowMs) == first);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto state = parse_state(rpcroute::fuzz::as_text(data, size));
  if (!state) {
    FUZZ_CHECK(!state.error().message.empty());
    return 0;
  }
  check_round_trip(*state);
  prune(*state, kNowMs);
  check_round_trip(*state);
  return 0;
}
