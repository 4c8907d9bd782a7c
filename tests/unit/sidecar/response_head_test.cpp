// The hand-written response head against Beast's serializer: for every combination below, the
// bytes the fast path writes parse (with Beast's response parser) to the same status, version,
// fields and body as Beast's own serialization of the same response, and are in fact the same
// bytes. (One deliberate difference, below: no Content-Length on 1xx, 204 and 304.)
#include <catch2/catch.hpp>

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "response_head.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_response_head_test {

namespace http = boost::beast::http;
using rpcroute::sidecar::response_head;

namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

boost::beast::string_view bsv(std::string_view s) { return {s.data(), s.size()}; }

/// The referee: the response built as Beast users do, independently of beast_response().
std::string beast_bytes(http::status status, unsigned version, bool keep_alive, std::string_view content_type,
                        const Fields& fields, const std::string& body) {
  http::response<http::string_body> res{status, version};
  res.set(http::field::server, "rpcroute");
  if (!content_type.empty()) res.set(http::field::content_type, bsv(content_type));
  for (const auto& [name, value] : fields) res.insert(bsv(name), bsv(value));
  res.keep_alive(keep_alive);
  res.body() = body;
  res.prepare_payload();
  // Beast 1.74's prepare_payload gives a 1xx, 204 or 304 "Content-Length: 0"; RFC 9110 section 8.6
  // says a server must not send one there, and the sidecar never did: the referee leaves it out.
  if (const auto code = static_cast<unsigned>(status); code / 100 == 1 || code == 204 || code == 304) {
    res.content_length(boost::none);
  }
  std::ostringstream out;
  out << res;
  return out.str();
}

struct Parsed {
  unsigned status = 0;
  unsigned version = 0;
  Fields fields;
  std::string body;
  bool keep_alive = false;
};

/// Parses a whole response with Beast's parser; nullopt when it does not take it whole.
std::optional<Parsed> parse(const std::string& bytes) {
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  boost::beast::error_code ec;
  std::size_t used = 0;
  while (used < bytes.size() && !parser.is_done()) {
    const auto n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec) return std::nullopt;
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return std::nullopt;
  }
  if (used != bytes.size()) return std::nullopt;
  const auto& m = parser.get();
  Parsed p{m.result_int(), m.version(), {}, m.body(), m.keep_alive()};
  for (const auto& f : m) p.fields.emplace_back(std::string(f.name_string()), std::string(f.value()));
  return p;
}

std::string lines_of(const Fields& fields) {
  std::string lines;
  for (const auto& [name, value] : fields) lines += name + ": " + value + "\r\n";
  return lines;
}

bool bodyless(unsigned code) { return code / 100 == 1 || code == 204 || code == 304; }

}  // namespace

TEST_CASE("response head: the fast path writes what Beast's serializer writes", "[sidecar][response_head]") {
  const std::vector<unsigned> statuses{200, 204, 304, 101, 400, 401, 403, 404, 405, 408, 413, 431, 500, 503};
  const std::vector<std::string_view> content_types{"application/json", "text/plain; version=0.0.4", ""};
  const std::vector<Fields> header_sets{
      {},
      {{"Retry-After", "1"}},
      {{"Access-Control-Allow-Origin", "http://localhost:3000"},
       {"Vary", "Origin"},
       {"Access-Control-Expose-Headers", "X-Rpcroute-Provider, X-Rpcroute-Attempts"}},
      {{"X-Rpcroute-Provider", "a,b"},
       {"X-Rpcroute-Upstream-Latency", "12.345"},
       {"X-Rpcroute-Attempts", "2"},
       {"X-Rpcroute-Strategy", "latency-weighted"},
       {"X-Rpcroute-Cache", "MISS"},
       {"X-Rpcroute-Request-Id", "0123456789abcdef"},
       {"Retry-After", "3"}},
      {{"WWW-Authenticate", "Bearer"}, {"Allow", "POST, OPTIONS"}},
  };
  const std::vector<std::size_t> body_sizes{0, 1, 57, 100'000};
  std::string head;
  int checked = 0;
  for (unsigned code : statuses) {
    for (unsigned version : {10u, 11u}) {
      for (bool keep_alive : {true, false}) {
        for (std::string_view type : content_types) {
          for (const auto& fields : header_sets) {
            for (std::size_t size : body_sizes) {
              if (bodyless(code) && size > 0) continue;  // Beast refuses a body there
              const auto status = static_cast<http::status>(code);
              const std::string body(size, 'x');
              const auto lines = lines_of(fields);
              response_head(head, status, version, keep_alive, type, lines, body.size());
              const std::string fast = head + body;
              const std::string referee = beast_bytes(status, version, keep_alive, type, fields, body);
              INFO("status " << code << " HTTP/" << version << " keep-alive " << keep_alive << " type '" << type
                             << "' fields " << fields.size() << " body " << size);
              const auto a = parse(fast);
              const auto b = parse(referee);
              REQUIRE(a);
              REQUIRE(b);
              CHECK(a->status == b->status);
              CHECK(a->version == b->version);
              CHECK(a->fields == b->fields);
              CHECK(a->body == b->body);
              CHECK(a->keep_alive == b->keep_alive);
              CHECK(a->keep_alive == keep_alive);
              CHECK(fast == referee);
              // The slow path's own builder (RPCROUTE_FAST_HTTP1=0) agrees too.
              CHECK(rpcroute::sidecar::beast_serialized(status, version, keep_alive, type, lines, body) == referee);
              ++checked;
            }
          }
        }
      }
    }
  }
  CHECK(checked > 1000);
}

}  // namespace unit_response_head_test
