#include "dashboard.hpp"

#include <simdjson.h>

#include <catch2/catch.hpp>

#include "routes.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_dashboard_test {

using namespace rpcroute;
using namespace rpcroute::sidecar;

namespace {

CallOutcome outcome(std::string provider, std::vector<std::pair<std::string, OutcomeClass>> atts) {
  CallOutcome o;
  o.provider = std::move(provider);
  double ms = 10;
  for (auto& [p, cls] : atts) {
    AttemptRecord a;
    a.provider = p;
    a.result.cls = cls;
    a.result.outcome = cls == OutcomeClass::success ? Outcome::success : Outcome::timeout;
    a.latency_ms = ms;
    ms += 10;
    o.attempts.push_back(a);
  }
  return o;
}

}  // namespace

TEST_CASE("dashboard: the ring keeps the last N decisions and reuses its slots",
          "[sidecar][dashboard]") {
  DecisionRing ring(4);
  CHECK(ring.first_seq() == 1);
  CHECK(ring.next_seq() == 1);
  CHECK(ring.at(1) == nullptr);
  for (int i = 0; i < 6; ++i) ring.next().total_ms = static_cast<float>(i);
  CHECK(ring.next_seq() == 7);
  CHECK(ring.first_seq() == 3);  // 1 and 2 overwritten
  CHECK(ring.at(2) == nullptr);
  CHECK(ring.at(7) == nullptr);
  REQUIRE(ring.at(3) != nullptr);
  CHECK(ring.at(3)->seq == 3);
  CHECK(ring.at(3)->total_ms == 2.0f);
  CHECK(ring.at(6)->total_ms == 5.0f);
  const Decision* slot = ring.at(3);
  ring.next();  // seq 7 takes seq 3's slot
  CHECK(ring.at(7) == slot);
  CHECK(ring.at(3) == nullptr);
}

TEST_CASE("dashboard: names are cut and kept printable", "[sidecar][dashboard]") {
  ShortName<8> n;
  n.assign("eth_blockNumber");
  CHECK(n.view() == "eth_blo");
  n.assign("a\"b\n\x1b\xc3\xa9");
  CHECK(n.view() == "a\"b\n\x1b\xc3\xa9");  // copied as is ...
  CHECK(n.printable() == "a\"b????");       // ... shown printable
  n.assign("");
  CHECK(n.view().empty());
}

TEST_CASE("dashboard: a decision records attempts, capped, and writes valid JSON",
          "[sidecar][dashboard]") {
  Dashboard dash(8);
  auto o = outcome("c", {{"a", OutcomeClass::provider_failure},
                         {"b", OutcomeClass::rate_limited},
                         {"a", OutcomeClass::provider_failure},
                         {"d", OutcomeClass::provider_failure},
                         {"c", OutcomeClass::success}});
  o.response = "SECRET-BODY";
  dash.record("prof", "local", "eth_call", o, 1000, 55.5);
  const Decision* d = dash.ring().at(1);
  REQUIRE(d != nullptr);
  CHECK(d->attempt_count == 5);
  CHECK(d->attempts[1].provider.view() == "b");
  json::Writer w;
  write_decision_json(w, *d);
  const std::string text = w.str();
  CHECK(text.find("SECRET") == std::string::npos);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  REQUIRE(parser.parse(text).get(doc) == simdjson::SUCCESS);
  CHECK(std::string_view(doc["method"]) == "eth_call");
  CHECK(std::string_view(doc["provider"]) == "c");
  CHECK(int64_t(doc["attempt_count"]) == 5);
  CHECK(simdjson::dom::array(doc["attempts"]).size() == Decision::kMaxAttempts);
  CHECK(std::string_view(doc["attempts"].at(1)["class"]) == "rate_limited");
  CHECK(double(doc["total_ms"]) == Approx(55.5));
}

TEST_CASE("dashboard: a decision says which transport served it and each attempt",
          "[sidecar][dashboard]") {
  Dashboard dash(4);
  auto o = outcome("b", {{"a", OutcomeClass::provider_failure}, {"b", OutcomeClass::success}});
  o.attempts[0].transport = TransportKind::ws;  // a's WebSocket failed, b answered over HTTP
  dash.record("prof", "local", "eth_call", o, 1000, 3);
  o = outcome("a", {{"a", OutcomeClass::success}});
  o.attempts[0].transport = TransportKind::ws;
  o.transport = TransportKind::ws;
  dash.record("prof", "local", "eth_call", o, 1001, 2);
  dash.record("prof", "local", "eth_call", outcome("", {{"a", OutcomeClass::provider_failure}}),
              1002, 2);  // nobody answered
  dash.record_hit("prof", "local", "net_version", 1003, 1);
  simdjson::dom::parser parser;
  auto json_of = [&](std::uint64_t seq) {
    json::Writer w;
    write_decision_json(w, *dash.ring().at(seq));
    return w.str();
  };
  simdjson::dom::element doc;
  std::string text = json_of(1);
  REQUIRE(parser.parse(text).get(doc) == simdjson::SUCCESS);
  CHECK(std::string_view(doc["transport"]) == "http");
  CHECK(std::string_view(doc["attempts"].at(0)["transport"]) == "ws");
  CHECK(std::string_view(doc["attempts"].at(1)["transport"]) == "http");
  text = json_of(2);
  REQUIRE(parser.parse(text).get(doc) == simdjson::SUCCESS);
  CHECK(std::string_view(doc["transport"]) == "ws");
  for (const std::uint64_t seq :
       {std::uint64_t{3}, std::uint64_t{4}}) {  // no provider answered; the cache did
    text = json_of(seq);
    REQUIRE(parser.parse(text).get(doc) == simdjson::SUCCESS);
    CHECK(doc["transport"].is_null());
  }
}

