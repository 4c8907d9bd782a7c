// The answer cache: which answers can be kept (rules on the method, the params and the result), the
// canonical key, and the LRU by bytes.
#include "cache.hpp"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "rpcroute/blocks.hpp"
#include "rpcroute/jsonrpc.hpp"

namespace rpcroute::sidecar {

namespace {

struct RuleRow {
  std::string_view method;
  CacheRule rule;
};

// Sorted by name (checked below). Every method here is a read in the catalogue (methods.cpp); a
// unit test holds the two together.
constexpr std::array kRules = {
    RuleRow{"eth_call", CacheRule::at_block},
    RuleRow{"eth_getBalance", CacheRule::at_block},
    RuleRow{"eth_getBlockByHash", CacheRule::by_hash},
    RuleRow{"eth_getBlockByNumber", CacheRule::at_block},
    RuleRow{"eth_getBlockReceipts", CacheRule::at_block},
    RuleRow{"eth_getBlockTransactionCountByHash", CacheRule::by_hash},
    RuleRow{"eth_getBlockTransactionCountByNumber", CacheRule::at_block},
    RuleRow{"eth_getCode", CacheRule::at_block},
    RuleRow{"eth_getLogs", CacheRule::at_block},
    RuleRow{"eth_getProof", CacheRule::at_block},
    RuleRow{"eth_getStorageAt", CacheRule::at_block},
    RuleRow{"eth_getTransactionByBlockNumberAndIndex", CacheRule::at_block},
    RuleRow{"eth_getTransactionByHash", CacheRule::mined},
    RuleRow{"eth_getTransactionCount", CacheRule::at_block},
    RuleRow{"eth_getTransactionReceipt", CacheRule::mined},
    RuleRow{"net_version", CacheRule::constant},
};
static_assert(std::is_sorted(kRules.begin(), kRules.end(),
                             [](const RuleRow& a, const RuleRow& b) {
                               return a.method < b.method;
                             }),
              "the cache rules must stay sorted");

bool is_hex_digit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/// Whether a numbered or hashed block may be read from the cache: at or below finalized.
bool settled_block(const std::optional<BlockRef>& ref, const ChainFinality& chain) {
  if (!ref) return false;
  switch (ref->kind) {
    case BlockRef::Kind::hash:
      return true;
    case BlockRef::Kind::earliest:
      return chain.known;
    case BlockRef::Kind::number:
      return chain.known && ref->number <= chain.finalized && chain.finalized <= chain.head;
    default:  // latest, pending, safe, finalized: they move
      return false;
  }
}

}  // namespace

CacheRule cache_rule(std::string_view method) {
  using enum CacheRule;
  const auto* it =
      std::lower_bound(kRules.begin(), kRules.end(), method,
                       [](const RuleRow& row, std::string_view m) { return row.method < m; });
  return it != kRules.end() && it->method == method ? it->rule : never;
}

bool cache_key(std::string& out, std::uintptr_t chain_tag, std::string_view method,
               std::string_view params) {
  if (params.size() > kMaxKeyParams) return false;
  out.resize(sizeof chain_tag + method.size() + 1 + params.size());
  char* p = out.data();
  std::memcpy(p, &chain_tag, sizeof chain_tag);
  p += sizeof chain_tag;
  std::memcpy(p, method.data(), method.size());
  p += method.size();
  *p++ = '\0';  // no method name holds one: "ab"+"[c" and "a"+"b[c" differ
  const char* in = params.data();
  const char* const end = in + params.size();
  while (in < end) {
    const char c = *in++;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    *p++ = c;
    if (c != '"') continue;
    // A string: copied as is up to its closing quote; one that is 0x<hex> goes in lower case.
    const char* const start = in;
    bool hex = end - in >= 2 && in[0] == '0' && in[1] == 'x';
    const char* q = hex ? in + 2 : in;
    while (q < end && *q != '"' && *q != '\\') {
      hex = hex && is_hex_digit(*q);
      ++q;
    }
    if (q < end && *q == '"') {  // a string without escapes: whole here
      for (const char* s = start; s <= q; ++s)
        *p++ = hex && *s >= 'A' && *s <= 'F' ? static_cast<char>(*s - 'A' + 'a') : *s;
      in = q + 1;
      continue;
    }
    // Escapes: copied byte by byte to the closing quote, an escaped quote included.
    while (in < end) {
      const char s = *in++;
      *p++ = s;
      if (s == '\\' && in < end) {
        *p++ = *in++;
      } else if (s == '"') {
        break;
      }
    }
  }
  out.resize(static_cast<std::size_t>(p - out.data()));
  return true;
}

bool request_cacheable(CacheRule rule, std::string_view method, std::string_view params,
                       const ChainFinality& chain) {
  using enum CacheRule;
  switch (rule) {
    case never:
      return false;
    case constant:
    case by_hash:
    case mined:
      return true;
    case at_block:
      break;
  }
  const BlockNeed need = analyze_block_need(method, params);
  if (need.block) return settled_block(need.block, chain);
  return need.from && need.to && settled_block(need.from, chain) && settled_block(need.to, chain);
}

bool result_cacheable(CacheRule rule, std::string_view result, const ChainFinality& chain) {
  using enum CacheRule;
  if (rule == never || result.empty() || result == "null") return false;
  if (rule != mined) return true;
  // A transaction or receipt moves with a reorganisation until its block is final.
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(result.data(), result.size(), true).get(root)) return false;
  std::string_view number;
  if (root.at_key("blockNumber").get_string().get(number) || number.size() > 20) return false;
  char quoted[24];
  quoted[0] = '"';
  std::memcpy(quoted + 1, number.data(), number.size());
  quoted[number.size() + 1] = '"';
  const auto n = jsonrpc::parse_quantity(std::string_view(quoted, number.size() + 2));
  return n && chain.known && *n <= chain.finalized && chain.finalized <= chain.head;
}

