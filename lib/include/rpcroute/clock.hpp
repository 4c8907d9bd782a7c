#pragma once
#include <chrono>
#include <cstdint>
#include <random>

namespace rpcroute {

/// Time as the routing code sees it (wall and monotonic); injected so tests advance time instead of
/// sleeping. Wall time (ms since the epoch) is what the state file stores, because it must mean the
/// same thing to the next process.
class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual std::int64_t now_ms() const = 0;
  /// Monotonic microseconds, for deadlines and latency within one process.
  [[nodiscard]] virtual std::int64_t mono_us() const = 0;
};

class SystemClock final : public Clock {
 public:
  [[nodiscard]] std::int64_t now_ms() const override {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  }
  [[nodiscard]] std::int64_t mono_us() const override {
    using namespace std::chrono;
    return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(std::int64_t start_ms = 1'700'000'000'000) : now_(start_ms) {}
  [[nodiscard]] std::int64_t now_ms() const override { return now_; }
  /// Starts at 1 s and moves with advance() (set() moves wall time only, as a clock change does).
  [[nodiscard]] std::int64_t mono_us() const override { return mono_us_; }
  void advance(std::int64_t ms) {
    now_ += ms;
    mono_us_ += ms * 1000;
  }
  void set(std::int64_t ms) { now_ = ms; }

 private:
  std::int64_t now_;
  std::int64_t mono_us_ = 1'000'000;
};

/// Source of randomness for the random strategies and breaker jitter.
class Random {
 public:
  explicit Random(std::uint64_t seed = std::random_device{}()) : engine_(seed) {}
  /// Uniform in [0, 1).
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }
  /// Uniform in [0, n).
  std::size_t below(std::size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(engine_);
  }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

/// Monotonic microseconds, for measuring latency within one process.
inline std::int64_t steady_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace rpcroute
