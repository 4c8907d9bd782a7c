// Where profiles come from: the search path, files read with bounds (a regular file, at most
// kMaxProfileBytes), and the embedded profiles as the last resort.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "rpcroute/config.hpp"

namespace rpcroute {

namespace {

bool looks_like_path(std::string_view s) {
  auto ends = [&](std::string_view suf) {
    return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
  };
  return s.find('/') != std::string_view::npos || ends(".yaml") || ends(".yml");
}

std::optional<std::string> home_relative(const EnvLookup& env, const char* xdg,
                                         const char* fallback) {
  if (auto x = env(xdg); x && !x->empty()) return *x;
  if (auto h = env("HOME"); h && !h->empty()) return *h + "/" + fallback;
  return std::nullopt;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

/// The whole file, if it is a regular file of at most kMaxProfileBytes. Opened without blocking
/// and checked once open: a FIFO (or a device such as /dev/zero) is refused, even one put in place
/// after a check by name.
Result<std::string> read_profile_bytes(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0)
    return fail(fmt::format("cannot read profile {}: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return fail(fmt::format("cannot read profile {}: {}", path.string(), std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode))
    return fail(fmt::format("profile {} is not a regular file", path.string()));
  auto too_big = [&] {
    return fail(
        fmt::format("profile {} is larger than {} KiB", path.string(), kMaxProfileBytes >> 10));
  };
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxProfileBytes) return too_big();
  std::string text;
  char buf[16384];
  for (;;) {  // a file growing while read is still bounded
    const auto n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(fmt::format("cannot read profile {}: {}", path.string(), std::strerror(errno)));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxProfileBytes) return too_big();
  }
  return text;
}

}  // namespace

Result<Profile> load_profile_file(const std::filesystem::path& path, const EnvLookup& env) {
  auto text = read_profile_bytes(path);
  if (!text) return tl::unexpected(text.error());
  auto p = load_profile_text(*text, path.string(), env);
  if (p) p->name = path.stem().string();
  return p;
}

// In the generated embedded_profiles.cpp: the build tree this binary was built in and its source
// tree's profiles/, so that a binary run from its build tree finds `-p local` there.
std::string_view build_tree_dir();
std::string_view source_profiles_dir();

std::vector<std::filesystem::path> profile_search_path(const EnvLookup& env) {
  std::vector<std::filesystem::path> dirs;
  if (auto v = env("RPCROUTE_PROFILES"); v && !v->empty()) {
    std::string_view rest = *v;
    while (!rest.empty()) {
      auto colon = rest.find(':');
      auto part = rest.substr(0, colon);
      if (!part.empty()) dirs.emplace_back(part);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  if (auto cfg = home_relative(env, "XDG_CONFIG_HOME", ".config"))
    dirs.emplace_back(*cfg + "/rpcroute/profiles");
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().parent_path() / "share/rpcroute/profiles");
  // Run from its build tree (scripts/rpcroute, a developer): the source tree's profiles come last,
  // so `-p local` works in a fresh clone. An installed copy never looks there.
  // Only the rpcroute binary itself (not the unit tests, which expect the search path alone).
  if (!ec && exe.filename() == "rpcroute" &&
      exe.string().starts_with(std::string(build_tree_dir()) + "/"))
    dirs.emplace_back(source_profiles_dir());
  return dirs;
}

std::vector<ProfileLocation> list_profiles(const EnvLookup& env) {
  std::vector<ProfileLocation> out;
  std::set<std::string> seen;
  for (const auto& dir : profile_search_path(env)) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    const bool source_tree = dir == source_profiles_dir();
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      auto ext = entry.path().extension();
      // The source tree's copy of an embedded profile is that profile: listed as embedded.
      if (source_tree && !embedded_profile(entry.path().stem().string()).empty()) continue;
      if (ext == ".yaml" || ext == ".yml") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (seen.insert(f.stem().string()).second) out.push_back({f.stem().string(), f.string()});
    }
  }
  if (seen.insert(std::string(kDefaultProfile)).second)
    out.push_back({std::string(kDefaultProfile), "embedded"});
  return out;
}

Result<Profile> find_profile(std::string_view name_or_path, const EnvLookup& env) {
  if (looks_like_path(name_or_path)) {
    std::filesystem::path path(name_or_path);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return fail(fmt::format("profile file {} does not exist", path.string()));
    return load_profile_file(path, env);
  }
  for (const auto& dir : profile_search_path(env)) {
    if (dir == source_profiles_dir() && !embedded_profile(name_or_path).empty()) continue;
    for (const char* ext : {".yaml", ".yml"}) {
      auto path = dir / (std::string(name_or_path) + ext);
      std::error_code ec;
      if (std::filesystem::is_regular_file(path, ec)) {
        auto p = load_profile_file(path, env);
        if (p) p->name = std::string(name_or_path);
        return p;
      }
    }
  }
  if (auto text = embedded_profile(name_or_path); !text.empty()) {
    auto p = load_profile_text(text, fmt::format("<embedded {}>", name_or_path), env);
    if (p) {
      p->name = std::string(name_or_path);
      p->source = "embedded";
    }
    return p;
  }
  return fail(fmt::format("unknown profile '{}' (see 'rpcroute profiles list')", name_or_path));
}

}  // namespace rpcroute
