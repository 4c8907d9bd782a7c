#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "rpcroute/json.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute {

std::string_view breaker_state_name(BreakerState s) {
  switch (s) {
    case BreakerState::closed: return "closed";
    case BreakerState::open: return "open";
    case BreakerState::half_open: return "half_open";
  }
  return "?";
}

BreakerState Breaker::effective_state(std::int64_t now_ms) const {
  if (state == BreakerState::open && now_ms >= opened_ms + recovery_ms) return BreakerState::half_open;
  return state;
}

std::int64_t Breaker::retry_in_ms(std::int64_t now_ms) const {
  if (state != BreakerState::open) return 0;
  return std::max<std::int64_t>(0, opened_ms + recovery_ms - now_ms);
}

// Keys are built on every routed call: appends, not a format string.
void provider_key_into(std::string& out, std::string_view profile, std::string_view chain, const Provider& p) {
  out.clear();
  out.reserve(profile.size() + chain.size() + p.id.size() + p.fingerprint.size() + 3);
  out.append(profile);
  out.push_back('/');
  out.append(chain);
  out.push_back('/');
  out.append(p.id);
  out.push_back('#');
  out.append(p.fingerprint);
}
std::string provider_key(std::string_view profile, std::string_view chain, const Provider& p) {
  std::string out;
  provider_key_into(out, profile, chain, p);
  return out;
}
std::string chain_key(std::string_view profile, const Chain& chain) {
  // The file stem and chain name are labels (two projects' local.yaml share them); the chain id and
  // the digest of the providers' URL fingerprints say which chain this is, seen through which nodes.
  std::vector<std::string_view> prints;
  prints.reserve(chain.providers.size());
  for (const auto& p : chain.providers) prints.push_back(p.fingerprint);
  std::sort(prints.begin(), prints.end());
  std::string joined;
  for (auto f : prints) {
    joined.append(f);
    joined.push_back(',');
  }
  return fmt::format("{}/{}#{}:{}", profile, chain.name, chain.chain_id, url_fingerprint(joined));
}
std::string filter_key(std::string_view profile, const Chain& chain, std::string_view filter_id) {
  std::string id(filter_id);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  return fmt::format("{}/{}", chain_key(profile, chain), id);
}

bool known_shaped_method(std::string_view method) {
  // namespace: [a-z][a-z0-9]*, then '_', then [A-Za-z0-9_]+.
  if (method.empty() || method.size() > kMaxMethodNameBytes) return false;
  auto lower = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  auto word = [&](char c) { return lower(c) || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (method[0] < 'a' || method[0] > 'z') return false;
  std::size_t i = 1;
  while (i < method.size() && lower(method[i])) ++i;
  if (i + 1 >= method.size() || method[i] != '_') return false;
  return std::all_of(method.begin() + static_cast<std::ptrdiff_t>(i) + 1, method.end(), word);
}

std::string_view method_slot(const std::map<std::string, std::deque<Sample>, std::less<>>& methods,
                             std::string_view method) {
  if (!known_shaped_method(method)) return kOtherMethod;
  if (methods.size() < kMaxMethodsPerProvider || methods.find(method) != methods.end()) return method;
  return kOtherMethod;
}

namespace {

/// Length of the valid UTF-8 sequence at `i`, 0 when the byte there does not start one (RFC 3629:
/// no overlong forms, no surrogates, nothing above U+10FFFF; what simdjson accepts).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

bool is_utf8(std::string_view s) { return simdjson::validate_utf8(s.data(), s.size()); }

/// At most kMaxTextBytes of `s`, cut at a character boundary.
std::string_view clip(std::string_view s) {
  if (s.size() <= kMaxTextBytes) return s;
  std::size_t end = kMaxTextBytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  if (is_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (std::size_t i = 0; i < text.size();) {
    if (auto n = utf8_sequence(text, i)) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      ++i;
    }
  }
  return out;
}

bool storable_filter_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxFilterKeyBytes) return false;
  const bool control = std::any_of(key.begin(), key.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F;
  });
  return !control && is_utf8(key);
}

