#pragma once
// Reading a request off a connection's buffer: the hand-written fast path (rpcroute/http1.hpp) for
// a whole plain request, and Beast's parser for everything else. Beast-heavy: included by the
// connection and the tests only.

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "request.hpp"

namespace rpcroute::sidecar {

inline constexpr std::size_t kHeaderLimit = 32 * 1024;

/// Beast's HTTP/1.1 parser (limits, chunked bodies, keep-alive rules) writing into a Request:
/// unlike request_parser<string_body>, it does not allocate a node for every header field, and the
/// body goes into the connection's buffer (reserved from Content-Length, which Beast has already
/// checked against the body limit).
class RequestReader final : public boost::beast::http::basic_parser<true> {
 public:
  /// Body bytes are taken from `budget` into `held` as the body is announced or grows; past the
  /// budget the read ends with asio::error::no_buffer_space (503).
  RequestReader(Request& r, BodyBudget& budget, std::size_t& held);

 private:
  using string_view = boost::beast::string_view;
  using error_code = boost::beast::error_code;
  using field = boost::beast::http::field;
  void on_request_impl(boost::beast::http::verb method, string_view method_str, string_view target,
                       int version, error_code&) override;
  void on_response_impl(int, string_view, int, error_code&) override {}
  void keep_cache_field(bool cache_control, std::string_view value);
  void on_field_impl(field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code&) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override { return append(body, ec); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override {
    return append(body, ec);
  }
  std::size_t append(string_view body, error_code& ec);
  void on_finish_impl(error_code&) override {}

  Request& r_;
  BodyBudget& budget_;
  std::size_t& held_;
};

/// Feeds what `buffer` holds to the parser. True when the message is complete or `ec` is set;
/// false when more bytes are needed.
bool feed(RequestReader& parser, boost::beast::flat_buffer& buffer, boost::beast::error_code& ec);

/// The fast path (rpcroute/http1.hpp): a whole, plain request in the buffer is taken in one pass,
/// without Beast's parser. False leaves the buffer and the request to RequestReader (so does any
/// request with an Upgrade field, which the fast path declines).
bool take_plain_request(boost::beast::flat_buffer& buffer, std::uint64_t max_body, Request& r);

}  // namespace rpcroute::sidecar
