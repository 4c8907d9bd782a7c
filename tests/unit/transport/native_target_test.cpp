// Which URLs the native HTTP/1.1 client takes, and the request head it sends them.
#include <catch2/catch.hpp>

#include <string>

#include "transport/native_http.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_native_target_test {

using rpcroute::detail::parse_native_target;

TEST_CASE("native target: an address and port give one endpoint, a pool key and the request head",
          "[transport]") {
  auto t = parse_native_target("http://127.0.0.1:8545");
  REQUIRE(t != nullptr);
  REQUIRE(t->endpoints.size() == 1);
  CHECK(t->endpoints[0].port() == 8545);
  CHECK(t->host == "127.0.0.1");
  CHECK(t->key == "127.0.0.1:8545");
  CHECK(t->head.starts_with("POST / HTTP/1.1\r\nHost: 127.0.0.1:8545\r\n"));
  CHECK(t->head.ends_with("Accept-Encoding: identity\r\n"));
}

TEST_CASE("native target: localhost is tried on IPv4 then IPv6; path and query kept, fragment dropped",
          "[transport]") {
  auto t = parse_native_target("HTTP://localhost/v2/key?x=1#frag");
  REQUIRE(t != nullptr);
  REQUIRE(t->endpoints.size() == 2);
  CHECK(t->endpoints[0].address().is_v4());
  CHECK(t->endpoints[1].address().is_v6());
  CHECK(t->port == 80);
  CHECK(t->head.starts_with("POST /v2/key?x=1 HTTP/1.1\r\nHost: localhost\r\n"));

  // Subdomains of localhost are this machine too (RFC 6761; curl does the same): a key in the
  // host name must not be asked of DNS.
  auto k = parse_native_target("https://SeCrEtKeY.localhost:8443/");
  REQUIRE(k != nullptr);
  REQUIRE(k->endpoints.size() == 2);
  CHECK(k->endpoints[0].address().is_v4());

  auto q = parse_native_target("http://[::1]:8080?a=b");
  REQUIRE(q != nullptr);
  CHECK(q->host == "::1");
  CHECK(q->head.starts_with("POST /?a=b HTTP/1.1\r\nHost: [::1]:8080\r\n"));
}

TEST_CASE("native target: https:// and host names are taken (names resolved when connecting)", "[transport]") {
  auto t = parse_native_target("https://eth.example.org/v2/key");
  REQUIRE(t != nullptr);
  CHECK(t->https);
  CHECK(t->endpoints.empty());
  CHECK(t->host == "eth.example.org");
  CHECK(t->port == 443);
  CHECK(t->key_host == "eth.example.org:443");
  CHECK(t->head.starts_with("POST /v2/key HTTP/1.1\r\nHost: eth.example.org\r\n"));

  auto p = parse_native_target("http://node-1.internal:8545");
  REQUIRE(p != nullptr);
  CHECK_FALSE(p->https);
  CHECK(p->port == 8545);
  CHECK(p->endpoints.empty());

  auto a = parse_native_target("HTTPS://127.0.0.1:8443/");
  REQUIRE(a != nullptr);
  CHECK(a->https);
  REQUIRE(a->endpoints.size() == 1);
  CHECK(a->endpoints[0].port() == 8443);
}

TEST_CASE("native target: what curl must take is declined", "[transport]") {
  for (std::string url : {"https://user:pw@127.0.0.1", "http://user:pw@127.0.0.1", "http://exa_m%ple.org/",
                          "http://exa$mple.org/", "http://127.0.0.1:0", "http://127.0.0.1:65536", "http://127.0.0.1:80x", "http://[::1",
                          "http://[::1]x", "http://127.0.0.1/a b", "http://[fe80::1%1]:8545", "http://",
                          "ws://127.0.0.1"}) {
    INFO(url);
    CHECK(parse_native_target(url) == nullptr);
  }
}

}  // namespace unit_native_target_test
