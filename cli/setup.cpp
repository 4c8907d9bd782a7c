#include "setup.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>

#include "output.hpp"

namespace rpcroute::cli {

void ignore_from_now(asio::signal_set& signals, std::initializer_list<int> numbers) {
  boost::system::error_code ignored;
  signals.cancel(ignored);
  signals.clear(ignored);  // Asio puts back the default action, which would end the process
  for (const int n : numbers) std::signal(n, SIG_IGN);
}

int usage_error(std::string_view message) {
  print_error(message);
  return code_of(ExitCode::usage);
}

int internal_error(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    print_error(fmt::format("internal error: {}", e.what()));
  }
  return code_of(ExitCode::internal);
}

Result<Profile> load_selected_profile(const std::string& flag) {
  std::string name = flag;
  if (name.empty()) {
    const char* env = std::getenv("RPCROUTE_PROFILE");
    name = env != nullptr && env[0] != '\0' ? env : std::string(kDefaultProfile);
  }
  return find_profile(name);
}

Result<const Chain*> select_chain(const Profile& profile, const std::string& flag) {
  const Chain* chain = flag.empty() ? &profile.chains.front() : profile.find_chain(flag);
  if (chain != nullptr) return chain;
  std::string names;
  for (const auto& c : profile.chains)
    names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", c.name, c.chain_id);
  return fail(
      fmt::format("unknown chain '{}' in profile '{}' (chains: {})", flag, profile.name, names));
}

Result<std::vector<const Provider*>> select_providers(const Chain& chain, const std::string& list) {
  std::vector<const Provider*> out;
  if (list.empty()) {
    for (const auto& p : chain.providers) out.push_back(&p);
    return out;
  }
  std::string_view rest = list;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    auto id = rest.substr(0, comma);
    if (!id.empty()) {
      const Provider* p = chain.find_provider(id);
      if (p == nullptr) {
        std::string ids;
        for (const auto& q : chain.providers)
          ids += fmt::format("{}{}", ids.empty() ? "" : ", ", q.id);
        return fail(
            fmt::format("unknown provider '{}' on chain {} (providers: {})", id, chain.name, ids));
      }
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (out.empty()) return fail("no provider selected");
  return out;
}

std::optional<std::filesystem::path> resolve_state_path(const std::string& flag, bool no_state) {
  if (no_state) return std::nullopt;
  if (!flag.empty()) return std::filesystem::path(flag);
  return default_state_path();
}

std::optional<Profile> load_profile_flag(const std::string& flag) {
  auto profile = load_selected_profile(flag);
  if (!profile) {
    print_error(profile.error().message);
    return std::nullopt;
  }
  for (const auto& w : profile->warnings()) print_warning(w);
  return std::move(*profile);
}

bool Setup::select(const std::string& profile_flag, const std::string& chain_flag) {
  auto loaded = load_profile_flag(profile_flag);
  if (!loaded) return false;
  profile = std::move(*loaded);
  auto selected = select_chain(profile, chain_flag);
  if (!selected) {
    print_error(selected.error().message);
    return false;
  }
  chain = *selected;
  return true;
}

StateStore& Setup::new_store(std::optional<std::filesystem::path> path) {
  return store.emplace(std::move(path), clock, [](const std::string& m) { print_warning(m); });
}

bool Setup::open_state(std::optional<std::filesystem::path> path) {
  if (auto loaded = new_store(std::move(path)).load(); !loaded) {
    print_error(loaded.error().message);
    return false;
  }
  return true;
}

void Setup::save_state(StateWrite how) {
  if (auto saved = how == StateWrite::append ? store->append() : store->save(); !saved)
    print_warning(fmt::format("state not saved: {}", saved.error().message));
}

std::optional<std::unique_ptr<shared::SharedStore>> open_shared_state(asio::io_context& io,
                                                                      Setup& setup,
                                                                      const Profile& profile,
                                                                      const std::string& flag,
                                                                      bool announce) {
  auto options = shared::shared_options(profile, flag, process_env());
  if (!options) {
    print_error(options.error().message);
    return std::nullopt;
  }
  if (!*options) return std::unique_ptr<shared::SharedStore>{};
  (*options)->announce = announce;
  return std::make_unique<shared::SharedStore>(
      io, *setup.store, setup.clock, std::move(**options),
      [](const std::string& m) { fmt::print(stderr, "{}\n", m); });
}

bool Setup::open_shared(const std::string& flag) {
  shared_io = std::make_unique<asio::io_context>(1);
  auto opened = open_shared_state(*shared_io, *this, profile, flag, false);
  if (!opened) return false;
  shared = std::move(*opened);
  if (shared) {
    shared->watch(profile);
    shared->warm_up(kSharedWarmUpMs);
  }
  return true;
}

int Setup::finish(int code) {
  const bool delivered = finish_stdout();
  if (shared) shared->flush_now(kSharedWarmUpMs);
  save_state();
  return delivered || code != 0 ? code : code_of(ExitCode::internal);
}

EventLoop::Completion<void> EventLoop::run(asio::awaitable<void> work, Until until,
                                           const std::function<void()>& on_done) {
  Completion<void> out;
  asio::co_spawn(io_, std::move(work), [&](const std::exception_ptr& e) {
    if (e) out = tl::unexpected(e);
    if (on_done) on_done();
    if (until == Until::done) io_.stop();
  });
  io_.run();
  return out;
}

}  // namespace rpcroute::cli