namespace {

/// "profile/chain/provider#fingerprint" → an entry with its identity filled in.
ProviderState& provider_entry(State& state, const std::string& key) {
  auto it = state.providers.find(key);
  if (it != state.providers.end()) return it->second;
  ProviderState ps;
  auto first = key.find('/');
  auto second = key.find('/', first == std::string::npos ? 0 : first + 1);
  auto hash = key.rfind('#');
  if (first != std::string::npos && second != std::string::npos) {
    ps.profile = key.substr(0, first);
    ps.chain = key.substr(first + 1, second - first - 1);
    auto end = hash != std::string::npos && hash > second ? hash : key.size();
    ps.provider = key.substr(second + 1, end - second - 1);
    if (end < key.size()) ps.fingerprint = key.substr(end + 1);
  }
  return state.providers.emplace(key, std::move(ps)).first->second;
}

std::int64_t recovery_for(const BreakerConfig& cfg, int reopens, double jitter) {
  double base = static_cast<double>(cfg.recovery_timeout_ms) * std::pow(2.0, std::min(reopens, 30));
  base *= 1.0 + cfg.jitter * jitter;
  return static_cast<std::int64_t>(std::min(base, static_cast<double>(cfg.max_recovery_timeout_ms)));
}

}  // namespace

double bucket_level(const Bucket& b, const Quota& quota, std::int64_t now_ms) {
  if (b.t_ms == 0) return quota.burst;
  const double elapsed_s = static_cast<double>(std::max<std::int64_t>(0, now_ms - b.t_ms)) / 1000.0;
  return std::min(quota.burst, b.tokens + elapsed_s * quota.rps);
}

std::int64_t bucket_wait_ms(const Bucket& b, const Quota& quota, std::int64_t now_ms) {
  const double level = bucket_level(b, quota, now_ms);
  if (level >= 1.0) return 0;
  if (quota.rps <= 0) return INT64_MAX / 4;
  return static_cast<std::int64_t>(std::ceil((1.0 - level) / quota.rps * 1000.0));
}

void breaker_trip(Breaker& b, std::int64_t t_ms, std::string_view reason, const BreakerConfig& cfg, double jitter) {
  const BreakerState now = b.effective_state(t_ms);
  if (now == BreakerState::open) return;
  b.reopens = now == BreakerState::half_open ? b.reopens + 1 : 0;
  b.state = BreakerState::open;
  b.opened_ms = t_ms;
  b.recovery_ms = recovery_for(cfg, b.reopens, jitter);
  b.successes = 0;
  b.failures = 0;
  b.reason.assign(reason);
}

void breaker_on_outcome(Breaker& b, OutcomeClass cls, std::int64_t t_ms, std::string_view reason,
                        const BreakerConfig& cfg, double jitter) {
  BreakerState now = b.effective_state(t_ms);
  if (now == BreakerState::half_open && b.state == BreakerState::open) {
    b.state = BreakerState::half_open;
    b.successes = 0;
  }
  if (cls == OutcomeClass::provider_failure) {
    b.reason.assign(reason);
    if (b.state == BreakerState::half_open) {
      b.state = BreakerState::open;
      ++b.reopens;
      b.opened_ms = t_ms;
      b.recovery_ms = recovery_for(cfg, b.reopens, jitter);
      b.successes = 0;
    } else if (b.state == BreakerState::closed) {
      if (++b.failures >= cfg.failure_threshold) {
        b.state = BreakerState::open;
        b.reopens = 0;
        b.opened_ms = t_ms;
        b.recovery_ms = recovery_for(cfg, 0, jitter);
      }
    }
    return;
  }
  if (cls != OutcomeClass::success) return;  // rate limits and user errors never touch the breaker
  if (b.state == BreakerState::half_open) {
    if (++b.successes >= cfg.success_threshold) {
      b = Breaker{};
    }
  } else if (b.state == BreakerState::closed) {
    b.failures = 0;
  }
}

void breaker_on_trial(Breaker& b, OutcomeClass cls, std::int64_t t_ms, std::string_view reason,
                      const BreakerConfig& cfg, double jitter) {
  if (b.effective_state(t_ms) != BreakerState::open) {
    // It half-opened (or closed) while the trial was in flight: the usual rules apply.
    breaker_on_outcome(b, cls, t_ms, reason, cfg, jitter);
    return;
  }
  if (cls == OutcomeClass::success) {
    b = Breaker{};
  } else if (cls == OutcomeClass::provider_failure) {
    b.reason.assign(reason);
  }
}

