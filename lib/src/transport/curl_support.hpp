#pragma once
// What the curl client (engine.cpp) says about its transfers, kept apart from the multi-handle
// machinery: how curl's result codes map to TransportError, and the message of a transfer the
// client abandoned itself, what a TLS failure was, and how a provider's tls: settings become
// curl options.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rpcroute/config.hpp"
#include "rpcroute/transport/curl_api.hpp"
#include "rpcroute/transport/error.hpp"

namespace rpcroute {

[[nodiscard]] TransportError transport_error_of(CURLcode code);

/// The cause of a TLS failure in a user's words ("certificate expired", "unknown certificate
/// authority", "host name mismatch", "client certificate rejected", …), from curl's code, the
/// certificate check's result (CURLINFO_SSL_VERIFYRESULT, an X509_V_ERR_* value) and curl's
/// message; nullopt when the failure is not TLS's. A peer's TLS alert that ends a read or a write
/// (how a server refuses a client certificate under TLS 1.3) is TLS's too.
[[nodiscard]] std::optional<std::string_view> tls_cause(CURLcode code, long verify_result,
                                                        std::string_view detail);

/// The cause of a failed certificate check (an X509_V_ERR_* value) in a user's words; both clients
/// name causes with it.
[[nodiscard]] std::string_view verify_cause(long verify_result);

/// A TLS alert from the peer about our certificate, in OpenSSL's wording (as curl relays it).
[[nodiscard]] bool client_certificate_alert(std::string_view detail);

/// A provider's tls: settings on a new easy handle (EasyPool sets a handle up once per set-up:
/// nothing else to undo).
/// ca_file / ca_dir replace the system store; insecure turns both checks off.
void apply_tls(CURL* easy, const TlsOptions& tls);

/// Why a transfer was abandoned by the client (the response cap, memory), as an error message.
[[nodiscard]] std::string abandoned_message(TransportError why, std::uint64_t cap);

}  // namespace rpcroute
