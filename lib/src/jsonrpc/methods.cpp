#include "rpcroute/methods.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace rpcroute {

namespace {

using enum TimeoutClass;
using FilterRole::creates, FilterRole::reads;
using StickySource::address_param, StickySource::from_field, StickySource::raw_transaction,
    StickySource::hash_param;

// Behaviour as data: one row per method we know something about, sorted by name (checked below).
// Block parameters as DESIGN.md section 8 reads them; timeouts as section 5; sticky sources as
// issue 15. `cacheable`: answers addressed by a hash or constant for the chain (a null answer is
// not one to keep); nothing reads it yet. `null_not_yet`: lookups by hash or number whose null
// answer may be a provider behind (issue 19's not-yet results).
constexpr std::array kCatalogue = {
    MethodInfo{.name = "debug_getRawBlock", .block_param = 0, .timeout = trace},
    MethodInfo{.name = "debug_getRawHeader", .block_param = 0, .timeout = trace},
    MethodInfo{.name = "debug_getRawReceipts", .block_param = 0, .timeout = trace},
    MethodInfo{.name = "debug_traceBlockByNumber", .block_param = 0, .timeout = trace},
    MethodInfo{
        .name = "debug_traceCall", .block_param = 1, .block_optional = true, .timeout = trace},
    MethodInfo{.name = "erigon_getHeaderByNumber", .block_param = 0},
    MethodInfo{.name = "eth_blobBaseFee", .timeout = cheap},
    MethodInfo{.name = "eth_blockNumber", .timeout = cheap},
    MethodInfo{.name = "eth_call",
               .block_param = 1,
               .block_optional = true,
               .sticky = from_field,
               .timeout = heavy},
    MethodInfo{.name = "eth_chainId", .timeout = cheap, .cacheable = true},
    MethodInfo{.name = "eth_createAccessList",
               .block_param = 1,
               .block_optional = true,
               .sticky = from_field,
               .timeout = heavy},
    MethodInfo{.name = "eth_estimateGas",
               .block_param = 1,
               .block_optional = true,
               .sticky = from_field,
               .timeout = heavy},
    MethodInfo{.name = "eth_feeHistory", .block_param = 1, .timeout = cheap},
    MethodInfo{.name = "eth_gasPrice", .timeout = cheap},
    MethodInfo{.name = "eth_getBalance", .block_param = 1, .timeout = cheap},
    MethodInfo{
        .name = "eth_getBlockByHash", .timeout = cheap, .cacheable = true, .null_not_yet = true},
    MethodInfo{
        .name = "eth_getBlockByNumber", .block_param = 0, .timeout = cheap, .null_not_yet = true},
    MethodInfo{
        .name = "eth_getBlockReceipts", .block_param = 0, .timeout = heavy, .null_not_yet = true},
    MethodInfo{.name = "eth_getBlockTransactionCountByHash",
               .timeout = cheap,
               .cacheable = true,
               .null_not_yet = true},
    MethodInfo{.name = "eth_getBlockTransactionCountByNumber",
               .block_param = 0,
               .timeout = cheap,
               .null_not_yet = true},
    MethodInfo{.name = "eth_getCode", .block_param = 1, .timeout = cheap},
    MethodInfo{.name = "eth_getFilterChanges", .filter = reads, .timeout = cheap},
    MethodInfo{.name = "eth_getFilterLogs", .filter = reads, .timeout = heavy},
    MethodInfo{.name = "eth_getHeaderByNumber", .block_param = 0, .null_not_yet = true},
    MethodInfo{.name = "eth_getLogs", .block_param = 0, .log_filter = true, .timeout = heavy},
    MethodInfo{.name = "eth_getProof", .block_param = 2, .timeout = heavy},
    MethodInfo{.name = "eth_getStorageAt", .block_param = 2, .timeout = cheap},
    MethodInfo{
        .name = "eth_getTransactionByBlockNumberAndIndex", .block_param = 0, .null_not_yet = true},
    MethodInfo{.name = "eth_getTransactionByHash",
               .sticky = hash_param,
               .timeout = cheap,
               .null_not_yet = true},
    MethodInfo{.name = "eth_getTransactionCount",
               .block_param = 1,
               .sticky = address_param,
               .timeout = cheap},
    MethodInfo{.name = "eth_getTransactionReceipt",
               .sticky = hash_param,
               .timeout = cheap,
               .null_not_yet = true},
    MethodInfo{.name = "eth_getUncleByBlockNumberAndIndex", .block_param = 0, .null_not_yet = true},
    MethodInfo{.name = "eth_getUncleCountByBlockNumber", .block_param = 0, .null_not_yet = true},
    MethodInfo{.name = "eth_maxPriorityFeePerGas", .timeout = cheap},
    MethodInfo{.name = "eth_newBlockFilter", .filter = creates},
    MethodInfo{.name = "eth_newFilter", .filter = creates},
    MethodInfo{.name = "eth_newPendingTransactionFilter", .filter = creates},
    MethodInfo{.name = "eth_sendRawTransaction", .replay_unsafe = true, .sticky = raw_transaction},
    MethodInfo{.name = "eth_sendTransaction", .replay_unsafe = true, .sticky = from_field},
    MethodInfo{.name = "eth_simulateV1", .timeout = heavy},
    MethodInfo{.name = "eth_syncing", .timeout = cheap},
    MethodInfo{.name = "eth_uninstallFilter", .filter = reads, .timeout = cheap},
    MethodInfo{.name = "net_listening", .timeout = cheap},
    MethodInfo{.name = "net_peerCount", .timeout = cheap},
    MethodInfo{.name = "net_version", .timeout = cheap, .cacheable = true},
    MethodInfo{.name = "trace_block", .block_param = 0, .timeout = trace},
    MethodInfo{.name = "trace_call", .block_param = 2, .block_optional = true, .timeout = trace},
    MethodInfo{.name = "trace_replayBlockTransactions", .block_param = 0, .timeout = trace},
    MethodInfo{.name = "web3_clientVersion", .timeout = cheap},
};

constexpr bool by_name(const MethodInfo& a, const MethodInfo& b) { return a.name < b.name; }
static_assert(std::is_sorted(kCatalogue.begin(), kCatalogue.end(), by_name),
              "the catalogue must stay sorted");

constexpr MethodInfo kUnknown{};
// Tracing and debugging replay blocks: long, whatever the method.
constexpr MethodInfo kUnknownTrace{.name = {}, .timeout = trace};

}  // namespace

