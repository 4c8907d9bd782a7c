#include "rpcroute/shared/codec.hpp"

#include <catch2/catch.hpp>

#include "rpcroute/methods.hpp"
#include "rpcroute/metrics.hpp"
#include "rpcroute/shared/store.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_codec_test {

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

TEST_CASE("shared_options: the flag wins, secrets are collected, TLS settings apply", "[shared]") {
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
  // rediss://: the system store unless the profile's shared_state gives tls: settings.
  auto t = shared_options(off, "rediss://h", none);
  REQUIRE(t);
  REQUIRE(*t);
  CHECK((*t)->url.tls);
  CHECK((*t)->tls.empty());
  Profile with_tls;
  with_tls.shared_state.tls.ca_file = "/etc/redis/ca.pem";
  auto tt = shared_options(with_tls, "rediss://h:6380", none);
  REQUIRE(tt);
  REQUIRE(*tt);
  CHECK((*tt)->tls.ca_file == "/etc/redis/ca.pem");
  // A plain redis:// URL ignores them.
  auto plain = shared_options(with_tls, "redis://h", none);
  REQUIRE(plain);
  CHECK((*plain)->tls.empty());
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

TEST_CASE("merge rules: the newer log-range limit wins, at the same time the smaller", "[shared]") {
  LogLimit local;
  CHECK_FALSE(adopt_log_limit(local, LogLimit{0, 500}));  // none stated: nothing to adopt
  CHECK(adopt_log_limit(local, LogLimit{2000, 100}));
  CHECK(local.blocks == 2000);
  CHECK_FALSE(adopt_log_limit(local, LogLimit{500, 50}));  // older
  CHECK(local.blocks == 2000);
  CHECK(adopt_log_limit(local, LogLimit{10000, 200}));  // a provider may raise its limit
  CHECK(local.blocks == 10000);
  CHECK(local.t_ms == 200);
  CHECK(adopt_log_limit(local, LogLimit{1000, 200}));  // a tie: the smaller, on every host
  CHECK(local.blocks == 1000);
  CHECK_FALSE(adopt_log_limit(local, LogLimit{5000, 200}));
  CHECK(local.blocks == 1000);
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

TEST_CASE("lease sizes: a refresh interval of the host's own use, 1 at least, a fair share at most",
          "[shared][lease]") {
  const Quota q{200, 50};
  CHECK(lease_target(0, 250, q, 3) == 1);               // idle: one token at hand
  CHECK(lease_target(10, 250, q, 3) == 3);              // 2.5 a refresh, rounded up
  CHECK(lease_target(60, 250, q, 3) == 15);             // 15 a refresh
  CHECK(lease_target(1000, 250, q, 3) == 16);           // capped at burst / hosts
  CHECK(lease_target(1000, 250, q, 1) == 50);           // alone: the whole burst
  CHECK(lease_target(1000, 250, Quota{5, 2}, 3) == 1);  // burst under the hosts: 1 each
  CHECK(lease_target(-5, 250, q, 0) == 1);              // nonsense in: still a valid size
}

TEST_CASE("lease asks: below half of the size ask up to it, above it give whole tokens back",
          "[shared][lease]") {
  auto a = lease_ask(0, 1);
  CHECK(a.ask == 1);
  CHECK(a.give_back == 0);
  a = lease_ask(1, 1);  // holds its token: nothing to say
  CHECK(a.ask == 0);
  CHECK(a.give_back == 0);
  a = lease_ask(4, 10);  // under half: up to the size
  CHECK(a.ask == 6);
  a = lease_ask(6, 10);  // over half: enough for now
  CHECK(a.ask == 0);
  a = lease_ask(-2, 4);  // a batch overdrew it: the debt is asked for too
  CHECK(a.ask == 6);
  a = lease_ask(9, 3);  // its use fell
  CHECK(a.ask == 0);
  CHECK(a.give_back == 6);
  CHECK(lease_ask(3.5, 3).give_back == 0);  // less than a whole token above
}

TEST_CASE("the spend rate follows the host's use, halving the past each interval",
          "[shared][lease]") {
  double r = 0;
  r = spend_rate(r, 10, 0.25);  // 40/s now
  CHECK(r == Approx(20));
  r = spend_rate(r, 10, 0.25);
  CHECK(r == Approx(30));
  r = spend_rate(r, 0, 0.25);
  CHECK(r == Approx(15));
  CHECK(spend_rate(r, 5, 0) == Approx(15));  // no time passed: unchanged
}

TEST_CASE("a lease bucket holds its tokens without refill until it lapses, then refills",
          "[shared][lease]") {
  const Quota q{10, 5};
  const auto b = lease_bucket(2, 5'000, q);
  CHECK(bucket_level(b, q, 1'000) == Approx(2));  // no refill while the lease lasts
  CHECK(bucket_wait_ms(b, q, 1'000) == 0);
  const auto empty = lease_bucket(0, 5'000, q);
  CHECK(bucket_wait_ms(empty, q, 1'000) > 0);         // no token held: rate-limited here
  CHECK(bucket_level(empty, q, 5'300) == Approx(3));  // lapsed: the local bucket refills
  CHECK(lease_bucket(-9, 5'000, q).tokens == Approx(-5));
  CHECK(lease_bucket(9, 5'000, q).tokens == Approx(5));
  CHECK(lease_ttl_ms(250) == 1'000);
  CHECK(lease_ttl_ms(50) == 1'000);
  CHECK(lease_ttl_ms(1'000) == 4'000);
}

TEST_CASE("grant_lease: refill by elapsed time, grant whole tokens available, maybe 0",
          "[shared][lease]") {
  const Quota q{10, 5};
  Bucket shared;  // never drawn: full
  auto g = grant_lease(shared, 1'000, 0, 3, 0, q);
  CHECK(g.granted == 3);
  CHECK(g.level == Approx(2));
  CHECK(g.wait_ms == 0);
  g = grant_lease(shared, 1'000, 0, 3, 0, q);  // only 2 left
  CHECK(g.granted == 2);
  CHECK(g.level == Approx(0));
  CHECK(g.wait_ms == 100);
  g = grant_lease(shared, 1'050, 0, 1, 0, q);  // half a token: none granted
  CHECK(g.granted == 0);
  CHECK(g.level == Approx(0.5));
  CHECK(g.wait_ms == 50);
  g = grant_lease(shared, 900, 0, 1, 0, q);  // an earlier clock refills nothing
  CHECK(g.granted == 0);
  CHECK(shared.t_ms == 1'050);
  g = grant_lease(shared, 1'050, 0, 0, 3, q);  // given back, capped at burst
  CHECK(g.level == Approx(3.5));
  g = grant_lease(shared, 1'050, 20, 0, 0, q);  // spent outside a lease: floored at -burst
  CHECK(g.level == Approx(-5));
  CHECK(g.wait_ms == 600);
  g = grant_lease(shared, 60'000, 0, 100, 0, q);  // a long pause: full, never more than burst
  CHECK(g.granted == 5);
  // Many asks over a second never grant more than burst + rps × seconds.
  Bucket b;
  double total = 0;
  for (std::int64_t t = 0; t <= 1'000; t += 7)
    total += grant_lease(b, 10'000 + t, 0, 2, 0, q).granted;
  CHECK(total <= 5 + 10 * 1.0 + 1e-9);
  CHECK(total >= 14);
}

TEST_CASE("a cordon travels as ON UNTIL REASON, its reason cleaned on the way in",
          "[shared][cordon]") {
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

TEST_CASE("latency buckets: log scale, bounded, a middle within 19 % of what fell in", "[shared]") {
  CHECK(latency_bucket(0) == 0);
  CHECK(latency_bucket(99) == 0);
  CHECK(latency_bucket(100) == 1);
  CHECK(latency_bucket(141) == 1);
  CHECK(latency_bucket(142) == 2);
  CHECK(latency_bucket(std::int64_t{1} << 40) == kLatencyBuckets - 1);
  int last = 0;
  for (std::int64_t us = 100; us < 50'000'000; us = us * 11 / 10) {
    const int b = latency_bucket(us);
    CHECK(b >= last);  // monotonic
    last = b;
    const double ms = static_cast<double>(us) / 1000;
    CHECK(latency_bucket_ms(b) / ms < 1.19);
    CHECK(ms / latency_bucket_ms(b) < 1.19);
  }
}

TEST_CASE("latency fields: catalogue methods and 'other' only, buckets in range", "[shared]") {
  std::string_view method;
  int bucket = 0;
  CHECK(latency_field("eth_call", 7) == "eth_call:7");
  CHECK(latency_field("eth_call", -1) == "eth_call:x");
  REQUIRE(parse_latency_field("eth_call:7", method, bucket));
  CHECK(method == "eth_call");
  CHECK(bucket == 7);
  REQUIRE(parse_latency_field("other:x", method, bucket));
  CHECK(bucket == -1);
  CHECK_FALSE(parse_latency_field("eth_madeUp:3", method, bucket));  // not in the catalogue
  CHECK_FALSE(parse_latency_field("eth_call:40", method, bucket));
  CHECK_FALSE(parse_latency_field("eth_call:-2", method, bucket));
  CHECK_FALSE(parse_latency_field("eth_call:3x", method, bucket));
  CHECK_FALSE(parse_latency_field("eth_call", method, bucket));
  CHECK(catalogue_slot("eth_getBalance") == "eth_getBalance");
  CHECK(catalogue_slot("eth_madeUp") == kOtherMethod);
  CHECK(catalogue_slot(std::string(5000, 'x')) == kOtherMethod);
}

TEST_CASE("latency counts read back merge over windows into a median and a success rate",
          "[shared]") {
  LatencyCounts mine;
  for (std::int64_t us : {1'000, 1'100, 1'200, 40'000}) mine.add(Sample{10, us, Outcome::success});
  mine.add(Sample{20, 5'000'000, Outcome::timeout});
  CHECK(mine.failed == 1);
  CHECK(mine.newest_ms == 20);
  std::map<std::string, LatencyCounts, std::less<>> in;
  // Two windows of what all hosts wrote (as HGETALL gives it); junk is ignored.
  for (int i = 0; i < kLatencyBuckets; ++i) {
    if (mine.answered[static_cast<std::size_t>(i)] > 0)
      add_latency_count(in, latency_field("eth_call", i),
                        std::to_string(mine.answered[static_cast<std::size_t>(i)]), 1000);
  }
  add_latency_count(in, "eth_call:x", "1", 1000);
  add_latency_count(in, latency_field("eth_call", latency_bucket(1'050)), "2", 2000);
  add_latency_count(in, "eth_call:1", "-5", 2000);
  add_latency_count(in, "eth_call:1", "lots", 2000);
  add_latency_count(in, "evil_method:1", "9", 2000);
  add_latency_count(in, "eth_call:1", "99999999999999", 2000);  // beyond a count: ignored
  REQUIRE(in.size() == 1);
  const auto s = summarize_counts(in["eth_call"]);
  CHECK(s.calls == 7);
  CHECK(s.answered == 6);
  CHECK(s.p50_ms == Approx(latency_bucket_ms(latency_bucket(1'050))));
  CHECK(s.p50_ms > 0.85);
  CHECK(s.p50_ms < 1.3);
  CHECK(s.newest_ms == 2000);
  // Methods beyond kMaxMethodsPerProvider are not kept.
  std::map<std::string, LatencyCounts, std::less<>> many;
  for (const auto& m : method_catalogue())
    add_latency_count(many, latency_field(m.name, 3), "1", 1);
  CHECK(many.size() <= kMaxMethodsPerProvider);
  CHECK(summarize_counts(LatencyCounts{}).calls == 0);
}

TEST_CASE("with_prior: the shared summary ranks a host without samples; its own take over",
          "[shared]") {
  SharedLatency shared{100, 90, 20.0, 5000};
  // No samples of its own: min_calls pseudo-samples at the shared figures.
  const auto none = with_prior(LatencyStats{}, &shared, 3);
  CHECK(none.calls == 3);
  CHECK(none.prior == 3);
  CHECK(none.has_latency());
  CHECK(none.p50_ms == Approx(20.0));
  CHECK(none.success_rate == Approx(0.9));
  CHECK(none.newest_ms == 5000);
  // One sample of its own at 80 ms: blended, the prior worth two.
  LatencyStats one;
  one.calls = 1;
  one.answered = 1;
  one.p50_ms = 80;
  one.success_rate = 1;
  const auto blended = with_prior(one, &shared, 3);
  CHECK(blended.calls == 3);
  CHECK(blended.prior == 2);
  CHECK(blended.p50_ms == Approx((80.0 + 1.8 * 20.0) / 2.8));
  // Enough of its own: the shared summary does not count.
  LatencyStats enough = one;
  enough.calls = 3;
  enough.answered = 3;
  const auto own = with_prior(enough, &shared, 3);
  CHECK(own.prior == 0);
  CHECK(own.p50_ms == 80);
  // A thin summary weighs no more than its own count; none at all changes nothing.
  SharedLatency thin{1, 1, 5.0, 1};
  CHECK(with_prior(LatencyStats{}, &thin, 3).calls == 1);
  CHECK(with_prior(LatencyStats{}, nullptr, 3).calls == 0);
  SharedLatency failing{10, 0, 0, 1};
  const auto f = with_prior(LatencyStats{}, &failing, 3);
  CHECK_FALSE(f.has_latency());
  CHECK(f.success_rate == 0);
}

}  // namespace unit_codec_test