void apply_event(State& state, const Event& event, const HealthConfig& health) {
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, AttemptEvent>) {
          auto& ps = provider_entry(state, e.key);
          ps.last_used_ms = std::max(ps.last_used_ms, e.t_ms);
          if (e.trial) {
            breaker_on_trial(ps.breaker, e.cls, e.t_ms, clip(e.reason), health.circuit_breaker, e.jitter);
          } else if (e.trip) {
            breaker_trip(ps.breaker, e.t_ms, clip(e.reason), health.circuit_breaker, e.jitter);
          } else {
            breaker_on_outcome(ps.breaker, e.cls, e.t_ms, clip(e.reason), health.circuit_breaker, e.jitter);
          }
          if (e.cls == OutcomeClass::rate_limited) {
            auto wait = e.retry_after_ms >= 0 ? e.retry_after_ms : health.rate_limit_default_ms;
            ps.rate_limited_until_ms = std::max(ps.rate_limited_until_ms, e.t_ms + wait);
          }
        } else if constexpr (std::is_same_v<T, SampleEvent>) {
          auto& ps = provider_entry(state, e.key);
          ps.last_used_ms = std::max(ps.last_used_ms, e.sample.t_ms);
          // Only known-shaped names become keys, so many per provider; the rest share one.
          const auto slot = method_slot(ps.methods, e.method);
          auto m = ps.methods.find(slot);
          if (m == ps.methods.end()) m = ps.methods.emplace(std::string(slot), std::deque<Sample>{}).first;
          auto& samples = m->second;
          // Keep time order even when another process's samples were merged in first. A live
          // sample is almost always the newest: appended without a search.
          if (samples.empty() || e.sample.t_ms >= samples.back().t_ms) {
            samples.push_back(e.sample);
          } else {
            auto pos = std::upper_bound(samples.begin(), samples.end(), e.sample.t_ms,
                                        [](std::int64_t t, const Sample& s) { return t < s.t_ms; });
            samples.insert(pos, e.sample);
          }
          while (samples.size() > kMaxSamplesPerMethod) samples.pop_front();
        } else if constexpr (std::is_same_v<T, HeightEvent>) {
          auto& ps = provider_entry(state, e.key);
          // The newest observation wins (a restarted node may really be lower); events from
          // several processes merge by their timestamps.
          if (e.height.t_ms > ps.height.t_ms || (e.height.t_ms == ps.height.t_ms && e.height.block > ps.height.block)) {
            ps.height = e.height;
          }
        } else if constexpr (std::is_same_v<T, HighWaterEvent>) {
          auto& hw = state.chains[e.chain_key].high_water;
          // The mark only rises; seeing it again keeps it fresh. A reset replaces it.
          if (e.reset ? e.height.t_ms >= hw.t_ms
                      : e.height.block > hw.block || (e.height.block == hw.block && e.height.t_ms > hw.t_ms)) {
            hw = e.height;
          }
        } else if constexpr (std::is_same_v<T, CursorEvent>) {
          state.chains[e.chain_key].rr_cursor += e.advance;
        } else if constexpr (std::is_same_v<T, FilterEvent>) {
          if (!storable_filter_key(e.key)) return;
          auto it = state.filters.find(e.key);
          if (it == state.filters.end()) {
            // Full: the oldest pin goes (they expire after kFilterRetentionMs anyway).
            if (state.filters.size() >= kMaxFilters) {
              state.filters.erase(std::min_element(state.filters.begin(), state.filters.end(),
                                                   [](const auto& a, const auto& b) { return a.second.t_ms < b.second.t_ms; }));
            }
            it = state.filters.emplace(e.key, e.pin).first;
          }
          it->second = e.pin;
        } else if constexpr (std::is_same_v<T, ProbeEvent>) {
          auto& ps = provider_entry(state, e.key);
          if (e.findings.t_ms >= ps.probe.t_ms) {
            ps.probe = e.findings;
            ps.probe.client_version = std::string(clip(e.findings.client_version));
          }
          ps.last_used_ms = std::max(ps.last_used_ms, e.findings.t_ms);
        } else if constexpr (std::is_same_v<T, QuotaEvent>) {
          auto& ps = provider_entry(state, e.key);
          // Refill up to this draw (never backwards in time when another process drew later),
          // then take. The floor keeps a burst of overdrawing processes from owing forever.
          const auto at = std::max(e.t_ms, ps.quota.t_ms);
          const double level = bucket_level(ps.quota, e.quota, at);
          ps.quota.tokens = std::max(level - e.taken, -e.quota.burst);
          ps.quota.t_ms = at;
          ps.last_used_ms = std::max(ps.last_used_ms, e.t_ms);
        } else if constexpr (std::is_same_v<T, LagEvent>) {
          auto& ps = provider_entry(state, e.key);
          if (e.mark.t_ms >= ps.lag.t_ms) ps.lag = e.mark;
          ps.last_used_ms = std::max(ps.last_used_ms, e.mark.t_ms);
        } else if constexpr (std::is_same_v<T, ArchivalEvent>) {
          auto& ps = provider_entry(state, e.key);
          if (e.seen.t_ms >= ps.archival_seen.t_ms) ps.archival_seen = e.seen;
          ps.last_used_ms = std::max(ps.last_used_ms, e.seen.t_ms);
        }
      },
      event);
}

