// The shared state's key layout, value texts, merge rules and Lua scripts
// (rpcroute/shared/codec.hpp).
#include "rpcroute/shared/codec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace rpcroute::shared {

namespace {

template <class T>
bool read_number(std::string_view& text, T& out) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  if (ec != std::errc{} || ptr == text.data()) return false;
  text.remove_prefix(static_cast<std::size_t>(ptr - text.data()));
  return true;
}

std::string percent_decoded(std::string_view s) {
  std::string out;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string key(std::string_view prefix, std::string_view kind, std::string_view name) {
  std::string out;
  out.reserve(prefix.size() + kind.size() + name.size());
  out.append(prefix).append(kind).append(name);
  return out;
}

}  // namespace

Result<RedisUrl> parse_redis_url(std::string_view url) {
  RedisUrl out;
  std::string_view rest;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("rediss://")) {
    rest = url.substr(9);
    out.tls = true;
  } else {
    return fail("shared state: the URL must start with redis:// or rediss://");
  }
  const auto path_pos = rest.find('/');
  auto authority = rest.substr(0, path_pos);
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    const auto info = authority.substr(0, at);
    const auto colon = info.find(':');
    out.user = percent_decoded(info.substr(0, colon));
    if (colon != std::string_view::npos) out.password = percent_decoded(info.substr(colon + 1));
    authority = authority.substr(at + 1);
  }
  // [v6]:port or host:port.
  std::string_view port_text;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return fail("shared state: bad IPv6 address in the URL");
    out.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return fail("shared state: bad port in the URL");
      port_text = authority.substr(close + 2);
    }
  } else {
    const auto colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) return fail("shared state: the URL names no host");
  if (!port_text.empty() && (!read_number(port_text, out.port) || !port_text.empty() ||
                             out.port <= 0 || out.port > 65535))
    return fail("shared state: bad port in the URL");
  if (path_pos != std::string_view::npos) {
    auto db = rest.substr(path_pos + 1);
    if (!db.empty() && (!read_number(db, out.db) || !db.empty() || out.db < 0))
      return fail("shared state: the URL's path must be a database number (redis://host/0)");
  }
  return out;
}

std::string display_url(const RedisUrl& url) {
  const bool v6 = url.host.find(':') != std::string::npos;
  return fmt::format("{}://{}{}{}:{}/{}", url.tls ? "rediss" : "redis", v6 ? "[" : "", url.host,
                     v6 ? "]" : "", url.port, url.db);
}

std::string provider_hash(std::string_view prefix, std::string_view provider_key) {
  return key(prefix, "p:", provider_key);
}
std::string quota_hash(std::string_view prefix, std::string_view provider_key) {
  return key(prefix, "q:", provider_key);
}
std::string quota_hosts(std::string_view prefix, std::string_view provider_key) {
  return key(prefix, "qh:", provider_key);
}
std::string chain_hash(std::string_view prefix, std::string_view chain_key) {
  return key(prefix, "c:", chain_key);
}
std::string filter_string(std::string_view prefix, std::string_view filter_key) {
  return key(prefix, "f:", filter_key);
}
std::string trial_string(std::string_view prefix, std::string_view provider_key) {
  return key(prefix, "trial:", provider_key);
}
std::string channel(std::string_view prefix) { return key(prefix, "ev", ""); }

std::string latency_hash(std::string_view prefix, std::string_view provider_key,
                         std::int64_t window) {
  return fmt::format("{}l:{}:{}", prefix, provider_key, window);
}

int latency_bucket(std::int64_t latency_us) {
  if (latency_us < 100) return 0;
  const double i = std::floor(2.0 * std::log2(static_cast<double>(latency_us) / 100.0)) + 1;
  return static_cast<int>(std::min<double>(i, kLatencyBuckets - 1));
}

double latency_bucket_ms(int bucket) {
  if (bucket <= 0) return 0.05;
  return 0.1 * std::exp2((bucket - 0.5) / 2.0);
}

void LatencyCounts::add(const Sample& s) {
  if (s.outcome == Outcome::success || s.outcome == Outcome::rpc_error) {
    ++answered[static_cast<std::size_t>(latency_bucket(s.latency_us))];
  } else {
    ++failed;
  }
  newest_ms = std::max(newest_ms, s.t_ms);
}

