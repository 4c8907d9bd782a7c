// One refresh round of the Redis-backed store: what this host learned goes out (merged by the Lua
// scripts of codec.cpp), what all hosts learned comes back and is folded into the local copy by
// the merge rules; trial leases for half-open breakers; the pub/sub notices.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>

#include "redis_link.hpp"
#include "rpcroute/shared/store.hpp"

namespace rpcroute::shared {

namespace {

template <class T>
std::optional<T> number(const std::optional<std::string>& text) {
  if (!text || text->empty()) return std::nullopt;
  T v{};
  auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc{} || ptr != text->data() + text->size()) return std::nullopt;
  return v;
}

std::optional<double> decimal(const std::optional<std::string>& text) {
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (end != text->c_str() + text->size()) return std::nullopt;
  return v;
}

}  // namespace

void SharedStore::eval(int which, std::vector<std::string_view> args,
                       std::function<void(const Reply&)> fn, const std::string& notice) {
  const auto publish = [this](const std::string& text) {
    commands_->command({"PUBLISH", channel(options_.prefix), text}, [](const Reply&) {});
  };
  if (shas_[which].empty()) {
    args.insert(args.begin(), {"EVAL", script(which)});
    commands_->command(args, std::move(fn));
  } else {
    // Redis may have forgotten the script (SCRIPT FLUSH, a failover to a replica that never
    // loaded it): NOSCRIPT. The same call goes again as EVAL, the notice after it, and SCRIPT LOAD
    // takes the SHA back; the caller sees only the EVAL's answer, never the NOSCRIPT.
    std::vector<std::string> kept(args.begin(), args.end());
    args.insert(args.begin(), {"EVALSHA", shas_[which]});
    commands_->command(args, [this, which, kept = std::move(kept), fn = std::move(fn), notice,
                              publish](const Reply& r) {
      if (r.kind != Reply::Kind::error || !r.text.starts_with("NOSCRIPT")) {
        fn(r);
        return;
      }
      reload_script(which);
      std::vector<std::string_view> again{"EVAL", script(which)};
      again.insert(again.end(), kept.begin(), kept.end());
      if (!commands_->command(again, fn)) fn(Reply{});  // the link went meanwhile
      if (!notice.empty()) publish(notice);
    });
  }
  if (!notice.empty()) publish(notice);
}

void SharedStore::reload_script(int which) {
  shas_[which].clear();  // EVAL (the text) until SCRIPT LOAD answers
  if (reloading_[which]) return;
  reloading_[which] = true;
  ++status_.script_reloads;
  const bool sent =
      commands_->command({"SCRIPT", "LOAD", script(which)}, [this, which](const Reply& r) {
        reloading_[which] = false;
        if (r.kind == Reply::Kind::string) shas_[which] = r.text;
      });
  if (!sent) reloading_[which] = false;  // the link went: the next connect loads every script
}

void SharedStore::check_write(const Reply& r) {
  if (r.kind != Reply::Kind::error) return;
  ++status_.write_errors;
  status_.last_error = scrub(r.text);
  if (logged_write_error_) return;
  logged_write_error_ = true;
  log_(
      fmt::format("rpcroute: warning: shared state: Redis at {} refuses writes ({}); reading "
                  "what others share, routing goes on",
                  status_.url, status_.last_error));
}

void SharedStore::flush() {
  for (auto& [key, w] : providers_) {
    if (w.breaker_dirty || w.rate_limited_until_ms > 0 || w.height || w.cordon || w.log_limit)
      write_provider(key, w);
    if (w.quota && w.quota->rps > 0) {
      // The lease's size follows this host's own use over the last refresh intervals.
      const auto now_us = clock_.mono_us();
      if (w.rate_at_us > 0)
        w.rate = spend_rate(w.rate, w.spent, static_cast<double>(now_us - w.rate_at_us) / 1e6);
      w.rate_at_us = now_us;
      w.spent = 0;
      w.target = lease_target(w.rate, options_.refresh_ms, *w.quota, w.hosts);
      draw_quota(key, w);
    }
    if (!w.latency_out.empty()) write_latency(key, w);
  }
  for (auto& [key, c] : chains_) {
    if (c.pending) write_chain(key, c);
  }
}

