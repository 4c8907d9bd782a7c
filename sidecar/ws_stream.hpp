#pragma once
// One continuous stream per shared subscription (issue 18), whatever provider serves it: newHeads
// without gaps, duplicates or a missed reorg (HeadStream), logs without gaps or duplicates, with
// the logs of blocks a failover finds replaced sent again as `removed: true` (LogStream). What was
// missed is fetched over HTTP through the router (a Fetcher), so failover applies to it too.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/config.hpp"

namespace rpcroute::sidecar {

/// Calls over HTTP for a stream: one result (raw JSON) per call, nullopt for a call that failed or
/// found nothing (null).
class Fetcher {
 public:
  using Calls = std::vector<std::pair<std::string, std::string>>;  // method, params
  virtual ~Fetcher() = default;
  virtual asio::awaitable<std::vector<std::optional<std::string>>> fetch(Calls calls) = 0;
};

/// Where a stream's events go (every client of the subscription), as raw JSON results.
using Deliver = std::function<void(const std::string& result)>;
/// What a stream says about what it did (failover backfills, reorgs): one line each.
using Note = std::function<void(const std::string& line)>;

struct BlockRef {
  std::uint64_t number = 0;
  std::string hash;
  std::string parent;
};
/// number, hash and parentHash of a block header (a newHeads event, eth_getBlockBy*'s result).
[[nodiscard]] std::optional<BlockRef> parse_block(std::string_view raw);

struct LogRef {
  std::uint64_t block = 0;
  std::string block_hash;
  std::uint64_t index = 0;
  bool removed = false;
};
[[nodiscard]] std::optional<LogRef> parse_log(std::string_view raw);
/// The raw JSON of each element of an array (eth_getLogs' result).
[[nodiscard]] std::vector<std::string> split_array(std::string_view raw);
/// A delivered log sent again for a block that is no longer in the chain.
[[nodiscard]] std::string mark_removed(std::string_view log);
/// eth_getLogs params for a `logs` subscription's params (["logs", {address, topics}]) over
/// [from, to].
[[nodiscard]] std::string logs_filter(std::string_view subscribe_params, std::uint64_t from,
                                      std::uint64_t to);
[[nodiscard]] std::string hex(std::uint64_t n);
[[nodiscard]] std::optional<std::uint64_t> parse_hex(std::string_view s);

class HeadStream {
 public:
  /// Recent heads remembered: duplicates are dropped and reorgs found within this window.
  static constexpr std::size_t kWindow = 256;

  /// A head from the serving socket: delivered after the heads missed since the last one (by
  /// number, at most max_backfill_blocks) or, when its parent is not the last head delivered, after
  /// the replacement heads from the fork point (walked back by parent hash); dropped when it was
  /// delivered already.
  asio::awaitable<void> on_head(std::string raw, const WsChainConfig& config, Fetcher& fetcher,
                                const Deliver& deliver, const Note& note);
  [[nodiscard]] std::optional<std::uint64_t> last_number() const {
    if (ring_.empty()) return std::nullopt;
    return ring_.back().number;
  }

 private:
  [[nodiscard]] bool known(std::string_view hash) const;
  void record(const BlockRef& block);
  std::deque<BlockRef> ring_;  // delivered, ascending by number
};

class LogStream {
 public:
  /// Recent logs remembered for dedupe and for the `removed` replay of a reorg.
  static constexpr std::size_t kWindow = 4096;

  /// A log from the serving socket: delivered unless it was already.
  void on_log(const std::string& raw, const Deliver& deliver);
  /// After a resubscribe: the logs since the last block delivered, fetched with eth_getLogs up to
  /// the chain's head; the logs of blocks no longer in the chain are sent as removed first.
  asio::awaitable<void> catch_up(const std::string& params, const WsChainConfig& config,
                                 Fetcher& fetcher, const Deliver& deliver, const Note& note);

 private:
  struct Kept {
    LogRef ref;
    std::string raw;
  };
  std::deque<Kept> ring_;  // delivered, in delivery order
};

}  // namespace rpcroute::sidecar