void prune(State& state, std::int64_t now_ms) {
  for (auto it = state.providers.begin(); it != state.providers.end();) {
    auto& ps = it->second;
    for (auto m = ps.methods.begin(); m != ps.methods.end();) {
      auto& samples = m->second;
      while (!samples.empty() && samples.front().t_ms < now_ms - kSampleRetentionMs) samples.pop_front();
      while (samples.size() > kMaxSamplesPerMethod) samples.pop_front();
      m = samples.empty() ? ps.methods.erase(m) : std::next(m);
    }
    bool stale = ps.last_used_ms < now_ms - kProviderRetentionMs && ps.breaker.state == BreakerState::closed &&
                 ps.rate_limited_until_ms < now_ms;
    it = stale ? state.providers.erase(it) : std::next(it);
  }
  for (auto it = state.filters.begin(); it != state.filters.end();) {
    it = it->second.t_ms < now_ms - kFilterRetentionMs ? state.filters.erase(it) : std::next(it);
  }
  // A chain whose mark nobody raised for as long as a provider is kept: its key no longer matches
  // (keys before the chain id and provider digest, a profile whose providers changed).
  for (auto it = state.chains.begin(); it != state.chains.end();) {
    const auto& hw = it->second.high_water;
    const bool old = hw.t_ms > 0 && hw.t_ms < now_ms - kProviderRetentionMs;
    it = old ? state.chains.erase(it) : std::next(it);
  }
}

namespace {

// The reader (simdjson) rejects a document that is not valid UTF-8, and a name that is not valid
// UTF-8 can come from anywhere (an argv word, an upstream's answer): every string is checked (fast)
// and repaired when needed, so the writer never produces what the reader rejects.
void put_key(json::Writer& w, std::string_view s) {
  if (is_utf8(s)) {
    w.key(s);
  } else {
    w.key(valid_utf8(s));
  }
}
void put_text(json::Writer& w, std::string_view s) {
  if (is_utf8(s)) {
    w.value(s);
  } else {
    w.value(valid_utf8(s));
  }
}

}  // namespace

