#include "rpcroute/shared/codec.hpp"

#include <catch2/catch.hpp>

#include "rpcroute/shared/store.hpp"

using namespace rpcroute;
using namespace rpcroute::shared;

TEST_CASE("parse_redis_url reads host, port, database and credentials", "[shared]") {
  auto u = parse_redis_url("redis://app:s%40cret@10.0.0.5:6380/3");
  REQUIRE(u);
  CHECK(u->host == "10.0.0.5");
  CHECK(u->port == 6380);
  CHECK(u->db == 3);
  CHECK(u->user == "app");
  CHECK(u->password == "s@cret");
  CHECK_FALSE(u->tls);
  CHECK(display_url(*u) == "redis://10.0.0.5:6380/3");

  auto plain = parse_redis_url("redis://localhost");
  REQUIRE(plain);
  CHECK(plain->port == 6379);
  CHECK(plain->db == 0);
  CHECK(plain->password.empty());

  auto v6 = parse_redis_url("rediss://:pw@[::1]:7000/1");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->tls);
  CHECK(v6->password == "pw");
  CHECK(display_url(*v6) == "rediss://[::1]:7000/1");

  for (const char* bad : {"http://h:6379", "redis://", "redis://h:0", "redis://h:70000",
                          "redis://h:12x", "redis://h/db", "redis://[::1"}) {
    INFO(bad);
    auto r = parse_redis_url(bad);
    REQUIRE_FALSE(r);
    // An error never repeats the URL (it may hold a password).
    CHECK(r.error().message.find(bad) == std::string::npos);
  }
}

TEST_CASE("shared_options: the flag wins, secrets are collected, TLS is refused", "[shared]") {
  Profile p;
  p.shared_state.redis = "redis://u1:urlpass@h:6379/0";
  p.shared_state.password = "profilepass";
  p.shared_state.prefix = "team:";
  auto none = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  auto o = shared_options(p, "", none);
  REQUIRE(o);
  REQUIRE(*o);
  CHECK((*o)->url.password == "profilepass");
  CHECK((*o)->prefix == "team:");
  auto& secrets = (*o)->secrets;
  CHECK(std::find(secrets.begin(), secrets.end(), "profilepass") != secrets.end());
  CHECK(std::find(secrets.begin(), secrets.end(), "urlpass") != secrets.end());

  auto env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "RPCROUTE_REDIS_PASSWORD") return "envpass";
    return std::nullopt;
  };
  auto f = shared_options(p, "redis://127.0.0.1:7000", env);
  REQUIRE(f);
  REQUIRE(*f);
  CHECK((*f)->url.port == 7000);
  CHECK((*f)->url.password == "envpass");

  Profile off;
  auto n = shared_options(off, "", none);
  REQUIRE(n);
  CHECK_FALSE(*n);
  CHECK_FALSE(shared_options(off, "rediss://h", none));
}

