#pragma once
// eth_getLogs splitting (issue 19): a range wider than a provider takes is fetched in parts and
// merged in block order into the array the node would have given.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/config.hpp"
#include "rpcroute/health/model.hpp"

namespace rpcroute {

/// What a provider's error answer to eth_getLogs says about the request's size.
struct LogRangeError {
  bool too_large = false;                     // the range or its result is too large: split it
  std::optional<std::uint64_t> block_limit;   // "up to a 2K block range": the widest range taken
  std::optional<std::uint64_t> result_limit;  // "more than 10000 results": not a block count
};

/// Reads an error message in the wordings of the major providers and nodes (Alchemy, Infura,
/// QuickNode, Ankr, Chainstack, BlastAPI, Cloudflare, geth, erigon, reth; examples in
/// tests/fixtures/log-range-errors.json). Anything else: too_large false.
[[nodiscard]] LogRangeError read_log_range_error(std::string_view message);

/// The widest range a provider takes: its max_block_range, or the limit it stated (learned), the
/// lower of the two; nullopt when neither is known.
[[nodiscard]] std::optional<std::uint64_t> log_range_limit(const Provider& provider,
                                                           const ProviderState* state);

/// An inclusive block range.
struct BlockSpan {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  [[nodiscard]] std::uint64_t blocks() const { return to - from + 1; }
  bool operator==(const BlockSpan&) const = default;
};

/// `span` cut in block order into parts of at most `chunk` blocks (chunk 0 counts as 1).
[[nodiscard]] std::vector<BlockSpan> split_span(BlockSpan span, std::uint64_t chunk);

/// The eth_getLogs params `params` (a one-filter array) with fromBlock/toBlock set to `span`, every
/// other filter field kept; nullopt when the params are not such an array.
[[nodiscard]] std::optional<std::string> logs_params_for(std::string_view params, BlockSpan span);

/// Appends the elements of the JSON array `array` to `merged` (the inside of an array, comma
/// separated). False when `array` is not an array.
bool append_log_array(std::string& merged, std::string_view array);

inline constexpr std::size_t kLogSplitConcurrency = 4;  // parts in flight at once
inline constexpr std::size_t kMaxLogParts = 4096;       // one request is never cut finer
inline constexpr int kMaxLogHalvings = 16;  // a part that is still too large after this fails

}  // namespace rpcroute
