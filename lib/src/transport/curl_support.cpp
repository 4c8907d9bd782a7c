#include "curl_support.hpp"

#include <fmt/format.h>
#include <openssl/x509_vfy.h>

#include "rpcroute/transport.hpp"

namespace rpcroute {

bool init_curl() { return curl::available(); }

TransportError transport_error_of(CURLcode code) {
  switch (code) {
    case CURLE_OK:
      return TransportError::none;
    case CURLE_COULDNT_CONNECT:
      return TransportError::connect;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      return TransportError::dns;
    case CURLE_OPERATION_TIMEDOUT:
      return TransportError::timeout;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_USE_SSL_FAILED:
      return TransportError::tls;
    case CURLE_PARTIAL_FILE:
      return TransportError::truncated;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      return TransportError::reset;
    default:
      return TransportError::other;
  }
}

namespace {

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

}  // namespace

bool client_certificate_alert(std::string_view detail) {
  return contains(detail, "alert certificate required") ||
         contains(detail, "alert bad certificate") || contains(detail, "alert unknown ca") ||
         contains(detail, "alert certificate unknown");
}

std::string_view verify_cause(long verify_result) {
  switch (verify_result) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return "certificate expired";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "certificate not yet valid";
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      return "unknown certificate authority";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return "host name mismatch";
    case X509_V_ERR_CERT_REVOKED:
      return "certificate revoked";
    default:
      return "certificate not trusted";
  }
}

std::optional<std::string_view> tls_cause(CURLcode code, long verify_result,
                                          std::string_view detail) {
  if (code == CURLE_SSL_CLIENTCERT || client_certificate_alert(detail))
    return "client certificate rejected";
  if (code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR || code == CURLE_OK ||
      transport_error_of(code) != TransportError::tls)
    return std::nullopt;
  // curl checks the host name itself once OpenSSL accepted the chain, and then reports no
  // verification result of OpenSSL's (or a stale one): its message is what tells.
  if (code == CURLE_PEER_FAILED_VERIFICATION &&
      (contains(detail, "host name") || contains(detail, "subject name")))
    return "host name mismatch";
  if (verify_result != X509_V_OK) return verify_cause(verify_result);
  switch (code) {
    case CURLE_PEER_FAILED_VERIFICATION:
      return "certificate not trusted";
    case CURLE_SSL_CERTPROBLEM:
      return "client certificate or key unusable";
    case CURLE_SSL_CACERT_BADFILE:
      return "CA file or folder unusable";
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
      return "pinned public key mismatch";
    default:
      return "handshake failed";
  }
}

void apply_tls(CURL* easy, const TlsOptions& tls) {
  if (tls.insecure) {
    curl::easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
    curl::easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!tls.ca_file.empty() || !tls.ca_dir.empty()) {
    // Exactly the CAs given: a null string turns the built-in bundle or folder off.
    curl::easy_setopt(easy, CURLOPT_CAINFO, tls.ca_file.empty() ? nullptr : tls.ca_file.c_str());
    curl::easy_setopt(easy, CURLOPT_CAPATH, tls.ca_dir.empty() ? nullptr : tls.ca_dir.c_str());
  }
  if (!tls.cert_file.empty()) {
    curl::easy_setopt(easy, CURLOPT_SSLCERT, tls.cert_file.c_str());
    curl::easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (!tls.key_file.empty()) curl::easy_setopt(easy, CURLOPT_SSLKEY, tls.key_file.c_str());
}

std::string abandoned_message(TransportError why, std::uint64_t cap) {
  switch (why) {
    case TransportError::too_large:
      return fmt::format("answer larger than the response cap ({} bytes)", cap);
    case TransportError::out_of_memory:
      return "out of memory while receiving the answer";
    default:
      return "transfer abandoned";
  }
}

}  // namespace rpcroute
