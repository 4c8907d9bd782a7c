// Where a provider's WebSocket goes: see ws_dial.hpp.
#include "ws_dial.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>

namespace rpcroute::sidecar {

using tcp = asio::ip::tcp;

/// ws://host[:port][/path] or wss://…; nullopt for anything else.
std::optional<WsTarget> parse_ws_url(std::string_view url) {
  WsTarget t;
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::nullopt;
  std::string name(url.substr(0, scheme));
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "wss") {
    t.tls = true;
  } else if (name != "ws") {
    return std::nullopt;
  }
  url.remove_prefix(scheme + 3);
  const auto slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  t.target = slash == std::string_view::npos ? "/" : std::string(url.substr(slash));
  if (const auto at = authority.rfind('@'); at != std::string_view::npos)
    authority.remove_prefix(at + 1);
  std::string_view port = t.tls ? "443" : "80";
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    t.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size() && authority[close + 1] == ':')
      port = authority.substr(close + 2);
  } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    t.host = std::string(authority.substr(0, colon));
    port = authority.substr(colon + 1);
  } else {
    t.host = std::string(authority);
  }
  t.port = std::string(port);
  if (t.host.empty() || t.port.empty()) return std::nullopt;
  return t;
}

std::vector<tcp::endpoint> endpoints_of(const asio::any_io_executor& ex, const WsTarget& t,
                                        boost::system::error_code& ec) {
  std::vector<tcp::endpoint> found;
  std::uint16_t port = 0;
  std::from_chars(t.port.data(), t.port.data() + t.port.size(), port);
  if (auto address = asio::ip::make_address(t.host, ec); !ec) {
    found.emplace_back(address, port);
    return found;
  }
  tcp::resolver resolver(ex);
  ec = {};
  for (const auto& entry : resolver.resolve(t.host, t.port, ec)) found.push_back(entry.endpoint());
  return found;
}

detail::TlsContexts& ws_tls_contexts(std::unique_lock<std::mutex>& lock) {
  static std::mutex mutex;
  static detail::TlsContexts contexts;
  lock = std::unique_lock(mutex);
  return contexts;
}

bool handshake_field(std::string_view name) {
  static constexpr std::array<std::string_view, 5> kFields{
      "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
      "sec-websocket-extensions"};
  return std::any_of(kFields.begin(), kFields.end(), [&](std::string_view field) {
    return field.size() == name.size() &&
           std::equal(field.begin(), field.end(), name.begin(), [](char a, char b) {
             return a == static_cast<char>(std::tolower(static_cast<unsigned char>(b)));
           });
  });
}

}  // namespace rpcroute::sidecar
