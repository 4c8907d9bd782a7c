// Which requests the native client takes over https (the rest stays with curl), one pool per tls:
// settings, and host names resolved and kept (NameCache). The TLS exchanges themselves are tested
// through the binary against the TLS fake (tests/e2e/call.bats, the fault matrix's HTTPS pass).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "transport/native_transfer.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_native_tls_test {

using namespace rpcroute;
using rpcroute::detail::NativeHttp;

namespace {

HttpRequest request(std::string url, HttpVersion http = HttpVersion::http1_1,
                    const TlsOptions* tls = nullptr) {
  HttpRequest r;
  r.url = std::move(url);
  r.http = http;
  r.tls = tls;
  return r;
}

struct EnvVar {
  EnvVar(const char* name, const char* value) : name(name) { ::setenv(name, value, 1); }
  ~EnvVar() { ::unsetenv(name); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;
  const char* name;
};

}  // namespace

TEST_CASE("native tls: https with HTTP/1.1 is the native client's; HTTP/2 stays with curl", "[transport][tls]") {
  asio::io_context io;
  auto native = std::make_shared<NativeHttp>(io);
  auto a = native->target_for(request("https://localhost:8443/key"));
  REQUIRE(a != nullptr);
  CHECK(a->https);
  REQUIRE(a->context != nullptr);
  CHECK(a->context->error.empty());
  CHECK(native->target_for(request("https://localhost:8443/key")) == a);  // parsed once
  CHECK(native->target_for(request("https://localhost:8443/key", HttpVersion::http2)) == nullptr);
  CHECK(native->target_for(request("http://127.0.0.1:8545/")) != nullptr);
  CHECK(native->target_for(request("https://user:pw@localhost/")) == nullptr);
}

TEST_CASE("native tls: other tls: settings are another pool; a CA file that does not load fails the transfer",
          "[transport][tls]") {
  asio::io_context io;
  auto native = std::make_shared<NativeHttp>(io);
  TlsOptions insecure;
  insecure.insecure = true;
  TlsOptions missing_ca;
  missing_ca.ca_file = "/nonexistent/ca.pem";
  auto plain = native->target_for(request("https://localhost:8443/"));
  auto other = native->target_for(request("https://localhost:8443/", HttpVersion::http1_1, &insecure));
  auto again = native->target_for(request("https://localhost:8443/", HttpVersion::http1_1, &insecure));
  REQUIRE(plain != nullptr);
  REQUIRE(other != nullptr);
  CHECK(other == again);
  CHECK(other != plain);
  CHECK(other->key != plain->key);  // never one pool for connections checked differently
  CHECK(other->key_host == plain->key_host);
  CHECK(other->context->options.insecure);

  auto bad = native->target_for(request("https://localhost:8443/", HttpVersion::http1_1, &missing_ca));
  REQUIRE(bad != nullptr);
  CHECK(bad->context->error.starts_with("TLS: CA file or folder unusable ("));
  HttpResponse got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        got = co_await native->perform(request("https://localhost:8443/", HttpVersion::http1_1, &missing_ca), bad);
      },
      asio::detached);
  io.run_for(std::chrono::seconds(5));
  CHECK(got.error == TransportError::tls);
  CHECK(got.error_message.starts_with("TLS: CA file or folder unusable"));
}

TEST_CASE("native tls: RPCROUTE_NATIVE_TLS=0 and the https proxy variables leave https to curl", "[transport][tls]") {
  asio::io_context io;
  for (const char* name : {"RPCROUTE_NATIVE_TLS", "https_proxy", "HTTPS_PROXY"}) {
    INFO(name);
    EnvVar off(name, std::string_view(name) == "RPCROUTE_NATIVE_TLS" ? "0" : "http://127.0.0.1:3128");
    auto native = std::make_shared<NativeHttp>(io);
    CHECK(native->target_for(request("https://localhost:8443/")) == nullptr);
    CHECK(native->target_for(request("http://127.0.0.1:8545/")) != nullptr);  // plain http is not proxied
  }
  EnvVar curl("RPCROUTE_HTTP_CLIENT", "curl");
  auto native = std::make_shared<NativeHttp>(io);
  CHECK(native->target_for(request("https://localhost:8443/")) == nullptr);
  CHECK(native->target_for(request("http://127.0.0.1:8545/")) == nullptr);
}

TEST_CASE("native tls: a host name is resolved when connecting; one that does not resolve is a dns failure",
          "[transport]") {
  asio::io_context io;
  detail::NameCache names;
  // LOCALHOST through the system's resolver (/etc/hosts), not the literal shortcut for localhost.
  auto named = *detail::parse_native_target("http://localhost:8545/");
  named.endpoints.clear();
  named.host = "LOCALHOST";
  named.key_host = "LOCALHOST:8545";
  auto unknown = named;
  unknown.host = "no-such-host.invalid";
  unknown.key_host = "no-such-host.invalid:8545";
  const auto req = request("http://unused/");
  std::vector<asio::ip::tcp::endpoint> found, cached, none;
  HttpResponse failed;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        detail::Transfer a(io, req, named);
        found = co_await names.resolve(a);
        cached = co_await names.resolve(a);
        (void)a.done();
        detail::Transfer b(io, req, unknown);
        none = co_await names.resolve(b);
        failed = b.done();
      },
      asio::detached);
  io.run_for(std::chrono::seconds(15));
  REQUIRE_FALSE(found.empty());
  CHECK(found == cached);
  bool loopback = false;
  for (const auto& e : found) loopback = loopback || (e.address().is_loopback() && e.port() == 8545);
  CHECK(loopback);
  CHECK(none.empty());
  CHECK((failed.error == TransportError::dns || failed.error == TransportError::timeout));
  if (failed.error == TransportError::dns) CHECK(failed.error_message == "Could not resolve host: no-such-host.invalid");
}

}  // namespace unit_native_tls_test
