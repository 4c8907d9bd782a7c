// Classifying an upstream answer (DESIGN.md section 7) the way the router does after every
// exchange: classify_exchange on the HTTP response (parse + per-call class + overall class), and the
// two table lookups underneath it.
#include <benchmark/benchmark.h>

#include <vector>

#include "fixtures.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/outcome.hpp"

namespace {

using namespace rpcroute;

const Profile& one_provider_profile() {
  static const Profile profile = perf::profile_with(1);
  return profile;
}

/// classify_exchange consumes its HttpResponse, so each iteration gets a fresh copy from a pool
/// refilled outside the timing (the body with the engine's padding reserve, as it arrives).
void classify_bench(benchmark::State& st, const HttpResponse& proto, OutcomeClass expect) {
  const std::size_t pool_size = proto.body.size() > 4096 ? 16 : 512;
  std::vector<HttpResponse> pool(pool_size);
  std::size_t next = pool_size;
  const auto& profile = one_provider_profile();
  for (auto _ : st) {
    if (next == pool_size) {
      st.PauseTiming();
      for (auto& r : pool) {
        r = proto;
        r.body.reserve(proto.body.size() + 64);
      }
      next = 0;
      st.ResumeTiming();
    }
    auto ex = classify_exchange(std::move(pool[next++]), UpstreamIds{0, 1}, perf::kNowMs, profile);
    if (ex.overall.cls != expect) {
      st.SkipWithError("unexpected class");
      break;
    }
    benchmark::DoNotOptimize(ex);
  }
  st.SetLabel(std::to_string(proto.body.size()) + " B");
}

HttpResponse http(long status, std::string body, std::string retry_after = {}) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.retry_after = std::move(retry_after);
  r.latency_us = 12'345;
  return r;
}

void BM_classify_success(benchmark::State& st) {
  classify_bench(st, http(200, perf::response_small()), OutcomeClass::success);
}
BENCHMARK(BM_classify_success)->Name("classify/success");

void BM_classify_success_large(benchmark::State& st) {
  classify_bench(st, http(200, perf::response_logs(200 * 1024)), OutcomeClass::success);
}
BENCHMARK(BM_classify_success_large)->Name("classify/success_200KB");

void BM_classify_rate_limit_error(benchmark::State& st) {
  classify_bench(st,
                 http(200, R"({"jsonrpc":"2.0","id":0,"error":{"code":-32005,"message":"Your app has exceeded its compute units per second capacity. Try again in 2 seconds.","data":{"retry_after":2}}})"),
                 OutcomeClass::rate_limited);
}
BENCHMARK(BM_classify_rate_limit_error)->Name("classify/rate_limit_error");

void BM_classify_http_429(benchmark::State& st) {
  classify_bench(st, http(429, R"({"error":"Too Many Requests"})", "3"), OutcomeClass::rate_limited);
}
BENCHMARK(BM_classify_http_429)->Name("classify/http_429");

void BM_classify_reverted(benchmark::State& st) {
  classify_bench(st,
                 http(200, R"({"jsonrpc":"2.0","id":0,"error":{"code":3,"message":"execution reverted: ERC20: transfer amount exceeds balance","data":"0x08c379a0"}})"),
                 OutcomeClass::deterministic);
}
BENCHMARK(BM_classify_reverted)->Name("classify/execution_reverted");

void BM_classify_rpc_error(benchmark::State& st) {
  const std::string message = "header not found";
  for (auto _ : st) {
    benchmark::DoNotOptimize(classify_rpc_error(-32000, message));
  }
}
BENCHMARK(BM_classify_rpc_error)->Name("classify/rpc_error_table");

void BM_classify_http_status(benchmark::State& st) {
  for (auto _ : st) {
    benchmark::DoNotOptimize(classify_http_status(429, "Too Many Requests", "3", perf::kNowMs));
  }
}
BENCHMARK(BM_classify_http_status)->Name("classify/http_status_429");

}  // namespace
