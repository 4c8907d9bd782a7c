#pragma once
// What other processes write to the state file, folded into the sidecar's live state: a
// `rpcroute cordon` run in a shell takes effect within a second, without waiting for the sidecar's
// next save (which merges only when the sidecar itself has something to write).
#include "rpcroute/asio_compat.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute::sidecar {

/// How often the state file is looked at: two stat calls when nothing changed, never per request.
inline constexpr int kStateWatchMs = 250;

/// Calls StateStore::refresh() every kStateWatchMs until `stop` is set.
asio::awaitable<void> watch_state(StateStore& store, const bool& stop);

}  // namespace rpcroute::sidecar
