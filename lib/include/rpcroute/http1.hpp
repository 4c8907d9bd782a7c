#pragma once
// The fast path for HTTP/1.1 messages that are whole and plain (lib/src/transport/http1.cpp).
//
// The sidecar's requests and the providers' answers are almost always the same few lines: a
// request or status line, a handful of fields, Content-Length and a small body that arrived in one
// read. These functions take exactly that case, in one pass and without allocating; for anything
// else — a message not yet whole, a chunked request, folded, oversized, duplicated framing, a
// method or token they do not know, or an outright error — they answer false and Beast's parser
// takes the message from its first byte, with its own limits and error reports. They are stricter
// than Beast, never looser: whatever they accept, Beast accepts with the same meaning (checked by
// tests/unit/transport/http1_test.cpp and the fuzz.http1 differential target).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rpcroute::http1 {

struct Message {
  std::string_view method;  // requests: GET, HEAD, POST, PUT, DELETE, OPTIONS or PATCH
  std::string_view target;  // requests
  int status = 0;           // responses: 200–599 except 204 and 304 (no body by definition)
  unsigned version = 11;    // 10 or 11
  bool keep_alive = true;   // as Beast judges it from the version and Connection
  std::string_view host, origin, authorization, retry_after;  // the first of each, trimmed
  std::string_view cache_control, rpcroute_cache;  // requests: the first of each (the cache)
  std::string_view min_block;    // requests: X-Rpcroute-Min-Block, the first (issue 19)
  bool chunked = false;          // responses: Transfer-Encoding: chunked, every chunk present
  std::size_t head_size = 0;     // start line, fields and the empty line
  std::uint64_t body_size = 0;   // Content-Length (0 without one, for requests); chunked: decoded
  std::size_t chunked_size = 0;  // a chunked body's bytes as sent (chunk lines included)
  [[nodiscard]] std::size_t size() const {
    return head_size + (chunked ? chunked_size : static_cast<std::size_t>(body_size));
  }
  /// A Content-Length body, as a view into `in` (a chunked one is assign_body's).
  [[nodiscard]] std::string_view body(std::string_view in) const {
    return in.substr(head_size, static_cast<std::size_t>(body_size));
  }
  /// The body into `out` (replacing what it held), chunked or not.
  void assign_body(std::string_view in, std::string& out) const;
};

/// A whole request at the start of `in`: head within `max_head` bytes, Content-Length (if any)
/// within `max_body`, all of the body present. Bytes past it (a pipelined request) are left.
bool parse_request(std::string_view in, std::size_t max_head, std::uint64_t max_body, Message& out);

/// A whole response at the start of `in`, head within `max_head`, its body framed by
/// Content-Length or chunked. A chunked body is taken when every chunk and the last one are
/// present, each chunk line is hex digits only (no extension) and no trailer field follows.
bool parse_response(std::string_view in, std::size_t max_head, Message& out);

/// A request's Transfer-Encoding value that frames a body we can read: exactly `chunked` (any
/// case, optional whitespace). Beast reads any other list ("chunked, identity", "gzip", "x") as no
/// body at all, and the body would then be parsed as the next request; RFC 9112 section 6.3 says
/// such a request gets 400 and a close.
///
///   http1::chunked_only(" Chunked ") == true;  http1::chunked_only("gzip, chunked") == false
bool chunked_only(std::string_view transfer_encoding);

}  // namespace rpcroute::http1
