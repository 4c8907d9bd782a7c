// Subscription streams (ws_stream.hpp): a failover's gap backfilled in order, duplicates dropped,
// a reorg answered with the replacement heads, logs caught up and replayed as removed.
#include "ws_stream.hpp"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_ws_stream_test {

using namespace rpcroute;
using namespace rpcroute::sidecar;

namespace {

std::string block(std::uint64_t n, char fork = 'a', char parent_fork = 0) {
  if (parent_fork == 0) parent_fork = fork;
  return fmt::format(R"({{"number":"0x{:x}","hash":"0x{}{}","parentHash":"0x{}{}"}})", n, fork, n,
                     parent_fork, n - 1);
}

/// Answers from a table (method + params → result); records what was asked.
class TableFetcher final : public Fetcher {
 public:
  std::map<std::string, std::string> answers;
  std::vector<std::string> asked;
  asio::awaitable<std::vector<std::optional<std::string>>> fetch(Calls calls) override {
    std::vector<std::optional<std::string>> out;
    for (auto& [method, params] : calls) {
      asked.push_back(method + " " + params);
      auto it = answers.find(method + " " + params);
      out.push_back(it == answers.end() ? std::nullopt : std::optional(it->second));
    }
    co_return out;
  }
  void by_number(std::uint64_t n, const std::string& b) {
    answers[fmt::format(R"(eth_getBlockByNumber ["0x{:x}",false])", n)] = b;
  }
  void by_hash(const std::string& hash, const std::string& b) {
    answers[fmt::format(R"(eth_getBlockByHash ["{}",false])", hash)] = b;
  }
};

struct Run {
  asio::io_context io;
  std::vector<std::string> delivered;
  std::vector<std::string> notes;
  Deliver deliver = [this](const std::string& r) { delivered.push_back(r); };
  Note note = [this](const std::string& l) { notes.push_back(l); };
  void go(asio::awaitable<void> work) {
    asio::co_spawn(io, std::move(work), asio::detached);
    io.run();
    io.restart();
  }
};

std::vector<std::string> hashes(const std::vector<std::string>& delivered) {
  std::vector<std::string> out;
  for (const auto& d : delivered) out.push_back(parse_block(d)->hash);
  return out;
}

}  // namespace

TEST_CASE("HeadStream: a gap is backfilled by number, in order; duplicates are dropped",
          "[ws_stream]") {
  Run run;
  TableFetcher f;
  HeadStream s;
  const WsChainConfig config;
  for (std::uint64_t n = 11; n <= 14; ++n) f.by_number(n, block(n));
  run.go(s.on_head(block(10), config, f, run.deliver, run.note));
  run.go(s.on_head(block(10), config, f, run.deliver, run.note));  // the same head again
  run.go(s.on_head(block(15), config, f, run.deliver, run.note));  // 11..14 missed
  run.go(s.on_head(block(14), config, f, run.deliver, run.note));  // a late duplicate
  run.go(s.on_head(block(16), config, f, run.deliver, run.note));
  CHECK(hashes(run.delivered) ==
        std::vector<std::string>{"0xa10", "0xa11", "0xa12", "0xa13", "0xa14", "0xa15", "0xa16"});
  CHECK(s.last_number() == 16);
}

TEST_CASE("HeadStream: a reorg sends the replacement heads from the fork point", "[ws_stream]") {
  Run run;
  TableFetcher f;
  HeadStream s;
  const WsChainConfig config;
  for (std::uint64_t n = 10; n <= 12; ++n)
    run.go(s.on_head(block(n), config, f, run.deliver, run.note));
  // Fork b branches off after 10: b11, b12, b13; the new provider's first head is b13.
  f.by_number(12, block(12, 'b'));  // not asked: 13 follows 12 by number
  f.by_hash("0xb12", block(12, 'b'));
  f.by_hash("0xb11", block(11, 'b', 'a'));
  run.go(s.on_head(block(13, 'b'), config, f, run.deliver, run.note));
  CHECK(hashes(run.delivered) ==
        std::vector<std::string>{"0xa10", "0xa11", "0xa12", "0xb11", "0xb12", "0xb13"});
  REQUIRE(!run.notes.empty());
  CHECK(run.notes.back().find("reorg at 11") != std::string::npos);
  // The old fork's head again (a lagging provider): a reorg back, from 11.
  run.delivered.clear();
  f.by_hash("0xa11", block(11));
  run.go(s.on_head(block(12), config, f, run.deliver, run.note));
  CHECK(hashes(run.delivered) == std::vector<std::string>{"0xa11", "0xa12"});
}

