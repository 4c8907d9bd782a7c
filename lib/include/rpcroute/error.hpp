#pragma once
#include <string>
#include <tl/expected.hpp>
#include <utility>

namespace rpcroute {

/// Process exit codes (DESIGN.md section 12).
enum class ExitCode : int {
  ok = 0,
  rpc_error = 1,    // the node answered with a JSON-RPC error
  usage = 2,        // bad command line, profile or configuration
  unavailable = 3,  // no provider could serve the request
  internal = 4,
};

/// An expected failure, carried as a value.
struct Error {
  std::string message;
  ExitCode exit = ExitCode::usage;
};

template <class T>
using Result = tl::expected<T, Error>;

[[nodiscard]] inline tl::unexpected<Error> fail(std::string message,
                                                ExitCode exit = ExitCode::usage) {
  return tl::unexpected<Error>(Error{std::move(message), exit});
}

}  // namespace rpcroute
