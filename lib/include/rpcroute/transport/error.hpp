#pragma once

namespace rpcroute {

/// Transport-level failure kinds, independent of curl (health classifies them).
/// cancelled: the caller abandoned the transfer (Cancellation); says nothing about the provider.
/// too_large: over HttpRequest::max_response_bytes; encoded: a Content-Encoding nobody asked for
/// (both clients ask for identity); out_of_memory: an allocation failed while taking the answer.
enum class TransportError {
  none,
  connect,
  dns,
  timeout,
  tls,
  reset,
  truncated,
  other,
  cancelled,
  too_large,
  encoded,
  out_of_memory
};

}  // namespace rpcroute
