#pragma once
// An answer as the handlers build it, before the connection writes its head (response_head.hpp).

#include <boost/beast/http/status.hpp>
#include <cstddef>
#include <cstring>
#include <ostream>  // Beast 1.74's status.hpp uses it without including it
#include <string>
#include <string_view>

namespace rpcroute::sidecar {

/// A connection keeps one and resets it per request, so that its buffers (the header lines) are
/// reused rather than allocated per response.
struct Reply {
  boost::beast::http::status status = boost::beast::http::status::ok;
  std::string body;
  std::string_view content_type = "application/json";  // static text
  std::string
      header_lines;  // "Name: value\r\n" each; values never hold CR or LF (Beast rejects them)
  // For the log line.
  std::string rpc_method;
  std::string provider;
  std::size_t attempts = 0;
  bool event_stream = false;  // GET /dashboard/events: the connection hands itself to the stream

  void reset() {
    status = boost::beast::http::status::ok;
    body.clear();
    content_type = "application/json";
    header_lines.clear();
    rpc_method.clear();
    provider.clear();
    attempts = 0;
    event_stream = false;
  }
  void header(std::string_view name, std::string_view value) {
    const auto at = header_lines.size();
    header_lines.resize(at + name.size() + value.size() + 4);
    char* p = header_lines.data() + at;
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    *p++ = ':';
    *p++ = ' ';
    std::memcpy(p, value.data(), value.size());
    p += value.size();
    *p++ = '\r';
    *p = '\n';
  }
};

/// {"error": message} and optionally one more member with raw JSON: {"error": ..., key: raw}.
[[nodiscard]] std::string json_error_body(std::string_view message, std::string_view extra_key = {},
                                          std::string_view extra_raw = {});

}  // namespace rpcroute::sidecar
