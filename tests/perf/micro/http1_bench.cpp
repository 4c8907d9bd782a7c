// The HTTP/1.1 fast path (rpcroute/http1.hpp): wrk's request as the sidecar reads it, and the perf
// harness's upstream answer (nginx, chunked by its echo module) and a Content-Length answer as the
// native client reads them.
#include <benchmark/benchmark.h>

#include <string>

#include "rpcroute/http1.hpp"

namespace {

using namespace rpcroute;

const std::string kWrkRequest =
    "POST /rpc/perf HTTP/1.1\r\nHost: 127.0.0.1:40000\r\nContent-Type: application/json\r\n"
    "Content-Length: 63\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_blockNumber\",\"params\":[]}";

const std::string kNginxChunked =
    "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Thu, 03 Dec 2026 17:00:00 GMT\r\n"
    "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
    "2d\r\n{\"jsonrpc\":\"2.0\",\"id\":1234567,\"result\":\"0x1\"}\r\n0\r\n\r\n";

const std::string kLengthAnswer =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nVary: Accept-Encoding\r\n"
    "Date: Thu, 03 Dec 2026 17:00:00 GMT\r\nContent-Length: 45\r\n\r\n"
    "{\"jsonrpc\":\"2.0\",\"id\":1234567,\"result\":\"0x1\"}";

void BM_http1_request(benchmark::State& st) {
  http1::Message m;
  for (auto _ : st) {
    if (!http1::parse_request(kWrkRequest, 32 * 1024, 8 << 20, m)) {
      st.SkipWithError("declined");
      break;
    }
    benchmark::DoNotOptimize(m);
  }
}
BENCHMARK(BM_http1_request)->Name("http1/request_wrk");

void answer_bench(benchmark::State& st, const std::string& in) {
  http1::Message m;
  std::string body;
  body.reserve(256);
  for (auto _ : st) {
    if (!http1::parse_response(in, 32 * 1024, m)) {
      st.SkipWithError("declined");
      break;
    }
    m.assign_body(in, body);
    benchmark::DoNotOptimize(body);
  }
}
void BM_http1_chunked(benchmark::State& st) { answer_bench(st, kNginxChunked); }
BENCHMARK(BM_http1_chunked)->Name("http1/answer_chunked_nginx");
void BM_http1_length(benchmark::State& st) { answer_bench(st, kLengthAnswer); }
BENCHMARK(BM_http1_length)->Name("http1/answer_content_length");

}  // namespace
