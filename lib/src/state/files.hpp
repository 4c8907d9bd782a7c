#pragma once
// The state folder's files as the store uses them: owned descriptors, safe opens and reads, the
// sibling lock, and the rules for which paths must not be used. Internal to lib/src/state/.
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "rpcroute/error.hpp"

namespace rpcroute::state_files {

/// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  void reset();
  /// Lets go of the descriptor without closing it.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

std::string errno_text();
std::filesystem::path folder_of(const std::filesystem::path& path);
/// `path` + `suffix` (the journal, the lock, temporaries sit beside the state file).
std::filesystem::path beside(const std::filesystem::path& path, std::string_view suffix);
inline constexpr std::string_view kJournalSuffix = ".journal";

/// Which file a path names (0/0: none). Two ids are equal only for the same file while one of them
/// is held open (an inode is not reused before its last descriptor is closed).
struct FileId {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  [[nodiscard]] bool none() const { return ino == 0 && dev == 0; }
  bool operator==(const FileId&) const = default;
};
FileId id_of(const struct stat& st);

/// Exclusive lock on the sibling lock file, held for the object's lifetime; nullopt when another
/// process still holds it after the wait (see lock_exclusive in files.cpp). `wait` false: one try.
Result<std::optional<Fd>> lock_exclusive(const std::filesystem::path& path, bool wait);
std::string still_locked(const std::filesystem::path& path);
/// lock_exclusive() that waits, with "still locked" as an error.
Result<Fd> lock_or_fail(const std::filesystem::path& path);

/// Why the state path must not be used at all, or empty (a directory or a link at the state or
/// journal path, a folder that is not the user's own or that others may write to).
std::string refusal(const std::filesystem::path& path);
/// What is at `path` when it is a special file ("a FIFO", "a device"), else empty.
std::string odd_file_type(const std::filesystem::path& path);

enum class ReadStatus { ok, missing, unreadable, not_regular };

/// What read_file() found besides the bytes: the file (kept open when asked for) and its size.
struct Opened {
  Fd fd;
  FileId id;
};
/// Reads a regular file whole, never through a link and never blocking on a FIFO. With `keep`,
/// the open descriptor and the file's id are handed back (the store holds the snapshot open).
ReadStatus read_file(const std::filesystem::path& path, std::string& out, std::string& why,
                     Opened* keep = nullptr);
/// Reads what `fd` holds (a regular file of `size` bytes at the last look) from offset 0.
Result<std::string> read_fd(int fd, std::size_t size);

/// Removes temporary files left by writers killed mid-write. Call under the lock.
void remove_orphan_temporaries(const std::filesystem::path& path);
Result<void> write_all(int fd, std::string_view data);
Result<void> ensure_dir(const std::filesystem::path& dir);

}  // namespace rpcroute::state_files
