#pragma once
// The grammar check of the full parse path (jsonrpc.cpp). Internal to jsonrpc.
#include <string_view>

namespace rpcroute::jsonrpc::detail {

/// Checks the grammar of a whole document: brackets, commas and colons in the right places.
/// On-Demand validates what it reads but skips a value it was not asked for by counting
/// brackets, so `[1,"x":2},3]` would read as three items; anything we forward must be JSON.
/// Scalars are only delimited here: their contents are checked when they are read. It runs over
/// every answer: strings (most of a large answer) are crossed with memchr, not byte by byte.
[[nodiscard]] bool well_formed(std::string_view text);

}  // namespace rpcroute::jsonrpc::detail
