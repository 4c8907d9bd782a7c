#include "rpcroute/tag_rewrite.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include "rpcroute/blocks.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/log_split.hpp"
#include "rpcroute/methods.hpp"

namespace rpcroute {

namespace {

/// An eth_getLogs filter's bounds, `latest` (said or left out) resolved to `height`.
std::optional<std::string> rewrite_log_filter(std::string_view method, std::string_view params,
                                              std::uint64_t height) {
  const BlockNeed need = analyze_block_need(method, params);
  if (!need.from || !need.to) return std::nullopt;  // a blockHash, or unreadable
  auto bound = [height](const BlockRef& ref) -> std::optional<std::uint64_t> {
    if (ref.kind == BlockRef::Kind::latest) return height;
    if (ref.kind == BlockRef::Kind::number) return ref.number;
    return std::nullopt;
  };
  const auto from = bound(*need.from);
  const auto to = bound(*need.to);
  if (!from || !to || *from > *to) return std::nullopt;
  if (need.from->kind != BlockRef::Kind::latest && need.to->kind != BlockRef::Kind::latest)
    return std::nullopt;
  return logs_params_for(params, BlockSpan{*from, *to});
}

}  // namespace

std::optional<std::string> rewrite_latest_params(std::string_view method, std::string_view params,
                                                 std::uint64_t height) {
  const MethodInfo& info = method_info(method);
  if (info.block_param < 0) return std::nullopt;
  if (info.log_filter) return rewrite_log_filter(method, params, height);
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(params.data(), params.size()).get(root) != simdjson::SUCCESS)
    return std::nullopt;
  simdjson::dom::array arr;
  if (root.get_array().get(arr) != simdjson::SUCCESS) return std::nullopt;
  const auto index = static_cast<std::size_t>(info.block_param);
  const std::size_t size = arr.size();
  // Left out: only an optional block right after the last param (a shorter array is the node's
  // to refuse).
  if (index > size || (index == size && !info.block_optional)) return std::nullopt;
  const std::string tag = fmt::format("0x{:x}", height);
  json::Writer w;
  w.begin_array();
  bool rewritten = false;
  std::size_t i = 0;
  for (auto element : arr) {
    std::string_view s;
    if (i == index && (element.is_null() ||
                       (element.get_string().get(s) == simdjson::SUCCESS && s == "latest"))) {
      w.value(tag);
      rewritten = true;
    } else {
      w.raw(simdjson::minify(element));
    }
    ++i;
  }
  if (index == size) {
    w.value(tag);
    rewritten = true;
  }
  w.end_array();
  if (!rewritten) return std::nullopt;
  return w.take();
}

}  // namespace rpcroute
