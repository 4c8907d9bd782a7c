// The Redis-backed health store (rpcroute/shared/store.hpp): options, the links' lifecycle
// (connect, handshake, down and back up) and what record() keeps to share. The reads and writes of
// a refresh round are in shared_sync.cpp.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "redis_link.hpp"
#include "rpcroute/shared/store.hpp"

namespace rpcroute::shared {

std::string_view link_state_name(LinkState s) {
  switch (s) {
    case LinkState::connecting:
      return "connecting";
    case LinkState::up:
      return "up";
    case LinkState::down:
      return "down";
  }
  return "down";
}

Result<std::optional<SharedOptions>> shared_options(const Profile& profile,
                                                    const std::string& flag_url,
                                                    const EnvLookup& env) {
  const auto& cfg = profile.shared_state;
  const bool from_flag = !flag_url.empty();
  const std::string& text = from_flag ? flag_url : cfg.redis;
  if (text.empty()) return std::optional<SharedOptions>{};
  auto url = parse_redis_url(text);
  if (!url) return tl::unexpected(url.error());
  SharedOptions out;
  out.url = std::move(*url);
  out.prefix = cfg.prefix;
  // rediss://: the profile's tls: settings (the flag's URL too, when the profile gives them),
  // else the system CA store.
  if (out.url.tls) out.tls = cfg.tls;
  if (from_flag) {
    if (auto pw = env("RPCROUTE_REDIS_PASSWORD"); pw && !pw->empty() && out.url.password.empty())
      out.url.password = *pw;
  } else {
    if (!cfg.user.empty()) out.url.user = cfg.user;
    if (!cfg.password.empty()) out.url.password = cfg.password;
  }
  for (const auto* s : {&out.url.password, &out.url.user}) {
    if (!s->empty()) out.secrets.push_back(*s);
  }
  for (auto& c : url_credentials(text)) out.secrets.push_back(std::move(c));
  return std::optional<SharedOptions>(std::move(out));
}

SharedStore::SharedStore(asio::io_context& io, StateStore& local, const Clock& clock,
                         SharedOptions options, Log log)
    : io_(io),
      local_(local),
      clock_(clock),
      options_(std::move(options)),
      log_(std::move(log)),
      timer_(io),
      lease_timer_(io) {
  status_.url = display_url(options_.url);
  status_.since_ms = clock_.now_ms();
  std::random_device rd;
  host_id_ = fmt::format("{:x}-{:x}", static_cast<unsigned>(::getpid()), rd());
  // A save of the local store replaces its state with the file's: what other hosts taught is put
  // back at once (else it would be missing until the next refresh).
  local_.set_reload_hook([this](State& state) { reapply(state); });
}

SharedStore::~SharedStore() {
  local_.set_reload_hook({});
  stop();
}

void SharedStore::watch(const Profile& profile) {
  if (!profiles_.insert(profile.name).second) return;
  for (const auto& chain : profile.chains) {
    chains_.try_emplace(chain_key(profile.name, chain));
    for (const auto& p : chain.providers) {
      auto& w = providers_[provider_key(profile.name, chain.name, p)];
      w.health = profile.health;
      if (p.rate_limit) w.quota = *p.rate_limit;
    }
  }
}

void SharedStore::start() {
  if (running_) return;
  running_ = true;
  auto on_lost = [this](const std::string& why) { lost(why); };
  // rediss://: the TLS connect and handshake are bounded by the budget too.
  commands_ = std::make_unique<RedisLink>(io_, clock_, options_.url, on_lost, &options_.tls,
                                          options_.budget_ms);
  events_ = std::make_unique<RedisLink>(io_, clock_, options_.url, on_lost, &options_.tls,
                                        options_.budget_ms);
  if (options_.url.tls && options_.tls.insecure)
    log_(
        fmt::format("rpcroute: warning: shared state: tls.insecure: the certificate of Redis at {} "
                    "is not checked",
                    status_.url));
  connect();
  arm_timer();
}

void SharedStore::stop() {
  running_ = false;
  timer_.cancel();
  lease_timer_.cancel();
  lease_timer_at_us_ = 0;
  if (commands_) commands_->close();
  if (events_) events_->close();
  for (auto& [key, w] : providers_) drop_lease(key, w);
  // Not down (nothing failed): what is recorded from now on waits for the next start().
  if (status_.state == LinkState::up) set_state(LinkState::connecting, "");
}

bool SharedStore::running_links() const {
  return commands_ && commands_->is_open() && status_.state != LinkState::down;
}

void SharedStore::arm_timer() {
  timer_.expires_after(std::chrono::milliseconds(options_.refresh_ms));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && running_) tick();
  });
}

