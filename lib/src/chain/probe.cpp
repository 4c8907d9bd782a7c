#include "rpcroute/probe.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "rpcroute/blocks.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/metrics.hpp"

namespace rpcroute {

ProbeFindings ProbeReport::findings() const {
  ProbeFindings f;
  f.t_ms = t_ms;
  f.chain_id = chain_id.value_or(0);
  f.archival = archival;
  f.batch = batch;
  f.syncing = syncing;
  f.client_version = client_version;
  return f;
}

namespace {

constexpr std::string_view kProbeAddress = R"("0x0000000000000000000000000000000000000000")";

std::optional<std::string> string_result(const std::string& raw) {
  if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return std::nullopt;
  auto s = raw.substr(1, raw.size() - 2);
  if (s.size() > 200) s.resize(200);
  // Keep it printable: a version string is shown in tables.
  for (auto& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\') c = ' ';
  }
  return s;
}

}  // namespace

asio::awaitable<ProbeReport> probe_provider(Transport& transport, const Profile& profile,
                                            const Chain& chain, const Provider& provider,
                                            HealthStore* store, const Clock& clock, Random& rng,
                                            std::int64_t timeout_ms) {
  ProbeReport report;
  report.provider = &provider;
  const auto key = provider_key(profile.name, chain.name, provider);
  std::vector<double> latencies;

  // One call, recorded like live traffic. Returns the raw result when the provider answered one.
  auto call = [&](std::string_view method, std::string_view params, bool record,
                  Classification* out) -> asio::awaitable<std::optional<std::string>> {
    UpstreamCall c{method, params};
    Exchange ex = co_await send_exchange(transport, provider, std::span<const UpstreamCall>(&c, 1),
                                         timeout_ms, clock, profile);
    if (record && store != nullptr) {
      record_exchange(*store, profile.health, key, std::span<const UpstreamCall>(&c, 1), ex,
                      clock.now_ms(), rng.uniform());
    }
    if (out != nullptr) *out = ex.per_call[0];
    if (ex.per_call[0].cls == OutcomeClass::provider_failure ||
        ex.per_call[0].cls == OutcomeClass::rate_limited) {
      if (report.failure.empty()) {
        report.failure = fmt::format("{} {}: {}", method, outcome_name(ex.per_call[0].outcome),
                                     ex.per_call[0].message);
      }
    } else {
      latencies.push_back(ex.latency_ms());
    }
    if (ex.per_call[0].cls == OutcomeClass::success) co_return std::string(*ex.replies[0]->result);
    co_return std::nullopt;
  };

  Classification first;
  auto chain_id = co_await call("eth_chainId", "[]", true, &first);
  report.t_ms = clock.now_ms();
  if (first.cls == OutcomeClass::provider_failure || first.cls == OutcomeClass::rate_limited) {
    report.reachable = false;
    co_return report;
  }
  report.reachable = true;
  if (chain_id) report.chain_id = jsonrpc::parse_quantity(*chain_id);

  if (auto h = co_await call("eth_blockNumber", "[]", true, nullptr)) {
    report.height = jsonrpc::parse_quantity(*h);
    if (report.height && store != nullptr) {
      store->record(HeightEvent{key, Height{*report.height, clock.now_ms()}}, profile.health);
    }
  }
  if (auto s = co_await call("eth_syncing", "[]", true, nullptr)) report.syncing = *s != "false";
  if (auto v = co_await call("web3_clientVersion", "[]", true, nullptr)) {
    report.client_version = string_result(*v).value_or("");
  }

  // Archive: state at an early block. Block 1 where it exists (block 0 is kept by every node, but
  // a fresh dev chain has nothing else).
  const std::string block = report.height && *report.height >= 1 ? "\"0x1\"" : "\"0x0\"";
  Classification archive;
  const std::string balance_params =
      fmt::format("[{},{}]", kProbeAddress, block);  // named: see send_exchange
  auto balance = co_await call("eth_getBalance", balance_params, true, &archive);
  if (balance) {
    report.archival = true;
  } else if (archive.cls == OutcomeClass::capability) {
    report.archival = false;
  }

  // Batch support; not recorded: refusing batches is a capability, not a health failure.
  std::vector<UpstreamCall> pair{{"eth_chainId", "[]"}, {"eth_blockNumber", "[]"}};
  Exchange bex = co_await send_exchange(transport, provider, pair, timeout_ms, clock, profile);
  bool both = bex.per_call[0].cls == OutcomeClass::success &&
              bex.per_call[1].cls == OutcomeClass::success && bex.response && bex.response->batch;
  if (both) {
    report.batch = true;
  } else if (bex.http.error == TransportError::none) {
    report.batch = false;
  }

  if (!latencies.empty()) report.latency_ms = quantile(latencies, 0.5);
  if (store != nullptr) store->record(ProbeEvent{key, report.findings()}, profile.health);
  co_return report;
}

std::vector<ProbeVerdict> assess_probes(const Chain& chain, std::span<const ProbeReport> reports) {
  // The router's head rule, on the heights just probed (each at its own time).
  std::vector<HeadClaim> claims(reports.size(), HeadClaim{Height{}, false});
  std::vector<ClaimJudgement> judgements(reports.size());
  std::int64_t now = 0;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (!r.reachable || !r.height || (r.chain_id && *r.chain_id != chain.chain_id)) continue;
    claims[i] = {Height{*r.height, std::max<std::int64_t>(r.t_ms, 1)}, true};
    now = std::max(now, claims[i].height.t_ms);
  }
  const auto head = chain_head(claims, judgements, chain, now).head;
  std::vector<ProbeVerdict> out;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    ProbeVerdict v;
    const auto lag = head && judgements[i].verdict == ClaimVerdict::believed
                         ? lag_behind(claims[i].height, *head, chain)
                         : 0;
    if (lag > 0) v.lag = static_cast<std::uint64_t>(lag);
    if (!r.reachable) {
      v.reason = r.failure.empty() ? "unreachable" : r.failure;
    } else if (!r.chain_id) {
      v.reason = "eth_chainId gave no answer";
    } else if (*r.chain_id != chain.chain_id) {
      v.reason =
          fmt::format("wrong chain id {} (the profile says {})", *r.chain_id, chain.chain_id);
    } else if (!r.height) {
      v.reason = "eth_blockNumber gave no answer";
    } else if (quarantined(judgements[i].verdict)) {
      v.reason = claim_doubt(claims[i].height, judgements[i], chain);
    } else if (lag > static_cast<std::int64_t>(chain.max_lag_blocks)) {
      v.reason =
          fmt::format("lagging {} blocks behind (max_lag_blocks {})", v.lag, chain.max_lag_blocks);
    } else if (r.syncing.value_or(false)) {
      v.reason = "syncing";
    } else {
      v.healthy = true;
      v.reason = "ok";
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace rpcroute