std::string serialize_state(const State& state, std::int64_t now_ms) {
  json::Writer w;
  w.begin_object();
  w.key("version");
  w.value(kStateVersion);
  w.key("updated_ms");
  w.value(now_ms);
  w.key("providers");
  w.begin_object();
  for (const auto& [key, ps] : state.providers) {
    put_key(w, key);
    w.begin_object();
    w.key("profile");
    put_text(w, ps.profile);
    w.key("chain");
    put_text(w, ps.chain);
    w.key("provider");
    put_text(w, ps.provider);
    w.key("fingerprint");
    put_text(w, ps.fingerprint);
    w.key("breaker");
    w.begin_object();
    w.key("state");
    w.value(breaker_state_name(ps.breaker.state));
    w.key("failures");
    w.value(ps.breaker.failures);
    w.key("successes");
    w.value(ps.breaker.successes);
    w.key("reopens");
    w.value(ps.breaker.reopens);
    w.key("opened_ms");
    w.value(ps.breaker.opened_ms);
    w.key("recovery_ms");
    w.value(ps.breaker.recovery_ms);
    w.key("reason");
    put_text(w, ps.breaker.reason);
    w.end_object();
    w.key("rate_limited_until_ms");
    w.value(ps.rate_limited_until_ms);
    w.key("height");
    w.begin_object();
    w.key("block");
    w.value(static_cast<std::uint64_t>(ps.height.block));
    w.key("t_ms");
    w.value(ps.height.t_ms);
    w.end_object();
    w.key("last_used_ms");
    w.value(ps.last_used_ms);
    if (ps.probe.t_ms > 0) {
      auto opt = [&](const char* key, const std::optional<bool>& v) {
        put_key(w, key);
        if (v) w.value(*v); else w.null();
      };
      w.key("probe");
      w.begin_object();
      w.key("t_ms");
      w.value(ps.probe.t_ms);
      w.key("chain_id");
      w.value(static_cast<std::uint64_t>(ps.probe.chain_id));
      opt("archival", ps.probe.archival);
      opt("batch", ps.probe.batch);
      opt("syncing", ps.probe.syncing);
      w.key("client_version");
      put_text(w, ps.probe.client_version);
      w.end_object();
    }
    if (ps.quota.t_ms > 0) {
      w.key("quota");
      w.begin_object();
      w.key("tokens");
      w.value(ps.quota.tokens);
      w.key("t_ms");
      w.value(ps.quota.t_ms);
      w.end_object();
    }
    if (ps.lag.t_ms > 0) {
      w.key("lag");
      w.begin_object();
      w.key("behind_since_ms");
      w.value(ps.lag.behind_since_ms);
      w.key("t_ms");
      w.value(ps.lag.t_ms);
      w.key("blocks");
      w.value(static_cast<std::uint64_t>(ps.lag.blocks));
      w.end_object();
    }
    if (ps.archival_seen.archival) {
      w.key("archival_seen");
      w.begin_object();
      w.key("archival");
      w.value(*ps.archival_seen.archival);
      w.key("t_ms");
      w.value(ps.archival_seen.t_ms);
      w.end_object();
    }
    w.key("methods");
    w.begin_object();
    for (const auto& [method, samples] : ps.methods) {
      put_key(w, method);
      w.begin_object();
      w.key("samples");
      w.begin_array();
      for (const auto& s : samples) {
        w.raw(fmt::format("[{},{},\"{}\"]", s.t_ms, s.latency_us, outcome_name(s.outcome)));
      }
      w.end_array();
      w.end_object();
    }
    w.end_object();
    w.end_object();
  }
  w.end_object();
  w.key("chains");
  w.begin_object();
  for (const auto& [key, cs] : state.chains) {
    put_key(w, key);
    w.begin_object();
    w.key("high_water");
    w.begin_object();
    w.key("block");
    w.value(static_cast<std::uint64_t>(cs.high_water.block));
    w.key("t_ms");
    w.value(cs.high_water.t_ms);
    w.end_object();
    w.key("rr_cursor");
    w.value(static_cast<std::uint64_t>(cs.rr_cursor));
    w.end_object();
  }
  w.end_object();
  w.key("filters");
  w.begin_object();
  for (const auto& [key, pin] : state.filters) {
    put_key(w, key);
    w.begin_object();
    w.key("provider");
    put_text(w, pin.provider);
    w.key("t_ms");
    w.value(pin.t_ms);
    w.end_object();
  }
  w.end_object();
  w.end_object();
  std::string out = w.take();
  out.push_back('\n');
  return out;
}

