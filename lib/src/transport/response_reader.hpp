#pragma once
// The native client's parser of an answer that its fast path (http1::parse_response) declined:
// Beast's HTTP/1.1 response parser (status line, framing, chunked bodies, limits) keeping only what
// the router reads. Internal to the transport.
#include <boost/beast/http/basic_parser.hpp>
#include <cstdint>
#include <string>

namespace rpcroute::detail {

/// The status, Retry-After and the body. The body is one std::string, reserved once from
/// Content-Length with kBodySlack on top, so that the answer is parsed in place and never copied
/// to grow; no header field is stored (response_parser would allocate each one).
class ResponseReader final : public boost::beast::http::basic_parser<false> {
 public:
  int status = 0;
  std::string retry_after;  // the first Retry-After, trimmed
  std::string body;
  bool encoded = false;  // a Content-Encoding other than identity (which is all we ask for)

  /// Ready for one answer: eager, with the native client's header limit and this body limit.
  explicit ResponseReader(std::uint64_t limit);

  /// Reserves the body for an answer of `length` bytes, up to a bound (kReserveUpFront): a longer
  /// claim grows as its bytes arrive. At the body's start, and before a large body is read past
  /// the parser (which may not have reached the body yet).
  void reserve_body(std::uint64_t length);

  /// Whether the connection may carry another request: Beast's keep_alive(), but never after an
  /// HTTP/1.0 answer with Transfer-Encoding (RFC 9112 6.1: its framing is faulty, and the
  /// connection closes after it).
  [[nodiscard]] bool reusable() const { return keep_alive() && !(version_ < 11 && chunked()); }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                       error_code&) override {}
  void on_response_impl(int code, string_view, int version, error_code&) override {
    status = code;
    version_ = version;
  }
  void on_field_impl(boost::beast::http::field name, string_view, string_view value,
                     error_code&) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) override;
  std::size_t on_body_impl(string_view piece, error_code&) override { return append(piece); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view piece, error_code&) override {
    return append(piece);
  }
  void on_finish_impl(error_code&) override {}

  std::size_t append(string_view piece);

  bool seen_retry_after_ = false;
  int version_ = 11;
};

/// The largest response head the native client reads (both parsers).
inline constexpr std::size_t kHeaderLimit = 64 * 1024;

}  // namespace rpcroute::detail
