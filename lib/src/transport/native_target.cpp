// Which URLs the native client takes (http:// and https://, nothing a request line cannot
// carry), and the request head it sends them.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "native_http.hpp"

namespace rpcroute::detail {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

/// host and port of an authority ("127.0.0.1:8545", "[::1]:8545", "localhost"); false when it
/// is not one.
bool split_authority(std::string_view authority, std::string_view& host, unsigned& port,
                     unsigned default_port) {
  std::string_view port_text;
  if (authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return false;
    host = authority.substr(1, close - 1);
    auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return false;
      port_text = after.substr(1);
    }
  } else {
    const auto colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  port = default_port;
  if (port_text.empty()) return true;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  return ec == std::errc() && p == port_text.data() + port_text.size() && port != 0 &&
         port <= 65535;
}

}  // namespace

std::shared_ptr<const NativeHttp::Target> parse_native_target(std::string_view url) {
  constexpr std::string_view plain = "http://";
  constexpr std::string_view secure = "https://";
  bool https = false;
  if (url.size() > plain.size() && iequals(url.substr(0, plain.size()), plain)) {
    url.remove_prefix(plain.size());
  } else if (url.size() > secure.size() && iequals(url.substr(0, secure.size()), secure)) {
    url.remove_prefix(secure.size());
    https = true;
  } else {
    return nullptr;
  }
  const auto authority_end = url.find_first_of("/?#");
  std::string_view authority = url.substr(0, authority_end);
  std::string_view rest =
      authority_end == std::string_view::npos ? std::string_view() : url.substr(authority_end);
  if (authority.empty() || authority.find('@') != std::string_view::npos) return nullptr;
  if (auto hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  for (char c : rest) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      return nullptr;
  }
  std::string path =
      rest.empty() || rest.front() == '?' ? "/" + std::string(rest) : std::string(rest);
  std::string_view host;
  unsigned port = 80;
  if (!split_authority(authority, host, port, https ? 443 : 80) || host.empty()) return nullptr;
  auto target = std::make_shared<NativeHttp::Target>();
  target->https = https;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(std::string(host), ec);
  if (!ec) {
    if (address.is_v6() && address.to_v6().scope_id() != 0) return nullptr;
    target->endpoints.emplace_back(address, static_cast<std::uint16_t>(port));
  } else if (host == "localhost" ||
             (host.size() > 10 && iequals(host.substr(host.size() - 10), ".localhost"))) {
    // localhost and its subdomains are this machine, never asked of DNS (RFC 6761, as curl does).
    // curl tries both; an IPv4-only node is the common case.
    target->endpoints.emplace_back(asio::ip::make_address_v4("127.0.0.1"),
                                   static_cast<std::uint16_t>(port));
    target->endpoints.emplace_back(asio::ip::make_address_v6("::1"),
                                   static_cast<std::uint16_t>(port));
  } else {
    // A name, resolved when a connection is opened (NameCache). Only what DNS may carry.
    for (char c : host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
        return nullptr;
    }
  }
  target->host = std::string(host);
  target->port = static_cast<std::uint16_t>(port);
  target->key_host = fmt::format("{}:{}", host, port);
  target->key = target->key_host;
  target->head = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: rpcroute/0.1\r\nContent-Type: "
      "application/json\r\n"
      "Accept: application/json\r\nAccept-Encoding: identity\r\n",
      path, authority);
  return target;
}

}  // namespace rpcroute::detail
