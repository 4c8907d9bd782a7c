#include <catch2/catch.hpp>

#include "policy.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_policy_test {

using namespace rpcroute::sidecar::policy;

TEST_CASE("policy: host_only drops the port and brackets and lower-cases", "[sidecar][policy]") {
  CHECK(host_only("LocalHost:8545") == "localhost");
  CHECK(host_only("localhost") == "localhost");
  CHECK(host_only("[::1]:8545") == "::1");
  CHECK(host_only("[::1]") == "::1");
  CHECK(host_only("[::1") == "::1");
  CHECK(host_only("::1") == "::1");  // several colons: an address without brackets, kept whole
  CHECK(host_only("127.0.0.1:80") == "127.0.0.1");
}

TEST_CASE("policy: loopback names and addresses pass the Host check, with any port and case",
          "[sidecar][policy]") {
  for (const char* host : {"localhost", "LOCALHOST:8545", "127.0.0.1", "127.0.0.1:8545", "127.1.2.3:1", "[::1]:8545",
                           "[::1]", "app.localhost:3000", "Dev.LocalHost"}) {
    INFO(host);
    CHECK(host_allowed(host, "127.0.0.1"));
  }
}

TEST_CASE("policy: other names are refused unless they are the listen address", "[sidecar][policy]") {
  for (const char* host : {"evil.example", "evil.example:8545", "localhost.evil.example", "127.0.0.1.evil.example",
                           "10.0.0.5:8545", "[fe80::1]:8545", "127.x.0.1", "[::2]"}) {
    INFO(host);
    CHECK_FALSE(host_allowed(host, "127.0.0.1"));
  }
  CHECK(host_allowed("10.0.0.5:8545", "10.0.0.5"));
  CHECK(host_allowed("MyBox:8545", "mybox"));
  CHECK(host_allowed("[FE80::1]:8545", "fe80::1"));
  CHECK_FALSE(host_allowed("otherbox:8545", "mybox"));
}

TEST_CASE("policy: loopback origins are allowed by default, with any port, scheme http or https",
          "[sidecar][policy]") {
  const std::vector<std::string> none;
  for (const char* origin : {"http://localhost:3000", "https://localhost", "HTTP://LOCALHOST:5173",
                             "http://127.0.0.1:8080", "http://[::1]:3000", "http://app.localhost:3000"}) {
    INFO(origin);
    CHECK(origin_allowed(origin, none));
  }
  for (const char* origin : {"https://evil.example", "http://localhost.evil.example", "null", "file://",
                             "ws://localhost:3000", "http://localhost:3000/path", "localhost:3000", ""}) {
    INFO(origin);
    CHECK_FALSE(origin_allowed(origin, none));
  }
}

TEST_CASE("policy: --allow-origin adds origins without case, and '*' allows any, null included",
          "[sidecar][policy]") {
  const std::vector<std::string> extra{"https://App.Example"};
  CHECK(origin_allowed("https://app.example", extra));
  CHECK(origin_allowed("HTTPS://APP.EXAMPLE", extra));
  CHECK_FALSE(origin_allowed("https://app.example:8443", extra));
  CHECK_FALSE(origin_allowed("null", extra));
  CHECK(origin_allowed("http://localhost:3000", extra));  // the defaults stay

  const std::vector<std::string> any{"*"};
  CHECK(origin_allowed("https://anything.example", any));
  CHECK(origin_allowed("null", any));

  const std::vector<std::string> null_origin{"null"};
  CHECK(origin_allowed("null", null_origin));
}

TEST_CASE("policy: constant_time_equal compares whole strings", "[sidecar][policy]") {
  CHECK(constant_time_equal("", ""));
  CHECK(constant_time_equal("s3cret", "s3cret"));
  CHECK_FALSE(constant_time_equal("s3cret", "s3creT"));
  CHECK_FALSE(constant_time_equal("s3cret", "s3cre"));
  CHECK_FALSE(constant_time_equal("s3cret", "s3cretx"));
  CHECK_FALSE(constant_time_equal("x3cret", "s3cret"));
  CHECK_FALSE(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST_CASE("policy: the bearer scheme is case-insensitive, the token is not", "[sidecar][policy]") {
  CHECK(bearer_token_matches("Bearer s3cret", "s3cret"));
  CHECK(bearer_token_matches("bearer s3cret", "s3cret"));
  CHECK(bearer_token_matches("BEARER s3cret", "s3cret"));
  CHECK(bearer_token_matches("bEaReR s3cret", "s3cret"));
  CHECK_FALSE(bearer_token_matches("Bearer S3CRET", "s3cret"));
  CHECK_FALSE(bearer_token_matches("Bearer s3cret ", "s3cret"));
  CHECK_FALSE(bearer_token_matches("Bearer  s3cret", "s3cret"));
  CHECK_FALSE(bearer_token_matches("Basic s3cret", "s3cret"));
  CHECK_FALSE(bearer_token_matches("Bearers3cret", "s3cret"));
  CHECK_FALSE(bearer_token_matches("s3cret", "s3cret"));
  CHECK_FALSE(bearer_token_matches("", "s3cret"));
  CHECK_FALSE(bearer_token_matches("Bearer", "s3cret"));
  CHECK_FALSE(bearer_token_matches("Bearer ", "s3cret"));
}

}  // namespace unit_policy_test
