#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "rpcroute/json.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute {

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

void put_breaker(json::Writer& w, const Breaker& b) {
  w.begin_object();
  w.key("state");
  w.value(breaker_state_name(b.state));
  w.key("failures");
  w.value(b.failures);
  w.key("successes");
  w.value(b.successes);
  w.key("reopens");
  w.value(b.reopens);
  w.key("opened_ms");
  w.value(b.opened_ms);
  w.key("recovery_ms");
  w.value(b.recovery_ms);
  w.key("reason");
  put_text(w, b.reason);
  w.end_object();
}

}  // namespace

std::string serialize_state(const State& state, std::int64_t now_ms, std::uint64_t journal) {
  json::Writer w;
  w.begin_object();
  w.key("version");
  w.value(kStateVersion);
  w.key("updated_ms");
  w.value(now_ms);
  if (journal != 0) {
    w.key("journal");
    w.value(fmt::format("{:016x}", journal));
  }
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
    put_breaker(w, ps.breaker);
    // Only once the WebSocket was used for requests (issue 18): older readers never see it.
    if (ps.ws_breaker.state != BreakerState::closed || ps.ws_breaker.failures != 0 ||
        ps.ws_breaker.reopens != 0 || ps.ws_breaker.opened_ms != 0) {
      w.key("ws_breaker");
      put_breaker(w, ps.ws_breaker);
    }
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
    w.key("last_ok_ms");
    w.value(ps.last_ok_ms);
    w.key("last_failed_ms");
    w.value(ps.last_failed_ms);
    // Without a probe time: what a `call` learned alongside a request (chain id, batch).
    if (ps.probe.t_ms > 0 || ps.probe.chain_id != 0 || ps.probe.batch) {
      auto opt = [&](const char* key, const std::optional<bool>& v) {
        put_key(w, key);
        if (v)
          w.value(*v);
        else
          w.null();
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
    if (ps.log_limit.blocks != 0) {
      w.key("log_limit");
      w.begin_object();
      w.key("blocks");
      w.value(static_cast<std::uint64_t>(ps.log_limit.blocks));
      w.key("t_ms");
      w.value(ps.log_limit.t_ms);
      w.end_object();
    }
    if (ps.cordon.t_ms != 0) {
      w.key("cordon");
      w.begin_object();
      w.key("t_ms");
      w.value(ps.cordon.t_ms);
      w.key("on");
      w.value(ps.cordon.on);
      w.key("until_ms");
      w.value(ps.cordon.until_ms);
      w.key("reason");
      put_text(w, ps.cordon.reason);
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
    for (const auto& [name, h] : {std::pair{"safe", &cs.safe}, {"finalized", &cs.finalized}}) {
      if (h->t_ms == 0) continue;
      w.key(name);
      w.begin_object();
      w.key("block");
      w.value(static_cast<std::uint64_t>(h->block));
      w.key("t_ms");
      w.value(h->t_ms);
      w.end_object();
    }
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

void parse_breaker(dom::object bo, Breaker& b) {
  auto st = get_str(bo, "state");
  if (st == "open")
    b.state = BreakerState::open;
  else if (st == "half_open")
    b.state = BreakerState::half_open;
  else if (st == "closed" || st.empty())
    b.state = BreakerState::closed;
  else
    throw Bad{fmt::format("unknown breaker state '{}'", st)};
  b.failures = static_cast<int>(get_int(bo, "failures"));
  b.successes = static_cast<int>(get_int(bo, "successes"));
  b.reopens = static_cast<int>(get_int(bo, "reopens"));
  b.opened_ms = get_int(bo, "opened_ms");
  b.recovery_ms = get_int(bo, "recovery_ms");
  b.reason = std::string(clip(get_str(bo, "reason")));
}

ProviderState parse_provider(dom::object po, std::size_t& dropped) {
  ProviderState ps;
  ps.profile = get_str(po, "profile");
  ps.chain = get_str(po, "chain");
  ps.provider = get_str(po, "provider");
  ps.fingerprint = get_str(po, "fingerprint");
  if (has(po, "breaker")) parse_breaker(get_obj(po, "breaker"), ps.breaker);
  // Absent in files written before issue 18's transports (and while the socket is unused).
  if (has(po, "ws_breaker")) parse_breaker(get_obj(po, "ws_breaker"), ps.ws_breaker);
  ps.rate_limited_until_ms = get_int(po, "rate_limited_until_ms");
  if (has(po, "height")) {
    auto ho = get_obj(po, "height");
    ps.height.block = get_uint(ho, "block");
    ps.height.t_ms = get_int(ho, "t_ms");
  }
  ps.last_used_ms = get_int(po, "last_used_ms");
  ps.last_ok_ms = get_int(po, "last_ok_ms");
  ps.last_failed_ms = get_int(po, "last_failed_ms");
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
  if (has(po, "log_limit")) {  // absent in files written before issue 19
    auto lo = get_obj(po, "log_limit");
    ps.log_limit.blocks = get_uint(lo, "blocks");
    ps.log_limit.t_ms = get_int(lo, "t_ms");
  }
  if (has(po, "cordon")) {
    auto co = get_obj(po, "cordon");
    ps.cordon.t_ms = get_int(co, "t_ms");
    ps.cordon.on = get_opt_bool(co, "on").value_or(false);
    ps.cordon.until_ms = get_int(co, "until_ms");
    ps.cordon.reason = clean_cordon_reason(get_str(co, "reason"));
  }
  if (has(po, "methods")) {
    for (auto [method, mv] : get_obj(po, "methods")) {
      // A method entry stands alone: a bad one is dropped, its provider kept. Names a writer
      // would not make a key (see method_slot) are dropped too: a file written before the bounds
      // may hold thousands.
      try {
        if (method != kOtherMethod && method_slot(ps.methods, method) != method)
          throw Bad{"method name"};
        dom::object mo;
        if (mv.get_object().get(mo)) throw Bad{"method entry is not an object"};
        std::deque<Sample> samples;
        dom::element se;
        if (mo.at_key("samples").get(se) == simdjson::SUCCESS) {
          dom::array arr;
          if (se.get_array().get(arr)) throw Bad{"samples is not an array"};
          for (auto item : arr) {
            dom::array triple;
            if (item.get_array().get(triple) || triple.size() != 3)
              throw Bad{"a sample is not [t, us, outcome]"};
            Sample smp;
            std::string_view outcome;
            if (triple.at(0).get_int64().get(smp.t_ms) ||
                triple.at(1).get_int64().get(smp.latency_us) ||
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

namespace {

/// The snapshot's journal generation: 0 when it names none (a file from before the journal, or
/// written by `state show --json`); a value that does not read names no journal there can be.
std::uint64_t journal_generation(dom::object top) {
  dom::element e;
  if (top.at_key("journal").get(e)) return 0;
  std::string_view hex;
  std::uint64_t gen = 0;
  if (e.get_string().get(hex) || hex.size() != 16 ||
      std::from_chars(hex.data(), hex.data() + hex.size(), gen, 16).ptr != hex.data() + hex.size())
    return ~std::uint64_t{0};
  return gen;
}

}  // namespace

Result<State> parse_state(std::string_view text, std::size_t* dropped_out, std::uint64_t* journal) {
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
    // The sections must be objects (else this is not a state file); each entry in them stands
    // alone.
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
          for (auto [name, h] : {std::pair{"safe", &cs.safe}, {"finalized", &cs.finalized}}) {
            if (!has(co, name)) continue;
            auto o = get_obj(co, name);
            *h = Height{get_uint(o, "block"), get_int(o, "t_ms")};
          }
          state.chains.emplace(std::string(key), cs);
        } catch (const Bad&) {
          ++dropped;
        }
      }
    }
    if (has(top, "filters")) {
      for (auto [key, value] : get_obj(top, "filters")) {
        try {
          if (!storable_filter_key(key) || state.filters.size() >= kMaxFilters)
            throw Bad{"filter key"};
          dom::object fo;
          if (value.get_object().get(fo)) throw Bad{"filter entry is not an object"};
          state.filters.emplace(std::string(key),
                                FilterPin{get_str(fo, "provider"), get_int(fo, "t_ms")});
        } catch (const Bad&) {
          ++dropped;
        }
      }
    }
    if (dropped_out != nullptr) *dropped_out = dropped;
    if (journal != nullptr) *journal = journal_generation(top);
    return state;
  } catch (const Bad& b) {
    return fail(b.why);
  }
}

}  // namespace rpcroute
