#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "rpcroute/state.hpp"

namespace rpcroute {

std::filesystem::path default_state_path(const EnvLookup& env) {
  if (auto p = env("RPCROUTE_STATE"); p && !p->empty()) return *p;
  if (auto x = env("XDG_STATE_HOME"); x && !x->empty())
    return std::filesystem::path(*x) / "rpcroute" / "state.json";
  if (auto h = env("HOME"); h && !h->empty()) {
    return std::filesystem::path(*h) / ".local" / "state" / "rpcroute" / "state.json";
  }
  // No HOME (a service, `env -i`): a folder of the user's own, never first a guessable /tmp name
  // that someone else could have made (and the store checks whatever folder it gets).
  if (auto r = env("XDG_RUNTIME_DIR"); r && !r->empty() && r->front() == '/') {
    return std::filesystem::path(*r) / "rpcroute" / "state.json";
  }
  if (const passwd* pw = ::getpwuid(::geteuid());
      pw != nullptr && pw->pw_dir != nullptr && pw->pw_dir[0] == '/') {
    return std::filesystem::path(pw->pw_dir) / ".local" / "state" / "rpcroute" / "state.json";
  }
  return std::filesystem::path("/tmp") / fmt::format("rpcroute-{}", ::geteuid()) / "state.json";
}

namespace {

/// An owned file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

std::string errno_text() { return std::strerror(errno); }

std::filesystem::path folder_of(const std::filesystem::path& path) {
  return path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
}

/// Identity of the state file as it is now: another writer's rename changes it.
struct FileMark {
  ino_t ino = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileMark&) const = default;
};
FileMark file_mark(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  return {st.st_ino,
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

/// Exclusive lock on a sibling lock file, held for the object's lifetime; nullopt when another
/// process still holds it after the wait. Never a blocking flock: waiting writers poll, and give
/// up after kLockStallMs during which no writer finished (the state file did not change) — a
/// stopped or hung holder — or kLockGiveUpMs in all. `wait` false: one attempt.
Result<std::optional<Fd>> lock_exclusive(const std::filesystem::path& path, bool wait) {
  auto lock_path = path;
  lock_path += ".lock";
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
  auto mark = file_mark(path);
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
    if (auto m = file_mark(path); !(m == mark)) {
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

/// lock_exclusive() that waits, with "still locked" as an error.
Result<Fd> lock_or_fail(const std::filesystem::path& path) {
  auto lock = lock_exclusive(path, true);
  if (!lock) return tl::unexpected(lock.error());
  if (!*lock) return fail(still_locked(path), ExitCode::internal);
  return std::move(**lock);
}

/// Why the state path must not be used at all, or empty. Only regular files are ever read, moved
/// aside or replaced, and nothing in the state folder is followed through a symbolic link; the
/// folder must be the user's own and closed to others, since whoever can write into it can plant
/// links and files that we would read or write.
std::string refusal(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return fmt::format("state path {} is a directory, not a state file", path.string());
    if (S_ISLNK(st.st_mode)) {
      return fmt::format(
          "state path {} is a symbolic link; rpcroute does not follow links in its state folder",
          path.string());
    }
  }
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

enum class ReadStatus { ok, missing, unreadable, not_regular };

/// What is at the state path when it is a special file ("a FIFO", "a device"), else empty. Such a
/// file is not ours to move or replace (`--state /dev/null`): the command runs without state.
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

ReadStatus read_file(const std::filesystem::path& path, std::string& out, std::string& why) {
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
  out.clear();
  char buf[65536];
  for (;;) {
    auto n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      why = errno_text();
      return ReadStatus::unreadable;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return ReadStatus::ok;
}

/// Removes temporary files left by writers killed mid-write (`state.json.tmp.PID` whose process is
/// gone). Called under the lock, so no live writer's file is touched.
void remove_orphan_temporaries(const std::filesystem::path& path) {
  const auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
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

}  // namespace

StateStore::StateStore(std::optional<std::filesystem::path> path, const Clock& clock, Warn warn)
    : path_(std::move(path)), clock_(clock), warn_(std::move(warn)) {}

void StateStore::warn_dropped(std::size_t dropped) {
  if (dropped == 0 || warned_dropped_) return;
  warned_dropped_ = true;
  warn_(fmt::format("state file {}: dropped {} unreadable entr{}; the rest is kept",
                    path_->string(), dropped, dropped == 1 ? "y" : "ies"));
}

State StateStore::read_or_move_aside() {
  std::string text;
  std::string why;
  auto status = read_file(*path_, text, why);
  if (status == ReadStatus::missing || status == ReadStatus::not_regular) return {};
  if (status == ReadStatus::ok) {
    if (text.empty()) {
      why = "empty file";
    } else {
      std::size_t dropped = 0;
      auto parsed = parse_state(text, &dropped);
      if (parsed) {
        warn_dropped(dropped);
        return std::move(*parsed);
      }
      why = parsed.error().message;
    }
  }
  // Only a regular file is moved aside (read_file said so; rename never follows a link).
  auto aside = *path_;
  aside += fmt::format(".corrupt-{}", clock_.now_ms());
  std::error_code ec;
  std::filesystem::rename(*path_, aside, ec);
  if (ec) {
    warn_(fmt::format(
        "state file {} is unusable ({}) and could not be moved aside: {}; starting fresh",
        path_->string(), why, ec.message()));
  } else {
    warn_(fmt::format("state file {} is unusable ({}); moved it to {} and started fresh",
                      path_->string(), why, aside.string()));
  }
  return {};
}

Result<void> StateStore::load() {
  if (!path_) return {};
  if (auto odd = odd_file_type(*path_); !odd.empty()) {
    // Never read, move or replace it: `--state /dev/null` must not rename /dev/null.
    warn_(fmt::format("state path {} is {}, not a state file; running without saved state",
                      path_->string(), odd));
    path_.reset();
    return {};
  }
  if (auto why = refusal(*path_); !why.empty()) {
    path_.reset();
    return fail(why, ExitCode::usage);
  }
  std::string text;
  std::string why;
  auto status = read_file(*path_, text, why);
  if (status == ReadStatus::missing || status == ReadStatus::not_regular) return {};
  if (status == ReadStatus::ok && !text.empty()) {
    std::size_t dropped = 0;
    if (auto parsed = parse_state(text, &dropped)) {
      state_ = std::move(*parsed);
      warn_dropped(dropped);
      return {};
    }
  }
  // Unusable: look again under the lock (a writer may have been mid-rename), then move it aside.
  auto lock = lock_or_fail(*path_);
  if (!lock) {
    warn_(fmt::format("state file {}: {}; running without saved state", path_->string(),
                      lock.error().message));
    return {};
  }
  state_ = read_or_move_aside();
  return {};
}

void StateStore::record(Event event, const HealthConfig& health) {
  apply_event(state_, event, health);
  if (path_) add_pending(std::move(event), health);
}

namespace {

/// Attempts kept per provider between saves: more than any breaker needs to replay its
/// transitions (thresholds are small), far fewer than a busy sidecar makes in a few seconds.
constexpr std::size_t kPendingAttempts = 64;

}  // namespace

void StateStore::add_pending(Event event, const HealthConfig& health) {
  ++pending_.count;
  std::visit(
      [&](auto&& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, AttemptEvent>) {
          auto& pp = pending_.providers[e.key];
          pp.health = health;
          pp.attempts.push_back(std::forward<decltype(e)>(e));
          if (pp.attempts.size() > kPendingAttempts) pp.attempts.pop_front();
        } else if constexpr (std::is_same_v<T, SampleEvent>) {
          auto& pp = pending_.providers[e.key];
          pp.health = health;
          const auto slot = method_slot(pp.samples, e.method);
          auto m = pp.samples.find(slot);
          if (m == pp.samples.end())
            m = pp.samples.emplace(std::string(slot), std::deque<Sample>{}).first;
          auto& samples = m->second;
          samples.push_back(e.sample);
          if (samples.size() > kMaxSamplesPerMethod) samples.pop_front();
        } else if constexpr (std::is_same_v<T, HeightEvent>) {
          auto& pp = pending_.providers[e.key];
          pp.health = health;
          if (!pp.height || e.height.t_ms >= pp.height->t_ms) pp.height = e.height;
        } else if constexpr (std::is_same_v<T, ProbeEvent>) {
          auto& pp = pending_.providers[e.key];
          pp.health = health;
          pp.probe = e.findings;
        } else if constexpr (std::is_same_v<T, QuotaEvent>) {
          auto& pp = pending_.providers[e.key];
          pp.health = health;
          if (pp.quota) {
            pp.quota->taken += e.taken;
            pp.quota->t_ms = std::max(pp.quota->t_ms, e.t_ms);
            pp.quota->quota = e.quota;
          } else {
            pp.quota = e;
          }
        } else if constexpr (std::is_same_v<T, LagEvent>) {
          auto& pp = pending_.providers[e.key];
          pp.health = health;
          if (!pp.lag || e.mark.t_ms >= pp.lag->t_ms) pp.lag = e.mark;
        } else if constexpr (std::is_same_v<T, ArchivalEvent>) {
          auto& pp = pending_.providers[e.key];
          pp.health = health;
          if (!pp.archival || e.seen.t_ms >= pp.archival->t_ms) pp.archival = e.seen;
        } else if constexpr (std::is_same_v<T, HighWaterEvent>) {
          auto [it, fresh] = pending_.high_water.try_emplace(e.chain_key, e);
          auto& hw = it->second;
          if (!fresh) {
            if (e.reset) {
              hw = e;
            } else if (e.height.block > hw.height.block ||
                       (e.height.block == hw.height.block && e.height.t_ms > hw.height.t_ms)) {
              hw.height = e.height;
            }
          }
        } else if constexpr (std::is_same_v<T, CursorEvent>) {
          pending_.cursors[e.chain_key] += e.advance;
        } else if constexpr (std::is_same_v<T, FilterEvent>) {
          if (!storable_filter_key(e.key)) return;
          auto& filters = pending_.filters;
          if (filters.size() >= kMaxFilters && filters.find(e.key) == filters.end()) {
            filters.erase(std::min_element(
                filters.begin(), filters.end(),
                [](const auto& a, const auto& b) { return a.second.t_ms < b.second.t_ms; }));
          }
          filters[e.key] = e.pin;
        }
      },
      std::move(event));
}

void StateStore::replay_pending(State& onto) const {
  for (const auto& [key, pp] : pending_.providers) {
    for (const auto& a : pp.attempts) apply_event(onto, a, pp.health);
    for (const auto& [method, samples] : pp.samples) {
      for (const auto& sample : samples)
        apply_event(onto, SampleEvent{key, method, sample}, pp.health);
    }
    if (pp.height) apply_event(onto, HeightEvent{key, *pp.height}, pp.health);
    if (pp.probe) apply_event(onto, ProbeEvent{key, *pp.probe}, pp.health);
    if (pp.quota) apply_event(onto, *pp.quota, pp.health);
    if (pp.lag) apply_event(onto, LagEvent{key, *pp.lag}, pp.health);
    if (pp.archival) apply_event(onto, ArchivalEvent{key, *pp.archival}, pp.health);
  }
  const HealthConfig none;
  for (const auto& [key, hw] : pending_.high_water) apply_event(onto, hw, none);
  for (const auto& [key, n] : pending_.cursors) apply_event(onto, CursorEvent{key, n}, none);
  for (const auto& [key, pin] : pending_.filters) apply_event(onto, FilterEvent{key, pin}, none);
}

Result<void> StateStore::save() {
  auto saved = save_waiting(true);
  if (!saved) return tl::unexpected(saved.error());
  if (!*saved) return fail(still_locked(*path_), ExitCode::internal);
  return {};
}

Result<bool> StateStore::try_save() { return save_waiting(false); }

Result<bool> StateStore::save_waiting(bool wait) {
  if (!path_ || pending_.count == 0) return true;
  if (auto r = ensure_dir(path_->parent_path()); !r) return tl::unexpected(r.error());
  if (auto why = refusal(*path_); !why.empty()) return fail(why, ExitCode::usage);
  auto lock = lock_exclusive(*path_, wait);
  if (!lock) return tl::unexpected(lock.error());
  if (!*lock) return false;
  if (auto odd = odd_file_type(*path_); !odd.empty()) {
    return fail(fmt::format("state path {} is {}; not replaced", path_->string(), odd),
                ExitCode::internal);
  }

  remove_orphan_temporaries(*path_);
  State merged = read_or_move_aside();
  replay_pending(merged);
  auto now = clock_.now_ms();
  prune(merged, now);
  auto text = serialize_state(merged, now);

  auto tmp = *path_;
  tmp += fmt::format(".tmp.{}", ::getpid());
  {
    // O_EXCL | O_NOFOLLOW: never through a link planted at the name, never into an existing file.
    // One left over (by a dead process that had our pid, or planted) is removed, not followed:
    // unlink removes a link itself. We hold the lock and the folder is ours.
    constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    Fd fd(::open(tmp.c_str(), kFlags, 0600));
    if (!fd.valid() && errno == EEXIST && ::unlink(tmp.c_str()) == 0)
      fd = Fd(::open(tmp.c_str(), kFlags, 0600));
    if (!fd.valid())
      return fail(fmt::format("cannot write {}: {}", tmp.string(), errno_text()),
                  ExitCode::internal);
    ::fchmod(fd.get(), 0600);
    if (auto r = write_all(fd.get(), text); !r) {
      ::unlink(tmp.c_str());
      return tl::unexpected(r.error());
    }
    if (::fsync(fd.get()) != 0) {
      ::unlink(tmp.c_str());
      return fail(fmt::format("fsync {}: {}", tmp.string(), errno_text()), ExitCode::internal);
    }
  }
  if (::rename(tmp.c_str(), path_->c_str()) != 0) {
    auto why = errno_text();
    ::unlink(tmp.c_str());
    return fail(fmt::format("cannot replace {}: {}", path_->string(), why), ExitCode::internal);
  }
  Fd dfd(::open(folder_of(*path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.valid()) ::fsync(dfd.get());

  state_ = std::move(merged);
  pending_ = Pending{};
  return true;
}

Result<void> StateStore::reset() {
  state_ = State{};
  pending_ = Pending{};
  if (!path_) return {};
  if (auto why = refusal(*path_); !why.empty()) return fail(why, ExitCode::usage);
  struct stat st {};
  if (::lstat(path_->c_str(), &st) != 0) return {};
  if (!S_ISREG(st.st_mode))
    return fail(fmt::format("state path {} is not a regular file; not removed", path_->string()));
  auto lock = lock_or_fail(*path_);
  if (!lock) return tl::unexpected(lock.error());
  if (::unlink(path_->c_str()) != 0 && errno != ENOENT) {
    return fail(fmt::format("cannot remove {}: {}", path_->string(), errno_text()),
                ExitCode::internal);
  }
  return {};
}

}  // namespace rpcroute
