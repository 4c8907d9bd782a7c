// The profile schema: which keys each section holds, their types, bounds and defaults, and the
// checks that span sections (unique chain ids and provider ids, overrides naming known
// providers). YAML itself, ${VAR} and the error format are yaml_reader.hpp's.
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "rpcroute/config.hpp"
#include "yaml_reader.hpp"

namespace rpcroute {

namespace {

using detail::ProfileError;

/// Letters, digits and `extra`: what a chain name, a provider id or a header name may hold.
bool name_chars(std::string_view s, std::string_view extra) {
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string_view::npos;
  });
}

class ProfileSchema : public detail::YamlReader {
 public:
  using YamlReader::YamlReader;

  Profile load(std::string_view text) {
    const YAML::Node root = parse(text);
    if (!root.IsMap()) throw error(root, "a profile must be a mapping with a 'chains' key");
    check_keys(root,
               {"name", "description", "chains", "routing", "health", "strategies", "shared_state",
                "cache"},
               "profile");

    Profile p;
    p.source = source();
    p.title = opt_string(root, "name").value_or("");
    p.description = opt_string(root, "description").value_or("");
    // Strategy parameters and health first: chains reference nothing from them, but method
    // overrides reference provider ids, checked after the chains are read.
    if (auto s = root["strategies"]) read_strategies(s, p.strategies);
    if (auto h = root["health"]) read_health(h, p.health);
    read_chains(root, p.chains);
    if (auto r = root["routing"]) read_routing(r, p);
    if (auto s = root["shared_state"]) read_shared_state(s, p.shared_state);
    if (auto c = root["cache"]) read_cache(c, p.cache);
    p.secrets = take_secrets();
    p.url_paths = std::move(url_paths_);
    return p;
  }

 private:
  void read_strategies(const YAML::Node& s, StrategyParams& out) const {
    require_map(s, "strategies");
    check_keys(s, {"fastest", "latency_weighted"}, "strategies");
    if (auto f = s["fastest"]) {
      require_map(f, "strategies.fastest");
      check_keys(f, {"window_ms", "min_calls", "min_success_rate"}, "strategies.fastest");
      auto& fp = out.fastest;
      fp.window_ms = opt_int(f, "window_ms", 1).value_or(fp.window_ms);
      fp.min_calls = static_cast<int>(opt_int(f, "min_calls", 0).value_or(fp.min_calls));
      fp.min_success_rate = opt_double(f, "min_success_rate", 0, 1).value_or(fp.min_success_rate);
    }
    if (auto l = s["latency_weighted"]) {
      require_map(l, "strategies.latency_weighted");
      check_keys(
          l, {"window_ms", "beta", "ms_floor", "explore_floor", "min_calls", "min_success_rate"},
          "strategies.latency_weighted");
      auto& lp = out.latency_weighted;
      lp.window_ms = opt_int(l, "window_ms", 1).value_or(lp.window_ms);
      lp.beta = opt_double(l, "beta", 0, 100).value_or(lp.beta);
      lp.ms_floor = opt_double(l, "ms_floor", 0, 1e9).value_or(lp.ms_floor);
      lp.explore_floor = opt_double(l, "explore_floor", 0, 1).value_or(lp.explore_floor);
      lp.min_calls = static_cast<int>(opt_int(l, "min_calls", 0).value_or(lp.min_calls));
      lp.min_success_rate = opt_double(l, "min_success_rate", 0, 1).value_or(lp.min_success_rate);
    }
  }

