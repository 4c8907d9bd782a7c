#include "rpcroute/health/model.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rpcroute/json.hpp"
#include "rpcroute/methods.hpp"

namespace rpcroute {

void provider_key_into(std::string& out, std::string_view profile, std::string_view chain,
                       const Provider& p) {
  // One resize and plain copies: this runs several times per routed request (head judgements),
  // and seven appends cost three times as much.
  out.resize(profile.size() + chain.size() + p.id.size() + p.fingerprint.size() + 3);
  char* at = out.data();
  auto put = [&at](std::string_view piece) {
    if (piece.empty()) return;  // a default view's data() may be null
    std::memcpy(at, piece.data(), piece.size());
    at += piece.size();
  };
  put(profile);
  *at++ = '/';
  put(chain);
  *at++ = '/';
  put(p.id);
  *at++ = '#';
  put(p.fingerprint);
}
std::string provider_key(std::string_view profile, std::string_view chain, const Provider& p) {
  std::string out;
  provider_key_into(out, profile, chain, p);
  return out;
}
std::string chain_key(std::string_view profile, const Chain& chain) {
  // The file stem and chain name are labels (two projects' local.yaml share them); the chain id and
  // the digest of the providers' URL fingerprints say which chain this is, seen through which
  // nodes.
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
  std::string_view base = method;
  std::string_view other = kOtherMethod;
  if (base.ends_with(kWsSuffix)) {
    base.remove_suffix(kWsSuffix.size());
    other = kOtherWsMethod;
  }
  if (!known_shaped_method(base)) return other;
  if (methods.size() < kMaxMethodsPerProvider || methods.find(method) != methods.end())
    return method;
  return other;
}

std::string sample_method(std::string_view method, TransportKind transport) {
  std::string out(method);
  if (transport == TransportKind::ws) out.append(kWsSuffix);
  return out;
}

std::string_view catalogue_slot(std::string_view method) {
  return method_info(method).name == method ? method : kOtherMethod;
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

}  // namespace

bool is_utf8(std::string_view s) { return simdjson::validate_utf8(s.data(), s.size()); }

std::string_view clip(std::string_view s) {
  if (s.size() <= kMaxTextBytes) return s;
  std::size_t end = kMaxTextBytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

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

bool newer_cordon(const Cordon& a, const Cordon& b) {
  if (a.t_ms != b.t_ms) return a.t_ms > b.t_ms;
  if (a.on != b.on) return a.on;
  if (a.until_ms != b.until_ms) return a.until_ms > b.until_ms;
  return a.reason > b.reason;
}

std::string clean_cordon_reason(std::string_view reason) {
  const auto text = valid_utf8(reason);
  std::string out;
  out.reserve(std::min(text.size(), kMaxCordonReasonBytes));
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    // C0 controls, DEL and the C1 controls (U+0080..U+009F, "\xC2\x80".."\xC2\x9F"): a reason
    // is shown in terminals and logs, where they could move the cursor or fake a line.
    const bool control =
        c < 0x20 || c == 0x7F ||
        (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0xA0);
    if (!control) {
      if (out.size() + n > kMaxCordonReasonBytes) break;
      out.append(text, i, n);
    }
    i += n;
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

}  // namespace

void apply_event(State& state, const Event& event, const HealthConfig& health) {
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, AttemptEvent>) {
          auto& ps = provider_entry(state, e.key);
          ps.last_used_ms = std::max(ps.last_used_ms, e.t_ms);
          if (e.cls == OutcomeClass::success) ps.last_ok_ms = std::max(ps.last_ok_ms, e.t_ms);
          // A WebSocket failure says the socket failed, not that the provider is down: its own
          // breaker counts it; HTTP and probes drive the provider's.
          if (e.cls == OutcomeClass::provider_failure && !e.ws)
            ps.last_failed_ms = std::max(ps.last_failed_ms, e.t_ms);
          auto& breaker = e.ws ? ps.ws_breaker : ps.breaker;
          if (e.trial) {
            breaker_on_trial(breaker, e.cls, e.t_ms, clip(e.reason), health.circuit_breaker,
                             e.jitter);
          } else if (e.trip) {
            breaker_trip(breaker, e.t_ms, clip(e.reason), health.circuit_breaker, e.jitter);
          } else {
            breaker_on_outcome(breaker, e.cls, e.t_ms, clip(e.reason), health.circuit_breaker,
                               e.jitter);
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
          if (m == ps.methods.end())
            m = ps.methods.emplace(std::string(slot), std::deque<Sample>{}).first;
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
          if (e.height.t_ms > ps.height.t_ms ||
              (e.height.t_ms == ps.height.t_ms && e.height.block > ps.height.block)) {
            ps.height = e.height;
          }
        } else if constexpr (std::is_same_v<T, HighWaterEvent>) {
          auto& hw = state.chains[e.chain_key].high_water;
          // The mark only rises; seeing it again keeps it fresh. A reset replaces it.
          if (e.reset ? e.height.t_ms >= hw.t_ms
                      : e.height.block > hw.block ||
                            (e.height.block == hw.block && e.height.t_ms > hw.t_ms)) {
            hw = e.height;
          }
          // A mark reset lower (a restarted dev chain) takes the finality it passed with it.
          if (auto& cs = state.chains[e.chain_key]; e.reset) {
            if (cs.safe.block > hw.block) cs.safe = {};
            if (cs.finalized.block > hw.block) cs.finalized = {};
          }
        } else if constexpr (std::is_same_v<T, FinalityEvent>) {
          auto& cs = state.chains[e.chain_key];
          // Rises only, and never past the chain's head the report was judged against
          // (judge_finality): a claim above it is not believed (the cache trusts `finalized`). A
          // mark already above it — a liar's, kept before the head rule judged finality — is
          // dropped, not kept for good.
          auto raise = [&](Height& mark, const Height& seen) {
            if (mark.block > e.head) mark = {};
            if (seen.t_ms == 0 || seen.block > e.head) return;
            if (seen.block > mark.block || (seen.block == mark.block && seen.t_ms > mark.t_ms))
              mark = seen;
          };
          raise(cs.safe, e.safe);
          raise(cs.finalized, e.finalized);
        } else if constexpr (std::is_same_v<T, CursorEvent>) {
          state.chains[e.chain_key].rr_cursor += e.advance;
        } else if constexpr (std::is_same_v<T, FilterEvent>) {
          if (!storable_filter_key(e.key)) return;
          auto it = state.filters.find(e.key);
          if (it == state.filters.end()) {
            // Full: the oldest pin goes (they expire after kFilterRetentionMs anyway).
            if (state.filters.size() >= kMaxFilters) {
              state.filters.erase(std::min_element(
                  state.filters.begin(), state.filters.end(),
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
        } else if constexpr (std::is_same_v<T, LogLimitEvent>) {
          auto& ps = provider_entry(state, e.key);
          if (e.limit.t_ms >= ps.log_limit.t_ms) ps.log_limit = e.limit;
          ps.last_used_ms = std::max(ps.last_used_ms, e.limit.t_ms);
        } else if constexpr (std::is_same_v<T, CordonEvent>) {
          // Not a use of the provider: last_used_ms stays (prune keeps an active cordon anyway).
          auto& ps = provider_entry(state, e.key);
          if (newer_cordon(e.cordon, ps.cordon)) {
            ps.cordon = e.cordon;
            ps.cordon.reason = clean_cordon_reason(e.cordon.reason);
          }
        }
      },
      event);
}

void prune(State& state, std::int64_t now_ms) {
  for (auto it = state.providers.begin(); it != state.providers.end();) {
    auto& ps = it->second;
    for (auto m = ps.methods.begin(); m != ps.methods.end();) {
      auto& samples = m->second;
      while (!samples.empty() && samples.front().t_ms < now_ms - kSampleRetentionMs)
        samples.pop_front();
      while (samples.size() > kMaxSamplesPerMethod) samples.pop_front();
      m = samples.empty() ? ps.methods.erase(m) : std::next(m);
    }
    // A lifted or expired cordon is remembered a day (against late replays of older ones).
    if (ps.cordon.t_ms != 0 && !ps.cordon.active(now_ms) &&
        std::max(ps.cordon.t_ms, ps.cordon.until_ms) < now_ms - kCordonMemoryMs)
      ps.cordon = Cordon{};
    bool stale = ps.last_used_ms < now_ms - kProviderRetentionMs &&
                 ps.breaker.state == BreakerState::closed &&
                 ps.ws_breaker.state == BreakerState::closed && ps.rate_limited_until_ms < now_ms &&
                 !ps.cordon.active(now_ms);
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

}  // namespace rpcroute