void SharedStore::refresh() {
  for (const auto& [key, w] : providers_) read_provider(key);
  for (const auto& [key, c] : chains_) read_chain(key);
  // Latency summaries change slowly (minute windows): read less often than the rest.
  if (const auto now_us = clock_.mono_us(); now_us >= next_latency_us_) {
    next_latency_us_ = now_us + options_.latency_ms * 1000;
    for (const auto& [key, w] : providers_) read_latency(key);
  }
  commands_->command({"PING"}, [this](const Reply& r) {
    if (r.ok()) {
      ++status_.syncs;
      ++rounds_answered_;
    }
  });
}

void SharedStore::write_provider(const std::string& key, Watched& w) {
  const ProviderState* ps = local_.provider(key);
  const auto ttl = std::to_string(kProviderTtlMs);
  std::string bt, b, rl, ht, h, ct, cv, lt, l;
  std::string_view br;
  if (w.breaker_dirty && ps != nullptr) {
    bt = std::to_string(w.breaker_t);
    b = encode_breaker(ps->breaker);
    br = clip(ps->breaker.reason);
  }
  if (w.rate_limited_until_ms > 0) rl = std::to_string(w.rate_limited_until_ms);
  if (w.height) {
    ht = std::to_string(w.height->t_ms);
    h = encode_height(*w.height);
  }
  if (w.cordon) {
    ct = std::to_string(w.cordon->t_ms);
    cv = encode_cordon(*w.cordon);
  }
  if (w.log_limit && w.log_limit->blocks > 0) {
    lt = std::to_string(w.log_limit->t_ms);
    l = std::to_string(w.log_limit->blocks);
  }
  const auto hash = provider_hash(options_.prefix, key);
  // The notice after the write on the same connection: whoever hears it reads the new breaker (or
  // cordon).
  eval(
      1, {"1", hash, ttl, bt, b, br, rl, ht, h, ct, cv, lt, l},
      [this](const Reply& r) { check_write(r); },
      w.breaker_dirty || w.cordon ? "b\n" + key : std::string());
  w.breaker_dirty = false;
  w.rate_limited_until_ms = 0;
  w.height.reset();
  w.cordon.reset();
  w.log_limit.reset();
}

void SharedStore::write_chain(const std::string& key, WatchedChain& c) {
  const auto& e = *c.pending;
  const auto block = std::to_string(e.height.block);
  const auto t = std::to_string(e.height.t_ms);
  const auto ttl = std::to_string(kChainTtlMs);
  eval(
      2, {"1", chain_hash(options_.prefix, key), block, t, e.reset ? "1" : "0", ttl},
      [this, key](const Reply& r) {
        check_write(r);
        if (r.kind == Reply::Kind::array) adopt_chain(key, r);
      },
      "c\n" + key);
  c.pending.reset();
}

void SharedStore::write_filter(const std::string& key, const FilterPin& pin) {
  const auto value = fmt::format("{}\n{}", pin.provider, pin.t_ms);
  commands_->command(
      {"SET", filter_string(options_.prefix, key), value, "PX", std::to_string(kFilterTtlMs)},
      [this](const Reply& r) { check_write(r); });
  commands_->command({"PUBLISH", channel(options_.prefix), "f\n" + key + "\n" + value},
                     [](const Reply&) {});
}

void SharedStore::write_latency(const std::string& key, Watched& w) {
  const auto ttl = std::to_string(kLatencyTtlMs);
  const auto cap = std::to_string(kLatencyMaxFields);
  std::vector<std::string> texts;
  std::vector<std::string_view> args;
  for (const auto& [window, methods] : w.latency_out) {
    texts.clear();
    for (const auto& [method, c] : methods) {
      for (int i = 0; i < kLatencyBuckets; ++i) {
        const auto n = c.answered[static_cast<std::size_t>(i)];
        if (n == 0) continue;
        texts.push_back(latency_field(method, i));
        texts.push_back(std::to_string(n));
      }
      if (c.failed > 0) {
        texts.push_back(latency_field(method, -1));
        texts.push_back(std::to_string(c.failed));
      }
    }
    if (texts.empty()) continue;
    const auto hash = latency_hash(options_.prefix, key, window);
    args.assign({"1", hash, ttl, cap});
    for (const auto& t : texts) args.emplace_back(t);
    eval(3, args, [this](const Reply& r) { check_write(r); });
  }
  w.latency_out.clear();
}

