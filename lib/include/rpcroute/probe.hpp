#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

/// What one probe of one provider found (DESIGN.md section 8): chain id, head, sync status,
/// client, archive capability, batch support, round-trip latency.
struct ProbeReport {
  const Provider* provider = nullptr;
  bool reachable = false;
  std::string failure;  // why it is unreachable, or the first failure seen
  std::optional<std::uint64_t> chain_id;
  std::optional<std::uint64_t> height;
  std::optional<bool> syncing;
  std::optional<bool> archival;
  std::optional<bool> batch;
  std::string client_version;
  double latency_ms = 0;  // median round trip of the single calls
  std::int64_t t_ms = 0;

  [[nodiscard]] ProbeFindings findings() const;
};

/// Probes one provider. With a store, every exchange is recorded like live traffic (samples,
/// breaker events), plus the height and the findings.
[[nodiscard]] asio::awaitable<ProbeReport> probe_provider(
    Transport& transport, const Profile& profile, const Chain& chain, const Provider& provider,
    HealthStore* store, const Clock& clock, Random& rng, std::int64_t timeout_ms);

struct ProbeVerdict {
  bool healthy = false;
  std::string reason;  // why not, or "ok"
  std::uint64_t lag = 0;
};

/// Judges reports together with the router's head rule (chain_head): a height it does not believe
/// is unhealthy with the reason, and lag is measured against the head of the providers on the right
/// chain.
[[nodiscard]] std::vector<ProbeVerdict> assess_probes(const Chain& chain,
                                                      std::span<const ProbeReport> reports);

}  // namespace rpcroute
