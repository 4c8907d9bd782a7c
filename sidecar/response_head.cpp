#include "response_head.hpp"

#include <boost/beast/http/write.hpp>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <sstream>

namespace rpcroute::sidecar {

namespace http = boost::beast::http;
using namespace std::string_view_literals;

void response_head(std::string& h, http::status status, unsigned version, bool keep_alive,
                   std::string_view content_type, std::string_view header_lines,
                   std::size_t body_size) {
  // Written through a cursor into a buffer sized for the longest head: no append per piece.
  const auto reason_text = http::obsolete_reason(status);
  const std::string_view reason(reason_text.data(), reason_text.size());
  h.resize(160 + reason.size() + content_type.size() + header_lines.size());  // fixed parts: < 120
  char* p = h.data();
  auto put = [&p](std::string_view piece) {
    std::memcpy(p, piece.data(), piece.size());
    p += piece.size();
  };
  auto put_number = [&p](std::uint64_t v) { p = std::to_chars(p, p + 24, v).ptr; };
  const auto code = static_cast<unsigned>(status);
  put("HTTP/"sv);
  *p++ = static_cast<char>('0' + version / 10 % 10);
  *p++ = '.';
  *p++ = static_cast<char>('0' + version % 10);
  *p++ = ' ';
  put_number(code);
  *p++ = ' ';
  put(reason);
  put("\r\nServer: rpcroute\r\n"sv);
  if (!content_type.empty()) {
    put("Content-Type: "sv);
    put(content_type);
    put("\r\n"sv);
  }
  put(header_lines);
  if (version >= 11 && !keep_alive) put("Connection: close\r\n"sv);
  if (version < 11 && keep_alive) put("Connection: keep-alive\r\n"sv);
  if (!(code / 100 == 1 || code == 204 || code == 304)) {
    put("Content-Length: "sv);
    put_number(body_size);
    put("\r\n"sv);
  }
  put("\r\n"sv);
  h.resize(static_cast<std::size_t>(p - h.data()));
}

http::response<http::string_body> beast_response(http::status status, unsigned version,
                                                 bool keep_alive, std::string_view content_type,
                                                 std::string_view header_lines, std::string body) {
  http::response<http::string_body> res{status, version};
  res.set(http::field::server, "rpcroute");
  auto bsv = [](std::string_view s) {
    return boost::beast::string_view(s.data(), s.size());
  };  // Beast 1.74
  if (!content_type.empty()) res.set(http::field::content_type, bsv(content_type));
  while (!header_lines.empty()) {
    const auto end = header_lines.find("\r\n"sv);
    const auto line = header_lines.substr(0, end);
    const auto colon = line.find(": "sv);
    res.insert(bsv(line.substr(0, colon)), bsv(line.substr(colon + 2)));
    header_lines.remove_prefix(end == std::string_view::npos ? header_lines.size() : end + 2);
  }
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  if (const auto code = static_cast<unsigned>(status);
      code / 100 == 1 || code == 204 || code == 304) {
    res.content_length(
        boost::none);  // Beast 1.74 writes "Content-Length: 0" there (see response_head)
  }
  return res;
}

std::string beast_serialized(http::status status, unsigned version, bool keep_alive,
                             std::string_view content_type, std::string_view header_lines,
                             std::string body) {
  std::ostringstream out;
  out << beast_response(status, version, keep_alive, content_type, header_lines, std::move(body));
  return out.str();
}

}  // namespace rpcroute::sidecar
