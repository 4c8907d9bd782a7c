#pragma once
// Beast as the oracle for the HTTP/1.1 fast path (rpcroute/http1.hpp): whatever the fast path
// accepts, Beast's full parser must accept with the same meaning. Used by the unit tests and the
// fuzz.http1 differential target. Each function returns "" when they agree (or the fast path
// declined), else what differs.

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

#include "rpcroute/http1.hpp"

namespace rpcroute::testing {

namespace beast_http = boost::beast::http;

template <class Parser>
inline bool beast_parse(Parser& p, std::string_view in, std::size_t& used, boost::beast::error_code& ec) {
  used = 0;
  while (!p.is_done()) {
    const auto n = p.put(boost::asio::buffer(in.data() + used, in.size() - used), ec);
    used += n;
    if (ec || n == 0) return false;
  }
  return true;
}

inline std::string_view sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

/// The first field named `name` as Beast stores it ("" when absent).
template <class Fields>
inline std::string_view first(const Fields& f, beast_http::field name) {
  auto it = f.find(name);
  return it == f.end() ? std::string_view() : sv(it->value());
}

inline std::string request_disagreement(std::string_view in, std::size_t max_head, std::uint64_t max_body) {
  http1::Message m;
  if (!http1::parse_request(in, max_head, max_body, m)) return {};
  beast_http::request_parser<beast_http::string_body> p;
  p.eager(true);
  p.header_limit(static_cast<std::uint32_t>(max_head));
  p.body_limit(max_body);
  boost::beast::error_code ec;
  std::size_t used = 0;
  if (!beast_parse(p, in, used, ec)) return "Beast did not parse it: " + ec.message();
  const auto& r = p.get();
  if (used != m.size()) return "size " + std::to_string(m.size()) + " vs Beast's " + std::to_string(used);
  if (sv(r.method_string()) != m.method) return "method";
  if (sv(r.target()) != m.target) return "target";
  if (r.version() != m.version) return "version";
  if (p.keep_alive() != m.keep_alive) return "keep-alive";
  if (first(r, beast_http::field::host) != m.host) return "host";
  if (first(r, beast_http::field::origin) != m.origin) return "origin";
  if (first(r, beast_http::field::authorization) != m.authorization) return "authorization";
  if (r.body() != m.body(in)) return "body";
  return {};
}

inline std::string response_disagreement(std::string_view in, std::size_t max_head) {
  http1::Message m;
  if (!http1::parse_response(in, max_head, m)) return {};
  beast_http::response_parser<beast_http::string_body> p;
  p.eager(true);
  p.header_limit(static_cast<std::uint32_t>(max_head));
  p.body_limit(UINT64_MAX);
  boost::beast::error_code ec;
  std::size_t used = 0;
  if (!beast_parse(p, in, used, ec)) return "Beast did not parse it: " + ec.message();
  const auto& r = p.get();
  if (used != m.size()) return "size " + std::to_string(m.size()) + " vs Beast's " + std::to_string(used);
  if (static_cast<int>(r.result_int()) != m.status) return "status";
  if (r.version() != m.version) return "version";
  // Beast's keep-alive, but never for HTTP/1.0 with Transfer-Encoding (RFC 9112 6.1), where ours
  // differs on purpose.
  if ((p.keep_alive() && !(r.version() < 11 && p.chunked())) != m.keep_alive) return "keep-alive";
  if (first(r, beast_http::field::retry_after) != m.retry_after) return "retry-after";
  if (p.chunked() != m.chunked) return "chunked";
  std::string body;
  m.assign_body(in, body);
  if (body.size() != m.body_size) return "body size";
  if (r.body() != body) return "body";
  return {};
}

}  // namespace rpcroute::testing
