#pragma once
// Where a provider's WebSocket goes (ws_upstream.hpp): its URL taken apart, the addresses to
// connect to, the TLS contexts of wss://, and the upgrade request's own fields.

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "native_tls.hpp"
#include "rpcroute/asio_compat.hpp"

namespace rpcroute::sidecar {

struct WsTarget {
  bool tls = false;
  std::string host;
  std::string port;
  std::string target;  // path and query, "/" at least
};

/// ws://host[:port][/path] or wss://…; nullopt for anything else.
[[nodiscard]] std::optional<WsTarget> parse_ws_url(std::string_view url);

/// The target's endpoints. The loop runs without Asio's resolver thread (async_resolve answers
/// "operation not supported"): an address is used as is, a name resolved in place (a blocking
/// lookup, once per connection).
[[nodiscard]] std::vector<asio::ip::tcp::endpoint> endpoints_of(const asio::any_io_executor& ex,
                                                                const WsTarget& t,
                                                                boost::system::error_code& ec);

/// The OpenSSL contexts of wss:// upstreams, one per distinct tls: settings, made like the native
/// HTTP client's (native_tls.hpp: the same CA, client certificate and insecure handling); `lock`
/// holds them while the caller uses them.
[[nodiscard]] detail::TlsContexts& ws_tls_contexts(std::unique_lock<std::mutex>& lock);

/// Fields of the upgrade request that make it one (Upgrade, Connection, Sec-WebSocket-Key,
/// -Version, -Extensions; any case): a profile header never replaces them.
[[nodiscard]] bool handshake_field(std::string_view name);

}  // namespace rpcroute::sidecar
