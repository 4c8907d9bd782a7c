// Cordons (issue 21): the merge rule (the newest word wins, in any order of replay), the operator's
// reason as stored, the journal and JSON forms, and a long-running store folding in what another
// process wrote (StateStore::refresh, what the sidecar's timer calls).
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "../support/temp_dir.hpp"
#include "rpcroute/state.hpp"
#include "state/journal.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_cordon_test {

using namespace rpcroute;
using rpcroute::test::TempDir;

namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
const std::string kKey = "prof/eth/alpha#0123456789ab";

Cordon cordon(std::int64_t t_ms, bool on, std::int64_t until_ms = 0, std::string reason = "") {
  Cordon c;
  c.t_ms = t_ms;
  c.on = on;
  c.until_ms = until_ms;
  c.reason = std::move(reason);
  return c;
}

const Cordon& cordon_of(const StateStore& store) {
  static const Cordon none;
  const auto* ps = store.provider(kKey);
  return ps == nullptr ? none : ps->cordon;
}

}  // namespace

TEST_CASE("cordon: the newest word wins, whatever order the events are applied in", "[cordon]") {
  const Cordon set = cordon(kNow, true, 0, "disk full");
  const Cordon lifted = cordon(kNow + 5, false);
  for (bool lift_first : {false, true}) {
    State s;
    apply_event(s, CordonEvent{kKey, lift_first ? lifted : set}, {});
    apply_event(s, CordonEvent{kKey, lift_first ? set : lifted}, {});
    INFO(lift_first);
    CHECK_FALSE(s.providers[kKey].cordon.active(kNow + 10));
    CHECK(s.providers[kKey].cordon.t_ms == kNow + 5);
  }
  // The same millisecond: the cordon wins (a total order, so every merge agrees).
  CHECK(newer_cordon(cordon(kNow, true), cordon(kNow, false)));
  CHECK_FALSE(newer_cordon(cordon(kNow, false), cordon(kNow, true)));
  CHECK(newer_cordon(cordon(kNow, true, kNow + 2), cordon(kNow, true, kNow + 1)));
  CHECK(newer_cordon(cordon(kNow, true, 0, "b"), cordon(kNow, true, 0, "a")));
  CHECK_FALSE(newer_cordon(cordon(kNow, true, 0, "a"), cordon(kNow, true, 0, "a")));
}

