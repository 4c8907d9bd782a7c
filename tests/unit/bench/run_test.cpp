// The load half of the bench engine against an in-process JSON-RPC server on 127.0.0.1: the
// warm-up is not counted, every provider gets its requests on every method, and what it saw is
// recorded as the router records its own.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "rpcroute/bench.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_run_test {

using namespace rpcroute;
using tcp = asio::ip::tcp;

namespace {

/// Answers every JSON-RPC call with its own id: eth_chainId 31337 (or `chain_id`), eth_blockNumber
/// 0x64, anything else "0x1"; counts the calls per method.
struct Node {
  explicit Node(asio::io_context& io) : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}) {}
  tcp::acceptor acceptor;
  std::string chain_id = "0x7a69";
  std::map<std::string, int> calls;

  [[nodiscard]] std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()) + "/";
  }

  static std::string field(const std::string& body, const std::string& name) {
    const auto key = "\"" + name + "\":";
    auto at = body.find(key);
    if (at == std::string::npos) return {};
    at += key.size();
    if (body[at] == '"') return body.substr(at + 1, body.find('"', at + 1) - at - 1);
    return body.substr(at, body.find_first_of(",}", at) - at);
  }

  std::string answer(const std::string& body) {
    const auto method = field(body, "method");
    ++calls[method];
    const std::string result = method == "eth_chainId" ? chain_id : method == "eth_blockNumber" ? "0x64" : "0x1";
    const std::string json = R"({"jsonrpc":"2.0","id":)" + field(body, "id") + R"(,"result":")" + result + "\"}";
    return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(json.size()) +
           "\r\n\r\n" + json;
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    std::string in;
    for (;;) {
      boost::system::error_code ec;
      auto n = co_await asio::async_read_until(socket, asio::dynamic_buffer(in), "\r\n\r\n",
                                               asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      std::size_t length = 0;
      const auto head = in.substr(0, n);
      for (const char* name : {"Content-Length: ", "content-length: "}) {
        if (auto p = head.find(name); p != std::string::npos) length = std::stoul(head.substr(p + 16));
      }
      if (in.size() < n + length) {
        co_await asio::async_read(socket, asio::dynamic_buffer(in), asio::transfer_exactly(n + length - in.size()),
                                  asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return;
      }
      const std::string out = answer(in.substr(n, length));
      in.erase(0, n + length);
      co_await asio::async_write(socket, asio::buffer(out), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
    }
  }

  asio::awaitable<void> run() {
    for (;;) {
      boost::system::error_code ec;
      auto socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
    }
  }
};

/// Records the phases it is told about.
struct Phases final : bench::Observer {
  std::vector<bench::Phase> begun;
  std::size_t last_done = 0;
  bool ended = false;
  void begin(const bench::Phase& phase) override { begun.push_back(phase); }
  void advance(std::size_t done) override { last_done = done; }
  void end() override { ended = true; }
};

Profile profile_for(const Node& a, const Node& b) {
  return *load_profile_text(R"(
chains:
  local:
    chain_id: 31337
    providers:
      - { id: a, url: ")" + a.url() + R"(" }
      - { id: b, url: ")" + b.url() + R"(" }
)",
                            "bench.yaml");
}

/// Runs the plan with the nodes up; gives up after a generous bound.
bench::Results run_plan(asio::io_context& io, std::vector<Node*> nodes, const bench::Plan& plan, HealthSink* store,
                        bench::Observer* observer) {
  Engine engine(io);
  FakeClock clock;
  Random rng(7);
  bench::Results results;
  for (auto* n : nodes) asio::co_spawn(io, n->run(), asio::detached);
  asio::co_spawn(io, bench::run(plan, engine, clock, rng, store, observer), [&](std::exception_ptr e, bench::Results r) {
    REQUIRE_FALSE(e);
    results = std::move(r);
    io.stop();
  });
  io.run_for(std::chrono::seconds(30));
  return results;
}

}  // namespace

