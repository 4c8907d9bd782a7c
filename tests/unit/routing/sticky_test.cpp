#include <catch2/catch.hpp>

#include "rpcroute/sticky.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_sticky_test {

using namespace rpcroute;

namespace {
constexpr const char* kAddr = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
constexpr const char* kLower = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
constexpr const char* kHash = "0xABCDEF0000000000000000000000000000000000000000000000000000000001";
}  // namespace

TEST_CASE("sticky_key: every row of the table", "[sticky]") {
  using K = StickyKey::Kind;
  auto key = [](std::string_view m, const std::string& p) { return sticky_key(m, p); };
  const std::string addr = kAddr;
  CHECK(key("eth_getTransactionCount", R"([")" + addr + R"(","pending"])").value == kLower);
  CHECK(key("eth_getTransactionCount", R"([")" + addr + R"(","pending"])").kind == K::sender);
  for (const char* m : {"eth_call", "eth_estimateGas", "eth_createAccessList", "eth_sendTransaction"}) {
    INFO(m);
    CHECK(key(m, R"([{"from":")" + addr + R"(","to":"0x0000000000000000000000000000000000000001"},"latest"])").value ==
          kLower);
    CHECK(key(m, R"([{"to":"0x0000000000000000000000000000000000000001"}])").empty());  // no sender
  }
  for (const char* m : {"eth_getTransactionReceipt", "eth_getTransactionByHash"}) {
    INFO(m);
    auto k = key(m, std::string(R"([")") + kHash + R"("])");
    CHECK(k.kind == K::transaction);
    CHECK(k.value == "0xabcdef0000000000000000000000000000000000000000000000000000000001");
  }
  auto raw = key("eth_sendRawTransaction",
                 R"(["0xf86507843b9aca0082520894000000000000000000000000000000000000dead018082f4f6a06c5d6d598ce0e9e6a2930d66fc67159c00afed22047d14b8ad9615031ff8b838a0691f8c48b6236722aa501b60ebc23b50494817cccc56542625f37605bc6a4239"])");
  CHECK(raw.kind == K::sender);
  CHECK(raw.value == kLower);

  CHECK(key("eth_blockNumber", "[]").empty());
  CHECK(key("eth_getBalance", R"([")" + addr + R"(","latest"])").empty());
  CHECK(key("eth_getTransactionCount", "[]").empty());
  CHECK(key("eth_getTransactionCount", R"(["0x12","latest"])").empty());
  CHECK(key("eth_getTransactionReceipt", R"(["0x12"])").empty());
  CHECK(key("eth_sendRawTransaction", R"(["0xdead"])").empty());
  CHECK(key("eth_call", "not json").empty());
}

TEST_CASE("StickyProviders: a sender sticks for the window after its last use, per chain", "[sticky]") {
  StickyProviders sticky(30'000, 100);
  const StickyKey sender{StickyKey::Kind::sender, kLower};
  CHECK_FALSE(sticky.find("local", sender, 0));
  sticky.stick("local", sender, "n2", 1'000);
  CHECK(sticky.find("local", sender, 1'000) == "n2");
  CHECK_FALSE(sticky.find("other", sender, 1'000));
  CHECK(sticky.find("local", sender, 31'000) == "n2");
  sticky.stick("local", sender, "n2", 31'000);  // used again: the window slides
  CHECK(sticky.find("local", sender, 60'000) == "n2");
  CHECK_FALSE(sticky.find("local", sender, 61'001));
  sticky.stick("local", sender, "n3", 61'001);  // served elsewhere (failover): follows
  CHECK(sticky.find("local", sender, 61'001) == "n3");
  CHECK_FALSE(sticky.find("local", StickyKey{}, 61'001));
}

TEST_CASE("StickyProviders: bounded; expired entries go first, then the oldest", "[sticky]") {
  StickyProviders sticky(30'000, 10);
  auto key = [](int i) { return StickyKey{StickyKey::Kind::transaction, "0x" + std::to_string(i)}; };
  for (int i = 0; i < 10; ++i) sticky.stick("c", key(i), "p", i);
  CHECK(sticky.size() == 10);
  sticky.stick("c", key(10), "p", 100'000);  // all ten expired by now
  CHECK(sticky.size() == 1);
  for (int i = 11; i < 20; ++i) sticky.stick("c", key(i), "p", 100'000 + i);
  CHECK(sticky.size() == 10);
  sticky.stick("c", key(20), "p", 100'020);  // full of live entries: the older half goes
  CHECK(sticky.size() <= 6);
  CHECK(sticky.find("c", key(20), 100'020) == "p");
  CHECK(sticky.find("c", key(19), 100'020) == "p");
  CHECK_FALSE(sticky.find("c", key(10), 100'020));
  for (int i = 0; i < 1000; ++i) sticky.stick("c", key(1000 + i), "p", 200'000 + i);
  CHECK(sticky.size() <= 10);
}

}  // namespace unit_sticky_test
