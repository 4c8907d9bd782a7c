#include "fake_tls.hpp"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <array>
#include <string_view>

namespace fake {

namespace {

namespace ssl = boost::asio::ssl;

// Selects "http/1.1" when the client offers it (curl offers "h2" first); without it, no ALPN at
// all: the fake speaks HTTP/1.1 only, and a client that asked for h2 alone must see that.
int select_http11(SSL* /*ssl*/, const unsigned char** out, unsigned char* out_len,
                  const unsigned char* in, unsigned int in_len, void* /*arg*/) {
  constexpr std::string_view kHttp11 = "http/1.1";
  for (unsigned int at = 0; at < in_len;) {
    const unsigned int len = in[at];
    if (at + 1 + len > in_len) break;
    const std::string_view proto(reinterpret_cast<const char*>(in + at + 1), len);
    if (proto == kHttp11) {
      *out = in + at + 1;
      *out_len = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    at += 1 + len;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

std::string last_ssl_error() {
  const unsigned long code = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  if (code == 0) return "unknown error";
  std::array<char, 256> text{};
  ERR_error_string_n(code, text.data(), text.size());
  ERR_clear_error();
  return text.data();
}

}  // namespace

tl::expected<void, std::string> check_tls_options(const TlsOptions& options) {
  if (options.cert_file.has_value() != options.key_file.has_value()) {
    return tl::unexpected<std::string>("--tls-cert and --tls-key go together");
  }
  if (!options.enabled() && (options.client_ca_file || options.hang_handshake)) {
    return tl::unexpected<std::string>(
        "--tls-client-ca and --tls-handshake need --tls-cert and --tls-key");
  }
  return {};
}

tl::expected<std::unique_ptr<ssl::context>, std::string> make_tls_context(
    const TlsOptions& options) {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  auto failed = [](std::string_view what, const std::string& file) {
    return tl::unexpected<std::string>(
        fmt::format("cannot use {} {}: {}", what, file, last_ssl_error()));
  };
  if (SSL_CTX_use_certificate_chain_file(native, options.cert_file->c_str()) != 1) {
    return failed("--tls-cert", *options.cert_file);
  }
  if (SSL_CTX_use_PrivateKey_file(native, options.key_file->c_str(), SSL_FILETYPE_PEM) != 1) {
    return failed("--tls-key", *options.key_file);
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    return failed("--tls-key (not the certificate's key)", *options.key_file);
  }
  if (options.client_ca_file) {
    const char* ca = options.client_ca_file->c_str();
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca);
    if (names == nullptr || SSL_CTX_load_verify_locations(native, ca, nullptr) != 1) {
      if (names != nullptr) sk_X509_NAME_pop_free(names, X509_NAME_free);
      return failed("--tls-client-ca", *options.client_ca_file);
    }
    SSL_CTX_set_client_CA_list(native, names);  // named in the CertificateRequest
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  // Session resumption with client certificates needs a session id context, else OpenSSL fails
  // the resumed handshake.
  constexpr std::string_view kSessionContext = "fake_upstream";
  SSL_CTX_set_session_id_context(native,
                                 reinterpret_cast<const unsigned char*>(kSessionContext.data()),
                                 static_cast<unsigned int>(kSessionContext.size()));
  SSL_CTX_set_alpn_select_cb(native, select_http11, nullptr);
  return context;
}

}  // namespace fake