void SharedStore::tick() {
  const auto now_us = clock_.mono_us();
  if (commands_->is_open() && commands_->oldest_wait_us(now_us) > options_.budget_ms * 1000) {
    // rediss://: still connecting or in the TLS handshake says so.
    const auto stage = commands_->relay_stage();
    lost(stage.empty() ? fmt::format("no answer within {} ms", options_.budget_ms)
                       : fmt::format("no {} within {} ms", stage, options_.budget_ms));
  }
  if (!commands_->is_open()) {
    if (now_us >= next_connect_us_) connect();
  } else if (up()) {
    flush();
    refresh();
    lease_trials();
  }
  arm_timer();
}

void SharedStore::connect() {
  std::string why;
  if (!commands_->open(why) || !events_->open(why)) {
    lost(why);
    return;
  }
  if (status_.state != LinkState::down) set_state(LinkState::connecting, "");
  handshake();
}

void SharedStore::handshake() {
  const auto& url = options_.url;
  auto on_auth = [this](const Reply& r) {
    if (r.kind == Reply::Kind::error) lost(fmt::format("authentication refused: {}", r.text));
  };
  for (auto* link : {commands_.get(), events_.get()}) {
    if (url.password.empty()) continue;
    if (url.user.empty()) {
      link->command({"AUTH", url.password}, on_auth);
    } else {
      link->command({"AUTH", url.user, url.password}, on_auth);
    }
  }
  if (url.db != 0) {
    const auto db = std::to_string(url.db);
    commands_->command({"SELECT", db}, [this](const Reply& r) {
      if (r.kind == Reply::Kind::error) lost(fmt::format("SELECT refused: {}", r.text));
    });
  }
  for (int i = 0; i < 4; ++i) {
    commands_->command({"SCRIPT", "LOAD", script(i)}, [this, i](const Reply& r) {
      if (r.kind == Reply::Kind::string) shas_[i] = r.text;
    });
  }
  const auto ch = channel(options_.prefix);
  events_->command(
      {"SUBSCRIBE", ch}, [this](const Reply& r) { on_message(r); }, true);
  commands_->command({"PING"}, [this](const Reply& r) {
    if (r.ok()) went_up();
  });
}

void SharedStore::lost(const std::string& why) {
  commands_->close();
  events_->close();
  for (auto& s : shas_) s.clear();
  for (auto& r : reloading_) r = false;
  next_connect_us_ = clock_.mono_us() + options_.retry_ms * 1000;
  // The tokens leased are the local buckets' now, refilling on their own.
  for (auto& [key, w] : providers_) drop_lease(key, w);
  if (status_.state == LinkState::down) return;
  ++status_.fallbacks;
  set_state(LinkState::down, why);
  log_(fmt::format(
      "rpcroute: warning: shared state: Redis at {} is unreachable ({}); routing on local state "
      "(quotas from each host's own bucket) until it returns",
      status_.url, status_.last_error));
}

void SharedStore::went_up() {
  const bool was_down = status_.state == LinkState::down;
  set_state(LinkState::up, "");
  logged_write_error_ = false;
  if (was_down || options_.announce)
    log_(fmt::format("rpcroute: shared state: Redis at {} is {}; sharing with every host on it",
                     status_.url, was_down ? "reachable again" : "reachable"));
  // What was learned meanwhile (kept while Redis was away) goes out, then what others learned
  // comes in: the merge back.
  for (auto& [key, w] : providers_) {
    if (w.breaker_t > 0) w.breaker_dirty = true;
  }
  flush();
  refresh();
}

void SharedStore::set_state(LinkState s, const std::string& why) {
  status_.state = s;
  status_.since_ms = clock_.now_ms();
  if (!why.empty()) status_.last_error = scrub(why);
}

std::string SharedStore::scrub(std::string text) const {
  for (const auto& secret : options_.secrets) {
    if (secret.empty()) continue;
    for (auto pos = text.find(secret); pos != std::string::npos; pos = text.find(secret, pos + 3))
      text.replace(pos, secret.size(), "***");
  }
  return text;
}

std::string_view SharedStore::script(int which) const {
  switch (which) {
    case 0:
      return kQuotaScript;
    case 1:
      return kProviderScript;
    case 3:
      return kLatencyScript;
    default:
      return kHighWaterScript;
  }
}

SharedStore::Watched& SharedStore::watched(std::string_view key, const HealthConfig& health) {
  auto it = providers_.find(key);
  if (it == providers_.end()) {
    it = providers_.emplace(std::string(key), Watched{}).first;
    it->second.health = health;
  }
  return it->second;
}

