// The dashboard's memory: the decision ring, the latency series and the traffic counts.
#include "dashboard.hpp"

#include <algorithm>
#include <cmath>

namespace rpcroute::sidecar {

namespace {

/// An answer the provider gave (its latency says how fast it is), as opposed to a failure.
bool answered(OutcomeClass c) {
  return c == OutcomeClass::success || c == OutcomeClass::deterministic;
}

}  // namespace

double LatencySeries::bucket_bound(std::size_t i) { return 0.05 * std::pow(1.5, double(i)); }

std::size_t LatencySeries::bucket_of(double ms) {
  if (!(ms > 0.05)) return 0;
  const auto i = static_cast<std::size_t>(std::ceil(std::log(ms / 0.05) / std::log(1.5)));
  return std::min(i, kBuckets - 1);
}

void LatencySeries::add(std::int64_t now_ms, double ms) {
  const std::int64_t index = now_ms / kWindowMs;
  Window& w = windows_[static_cast<std::size_t>(index) % kWindows];
  if (w.index != index) w = Window{index, 0, {}};
  ++w.count;
  ++w.buckets[bucket_of(ms)];
}

double LatencySeries::quantile(const Window& w, double q) {
  // The rank's bucket, and a straight line through it: good to a bucket's width (×1.5).
  const double rank = q * w.count;
  double seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    const double n = w.buckets[i];
    if (n == 0) continue;
    if (seen + n >= rank) {
      const double low = i == 0 ? 0 : bucket_bound(i - 1);
      const double high = bucket_bound(i);
      return low + (high - low) * std::clamp((rank - seen) / n, 0.0, 1.0);
    }
    seen += n;
  }
  return bucket_bound(kBuckets - 1);
}

std::vector<LatencySeries::Point> LatencySeries::points(std::int64_t now_ms) const {
  const std::int64_t newest = now_ms / kWindowMs;
  const std::int64_t oldest = newest - static_cast<std::int64_t>(kWindows) + 1;
  std::vector<Point> out;
  for (const Window& w : windows_) {
    if (w.index < oldest || w.index > newest || w.count == 0) continue;
    out.push_back({w.index * kWindowMs, w.count, quantile(w, 0.5), quantile(w, 0.9)});
  }
  std::sort(out.begin(), out.end(),
            [](const Point& a, const Point& b) { return a.start_ms < b.start_ms; });
  return out;
}

void Dashboard::record(std::string_view profile, std::string_view chain, std::string_view method,
                       const CallOutcome& out, std::int64_t now_ms, double total_ms) {
  Decision& d = ring_.next();
  d.at_ms = now_ms;
  d.profile.assign(profile);
  d.chain.assign(chain);
  d.method.assign(method);
  d.provider.assign(out.provider);
  d.transport = out.transport;
  d.status = out.status;
  d.attempt_count = static_cast<std::uint32_t>(out.attempts.size());
  const auto listed = std::min(out.attempts.size(), Decision::kMaxAttempts);
  for (std::size_t i = 0; i < listed; ++i) {
    const AttemptRecord& a = out.attempts[i];
    Decision::Attempt& slot = d.attempts[i];
    slot.provider.assign(a.provider);
    slot.outcome = a.result.outcome;
    slot.cls = a.result.cls;
    slot.latency_ms = static_cast<float>(a.latency_ms);
    slot.transport = a.transport;
  }
  d.total_ms = static_cast<float>(total_ms);
  d.cache_hit = false;
  d.hedge = out.hedge;
  if (is_watched(now_ms)) count(profile, chain, method, out, now_ms);
}

void Dashboard::record_hit(std::string_view profile, std::string_view chain,
                           std::string_view method, std::int64_t now_ms, double total_ms) {
  Decision& d = ring_.next();
  d.at_ms = now_ms;
  d.profile.assign(profile);
  d.chain.assign(chain);
  d.method.assign(method);
  d.provider.assign({});
  d.transport = TransportKind::http;
  d.status = CallOutcome::Status::result;
  d.attempt_count = 0;
  d.total_ms = static_cast<float>(total_ms);
  d.cache_hit = true;
  d.hedge = CallOutcome::Hedge::none;
}

