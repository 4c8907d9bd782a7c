#include "reload.hpp"

#include <simdjson.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_reload_test {

using namespace rpcroute;
using namespace rpcroute::sidecar;

namespace {

Provider provider(std::string id, std::string url) {
  Provider p;
  p.id = std::move(id);
  p.url = std::move(url);
  p.fingerprint = url_fingerprint(p.url);
  return p;
}

Profile profile(std::string name, std::vector<Provider> providers) {
  Profile p;
  p.name = std::move(name);
  p.source = "/etc/rpcroute/" + p.name + ".yaml";
  Chain c;
  c.name = "main";
  c.chain_id = 1;
  c.providers = std::move(providers);
  p.chains.push_back(std::move(c));
  return p;
}

}  // namespace

TEST_CASE("reload: what changed is said by provider ids, never URLs", "[sidecar][reload]") {
  const auto before = profile(
      "p", {provider("a", "https://a.example/v2/KEYA"), provider("b", "https://b.example/KEYB"),
            provider("c", "http://127.0.0.1:8545")});
  SECTION("nothing changed") { CHECK(describe_reload({before}, {before}).empty()); }
  SECTION("added, removed, URL changed") {
    const auto after = profile(
        "p", {provider("a", "https://a.example/v2/KEYA2"), provider("c", "http://127.0.0.1:8545"),
              provider("d", "https://d.example/KEYD")});
    const auto lines = describe_reload({before}, {after});
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] == "profile p: chain main: added d; removed b; a's URL changed");
    for (const auto* secret : {"KEYA", "KEYB", "KEYD", "example"})
      CHECK(lines[0].find(secret) == std::string::npos);
  }
  SECTION("a ws_url change moves subscriptions: it counts as a URL change") {
    auto after = before;
    after.chains[0].providers[2].ws_url = "ws://127.0.0.1:8546";
    CHECK(describe_reload({before}, {after}) ==
          std::vector<std::string>{"profile p: chain main: c's URL changed"});
  }
  SECTION("chains and profiles come and go") {
    auto after = before;
    after.chains[0].name = "other";
    after.chains[0].chain_id = 5;
    const auto q = profile("q", {provider("x", "http://127.0.0.1:1")});
    CHECK(describe_reload({before}, {after, q}) ==
          std::vector<std::string>{"profile p: chain other added; chain main removed",
                                   "profile q: added"});
    CHECK(describe_reload({before, q}, {before}) == std::vector<std::string>{"profile q: removed"});
  }
  SECTION("a chain id change is said") {
    auto after = before;
    after.chains[0].chain_id = 10;
    CHECK(describe_reload({before}, {after}) ==
          std::vector<std::string>{"profile p: chain main: chain id 1 -> 10"});
  }
  SECTION("shared_state needs a restart, and says so without its password") {
    auto after = before;
    after.shared_state.redis = "redis://127.0.0.1:6379/0";
    after.shared_state.password = "hunter2";
    const auto lines = describe_reload({before}, {after});
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] == "profile p: shared_state changed: it takes effect at the next restart");
  }
}

TEST_CASE("reload: the files watched are the profiles' own, each once, none for embedded ones",
          "[sidecar][reload]") {
  auto a = profile("a", {});
  auto b = profile("b", {});
  b.source = a.source;
  auto e = profile("e", {});
  e.source = "embedded";
  CHECK(profile_files({a, b, e}) == std::vector<std::string>{a.source});
}

TEST_CASE("reload: a file's stamp changes with an edit in place and with a file renamed over it",
          "[sidecar][reload]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("rpcroute-reload-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "p.yaml").string();
  CHECK_FALSE(stamp_file(path).exists);
  std::ofstream(path) << "name: a\n";
  const auto first = stamp_file(path);
  CHECK(first.exists);
  CHECK(first == stamp_file(path));
  std::ofstream(path) << "name: ab\n";  // in place: the size differs
  const auto second = stamp_file(path);
  CHECK_FALSE(second == first);
  const auto tmp = (dir / "p.yaml.tmp").string();
  std::ofstream(tmp) << "name: ac\n";  // same size, another inode
  std::filesystem::rename(tmp, path);
  CHECK_FALSE(stamp_file(path) == second);
  std::filesystem::remove_all(dir);
  CHECK_FALSE(stamp_file(path).exists);
}

TEST_CASE("reload: /status shows the last attempt and its error", "[sidecar][reload]") {
  ReloadStatus s;
  s.files = {"/p.yaml"};
  s.loaded_ms = 1000;
  auto render = [&] {
    json::Writer w;
    w.begin_object();
    write_reload_status(w, s);
    w.end_object();
    return w.take();
  };
  CHECK(render() == R"({"reload":{"reloads":0,"loaded_ms":1000,"files":["/p.yaml"],"ok":true}})");
  s.last_trigger = "SIGHUP";
  s.last_try_ms = 2000;
  s.error = "/p.yaml:3:5: unknown key";
  CHECK(render() ==
        R"({"reload":{"reloads":0,"loaded_ms":1000,"files":["/p.yaml"],"last_trigger":"SIGHUP",)"
        R"("last_try_ms":2000,"ok":false,"error":"/p.yaml:3:5: unknown key"}})");
}

}  // namespace unit_reload_test