TEST_CASE("dashboard: series and first-attempt counts only while watched", "[sidecar][dashboard]") {
  Dashboard dash(8);
  const std::int64_t t0 = 1'000'000;
  dash.record("p", "c", "eth_call", outcome("a", {{"a", OutcomeClass::success}}), t0, 1);
  CHECK(dash.chain_firsts("p", "c") == 0);  // nobody watches: the ring only
  CHECK(dash.ring().next_seq() == 2);
  dash.watched(t0);
  dash.record("p", "c", "eth_call",
              outcome("b", {{"a", OutcomeClass::provider_failure}, {"b", OutcomeClass::success}}),
              t0 + 1, 1);
  dash.record("p", "c", "eth_call", outcome("b", {{"b", OutcomeClass::success}}), t0 + 2, 1);
  CHECK(dash.chain_firsts("p", "c") == 2);
  CHECK(dash.traffic("p", "c", "a").first == 1);
  CHECK(dash.traffic("p", "c", "a").answered == 0);
  CHECK(dash.traffic("p", "c", "b").first == 1);
  CHECK(dash.traffic("p", "c", "b").attempts == 2);
  CHECK(dash.traffic("p", "c", "zz").attempts == 0);
  json::Writer w;
  dash.write_series_json(w, "p", "c", t0 + 3);
  // Only answered attempts make latency: b has a series, a (a failure) has none.
  CHECK(w.str().find("\"provider\":\"b\"") != std::string::npos);
  CHECK(w.str().find("\"provider\":\"a\"") == std::string::npos);
  // Past the watch: counting stops.
  dash.record("p", "c", "eth_call", outcome("b", {{"b", OutcomeClass::success}}),
              t0 + Dashboard::kWatchMs + 1, 1);
  CHECK(dash.chain_firsts("p", "c") == 2);
}

TEST_CASE("dashboard: the series are bounded in keys", "[sidecar][dashboard]") {
  Dashboard dash(4);
  dash.watched(0);
  for (std::size_t i = 0; i < Dashboard::kMaxSeries + 50; ++i)
    dash.record("p", "c", "m" + std::to_string(i), outcome("a", {{"a", OutcomeClass::success}}), 1,
                1);
  json::Writer w;
  dash.write_series_json(w, "p", "c", 2);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  REQUIRE(parser.parse(w.str()).get(doc) == simdjson::SUCCESS);
  CHECK(simdjson::dom::array(doc).size() == Dashboard::kMaxSeries);
}

TEST_CASE("dashboard: p50 and p90 per 10 s window over the last 5 minutes",
          "[sidecar][dashboard]") {
  LatencySeries s;
  const std::int64_t base = 100 * LatencySeries::kWindowMs;
  for (int i = 1; i <= 100; ++i) s.add(base + i, i);  // 1..100 ms in one window
  s.add(base + LatencySeries::kWindowMs, 500);        // the next window
  auto points = s.points(base + LatencySeries::kWindowMs + 5);
  REQUIRE(points.size() == 2);
  CHECK(points[0].start_ms == base);
  CHECK(points[0].count == 100);
  // Good to a bucket's width (×1.5).
  CHECK(points[0].p50_ms > 50 / 1.5);
  CHECK(points[0].p50_ms < 50 * 1.5);
  CHECK(points[0].p90_ms > 90 / 1.5);
  CHECK(points[0].p90_ms < 90 * 1.5);
  CHECK(points[0].p50_ms < points[0].p90_ms);
  CHECK(points[1].count == 1);
  CHECK(points[1].p50_ms > 500 / 1.5);
  // 5 minutes later the first window is gone; a window reused by a later time starts afresh.
  const std::int64_t later = base + LatencySeries::kWindows * LatencySeries::kWindowMs;
  CHECK(s.points(later).size() == 1);
  s.add(later, 2);
  points = s.points(later);
  REQUIRE(points.size() == 2);
  CHECK(points[1].count == 1);
  CHECK(points[1].p50_ms < 3);
  // Buckets: monotonic, everything lands somewhere.
  CHECK(LatencySeries::bucket_of(0) == 0);
  CHECK(LatencySeries::bucket_of(-1) == 0);
  CHECK(LatencySeries::bucket_of(1e9) == LatencySeries::kBuckets - 1);
  for (std::size_t i = 1; i + 1 < LatencySeries::kBuckets; ++i)
    CHECK(LatencySeries::bucket_of(LatencySeries::bucket_bound(i) * 0.99) == i);
}

TEST_CASE("dashboard: routes", "[sidecar][dashboard][routes]") {
  CHECK(parse_route("/dashboard").kind == RouteKind::dashboard_page);
  CHECK(parse_route("/dashboard/").kind == RouteKind::dashboard_page);
  CHECK(parse_route("/dashboard/state").kind == RouteKind::dashboard_state);
  CHECK(parse_route("/dashboard/events?x").kind == RouteKind::dashboard_events);
  CHECK(parse_route("/dashboard/other").kind == RouteKind::not_found);
  CHECK(parse_route("/").kind == RouteKind::rpc);  // GET / is the page; POST / stays JSON-RPC
}

}  // namespace unit_dashboard_test
