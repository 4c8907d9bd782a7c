#include <catch2/catch.hpp>
#include <deque>
#include <vector>

#include "rpcroute/metrics.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_latency_test {

using namespace rpcroute;

namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
constexpr std::int64_t kWindow = 300'000;

Sample at(std::int64_t age_ms, double latency_ms, Outcome outcome = Outcome::success) {
  return Sample{kNow - age_ms, static_cast<std::int64_t>(latency_ms * 1000), outcome};
}

}  // namespace

TEST_CASE("quantile: nearest rank on a sorted copy", "[metrics]") {
  CHECK(quantile({}, 0.5) == 0.0);
  CHECK(quantile({7}, 0.0) == 7.0);
  CHECK(quantile({7}, 1.0) == 7.0);
  CHECK(quantile({4, 1, 3, 2}, 0.5) == 2.0);
  CHECK(quantile({4, 1, 3, 2}, 0.75) == 3.0);
  CHECK(quantile({4, 1, 3, 2}, 1.0) == 4.0);
  CHECK(quantile({4, 1, 3, 2}, 0.0) == 1.0);
  CHECK(quantile({5, 1, 4, 2, 3}, 0.5) == 3.0);
  CHECK(quantile({40, 80, 120, 400}, 0.75) == 120.0);
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  CHECK(quantile(hundred, 0.5) == 50.0);
  CHECK(quantile(hundred, 0.99) == 99.0);
  CHECK(quantile(hundred, 0.01) == 1.0);
}

TEST_CASE("summarize without samples", "[metrics]") {
  auto s = summarize(nullptr, kNow, kWindow);
  CHECK(s.calls == 0);
  CHECK(s.answered == 0);
  CHECK(s.success_rate == 1.0);
  CHECK(s.p50_ms == 0.0);
  CHECK_FALSE(s.has_latency());

  std::deque<Sample> none;
  auto e = summarize(&none, kNow, kWindow);
  CHECK(e.calls == 0);
  CHECK(e.success_rate == 1.0);
}

TEST_CASE("summarize counts only the window", "[metrics]") {
  std::deque<Sample> samples = {
      at(kWindow + 1, 1),  // just outside
      at(kWindow, 30),     // on the edge: inside
      at(1'000, 10),
      at(0, 20),
  };
  auto s = summarize(&samples, kNow, kWindow);
  CHECK(s.calls == 3);
  CHECK(s.answered == 3);
  CHECK(s.success_rate == 1.0);
  CHECK(s.p50_ms == Approx(20.0));
  CHECK(s.newest_ms == kNow);
  CHECK(s.has_latency());

  // Everything is stale a window later.
  auto later = summarize(&samples, kNow + kWindow + 1, kWindow);
  CHECK(later.calls == 0);
  CHECK_FALSE(later.has_latency());
  CHECK(later.p50_ms == 0.0);
}

TEST_CASE("summarize: answered counts results and JSON-RPC errors, not local failures",
          "[metrics]") {
  std::deque<Sample> samples = {
      at(60, 10, Outcome::success),    at(50, 1'000, Outcome::timeout),
      at(40, 30, Outcome::rpc_error),  at(30, 5, Outcome::connect_failed),
      at(20, 20, Outcome::success),    at(10, 2, Outcome::rate_limited),
      at(5, 3, Outcome::bad_response), at(1, 50, Outcome::http_error),
  };
  auto s = summarize(&samples, kNow, kWindow);
  CHECK(s.calls == 8);
  CHECK(s.answered == 3);
  CHECK(s.success_rate == Approx(3.0 / 8.0));
  // p50 over the answered latencies {10, 30, 20} only: a timeout's 1000 ms does not count.
  CHECK(s.p50_ms == Approx(20.0));
  CHECK(s.newest_ms == kNow - 1);
}

TEST_CASE("summarize: p50 in milliseconds from microseconds", "[metrics]") {
  std::deque<Sample> samples = {Sample{kNow - 3, 1'500, Outcome::success},
                                Sample{kNow - 2, 2'500, Outcome::success},
                                Sample{kNow - 1, 900, Outcome::success}};
  auto s = summarize(&samples, kNow, kWindow);
  CHECK(s.p50_ms == Approx(1.5));
}

TEST_CASE("summarize: only failures means no latency and zero success", "[metrics]") {
  std::deque<Sample> samples = {at(3, 10, Outcome::timeout), at(2, 10, Outcome::connect_failed)};
  auto s = summarize(&samples, kNow, kWindow);
  CHECK(s.calls == 2);
  CHECK(s.answered == 0);
  CHECK(s.success_rate == 0.0);
  CHECK_FALSE(s.has_latency());
  CHECK(s.p50_ms == 0.0);
}

}  // namespace unit_latency_test
