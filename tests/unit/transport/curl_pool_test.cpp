// The curl client's handles per set-up (issue 17): configured once, reused, a new set-up when what
// a request asks of its handle differs.
#include "transport/curl_pool.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "rpcroute/transport.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_curl_pool_test {

using rpcroute::Header;
using rpcroute::detail::CurlSetupRef;
using rpcroute::detail::EasyPool;

namespace {

std::vector<std::string> lines_of(const curl_slist* l) {
  std::vector<std::string> out;
  for (; l != nullptr; l = l->next) out.emplace_back(l->data);
  return out;
}

}  // namespace

TEST_CASE("curl pool: a released handle is reused as it is, set up and its headers built once",
          "[transport]") {
  rpcroute::init_curl();
  int configured = 0;
  EasyPool pool([&](CURL*) { ++configured; });
  const std::vector<Header> headers{{"Authorization", "Bearer k"}};
  const CurlSetupRef want{CURL_HTTP_VERSION_2TLS, headers};

  auto a = pool.acquire(want);
  REQUIRE(a.easy != nullptr);
  CURL* const first = a.easy.get();
  const curl_slist* const list = a.setup->header_list.get();
  CHECK(lines_of(list) == std::vector<std::string>{
                              "Content-Type: application/json", "Accept: application/json",
                              "Accept-Encoding: identity", "Expect:", "Authorization: Bearer k"});
  pool.release(std::move(a));

  for (int i = 0; i < 3; ++i) {
    auto b = pool.acquire(want);
    CHECK(b.easy.get() == first);
    CHECK(b.setup->header_list.get() == list);
    pool.release(std::move(b));
  }
  CHECK(configured == 1);
  CHECK(pool.handles_made() == 1);
  CHECK(pool.header_lists_built() == 1);
  CHECK(pool.setups() == 1);

  // Two at once: a second handle, same set-up.
  auto c = pool.acquire(want);
  auto d = pool.acquire(want);
  CHECK(c.easy.get() != d.easy.get());
  CHECK(c.setup == d.setup);
  CHECK(pool.handles_made() == 2);
  CHECK(configured == 2);
  pool.release(std::move(c));
  pool.release(std::move(d));
}

TEST_CASE(
    "curl pool: other headers or another HTTP version are another set-up; equal content is the "
    "same",
    "[transport]") {
  rpcroute::init_curl();
  EasyPool pool(nullptr);
  const std::vector<Header> none;
  const std::vector<Header> key_a{{"X-Api-Key", "a"}};
  const std::vector<Header> key_b{{"X-Api-Key", "b"}};
  const std::vector<Header> key_a_copy = key_a;  // another vector, same content

  auto plain = pool.acquire({CURL_HTTP_VERSION_2TLS, none});
  auto a = pool.acquire({CURL_HTTP_VERSION_2TLS, key_a});
  auto b = pool.acquire({CURL_HTTP_VERSION_2TLS, key_b});
  auto h1 = pool.acquire({CURL_HTTP_VERSION_1_1, key_a});
  CHECK(pool.setups() == 4);
  CHECK(pool.header_lists_built() == 4);
  CHECK(lines_of(b.setup->header_list.get()).back() == "X-Api-Key: b");
  CHECK(lines_of(plain.setup->header_list.get()).size() == 4);
  CHECK(h1.setup->http_version == CURL_HTTP_VERSION_1_1);
  CURL* const a_easy = a.easy.get();
  for (auto* l : {&plain, &a, &b, &h1}) pool.release(std::move(*l));

  auto again = pool.acquire({CURL_HTTP_VERSION_2TLS, key_a_copy});
  CHECK(again.easy.get() == a_easy);
  CHECK(pool.setups() == 4);
  CHECK(pool.header_lists_built() == 4);
  pool.release(std::move(again));
}

TEST_CASE("curl pool: idle handles are bounded per set-up, set-ups in all", "[transport]") {
  rpcroute::init_curl();
  EasyPool pool(nullptr);
  const std::vector<Header> none;
  std::vector<EasyPool::Lease> out;
  for (std::size_t i = 0; i < EasyPool::kIdlePerSetup + 3; ++i)
    out.push_back(pool.acquire({CURL_HTTP_VERSION_2TLS, none}));
  for (auto& l : out) pool.release(std::move(l));
  out.clear();
  const auto made = pool.handles_made();
  for (std::size_t i = 0; i < EasyPool::kIdlePerSetup + 1; ++i)
    out.push_back(pool.acquire({CURL_HTTP_VERSION_2TLS, none}));
  CHECK(pool.handles_made() == made + 1);  // only kIdlePerSetup were kept

  // A set-up a lease holds is never dropped; the others make room, least recently used first.
  std::vector<std::vector<Header>> many;
  for (std::size_t i = 0; i < EasyPool::kMaxSetups + 5; ++i)
    many.push_back({{"X-N", std::to_string(i)}});
  EasyPool::Setup* const live = out.front().setup;
  for (const auto& h : many) pool.release(pool.acquire({CURL_HTTP_VERSION_2TLS, h}));
  CHECK(pool.setups() == EasyPool::kMaxSetups);
  const auto built = pool.header_lists_built();
  auto held = pool.acquire({CURL_HTTP_VERSION_2TLS, none});
  CHECK(held.setup == live);
  auto recent = pool.acquire({CURL_HTTP_VERSION_2TLS, many.back()});
  CHECK(pool.header_lists_built() == built);  // the most recent set-ups were kept
  auto oldest = pool.acquire({CURL_HTTP_VERSION_2TLS, many.front()});
  CHECK(pool.header_lists_built() == built + 1);  // the oldest was dropped, built again
  for (auto* l : {&held, &recent, &oldest}) pool.release(std::move(*l));
  for (auto& l : out) pool.release(std::move(l));
  pool.clear();
  CHECK(pool.setups() == 0);
}

TEST_CASE("curl pool: other tls: settings are another set-up, kept with it", "[transport]") {
  rpcroute::init_curl();
  EasyPool pool(nullptr);
  const std::vector<Header> none;
  rpcroute::TlsOptions ca;
  ca.ca_file = "/nonexistent/ca.pem";  // curl reads it only when it connects
  rpcroute::TlsOptions insecure;
  insecure.insecure = true;
  const rpcroute::TlsOptions ca_copy = ca;
  const rpcroute::TlsOptions defaults;

  auto plain = pool.acquire({CURL_HTTP_VERSION_2TLS, none, nullptr});
  auto with_ca = pool.acquire({CURL_HTTP_VERSION_2TLS, none, &ca});
  auto open = pool.acquire({CURL_HTTP_VERSION_2TLS, none, &insecure});
  CHECK(pool.setups() == 3);
  CHECK(with_ca.setup->tls.ca_file == "/nonexistent/ca.pem");
  CHECK(open.setup->tls.insecure);
  CURL* const ca_easy = with_ca.easy.get();
  EasyPool::Setup* const plain_setup = plain.setup;
  for (auto* l : {&plain, &with_ca, &open}) pool.release(std::move(*l));

  auto again = pool.acquire({CURL_HTTP_VERSION_2TLS, none, &ca_copy});
  CHECK(again.easy.get() == ca_easy);
  auto empty = pool.acquire({CURL_HTTP_VERSION_2TLS, none, &defaults});
  CHECK(empty.setup == plain_setup);  // empty tls: settings are no settings
  CHECK(pool.setups() == 3);
  pool.release(std::move(again));
  pool.release(std::move(empty));
}

}  // namespace unit_curl_pool_test
