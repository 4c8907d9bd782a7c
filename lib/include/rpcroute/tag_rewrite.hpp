#pragma once
// Block-tag rewrite (issue 19, `rewrite_latest: true` under a chain): a read's `latest` is sent as
// the chain's high-water height, so that one client's consecutive reads never go backwards across
// providers (proxyd's tag rewrite).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rpcroute {

/// `params` of `method` with its `latest` block replaced by `height` (hex quantity): the block
/// parameter when it says "latest", is null, or is an optional one left out (then added); for
/// eth_getLogs, a filter's fromBlock/toBlock that say "latest" or are left out (never with a
/// blockHash, never a range that would then run backwards). Nullopt when nothing is rewritten
/// (no block parameter, another tag or a number, params that cannot be read).
///
///   rewrite_latest_params("eth_getBalance", R"(["0xab…","latest"])", 100)  // ["0xab…","0x64"]
[[nodiscard]] std::optional<std::string> rewrite_latest_params(std::string_view method,
                                                               std::string_view params,
                                                               std::uint64_t height);

}  // namespace rpcroute
