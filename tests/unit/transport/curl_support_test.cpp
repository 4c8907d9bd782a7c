// The curl client's verdicts on its transfers: result codes to TransportError, TLS failure causes.
#include <openssl/x509_vfy.h>

#include <catch2/catch.hpp>

#include "transport/curl_support.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_curl_support_test {

using namespace rpcroute;

TEST_CASE("transport_error_of: curl's codes in the client's terms", "[transport][curl]") {
  CHECK(transport_error_of(CURLE_OK) == TransportError::none);
  CHECK(transport_error_of(CURLE_COULDNT_CONNECT) == TransportError::connect);
  CHECK(transport_error_of(CURLE_COULDNT_RESOLVE_HOST) == TransportError::dns);
  CHECK(transport_error_of(CURLE_OPERATION_TIMEDOUT) == TransportError::timeout);
  CHECK(transport_error_of(CURLE_PARTIAL_FILE) == TransportError::truncated);
  CHECK(transport_error_of(CURLE_GOT_NOTHING) == TransportError::reset);
  CHECK(transport_error_of(CURLE_RECV_ERROR) == TransportError::reset);
  CHECK(transport_error_of(CURLE_SEND_ERROR) == TransportError::reset);
  for (auto code : {CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION,
                    CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR,
                    CURLE_SSL_CLIENTCERT, CURLE_SSL_PINNEDPUBKEYNOTMATCH}) {
    CHECK(transport_error_of(code) == TransportError::tls);
  }
  CHECK(transport_error_of(CURLE_WRITE_ERROR) == TransportError::other);
}

TEST_CASE("tls_cause: the cause in a user's words", "[transport][curl][tls]") {
  const auto verify_failed = CURLE_PEER_FAILED_VERIFICATION;
  CHECK(tls_cause(verify_failed, X509_V_ERR_CERT_HAS_EXPIRED, "") == "certificate expired");
  CHECK(tls_cause(verify_failed, X509_V_ERR_CERT_NOT_YET_VALID, "") ==
        "certificate not yet valid");
  for (long v : {X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT,
                 X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN, X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE}) {
    CHECK(tls_cause(verify_failed, v, "") == "unknown certificate authority");
  }
  CHECK(tls_cause(verify_failed, X509_V_ERR_HOSTNAME_MISMATCH, "") == "host name mismatch");
  // curl's own host check, after OpenSSL accepted the chain (verify result OK).
  CHECK(tls_cause(verify_failed, X509_V_OK,
                  "SSL: no alternative certificate subject name matches target host name "
                  "'localhost'") == "host name mismatch");
  // Seen with curl 7.88: the verification result is not X509_V_OK on a host name mismatch.
  CHECK(tls_cause(verify_failed, 1,
                  "SSL: no alternative certificate subject name matches target host name "
                  "'localhost'") == "host name mismatch");
  CHECK(tls_cause(verify_failed, X509_V_OK, "SSL certificate verify result") ==
        "certificate not trusted");
  CHECK(tls_cause(verify_failed, X509_V_ERR_CERT_REVOKED, "") == "certificate revoked");
  CHECK(tls_cause(CURLE_SSL_CONNECT_ERROR, X509_V_OK, "error:0A00010B:SSL routines::wrong version") ==
        "handshake failed");
  CHECK(tls_cause(CURLE_SSL_CERTPROBLEM, X509_V_OK, "") == "client certificate or key unusable");
  CHECK(tls_cause(CURLE_SSL_CACERT_BADFILE, X509_V_OK, "") == "CA file or folder unusable");
}

TEST_CASE("tls_cause: a refused client certificate is TLS's, other resets are not",
          "[transport][curl][tls]") {
  CHECK(tls_cause(CURLE_RECV_ERROR, X509_V_OK,
                  "OpenSSL SSL_read: error:0A00045C:SSL routines::tlsv13 alert certificate "
                  "required, errno 0") == "client certificate rejected");
  CHECK(tls_cause(CURLE_SSL_CONNECT_ERROR, X509_V_OK, "sslv3 alert bad certificate") ==
        "client certificate rejected");
  CHECK(tls_cause(CURLE_SSL_CLIENTCERT, X509_V_OK, "") == "client certificate rejected");
  CHECK_FALSE(tls_cause(CURLE_RECV_ERROR, X509_V_OK, "Connection reset by peer"));
  CHECK_FALSE(tls_cause(CURLE_SEND_ERROR, X509_V_ERR_CERT_HAS_EXPIRED, "Broken pipe"));
  CHECK_FALSE(tls_cause(CURLE_OK, X509_V_OK, ""));
  CHECK_FALSE(tls_cause(CURLE_COULDNT_CONNECT, X509_V_OK, "Connection refused"));
  CHECK_FALSE(tls_cause(CURLE_OPERATION_TIMEDOUT, X509_V_OK, "SSL connection timeout"));
}

}  // namespace unit_curl_support_test