bool LatencyCounts::empty() const {
  return failed == 0 &&
         std::all_of(answered.begin(), answered.end(), [](auto n) { return n == 0; });
}

std::string latency_field(std::string_view method, int bucket) {
  if (bucket < 0) return fmt::format("{}:x", method);
  return fmt::format("{}:{}", method, bucket);
}

bool parse_latency_field(std::string_view field, std::string_view& method, int& bucket) {
  const auto colon = field.rfind(':');
  if (colon == std::string_view::npos) return false;
  method = field.substr(0, colon);
  if (catalogue_slot(method) != method) return false;
  auto rest = field.substr(colon + 1);
  if (rest == "x") {
    bucket = -1;
    return true;
  }
  return read_number(rest, bucket) && rest.empty() && bucket >= 0 && bucket < kLatencyBuckets;
}

void add_latency_count(std::map<std::string, LatencyCounts, std::less<>>& into,
                       std::string_view field, std::string_view count, std::int64_t window_end_ms) {
  std::string_view method;
  int bucket = 0;
  std::uint32_t n = 0;
  if (!parse_latency_field(field, method, bucket) || !read_number(count, n) || !count.empty() ||
      n == 0)
    return;
  auto it = into.find(method);
  if (it == into.end()) {
    if (into.size() >= kMaxMethodsPerProvider) return;
    it = into.emplace(std::string(method), LatencyCounts{}).first;
  }
  auto& c = it->second;
  // Saturating: counts written by others are not trusted to stay small.
  auto add = [n](std::uint32_t& to) {
    constexpr auto kTop = std::numeric_limits<std::uint32_t>::max();
    to = to > kTop - n ? kTop : to + n;
  };
  if (bucket < 0) {
    add(c.failed);
  } else {
    add(c.answered[static_cast<std::size_t>(bucket)]);
  }
  c.newest_ms = std::max(c.newest_ms, window_end_ms);
}

SharedLatency summarize_counts(const LatencyCounts& c) {
  std::uint64_t answered = 0;
  for (auto n : c.answered) answered += n;
  constexpr std::uint64_t kMax = 1'000'000'000;  // fits an int
  SharedLatency out;
  out.answered = static_cast<int>(std::min(answered, kMax));
  out.calls = static_cast<int>(std::min(answered + c.failed, kMax));
  out.newest_ms = c.newest_ms;
  if (answered == 0) return out;
  std::uint64_t seen = 0;
  for (int i = 0; i < kLatencyBuckets; ++i) {
    seen += c.answered[static_cast<std::size_t>(i)];
    if (2 * seen >= answered) {
      out.p50_ms = latency_bucket_ms(i);
      break;
    }
  }
  return out;
}

