#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "rpcroute/strategy.hpp"

namespace rpcroute {

namespace {

using Candidates = std::vector<Candidate>;

/// x^y, by multiplication for small whole exponents (beta is 3 by default): std::pow costs more
/// than the rest of a candidate's weight.
double power(double x, double y) {
  if (y >= 0 && y <= 8 && y == std::floor(y)) {
    double r = 1;
    for (int i = 0; i < static_cast<int>(y); ++i) r *= x;
    return r;
  }
  return std::pow(x, y);
}

/// Profile order. Router::plan builds candidates in it already: sorting is then a check.
void by_position(Candidates& c) {
  auto before = [](const Candidate& a, const Candidate& b) { return a.position < b.position; };
  if (!std::is_sorted(c.begin(), c.end(), before)) std::sort(c.begin(), c.end(), before);
}

void uniform_probability(Candidates& c) {
  for (auto& x : c) x.first_probability = 1.0 / static_cast<double>(c.size());
}

void first_only_probability(Candidates& c) {
  for (std::size_t i = 0; i < c.size(); ++i) c[i].first_probability = i == 0 ? 1.0 : 0.0;
}

/// A per-thread buffer for weights: ranking runs for every call and should not allocate.
std::vector<double>& weight_buffer(std::size_t n) {
  thread_local std::vector<double> w;
  w.resize(n);
  return w;
}

/// Weighted random order without replacement: each next candidate is drawn with probability
/// proportional to its weight among those left (the order Efraimidis–Spirakis keys u^(1/w) give,
/// without a logarithm per candidate). The first pick has probability w / Σw exactly; zero weights
/// go last in profile order. `weights` is consumed.
void weighted_order(Candidates& c, std::vector<double>& weights, Random& rng) {
  const std::size_t n = c.size();
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (weights[i] > 0) total += weights[i];
  }
  for (std::size_t i = 0; i < n; ++i) {
    c[i].metric = weights[i];
    c[i].first_probability =
        total > 0 ? std::max(weights[i], 0.0) / total : 1.0 / static_cast<double>(n);
  }
  double left = total;
  for (std::size_t k = 0; k + 1 < n; ++k) {
    if (left <= 0) {  // rounding can take the running sum to 0 with positive weights left
      left = 0;
      for (std::size_t j = k; j < n; ++j) left += std::max(weights[j], 0.0);
      if (left <= 0) break;
    }
    const double r = rng.uniform() * left;
    double sum = 0;
    std::size_t pick = n;
    std::size_t last_positive = n;
    for (std::size_t j = k; j < n; ++j) {
      if (weights[j] <= 0) continue;
      last_positive = j;
      sum += weights[j];
      if (r < sum) {
        pick = j;
        break;
      }
    }
    if (pick == n) pick = last_positive;  // rounding at the end of the running sum
    if (pick == n) break;                 // only zero weights are left
    left -= weights[pick];
    // Keep the rest in profile order (a rotation, not a swap): zero weights end in profile order.
    std::rotate(c.begin() + static_cast<long>(k), c.begin() + static_cast<long>(pick),
                c.begin() + static_cast<long>(pick) + 1);
    std::rotate(weights.begin() + static_cast<long>(k), weights.begin() + static_cast<long>(pick),
                weights.begin() + static_cast<long>(pick) + 1);
  }
  // Left undrawn: one candidate, or only zero weights; rotations kept them in profile order.
}

void load_balanced(Candidates& c, const RankInput& in) {
  by_position(c);
  std::shuffle(c.begin(), c.end(), in.rng->engine());
  uniform_probability(c);
}

void round_robin(Candidates& c, const RankInput& in) {
  by_position(c);
  if (!c.empty())
    std::rotate(c.begin(), c.begin() + static_cast<long>(in.rr_cursor % c.size()), c.end());
  for (std::size_t i = 0; i < c.size(); ++i)
    c[i].metric = static_cast<double>(in.rr_cursor % c.size());
  first_only_probability(c);
}

void random_first(Candidates& c, const RankInput& in) {
  by_position(c);
  if (!c.empty()) {
    auto pick = in.rng->below(c.size());
    std::rotate(c.begin(), c.begin() + static_cast<long>(pick),
                c.begin() + static_cast<long>(pick) + 1);
  }
  uniform_probability(c);
}

void weighted(Candidates& c, const RankInput& in) {
  by_position(c);
  auto& w = weight_buffer(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) w[i] = c[i].provider->weight;
  weighted_order(c, w, *in.rng);
}

void priority(Candidates& c, const RankInput&) {
  std::sort(c.begin(), c.end(),
            [](const Candidate& a, const Candidate& b) {  // positions are unique
              if (a.provider->priority != b.provider->priority)
                return a.provider->priority < b.provider->priority;
              return a.position < b.position;
            });
  for (auto& x : c) x.metric = x.provider->priority;
  first_only_probability(c);
}

bool qualifies(const LatencyStats& s, int min_calls, double min_success_rate) {
  return s.calls >= min_calls && s.has_latency() && s.success_rate >= min_success_rate;
}

void fastest(Candidates& c, const RankInput& in) {
  const auto& p = in.params->fastest;
  double baseline = cold_start_baseline(c, p.min_calls, p.min_success_rate);
  double worst = 0;
  for (const auto& x : c) {
    if (qualifies(x.stats, p.min_calls, p.min_success_rate))
      worst = std::max(worst, x.stats.p50_ms);
  }
  for (auto& x : c) {
    if (qualifies(x.stats, p.min_calls, p.min_success_rate)) {
      x.metric = x.stats.p50_ms;
      x.cold = false;
    } else if (x.stats.calls >= p.min_calls && x.stats.success_rate < p.min_success_rate) {
      // Enough data to know it fails too often: after every provider that qualifies.
      x.metric = std::max({worst, baseline, x.stats.p50_ms}) + 1.0;
      x.cold = false;
    } else {
      x.metric = baseline;
      x.cold = true;
    }
  }
  std::sort(c.begin(), c.end(),
            [](const Candidate& a, const Candidate& b) {  // positions are unique
              if (a.metric != b.metric) return a.metric < b.metric;
              return a.position < b.position;
            });
  first_only_probability(c);
}

void latency_weighted(Candidates& c, const RankInput& in) {
  by_position(c);
  const auto& p = in.params->latency_weighted;
  double baseline = cold_start_baseline(c, p.min_calls, 0.0);
  double best = std::numeric_limits<double>::infinity();
  for (const auto& x : c) {
    double eff = x.stats.calls >= p.min_calls && x.stats.has_latency() ? x.stats.p50_ms : baseline;
    if (eff > 0) best = std::min(best, std::max(eff, p.ms_floor));
  }
  if (!std::isfinite(best)) best = p.ms_floor;
  auto& w = weight_buffer(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    auto& x = c[i];
    x.cold = !(x.stats.calls >= p.min_calls && x.stats.has_latency());
    w[i] = latency_weight(x, best, baseline, p);
  }
  weighted_order(c, w, *in.rng);
}

using RankFn = void (*)(Candidates&, const RankInput&);

struct StrategyEntry {
  Strategy strategy;
  RankFn rank;
};

constexpr StrategyEntry kStrategies[] = {
    {Strategy::load_balanced, &load_balanced},
    {Strategy::round_robin, &round_robin},
    {Strategy::random, &random_first},
    {Strategy::weighted, &weighted},
    {Strategy::priority, &priority},
    {Strategy::fastest, &fastest},
    {Strategy::latency_weighted, &latency_weighted},
};

}  // namespace

