// The state: recording what one exchange taught (what the router does after every attempt),
// serialising and parsing a state of N providers (3 methods x 100 samples each), the in-memory
// merge a save does (parse the file, replay this process's changes, serialise), and the whole
// save (lock, read, merge, write, fsync, rename).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fixtures.hpp"
#include "rpcroute/state.hpp"

namespace {

using namespace rpcroute;

struct StateWorld {
  explicit StateWorld(int n) : profile(perf::profile_with(n)), state(perf::state_for(profile)) {
    for (const auto& p : profile.chains.front().providers) {
      keys.push_back(provider_key(profile.name, profile.chains.front().name, p));
    }
  }
  Profile profile;
  State state;
  std::vector<std::string> keys;
};

/// One exchange's events (an attempt and a sample) through StateStore::record, which applies them
/// and keeps them as bounded pending changes for the next save.
void BM_state_record(benchmark::State& st) {
  StateWorld w(static_cast<int>(st.range(0)));
  FakeClock clock(perf::kNowMs);
  StateStore store(std::filesystem::path("/nonexistent/rpcroute-bench/state.json"), clock, [](const std::string&) {});
  store.state() = w.state;
  std::size_t i = 0;
  std::int64_t t = perf::kNowMs;
  for (auto _ : st) {
    const auto& key = w.keys[i++ % w.keys.size()];
    ++t;
    store.record(AttemptEvent{key, t, OutcomeClass::success, "success", -1, 0.5}, w.profile.health);
    store.record(SampleEvent{key, "eth_call", Sample{t, 23'456, Outcome::success}}, w.profile.health);
  }
}
BENCHMARK(BM_state_record)->Name("state/record_exchange")->Arg(16);

void BM_state_serialize(benchmark::State& st) {
  StateWorld w(static_cast<int>(st.range(0)));
  std::size_t bytes = 0;
  for (auto _ : st) {
    auto text = serialize_state(w.state, perf::kNowMs);
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * bytes));
  st.SetLabel(std::to_string(bytes / 1024) + " KiB");
}
BENCHMARK(BM_state_serialize)->Name("state/serialize")->Arg(4)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

void BM_state_parse(benchmark::State& st) {
  StateWorld w(static_cast<int>(st.range(0)));
  const auto text = serialize_state(w.state, perf::kNowMs);
  for (auto _ : st) {
    auto parsed = parse_state(text);
    if (!parsed) {
      st.SkipWithError("parse_state failed");
      break;
    }
    benchmark::DoNotOptimize(parsed);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * text.size()));
  st.SetLabel(std::to_string(text.size() / 1024) + " KiB");
}
BENCHMARK(BM_state_parse)->Name("state/parse")->Arg(4)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

/// Five seconds of sidecar traffic per provider as pending events (one attempt + one sample per
/// call, 10 calls per provider).
std::vector<Event> pending_events(const StateWorld& w) {
  std::vector<Event> events;
  for (const auto& key : w.keys) {
    for (int c = 0; c < 10; ++c) {
      std::int64_t t = perf::kNowMs + 1 + c * 500;
      events.emplace_back(AttemptEvent{key, t, OutcomeClass::success, "success", -1, 0.5});
      events.emplace_back(SampleEvent{key, "eth_call", Sample{t, 21'000 + c * 100, Outcome::success}});
    }
  }
  return events;
}

/// What StateStore::save does in memory: parse what the file holds, replay this process's events
/// onto it, prune, serialise. (The replay itself is private to StateStore; apply_event is what it
/// runs per event.)
void BM_state_merge(benchmark::State& st) {
  StateWorld w(static_cast<int>(st.range(0)));
  const auto file_text = serialize_state(w.state, perf::kNowMs);
  const auto events = pending_events(w);
  for (auto _ : st) {
    auto merged = parse_state(file_text);
    if (!merged) {
      st.SkipWithError("parse_state failed");
      break;
    }
    for (const auto& e : events) apply_event(*merged, e, w.profile.health);
    prune(*merged, perf::kNowMs + 5'000);
    auto text = serialize_state(*merged, perf::kNowMs + 5'000);
    benchmark::DoNotOptimize(text);
  }
  st.SetLabel(std::to_string(events.size()) + " events onto " + std::to_string(file_text.size() / 1024) + " KiB");
}
BENCHMARK(BM_state_merge)->Name("state/merge_in_memory")->Arg(4)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

/// The whole StateStore::save of a sidecar's periodic flush: lock, re-read, merge, write, fsync,
/// rename, in a temporary directory ($TMPDIR, else /tmp; the filesystem decides what fsync costs).
void BM_state_save(benchmark::State& st) {
  StateWorld w(static_cast<int>(st.range(0)));
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/rpcroute-micro.XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    st.SkipWithError("mkdtemp failed");
    return;
  }
  const std::filesystem::path dir = templ;
  const auto path = dir / "state.json";
  std::ofstream(path) << serialize_state(w.state, perf::kNowMs);
  FakeClock clock(perf::kNowMs);
  StateStore store(path, clock, [](const std::string&) {});
  store.load();
  const auto events = pending_events(w);
  for (auto _ : st) {
    st.PauseTiming();
    for (const auto& e : events) store.record(e, w.profile.health);
    st.ResumeTiming();
    if (auto r = store.save(); !r) {
      st.SkipWithError(r.error().message.c_str());
      break;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
BENCHMARK(BM_state_save)->Name("state/save")->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