namespace {

namespace dom = simdjson::dom;

struct Bad {
  std::string why;
};

std::int64_t get_int(dom::object o, std::string_view key, std::int64_t fallback = 0) {
  dom::element e;
  if (o.at_key(key).get(e)) return fallback;
  std::int64_t v = 0;
  if (e.get_int64().get(v) == simdjson::SUCCESS) return v;
  std::uint64_t u = 0;
  if (e.get_uint64().get(u) == simdjson::SUCCESS) return static_cast<std::int64_t>(u);
  throw Bad{fmt::format("'{}' is not an integer", key)};
}

std::uint64_t get_uint(dom::object o, std::string_view key) {
  dom::element e;
  if (o.at_key(key).get(e)) return 0;
  std::uint64_t v = 0;
  if (e.get_uint64().get(v)) throw Bad{fmt::format("'{}' is not a non-negative integer", key)};
  return v;
}

double get_double(dom::object o, std::string_view key) {
  dom::element e;
  if (o.at_key(key).get(e)) return 0;
  double v = 0;
  if (e.get_double().get(v) == simdjson::SUCCESS && std::isfinite(v)) return v;
  throw Bad{fmt::format("'{}' is not a number", key)};
}

std::string get_str(dom::object o, std::string_view key) {
  dom::element e;
  if (o.at_key(key).get(e)) return {};
  std::string_view s;
  if (e.get_string().get(s)) throw Bad{fmt::format("'{}' is not a string", key)};
  return std::string(s);
}

dom::object get_obj(dom::object o, std::string_view key) {
  dom::element e;
  if (o.at_key(key).get(e)) return {};
  dom::object out;
  if (e.get_object().get(out)) throw Bad{fmt::format("'{}' is not an object", key)};
  return out;
}

std::optional<bool> get_opt_bool(dom::object o, std::string_view key) {
  dom::element e;
  if (o.at_key(key).get(e) || e.is_null()) return std::nullopt;
  bool b = false;
  if (e.get_bool().get(b)) throw Bad{fmt::format("'{}' is not a boolean", key)};
  return b;
}

bool has(dom::object o, std::string_view key) {
  dom::element e;
  return o.at_key(key).get(e) == simdjson::SUCCESS;
}

}  // namespace

namespace {

ProviderState parse_provider(dom::object po, std::size_t& dropped) {
  ProviderState ps;
  ps.profile = get_str(po, "profile");
  ps.chain = get_str(po, "chain");
  ps.provider = get_str(po, "provider");
  ps.fingerprint = get_str(po, "fingerprint");
  if (has(po, "breaker")) {
    auto bo = get_obj(po, "breaker");
    auto st = get_str(bo, "state");
    if (st == "open") ps.breaker.state = BreakerState::open;
    else if (st == "half_open") ps.breaker.state = BreakerState::half_open;
    else if (st == "closed" || st.empty()) ps.breaker.state = BreakerState::closed;
    else throw Bad{fmt::format("unknown breaker state '{}'", st)};
    ps.breaker.failures = static_cast<int>(get_int(bo, "failures"));
    ps.breaker.successes = static_cast<int>(get_int(bo, "successes"));
    ps.breaker.reopens = static_cast<int>(get_int(bo, "reopens"));
    ps.breaker.opened_ms = get_int(bo, "opened_ms");
    ps.breaker.recovery_ms = get_int(bo, "recovery_ms");
    ps.breaker.reason = std::string(clip(get_str(bo, "reason")));
  }
  ps.rate_limited_until_ms = get_int(po, "rate_limited_until_ms");
  if (has(po, "height")) {
    auto ho = get_obj(po, "height");
    ps.height.block = get_uint(ho, "block");
    ps.height.t_ms = get_int(ho, "t_ms");
  }
  ps.last_used_ms = get_int(po, "last_used_ms");
  if (has(po, "probe")) {
    auto pr = get_obj(po, "probe");
    ps.probe.t_ms = get_int(pr, "t_ms");
    ps.probe.chain_id = get_uint(pr, "chain_id");
    ps.probe.archival = get_opt_bool(pr, "archival");
    ps.probe.batch = get_opt_bool(pr, "batch");
    ps.probe.syncing = get_opt_bool(pr, "syncing");
    ps.probe.client_version = std::string(clip(get_str(pr, "client_version")));
  }
  if (has(po, "quota")) {
    auto qo = get_obj(po, "quota");
    ps.quota.tokens = get_double(qo, "tokens");
    ps.quota.t_ms = get_int(qo, "t_ms");
  }
  if (has(po, "lag")) {
    auto lo = get_obj(po, "lag");
    ps.lag.behind_since_ms = get_int(lo, "behind_since_ms");
    ps.lag.t_ms = get_int(lo, "t_ms");
    ps.lag.blocks = get_uint(lo, "blocks");  // absent before it was kept: 0
  }
  if (has(po, "archival_seen")) {
    auto ao = get_obj(po, "archival_seen");
    ps.archival_seen.archival = get_opt_bool(ao, "archival");
    ps.archival_seen.t_ms = get_int(ao, "t_ms");
  }
  if (has(po, "methods")) {
    for (auto [method, mv] : get_obj(po, "methods")) {
      // A method entry stands alone: a bad one is dropped, its provider kept. Names a writer
      // would not make a key (see method_slot) are dropped too: a file written before the bounds
      // may hold thousands.
      try {
        if (method != kOtherMethod && method_slot(ps.methods, method) != method) throw Bad{"method name"};
        dom::object mo;
        if (mv.get_object().get(mo)) throw Bad{"method entry is not an object"};
        std::deque<Sample> samples;
        dom::element se;
        if (mo.at_key("samples").get(se) == simdjson::SUCCESS) {
          dom::array arr;
          if (se.get_array().get(arr)) throw Bad{"samples is not an array"};
          for (auto item : arr) {
            dom::array triple;
            if (item.get_array().get(triple) || triple.size() != 3) throw Bad{"a sample is not [t, us, outcome]"};
            Sample smp;
            std::string_view outcome;
            if (triple.at(0).get_int64().get(smp.t_ms) || triple.at(1).get_int64().get(smp.latency_us) ||
                triple.at(2).get_string().get(outcome)) {
              throw Bad{"a sample is not [t, us, outcome]"};
            }
            auto o = parse_outcome(outcome);
            if (!o) throw Bad{fmt::format("unknown outcome '{}'", outcome)};
            smp.outcome = *o;
            samples.push_back(smp);
            if (samples.size() > kMaxSamplesPerMethod) samples.pop_front();
          }
        }
        ps.methods.insert_or_assign(std::string(method), std::move(samples));
      } catch (const Bad&) {
        ++dropped;
      }
    }
  }
  return ps;
}

}  // namespace