void SharedStore::record(Event event, const HealthConfig& health) {
  if (auto* a = std::get_if<AttemptEvent>(&event)) {
    auto& w = watched(a->key, health);
    const ProviderState* before = local_.provider(a->key);
    const auto state0 = before != nullptr ? before->breaker.state : BreakerState::closed;
    const auto opened0 = before != nullptr ? before->breaker.opened_ms : 0;
    const auto rl0 = before != nullptr ? before->rate_limited_until_ms : 0;
    const auto t = a->t_ms;
    const std::string* key = &providers_.find(a->key)->first;
    local_.record(std::move(event), health);
    const ProviderState* ps = local_.provider(*key);
    if (ps == nullptr) return;
    if (ps->breaker.state != state0 || ps->breaker.opened_ms != opened0) {
      w.breaker_t = std::max(t, w.breaker_t + 1);
      w.breaker_dirty = true;
      if (up()) write_provider(*key, w);  // at once, with a notice to every host
    }
    if (ps->rate_limited_until_ms > rl0) w.rate_limited_until_ms = ps->rate_limited_until_ms;
    return;
  }
  if (auto* h = std::get_if<HeightEvent>(&event)) {
    auto& w = watched(h->key, health);
    if (!w.height || h->height.t_ms >= w.height->t_ms) w.height = h->height;
  } else if (auto* q = std::get_if<QuotaEvent>(&event)) {
    auto& w = watched(q->key, health);
    w.quota = q->quota;
    w.spent += q->taken;
    if (w.leased) {
      // Spent from the lease; below half of its size, more is asked for at once.
      const std::string* key = &providers_.find(q->key)->first;
      w.held -= q->taken;
      local_.record(std::move(event), health);
      local_provider(local_.state(), *key, w).quota =
          lease_bucket(w.held, w.lease_until_ms, *w.quota);
      if (!w.asking && clock_.mono_us() >= w.next_ask_us && lease_ask(w.held, w.target).ask > 0)
        draw_quota(*key, w);
      return;
    }
    w.drawn += q->taken;
  } else if (auto* hw = std::get_if<HighWaterEvent>(&event)) {
    record_high_water(*hw, health);
    return;
  } else if (auto* f = std::get_if<FilterEvent>(&event)) {
    if (up() && storable_filter_key(f->key)) write_filter(f->key, f->pin);
  } else if (auto* sample = std::get_if<SampleEvent>(&event)) {
    add_latency(watched(sample->key, health), sample->method, sample->sample);
  } else if (auto* l = std::get_if<LogLimitEvent>(&event)) {
    auto& w = watched(l->key, health);
    if (!w.log_limit || l->limit.t_ms >= w.log_limit->t_ms) w.log_limit = l->limit;
  } else if (auto* c = std::get_if<CordonEvent>(&event)) {
    auto& w = watched(c->key, health);
    if (!w.cordon || newer_cordon(c->cordon, *w.cordon)) w.cordon = c->cordon;
    const std::string* key = &providers_.find(c->key)->first;
    local_.record(std::move(event), health);
    if (up()) write_provider(*key, w);  // at once, with a notice to every host
    return;
  }
  local_.record(std::move(event), health);
}

void SharedStore::add_latency(Watched& w, std::string_view method, const Sample& s) {
  // A WebSocket sample measures this host's socket (issue 18): kept locally, not shared.
  if (method.ends_with(kWsSuffix)) return;
  const auto window = s.t_ms / kLatencyWindowMs;
  auto& windows = w.latency_out;
  // Redis away for long: windows it would no longer keep are not kept here either.
  while (!windows.empty() && windows.begin()->first < window - kLatencyWindowsRead)
    windows.erase(windows.begin());
  if (!windows.empty() && window < windows.rbegin()->first - kLatencyWindowsRead) return;
  auto& methods = windows[window];
  const auto slot = catalogue_slot(method);
  auto it = methods.find(slot);
  if (it == methods.end()) it = methods.emplace(std::string(slot), LatencyCounts{}).first;
  it->second.add(s);
}

void SharedStore::record_high_water(const HighWaterEvent& e, const HealthConfig& health) {
  const ChainState* before = local_.chain(e.chain_key);
  const Height h0 = before != nullptr ? before->high_water : Height{};
  local_.record(e, health);
  const ChainState* after = local_.chain(e.chain_key);
  if (after == nullptr || (after->high_water.block == h0.block && !e.reset)) return;
  auto it = chains_.find(e.chain_key);
  if (it == chains_.end()) it = chains_.emplace(e.chain_key, WatchedChain{}).first;
  auto& c = it->second;
  const bool reset = e.reset || (c.pending && c.pending->reset);
  c.pending = HighWaterEvent{e.chain_key, after->high_water, reset};
  if (up()) write_chain(it->first, c);  // a new block: every host hears of it at once
}

}  // namespace rpcroute::shared
