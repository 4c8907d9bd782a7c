#pragma once
// What the curl client (engine.cpp) says about its transfers, kept apart from the multi-handle
// machinery: how curl's result codes map to TransportError, and the message of a transfer the
// client abandoned itself.
#include <curl/curl.h>

#include <cstdint>
#include <string>

#include "rpcroute/transport/error.hpp"

namespace rpcroute {

[[nodiscard]] TransportError transport_error_of(CURLcode code);

/// Why a transfer was abandoned by the client (the response cap, memory), as an error message.
[[nodiscard]] std::string abandoned_message(TransportError why, std::uint64_t cap);

}  // namespace rpcroute
