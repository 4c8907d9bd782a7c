#pragma once
// Inputs shared by the micro-benchmarks: request and response bodies of realistic shape, a profile
// with N providers and a state with what a busy router would have learnt about them.
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute::perf {

/// A fixed "now" so that samples, breakers and rate limits sit where the fixtures put them.
inline constexpr std::int64_t kNowMs = 1'700'000'000'000;

/// 40 hex digits derived from n (an address).
inline std::string hex_address(std::uint64_t n) {
  return fmt::format("0x{:016x}{:016x}{:08x}", n * 0x9e3779b97f4a7c15ULL, ~n * 0xc2b2ae3d27d4eb4fULL,
                     static_cast<std::uint32_t>(n));
}

/// An eth_call of ERC-20 balanceOf: a typical ~200 B request.
inline std::string request_200b(std::uint64_t id = 42) {
  return fmt::format(
      R"({{"jsonrpc":"2.0","id":{},"method":"eth_call","params":[{{"to":"{}","data":"0x70a08231000000000000000000000000{}"}},"latest"]}})",
      id, hex_address(id), hex_address(id + 1).substr(2));
}

/// A batch of `n` calls as a dapp sends them (balances, calls, block number).
inline std::string request_batch(int n) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    switch (i % 3) {
      case 0: out += request_200b(static_cast<std::uint64_t>(i)); break;
      case 1:
        out += fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"eth_getBalance","params":["{}","latest"]}})", i,
                           hex_address(static_cast<std::uint64_t>(i)));
        break;
      default: out += fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"eth_blockNumber","params":[]}})", i);
    }
  }
  out += ']';
  return out;
}

inline std::string response_small(int id = 0) {
  return fmt::format(R"({{"jsonrpc":"2.0","id":{},"result":"0x1386a3c"}})", id);
}

/// An eth_getLogs answer (ERC-20 Transfer logs) of at least `bytes` bytes.
inline std::string response_logs(std::size_t bytes, int id = 0) {
  std::string out = fmt::format(R"({{"jsonrpc":"2.0","id":{},"result":[)", id);
  for (std::uint64_t i = 0; out.size() < bytes; ++i) {
    if (i > 0) out += ',';
    out += fmt::format(
        R"({{"address":"{}","topics":["0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef","0x000000000000000000000000{}","0x000000000000000000000000{}"],)"
        R"("data":"0x{:064x}","blockNumber":"0x{:x}","transactionHash":"0x{:016x}{:016x}{:016x}{:016x}",)"
        R"("transactionIndex":"0x{:x}","blockHash":"0x{:064x}","logIndex":"0x{:x}","removed":false}})",
        hex_address(i % 7), hex_address(i).substr(2), hex_address(i + 1).substr(2), i * 1'000'000'007ULL,
        0x1386a3cULL + i / 50, i, ~i, i * 31, i * 17, i % 200, 0xabcdefULL + i / 50, i % 400);
  }
  out += "]}";
  return out;
}

/// A profile with one chain of `n` providers: mixed priorities and weights, a deny list on every
/// fifth, as a large multi-provider setup would have.
inline Profile profile_with(int n) {
  std::string yaml = "chains:\n  perf:\n    chain_id: 1\n    block_time_ms: 12000\n    providers:\n";
  for (int i = 0; i < n; ++i) {
    yaml += fmt::format(R"(      - {{ id: p{}, url: "http://10.0.{}.{}:8545/v1/key{}", priority: {}, weight: {})", i, i / 250,
                        i % 250 + 1, i, i % 4 + 1, 10 * (i % 5 + 1));
    if (i % 5 == 4) yaml += R"(, methods: { deny: ["debug_*", "trace_*"] })";
    yaml += " }\n";
  }
  auto profile = load_profile_text(yaml, "perf.yaml");
  if (!profile) throw std::runtime_error(profile.error().message);
  return std::move(*profile);
}

inline constexpr const char* kMethods[] = {"eth_call", "eth_blockNumber", "eth_getLogs"};

/// What a router that served traffic for a while knows: 100 samples per provider and method in the
/// last 100 s (2% errors, latencies spread by provider), fresh heights, one provider in eight
/// rate-limited, one in sixteen half-open and one in thirty-two open.
inline State state_for(const Profile& profile) {
  State state;
  const Chain& chain = profile.chains.front();
  for (std::size_t i = 0; i < chain.providers.size(); ++i) {
    const Provider& p = chain.providers[i];
    ProviderState ps;
    ps.profile = profile.name;
    ps.chain = chain.name;
    ps.provider = p.id;
    ps.fingerprint = p.fingerprint;
    ps.height = {0x1386a3cULL, kNowMs - 2'000};
    ps.last_used_ms = kNowMs - 100;
    ps.probe.t_ms = kNowMs - 60'000;
    ps.probe.chain_id = chain.chain_id;
    if (i % 8 == 3) ps.rate_limited_until_ms = kNowMs + 10'000;
    if (i % 16 == 5) {  // open long enough ago to be half-open now
      ps.breaker.state = BreakerState::open;
      ps.breaker.opened_ms = kNowMs - 60'000;
      ps.breaker.recovery_ms = 30'000;
      ps.breaker.reason = "timeout";
    }
    if (i % 32 == 7) {
      ps.breaker.state = BreakerState::open;
      ps.breaker.opened_ms = kNowMs - 1'000;
      ps.breaker.recovery_ms = 30'000;
      ps.breaker.reason = "http_error";
    }
    for (const char* method : kMethods) {
      auto& samples = ps.methods[method];
      for (int s = 0; s < 100; ++s) {
        Sample sample;
        sample.t_ms = kNowMs - 100'000 + s * 1'000;
        sample.latency_us = 20'000 + static_cast<std::int64_t>(i) * 3'000 + (s * 7'919) % 15'000;
        sample.outcome = s % 50 == 17 ? Outcome::timeout : Outcome::success;
        samples.push_back(sample);
      }
    }
    state.providers.emplace(provider_key(profile.name, chain.name, p), std::move(ps));
  }
  ChainState cs;
  cs.high_water = {0x1386a3cULL, kNowMs - 2'000};
  cs.rr_cursor = 12'345;
  state.chains.emplace(chain_key(profile.name, chain), cs);
  return state;
}

}  // namespace rpcroute::perf
