#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rpcroute {

/// What keeps a call with a sender's earlier calls (DESIGN.md section 7, issue 15): the sender's
/// address, or the hash of a transaction it sent. Empty when the call is not one of a sender's.
struct StickyKey {
  enum class Kind { none, sender, transaction };
  Kind kind = Kind::none;
  std::string value;  // lower-case 0x address or hash
  [[nodiscard]] bool empty() const { return kind == Kind::none; }
};

/// The key of a call, from the table of methods that read a sender's pending state, send, or poll
/// for a transaction: eth_getTransactionCount (address), eth_call / eth_estimateGas /
/// eth_createAccessList / eth_sendTransaction (`from`), eth_sendRawTransaction (the sender,
/// recovered from the signature), eth_getTransactionReceipt / eth_getTransactionByHash (hash).
[[nodiscard]] StickyKey sticky_key(std::string_view method, std::string_view params);

/// Which provider last served each sender and transaction, for a short sliding window: a sender's
/// nonce lookups, sends and receipt polls then land on one node (one mempool). Bounded: entries
/// expire `window_ms` after their last use, and at most `capacity` are kept (the oldest go first).
class StickyProviders {
 public:
  static constexpr std::int64_t kWindowMs = 30'000;
  static constexpr std::size_t kCapacity = 10'000;

  explicit StickyProviders(std::int64_t window_ms = kWindowMs, std::size_t capacity = kCapacity)
      : window_ms_(window_ms), capacity_(capacity) {}

  /// The provider id `key` sticks to on `chain`, if it was used within the window.
  [[nodiscard]] std::optional<std::string_view> find(std::string_view chain, const StickyKey& key,
                                                     std::int64_t now_ms) const;
  /// Keeps `key` on `provider_id` (again) from `now_ms`.
  void stick(std::string_view chain, const StickyKey& key, std::string_view provider_id,
             std::int64_t now_ms);

  [[nodiscard]] std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string provider;
    std::int64_t t_ms = 0;
  };
  void make_room(std::int64_t now_ms);

  std::int64_t window_ms_;
  std::size_t capacity_;
  std::unordered_map<std::string, Entry> entries_;  // "chain/value"
};

}  // namespace rpcroute