TEST_CASE("HeadStream: a gap over max_backfill_blocks sends only the last ones", "[ws_stream]") {
  Run run;
  TableFetcher f;
  HeadStream s;
  WsChainConfig config;
  config.max_backfill_blocks = 2;
  for (std::uint64_t n = 11; n <= 19; ++n) f.by_number(n, block(n));
  run.go(s.on_head(block(10), config, f, run.deliver, run.note));
  run.go(s.on_head(block(20), config, f, run.deliver, run.note));
  CHECK(hashes(run.delivered) == std::vector<std::string>{"0xa10", "0xa18", "0xa19", "0xa20"});
  CHECK(f.asked.size() == 2);
}

TEST_CASE("LogStream: duplicates dropped; a catch-up fetches the gap and replays a reorg",
          "[ws_stream]") {
  auto log = [](std::uint64_t n, char fork, int index) {
    return fmt::format(
        R"({{"address":"0x01","topics":[],"data":"0x","blockNumber":"0x{:x}","blockHash":"0x{}{}","logIndex":"0x{:x}","removed":false}})",
        n, fork, n, index);
  };
  Run run;
  TableFetcher f;
  LogStream s;
  const WsChainConfig config;
  s.on_log(log(10, 'a', 0), run.deliver);
  s.on_log(log(11, 'a', 0), run.deliver);
  s.on_log(log(11, 'a', 0), run.deliver);
  CHECK(run.delivered.size() == 2);
  const std::string params = R"(["logs",{"address":"0x01"}])";
  CHECK(logs_filter(params, 11, 13) == R"([{"address":"0x01","fromBlock":"0xb","toBlock":"0xd"}])");
  // Same chain: from the last block (11) to the head (13).
  f.answers[R"(eth_blockNumber [])"] = R"("0xd")";
  f.by_number(11, block(11));
  f.answers["eth_getLogs " + logs_filter(params, 11, 13)] =
      "[" + log(11, 'a', 0) + "," + log(12, 'a', 0) + "," + log(13, 'a', 0) + "]";
  run.go(s.catch_up(params, config, f, run.deliver, run.note));
  REQUIRE(run.delivered.size() == 4);
  CHECK(parse_log(run.delivered[3])->block == 13);
  // A reorg: 13 was replaced (b13), 12 still stands: 13's log goes as removed, then b13's.
  run.delivered.clear();
  f.answers[R"(eth_blockNumber [])"] = R"("0xe")";
  f.by_number(13, block(13, 'b', 'a'));
  f.by_number(12, block(12));
  f.answers["eth_getLogs " + logs_filter(params, 13, 14)] =
      "[" + log(13, 'b', 0) + "," + log(14, 'b', 0) + "]";
  run.go(s.catch_up(params, config, f, run.deliver, run.note));
  REQUIRE(run.delivered.size() == 3);
  CHECK(parse_log(run.delivered[0])->removed);
  CHECK(parse_log(run.delivered[0])->block_hash == "0xa13");
  CHECK(parse_log(run.delivered[1])->block_hash == "0xb13");
  CHECK(!parse_log(run.delivered[1])->removed);
}

TEST_CASE("ws_stream helpers", "[ws_stream]") {
  CHECK(mark_removed(R"({"a":1,"removed":false})") == R"({"a":1,"removed":true})");
  CHECK(mark_removed(R"({"a":1})") == R"({"removed":true,"a":1})");
  CHECK(split_array(R"([{"a":1}, {"b":[2]}])") ==
        std::vector<std::string>{R"({"a":1})", R"({"b":[2]})"});
  CHECK(parse_hex("0x1f") == 31);
  CHECK(!parse_hex("1f"));
  CHECK(logs_filter(R"(["logs",{}])", 1, 2) == R"([{"fromBlock":"0x1","toBlock":"0x2"}])");
}

}  // namespace unit_ws_stream_test