TEST_CASE("cordon: active until its expiry, and kept by prune while active", "[cordon]") {
  State s;
  apply_event(s, CordonEvent{kKey, cordon(kNow, true, kNow + 60'000, "upgrade")}, {});
  CHECK(s.providers[kKey].cordon.active(kNow + 59'999));
  CHECK_FALSE(s.providers[kKey].cordon.active(kNow + 60'000));
  // A provider never used would be pruned at once; an active cordon keeps it (and its cordon).
  State forever;
  apply_event(forever, CordonEvent{kKey, cordon(kNow, true)}, {});
  prune(forever, kNow + kProviderRetentionMs + 1);
  REQUIRE(forever.providers.count(kKey) == 1);
  CHECK(forever.providers[kKey].cordon.active(kNow + kProviderRetentionMs + 1));
  // Lifted: remembered a day against late replays, then forgotten.
  State lifted;
  apply_event(lifted, CordonEvent{kKey, cordon(kNow, false)}, {});
  lifted.providers[kKey].last_used_ms = kNow + kCordonMemoryMs + 10;
  prune(lifted, kNow + 1000);
  CHECK(lifted.providers[kKey].cordon.t_ms == kNow);
  prune(lifted, kNow + kCordonMemoryMs + 1);
  CHECK(lifted.providers[kKey].cordon.t_ms == 0);
}

TEST_CASE("cordon: a reason loses control characters and is cut at 200 bytes on a boundary",
          "[cordon]") {
  CHECK(clean_cordon_reason("disk\nfull\x1b[2J\t!\x7f") == "diskfull[2J!");
  CHECK(clean_cordon_reason("a\xc2\x85" "b\xc2\xa0" "c") == "ab\xc2\xa0" "c");  // C1 NEL goes, NBSP stays
  CHECK(clean_cordon_reason("bad \xff byte") == "bad \xef\xbf\xbd byte");
  const std::string euros(100, 'x');
  std::string long_reason = std::string(199, 'r') + "\xe2\x82\xac" + euros;
  const auto cut = clean_cordon_reason(long_reason);
  CHECK(cut == std::string(199, 'r'));  // the euro sign would pass 200 bytes: cut before it
  CHECK(clean_cordon_reason(std::string(500, 'z')).size() == kMaxCordonReasonBytes);
  // Whatever a file or journal holds is cleaned when applied.
  State s;
  apply_event(s, CordonEvent{kKey, cordon(kNow, true, 0, "evil\r\nline")}, {});
  CHECK(s.providers[kKey].cordon.reason == "evilline");
}

TEST_CASE("cordon: the journal and the JSON file keep every field", "[cordon]") {
  PendingEvents p;
  p.add(CordonEvent{kKey, cordon(kNow, true, kNow + 600'000, "maintenance")}, {});
  p.add(CordonEvent{kKey, cordon(kNow - 5, false)}, {});  // older: the newer stays
  const auto decoded = journal::decode(journal::encode(p));
  REQUIRE(decoded);
  REQUIRE(decoded->providers.count(kKey) == 1);
  const auto& c = *decoded->providers.at(kKey).cordon;
  CHECK(c.t_ms == kNow);
  CHECK(c.on);
  CHECK(c.until_ms == kNow + 600'000);
  CHECK(c.reason == "maintenance");

  State s;
  p.replay(s);
  auto parsed = parse_state(serialize_state(s, kNow));
  REQUIRE(parsed);
  const auto& back = parsed->providers.at(kKey).cordon;
  CHECK(back.t_ms == kNow);
  CHECK(back.on);
  CHECK(back.until_ms == kNow + 600'000);
  CHECK(back.reason == "maintenance");
}

TEST_CASE("cordon: set in one process and lifted in another, the later wins in the file",
          "[cordon][state]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  auto warn = [](const std::string&) {};
  // Appended in the opposite order of their times: the lift (later) first, the cordon after.
  {
    StateStore first(path, clock, warn);
    REQUIRE(first.load());
    first.record(SampleEvent{kKey, "eth_call", Sample{kNow, 1000, Outcome::success}}, {});
    REQUIRE(first.save());  // a snapshot, so that what follows goes to the journal
  }
  for (const auto& c : {cordon(kNow + 20, false), cordon(kNow + 10, true, 0, "late replay")}) {
    StateStore cli(path, clock, warn);
    REQUIRE(cli.load());
    cli.record(CordonEvent{kKey, c}, {});
    REQUIRE(cli.append());
  }
  StateStore reader(path, clock, warn);
  REQUIRE(reader.load());
  CHECK(cordon_of(reader).t_ms == kNow + 20);
  CHECK_FALSE(cordon_of(reader).on);
  // And after a compaction folds the journal into the snapshot.
  reader.record(SampleEvent{kKey, "eth_call", Sample{kNow + 30, 1000, Outcome::success}}, {});
  REQUIRE(reader.save());
  StateStore after(path, clock, warn);
  REQUIRE(after.load());
  CHECK(cordon_of(after).t_ms == kNow + 20);
  CHECK_FALSE(cordon_of(after).on);
}

TEST_CASE("StateStore::refresh: a running store sees what another process appended or compacted",
          "[cordon][state]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  auto warn = [](const std::string&) {};
  StateStore sidecar(path, clock, warn);
  REQUIRE(sidecar.load());
  sidecar.record(SampleEvent{kKey, "eth_call", Sample{kNow, 1000, Outcome::success}}, {});
  REQUIRE(sidecar.save());
  CHECK_FALSE(*sidecar.refresh());  // nothing changed: nothing read

  // Its own learning not yet saved must survive every refresh.
  sidecar.record(SampleEvent{kKey, "eth_call", Sample{kNow + 1, 2000, Outcome::success}}, {});
  {
    StateStore cli(path, clock, warn);
    REQUIRE(cli.load());
    cli.record(CordonEvent{kKey, cordon(kNow + 2, true, 0, "disk")}, {});
    REQUIRE(cli.append());  // one journal record
  }
  CHECK(*sidecar.refresh());
  CHECK(cordon_of(sidecar).active(kNow + 3));
  CHECK(cordon_of(sidecar).reason == "disk");
  CHECK_FALSE(*sidecar.refresh());  // the same journal: not applied twice
  CHECK(sidecar.state().providers.at(kKey).methods.at("eth_call").size() == 2);

  {  // A second record on the same journal: only it is new.
    StateStore cli(path, clock, warn);
    REQUIRE(cli.load());
    cli.record(SampleEvent{kKey, "eth_call", Sample{kNow + 3, 3000, Outcome::success}}, {});
    REQUIRE(cli.append());
  }
  CHECK(*sidecar.refresh());
  CHECK(sidecar.state().providers.at(kKey).methods.at("eth_call").size() == 3);

  {  // Another process compacts (a new snapshot) with the lift in it.
    StateStore other(path, clock, warn);
    REQUIRE(other.load());
    other.record(CordonEvent{kKey, cordon(kNow + 4, false)}, {});
    REQUIRE(other.save());
  }
  CHECK(*sidecar.refresh());
  CHECK_FALSE(cordon_of(sidecar).active(kNow + 5));
  // The file's samples (2) and the pending one (1), each once.
  CHECK(sidecar.state().providers.at(kKey).methods.at("eth_call").size() == 3);
  REQUIRE(sidecar.save());
  StateStore last(path, clock, warn);
  REQUIRE(last.load());
  CHECK(last.state().providers.at(kKey).methods.at("eth_call").size() == 3);
  CHECK_FALSE(cordon_of(last).active(kNow + 5));
}

}  // namespace unit_cordon_test