  void read_cache(const YAML::Node& c, CacheConfig& out) const {
    require_map(c, "cache");
    check_keys(c, {"max_mb", "coalesce"}, "cache");
    out.max_mb = opt_int(c, "max_mb", 0).value_or(out.max_mb);
    if (out.max_mb > 65'536) throw error(c["max_mb"], "cache.max_mb must be at most 65536");
    if (auto b = c["coalesce"]) out.coalesce = boolean(b);
  }

  void read_health(const YAML::Node& h, HealthConfig& out) const {
    require_map(h, "health");
    check_keys(h, {"circuit_breaker", "rate_limit_default_ms"}, "health");
    out.rate_limit_default_ms =
        opt_int(h, "rate_limit_default_ms", 0).value_or(out.rate_limit_default_ms);
    auto cb = h["circuit_breaker"];
    if (!cb) return;
    require_map(cb, "health.circuit_breaker");
    check_keys(cb,
               {"failure_threshold", "recovery_timeout_ms", "max_recovery_timeout_ms",
                "success_threshold", "half_open_max_inflight", "jitter"},
               "health.circuit_breaker");
    auto& b = out.circuit_breaker;
    b.failure_threshold =
        static_cast<int>(opt_int(cb, "failure_threshold", 1).value_or(b.failure_threshold));
    b.recovery_timeout_ms = opt_int(cb, "recovery_timeout_ms", 0).value_or(b.recovery_timeout_ms);
    b.max_recovery_timeout_ms =
        opt_int(cb, "max_recovery_timeout_ms", 0)
            .value_or(std::max(b.max_recovery_timeout_ms, b.recovery_timeout_ms));
    b.success_threshold =
        static_cast<int>(opt_int(cb, "success_threshold", 1).value_or(b.success_threshold));
    b.half_open_max_inflight = static_cast<int>(
        opt_int(cb, "half_open_max_inflight", 1).value_or(b.half_open_max_inflight));
    b.jitter = opt_double(cb, "jitter", 0, 1).value_or(b.jitter);
    if (b.max_recovery_timeout_ms < b.recovery_timeout_ms) {
      throw error(cb, "max_recovery_timeout_ms must not be below recovery_timeout_ms");
    }
  }

  /// `shared_state:` — the Redis URL's credentials and the password are secrets (scrubbed).
  void read_shared_state(const YAML::Node& s, SharedStateConfig& out) {
    require_map(s, "shared_state");
    check_keys(s, {"redis", "prefix", "user", "password", "tls"}, "shared_state");
    auto url = s["redis"];
    if (!url) throw error(s, "shared_state needs 'redis' (redis://host:port/db)");
    out.redis = substitute(url, scalar(url, "redis"), false);
    if (!out.redis.starts_with("redis://") && !out.redis.starts_with("rediss://"))
      throw error(url, "shared_state.redis must be a redis:// URL");
    // Its user info only: a path of "/0" is no secret, and scrubbing it would garble output.
    for (auto& c : url_credentials(out.redis)) add_secret(std::move(c));
    if (auto pre = opt_string(s, "prefix")) {
      if (pre->empty() || pre->size() > 64 || !name_chars(*pre, "_-.:{}"))
        throw error(s["prefix"], "shared_state.prefix: 1-64 letters, digits or _-.:{}");
      out.prefix = *pre;
    }
    if (auto u = s["user"]) out.user = substitute(u, scalar(u, "user"), false);
    if (auto pw = s["password"]) out.password = substitute(pw, scalar(pw, "password"), true);
    if (auto t = s["tls"]) {
      if (!out.redis.starts_with("rediss://"))
        throw error(t, "shared_state has 'tls' but its redis URL is not rediss://");
      read_tls_options(t, out.tls);
    }
  }

  void read_chains(const YAML::Node& root, std::vector<Chain>& out) {
    auto chains = root["chains"];
    if (!chains) throw error(root, "missing required key 'chains'");
    require_map(chains, "chains");
    if (chains.size() == 0) throw error(chains, "'chains' must list at least one chain");
    std::set<std::uint64_t> ids;
    for (auto it = chains.begin(); it != chains.end(); ++it) {
      Chain c = read_chain(it->first, it->second);
      if (!ids.insert(c.chain_id).second) {
        throw error(it->first, fmt::format("chain id {} is used by two chains", c.chain_id));
      }
      out.push_back(std::move(c));
    }
  }

  void read_routing(const YAML::Node& r, Profile& p) const {
    require_map(r, "routing");
    check_keys(r, {"default_strategy", "method_overrides", "timeout_ms", "max_attempts"},
               "routing");
    if (auto ds = r["default_strategy"]) p.routing.default_strategy = strategy(ds);
    p.routing.timeout_ms = opt_int(r, "timeout_ms", 1).value_or(p.routing.timeout_ms);
    if (auto ma = opt_int(r, "max_attempts", 1)) p.routing.max_attempts = static_cast<int>(*ma);
    auto mo = r["method_overrides"];
    if (!mo) return;
    require_map(mo, "routing.method_overrides");
    for (auto it = mo.begin(); it != mo.end(); ++it) {
      // A copy (a Node is a handle): it->second lives in a proxy that dies with the statement.
      const YAML::Node v = it->second;
      p.routing.method_overrides.push_back(read_override(it->first, v, p.chains));
    }
  }

  MethodOverride read_override(const YAML::Node& key, const YAML::Node& v,
                               const std::vector<Chain>& chains) const {
    MethodOverride o;
    o.pattern = scalar(key, "method name");
    require_map(v, "method override");
    check_keys(v,
               {"strategy", "providers", "timeout_ms", "broadcast", "max_response_mb", "hedge",
                "retry_empty"},
               "method override");
    if (auto r = v["retry_empty"]) o.policy.retry_empty = boolean(r);
    if (auto s = v["strategy"]) o.policy.strategy = strategy(s);
    if (auto t = opt_int(v, "timeout_ms", 1)) o.policy.timeout_ms = *t;
    if (auto b = v["broadcast"]) o.policy.broadcast = boolean(b);
    if (auto h = v["hedge"]) o.policy.hedge = read_hedge(h);
    if (auto m = opt_int(v, "max_response_mb", 1))
      o.policy.max_response_bytes = response_cap(v, *m);
    if (auto ps = v["providers"]) {
      o.policy.providers = string_list(ps, "providers");
      for (std::size_t i = 0; i < o.policy.providers.size(); ++i) {
        const auto& id = o.policy.providers[i];
        bool known = std::any_of(chains.begin(), chains.end(),
                                 [&](const Chain& c) { return c.find_provider(id) != nullptr; });
        if (!known) throw error(ps[i], fmt::format("unknown provider id '{}'", id));
      }
    }
    return o;
  }

  /// `hedge: true|false` or `hedge: { quantile, min_ms, max_ms, max_extra }`.
  HedgeConfig read_hedge(const YAML::Node& h) const {
    HedgeConfig o;
    if (h.IsScalar()) {
      o.enabled = boolean(h);
      return o;
    }
    require_map(h, "hedge");
    check_keys(h, {"quantile", "min_ms", "max_ms", "max_extra"}, "hedge");
    o.quantile = opt_double(h, "quantile", 0.01, 1).value_or(o.quantile);
    o.min_ms = opt_int(h, "min_ms", 1).value_or(o.min_ms);
    o.max_ms = opt_int(h, "max_ms", 1).value_or(std::max(o.max_ms, o.min_ms));
    o.max_extra = opt_double(h, "max_extra", 0, 1).value_or(o.max_extra);
    if (o.max_ms < o.min_ms) throw error(h, "hedge.max_ms must not be below hedge.min_ms");
    return o;
  }

  /// `websocket: { max_backfill_blocks, backfill_timeout_ms, stall_blocks,
  /// resubscribe_timeout_ms }` (issue 18).
  WsChainConfig read_websocket(const YAML::Node& w) const {
    WsChainConfig o;
    require_map(w, "websocket");
    check_keys(
        w, {"max_backfill_blocks", "backfill_timeout_ms", "stall_blocks", "resubscribe_timeout_ms"},
        "websocket");
    o.max_backfill_blocks =
        static_cast<std::uint64_t>(opt_int(w, "max_backfill_blocks", 0)
                                       .value_or(static_cast<std::int64_t>(o.max_backfill_blocks)));
    o.backfill_timeout_ms = opt_int(w, "backfill_timeout_ms", 1).value_or(o.backfill_timeout_ms);
    o.stall_blocks = opt_int(w, "stall_blocks", 0).value_or(o.stall_blocks);
    o.resubscribe_timeout_ms =
        opt_int(w, "resubscribe_timeout_ms", 1).value_or(o.resubscribe_timeout_ms);
    return o;
  }

  Chain read_chain(const YAML::Node& key, const YAML::Node& n) {
    Chain c;
    c.name = scalar(key, "chain name");
    if (c.name.empty() || !name_chars(c.name, "_-.")) {
      throw error(
          key, fmt::format("chain name '{}' may only hold letters, digits, '_', '-', '.'", c.name));
    }
    require_map(n, fmt::format("chains.{}", c.name));
    check_keys(n,
               {"chain_id", "block_time_ms", "max_lag_blocks", "archival_threshold", "lag_trip_ms",
                "hedge", "rewrite_latest", "websocket", "providers"},
               fmt::format("chain '{}'", c.name));
    auto cid = opt_int(n, "chain_id", 1);
    if (!cid) throw error(n, fmt::format("chain '{}' needs a 'chain_id'", c.name));
    c.chain_id = static_cast<std::uint64_t>(*cid);
    c.block_time_ms = opt_int(n, "block_time_ms", 1).value_or(c.block_time_ms);
    c.max_lag_blocks = static_cast<std::uint64_t>(opt_int(n, "max_lag_blocks", 0).value_or(2));
    c.archival_threshold =
        static_cast<std::uint64_t>(opt_int(n, "archival_threshold", 0).value_or(128));
    c.lag_trip_ms = opt_int(n, "lag_trip_ms", 0).value_or(c.lag_trip_ms);
    if (auto h = n["hedge"]) c.hedge = read_hedge(h);
    if (auto r = n["rewrite_latest"]) c.rewrite_latest = boolean(r);
    if (auto w = n["websocket"]) c.websocket = read_websocket(w);
    auto ps = n["providers"];
    if (!ps) throw error(n, fmt::format("chain '{}' needs a 'providers' list", c.name));
    if (!ps.IsSequence() || ps.size() == 0) throw error(ps, "'providers' must be a non-empty list");
    std::set<std::string> ids;
    int position = 0;
    for (const auto& pn : ps) {
      Provider p = read_provider(pn, ++position);
      if (!ids.insert(p.id).second)
        throw error(pn["id"], fmt::format("duplicate provider id '{}'", p.id));
      c.providers.push_back(std::move(p));
    }
    return c;
  }

  Provider read_provider(const YAML::Node& n, int position) {
    require_map(n, "provider");
    check_keys(
        n,
        {"id", "url", "ws_url", "headers", "api_key", "priority", "weight", "archival",
         "rate_limit", "methods", "limits", "timeout_ms", "tls", "http", "group", "transport"},
        "provider");
    Provider p;
    auto id = opt_string(n, "id");
    if (!id || id->empty()) throw error(n, "provider needs an 'id'");
    if (!name_chars(*id, "_-.")) {
      throw error(
          n["id"],
          fmt::format("provider id '{}' may only hold letters, digits, '_', '-', '.'", *id));
    }
    p.id = *id;
    read_urls(n, p);
    if (auto h = n["headers"]) read_headers(h, p.headers);
    if (auto t = n["tls"]) read_tls(t, p);
    if (auto h = n["http"]) {
      const auto v = scalar(h, "'http'");
      if (v == "1.1") {
        p.http = HttpVersion::http1_1;
      } else if (v == "2") {
        p.http = HttpVersion::http2;
      } else {
        throw error(h, "'http' must be \"1.1\" or \"2\"");
      }
    }
    if (auto g = n["group"]) {
      const auto v = scalar(g, "'group'");
      if (v == "primary") {
        p.group = ProviderGroup::primary;
      } else if (v == "backup") {
        p.group = ProviderGroup::backup;
      } else {
        throw error(g, fmt::format("'group' must be primary or backup, not '{}'", v));
      }
    }
    if (auto t = n["transport"]) read_transport(t, p);
    p.priority = static_cast<int>(opt_int(n, "priority", 0).value_or(position));
    p.weight = opt_double(n, "weight", 0, 1e9).value_or(1.0);
    if (auto a = n["archival"]) p.archival = boolean(a);
    if (auto rl = n["rate_limit"]) p.rate_limit = read_quota(rl);
    if (auto m = n["methods"]) read_methods(m, p.methods);
    if (auto l = n["limits"]) read_limits(l, p.limits);
    if (auto t = opt_int(n, "timeout_ms", 1)) {
      p.timeout_ms = *t;
      p.timeout_set = true;
    }
    p.fingerprint = url_fingerprint(p.url);
    return p;
  }

  /// `transport: http | ws | auto`: ws and auto need the provider's WebSocket (ws_url).
  void read_transport(const YAML::Node& t, Provider& p) const {
    const auto v = scalar(t, "'transport'");
    if (v == "http") {
      p.transport = TransportMode::http;
    } else if (v == "ws") {
      p.transport = TransportMode::ws;
    } else if (v == "auto") {
      p.transport = TransportMode::automatic;
    } else {
      throw error(t, fmt::format("'transport' must be http, ws or auto, not '{}'", v));
    }
    if (p.transport != TransportMode::http && p.ws_url.empty()) {
      throw error(t, fmt::format("provider '{}' has 'transport: {}' but no 'ws_url' (give one, or "
                                 "'ws_url: from_url')",
                                 p.id, v));
    }
  }

  /// url (with api_key put in place) and ws_url; whatever of them is secret joins the secrets.
  void read_urls(const YAML::Node& n, Provider& p) {
    std::string api_key;
    if (auto k = n["api_key"]) api_key = substitute(k, scalar(k, "api_key"), true);
    auto url = n["url"];
    if (!url) throw error(n, fmt::format("provider '{}' needs a 'url'", p.id));
    p.url = substitute(url, scalar(url, "url"), false);
    if (api_key.empty() && p.url.find("{api_key}") != std::string::npos) {
      throw error(
          url, fmt::format(
                   "the URL of provider '{}' holds {{api_key}} but the provider has no 'api_key'",
                   p.id));
    }
    if (!api_key.empty()) {
      // "{api_key}" in the URL is where the key goes; without it the key is sent as a header.
      auto pos = p.url.find("{api_key}");
      if (pos != std::string::npos) {
        p.url.replace(pos, 9, api_key);
      } else {
        p.headers.push_back({"Authorization", "Bearer " + api_key});
      }
    }
    check_url(url, p.url, {"http", "https"});
    keep_url_secrets(p.url);
    if (auto w = n["ws_url"]) {
      const std::string text = scalar(w, "ws_url");
      // "from_url": the provider serves WebSocket at its HTTP URL (https:// -> wss://, http:// ->
      // ws://, the same host, port, path and key), as many nodes and some paid providers do.
      p.ws_url = text == "from_url" ? ws_url_from(p.url) : substitute(w, text, false);
      check_url(w, p.ws_url, {"ws", "wss"});
      keep_url_secrets(p.ws_url);
    }
  }

  /// The WebSocket twin of an http(s):// URL (checked already): https:// -> wss://, http:// ->
  /// ws://.
  static std::string ws_url_from(const std::string& url) {
    const bool tls = url.size() > 4 && (url[4] == 's' || url[4] == 'S');  // https, any case
    return (tls ? "wss" : "ws") + url.substr(url.find("://"));
  }

  // A key pasted into the URL is as secret as one from ${VAR}; and an upstream that echoes its
  // request line shows the whole path, whatever it holds.
  void keep_url_secrets(const std::string& url) {
    for (auto& c : url_credentials(url)) add_secret(std::move(c));
    if (auto t = url_path_and_query(url); !t.empty()) url_paths_.push_back(std::move(t));
  }

  void read_headers(const YAML::Node& h, std::vector<Header>& out) {
    require_map(h, "headers");
    for (auto it = h.begin(); it != h.end(); ++it) {
      auto name = scalar(it->first, "header name");
      if (name.empty() || !name_chars(name, "-_"))
        throw error(it->first, fmt::format("bad header name '{}'", name));
      auto value = substitute(it->second, scalar(it->second, "header value"), true);
      if (value.find_first_of("\r\n") != std::string::npos)
        throw error(it->second, "header value holds a line break");
      out.push_back({name, value});
    }
  }

  /// tls: only for https:// and wss:// (it applies to both URLs of the provider); every file named
  /// must be readable now, so that a typo is a profile error and not a failure on every request.
  void read_tls(const YAML::Node& t, Provider& p) const {
    require_map(t, "tls");
    check_keys(t, {"ca_file", "ca_dir", "cert_file", "key_file", "insecure"}, "tls");
    const auto secure = [](std::string_view url, std::string_view scheme) {
      return url.size() > scheme.size() &&
             std::equal(scheme.begin(), scheme.end(), url.begin(), [](char a, char b) {
               return a == std::tolower(static_cast<unsigned char>(b));
             });
    };
    if (!secure(p.url, "https://") && !secure(p.ws_url, "wss://")) {
      throw error(t, fmt::format("provider '{}' has 'tls' but its url is not https:// and its "
                                 "ws_url not wss://",
                                 p.id));
    }
    read_tls_options(t, p.tls);
  }

  /// The keys of a tls: map (a provider's, or shared_state's for rediss://), checked alike.
  void read_tls_options(const YAML::Node& t, TlsOptions& o) const {
    require_map(t, "tls");
    check_keys(t, {"ca_file", "ca_dir", "cert_file", "key_file", "insecure"}, "tls");
    o.ca_file = tls_path(t, "ca_file", false);
    o.ca_dir = tls_path(t, "ca_dir", true);
    o.cert_file = tls_path(t, "cert_file", false);
    o.key_file = tls_path(t, "key_file", false);
    if (auto i = t["insecure"]) o.insecure = boolean(i);
    if (o.insecure && (!o.ca_file.empty() || !o.ca_dir.empty())) {
      throw error(t["insecure"],
                  "tls: 'insecure' checks no certificate: drop it, or drop "
                  "'ca_file' and 'ca_dir'");
    }
    if (!o.key_file.empty() && o.cert_file.empty())
      throw error(t["key_file"], "tls: 'key_file' needs 'cert_file'");
  }

  /// A path under tls:, absolute, taken from the profile's folder when relative; it must be a
  /// readable file (or folder).
  std::string tls_path(const YAML::Node& t, const char* key, bool folder) const {
    auto v = opt_string(t, key);
    if (!v) return {};
    if (v->empty()) throw error(t[key], fmt::format("tls: '{}' is empty", key));
    namespace fs = std::filesystem;
    fs::path path(*v);
    if (path.is_relative() && !source().starts_with("<")) {
      path = fs::path(source()).parent_path() / path;
    }
    std::error_code ec;
    path = fs::absolute(path, ec).lexically_normal();
    const auto status = fs::status(path, ec);
    const bool right_kind = folder ? fs::is_directory(status) : fs::is_regular_file(status);
    if (ec || !right_kind || ::access(path.c_str(), R_OK) != 0) {
      throw error(t[key], fmt::format("tls: {} '{}' is not a readable {}", key, path.string(),
                                      folder ? "folder" : "file"));
    }
    return path.string();
  }

  Quota read_quota(const YAML::Node& rl) const {
    require_map(rl, "rate_limit");
    check_keys(rl, {"rps", "burst"}, "rate_limit");
    Quota q;
    q.rps = opt_double(rl, "rps", 0.001, 1e9).value_or(0);
    if (q.rps == 0) throw error(rl, "rate_limit needs 'rps'");
    q.burst = opt_double(rl, "burst", 1, 1e9).value_or(std::max(1.0, q.rps));
    return q;
  }

  void read_methods(const YAML::Node& m, MethodFilter& out) const {
    require_map(m, "methods");
    check_keys(m, {"allow", "deny"}, "methods");
    if (auto a = m["allow"]) out.allow = string_list(a, "allow");
    if (auto d = m["deny"]) out.deny = string_list(d, "deny");
  }

  void read_limits(const YAML::Node& l, ProviderLimits& out) const {
    require_map(l, "limits");
    check_keys(l, {"max_block_range", "max_batch", "max_response_mb"}, "limits");
    if (auto r = opt_int(l, "max_block_range", 1))
      out.max_block_range = static_cast<std::uint64_t>(*r);
    if (auto b = opt_int(l, "max_batch", 1)) out.max_batch = static_cast<std::size_t>(*b);
    if (auto m = opt_int(l, "max_response_mb", 1)) out.max_response_bytes = response_cap(l, *m);
  }

  std::vector<std::string> url_paths_;
};

}  // namespace

Result<Profile> load_profile_text(std::string_view yaml, const std::string& source,
                                  const EnvLookup& env) {
  if (yaml.size() > kMaxProfileBytes) {
    return fail(fmt::format("{}: a profile may hold at most {} KiB ({} bytes here)", source,
                            kMaxProfileBytes >> 10, yaml.size()));
  }
  try {
    ProfileSchema schema(source, env);
    return schema.load(yaml);
  } catch (const ProfileError& e) {
    return fail(e.message);
  } catch (const YAML::Exception& e) {
    return fail(fmt::format("{}:{}:{}: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

}  // namespace rpcroute
