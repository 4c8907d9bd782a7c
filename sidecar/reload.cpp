// The pure part of a reload: file stamps, what changed, what /status shows.
#include "reload.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>

namespace rpcroute::sidecar {

void write_reload_status(json::Writer& w, const ReloadStatus& status) {
  w.key("reload");
  w.begin_object();
  w.key("reloads");
  w.value(static_cast<std::int64_t>(status.reloads));
  w.key("loaded_ms");
  w.value(status.loaded_ms);
  w.key("files");
  w.begin_array();
  for (const auto& f : status.files) w.value(f);
  w.end_array();
  if (!status.last_trigger.empty()) {
    w.key("last_trigger");
    w.value(status.last_trigger);
    w.key("last_try_ms");
    w.value(status.last_try_ms);
  }
  w.key("ok");
  w.value(status.error.empty());
  if (!status.error.empty()) {
    w.key("error");
    w.value(status.error);
  }
  w.end_object();
}

FileStamp stamp_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {true, static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::int64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

std::vector<std::string> profile_files(const std::vector<Profile>& profiles) {
  std::vector<std::string> files;
  for (const auto& p : profiles) {
    if (p.source.empty() || p.source == "embedded") continue;
    if (std::find(files.begin(), files.end(), p.source) == files.end()) files.push_back(p.source);
  }
  return files;
}

namespace {

const Profile* find_profile_named(const std::vector<Profile>& list, const std::string& name) {
  for (const auto& p : list) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const Chain* find_chain_named(const Profile& profile, const std::string& name) {
  for (const auto& c : profile.chains) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

/// One chain's provider changes: "added a, b; removed c; d's URL changed".
std::string describe_chain(const Chain& before, const Chain& after) {
  std::vector<std::string> added;
  std::vector<std::string> removed;
  std::vector<std::string> changed;
  for (const auto& p : after.providers) {
    const Provider* old = before.find_provider(p.id);
    if (old == nullptr)
      added.push_back(p.id);
    else if (old->fingerprint != p.fingerprint || old->ws_url != p.ws_url)
      changed.push_back(p.id);
  }
  for (const auto& p : before.providers) {
    if (after.find_provider(p.id) == nullptr) removed.push_back(p.id);
  }
  std::vector<std::string> parts;
  if (before.chain_id != after.chain_id)
    parts.push_back(fmt::format("chain id {} -> {}", before.chain_id, after.chain_id));
  if (!added.empty()) parts.push_back(fmt::format("added {}", fmt::join(added, ", ")));
  if (!removed.empty()) parts.push_back(fmt::format("removed {}", fmt::join(removed, ", ")));
  // A new URL is a new provider key: what was learned of the old one is not carried over.
  for (const auto& id : changed) parts.push_back(fmt::format("{}'s URL changed", id));
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

std::vector<std::string> describe_reload(const std::vector<Profile>& before,
                                         const std::vector<Profile>& after) {
  std::vector<std::string> lines;
  for (const auto& p : after) {
    const Profile* old = find_profile_named(before, p.name);
    if (old == nullptr) {
      lines.push_back(fmt::format("profile {}: added", p.name));
      continue;
    }
    std::vector<std::string> parts;
    for (const auto& c : p.chains) {
      const Chain* oc = find_chain_named(*old, c.name);
      if (oc == nullptr) {
        parts.push_back(fmt::format("chain {} added", c.name));
      } else if (auto d = describe_chain(*oc, c); !d.empty()) {
        parts.push_back(fmt::format("chain {}: {}", c.name, d));
      }
    }
    for (const auto& c : old->chains) {
      if (find_chain_named(p, c.name) == nullptr)
        parts.push_back(fmt::format("chain {} removed", c.name));
    }
    if (!parts.empty())
      lines.push_back(fmt::format("profile {}: {}", p.name, fmt::join(parts, "; ")));
    const auto& s0 = old->shared_state;
    const auto& s1 = p.shared_state;
    if (s0.redis != s1.redis || s0.prefix != s1.prefix || s0.user != s1.user ||
        s0.password != s1.password)
      lines.push_back(fmt::format(
          "profile {}: shared_state changed: it takes effect at the next restart", p.name));
  }
  for (const auto& p : before) {
    if (find_profile_named(after, p.name) == nullptr)
      lines.push_back(fmt::format("profile {}: removed", p.name));
  }
  return lines;
}

}  // namespace rpcroute::sidecar