std::int64_t quota_ttl_ms(const Quota& quota) {
  // Empty to full takes 2 * burst / rps; a minute at least.
  const double refill_ms = quota.rps > 0 ? 2.0 * (quota.burst + 1) / quota.rps * 1000.0 : 0;
  return std::max<std::int64_t>(60'000, static_cast<std::int64_t>(std::min(refill_ms, 864e5)));
}

std::string encode_breaker(const Breaker& b) {
  return fmt::format("{} {} {} {}", static_cast<int>(b.state), b.opened_ms, b.recovery_ms,
                     b.reopens);
}

bool decode_breaker(std::string_view text, Breaker& out) {
  int state = 0;
  Breaker b;
  if (!read_number(text, state) || !read_number(text, b.opened_ms) ||
      !read_number(text, b.recovery_ms) || !read_number(text, b.reopens) || !text.empty())
    return false;
  if (state < 0 || state > 2 || b.opened_ms < 0 || b.recovery_ms < 0 || b.reopens < 0) return false;
  b.state = static_cast<BreakerState>(state);
  out = b;
  return true;
}

std::string encode_height(const Height& h) { return fmt::format("{} {}", h.block, h.t_ms); }

bool decode_height(std::string_view text, Height& out) {
  Height h;
  if (!read_number(text, h.block) || !read_number(text, h.t_ms) || !text.empty() || h.t_ms < 0)
    return false;
  out = h;
  return true;
}

std::string encode_cordon(const Cordon& c) {
  return fmt::format("{} {} {}", c.on ? 1 : 0, c.until_ms, c.reason);
}

bool decode_cordon(std::string_view text, Cordon& out) {
  int on = 0;
  Cordon c;
  if (!read_number(text, on) || (on != 0 && on != 1) || !read_number(text, c.until_ms) ||
      c.until_ms < 0)
    return false;
  if (!text.empty()) {
    if (text.front() != ' ') return false;
    text.remove_prefix(1);
  }
  c.on = on == 1;
  c.reason = clean_cordon_reason(text);
  out = std::move(c);  // its time is the field ct
  return true;
}

bool adopt_breaker(Breaker& local, std::int64_t& known_t, const Breaker& remote,
                   std::int64_t remote_t) {
  if (remote_t <= known_t) return false;
  known_t = remote_t;
  const auto reason = std::move(local.reason);
  local = remote;
  local.failures = 0;
  local.successes = 0;
  local.reason = remote.reason.empty() ? reason : remote.reason;
  return true;
}

bool adopt_rate_limit(std::int64_t& local, std::int64_t remote) {
  if (remote <= local) return false;
  local = remote;
  return true;
}

bool adopt_height(Height& local, const Height& remote) {
  if (remote.t_ms > local.t_ms || (remote.t_ms == local.t_ms && remote.block > local.block)) {
    local = remote;
    return true;
  }
  return false;
}

bool adopt_log_limit(LogLimit& local, const LogLimit& remote) {
  if (remote.blocks == 0) return false;
  if (remote.t_ms > local.t_ms ||
      (remote.t_ms == local.t_ms && (local.blocks == 0 || remote.blocks < local.blocks))) {
    const bool changed = remote.blocks != local.blocks;
    local = remote;
    return changed;
  }
  return false;
}

bool adopt_high_water(Height& local, std::uint64_t& known_gen, const Height& remote,
                      std::uint64_t remote_gen) {
  if (remote_gen > known_gen) {
    known_gen = remote_gen;
    const bool changed = local.block != remote.block || local.t_ms != remote.t_ms;
    local = remote;
    return changed;
  }
  if (remote_gen < known_gen) return false;  // a mark from before a reset this host knows of
  if (remote.block > local.block || (remote.block == local.block && remote.t_ms > local.t_ms)) {
    local = remote;
    return true;
  }
  return false;
}

Bucket adopt_bucket(double remote_tokens, std::int64_t remote_t, double drawn_since,
                    const Quota& quota) {
  return Bucket{std::max(remote_tokens - drawn_since, -quota.burst), remote_t};
}

int lease_target(double rate_per_s, std::int64_t refresh_ms, const Quota& quota, int hosts) {
  const double share = std::max(1.0, std::floor(quota.burst / std::max(1, hosts)));
  const double use =
      std::ceil(std::max(0.0, rate_per_s) * static_cast<double>(refresh_ms) / 1000.0);
  return static_cast<int>(std::clamp(use, 1.0, share));
}

LeaseAsk lease_ask(double held, int target) {
  LeaseAsk out;
  const double want = std::max(1, target);
  if (held < std::max(1.0, want / 2)) {
    out.ask = std::ceil(want - held);
  } else if (held - want >= 1) {
    out.give_back = std::floor(held - want);
  }
  return out;
}

double spend_rate(double previous, double spent, double seconds) {
  if (seconds <= 0) return previous;
  return 0.5 * previous + 0.5 * std::max(0.0, spent) / seconds;
}

std::int64_t lease_ttl_ms(std::int64_t refresh_ms) {
  return std::max<std::int64_t>(1'000, 4 * refresh_ms);
}

Bucket lease_bucket(double held, std::int64_t until_ms, const Quota& quota) {
  return Bucket{std::clamp(held, -quota.burst, quota.burst), until_ms};
}

LeaseGrant grant_lease(Bucket& shared, std::int64_t now_ms, double take, double ask,
                       double give_back, const Quota& quota) {
  if (shared.t_ms == 0) shared = Bucket{quota.burst, now_ms};
  const auto at = std::max(now_ms, shared.t_ms);
  double level = std::min(quota.burst, bucket_level(shared, quota, at) + give_back);
  level = std::max(level - take, -quota.burst);
  LeaseGrant out;
  if (ask > 0 && level >= 1) out.granted = std::min(std::floor(ask), std::floor(level));
  level -= out.granted;
  shared = Bucket{level, at};
  out.level = level;
  if (level < 1) {
    out.wait_ms = quota.rps > 0
                      ? static_cast<std::int64_t>(std::ceil((1 - level) / quota.rps * 1000.0))
                      : kNoRefillWaitMs;
  }
  return out;
}

const std::string_view kQuotaScript = R"lua(
local k, hk = KEYS[1], KEYS[2]
local take, ask, back = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local rps, burst, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local v = redis.call('HMGET', k, 'tokens', 't')
local tokens, t = tonumber(v[1]), tonumber(v[2])
if tokens == nil or t == nil or t == 0 then tokens = burst; t = now end
local at = math.max(now, t)
local level = math.min(burst, math.min(burst, tokens + (at - t) / 1000 * rps) + back)
level = math.max(level - take, -burst)
local granted = 0
if ask > 0 and level >= 1 then granted = math.min(math.floor(ask), math.floor(level)) end
level = level - granted
redis.call('HSET', k, 'tokens', string.format('%.6f', level), 't', string.format('%d', at))
redis.call('PEXPIRE', k, ttl)
local hosts = 1
if ARGV[7] ~= '' then
  redis.call('ZADD', hk, now, ARGV[7])
  redis.call('ZREMRANGEBYSCORE', hk, '-inf', now - tonumber(ARGV[8]))
  redis.call('PEXPIRE', hk, ttl)
  hosts = redis.call('ZCARD', hk)
end
local wait = 0
if level < 1 then
  if rps > 0 then wait = math.ceil((1 - level) / rps * 1000) else wait = 86400000 end
end
return {string.format('%d', granted), string.format('%.6f', level), string.format('%d', hosts),
        string.format('%d', wait)}
)lua";

const std::string_view kProviderScript = R"lua(
local k = KEYS[1]
local function newer(field, t)
  local cur = tonumber(redis.call('HGET', k, field) or '0')
  return cur == nil or cur < tonumber(t)
end
if ARGV[2] ~= '' and newer('bt', ARGV[2]) then
  redis.call('HSET', k, 'bt', ARGV[2], 'b', ARGV[3], 'br', ARGV[4])
end
if ARGV[5] ~= '' and newer('rl', ARGV[5]) then redis.call('HSET', k, 'rl', ARGV[5]) end
if ARGV[6] ~= '' and newer('ht', ARGV[6]) then redis.call('HSET', k, 'ht', ARGV[6], 'h', ARGV[7]) end
if ARGV[8] and ARGV[8] ~= '' and newer('ct', ARGV[8]) then redis.call('HSET', k, 'ct', ARGV[8], 'cv', ARGV[9]) end
if ARGV[10] and ARGV[10] ~= '' and newer('lt', ARGV[10]) then redis.call('HSET', k, 'lt', ARGV[10], 'l', ARGV[11]) end
redis.call('PEXPIRE', k, ARGV[1])
return 1
)lua";