CacheStats& CacheStats::operator+=(const CacheStats& o) {
  hits += o.hits;
  misses += o.misses;
  bypasses += o.bypasses;
  evictions += o.evictions;
  inserts += o.inserts;
  too_large += o.too_large;
  bytes += o.bytes;
  entries += o.entries;
  max_bytes += o.max_bytes;
  return *this;
}

ResponseCache::ResponseCache(std::size_t max_bytes) { stats_.max_bytes = max_bytes; }

std::size_t ResponseCache::max_entry_bytes() const {
  return std::min(stats_.max_bytes / 8, kMaxEntryBytes);
}

const std::string* ResponseCache::find(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  if (it->second != lru_.begin()) lru_.splice(lru_.begin(), lru_, it->second);
  return &it->second->result;
}

void ResponseCache::insert(std::string_view key, std::string_view result) {
  const std::size_t cost = key.size() + result.size() + kEntryOverhead;
  if (cost > max_entry_bytes()) {
    ++stats_.too_large;
    return;
  }
  if (auto it = index_.find(key); it != index_.end()) {  // two misses raced: keep the newer
    stats_.bytes -= it->second->cost();
    lru_.erase(it->second);
    index_.erase(it);
    --stats_.entries;
  }
  while (!lru_.empty() && stats_.bytes + cost > stats_.max_bytes) {
    const Entry& old = lru_.back();
    stats_.bytes -= old.cost();
    index_.erase(std::string_view(old.key));
    lru_.pop_back();
    --stats_.entries;
    ++stats_.evictions;
  }
  lru_.push_front(Entry{std::string(key), std::string(result)});
  index_.emplace(std::string_view(lru_.front().key), lru_.begin());
  stats_.bytes += cost;
  ++stats_.entries;
  ++stats_.inserts;
}

void ResponseCache::clear() {
  index_.clear();
  lru_.clear();
  stats_.bytes = 0;
  stats_.entries = 0;
}

}  // namespace rpcroute::sidecar
