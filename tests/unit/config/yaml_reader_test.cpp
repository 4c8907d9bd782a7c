// The layer under the profile schema: error positions, secrets kept out of messages, typed fields
// stricter than yaml-cpp's conversions, ${VAR} substitution.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include <fmt/format.h>

#include "config/yaml_reader.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_yaml_reader_test {

using rpcroute::detail::ProfileError;
using rpcroute::detail::YamlReader;

namespace {

rpcroute::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const ProfileError& e) {
    return e.message;
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("yaml reader: an error names source, line and column, and never a substituted value", "[config]") {
  const auto env = env_of({{"KEY", "s3cr3t-value"}});
  YamlReader reader("p.yaml", env);
  const auto root = reader.parse("a: 1\nurl: \"http://h/${KEY}\"\n");
  const auto url = reader.substitute(root["url"], root["url"].Scalar(), false);
  CHECK(url == "http://h/s3cr3t-value");
  CHECK(reader.error(root["url"], "bad URL " + url).message == "p.yaml:2:6: bad URL http://h/***");
  CHECK(reader.take_secrets() == std::vector<std::string>{"s3cr3t-value"});
}

TEST_CASE("yaml reader: typed fields refuse quoted numbers, out-of-range values and unknown keys", "[config]") {
  const auto env = env_of({});
  YamlReader reader("p.yaml", env);
  const auto root = reader.parse("n: \"5\"\nm: 0\nd: 2.5\nb: yes\n");
  CHECK(message_of([&] { (void)reader.opt_int(root, "n", 0); }) == "p.yaml:1:4: 'n' must be an integer");
  CHECK(message_of([&] { (void)reader.opt_int(root, "m", 1); }) == "p.yaml:2:4: 'm' must be at least 1");
  CHECK(reader.opt_int(root, "absent", 1) == std::nullopt);
  CHECK(message_of([&] { (void)reader.opt_double(root, "d", 0, 1); }) == "p.yaml:3:4: 'd' must be between 0 and 1");
  CHECK(reader.boolean(root["b"]));
  CHECK(message_of([&] { reader.check_keys(root, {"n", "m", "d"}, "test"); }) ==
        "p.yaml:4:1: unknown key 'b' in test (expected one of: n, m, d)");
}

TEST_CASE("yaml reader: an unset variable is named; an api key given in clear becomes a secret", "[config]") {
  const auto env = env_of({});
  YamlReader reader("p.yaml", env);
  const auto root = reader.parse("k: abc\nu: ${NOPE}\n");
  CHECK(message_of([&] { (void)reader.substitute(root["u"], root["u"].Scalar(), false); }) ==
        "p.yaml:2:4: environment variable NOPE is not set");
  CHECK(reader.substitute(root["k"], "abc", true) == "abc");
  CHECK(reader.take_secrets() == std::vector<std::string>{"abc"});
}

TEST_CASE("yaml reader: aliases are counted as expanded, so a billion laughs is refused", "[config][hostile]") {
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 8; ++i) {
    text += fmt::format("a{}: &a{} [", i, i);
    for (int j = 0; j < 10; ++j) text += fmt::format("{}*a{}", j ? ", " : "", i - 1);
    text += "]\n";
  }
  const auto env = env_of({});
  YamlReader reader("p.yaml", env);
  CHECK_THAT(message_of([&] { (void)reader.parse(text); }),
             Catch::Contains("more than 100000 nodes once aliases are expanded"));
}

}  // namespace unit_yaml_reader_test
