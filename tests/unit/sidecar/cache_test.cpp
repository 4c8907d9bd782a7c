#include "cache.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "coalesce.hpp"
#include "policy.hpp"
#include "rpcroute/methods.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_cache_test {

using namespace rpcroute;
using namespace rpcroute::sidecar;

namespace {

std::string key_of(std::string_view method, std::string_view params, std::uintptr_t chain = 1) {
  std::string k;
  REQUIRE(cache_key(k, chain, method, params));
  return k;
}

}  // namespace

TEST_CASE("cache key: whitespace outside strings goes, hex strings go to lower case",
          "[sidecar][cache]") {
  const auto canonical = key_of("eth_getBalance", R"(["0xab12","0x10"])");
  CHECK(key_of("eth_getBalance", " [ \"0xAB12\" ,\n\t\"0x10\" ] ") == canonical);
  CHECK(key_of("eth_getBalance", R"(["0xAb12","0x10"])") == canonical);
  // The params part of the key is the canonical text itself.
  CHECK(canonical.substr(canonical.size() - 17) == R"(["0xab12","0x10"])");
}

TEST_CASE("cache key: what differs in meaning differs in the key", "[sidecar][cache]") {
  const auto base = key_of("eth_getBalance", R"(["0xab","0x10"])");
  CHECK(key_of("eth_getBalance", R"(["0xab","0x11"])") != base);
  CHECK(key_of("eth_getCode", R"(["0xab","0x10"])") != base);
  CHECK(key_of("eth_getBalance", R"(["0xab","0x10"])", 2) != base);  // another chain
  // Method and params are kept apart: "ab"+"[c" is not "a"+"b[c".
  CHECK(key_of("ab", "[1]") != key_of("a", "b[1]"));
  // Spaces inside strings are kept, and strings that are not hex keep their case.
  CHECK(key_of("m", R"(["a b"])") != key_of("m", R"(["ab"])"));
  CHECK(key_of("m", R"(["Latest"])") != key_of("m", R"(["latest"])"));
  CHECK(key_of("m", R"(["0xAG"])") != key_of("m", R"(["0xag"])"));  // not hex: as sent
  // Escaped quotes do not end a string early.
  CHECK(key_of("m", R"(["a\" b"])") != key_of("m", R"(["a\"b"])"));
  CHECK(key_of("m", R"(["a\" b", 1])") == key_of("m", R"(["a\" b",1])"));
  std::string k;
  CHECK_FALSE(cache_key(k, 1, "m", std::string(kMaxKeyParams + 1, ' ')));
}

TEST_CASE("cache rules: every cached method is a read of the catalogue; its constants are cached",
          "[sidecar][cache]") {
  for (const auto& row : method_catalogue()) {
    INFO(row.name);
    if (cache_rule(row.name) != CacheRule::never) {
      CHECK_FALSE(row.replay_unsafe);
      CHECK(row.filter == FilterRole::none);
      CHECK(coalescable(row.name));
    }
    if (row.cacheable && row.name != "eth_chainId") CHECK(cache_rule(row.name) != CacheRule::never);
  }
  // eth_chainId is answered from the profile: neither kept nor shared.
  CHECK(cache_rule("eth_chainId") == CacheRule::never);
  CHECK_FALSE(coalescable("eth_chainId"));
  CHECK(cache_rule("eth_blockNumber") == CacheRule::never);
  CHECK(cache_rule("eth_sendRawTransaction") == CacheRule::never);
  CHECK(cache_rule("anvil_mine") == CacheRule::never);
  CHECK_FALSE(coalescable("eth_blockNumber"));  // the head: answered in microseconds, kept off
  CHECK_FALSE(coalescable("eth_sendRawTransaction"));
  CHECK_FALSE(coalescable("eth_getFilterChanges"));
  CHECK_FALSE(coalescable("anvil_mine"));  // outside the catalogue: may act
  CHECK_FALSE(coalescable("evm_mine"));
  CHECK(coalescable("eth_call"));
  CHECK(coalescable("eth_getTransactionReceipt"));
}

