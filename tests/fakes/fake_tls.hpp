#pragma once
// fake_upstream's TLS side: the server context (certificate, key, client CA for mTLS, ALPN
// "http/1.1") built from the --tls-* flags. The connections themselves are in fake_upstream.cpp.

// clang-format off
#include "rpcroute/asio_compat.hpp"  // before any Asio or Beast header
// clang-format on

#include <boost/asio/ssl.hpp>
#include <memory>
#include <optional>
#include <string>
#include <tl/expected.hpp>

namespace fake {

struct TlsOptions {
  std::optional<std::string> cert_file;       // --tls-cert: PEM chain, leaf first
  std::optional<std::string> key_file;        // --tls-key
  std::optional<std::string> client_ca_file;  // --tls-client-ca: require a client certificate
  bool hang_handshake = false;                // --tls-handshake hang

  [[nodiscard]] bool enabled() const { return cert_file.has_value(); }
};

// Checks that the flags go together: a certificate needs its key and the other flags need both.
tl::expected<void, std::string> check_tls_options(const TlsOptions& options);

// The server context for options (enabled()); an error names the file that could not be used.
tl::expected<std::unique_ptr<boost::asio::ssl::context>, std::string> make_tls_context(
    const TlsOptions& options);

}  // namespace fake
