#include "curl_support.hpp"

#include <fmt/format.h>

#include "rpcroute/transport.hpp"

namespace rpcroute {

void init_curl() {
  static const bool initialised = [] {
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  }();
  (void)initialised;
}

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