TransportKind better_transport(const LatencyStats& http, const LatencyStats& ws, int min_calls,
                               double min_success_rate) {
  if (http.calls < min_calls || ws.calls < min_calls)
    return ws.calls < http.calls ? TransportKind::ws : TransportKind::http;
  const bool h = qualifies(http, min_calls, min_success_rate);
  const bool w = qualifies(ws, min_calls, min_success_rate);
  if (h != w) return w ? TransportKind::ws : TransportKind::http;
  if (!h) return ws.success_rate > http.success_rate ? TransportKind::ws : TransportKind::http;
  return ws.p50_ms < http.p50_ms ? TransportKind::ws : TransportKind::http;
}

double cold_start_baseline(std::span<const Candidate> c, int min_calls, double min_success_rate) {
  thread_local std::vector<double> p50s;
  p50s.clear();
  for (const auto& x : c) {
    if (qualifies(x.stats, min_calls, min_success_rate)) p50s.push_back(x.stats.p50_ms);
  }
  return p50s.empty() ? 0.0 : quantile_in_place(p50s, 0.75);
}

double latency_weight(const Candidate& c, double best_p50_ms, double baseline_ms,
                      const LatencyWeightedParams& p) {
  bool known = c.stats.calls >= p.min_calls && c.stats.has_latency();
  double p50 = known ? c.stats.p50_ms : baseline_ms;
  double latency_term = 1.0;
  if (p50 > 0) latency_term = power(best_p50_ms / std::max(p50, p.ms_floor), p.beta);
  latency_term = std::min(latency_term, 1.0);
  double success = c.stats.calls > 0 ? c.stats.success_rate : 1.0;
  // Few samples: trust the estimate less, but keep exploring (0.5 with none, 1 at min_calls).
  double confidence =
      p.min_calls <= 0
          ? 1.0
          : 0.5 + 0.5 * std::min(1.0, static_cast<double>(c.stats.calls) / p.min_calls);
  // A provider below the success-rate bar is halved on top of its lower success term.
  double calls_scale = c.stats.calls >= p.min_calls && success < p.min_success_rate ? 0.5 : 1.0;
  return std::max(p.explore_floor, latency_term * success * confidence * calls_scale);
}