void SharedStore::read_latency(const std::string& key) {
  auto it = providers_.find(key);
  if (it == providers_.end()) return;
  it->second.latency_in.clear();
  const auto now = clock_.now_ms();
  const auto current = now / kLatencyWindowMs;
  for (int i = kLatencyWindowsRead - 1; i >= 0; --i) {
    const auto window = current - i;
    const auto end_ms = std::min(now, (window + 1) * kLatencyWindowMs - 1);
    commands_->command({"HGETALL", latency_hash(options_.prefix, key, window)},
                       [this, key, end_ms, last = i == 0](const Reply& r) {
                         adopt_latency(key, r, end_ms, last);
                       });
  }
}

void SharedStore::adopt_latency(const std::string& key, const Reply& r, std::int64_t end_ms,
                                bool last) {
  auto it = providers_.find(key);
  if (it == providers_.end()) return;
  auto& w = it->second;
  if (r.kind == Reply::Kind::none) {  // the link went: this read is incomplete
    w.latency_in.clear();
    return;
  }
  if (r.kind == Reply::Kind::array) {
    for (std::size_t i = 0; i + 1 < r.items.size(); i += 2) {
      if (r.items[i] && r.items[i + 1])
        add_latency_count(w.latency_in, *r.items[i], *r.items[i + 1], end_ms);
    }
  }
  if (!last) return;
  std::map<std::string, SharedLatency, std::less<>> summary;
  for (const auto& [method, counts] : w.latency_in)
    summary.emplace(method, summarize_counts(counts));
  w.latency_in.clear();
  if (summary.empty() && w.remote_latency.empty()) return;
  w.remote_latency = summary;
  local_provider(local_.state(), key, w).shared_latency = std::move(summary);
}

void SharedStore::draw_quota(const std::string& key, Watched& w) {
  if (w.asking || !w.quota) return;
  // One EVALSHA says everything: what was spent outside a lease (taken as is), what the lease
  // asks for or gives back. One-shot commands lease nothing: they read the shared level.
  LeaseAsk a;
  const auto now_ms = clock_.now_ms();
  if (leasing_) {
    a = lease_ask(w.leased ? w.held : 0, w.target);
    if (clock_.mono_us() < w.next_ask_us) a.ask = 0;  // the bucket was empty: not before then
    const bool lapsing = !w.leased || w.lease_until_ms - now_ms <= 2 * options_.refresh_ms;
    if (w.drawn == 0 && a.ask == 0 && a.give_back == 0 && !lapsing) return;
  }
  const auto take = fmt::format("{}", w.drawn);
  const auto ask = fmt::format("{}", a.ask);
  const auto back = fmt::format("{}", a.give_back);
  w.drawn = 0;
  if (w.leased) w.held -= a.give_back;
  w.asking = true;
  const auto rps = fmt::format("{}", w.quota->rps);
  const auto burst = fmt::format("{}", w.quota->burst);
  const auto ttl = std::to_string(quota_ttl_ms(*w.quota));
  const auto window = std::to_string(kLeaseHostsWindowMs);
  eval(0,
       {"2", quota_hash(options_.prefix, key), quota_hosts(options_.prefix, key), take, ask, back,
        rps, burst, ttl, leasing_ ? std::string_view(host_id_) : std::string_view(), window},
       [this, key](const Reply& r) {
         auto it = providers_.find(key);
         if (it == providers_.end() || !it->second.quota) return;
         auto& w = it->second;
         w.asking = false;
         check_write(r);
         if (r.kind == Reply::Kind::none) return;  // the link went: lost() fell back
         const auto granted = r.kind == Reply::Kind::array && r.items.size() == 4
                                  ? number<std::int64_t>(r.items[0])
                                  : std::nullopt;
         const auto level = granted ? decimal(r.items[1]) : std::nullopt;
         const auto hosts = granted ? number<int>(r.items[2]) : std::nullopt;
         const auto wait = granted ? number<std::int64_t>(r.items[3]) : std::nullopt;
         if (!granted || !level || !hosts || !wait || *granted < 0) {
           // Refused (a full Redis: OOM) or not understood: the local bucket, as without Redis.
           drop_lease(key, w);
           return;
         }
         const auto now = clock_.now_ms();
         auto& ps = local_provider(local_.state(), key, w);
         if (!leasing_) {
           // The shared level at Redis's now is the level here now: no host clock in between.
           // Draws made since this one was sent are this host's own: still to come off.
           w.remote_bucket = adopt_bucket(*level, now, 0, *w.quota);
           ps.quota = adopt_bucket(*level, now, w.drawn, *w.quota);
           return;
         }
         w.hosts = std::max(1, *hosts);
         if (!w.leased) {
           // From the local bucket to the lease: what the local bucket spent meanwhile is in
           // `drawn`, taken with the next round.
           w.leased = true;
           w.held = 0;
         }
         w.held += static_cast<double>(*granted);
         w.lease_until_ms = now + lease_ttl_ms(options_.refresh_ms);
         ps.quota = lease_bucket(w.held, w.lease_until_ms, *w.quota);
         if (*granted == 0 && lease_ask(w.held, w.target).ask > 0) {
           // The shared bucket is empty: ask again when it holds a token.
           w.next_ask_us = clock_.mono_us() + std::max<std::int64_t>(*wait, 1) * 1000;
           arm_lease_timer(w.next_ask_us);
         } else if (lease_ask(w.held, w.target).ask > 0) {
           draw_quota(key, w);  // spent faster than granted meanwhile: at once
         }
       });
}

