// Writing JSON-RPC: calls, results and errors around raw JSON that is passed through, not rebuilt.
#include <fmt/format.h>

#include <cstring>
#include <initializer_list>

#include "rpcroute/json.hpp"
#include "rpcroute/jsonrpc.hpp"

namespace rpcroute::jsonrpc {

void append_call(std::string& out, std::string_view id, std::string_view method,
                 std::string_view params) {
  out += std::string_view(R"({"jsonrpc":"2.0","id":)");
  out += id.empty() ? std::string_view("null") : id;
  out += std::string_view(R"(,"method":)");
  json::append_string(out, method);
  out += std::string_view(R"(,"params":)");
  out += params.empty() ? std::string_view("[]") : params;
  out += '}';
}

std::string make_call(std::string_view id, std::string_view method, std::string_view params) {
  std::string out;
  unsigned special = 0;  // branch-free: any control character, quote or backslash
  for (char c : method) {
    const auto u = static_cast<unsigned char>(c);
    special |= static_cast<unsigned>(u < 0x20) | static_cast<unsigned>(u == '"') |
               static_cast<unsigned>(u == '\\');
  }
  const bool plain = special == 0;
  if (!plain) {
    out.reserve(48 + id.size() + method.size() + params.size());
    append_call(out, id, method, params);
    return out;
  }
  // The usual method name needs no escape: the whole call is sized once and copied in pieces.
  constexpr std::string_view head = R"({"jsonrpc":"2.0","id":)", mid = R"(,"method":")",
                             tail = R"(","params":)";
  if (id.empty()) id = "null";
  if (params.empty()) params = "[]";
  out.resize(head.size() + id.size() + mid.size() + method.size() + tail.size() + params.size() +
             1);
  char* p = out.data();
  for (std::string_view piece : {head, id, mid, method, tail, params}) {
    std::memcpy(p, piece.data(), piece.size());
    p += piece.size();
  }
  *p = '}';
  return out;
}

std::string make_result(std::string_view id, std::string_view result) {
  if (id.empty()) id = "null";
  std::string out;
  // Exactly what is written: one byte short, the closing brace would reallocate (a copy of a large
  // result at twice its size).
  out.reserve(kResultHead.size() + id.size() + kResultMiddle.size() + result.size() + 1);
  out += kResultHead;
  out += id;
  out += kResultMiddle;
  out += result;
  out += '}';
  return out;
}

std::string error_object(std::int64_t code, std::string_view message, std::string_view data) {
  std::string out = fmt::format(R"({{"code":{},"message":)", code);
  json::append_string(out, message);
  if (!data.empty()) {
    out += std::string_view(R"(,"data":)");
    out += data;
  }
  out += '}';
  return out;
}

std::string make_error(std::string_view id, std::int64_t code, std::string_view message,
                       std::string_view data) {
  std::string out(std::string_view(R"({"jsonrpc":"2.0","id":)"));
  out += id.empty() ? std::string_view("null") : id;
  out += std::string_view(R"(,"error":)");
  out += error_object(code, message, data);
  out += '}';
  return out;
}

std::string to_quantity(std::uint64_t v) { return fmt::format("\"0x{:x}\"", v); }

}  // namespace rpcroute::jsonrpc
