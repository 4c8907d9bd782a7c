// The state file against its own clients and upstreams (issue 14): bounded keys, valid UTF-8 on
// write, entries dropped rather than files, paths that are refused, links never followed, and a
// lock that is never waited for without bound.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "../support/temp_dir.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_state_safety_test {

using namespace rpcroute;
using rpcroute::test::fake_env;
using rpcroute::test::read_file;
using rpcroute::test::TempDir;
using rpcroute::test::write_file;

namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
const std::string kKey = "prof/eth/alpha#0123456789ab";

HealthConfig health() { return HealthConfig{}; }

SampleEvent sample(const std::string& method, std::int64_t t_ms = kNow) {
  return SampleEvent{kKey, method, Sample{t_ms, 1000, Outcome::success}};
}

/// A child process that holds the lock of `state` until killed; returns its pid once it holds it.
pid_t hold_lock(const std::filesystem::path& state) {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto lock = state;
    lock += ".lock";
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  return pid;
}

void release(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Item 13: keys clients and upstreams cannot grow without bound

TEST_CASE("known_shaped_method: namespace_name in ASCII, at most kMaxMethodNameBytes", "[state][bounds]") {
  for (const char* ok : {"eth_call", "eth_getBlockByNumber", "debug_traceTransaction", "anvil_mine", "evm_increaseTime",
                         "trace_replayBlockTransactions", "alchemy_getAssetTransfers", "net_version", "web3_sha3",
                         "eth_get_logs", "l2_batchInfo"}) {
    INFO(ok);
    CHECK(known_shaped_method(ok));
  }
  for (std::string bad : {"", "eth", "eth_", "_call", "Eth_call", "eth call", "eth_call\n", "eth_\xff", "eth-call",
                          "ETH_CALL", "1eth_call", "eth_ca.ll", "other"}) {
    INFO(bad);
    CHECK_FALSE(known_shaped_method(bad));
  }
  CHECK(known_shaped_method("eth_" + std::string(kMaxMethodNameBytes - 4, 'a')));
  CHECK_FALSE(known_shaped_method("eth_" + std::string(kMaxMethodNameBytes - 3, 'a')));
}

TEST_CASE("apply_event: odd or surplus method names share the 'other' key; the provider keeps a bounded map",
          "[state][bounds]") {
  State s;
  const auto h = health();
  // Long, distinct names (a client sending 10 requests with 7 MB method names made a 70 MB file).
  for (int i = 0; i < 10; ++i) apply_event(s, sample(std::string(100'000, static_cast<char>('a' + i))), h);
  apply_event(s, sample("eth_\xff\xfe"), h);
  apply_event(s, sample("eth_call"), h);
  auto& methods = s.providers.at(kKey).methods;
  CHECK(methods.size() == 2);
  CHECK(methods.at(std::string(kOtherMethod)).size() == 11);
  CHECK(methods.at("eth_call").size() == 1);
  // Distinct well-shaped names: up to the cap, then 'other'; known ones keep their own key.
  for (std::size_t i = 0; i < 3 * kMaxMethodsPerProvider; ++i) apply_event(s, sample(fmt::format("x_m{}", i)), h);
  CHECK(methods.size() <= kMaxMethodsPerProvider + 1);
  apply_event(s, sample("eth_call"), h);
  CHECK(methods.at("eth_call").size() == 2);
  const auto text = serialize_state(s, kNow);
  CHECK(text.size() < 200'000);
}

TEST_CASE("StateStore: pending changes are bounded the same way", "[state][bounds]") {
  TempDir dir;
  FakeClock clock(kNow);
  StateStore store(dir / "state.json", clock, [](const std::string&) {});
  for (int i = 0; i < 500; ++i) store.record(sample(fmt::format("x_long{}{}", i, std::string(5'000, 'z'))), health());
  REQUIRE(store.save().has_value());
  CHECK(std::filesystem::file_size(dir / "state.json") < 100'000);
  auto parsed = parse_state(read_file(dir / "state.json"));
  REQUIRE(parsed.has_value());
  CHECK(parsed->providers.at(kKey).methods.at(std::string(kOtherMethod)).size() == kMaxSamplesPerMethod);
}

TEST_CASE("filters: only short printable keys are pinned, and at most kMaxFilters", "[state][bounds]") {
  State s;
  const auto h = health();
  apply_event(s, FilterEvent{"p/c/" + std::string(10'000, 'f'), FilterPin{"a", kNow}}, h);
  apply_event(s, FilterEvent{"p/c/0x1\n", FilterPin{"a", kNow}}, h);
  apply_event(s, FilterEvent{"p/c/0x\xff", FilterPin{"a", kNow}}, h);
  CHECK(s.filters.empty());
  for (std::size_t i = 0; i < kMaxFilters + 10; ++i) {
    apply_event(s, FilterEvent{fmt::format("p/c/0x{:x}", i), FilterPin{"a", kNow + static_cast<std::int64_t>(i)}}, h);
  }
  CHECK(s.filters.size() == kMaxFilters);
  CHECK_FALSE(s.filters.contains("p/c/0x0"));  // the oldest went
  CHECK(s.filters.contains(fmt::format("p/c/0x{:x}", kMaxFilters + 9)));

  TempDir dir;
  FakeClock clock(kNow);
  StateStore store(dir / "state.json", clock, [](const std::string&) {});
  store.record(FilterEvent{"p/c/" + std::string(10'000, 'f'), FilterPin{"a", kNow}}, h);
  store.record(FilterEvent{"p/c/0xabc", FilterPin{"a", kNow}}, h);
  REQUIRE(store.save().has_value());
  auto parsed = parse_state(read_file(dir / "state.json"));
  REQUIRE(parsed.has_value());
  CHECK(parsed->filters.size() == 1);
}

TEST_CASE("a provider's client version and breaker reason are cut short", "[state][bounds]") {
  State s;
  ProbeFindings f;
  f.t_ms = kNow;
  f.client_version = std::string(1'000'000, 'v');
  apply_event(s, ProbeEvent{kKey, f}, health());
  apply_event(s, AttemptEvent{kKey, kNow, OutcomeClass::provider_failure, std::string(100'000, 'r')}, health());
  CHECK(s.providers.at(kKey).probe.client_version.size() == kMaxTextBytes);
  CHECK(s.providers.at(kKey).breaker.reason.size() == kMaxTextBytes);
}

TEST_CASE("parse_state drops the method names a writer would not have kept (a file from before the bounds)",
          "[state][bounds]") {
  std::string methods;
  for (std::size_t i = 0; i < kMaxMethodsPerProvider + 20; ++i) {
    methods += fmt::format(R"("x_m{}":{{"samples":[[{},5,"success"]]}},)", i, kNow);
  }
  methods += fmt::format(R"("{}":{{"samples":[[{},5,"success"]]}})", std::string(1'000, 'q'), kNow);
  const auto text = fmt::format(R"({{"version":1,"providers":{{"{}":{{"methods":{{{}}}}}}}}})", kKey, methods);
  std::size_t dropped = 0;
  auto parsed = parse_state(text, &dropped);
  REQUIRE(parsed.has_value());
  CHECK(parsed->providers.at(kKey).methods.size() == kMaxMethodsPerProvider);
  CHECK(dropped == 21);
}

// ---------------------------------------------------------------------------------------------------
// Item 17: the writer never produces what the reader rejects; the reader drops an entry, not the file

TEST_CASE("valid_utf8 keeps valid text and replaces each stray byte with U+FFFD", "[state][utf8]") {
  CHECK(valid_utf8("eth_call") == "eth_call");
  CHECK(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(valid_utf8("a\xffz") == "a\xef\xbf\xbdz");
  CHECK(valid_utf8("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");          // overlong '/'
  CHECK(valid_utf8("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
  CHECK(valid_utf8("\xe2\x82") == "\xef\xbf\xbd\xef\xbf\xbd");              // cut short
  for (std::string s : {"\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "x\x80", "\xe0\x80\x80"}) {
    INFO(s);
    CHECK(simdjson::validate_utf8(valid_utf8(s).data(), valid_utf8(s).size()));
  }
}

TEST_CASE("serialize_state: names that are not UTF-8, anywhere, still make a file parse_state reads",
          "[state][utf8]") {
  State s;
  const auto h = health();
  const std::string odd_key = "pr\xff" "of/eth/al\xc0pha#01";
  apply_event(s, sample("eth_\xff"), h);
  apply_event(s, SampleEvent{odd_key, "eth_call", Sample{kNow, 5, Outcome::success}}, h);
  ProbeFindings f;
  f.t_ms = kNow;
  f.client_version = "Geth/\xff\xfe";
  apply_event(s, ProbeEvent{kKey, f}, h);
  apply_event(s, AttemptEvent{kKey, kNow, OutcomeClass::provider_failure, "bad \xe2\x82"}, h);
  apply_event(s, FilterEvent{"p/c/0x1", FilterPin{"al\xffpha", kNow}}, h);
  apply_event(s, HighWaterEvent{"pr\xff/eth", Height{5, kNow}}, h);
  const auto text = serialize_state(s, kNow);
  CHECK(simdjson::validate_utf8(text.data(), text.size()));
  std::size_t dropped = 99;
  auto parsed = parse_state(text, &dropped);
  REQUIRE(parsed.has_value());
  CHECK(dropped == 0);
  CHECK(parsed->providers.size() == 2);
  CHECK(parsed->providers.at(kKey).methods.contains(std::string(kOtherMethod)));
  CHECK(parsed->providers.at(kKey).probe.client_version == "Geth/\xef\xbf\xbd\xef\xbf\xbd");
}

TEST_CASE("parse_state: a bad entry is dropped, the rest of the file is kept", "[state][utf8]") {
  const std::string good = fmt::format(R"("{}":{{"methods":{{"eth_call":{{"samples":[[{},5,"success"]]}}}}}})", kKey, kNow);
  const std::vector<std::string> bad_entries = {
      // bytes that are not UTF-8 (what an older writer put there from `call $'eth_\xff'`)
      fmt::format(R"("p/c/x#1":{{"methods":{{"eth_)" "\xff" R"(":{{"samples":[[{},5,"success"]]}}}}}})", kNow),
      R"("p/c/y#1":42)",
      R"("p/c/z#1":{"breaker":{"state":"weird"}})",
      R"("p/c/w#1":{"height":{"block":-1}})",
  };
  for (const auto& bad : bad_entries) {
    INFO(bad);
    const auto text = fmt::format(R"({{"version":1,"providers":{{{},{}}},"chains":{{"p/c":{{"rr_cursor":3}}}}}})",
                                  bad, good);
    std::size_t dropped = 0;
    auto parsed = parse_state(text, &dropped);
    REQUIRE(parsed.has_value());
    CHECK(dropped >= 1);
    CHECK(parsed->providers.at(kKey).methods.at("eth_call").size() == 1);
    CHECK(parsed->chains.at("p/c").rr_cursor == 3);
  }
  // A bad sample drops its method, not its provider.
  const auto text = fmt::format(
      R"({{"version":1,"providers":{{"{}":{{"height":{{"block":7}},"methods":{{"eth_call":{{"samples":[["x"]]}}}}}}}}}})",
      kKey);
  std::size_t dropped = 0;
  auto parsed = parse_state(text, &dropped);
  REQUIRE(parsed.has_value());
  CHECK(dropped == 1);
  CHECK(parsed->providers.at(kKey).height.block == 7);
  CHECK(parsed->providers.at(kKey).methods.empty());
  // Chains and filters too.
  parsed = parse_state(R"({"version":1,"chains":{"a":{"rr_cursor":-1},"b":{"rr_cursor":2}},"filters":{"f":1,"g":{"provider":"x","t_ms":1}}})",
                       &dropped);
  REQUIRE(parsed.has_value());
  CHECK(dropped == 2);
  CHECK(parsed->chains.size() == 1);
  CHECK(parsed->filters.size() == 1);
}

TEST_CASE("StateStore: a file with a bad entry is kept (with a warning), not moved aside", "[state][utf8][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  write_file(path, fmt::format(R"({{"version":1,"providers":{{"p/c/x#1":{{"methods":{{"eth_)"
                               "\xff"
                               R"(":{{"samples":[[{},5,"success"]]}}}}}},"{}":{{"height":{{"block":9,"t_ms":{}}}}}}}}})",
                               kNow, kKey, kNow));
  FakeClock clock(kNow);
  std::vector<std::string> warnings;
  StateStore store(path, clock, [&](const std::string& m) { warnings.push_back(m); });
  REQUIRE(store.load().has_value());
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("dropped 1 unreadable entry"));
  CHECK(store.state().providers.at(kKey).height.block == 9);
  store.record(sample("eth_call"), health());
  REQUIRE(store.save().has_value());
  CHECK(warnings.size() == 1);
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    CHECK(entry.path().filename().string().find("corrupt") == std::string::npos);
  }
  auto parsed = parse_state(read_file(path));
  REQUIRE(parsed.has_value());
  CHECK(parsed->providers.at(kKey).height.block == 9);
  const auto text = read_file(path);
  CHECK(simdjson::validate_utf8(text.data(), text.size()));
}

// ---------------------------------------------------------------------------------------------------
// Items 18 and 19: paths that are refused, links that are never followed

TEST_CASE("StateStore: a directory at the state path is refused and left where it is", "[state][paths]") {
  TempDir dir;
  const auto folder = dir / "home";
  std::filesystem::create_directories(folder / "inside");
  FakeClock clock(kNow);
  std::vector<std::string> warnings;
  StateStore store(folder, clock, [&](const std::string& m) { warnings.push_back(m); });
  auto loaded = store.load();
  REQUIRE_FALSE(loaded.has_value());
  CHECK(loaded.error().exit == ExitCode::usage);
  CHECK_THAT(loaded.error().message, Catch::Contains("is a directory"));
  CHECK_FALSE(store.path().has_value());  // memory-only from now on, even for a caller that ignores it
  store.record(sample("eth_call"), health());
  CHECK(store.save().has_value());
  CHECK(std::filesystem::is_directory(folder / "inside"));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
  // reset neither.
  StateStore resetter(folder, clock, [](const std::string&) {});
  CHECK_FALSE(resetter.reset().has_value());
  CHECK(std::filesystem::is_directory(folder / "inside"));
}

TEST_CASE("StateStore: a symbolic link at the state path is refused", "[state][paths]") {
  TempDir dir;
  const auto target = dir / "elsewhere.json";
  write_file(target, "precious");
  std::filesystem::create_symlink(target, dir / "state.json");
  FakeClock clock(kNow);
  StateStore store(dir / "state.json", clock, [](const std::string&) {});
  auto loaded = store.load();
  REQUIRE_FALSE(loaded.has_value());
  CHECK_THAT(loaded.error().message, Catch::Contains("symbolic link"));
  CHECK(read_file(target) == "precious");
}

TEST_CASE("StateStore: a link planted at the temporary name is not followed; its target is untouched",
          "[state][paths]") {
  TempDir dir;
  const auto path = dir / "state.json";
  const auto victim = dir / "victim";
  write_file(victim, "precious");
  std::filesystem::create_symlink(victim, dir / fmt::format("state.json.tmp.{}", ::getpid()));
  FakeClock clock(kNow);
  StateStore store(path, clock, [](const std::string&) {});
  REQUIRE(store.load().has_value());
  store.record(sample("eth_call"), health());
  REQUIRE(store.save().has_value());
  CHECK(read_file(victim) == "precious");
  CHECK(parse_state(read_file(path)).has_value());
  CHECK_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir / fmt::format("state.json.tmp.{}", ::getpid()))));
}

TEST_CASE("StateStore: a link planted at the lock file does not create its target; the save fails", "[state][paths]") {
  TempDir dir;
  const auto path = dir / "state.json";
  const auto target = dir / "created-through-the-link";
  std::filesystem::create_symlink(target, dir / "state.json.lock");
  FakeClock clock(kNow);
  StateStore store(path, clock, [](const std::string&) {});
  REQUIRE(store.load().has_value());
  store.record(sample("eth_call"), health());
  auto saved = store.save();
  REQUIRE_FALSE(saved.has_value());
  CHECK_THAT(saved.error().message, Catch::Contains("symbolic link"));
  CHECK_FALSE(std::filesystem::exists(target));
}

TEST_CASE("StateStore: a state folder others may write to, or that is not the user's, is refused", "[state][paths]") {
  TempDir dir;
  FakeClock clock(kNow);
  for (auto mode : {0777, 0770, 0775, 01777}) {
    INFO(fmt::format("{:o}", mode));
    const auto folder = dir / fmt::format("f{:o}", mode);
    std::filesystem::create_directory(folder);
    ::chmod(folder.c_str(), static_cast<mode_t>(mode));
    StateStore store(folder / "state.json", clock, [](const std::string&) {});
    auto loaded = store.load();
    REQUIRE_FALSE(loaded.has_value());
    CHECK(loaded.error().exit == ExitCode::usage);
    CHECK_THAT(loaded.error().message, Catch::Contains("writable by"));
  }
  if (::geteuid() == 0) {
    const auto folder = dir / "not-mine";
    std::filesystem::create_directory(folder);
    REQUIRE(::chown(folder.c_str(), 65534, 65534) == 0);
    ::chmod(folder.c_str(), 0755);
    StateStore store(folder / "state.json", clock, [](const std::string&) {});
    auto loaded = store.load();
    REQUIRE_FALSE(loaded.has_value());
    CHECK_THAT(loaded.error().message, Catch::Contains("not to you"));
  }
  // A folder the store makes itself is private from the start.
  StateStore fresh(dir / "new/deeper/state.json", clock, [](const std::string&) {});
  REQUIRE(fresh.load().has_value());
  fresh.record(sample("eth_call"), health());
  REQUIRE(fresh.save().has_value());
  struct stat st {};
  REQUIRE(::stat((dir / "new/deeper").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
}

TEST_CASE("default_state_path without HOME: the runtime folder, else the account's home, not /tmp", "[state][paths]") {
  CHECK(default_state_path(fake_env({{"XDG_RUNTIME_DIR", "/run/user/1000"}})) == "/run/user/1000/rpcroute/state.json");
  CHECK(default_state_path(fake_env({{"XDG_RUNTIME_DIR", "/run/user/1000"}, {"HOME", "/h"}})) ==
        "/h/.local/state/rpcroute/state.json");
  const auto fallback = default_state_path(fake_env({}));
  CHECK(fallback.is_absolute());
  if (const char* home = std::getenv("HOME"); home != nullptr && std::string_view(home) != "/tmp") {
    CHECK(fallback.string().rfind("/tmp/", 0) != 0);
  }
}

// ---------------------------------------------------------------------------------------------------
// Item 12: a lock held by a stopped process never blocks without bound

TEST_CASE("StateStore: with the lock held elsewhere, try_save returns at once and save gives up after a bounded wait",
          "[state][lock]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  StateStore store(path, clock, [](const std::string&) {});
  REQUIRE(store.load().has_value());
  store.record(sample("eth_call"), health());
  const pid_t holder = hold_lock(path);

  auto tried = store.try_save();
  REQUIRE(tried.has_value());
  CHECK_FALSE(*tried);
  CHECK(store.dirty());

  const auto t0 = std::chrono::steady_clock::now();
  auto saved = store.save();
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(saved.has_value());
  CHECK_THAT(saved.error().message, Catch::Contains("held by another process"));
  CHECK(waited < std::chrono::milliseconds(kLockGiveUpMs + 5'000));  // bounded (the old code waited forever)
  CHECK(store.dirty());                                               // kept for a later save
  CHECK_FALSE(std::filesystem::exists(path));

  release(holder);
  tried = store.try_save();
  REQUIRE(tried.has_value());
  CHECK(*tried);
  CHECK_FALSE(store.dirty());
  CHECK(parse_state(read_file(path))->providers.at(kKey).methods.at("eth_call").size() == 1);
}

TEST_CASE("StateStore: a waiting writer keeps waiting while other writers finish", "[state][lock]") {
  // The lock passes from writer to writer: each finished write renames a new file into place,
  // which counts as progress, so a long queue of live writers is waited for (up to kLockGiveUpMs).
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  const pid_t holder = hold_lock(path);
  const pid_t writer = ::fork();
  REQUIRE(writer >= 0);
  if (writer == 0) {
    // Replaces the state file every 200 ms for about 3 s (past kLockStallMs), then frees the lock.
    for (int i = 0; i < 15; ++i) {
      ::usleep(200'000);
      auto tmp = path;
      tmp += ".next";
      write_file(tmp, R"({"version":1})");
      std::filesystem::rename(tmp, path);
    }
    ::kill(holder, SIGKILL);
    ::_exit(0);
  }
  StateStore store(path, clock, [](const std::string&) {});
  store.record(sample("eth_call"), health());
  auto saved = store.save();
  CHECK(saved.has_value());
  int status = 0;
  ::waitpid(writer, &status, 0);
  ::waitpid(holder, &status, 0);
}

}  // namespace unit_state_safety_test
