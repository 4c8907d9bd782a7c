#pragma once
// A response's status line and header block: written by hand on the fast path, by Beast's
// serializer when RPCROUTE_FAST_HTTP1=0. tests/unit/sidecar/response_head_test.cpp holds the one
// to the other, byte for byte after parsing.

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <string>
#include <string_view>

namespace rpcroute::sidecar {

/// The status line and header block of a response, as Beast's serializer writes them after
/// keep_alive() and prepare_payload(): Server, Content-Type (none when empty), the reply's header
/// lines, Connection when it differs from the version's default, Content-Length. One difference on
/// purpose: no Content-Length for 1xx, 204 and 304, where Beast 1.74 writes "Content-Length: 0"
/// and RFC 9110 section 8.6 says a server must not. Written into `h`, a buffer the connection
/// reuses.
void response_head(std::string& h, boost::beast::http::status status, unsigned version,
                   bool keep_alive, std::string_view content_type, std::string_view header_lines,
                   std::size_t body_size);

/// The same response as a Beast message, for Beast's serializer: the fields in the same order,
/// `header_lines` ("Name: value\r\n" each) split into fields, then keep_alive() and
/// prepare_payload(), without Content-Length where response_head() has none. The body is moved in.
/// For a HEAD request, write only its header.
[[nodiscard]] boost::beast::http::response<boost::beast::http::string_body> beast_response(
    boost::beast::http::status status, unsigned version, bool keep_alive,
    std::string_view content_type, std::string_view header_lines, std::string body);

/// beast_response() as Beast's serializer writes it, head and body.
[[nodiscard]] std::string beast_serialized(boost::beast::http::status status, unsigned version,
                                           bool keep_alive, std::string_view content_type,
                                           std::string_view header_lines, std::string body);

}  // namespace rpcroute::sidecar
