#include "rpcroute/blocks.hpp"

#include <catch2/catch.hpp>

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_blocks_test {

using namespace rpcroute;
using K = BlockRef::Kind;

TEST_CASE("block need: the block parameter of each method family", "[blocks]") {
  CHECK(block_param_index("eth_getBalance") == 1);
  CHECK(block_param_index("eth_getStorageAt") == 2);
  CHECK(block_param_index("eth_getBlockByNumber") == 0);
  CHECK(block_param_index("eth_blockNumber") == -1);

  auto n = analyze_block_need("eth_getBalance", R"(["0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","0x1"])");
  REQUIRE(n.block);
  CHECK(n.block->kind == K::number);
  CHECK(n.block->number == 1);

  auto s = analyze_block_need("eth_getStorageAt", R"(["0xabc","0x0","earliest"])");
  REQUIRE(s.block);
  CHECK(s.block->kind == K::earliest);

  for (auto [tag, kind] : {std::pair{"latest", K::latest}, {"pending", K::pending}, {"safe", K::safe},
                           {"finalized", K::finalized}}) {
    auto t = analyze_block_need("eth_getCode", std::string(R"(["0xabc",")") + tag + "\"]");
    REQUIRE(t.block);
    CHECK(t.block->kind == kind);
  }
  CHECK_FALSE(analyze_block_need("eth_blockNumber", "[]").any());
  CHECK_FALSE(analyze_block_need("eth_getTransactionReceipt", R"(["0x12"])").any());
}

TEST_CASE("block need: EIP-1898 block objects, bare hashes, omitted optional blocks", "[blocks]") {
  auto by_number = analyze_block_need("eth_call", R"([{"to":"0x1"},{"blockNumber":"0x10"}])");
  REQUIRE(by_number.block);
  CHECK(by_number.block->kind == K::number);
  CHECK(by_number.block->number == 16);

  auto by_hash = analyze_block_need(
      "eth_getBalance", R"(["0xabc",{"blockHash":"0x00000000000000000000000000000000000000000000000000000000000000aa","requireCanonical":true}])");
  REQUIRE(by_hash.block);
  CHECK(by_hash.block->kind == K::hash);

  auto bare_hash =
      analyze_block_need("eth_call", R"([{}, "0x00000000000000000000000000000000000000000000000000000000000000aa"])");
  REQUIRE(bare_hash.block);
  CHECK(bare_hash.block->kind == K::hash);

  // eth_call without a block reads latest; eth_getBalance without one is the node's error to give.
  auto omitted = analyze_block_need("eth_call", R"([{"to":"0x1"}])");
  REQUIRE(omitted.block);
  CHECK(omitted.block->kind == K::latest);
  CHECK_FALSE(analyze_block_need("eth_getBalance", R"(["0xabc"])").any());

  // Unreadable params give no need rather than a guess.
  CHECK_FALSE(analyze_block_need("eth_getBalance", R"(["0xabc","0xzz"])").any());
  CHECK_FALSE(analyze_block_need("eth_getBalance", "[1,}").any());
  CHECK_FALSE(analyze_block_need("eth_getBalance", R"({"a":1})").any());
}

TEST_CASE("block need: eth_getLogs ranges, defaults and blockHash", "[blocks]") {
  auto range = analyze_block_need("eth_getLogs", R"([{"fromBlock":"0x0","toBlock":"0x4e20"}])");
  REQUIRE(range.from);
  REQUIRE(range.to);
  CHECK(log_range_blocks(range, 0) == 20'001);
  CHECK(oldest_block(range, 30'000) == 0);
  CHECK(highest_numbered_block(range) == 20'000);

  // Absent bounds are latest: a range relative to the head, unknown without one.
  auto open = analyze_block_need("eth_getLogs", R"([{"fromBlock":"0x64"}])");
  CHECK_FALSE(log_range_blocks(open, 0).has_value());
  CHECK(log_range_blocks(open, 199) == 100);
  CHECK(log_range_blocks(analyze_block_need("eth_getLogs", R"([{"address":"0x1"}])"), 500) == 1);

  auto hash = analyze_block_need("eth_getLogs", R"([{"blockHash":"0x00000000000000000000000000000000000000000000000000000000000000aa"}])");
  REQUIRE(hash.block);
  CHECK(hash.block->kind == K::hash);
  CHECK_FALSE(log_range_blocks(hash, 100).has_value());
  // A reversed range scans nothing.
  CHECK(log_range_blocks(analyze_block_need("eth_getLogs", R"([{"fromBlock":"0x10","toBlock":"0x1"}])"), 0) == 0);
}

TEST_CASE("heights: estimates move forward with the block time, only within the horizon", "[blocks]") {
  Chain chain;
  chain.block_time_ms = 2'000;
  CHECK(height_horizon_ms(chain) == 60'000);
  const Height h{100, 1'000'000};
  CHECK(estimate_height(h, 1'000'000, chain) == 100);
  CHECK(estimate_height(h, 1'009'999, chain) == 104);
  CHECK(height_fresh(h, 1'060'000, chain));
  CHECK_FALSE(height_fresh(h, 1'060'001, chain));
  CHECK(estimate_height(h, 1'060'000, chain) == 130);  // capped at the horizon
  CHECK_FALSE(height_fresh(Height{}, 1'000, chain));

  chain.block_time_ms = 20'000;
  CHECK(height_horizon_ms(chain) == 100'000);
}

}  // namespace unit_blocks_test
