// Differential fuzzing of the HTTP/1.1 fast path (rpcroute/http1.hpp) against Beast's parser:
// any input the fast path accepts as a request or as a response must mean the same to Beast
// (size, method, target, version, keep-alive, kept fields, status, body). The limits are small so
// that the limit checks are reached too.
#include "check.hpp"
#include "http1_oracle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace rpcroute;
  const auto in = fuzz::as_text(data, size);
  FUZZ_CHECK(testing::request_disagreement(in, 256, 64).empty());
  FUZZ_CHECK(testing::response_disagreement(in, 256).empty());
  FUZZ_CHECK(testing::request_disagreement(in, 32 * 1024, 8 << 20).empty());
  return 0;
}