Result<State> parse_state(std::string_view text, std::size_t* dropped_out) {
  // Bytes that are not UTF-8 make simdjson reject the whole document: repaired first (inside
  // strings they become U+FFFD; anywhere else the text was not JSON anyway), so that only the
  // entries holding them are lost.
  std::string repaired;
  if (!is_utf8(text)) {
    repaired = valid_utf8(text);
    text = repaired;
  }
  dom::parser parser;
  dom::element root;
  if (auto e = parser.parse(text.data(), text.size(), true).get(root)) {
    return fail(fmt::format("not valid JSON ({})", simdjson::error_message(e)));
  }
  std::size_t dropped = 0;
  try {
    dom::object top;
    if (root.get_object().get(top)) throw Bad{"not a JSON object"};
    dom::element version;
    std::int64_t v = 0;
    if (top.at_key("version").get(version) || version.get_int64().get(v)) throw Bad{"no version"};
    if (v != kStateVersion) throw Bad{fmt::format("unknown version {}", v)};
    State state;
    // The sections must be objects (else this is not a state file); each entry in them stands alone.
    if (has(top, "providers")) {
      for (auto [key, value] : get_obj(top, "providers")) {
        try {
          dom::object po;
          if (value.get_object().get(po)) throw Bad{"provider entry is not an object"};
          state.providers.emplace(std::string(key), parse_provider(po, dropped));
        } catch (const Bad&) {
          ++dropped;
        }
      }
    }
    if (has(top, "chains")) {
      for (auto [key, value] : get_obj(top, "chains")) {
        try {
          dom::object co;
          if (value.get_object().get(co)) throw Bad{"chain entry is not an object"};
          ChainState cs;
          if (has(co, "high_water")) {
            auto hw = get_obj(co, "high_water");
            cs.high_water.block = get_uint(hw, "block");
            cs.high_water.t_ms = get_int(hw, "t_ms");
          }
          cs.rr_cursor = get_uint(co, "rr_cursor");
          state.chains.emplace(std::string(key), cs);
        } catch (const Bad&) {
          ++dropped;
        }
      }
    }
    if (has(top, "filters")) {
      for (auto [key, value] : get_obj(top, "filters")) {
        try {
          if (!storable_filter_key(key) || state.filters.size() >= kMaxFilters) throw Bad{"filter key"};
          dom::object fo;
          if (value.get_object().get(fo)) throw Bad{"filter entry is not an object"};
          state.filters.emplace(std::string(key), FilterPin{get_str(fo, "provider"), get_int(fo, "t_ms")});
        } catch (const Bad&) {
          ++dropped;
        }
      }
    }
    if (dropped_out != nullptr) *dropped_out = dropped;
    return state;
  } catch (const Bad& b) {
    return fail(b.why);
  }
}

}  // namespace rpcroute