void SharedStore::drop_lease(const std::string& key, Watched& w) {
  w.asking = false;
  w.next_ask_us = 0;
  if (!w.leased || !w.quota) return;
  w.leased = false;
  // What is left of the lease is the local bucket's, refilling from now on (as without Redis).
  auto& ps = local_provider(local_.state(), key, w);
  ps.quota = Bucket{std::clamp(w.held, -w.quota->burst, w.quota->burst), clock_.now_ms()};
  w.held = 0;
}

void SharedStore::arm_lease_timer(std::int64_t at_us) {
  if (lease_timer_at_us_ != 0 && lease_timer_at_us_ <= at_us) return;
  lease_timer_at_us_ = at_us;
  lease_timer_.expires_after(
      std::chrono::microseconds(std::max<std::int64_t>(0, at_us - clock_.mono_us())));
  lease_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    lease_timer_at_us_ = 0;
    if (!running_ || !up()) return;
    const auto now_us = clock_.mono_us();
    for (auto& [key, w] : providers_) {
      if (!w.leased || w.asking || lease_ask(w.held, w.target).ask <= 0) continue;
      if (now_us >= w.next_ask_us) {
        draw_quota(key, w);
      } else {
        arm_lease_timer(w.next_ask_us);
      }
    }
  });
}

void SharedStore::read_provider(const std::string& key) {
  commands_->command({"HMGET", provider_hash(options_.prefix, key), "bt", "b", "br", "rl", "ht",
                      "h", "ct", "cv", "lt", "l"},
                     [this, key](const Reply& r) { adopt_provider(key, r); });
}

ProviderState& SharedStore::local_provider(State& state, const std::string& key, const Watched& w) {
  if (auto it = state.providers.find(key); it != state.providers.end()) return it->second;
  // Created from its key as any event creates it; a zero height changes nothing else.
  apply_event(state, HeightEvent{key, Height{}}, w.health);
  return state.providers.find(key)->second;
}

