#pragma once
// Hot reload of the sidecar's profiles (issue 21): what a reload compares, says and shows. The
// lifecycle (SIGHUP, the file watch, swapping the runtimes in) is Server's (server_reload.cpp);
// this is its pure part, tested on its own.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rpcroute/config.hpp"
#include "rpcroute/error.hpp"
#include "rpcroute/json.hpp"

namespace rpcroute::sidecar {

/// Loads the profiles `serve` was started with again (the --profile flags, read anew): every one
/// parsed and validated, or the first error.
using ProfileLoader = std::function<Result<std::vector<Profile>>()>;

/// What /status shows of reloads: the last attempt, and its error while the profiles loaded before
/// it are still served.
struct ReloadStatus {
  std::uint64_t reloads = 0;   // successful reloads since start
  std::int64_t loaded_ms = 0;  // when the profiles served now were loaded
  std::string last_trigger;    // "SIGHUP", "file changed"; empty: never reloaded
  std::int64_t last_try_ms = 0;
  std::string error;               // the last attempt's error; empty when it succeeded
  std::vector<std::string> files;  // the profile files watched
};

void write_reload_status(json::Writer& w, const ReloadStatus& status);

/// A file as stat() sees it: a change of any field is an edit (in place, or a new file renamed
/// over it), a missing file one too.
struct FileStamp {
  bool exists = false;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::int64_t size = 0;
  std::int64_t mtime_ns = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};
[[nodiscard]] FileStamp stamp_file(const std::string& path);

/// The files the profiles were read from (embedded ones have none), each once.
[[nodiscard]] std::vector<std::string> profile_files(const std::vector<Profile>& profiles);

/// What a reload changes, for the log, by ids and names only (never a URL): "profile p chain c:
/// added x; removed y; x's URL changed", one line per profile that changed, and what a reload
/// cannot apply (shared_state: needs a restart). Empty when nothing that routing sees changed.
[[nodiscard]] std::vector<std::string> describe_reload(const std::vector<Profile>& before,
                                                       const std::vector<Profile>& after);

}  // namespace rpcroute::sidecar
