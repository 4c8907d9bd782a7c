#include "rpcroute/blocks.hpp"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/methods.hpp"

namespace rpcroute {

namespace {

namespace dom = simdjson::dom;

std::optional<BlockRef> tag_or_number(std::string_view s) {
  using K = BlockRef::Kind;
  if (s == "latest") return BlockRef{K::latest, 0};
  if (s == "pending") return BlockRef{K::pending, 0};
  if (s == "safe") return BlockRef{K::safe, 0};
  if (s == "finalized") return BlockRef{K::finalized, 0};
  if (s == "earliest") return BlockRef{K::earliest, 0};
  if (s.size() == 66 && (s.starts_with("0x") || s.starts_with("0X"))) return BlockRef{K::hash, 0};
  std::string quoted;
  quoted.reserve(s.size() + 2);
  quoted.push_back('"');
  quoted.append(s);
  quoted.push_back('"');
  if (auto n = jsonrpc::parse_quantity(quoted)) return BlockRef{K::number, *n};
  return std::nullopt;
}

std::optional<BlockRef> block_ref(dom::element e) {
  std::string_view s;
  if (e.get_string().get(s) == simdjson::SUCCESS) return tag_or_number(s);
  std::uint64_t n = 0;
  if (e.get_uint64().get(n) == simdjson::SUCCESS) return BlockRef{BlockRef::Kind::number, n};
  dom::object o;
  if (e.get_object().get(o) == simdjson::SUCCESS) {  // EIP-1898
    dom::element v;
    if (o.at_key("blockHash").get(v) == simdjson::SUCCESS) return BlockRef{BlockRef::Kind::hash, 0};
    if (o.at_key("blockNumber").get(v) == simdjson::SUCCESS) return block_ref(v);
  }
  return std::nullopt;
}

dom::parser& local_parser() {
  thread_local dom::parser parser;
  return parser;
}

}  // namespace

int block_param_index(std::string_view method) {
  const auto& m = method_info(method);
  return m.log_filter ? -1 : m.block_param;  // eth_getLogs takes a filter object, not a block
}

BlockNeed analyze_block_need(std::string_view method, std::string_view params) {
  BlockNeed need;
  const auto& info = method_info(method);
  const bool logs = info.log_filter;
  const int index = info.block_param;
  if (index < 0) return need;
  if (params.empty()) {
    if (info.block_optional) need.block = BlockRef{};
    return need;
  }
  dom::element root;
  if (local_parser().parse(params.data(), params.size(), true).get(root) != simdjson::SUCCESS)
    return need;
  dom::array arr;
  if (root.get_array().get(arr) != simdjson::SUCCESS) return need;
  dom::element param;
  if (arr.at(static_cast<std::size_t>(index)).get(param) != simdjson::SUCCESS || param.is_null()) {
    if (!logs && info.block_optional) need.block = BlockRef{};
    return need;
  }
  if (!logs) {
    need.block = block_ref(param);
    return need;
  }
  dom::object filter;
  if (param.get_object().get(filter) != simdjson::SUCCESS) return need;
  dom::element v;
  if (filter.at_key("blockHash").get(v) == simdjson::SUCCESS && !v.is_null()) {
    need.block = BlockRef{BlockRef::Kind::hash, 0};
    return need;
  }
  // Absent bounds default to latest, as nodes do.
  need.from = BlockRef{};
  need.to = BlockRef{};
  if (filter.at_key("fromBlock").get(v) == simdjson::SUCCESS && !v.is_null())
    need.from = block_ref(v);
  if (filter.at_key("toBlock").get(v) == simdjson::SUCCESS && !v.is_null()) need.to = block_ref(v);
  if (!need.from || !need.to) return BlockNeed{};  // unreadable bound: the provider will say so
  return need;
}

std::int64_t height_horizon_ms(const Chain& chain) {
  return std::max<std::int64_t>(60'000, 5 * chain.block_time_ms);
}

bool height_fresh(const Height& h, std::int64_t now_ms, const Chain& chain) {
  return h.t_ms > 0 && h.t_ms >= now_ms - height_horizon_ms(chain);
}

std::uint64_t estimate_height(const Height& h, std::int64_t now_ms, const Chain& chain) {
  if (!height_fresh(h, now_ms, chain) || chain.block_time_ms <= 0) return h.block;
  const auto elapsed = std::clamp<std::int64_t>(now_ms - h.t_ms, 0, height_horizon_ms(chain));
  return h.block + static_cast<std::uint64_t>(elapsed / chain.block_time_ms);
}

namespace {

std::optional<std::uint64_t> resolve(const BlockRef& ref, std::uint64_t head) {
  switch (ref.kind) {
    case BlockRef::Kind::earliest:
      return 0;
    case BlockRef::Kind::number:
      return ref.number;
    case BlockRef::Kind::hash:
      return std::nullopt;
    default:
      break;
  }
  if (head == 0) return std::nullopt;
  return head;
}

}  // namespace

std::optional<std::uint64_t> oldest_block(const BlockNeed& need, std::uint64_t head) {
  std::optional<std::uint64_t> oldest;
  for (const auto* ref : {&need.block, &need.from, &need.to}) {
    if (!*ref || (*ref)->is_head_relative() || (*ref)->kind == BlockRef::Kind::hash) continue;
    auto n = resolve(**ref, head);
    if (n && (!oldest || *n < *oldest)) oldest = n;
  }
  return oldest;
}

std::optional<std::uint64_t> highest_numbered_block(const BlockNeed& need) {
  std::optional<std::uint64_t> highest;
  for (const auto* ref : {&need.block, &need.from, &need.to}) {
    if (*ref && (*ref)->kind == BlockRef::Kind::number && (!highest || (*ref)->number > *highest)) {
      highest = (*ref)->number;
    }
  }
  return highest;
}

std::optional<std::uint64_t> log_range_blocks(const BlockNeed& need, std::uint64_t head) {
  if (!need.from || !need.to) return std::nullopt;
  auto from = resolve(*need.from, head);
  auto to = resolve(*need.to, head);
  if (!from || !to) return std::nullopt;
  if (*to < *from) return 0;
  return *to - *from + 1;
}

}  // namespace rpcroute