TEST_CASE("cache eligibility: numbered reads at or below finalized; never a moving tag",
          "[sidecar][cache]") {
  const ChainFinality f{.head = 200, .finalized = 100, .known = true};
  const ChainFinality none{.head = 200, .finalized = 0, .known = false};
  struct Row {
    const char* method;
    const char* params;
    bool with_finality;
    bool without;
  };
  const Row rows[] = {
      {"eth_getBlockByNumber", R"(["0x64",false])", true, false},   // 100 = finalized
      {"eth_getBlockByNumber", R"(["0x65",false])", false, false},  // 101: not yet final
      {"eth_getBlockByNumber", R"(["latest",false])", false, false},
      {"eth_getBlockByNumber", R"(["pending",false])", false, false},
      {"eth_getBlockByNumber", R"(["safe",false])", false, false},
      {"eth_getBlockByNumber", R"(["finalized",false])", false, false},  // moves with finality
      {"eth_getBlockByNumber", R"(["earliest",false])", true, false},
      {"eth_getBalance", R"(["0xab","0x10"])", true, false},
      {"eth_getBalance", R"(["0xab"])", false, false},  // no block: the node reads latest
      {"eth_call", R"([{"to":"0xab","data":"0x"},"0x10"])", true, false},
      {"eth_call", R"([{"to":"0xab","data":"0x"}])", false, false},
      {"eth_call", R"([{"to":"0xab"},{"blockHash":"0x01"}])", true, true},  // at a hash
      {"eth_getLogs", R"([{"fromBlock":"0x1","toBlock":"0x64"}])", true, false},
      {"eth_getLogs", R"([{"fromBlock":"0x1","toBlock":"0x65"}])", false, false},
      {"eth_getLogs", R"([{"fromBlock":"0x1"}])", false, false},  // to: latest
      {"eth_getLogs", R"([{"blockHash":"0x01"}])", true, true},
      {"eth_getBlockByHash", R"(["0x01",false])", true, true},
      {"eth_getTransactionReceipt", R"(["0x01"])", true, true},  // judged on the result
      {"net_version", "[]", true, true},
      {"eth_blockNumber", "[]", false, false},
      {"eth_gasPrice", "[]", false, false},
  };
  for (const auto& r : rows) {
    INFO(r.method << " " << r.params);
    const auto rule = cache_rule(r.method);
    CHECK(request_cacheable(rule, r.method, r.params, f) == r.with_finality);
    CHECK(request_cacheable(rule, r.method, r.params, none) == r.without);
  }
}

TEST_CASE("cache eligibility: unfinalized data is never kept, so never served across a head change",
          "[sidecar][cache]") {
  const ChainFinality f{.head = 200, .finalized = 100, .known = true};
  const auto receipt = [](const char* number) {
    return std::string(R"({"transactionHash":"0x01","blockHash":"0x02","blockNumber":")") + number +
           R"(","status":"0x1"})";
  };
  CHECK(result_cacheable(CacheRule::mined, receipt("0x64"), f));
  CHECK_FALSE(result_cacheable(CacheRule::mined, receipt("0x65"), f));  // may be reorganised away
  CHECK_FALSE(result_cacheable(CacheRule::mined, receipt("0x64"), ChainFinality{200, 0, false}));
  CHECK_FALSE(
      result_cacheable(CacheRule::mined, R"({"hash":"0x01","blockNumber":null})", f));  // pending
  CHECK_FALSE(result_cacheable(CacheRule::mined, "null", f));
  CHECK_FALSE(result_cacheable(CacheRule::by_hash, "null", f));  // not known yet: asked again
  CHECK(result_cacheable(CacheRule::by_hash, R"({"number":"0x500"})", f));  // fixed by its hash
  CHECK(result_cacheable(CacheRule::constant, R"("0x7a69")", f));
  CHECK_FALSE(result_cacheable(CacheRule::never, R"("0x1")", f));
  // A finalized mark above the head (a reset chain) trusts nothing numbered.
  const ChainFinality odd{.head = 50, .finalized = 100, .known = true};
  CHECK_FALSE(request_cacheable(CacheRule::at_block, "eth_getBalance", R"(["0xab","0x10"])", odd));
  CHECK_FALSE(result_cacheable(CacheRule::mined, receipt("0x10"), odd));
}

