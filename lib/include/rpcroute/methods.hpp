#pragma once
#include <cstdint>
#include <span>
#include <string_view>

namespace rpcroute {

/// How long one attempt of a method may take by default (DESIGN.md section 5): a head lookup
/// answers in milliseconds, eth_call and eth_getLogs may scan state, a trace replays blocks.
enum class TimeoutClass : std::uint8_t { standard, cheap, heavy, trace };

/// A method's part in a filter's life: the filter lives on the provider that created it.
enum class FilterRole : std::uint8_t { none, creates, reads };

/// Where a call names the sender or transaction it belongs to (sticky routing, issue 15).
enum class StickySource : std::uint8_t {
  none,
  address_param,    // params[0] is the sender's address
  from_field,       // params[0].from
  raw_transaction,  // params[0] is a signed transaction: the sender is recovered from it
  hash_param,       // params[0] is a transaction hash
};

/// What rpcroute knows about one JSON-RPC method: one row of the catalogue.
struct MethodInfo {
  std::string_view name;
  std::int16_t block_param = -1;  // index in params of the block it reads; -1: none
  bool block_optional = false;    // the block may be left out (the node then reads latest)
  bool log_filter = false;     // params[0] is an eth_getLogs filter (fromBlock/toBlock/blockHash)
  bool replay_unsafe = false;  // sending it twice could act twice: one provider only, no retry
  FilterRole filter = FilterRole::none;
  StickySource sticky = StickySource::none;
  TimeoutClass timeout = TimeoutClass::standard;
  bool cacheable =
      false;  // its answer never changes (addressed by hash, or constant); not read yet
  /// A lookup by hash or number whose `null` may only mean the provider has not reached the block
  /// yet (issue 19): retried on a provider at or past the height first (not_yet.cpp).
  bool null_not_yet = false;
};

/// The row for `method`; methods outside the catalogue get a default row (no block, standard
/// timeout, trace for `debug_*` / `trace_*`). Called for every routed call: a binary search over a
/// sorted static table, no allocation.
///
///   if (method_info(call.method).replay_unsafe) { /* never send it twice */ }
[[nodiscard]] const MethodInfo& method_info(std::string_view method);

/// Every row of the catalogue, sorted by name (for tests and documentation).
[[nodiscard]] std::span<const MethodInfo> method_catalogue();

/// The default attempt timeout of a class, in ms.
[[nodiscard]] constexpr std::int64_t timeout_class_ms(TimeoutClass c) {
  switch (c) {
    case TimeoutClass::cheap:
      return 5'000;
    case TimeoutClass::heavy:
      return 20'000;
    case TimeoutClass::trace:
      return 60'000;
    case TimeoutClass::standard:
      break;
  }
  return 10'000;
}

}  // namespace rpcroute
