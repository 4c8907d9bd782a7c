// Parsing what clients send (parse_body) and what providers answer (parse_response).
#include <benchmark/benchmark.h>

#include "fixtures.hpp"
#include "rpcroute/jsonrpc.hpp"

namespace {

using namespace rpcroute;

// The body as the sidecar holds it: read into a buffer reserved from Content-Length with room for
// simdjson's padding, so parse_body parses it in place.
void parse_body_bench(benchmark::State& st, std::string body, std::size_t expect_calls) {
  body.reserve(body.size() + 64);
  const std::size_t capacity = body.capacity();
  for (auto _ : st) {
    auto parsed = jsonrpc::parse_body(body, capacity);
    if (!parsed || parsed->calls.size() != expect_calls) {
      st.SkipWithError("parse_body failed");
      break;
    }
    benchmark::DoNotOptimize(parsed);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * body.size()));
  st.SetLabel(std::to_string(body.size()) + " B");
}

void BM_parse_body_request(benchmark::State& st) { parse_body_bench(st, perf::request_200b(), 1); }
BENCHMARK(BM_parse_body_request)->Name("parse_body/request_200B");

void BM_parse_body_batch(benchmark::State& st) { parse_body_bench(st, perf::request_batch(100), 100); }
BENCHMARK(BM_parse_body_batch)->Name("parse_body/batch_100");

// `in_place`: the body sits in a buffer with simdjson's padding behind it, as the engine delivers
// it (what the router parses); otherwise parse_response copies it into a padded buffer first.
void parse_response_bench(benchmark::State& st, std::string body, bool in_place) {
  if (in_place) body.reserve(body.size() + 64);
  const std::size_t capacity = in_place ? body.capacity() : 0;
  for (auto _ : st) {
    auto parsed = in_place ? jsonrpc::parse_response(body, capacity) : jsonrpc::parse_response(body);
    if (!parsed || !parsed->replies.front().result) {
      st.SkipWithError("parse_response failed");
      break;
    }
    benchmark::DoNotOptimize(parsed);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * body.size()));
  st.SetLabel(std::to_string(body.size()) + " B");
}

void BM_parse_response_small(benchmark::State& st) { parse_response_bench(st, perf::response_small(), true); }
BENCHMARK(BM_parse_response_small)->Name("parse_response/small");

void BM_parse_response_logs(benchmark::State& st) {
  parse_response_bench(st, perf::response_logs(200 * 1024), true);
}
BENCHMARK(BM_parse_response_logs)->Name("parse_response/logs_200KB");

void BM_parse_response_logs_copy(benchmark::State& st) {
  parse_response_bench(st, perf::response_logs(200 * 1024), false);
}
BENCHMARK(BM_parse_response_logs_copy)->Name("parse_response/logs_200KB_unpadded");

}  // namespace
