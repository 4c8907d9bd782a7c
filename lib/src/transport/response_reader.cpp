#include "response_reader.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "native_http.hpp"

namespace rpcroute::detail {

namespace bhttp = boost::beast::http;

namespace {

// The most of a claimed Content-Length reserved before its bytes arrive.
constexpr std::uint64_t kReserveUpFront = std::uint64_t{256} << 20;

std::string_view trimmed(boost::beast::string_view value) {
  std::string_view v(value.data(), value.size());
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

bool is_identity(std::string_view v) {
  constexpr std::string_view identity = "identity";
  return v.size() == identity.size() &&
         std::equal(v.begin(), v.end(), identity.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == y;
         });
}

}  // namespace

ResponseReader::ResponseReader(std::uint64_t limit) {
  eager(true);
  header_limit(kHeaderLimit);
  body_limit(limit);
}

void ResponseReader::on_field_impl(bhttp::field name, string_view, string_view value, error_code&) {
  if (name == bhttp::field::content_encoding) {
    const auto v = trimmed(value);
    if (!v.empty() && !is_identity(v)) encoded = true;
    return;
  }
  if (name != bhttp::field::retry_after || seen_retry_after_) return;
  seen_retry_after_ = true;
  retry_after.assign(trimmed(value));
}

void ResponseReader::on_header_impl(error_code& ec) {
  // A coded success is refused before its body is read: no decoder ever inflates a provider's
  // bytes. An error status keeps its meaning (a 429 is still a rate limit); its body is dropped.
  if (encoded && status >= 200 && status <= 299) ec = bhttp::error::bad_transfer_encoding;
}

void ResponseReader::reserve_body(std::uint64_t length) {
  const auto want = static_cast<std::size_t>(std::min(length, kReserveUpFront)) + kBodySlack;
  if (body.capacity() >= want) return;
  check_body_capacity(want);
  body.reserve(want);
}

void ResponseReader::on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) {
  if (length) reserve_body(*length);
}

std::size_t ResponseReader::append(string_view piece) {
  const auto old = body.size();
  if (old + piece.size() + kBodySlack > body.capacity()) {
    const auto want = std::max(body.capacity() * 2, old + piece.size() + kBodySlack);
    check_body_capacity(want);
    body.reserve(want);
  }
  body.append(piece.data(), piece.size());
  return piece.size();
}

}  // namespace rpcroute::detail