void Dashboard::count(std::string_view profile, std::string_view chain, std::string_view method,
                      const CallOutcome& out, std::int64_t now_ms) {
  if (out.attempts.empty()) return;
  auto find_or_add = [](auto& map, const auto& key, bool may_add) {
    auto it = map.find(key);
    if (it == map.end() && may_add) {
      it = std::apply(
          [&map](const auto&... part) {
            using Key = typename std::decay_t<decltype(map)>::key_type;
            return map.try_emplace(Key(std::string(part)...)).first;
          },
          key);
    }
    return it == map.end() ? nullptr : &it->second;
  };
  const std::tuple<std::string_view, std::string_view> chain_key{profile, chain};
  if (auto* n = find_or_add(firsts_, chain_key, true)) ++*n;
  for (std::size_t i = 0; i < out.attempts.size(); ++i) {
    const AttemptRecord& a = out.attempts[i];
    // Providers come from the profile (a bounded set); method names from clients: capped.
    const std::tuple<std::string_view, std::string_view, std::string_view> pk{profile, chain,
                                                                              a.provider};
    if (ProviderTraffic* t = find_or_add(traffic_, pk, true)) {
      t->first += i == 0 ? 1 : 0;
      ++t->attempts;
      t->answered += answered(a.result.cls) ? 1 : 0;
    }
    if (!answered(a.result.cls)) continue;
    const std::tuple<std::string_view, std::string_view, std::string_view, std::string_view> sk{
        profile, chain, a.provider, method};
    if (LatencySeries* s = find_or_add(series_, sk, series_.size() < kMaxSeries))
      s->add(now_ms, a.latency_ms);
  }
}

void Dashboard::write_series_json(json::Writer& w, std::string_view profile, std::string_view chain,
                                  std::int64_t now_ms) const {
  w.begin_array();
  for (const auto& [key, series] : series_) {
    if (std::get<0>(key) != profile || std::get<1>(key) != chain) continue;
    const auto points = series.points(now_ms);
    if (points.empty()) continue;
    w.begin_object();
    w.key("provider");
    w.value(std::get<2>(key));
    w.key("method");
    w.value(std::get<3>(key));
    w.key("points");
    w.begin_array();
    for (const auto& p : points) {
      w.begin_array();
      w.value(p.start_ms);
      w.value(static_cast<std::int64_t>(p.count));
      w.value(p.p50_ms, 3);
      w.value(p.p90_ms, 3);
      w.end_array();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
}

ProviderTraffic Dashboard::traffic(std::string_view profile, std::string_view chain,
                                   std::string_view provider) const {
  auto it = traffic_.find(std::make_tuple(profile, chain, provider));
  return it == traffic_.end() ? ProviderTraffic{} : it->second;
}

std::uint64_t Dashboard::chain_firsts(std::string_view profile, std::string_view chain) const {
  auto it = firsts_.find(std::make_tuple(profile, chain));
  return it == firsts_.end() ? 0 : it->second;
}

void write_decision_json(json::Writer& w, const Decision& d) {
  w.begin_object();
  w.key("seq");
  w.value(d.seq);
  w.key("t");
  w.value(d.at_ms);
  w.key("profile");
  w.value(d.profile.printable());
  w.key("chain");
  w.value(d.chain.printable());
  w.key("method");
  w.value(d.method.printable());
  w.key("provider");
  if (d.provider.size > 0)
    w.value(d.provider.printable());
  else
    w.null();
  w.key("transport");  // "http" or "ws": how the answer came; null when no provider answered
  if (d.provider.size > 0)
    w.value(transport_name(d.transport));
  else
    w.null();
  w.key("status");
  w.value(status_name(d.status));
  w.key("total_ms");
  w.value(static_cast<double>(d.total_ms), 3);
  w.key("attempt_count");
  w.value(static_cast<std::int64_t>(d.attempt_count));
  w.key("cache");  // "hit", or null: routed
  if (d.cache_hit)
    w.value("hit");
  else
    w.null();
  w.key("hedge");  // "first", "hedge" (the hedge won), "neither", or null: none fired
  if (d.hedge != CallOutcome::Hedge::none)
    w.value(hedge_name(d.hedge));
  else
    w.null();
  w.key("attempts");
  w.begin_array();
  const auto listed = std::min<std::size_t>(d.attempt_count, Decision::kMaxAttempts);
  for (std::size_t i = 0; i < listed; ++i) {
    const auto& a = d.attempts[i];
    w.begin_object();
    w.key("provider");
    w.value(a.provider.printable());
    w.key("outcome");
    w.value(outcome_name(a.outcome));
    w.key("class");
    w.value(class_name(a.cls));
    w.key("latency_ms");
    w.value(static_cast<double>(a.latency_ms), 3);
    w.key("transport");
    w.value(transport_name(a.transport));
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

}  // namespace rpcroute::sidecar
