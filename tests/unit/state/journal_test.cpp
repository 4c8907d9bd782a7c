// The state journal (issue 17): record framing, torn and corrupt tails, generations, compaction,
// and the order readers apply snapshot and journal in.
#include "state/journal.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/temp_dir.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_journal_test {

using namespace rpcroute;
using rpcroute::test::read_file;
using rpcroute::test::TempDir;
using rpcroute::test::write_file;

namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
const std::string kKey = "prof/eth/alpha#0123456789ab";
const std::string kKey2 = "prof/eth/beta#ba9876543210";
const std::string kChain = "prof/eth#1:00000000";

HealthConfig odd_health() {
  HealthConfig h;
  h.circuit_breaker.failure_threshold = 3;
  h.circuit_breaker.recovery_timeout_ms = 1'234;
  h.circuit_breaker.max_recovery_timeout_ms = 98'765;
  h.circuit_breaker.success_threshold = 4;
  h.circuit_breaker.half_open_max_inflight = 2;
  h.circuit_breaker.jitter = 0.25;
  h.rate_limit_default_ms = 7'777;
  return h;
}

/// Changes that use every field a record carries.
PendingEvents rich_pending() {
  PendingEvents p;
  const auto h = odd_health();
  p.add(AttemptEvent{kKey, kNow, OutcomeClass::provider_failure, "HTTP 502 \"x\"", -1, 0.5}, h);
  p.add(AttemptEvent{kKey, kNow + 1, OutcomeClass::rate_limited, "429", 5'000, 0.125, true, true},
        h);
  p.add(SampleEvent{kKey, "eth_call", Sample{kNow, 1'234, Outcome::success}}, h);
  p.add(SampleEvent{kKey, "eth_call", Sample{kNow + 2, -5, Outcome::timeout}}, h);
  p.add(SampleEvent{kKey2, "eth_getLogs", Sample{kNow, 99, Outcome::out_of_memory}}, h);
  p.add(HeightEvent{kKey, Height{1ULL << 40, kNow}}, h);
  p.add(ProbeEvent{kKey, ProbeFindings{kNow, 31337, true, std::nullopt, false, "anvil/v1 \xff"}},
        h);
  p.add(QuotaEvent{kKey, kNow, 2.5, Quota{10, 20}}, h);
  p.add(LagEvent{kKey2, LagMark{kNow - 10, kNow, 42}}, h);
  p.add(ArchivalEvent{kKey2, ArchivalSeen{false, kNow}}, h);
  p.add(LogLimitEvent{kKey2, LogLimit{2'000, kNow}}, h);
  p.add(HighWaterEvent{kChain, Height{1'000, kNow}, true}, h);
  p.add(CursorEvent{kChain, 3}, h);
  p.add(FilterEvent{kChain + "/0xabc", FilterPin{"alpha", kNow}}, h);
  return p;
}

std::string replayed(const PendingEvents& p) {
  State s;
  p.replay(s);
  return serialize_state(s, kNow);
}

std::string journal_of(std::uint64_t gen, const std::vector<PendingEvents>& records) {
  std::string out = journal::header(gen);
  for (const auto& r : records) out += journal::record(gen, r);
  return out;
}

PendingEvents one_sample(const std::string& key, std::int64_t t_ms, std::int64_t latency_us) {
  PendingEvents p;
  p.add(SampleEvent{key, "eth_blockNumber", Sample{t_ms, latency_us, Outcome::success}},
        HealthConfig{});
  return p;
}

std::size_t samples_of(const State& s, const std::string& key) {
  auto it = s.providers.find(key);
  if (it == s.providers.end()) return 0;
  std::size_t n = 0;
  for (const auto& [m, d] : it->second.methods) n += d.size();
  return n;
}

std::uintmax_t size_or_zero(const std::filesystem::path& p) {
  std::error_code ec;
  auto n = std::filesystem::file_size(p, ec);
  return ec ? 0 : n;
}

std::filesystem::path journal_path(const std::filesystem::path& state) {
  auto j = state;
  j += ".journal";
  return j;
}

auto quiet() {
  return [](const std::string&) {};
}

}  // namespace

TEST_CASE("crc32c: the standard check value, and it continues across pieces", "[state][journal]") {
  CHECK(journal::crc32c("123456789") == 0xE3069283U);
  CHECK(journal::crc32c("") == 0);
  const std::string long_text(1000, 'x');
  CHECK(journal::crc32c(long_text.substr(300), journal::crc32c(long_text.substr(0, 300))) ==
        journal::crc32c(long_text));
}

TEST_CASE("journal record: every field round-trips", "[state][journal]") {
  const auto p = rich_pending();
  const auto back = journal::decode(journal::encode(p));
  REQUIRE(back.has_value());
  CHECK(replayed(*back) == replayed(p));
  CHECK(back->count == p.count);
  const auto& h = back->providers.at(kKey).health;
  const auto want = odd_health();
  CHECK(h.circuit_breaker.failure_threshold == want.circuit_breaker.failure_threshold);
  CHECK(h.circuit_breaker.recovery_timeout_ms == want.circuit_breaker.recovery_timeout_ms);
  CHECK(h.circuit_breaker.max_recovery_timeout_ms == want.circuit_breaker.max_recovery_timeout_ms);
  CHECK(h.circuit_breaker.success_threshold == want.circuit_breaker.success_threshold);
  CHECK(h.circuit_breaker.half_open_max_inflight == want.circuit_breaker.half_open_max_inflight);
  CHECK(h.circuit_breaker.jitter == want.circuit_breaker.jitter);
  CHECK(h.rate_limit_default_ms == want.rate_limit_default_ms);
  const auto& a = back->providers.at(kKey).attempts.back();
  CHECK((a.key == kKey && a.retry_after_ms == 5'000 && a.jitter == 0.125 && a.trip && a.trial));
  CHECK(back->providers.at(kKey).quota->key == kKey);
  CHECK(back->providers.at(kKey).probe->client_version == "anvil/v1 \xff");
  CHECK(back->high_water.at(kChain).reset);
  CHECK(back->providers.at(kKey2).log_limit->blocks == 2'000);

  // Empty changes too.
  CHECK(journal::decode(journal::encode(PendingEvents{})).has_value());
}

TEST_CASE("journal record: a payload cut short or changed does not decode", "[state][journal]") {
  const auto payload = journal::encode(rich_pending());
  for (std::size_t n = 0; n < payload.size(); ++n) {
    INFO("cut to " << n);
    CHECK_FALSE(journal::decode(payload.substr(0, n)).has_value());
  }
  CHECK_FALSE(journal::decode(payload + "x").has_value());
  // Whatever the bytes, decode answers (no crash, no huge allocation).
  std::string noise = payload;
  for (std::size_t i = 0; i < noise.size(); ++i) {
    auto flipped = noise;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x80);
    (void)journal::decode(flipped);
  }
  CHECK_FALSE(journal::decode(std::string(16, '\xff')).has_value());
}

TEST_CASE("journal scan: header and records in order", "[state][journal]") {
  const std::vector<PendingEvents> records = {one_sample(kKey, kNow, 1), rich_pending(),
                                              one_sample(kKey, kNow + 1, 2)};
  const auto bytes = journal_of(42, records);
  auto s = journal::scan(bytes, true);
  CHECK(s.header_ok);
  CHECK(s.generation == 42);
  CHECK(s.valid_end == bytes.size());
  CHECK_FALSE(s.torn);
  REQUIRE(s.records.size() == 3);
  CHECK(replayed(s.records[1]) == replayed(records[1]));
  // Without decoding: the same framing verdict.
  auto framing = journal::scan(bytes, false);
  CHECK(framing.valid_end == bytes.size());
  CHECK(framing.records.empty());

  // A header alone; nothing at all; something that is no header.
  CHECK(journal::scan(journal::header(7), true).valid_end == journal::kHeaderBytes);
  auto none = journal::scan("", true);
  CHECK((!none.header_ok && !none.torn && none.valid_end == 0));
  auto junk = journal::scan("{\"version\":1}", true);
  CHECK((!junk.header_ok && junk.torn));
}

TEST_CASE("journal scan: a torn tail record is ignored, and everything after a bad one",
          "[state][journal]") {
  const auto first = journal_of(9, {one_sample(kKey, kNow, 1)});
  const auto second = journal::record(9, one_sample(kKey, kNow + 1, 2));
  const auto whole = first + second;
  // Every cut inside the second record.
  for (std::size_t n = 1; n < second.size(); ++n) {
    INFO("second record cut to " << n << " bytes");
    auto s = journal::scan(whole.substr(0, first.size() + n), true);
    CHECK(s.records.size() == 1);
    CHECK(s.valid_end == first.size());
    CHECK(s.torn);
  }
  // A flipped bit anywhere in the first record: it and the second are ignored.
  for (std::size_t i = journal::kHeaderBytes; i < first.size(); ++i) {
    INFO("byte " << i << " flipped");
    auto bad = whole;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    auto s = journal::scan(bad, true);
    CHECK(s.records.empty());
    CHECK(s.valid_end == journal::kHeaderBytes);
  }
  // A bad header: nothing is read.
  auto bad_header = whole;
  bad_header[10] = static_cast<char>(bad_header[10] ^ 0x01);
  CHECK_FALSE(journal::scan(bad_header, true).header_ok);
  // Zeros after the records (a power loss on some filesystems): a torn tail, nothing more.
  auto zeros = journal::scan(whole + std::string(64, '\0'), true);
  CHECK((zeros.records.size() == 2 && zeros.torn && zeros.valid_end == whole.size()));
}

TEST_CASE("journal scan: a record counts only under the generation it was written for",
          "[state][journal]") {
  // A record of generation 5 behind a header of generation 6 fails its checksum.
  const auto bytes = journal::header(6) + journal::record(5, one_sample(kKey, kNow, 1));
  auto s = journal::scan(bytes, true);
  CHECK(s.header_ok);
  CHECK(s.records.empty());
  CHECK(s.torn);
}

TEST_CASE("serialize_state names the journal generation; parse_state reads it back",
          "[state][journal]") {
  State s;
  std::uint64_t gen = 1;
  REQUIRE(parse_state(serialize_state(s, kNow, 0xfedcba9876543210ULL), nullptr, &gen));
  CHECK(gen == 0xfedcba9876543210ULL);
  // None named (a file from before the journal, `state show --json`): 0.
  REQUIRE(parse_state(serialize_state(s, kNow), nullptr, &gen));
  CHECK(gen == 0);
  CHECK(serialize_state(s, kNow).find("journal") == std::string::npos);
  // One that does not read names no journal there can be (not 0, which the journal of a missing
  // or old snapshot uses).
  REQUIRE(parse_state(R"({"version":1,"journal":"xyz"})", nullptr, &gen));
  CHECK(gen == ~std::uint64_t{0});
}

// ---------------------------------------------------------------------------------------------------
// The store

TEST_CASE(
    "StateStore::append: one record in the journal, the snapshot untouched; readers apply both",
    "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "st/state.json";
  FakeClock clock(kNow);
  {
    StateStore seed(path, clock, quiet());
    seed.load();
    seed.record(SampleEvent{kKey, "eth_call", Sample{kNow - 10, 5, Outcome::success}}, {});
    REQUIRE(seed.save());
  }
  const auto snapshot = read_file(path);
  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);

  StateStore a(path, clock, quiet());
  a.load();
  a.record(SampleEvent{kKey, "eth_call", Sample{kNow, 6, Outcome::success}}, {});
  a.record(CursorEvent{kChain, 1}, {});
  REQUIRE(a.append());
  CHECK_FALSE(a.dirty());

  struct stat after {};
  REQUIRE(::stat(path.c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);  // not rewritten
  CHECK(read_file(path) == snapshot);
  struct stat js {};
  REQUIRE(::lstat(journal_path(path).c_str(), &js) == 0);
  CHECK(S_ISREG(js.st_mode));
  CHECK((js.st_mode & 0777) == 0600);

  StateStore reader(path, clock, quiet());
  REQUIRE(reader.load());
  CHECK(samples_of(reader.state(), kKey) == 2);
  CHECK(reader.state().chains.at(kChain).rr_cursor == 1);

  // A second append by the same store, and one by another: all three records, once each.
  a.record(SampleEvent{kKey, "eth_call", Sample{kNow + 1, 7, Outcome::success}}, {});
  REQUIRE(a.append());
  StateStore b(path, clock, quiet());
  b.load();
  b.record(CursorEvent{kChain, 1}, {});
  REQUIRE(b.append());
  StateStore again(path, clock, quiet());
  again.load();
  CHECK(samples_of(again.state(), kKey) == 3);
  CHECK(again.state().chains.at(kChain).rr_cursor == 2);
  // A full save folds the journal into the snapshot and removes it: still once each.
  again.record(CursorEvent{kChain, 1}, {});
  REQUIRE(again.save());
  CHECK_FALSE(std::filesystem::exists(journal_path(path)));
  auto parsed = parse_state(read_file(path));
  REQUIRE(parsed);
  CHECK(samples_of(*parsed, kKey) == 3);
  CHECK(parsed->chains.at(kChain).rr_cursor == 3);
}

TEST_CASE("StateStore: the first append writes the snapshot; an old snapshot takes appends",
          "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  for (int i = 0; i < 2; ++i) {
    StateStore w(path, clock, quiet());
    w.load();
    w.record(SampleEvent{kKey, "m_x", Sample{kNow + i, 1, Outcome::success}}, {});
    REQUIRE(w.append());
    // The first one: a snapshot (the state file exists after a first call), no journal; then a
    // journal.
    CHECK(std::filesystem::exists(path));
    CHECK(std::filesystem::exists(journal_path(path)) == (i == 1));
  }
  StateStore reader(path, clock, quiet());
  reader.load();
  CHECK(samples_of(reader.state(), kKey) == 2);

  // A snapshot of today's format (no "journal" key) loads as before and takes appends.
  TempDir dir2;
  const auto old_path = dir2 / "state.json";
  State s;
  s.providers[kKey].methods["m_x"].push_back(Sample{kNow - 5, 9, Outcome::success});
  write_file(old_path, serialize_state(s, kNow));
  StateStore w(old_path, clock, quiet());
  REQUIRE(w.load());
  CHECK(samples_of(w.state(), kKey) == 1);
  w.record(SampleEvent{kKey, "m_x", Sample{kNow, 1, Outcome::success}}, {});
  REQUIRE(w.append());
  StateStore r(old_path, clock, quiet());
  r.load();
  CHECK(samples_of(r.state(), kKey) == 2);
}

TEST_CASE("StateStore: records apply in order, after the snapshot", "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  {
    StateStore seed(path, clock, quiet());
    seed.load();
    seed.record(HighWaterEvent{kChain, Height{500, kNow - 100}}, {});
    REQUIRE(seed.save());
  }
  // A higher mark, then a reset to a lower one: only this order ends at the lower one.
  for (auto [block, reset] : {std::pair{900, false}, std::pair{100, true}}) {
    StateStore w(path, clock, quiet());
    w.load();
    w.record(HighWaterEvent{kChain, Height{static_cast<std::uint64_t>(block), kNow}, reset}, {});
    // Probe findings of the same moment: the later record wins.
    ProbeFindings found;
    found.t_ms = kNow;
    found.chain_id = static_cast<std::uint64_t>(block);
    w.record(ProbeEvent{kKey, found}, {});
    REQUIRE(w.append());
  }
  StateStore r(path, clock, quiet());
  r.load();
  CHECK(r.state().chains.at(kChain).high_water.block == 100);
  CHECK(r.state().providers.at(kKey).probe.chain_id == 100);
}

TEST_CASE("StateStore: a torn journal tail is ignored on load and cut by the next append",
          "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  for (int i = 0; i < 3; ++i) {  // a snapshot, then two records
    StateStore w(path, clock, quiet());
    w.load();
    w.record(SampleEvent{kKey, "eth_call", Sample{kNow + i, i, Outcome::success}}, {});
    REQUIRE(w.append());
  }
  const auto jpath = journal_path(path);
  const auto whole = read_file(jpath);
  write_file(jpath, whole.substr(0, whole.size() - 3));  // the second record torn
  std::vector<std::string> warnings;
  StateStore r(path, clock, [&](const std::string& m) { warnings.push_back(m); });
  REQUIRE(r.load());
  CHECK(samples_of(r.state(), kKey) == 2);
  CHECK(warnings.empty());
  r.record(SampleEvent{kKey, "eth_call", Sample{kNow + 5, 5, Outcome::success}}, {});
  REQUIRE(r.append());
  StateStore r2(path, clock, quiet());
  r2.load();
  CHECK(samples_of(r2.state(), kKey) == 3);  // the torn record cut, the new one after the good
  CHECK_FALSE(journal::scan(read_file(jpath), false).torn);
  // Nothing was moved aside.
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    CHECK(e.path().filename().string().find("corrupt") == std::string::npos);
}

TEST_CASE("StateStore: a stale journal (a crash after a compaction's rename) is never applied",
          "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  {
    StateStore seed(path, clock, quiet());
    seed.load();
    seed.record(CursorEvent{kChain, 1}, {});
    REQUIRE(seed.save());
  }
  {
    StateStore w(path, clock, quiet());
    w.load();
    w.record(CursorEvent{kChain, 10}, {});
    REQUIRE(w.append());
  }
  const auto jpath = journal_path(path);
  const auto old_journal = read_file(jpath);
  {
    StateStore compactor(path, clock, quiet());
    compactor.load();
    compactor.record(CursorEvent{kChain, 100}, {});
    REQUIRE(compactor.save());
  }
  // The compaction folded the journal in (1 + 10 + 100) and removed it; put it back as a crash
  // between the rename and the removal would have left it.
  CHECK_FALSE(std::filesystem::exists(jpath));
  write_file(jpath, old_journal);
  StateStore r(path, clock, quiet());
  r.load();
  CHECK(r.state().chains.at(kChain).rr_cursor == 111);
  // The next append restarts the journal under the snapshot's generation.
  r.record(CursorEvent{kChain, 1000}, {});
  REQUIRE(r.append());
  StateStore r2(path, clock, quiet());
  r2.load();
  CHECK(r2.state().chains.at(kChain).rr_cursor == 1111);
  // And a compaction does not take stale records either: with the stale journal put in place of
  // the current one (whose 1000 is thereby gone), only the snapshot's 111 and its own 10000 count.
  r2.record(CursorEvent{kChain, 10000}, {});
  write_file(jpath, old_journal);
  REQUIRE(r2.save());
  auto parsed = parse_state(read_file(path));
  REQUIRE(parsed);
  CHECK(parsed->chains.at(kChain).rr_cursor == 10111);
}

TEST_CASE("StateStore: another writer's compaction between load and append is noticed",
          "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  {
    StateStore seed(path, clock, quiet());
    seed.load();
    seed.record(CursorEvent{kChain, 1}, {});
    REQUIRE(seed.save());
  }
  StateStore a(path, clock, quiet());  // holds the snapshot it read
  a.load();
  {
    StateStore b(path, clock, quiet());
    b.load();
    b.record(CursorEvent{kChain, 1}, {});
    REQUIRE(b.append());
    b.record(CursorEvent{kChain, 1}, {});
    REQUIRE(b.save());  // a new snapshot generation, the journal gone
  }
  a.record(CursorEvent{kChain, 5}, {});
  REQUIRE(a.append());
  StateStore r(path, clock, quiet());
  r.load();
  CHECK(r.state().chains.at(kChain).rr_cursor == 8);
}

TEST_CASE("StateStore: the journal is compacted once an append would pass the bound",
          "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  const auto jpath = journal_path(path);
  FakeClock clock(kNow);
  int appends = 0;
  std::uintmax_t largest = 0;
  // One sample per append on a provider of its own (no cap evicts any), until the journal was
  // compacted twice.
  int compactions = 0;
  while (compactions < 2) {
    StateStore w(path, clock, quiet());
    w.load();
    const auto before = size_or_zero(jpath);
    w.record(SampleEvent{"prof/eth/p" + std::to_string(appends) + "#0", "eth_call",
                         Sample{kNow + appends, appends, Outcome::success}},
             {});
    w.record(CursorEvent{kChain, 1}, {});
    REQUIRE(w.append());
    ++appends;
    const auto now = size_or_zero(jpath);
    largest = std::max(largest, now);
    if (now < before) {
      ++compactions;
      // What would have passed the bound went into the snapshot instead.
      CHECK(now == 0);
      CHECK(before + 200 > kJournalCompactBytes - 200);
    }
    REQUIRE(appends < 10'000);
  }
  CHECK(largest <= kJournalCompactBytes);
  StateStore r(path, clock, quiet());
  r.load();
  CHECK(r.state().chains.at(kChain).rr_cursor == static_cast<std::uint64_t>(appends));
  std::size_t total = 0;
  for (const auto& [key, ps] : r.state().providers) total += samples_of(r.state(), key);
  CHECK(total == static_cast<std::size_t>(appends));
}

TEST_CASE("StateStore: a link or a folder at the journal path is refused; reset removes both files",
          "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  const auto jpath = journal_path(path);
  FakeClock clock(kNow);
  write_file(dir / "elsewhere", "x");
  std::filesystem::create_symlink(dir / "elsewhere", jpath);
  {
    StateStore s(path, clock, quiet());
    auto r = s.load();
    REQUIRE_FALSE(r);
    CHECK(r.error().exit == ExitCode::usage);
    CHECK(r.error().message.find("symbolic link") != std::string::npos);
  }
  std::filesystem::remove(jpath);
  std::filesystem::create_directory(jpath);
  {
    StateStore s(path, clock, quiet());
    CHECK_FALSE(s.load());
  }
  std::filesystem::remove(jpath);

  StateStore w(path, clock, quiet());
  w.load();
  w.record(CursorEvent{kChain, 1}, {});
  REQUIRE(w.save());
  w.record(CursorEvent{kChain, 1}, {});
  REQUIRE(w.append());
  REQUIRE(std::filesystem::exists(jpath));
  REQUIRE(w.reset());
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(jpath));
  StateStore r(path, clock, quiet());
  r.load();
  CHECK(r.state().chains.empty());
}

TEST_CASE(
    "StateStore: 8 processes appending while one compacts lose nothing and apply nothing twice",
    "[state][journal][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  constexpr int kWriters = 8;
  constexpr int kEach = 25;
  std::vector<pid_t> pids;
  for (int w = 0; w <= kWriters; ++w) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      FakeClock clock(kNow);
      bool ok = true;
      for (int i = 0; i < kEach; ++i) {
        StateStore s(path, clock, [](const std::string&) {});
        s.load();
        const auto key = "prof/eth/w" + std::to_string(w) + "#0";
        s.record(SampleEvent{key, "eth_call", Sample{kNow + i, i, Outcome::success}}, {});
        s.record(CursorEvent{kChain, 1}, {});
        // The last "writer" compacts every time, as a sidecar's flush does.
        ok = ok && (w == kWriters ? s.save().has_value() : s.append().has_value());
      }
      ::_exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (auto pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  FakeClock clock(kNow);
  StateStore r(path, clock, quiet());
  r.load();
  CHECK(r.state().chains.at(kChain).rr_cursor ==
        static_cast<std::uint64_t>((kWriters + 1) * kEach));
  for (int w = 0; w <= kWriters; ++w) {
    INFO("writer " << w);
    CHECK(samples_of(r.state(), "prof/eth/w" + std::to_string(w) + "#0") ==
          static_cast<std::size_t>(kEach));
  }
}

}  // namespace unit_journal_test