TEST_CASE("shared keys live under the prefix, one per kind", "[shared]") {
  CHECK(provider_hash("rpcroute:", "p/c/a#f") == "rpcroute:p:p/c/a#f");
  CHECK(quota_hash("x:", "k") == "x:q:k");
  CHECK(chain_hash("x:", "p/c#1:ab") == "x:c:p/c#1:ab");
  CHECK(filter_string("x:", "k/0x1") == "x:f:k/0x1");
  CHECK(trial_string("x:", "k") == "x:trial:k");
  CHECK(channel("x:") == "x:ev");
  CHECK(quota_ttl_ms(Quota{10, 5}) == 60'000);
  CHECK(quota_ttl_ms(Quota{0.01, 100}) == 20'200'000);
}

TEST_CASE("breakers and heights round-trip through their text", "[shared]") {
  Breaker b;
  b.state = BreakerState::open;
  b.opened_ms = 1'700'000'000'123;
  b.recovery_ms = 30'500;
  b.reopens = 2;
  b.failures = 4;  // local: not shared
  Breaker back;
  REQUIRE(decode_breaker(encode_breaker(b), back));
  CHECK(back.state == BreakerState::open);
  CHECK(back.opened_ms == b.opened_ms);
  CHECK(back.recovery_ms == 30'500);
  CHECK(back.reopens == 2);
  CHECK(back.failures == 0);
  for (const char* bad : {"", "1 2 3", "3 0 0 0", "1 2 3 4 5", "x 1 2 3", "1 -2 3 4"}) {
    INFO(bad);
    CHECK_FALSE(decode_breaker(bad, back));
  }
  Height h{19'000'001, 1'700'000'000'000};
  Height hb;
  REQUIRE(decode_height(encode_height(h), hb));
  CHECK(hb.block == h.block);
  CHECK(hb.t_ms == h.t_ms);
  CHECK_FALSE(decode_height("12", hb));
  CHECK_FALSE(decode_height("12 -1", hb));
}

TEST_CASE("merge rules: newer breaker, later deadline, newer height", "[shared]") {
  Breaker local;
  local.failures = 3;
  std::int64_t known = 100;
  Breaker open;
  open.state = BreakerState::open;
  open.opened_ms = 150;
  open.recovery_ms = 1000;
  CHECK_FALSE(adopt_breaker(local, known, open, 100));  // not newer than what is known
  CHECK(local.state == BreakerState::closed);
  CHECK(adopt_breaker(local, known, open, 150));
  CHECK(local.state == BreakerState::open);
  CHECK(local.failures == 0);
  CHECK(known == 150);
  Breaker closed;
  CHECK_FALSE(adopt_breaker(local, known, closed, 120));  // an older close loses
  CHECK(local.state == BreakerState::open);

  std::int64_t rl = 500;
  CHECK_FALSE(adopt_rate_limit(rl, 400));
  CHECK(adopt_rate_limit(rl, 900));
  CHECK(rl == 900);

  Height h{100, 1000};
  CHECK_FALSE(adopt_height(h, Height{200, 900}));  // older, though higher
  CHECK(adopt_height(h, Height{99, 1100}));        // newer, though lower (a restarted node)
  CHECK(h.block == 99);
}

TEST_CASE("merge rules: the high-water mark only rises, but a reset generation replaces it",
          "[shared]") {
  Height mark{100, 1000};
  std::uint64_t gen = 0;
  CHECK_FALSE(adopt_high_water(mark, gen, Height{90, 2000}, 0));
  CHECK(mark.block == 100);
  CHECK(adopt_high_water(mark, gen, Height{120, 2000}, 0));
  CHECK(mark.block == 120);
  CHECK(adopt_high_water(mark, gen, Height{5, 3000}, 1));  // a host reset it: the chain restarted
  CHECK(mark.block == 5);
  CHECK(gen == 1);
  CHECK_FALSE(adopt_high_water(mark, gen, Height{120, 2000}, 0));  // from before the reset
  CHECK(mark.block == 5);
}

TEST_CASE("adopt_bucket takes off what was drawn since, never below -burst", "[shared]") {
  const Quota q{10, 5};
  auto b = adopt_bucket(3.5, 1000, 1, q);
  CHECK(b.tokens == Approx(2.5));
  CHECK(b.t_ms == 1000);
  CHECK(adopt_bucket(-4, 1000, 3, q).tokens == Approx(-5));
}

TEST_CASE("a cordon travels as ON UNTIL REASON, its reason cleaned on the way in", "[shared][cordon]") {
  Cordon c;
  c.t_ms = 5;
  c.on = true;
  c.until_ms = 1'700'000'600'000;
  c.reason = " disk swap";
  CHECK(encode_cordon(c) == "1 1700000600000  disk swap");
  Cordon back;
  REQUIRE(decode_cordon(encode_cordon(c), back));
  CHECK(back.on);
  CHECK(back.until_ms == c.until_ms);
  CHECK(back.reason == " disk swap");
  REQUIRE(decode_cordon("0 0", back));
  CHECK_FALSE(back.on);
  CHECK(back.reason.empty());
  REQUIRE(decode_cordon("1 0 evil\x1b[2J\nline", back));
  CHECK(back.reason == "evil[2Jline");
  for (const char* bad : {"", "2 0 x", "1", "1 -5 x", "1 0x", "x 0 y"}) {
    INFO(bad);
    CHECK_FALSE(decode_cordon(bad, back));
  }
}