Tier tier_of(BreakerState effective, bool rate_limited) {
  if (effective == BreakerState::half_open)
    return rate_limited ? Tier::half_open_rate_limited : Tier::half_open;
  return rate_limited ? Tier::rate_limited : Tier::healthy;
}

std::string_view tier_name(Tier t) {
  switch (t) {
    case Tier::healthy:
      return "healthy";
    case Tier::rate_limited:
      return "rate_limited";
    case Tier::half_open:
      return "half_open";
    case Tier::half_open_rate_limited:
      return "half_open_rate_limited";
    case Tier::stalled:
      return "stalled";
  }
  return "?";
}

void order_by_strategy(std::vector<Candidate>& c, const RankInput& in) {
  if (c.empty()) return;
  for (const auto& e : kStrategies) {
    if (e.strategy == in.strategy) {
      e.rank(c, in);
      return;
    }
  }
}

void apply_tiers(std::vector<Candidate>& c) {
  auto before = [](const Candidate& a, const Candidate& b) { return standing(a) < standing(b); };
  if (!std::is_sorted(c.begin(), c.end(), before)) std::stable_sort(c.begin(), c.end(), before);
  if (c.empty()) return;
  const int best = standing(c.front());
  double total = 0;
  for (const auto& x : c) {
    if (standing(x) == best) total += x.first_probability;
  }
  for (auto& x : c) {
    if (standing(x) != best) {
      x.first_probability = 0;
    } else if (total > 0) {
      x.first_probability /= total;
    }
  }
  // Deterministic strategies whose first choice fell to a lower tier: the best tier's first wins.
  if (total == 0) c.front().first_probability = 1.0;
}

void rank_candidates(std::vector<Candidate>& c, const RankInput& in) {
  order_by_strategy(c, in);
  apply_tiers(c);
}

}  // namespace rpcroute
