#include "reader.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include "policy.hpp"
#include "rpcroute/asio_compat.hpp"
#include "rpcroute/http1.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute::sidecar {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {
/// Beast 1.74 speaks boost::string_view.
std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }
}  // namespace

RequestReader::RequestReader(Request& r, BodyBudget& budget, std::size_t& held)
    : r_(r), budget_(budget), held_(held) {
  r_.clear();
}

void RequestReader::on_request_impl(http::verb method, string_view method_str, string_view target,
                                    int version, error_code&) {
  r_.method = method;
  if (method != http::verb::unknown) {
    r_.method_string = sv(http::to_string(method));
  } else {
    r_.method_storage.assign(method_str.data(), method_str.size());
    r_.method_string = r_.method_storage;
  }
  r_.target.assign(target.data(), target.size());
  r_.version = static_cast<unsigned>(version);
}

void RequestReader::keep_cache_field(bool cache_control, std::string_view value) {
  // The first of each, as the fast path reads them.
  const unsigned bit = cache_control ? 8 : 16;
  if ((r_.seen & bit) != 0) return;
  r_.seen |= bit;
  const bool bypass =
      cache_control ? policy::cache_bypass(value, {}) : policy::cache_bypass({}, value);
  r_.no_cache = r_.no_cache || bypass;
}

void RequestReader::on_field_impl(field name, string_view name_string, string_view value,
                                  error_code& ec) {
  if (r_.field_count == r_.field_slots.size()) r_.field_slots.emplace_back();
  auto& slot = r_.field_slots[r_.field_count++];
  slot.first.assign(name_string.data(), name_string.size());
  slot.second.assign(value.data(), value.size());
  auto keep = [&](unsigned bit, std::string& kept) {
    if ((r_.seen & bit) != 0) return;
    r_.seen |= bit;
    kept.assign(value.data(), value.size());
  };
  if (name == field::host)
    keep(1, r_.host);
  else if (name == field::origin)
    keep(2, r_.origin);
  else if (name == field::authorization)
    keep(4, r_.authorization);
  // Beast frames "chunked, identity" or "gzip" as no body; the body would be the next request.
  else if (name == field::transfer_encoding && !http1::chunked_only(sv(value)))
    ec = http::error::bad_transfer_encoding;
  else if (name == field::expect)
    r_.expect_continue = beast::iequals(value, "100-continue");
  else if (name == field::upgrade)
    r_.upgrade = true;
  else if (name == field::cache_control || beast::iequals(name_string, "x-rpcroute-cache"))
    keep_cache_field(name == field::cache_control, sv(value));
  else if (beast::iequals(name_string, "x-rpcroute-min-block"))
    keep(32, r_.min_block);
}

void RequestReader::on_header_impl(error_code&) {
  // HTTP/1.0 with Transfer-Encoding: faulty framing, closed after this request (RFC 9112 6.1).
  r_.keep_alive = keep_alive() && !(r_.version < 11 && chunked());
}

void RequestReader::on_body_init_impl(const boost::optional<std::uint64_t>& length,
                                      error_code& ec) {
  if (!length) return;
  if (!budget_.take(held_, static_cast<std::size_t>(*length))) {
    ec = asio::error::no_buffer_space;
    return;
  }
  r_.body.reserve(static_cast<std::size_t>(*length) + kBodySlack);  // parsed in place
}

std::size_t RequestReader::append(string_view body, error_code& ec) {
  // A body without a length (chunked) takes from the budget as it grows.
  const auto size = r_.body.size() + body.size();
  if (size > held_ && !budget_.take(held_, size - held_)) {
    ec = asio::error::no_buffer_space;
    return 0;
  }
  r_.body.append(body.data(), body.size());
  return body.size();
}

bool feed(RequestReader& parser, beast::flat_buffer& buffer, beast::error_code& ec) {
  while (buffer.size() > 0) {
    const auto used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more) {
      ec = {};
      return parser.is_done();
    }
    if (ec || parser.is_done()) return true;
    if (used == 0) return false;
  }
  return parser.is_done();
}

bool take_plain_request(beast::flat_buffer& buffer, std::uint64_t max_body, Request& r) {
  const std::string_view in(static_cast<const char*>(buffer.data().data()), buffer.size());
  http1::Message m;
  if (!http1::parse_request(in, kHeaderLimit, max_body, m)) return false;
  r.clear();
  r.method = http::string_to_verb(beast::string_view(m.method.data(), m.method.size()));
  r.method_string = sv(http::to_string(r.method));  // a method the fast path knows: static text
  r.target.assign(m.target);
  r.version = m.version;
  r.keep_alive = m.keep_alive;
  if (!m.host.empty()) r.host.assign(m.host);  // clear() emptied them
  if (!m.origin.empty()) r.origin.assign(m.origin);
  if (!m.authorization.empty()) r.authorization.assign(m.authorization);
  if (!m.min_block.empty()) r.min_block.assign(m.min_block);
  if (m.cache_control.data() != nullptr || m.rpcroute_cache.data() != nullptr)
    r.no_cache = policy::cache_bypass(m.cache_control, m.rpcroute_cache);
  const auto body = m.body(in);
  r.body.reserve(body.size() + kBodySlack);  // parsed in place, like RequestReader's
  r.body.assign(body);
  buffer.consume(m.size());
  return true;
}

}  // namespace rpcroute::sidecar