const std::string_view kLatencyScript = R"lua(
local k, ttl, cap = KEYS[1], ARGV[1], tonumber(ARGV[2])
local n = redis.call('HLEN', k)
for i = 3, #ARGV - 1, 2 do
  local f = ARGV[i]
  if n >= cap and string.sub(f, 1, 6) ~= 'other:' and redis.call('HEXISTS', k, f) == 0 then
    f = 'other:' .. string.match(f, '[^:]*$')
  end
  if redis.call('HINCRBY', k, f, ARGV[i + 1]) == tonumber(ARGV[i + 1]) then n = n + 1 end
end
redis.call('PEXPIRE', k, ttl)
return n
)lua";

const std::string_view kHighWaterScript = R"lua(
local k = KEYS[1]
local block, t, reset, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local v = redis.call('HMGET', k, 'b', 't', 'g')
local b, bt, g = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
if reset == '1' then
  g = g + 1
  b, bt = block, t
  redis.call('HSET', k, 'b', ARGV[1], 't', ARGV[2], 'g', string.format('%d', g))
elseif b == nil or block > b or (block == b and t > bt) then
  b, bt = block, t
  redis.call('HSET', k, 'b', ARGV[1], 't', ARGV[2], 'g', string.format('%d', g))
end
redis.call('PEXPIRE', k, ttl)
return {string.format('%d', b), string.format('%d', bt), string.format('%d', g)}
)lua";

}  // namespace rpcroute::shared