void SharedStore::adopt_provider(const std::string& key, const Reply& r) {
  auto it = providers_.find(key);
  if (r.kind != Reply::Kind::array || r.items.size() != 10 || it == providers_.end()) return;
  auto& w = it->second;
  const auto& v = r.items;
  ProviderState* ps = nullptr;
  auto entry = [&]() -> ProviderState& {
    if (ps == nullptr) ps = &local_provider(local_.state(), key, w);
    return *ps;
  };
  Breaker remote;
  const auto bt = number<std::int64_t>(v[0]);
  if (bt && v[1] && decode_breaker(*v[1], remote) && *bt > w.breaker_t) {
    remote.reason = v[2] ? valid_utf8(clip(*v[2])) : std::string();
    w.remote_breaker_t = *bt;
    w.remote_breaker = remote;
    if (adopt_breaker(entry().breaker, w.breaker_t, remote, *bt)) ++status_.adopted;
  }
  if (auto rl = number<std::int64_t>(v[3]); rl && *rl > entry().rate_limited_until_ms) {
    w.remote_rate_limited_until_ms = std::max(w.remote_rate_limited_until_ms, *rl);
    if (adopt_rate_limit(entry().rate_limited_until_ms, *rl)) ++status_.adopted;
  }
  Height h;
  if (v[5] && decode_height(*v[5], h) && h.t_ms > 0) {
    if (h.t_ms > w.remote_height.t_ms) w.remote_height = h;
    if (adopt_height(entry().height, h)) ++status_.adopted;
  }
  Cordon cordon;
  const auto ct = number<std::int64_t>(v[6]);
  if (ct && *ct > 0 && v[7] && decode_cordon(*v[7], cordon)) {
    cordon.t_ms = *ct;
    if (newer_cordon(cordon, w.remote_cordon)) w.remote_cordon = cordon;
    if (newer_cordon(cordon, entry().cordon)) {
      entry().cordon = std::move(cordon);
      ++status_.adopted;
    }
  }
  const auto lt = number<std::int64_t>(v[8]);
  const auto lb = number<std::uint64_t>(v[9]);
  if (lt && lb && *lt > 0 && *lb > 0) {
    const LogLimit limit{*lb, *lt};
    adopt_log_limit(w.remote_log_limit, limit);
    if (adopt_log_limit(entry().log_limit, limit)) ++status_.adopted;
  }
}

void SharedStore::read_chain(const std::string& key) {
  commands_->command({"HMGET", chain_hash(options_.prefix, key), "b", "t", "g"},
                     [this, key](const Reply& r) { adopt_chain(key, r); });
}

void SharedStore::adopt_chain(const std::string& key, const Reply& r) {
  auto it = chains_.find(key);
  if (r.kind != Reply::Kind::array || r.items.size() != 3 || it == chains_.end()) return;
  const auto block = number<std::uint64_t>(r.items[0]);
  const auto t = number<std::int64_t>(r.items[1]);
  const auto g = number<std::uint64_t>(r.items[2]).value_or(0);
  if (!block || !t) return;
  auto& c = it->second;
  const Height remote{*block, *t};
  if (g > c.remote_generation || remote.block > c.remote.block) {
    c.remote = remote;
    c.remote_generation = std::max(c.remote_generation, g);
  }
  auto& hw = local_.state().chains[key].high_water;
  if (adopt_high_water(hw, c.generation, remote, g)) ++status_.adopted;
}

void SharedStore::on_message(const Reply& r) {
  // ["message", channel, payload]; the subscribe confirmation is ["subscribe", channel, 1].
  if (r.kind != Reply::Kind::array || r.items.size() != 3 || !r.items[0] || !r.items[2] ||
      *r.items[0] != "message")
    return;
  const std::string& text = *r.items[2];
  if (text.size() < 3 || text[1] != '\n') return;
  const auto rest = std::string_view(text).substr(2);
  if (text[0] == 'b' && up()) {
    if (auto it = providers_.find(rest); it != providers_.end()) read_provider(it->first);
  } else if (text[0] == 'c' && up()) {
    if (auto it = chains_.find(rest); it != chains_.end()) read_chain(it->first);
  } else if (text[0] == 'f') {
    // KEY \n PROVIDER \n T
    const auto a = rest.find('\n');
    const auto b = a == std::string_view::npos ? a : rest.find('\n', a + 1);
    if (b == std::string_view::npos) return;
    const auto key = rest.substr(0, a);
    const auto t = number<std::int64_t>(std::string(rest.substr(b + 1)));
    if (!t || !storable_filter_key(key)) return;
    FilterPin pin{std::string(rest.substr(a + 1, b - a - 1)), *t};
    if (remote_filters_.size() >= kMaxFilters) remote_filters_.erase(remote_filters_.begin());
    remote_filters_[std::string(key)] = pin;
    apply_event(local_.state(), FilterEvent{std::string(key), std::move(pin)}, HealthConfig{});
    ++status_.adopted;
  }
}