namespace {

const MethodInfo& look_up(std::string_view method) {
  const auto* it =
      std::lower_bound(kCatalogue.begin(), kCatalogue.end(), method,
                       [](const MethodInfo& row, std::string_view m) { return row.name < m; });
  if (it != kCatalogue.end() && it->name == method) return *it;
  return method.starts_with("debug_") || method.starts_with("trace_") ? kUnknownTrace : kUnknown;
}

}  // namespace

const MethodInfo& method_info(std::string_view method) {
  // One call's method is asked about five or six times on its way (block need, stickiness, the
  // filter rule, replay safety, the outcome): the binary search was ~4 % of a sidecar request's
  // instructions (callgrind, issue 16's before/after). The last answer is kept per thread; a
  // name of up to kLastBytes is compared in one go.
  constexpr std::size_t kLastBytes = 48;
  thread_local char last_name[kLastBytes];
  thread_local std::size_t last_size = kLastBytes + 1;  // nothing kept yet
  thread_local const MethodInfo* last = nullptr;
  if (method.size() == last_size && std::memcmp(method.data(), last_name, last_size) == 0)
    return *last;
  const MethodInfo& info = look_up(method);
  if (method.size() <= kLastBytes) {
    std::memcpy(last_name, method.data(), method.size());
    last_size = method.size();
    last = &info;
  }
  return info;
}

std::span<const MethodInfo> method_catalogue() { return kCatalogue; }

}  // namespace rpcroute