TEST_CASE("cache: LRU by bytes evicts the least recently used; hits and misses are counted",
          "[sidecar][cache]") {
  const std::size_t entry = 1 + 100 + ResponseCache::kEntryOverhead;  // key "a", 100-byte result
  ResponseCache cache(entry * 8);  // room for eight such entries; one may take an eighth
  const std::string result(100, 'x');
  for (char c = 'a'; c < 'a' + 8; ++c) cache.insert(std::string(1, c), result);
  CHECK(cache.stats().entries == 8);
  CHECK(cache.stats().bytes == entry * 8);
  REQUIRE(cache.find("a") != nullptr);  // "a" is now the most recently used
  cache.insert("i", result);            // evicts "b", the least recently used
  CHECK(cache.stats().evictions == 1);
  CHECK(cache.find("b") == nullptr);
  CHECK(cache.find("a") != nullptr);
  CHECK(*cache.find("i") == result);
  CHECK(cache.stats().bytes <= cache.stats().max_bytes);
  CHECK(cache.stats().hits == 3);
  CHECK(cache.stats().misses == 1);
  // Replacing an entry does not count it twice.
  cache.insert("i", std::string(50, 'y'));
  CHECK(*cache.find("i") == std::string(50, 'y'));
  CHECK(cache.stats().entries == 8);
  CHECK(cache.stats().bytes == entry * 7 + 1 + 50 + ResponseCache::kEntryOverhead);
}

TEST_CASE("cache: an entry over an eighth of the cap is not kept", "[sidecar][cache]") {
  ResponseCache cache(8 * 1024);
  cache.insert("small", std::string(100, 'x'));
  cache.insert("big", std::string(1024, 'x'));  // + key + overhead > 1 KiB
  CHECK(cache.find("big") == nullptr);
  CHECK(cache.find("small") != nullptr);
  CHECK(cache.stats().too_large == 1);
  CHECK(cache.stats().evictions == 0);  // nothing was flushed for it
  cache.clear();
  CHECK(cache.find("small") == nullptr);
  CHECK(cache.stats().bytes == 0);
}

TEST_CASE("coalescing: a shared answer is given each client's own id", "[sidecar][cache]") {
  CHECK(reid_response(R"({"jsonrpc":"2.0","id":7,"result":"0x1"})", "7", R"("abc")") ==
        R"({"jsonrpc":"2.0","id":"abc","result":"0x1"})");
  CHECK(reid_response(R"({"jsonrpc":"2.0","id":"x","error":{"code":-32000,"message":"m"}})",
                      R"("x")", "12") ==
        R"({"jsonrpc":"2.0","id":12,"error":{"code":-32000,"message":"m"}})");
  // Not the shape this process writes, or another id: nothing (the call is routed on its own).
  CHECK(reid_response(R"({"id":7,"jsonrpc":"2.0","result":"0x1"})", "7", "8").empty());
  CHECK(reid_response(R"({"jsonrpc":"2.0","id":77,"result":"0x1"})", "7", "8").empty());
  CHECK(reid_response(R"({"jsonrpc":"2.0","id":7)", "7", "8").empty());
}

TEST_CASE(
    "policy: the cache is bypassed on Cache-Control no-cache/no-store or X-Rpcroute-Cache: bypass",
    "[sidecar][policy]") {
  CHECK(policy::cache_bypass("no-cache", ""));
  CHECK(policy::cache_bypass("max-age=0, No-Store", ""));
  CHECK(policy::cache_bypass(" NO-CACHE ", ""));
  CHECK(policy::cache_bypass("", "bypass"));
  CHECK(policy::cache_bypass("", " BYPASS"));
  CHECK_FALSE(policy::cache_bypass("max-age=0", ""));
  CHECK_FALSE(policy::cache_bypass("no-cache-please", ""));
  CHECK_FALSE(policy::cache_bypass("", "miss"));
  CHECK_FALSE(policy::cache_bypass("", ""));
}

}  // namespace unit_cache_test
