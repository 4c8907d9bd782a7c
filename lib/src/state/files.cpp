#include "files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "rpcroute/state.hpp"

namespace rpcroute::state_files {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string errno_text() { return std::strerror(errno); }

std::filesystem::path folder_of(const std::filesystem::path& path) {
  return path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
}

std::filesystem::path beside(const std::filesystem::path& path, std::string_view suffix) {
  auto out = path;
  out += suffix;
  return out;
}

FileId id_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

namespace {

/// Identity of the state file and its journal as they are now: another writer's rename or append
/// changes it.
struct FileMark {
  ino_t ino = 0;
  std::int64_t mtime_ns = 0;
  ino_t journal_ino = 0;
  off_t journal_size = 0;
  bool operator==(const FileMark&) const = default;
};
FileMark file_mark(const std::filesystem::path& path) {
  FileMark m;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    m.ino = st.st_ino;
    m.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }
  if (::lstat(beside(path, kJournalSuffix).c_str(), &st) == 0) {
    m.journal_ino = st.st_ino;
    m.journal_size = st.st_size;
  }
  return m;
}

}  // namespace

/// Never a blocking flock: waiting writers poll, and give up after kLockStallMs during which no
/// writer finished (neither the state file nor its journal changed) — a stopped or hung holder —
/// or kLockGiveUpMs in all.
Result<std::optional<Fd>> lock_exclusive(const std::filesystem::path& path, bool wait) {
  const auto lock_path = beside(path, ".lock");
  // O_NOFOLLOW: a link planted there must not make us create or open its target.
  Fd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd.valid()) {
    const auto why = errno == ELOOP ? std::string("it is a symbolic link") : errno_text();
    return fail(fmt::format("cannot open {}: {}", lock_path.string(), why), ExitCode::internal);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return fail(fmt::format("cannot lock {}: not a regular file", lock_path.string()),
                ExitCode::internal);
  }
  using steady = std::chrono::steady_clock;
  const auto start = steady::now();
  auto progress = start;
  std::optional<FileMark> mark;  // taken at the first wait: an uncontended lock costs no stat
  auto nap = std::chrono::milliseconds(1);
  for (;;) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return std::optional<Fd>(std::move(fd));
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      return fail(fmt::format("cannot lock {}: {}", lock_path.string(), errno_text()),
                  ExitCode::internal);
    }
    if (!wait) return std::optional<Fd>();
    const auto now = steady::now();
    if (auto m = file_mark(path); !mark || !(m == *mark)) {
      mark = m;
      progress = now;
    }
    if (now - progress >= std::chrono::milliseconds(kLockStallMs) ||
        now - start >= std::chrono::milliseconds(kLockGiveUpMs)) {
      return std::optional<Fd>();
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::milliseconds(25));
  }
}

std::string still_locked(const std::filesystem::path& path) {
  return fmt::format(
      "{}.lock is held by another process (a stopped or hung rpcroute?); gave up waiting for it",
      path.string());
}

Result<Fd> lock_or_fail(const std::filesystem::path& path) {
  auto lock = lock_exclusive(path, true);
  if (!lock) return tl::unexpected(lock.error());
  if (!*lock) return fail(still_locked(path), ExitCode::internal);
  return std::move(**lock);
}

namespace {

/// A directory or a link at one of the store's own paths (the state file, its journal).
std::string not_a_file(const std::filesystem::path& path, std::string_view what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  if (S_ISDIR(st.st_mode))
    return fmt::format("{} {} is a directory, not a state file", what, path.string());
  if (S_ISLNK(st.st_mode)) {
    return fmt::format(
        "{} {} is a symbolic link; rpcroute does not follow links in its state folder", what,
        path.string());
  }
  return {};
}

}  // namespace

/// Only regular files are ever read, moved aside or replaced, and nothing in the state folder is
/// followed through a symbolic link; the folder must be the user's own and closed to others, since
/// whoever can write into it can plant links and files that we would read or write.
std::string refusal(const std::filesystem::path& path) {
  if (auto why = not_a_file(path, "state path"); !why.empty()) return why;
  if (auto why = not_a_file(beside(path, kJournalSuffix), "state journal"); !why.empty())
    return why;
  struct stat st {};
  const auto dir = folder_of(path);
  if (::stat(dir.c_str(), &st) != 0) return {};  // not there yet: made private at the first save
  if (!S_ISDIR(st.st_mode)) return fmt::format("state folder {} is not a directory", dir.string());
  if (st.st_uid != ::geteuid()) {
    return fmt::format("state folder {} belongs to uid {}, not to you (uid {})", dir.string(),
                       st.st_uid, ::geteuid());
  }
  if ((st.st_mode & 022) != 0) {
    return fmt::format(
        "state folder {} is writable by {} (mode {:o}); make it private (chmod go-w) or choose "
        "another "
        "--state",
        dir.string(), (st.st_mode & 002) != 0 ? "others" : "its group", st.st_mode & 07777);
  }
  return {};
}

/// Such a file is not ours to move or replace (`--state /dev/null`): the command runs without
/// state.
std::string odd_file_type(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) ||
      S_ISLNK(st.st_mode))
    return {};
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

Result<std::string> read_fd(int fd, std::size_t size) {
  // One read in the common case: a regular file reads short only at its end.
  std::string out(size + 1, '\0');
  std::size_t got = 0;
  for (;;) {
    auto n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno_text(), ExitCode::internal);
    }
    got += static_cast<std::size_t>(n);
    if (n == 0 || got < out.size()) break;
    out.resize(out.size() * 2);  // it grew since the stat
  }
  out.resize(got);
  return out;
}

ReadStatus read_file(const std::filesystem::path& path, std::string& out, std::string& why,
                     Opened* keep) {
  // Non-blocking, then checked: a FIFO at the path must not hang us, and nothing but a regular
  // file is read (or later moved aside, or replaced).
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return ReadStatus::missing;
    why = errno_text();
    // Unreadable, yet moved aside only when it is a regular file (a link is never followed).
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? ReadStatus::unreadable
                                                                  : ReadStatus::not_regular;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    why = errno_text();
    return ReadStatus::not_regular;
  }
  if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
    return ReadStatus::not_regular;
  }
  auto text = read_fd(fd.get(), static_cast<std::size_t>(st.st_size));
  if (!text) {
    why = text.error().message;
    return ReadStatus::unreadable;
  }
  out = std::move(*text);
  if (keep != nullptr) {
    keep->fd = std::move(fd);
    keep->id = id_of(st);
  }
  return ReadStatus::ok;
}

/// `state.json.tmp.PID` whose process is gone. Called under the lock, so no live writer's file is
/// touched.
void remove_orphan_temporaries(const std::filesystem::path& path) {
  const auto dir = folder_of(path);
  const auto prefix = path.filename().string() + ".tmp.";
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    int pid = 0;
    const auto digits = std::string_view(name).substr(prefix.size());
    auto [ptr, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc() || ptr != digits.data() + digits.size() || pid <= 0) continue;
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    std::filesystem::remove(it->path(), rm);
  }
}

Result<void> write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    auto n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(fmt::format("write failed: {}", errno_text()), ExitCode::internal);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

Result<void> ensure_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (dir.empty() || std::filesystem::is_directory(dir, ec)) return {};
  if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path(), ec);
  // The state folder itself is made private from the start (no window with the umask's mode).
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail(fmt::format("cannot create {}: {}", dir.string(), errno_text()),
                ExitCode::internal);
  }
  return {};
}

}  // namespace rpcroute::state_files