void SharedStore::lease_trials() {
  // All hosts share one breaker, so they would all half-open at the same instant, each sending its
  // trial: the first to take the lease probes; the others push their half-open back by a lease and
  // learn the outcome from the winner's transition.
  const auto now = clock_.now_ms();
  const auto lease_ms = std::max<std::int64_t>(2'000, 4 * options_.refresh_ms);
  for (auto& entry : providers_) {
    // Not a structured binding: the callback captures the key (clang 14 refuses a binding there).
    const std::string& key = entry.first;
    Watched& w = entry.second;
    const ProviderState* ps = local_.provider(key);
    if (ps == nullptr || ps->breaker.state != BreakerState::open) continue;
    const auto deadline = ps->breaker.opened_ms + ps->breaker.recovery_ms;
    if (deadline - now > 2 * options_.refresh_ms || w.trial_for_ms == deadline) continue;
    w.trial_for_ms = deadline;
    commands_->command(
        {"SET", trial_string(options_.prefix, key), host_id_, "NX", "PX", std::to_string(lease_ms)},
        [this, key, deadline, lease_ms](const Reply& r) {
          if (r.kind != Reply::Kind::nil) return;  // ours (or an error: probe as alone)
          auto it = providers_.find(key);
          auto& providers = local_.state().providers;
          auto found = providers.find(key);
          if (it == providers_.end() || found == providers.end()) return;
          auto& b = found->second.breaker;
          if (b.state != BreakerState::open || b.opened_ms + b.recovery_ms != deadline) return;
          b.recovery_ms += lease_ms;
          it->second.trial_for_ms = deadline + lease_ms;
        });
  }
}

void SharedStore::reapply(State& state) {
  for (auto& [key, w] : providers_) {
    const bool breaker = w.remote_breaker_t > 0 && w.remote_breaker_t == w.breaker_t;
    if (!breaker && w.remote_rate_limited_until_ms == 0 && w.remote_height.t_ms == 0 &&
        !w.remote_bucket && !w.leased && w.remote_cordon.t_ms == 0 &&
        w.remote_log_limit.blocks == 0 && w.remote_latency.empty())
      continue;
    auto& ps = local_provider(state, key, w);
    if (breaker) {
      auto known = w.remote_breaker_t - 1;
      adopt_breaker(ps.breaker, known, w.remote_breaker, w.remote_breaker_t);
    }
    adopt_rate_limit(ps.rate_limited_until_ms, w.remote_rate_limited_until_ms);
    adopt_height(ps.height, w.remote_height);
    if (w.leased && w.quota) {
      ps.quota = lease_bucket(w.held, w.lease_until_ms, *w.quota);
    } else if (w.remote_bucket && w.quota) {
      ps.quota = adopt_bucket(w.remote_bucket->tokens, w.remote_bucket->t_ms, w.drawn, *w.quota);
    }
    if (newer_cordon(w.remote_cordon, ps.cordon)) ps.cordon = w.remote_cordon;
    adopt_log_limit(ps.log_limit, w.remote_log_limit);
    ps.shared_latency = w.remote_latency;
  }
  for (auto& [key, c] : chains_) {
    if (c.remote.t_ms == 0) continue;
    auto known = c.generation;
    adopt_high_water(state.chains[key].high_water, known, c.remote, c.remote_generation);
  }
  for (const auto& [key, pin] : remote_filters_) {
    if (state.filters.find(key) == state.filters.end())
      apply_event(state, FilterEvent{key, pin}, HealthConfig{});
  }
}

void SharedStore::run_until(const std::function<bool()>& done, std::int64_t budget_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(budget_ms);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io_.run_one_until(deadline);
    if (io_.stopped()) io_.restart();
  }
}

void SharedStore::warm_up(std::int64_t budget_ms) {
  leasing_ = false;  // a one-shot command reads the shared level and draws as is
  const auto target = rounds_answered_ + 1;
  start();
  run_until([this, target] { return rounds_answered_ >= target || !running_links(); }, budget_ms);
  stop();
}

void SharedStore::flush_now(std::int64_t budget_ms) {
  if (status_.state == LinkState::down) return;  // the warm-up found it away: not again
  leasing_ = false;
  const auto target = rounds_answered_ + 1;
  start();  // once up, went_up() flushes what was recorded and reads back: one round
  run_until([this, target] { return rounds_answered_ >= target || !running_links(); }, budget_ms);
  stop();
}

}  // namespace rpcroute::shared