TEST_CASE("bench run: every provider on every method, the warm-up not counted", "[bench]") {
  asio::io_context io;
  Node a(io), b(io);
  b.chain_id = "0x1";  // another chain: measured, but it teaches no height
  const Profile profile = profile_for(a, b);
  const Chain& chain = profile.chains.front();
  bench::Plan plan;
  plan.profile = &profile;
  plan.chain = &chain;
  plan.providers = {&chain.providers[0], &chain.providers[1]};
  plan.methods = {"eth_blockNumber", "eth_gasPrice"};
  plan.requests = 5;
  plan.concurrency = 2;
  FakeClock clock;
  StateStore store(std::nullopt, clock, [](const std::string&) {});
  Phases phases;
  const auto results = run_plan(io, {&a, &b}, plan, &store, &phases);

  REQUIRE(results.warmups.size() == 2);
  CHECK(results.warmups[0].ok);
  CHECK(results.warmups[0].chain_id == 31337u);
  CHECK(results.warmups[0].head == 100u);
  CHECK(results.warmups[1].chain_id == 1u);
  REQUIRE(results.tallies.size() == 2);
  for (const auto& per_method : results.tallies) {
    for (const auto& t : per_method) {
      CHECK(t.issued == 5);
      CHECK(t.ok == 5);
      CHECK(t.latencies_ms.size() == 5);
    }
  }
  CHECK(results.any_answer());
  // Warm-up: one eth_chainId, the head, one more eth_chainId for the second worker's connection.
  CHECK(a.calls["eth_chainId"] == 2);
  CHECK(a.calls["eth_blockNumber"] == 1 + 5);
  CHECK(a.calls["eth_gasPrice"] == 5);

  // The phases: the warm-up, then each method with its requests over all providers.
  REQUIRE(phases.begun.size() == 3);
  CHECK(phases.begun[0].method.empty());
  CHECK(phases.begun[0].total == 2);
  CHECK(phases.begun[2].method == "eth_gasPrice");
  CHECK(phases.begun[2].index == 1);
  CHECK(phases.begun[2].count == 2);
  CHECK(phases.begun[2].total == 10);
  CHECK(phases.last_done == 10);
  CHECK(phases.ended);

  // Recorded as the router records: samples for both, a height only from the right chain.
  const auto& state = store.state();
  const auto pa = state.providers.find(provider_key(profile.name, chain.name, chain.providers[0]));
  const auto pb = state.providers.find(provider_key(profile.name, chain.name, chain.providers[1]));
  REQUIRE(pa != state.providers.end());
  REQUIRE(pb != state.providers.end());
  CHECK(pa->second.methods.at("eth_blockNumber").size() == 5);
  CHECK(pb->second.methods.at("eth_gasPrice").size() == 5);
  CHECK(pa->second.height.block == 100);
  CHECK(pb->second.height.block == 0);
}

TEST_CASE("bench run: without a store nothing is recorded; a dead provider is measured as failures",
          "[bench]") {
  asio::io_context io;
  Node a(io), b(io);
  const Profile profile = profile_for(a, b);
  const Chain& chain = profile.chains.front();
  b.acceptor.close();  // refused from the start
  bench::Plan plan;
  plan.profile = &profile;
  plan.chain = &chain;
  plan.providers = {&chain.providers[0], &chain.providers[1]};
  plan.methods = {"eth_chainId"};
  plan.requests = 3;
  plan.concurrency = 1;
  const auto results = run_plan(io, {&a}, plan, nullptr, nullptr);
  REQUIRE(results.tallies.size() == 1);
  CHECK(results.tallies[0][0].ok == 3);
  CHECK(results.tallies[0][1].ok == 0);
  CHECK(results.tallies[0][1].answered == 0);
  CHECK(results.tallies[0][1].errors[static_cast<std::size_t>(OutcomeClass::provider_failure)] == 3);
  CHECK_FALSE(results.warmups[1].ok);
  CHECK_FALSE(results.warmups[1].message.empty());
  CHECK(results.any_answer());
}

}  // namespace unit_run_test
