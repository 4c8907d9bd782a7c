#pragma once
// The sidecar's answer cache (issue 19): a size-bounded LRU by bytes of results that can no longer
// change — by-hash answers once non-null, numbered reads at or below the chain's finalized block,
// constants — and the rules that say which those are. Keys are canonical (cache_key): the chain,
// the method and the params without insignificant whitespace, hex strings in lower case. The same
// key joins identical in-flight reads (coalesce.hpp).

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rpcroute::sidecar {

/// How a method's answers may be kept.
enum class CacheRule : std::uint8_t {
  never,
  constant,  // the same for the chain forever (net_version)
  by_hash,   // addressed by a block hash: fixed once non-null
  mined,     // a transaction or receipt by hash: kept once its block is finalized
  at_block,  // reads at a block parameter (or a log range): kept at or below finalized
};

/// The rule of `method` (a sorted table; `never` for anything not in it).
[[nodiscard]] CacheRule cache_rule(std::string_view method);

/// Writes the canonical key of a call on `chain_tag` (any value naming the chain) into `out`,
/// replacing its contents: the tag, the method, and the params with whitespace outside strings
/// dropped and every string of the form 0x<hex> in lower case (hex is case-insensitive in
/// JSON-RPC). Params over kMaxKeyParams bytes are not keyed: false.
///   cache_key(k, 1, "eth_getBalance", R"([ "0xAb", "0x10" ])")  // ... ["0xab","0x10"]
inline constexpr std::size_t kMaxKeyParams = 16 * 1024;
bool cache_key(std::string& out, std::uintptr_t chain_tag, std::string_view method,
               std::string_view params);

/// What the cache needs to know of a chain now.
struct ChainFinality {
  std::uint64_t head = 0;       // the believed head (the head rule), 0 when none is known
  std::uint64_t finalized = 0;  // highest finalized block reported; 0 with `known` false: none
  bool known = false;
};

/// Whether a call may be answered from the cache, and its answer kept, judged from its params:
/// `at_block` calls name blocks by number at or below finalized (both ends of a log range), or
/// by hash; never `latest`, `pending`, `safe` or a missing block.
[[nodiscard]] bool request_cacheable(CacheRule rule, std::string_view method,
                                     std::string_view params, const ChainFinality& chain);
/// Whether a result (raw JSON, from a success that passed the exchange checks) may be kept: never
/// null; a `mined` one only when its blockNumber is at or below finalized.
[[nodiscard]] bool result_cacheable(CacheRule rule, std::string_view result,
                                    const ChainFinality& chain);

struct CacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t bypasses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t inserts = 0;
  std::uint64_t too_large = 0;  // results over the entry cap, not kept
  std::size_t bytes = 0;
  std::size_t entries = 0;
  std::size_t max_bytes = 0;
  CacheStats& operator+=(const CacheStats& o);
};

/// Results by canonical key, least recently used first out once their bytes pass the cap. An entry
/// is charged its key, its result and kEntryOverhead; one over max_bytes / 8 (and over
/// kMaxEntryBytes) is not kept, so that one answer cannot flush the rest.
class ResponseCache {
 public:
  static constexpr std::size_t kEntryOverhead = 128;
  static constexpr std::size_t kMaxEntryBytes = std::size_t{8} << 20;

  explicit ResponseCache(std::size_t max_bytes);
  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;

  /// The result kept under `key`, now the most recently used; null when none. Counts a hit or miss.
  [[nodiscard]] const std::string* find(std::string_view key);
  /// Keeps (or replaces) `result` under `key`, evicting the least recently used as needed.
  void insert(std::string_view key, std::string_view result);
  /// Drops everything (a chain went backwards: a restarted dev chain).
  void clear();
  void on_bypass() { ++stats_.bypasses; }

  [[nodiscard]] const CacheStats& stats() const { return stats_; }
  [[nodiscard]] std::size_t max_entry_bytes() const;

 private:
  struct Entry {
    std::string key;
    std::string result;
    [[nodiscard]] std::size_t cost() const { return key.size() + result.size() + kEntryOverhead; }
  };
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index_;  // keys in lru_
  CacheStats stats_;
};

}  // namespace rpcroute::sidecar
