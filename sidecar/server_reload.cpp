// Hot reload (issue 21): SIGHUP or an edited profile file loads the profiles again; the new set is
// validated whole before it replaces the old one, and requests routed on the old set finish on it.
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "server.hpp"

namespace rpcroute::sidecar {

namespace {
std::vector<std::string> served_files(const Runtimes& runtimes) {
  std::vector<Profile> profiles;
  for (const auto& [name, rt] : runtimes) {
    if (!rt->on_demand) profiles.push_back(rt->profile);
  }
  return profile_files(profiles);
}
}  // namespace

void Server::enable_reload(ProfileLoader loader) {
  loader_ = std::move(loader);
  watched_ = served_files(handlers_.profiles());
  stamps_.clear();
  for (const auto& f : watched_) stamps_.push_back(stamp_file(f));
  auto& status = handlers_.reload_status();
  status.files = watched_;
  status.loaded_ms = clock_.now_ms();
}

void Server::reload(std::string_view trigger) {
  if (draining_ || !loader_) return;
  ReloadStatus& status = handlers_.reload_status();
  status.last_trigger = std::string(trigger);
  status.last_try_ms = clock_.now_ms();
  // What is served now knows the secrets an error message could quote.
  std::vector<Profile> before;
  for (const auto& [name, rt] : handlers_.profiles()) before.push_back(rt->profile);
  auto scrub = [&](std::string text) {
    for (const auto& p : before) text = p.scrub(std::move(text));
    return text;
  };
  auto loaded = loader_();
  // The files' state this attempt saw: a failed one is not retried until they change again.
  stamps_.clear();
  for (const auto& f : watched_) stamps_.push_back(stamp_file(f));
  if (!loaded) {
    status.error = scrub(loaded.error().message);
    log(fmt::format("rpcroute: reload ({}) failed; still serving the profiles loaded before: {}",
                    trigger, status.error));
    return;
  }
  for (const auto& p : *loaded) {
    for (const auto& w : p.warnings()) log(fmt::format("rpcroute: warning: {}", w));
  }
  const auto changes = describe_reload(before, *loaded);
  auto replaced = handlers_.replace_profiles(std::move(*loaded), config_.background_probes);
  for (auto& rt : replaced) {
    rt->stop = true;  // its pollers end after their current wait
    asio::co_spawn(io_, retire(std::move(rt)), asio::detached);
  }
  websockets_.rebind(handlers_.profiles());
  if (config_.background_probes) {
    for (const auto& [name, rt] : handlers_.profiles()) start_pollers(rt);
    asio::co_spawn(io_, warn_wrong_chains(++warn_generation_), asio::detached);
  }
  watched_ = served_files(handlers_.profiles());
  stamps_.clear();
  for (const auto& f : watched_) stamps_.push_back(stamp_file(f));
  ++status.reloads;
  status.loaded_ms = clock_.now_ms();
  status.error.clear();
  status.files = watched_;
  log(fmt::format("rpcroute: profiles reloaded ({}): {}", trigger,
                  changes.empty() ? std::string("no provider or chain changed")
                                  : fmt::format("{}", fmt::join(changes, "; "))));
}

asio::awaitable<void> Server::watch_profiles() {
  asio::steady_timer timer(io_);
  std::vector<FileStamp> seen = stamps_;  // at the previous look
  while (!draining_) {
    timer.expires_after(std::chrono::milliseconds(kWatchMs));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (draining_) break;
    std::vector<FileStamp> now;
    now.reserve(watched_.size());
    for (const auto& f : watched_) now.push_back(stamp_file(f));
    // Changed since the last load, and the same as a look ago: the writer is done with it.
    if (now != stamps_ && now == seen) reload("file changed");
    seen = std::move(now);
  }
}

asio::awaitable<void> Server::retire(std::shared_ptr<ProfileRuntime> rt) {
  asio::steady_timer timer(io_);
  // Held elsewhere by the requests routed on it, its pollers until their wait ends, and WebSocket
  // subscriptions opened on it.
  while (rt.use_count() > 1) {
    timer.expires_after(std::chrono::milliseconds(200));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_await rt->router->drain();  // the sends of a broadcast outlive the request that made them
}

}  // namespace rpcroute::sidecar
