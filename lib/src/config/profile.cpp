#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_map>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <curl/curl.h>
#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <array>

#include "rpcroute/config.hpp"

namespace rpcroute {

std::string_view strategy_name(Strategy s) {
  switch (s) {
    case Strategy::load_balanced: return "load_balanced";
    case Strategy::round_robin: return "round_robin";
    case Strategy::random: return "random";
    case Strategy::weighted: return "weighted";
    case Strategy::priority: return "priority";
    case Strategy::fastest: return "fastest";
    case Strategy::latency_weighted: return "latency_weighted";
  }
  return "?";
}

std::optional<Strategy> parse_strategy(std::string_view name) {
  std::string norm(name);
  std::replace(norm.begin(), norm.end(), '-', '_');
  for (Strategy s : kAllStrategies) {
    if (strategy_name(s) == norm) return s;
  }
  return std::nullopt;
}

bool glob_match(std::string_view p, std::string_view t) {
  std::size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi;
      ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

bool MethodFilter::permits(std::string_view method) const {
  for (const auto& d : deny) {
    if (glob_match(d, method)) return false;
  }
  if (allow.empty()) return true;
  return std::any_of(allow.begin(), allow.end(),
                     [&](const std::string& a) { return glob_match(a, method); });
}

const Provider* Chain::find_provider(std::string_view id) const {
  for (const auto& p : providers) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

const Chain* Profile::find_chain(std::string_view name_or_id) const {
  for (const auto& c : chains) {
    if (c.name == name_or_id) return &c;
  }
  if (!name_or_id.empty() &&
      std::all_of(name_or_id.begin(), name_or_id.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    for (const auto& c : chains) {
      if (std::to_string(c.chain_id) == name_or_id) return &c;
    }
  }
  return nullptr;
}

MethodPolicy Profile::policy_for(std::string_view method) const {
  for (const auto& o : routing.method_overrides) {
    if (glob_match(o.pattern, method)) return o.policy;
  }
  return {};
}

std::int64_t default_method_timeout_ms(std::string_view method) {
  static constexpr std::string_view kCheap[] = {
      "eth_blockNumber",      "eth_chainId",          "net_version",          "net_listening",
      "net_peerCount",        "web3_clientVersion",   "eth_syncing",          "eth_gasPrice",
      "eth_maxPriorityFeePerGas", "eth_blobBaseFee",  "eth_feeHistory",       "eth_getBalance",
      "eth_getTransactionCount", "eth_getCode",       "eth_getStorageAt",     "eth_getTransactionByHash",
      "eth_getTransactionReceipt", "eth_getBlockByNumber", "eth_getBlockByHash",
      "eth_getBlockTransactionCountByNumber", "eth_getBlockTransactionCountByHash",
      "eth_getFilterChanges", "eth_uninstallFilter",
  };
  static constexpr std::string_view kHeavy[] = {
      "eth_call",     "eth_estimateGas", "eth_createAccessList", "eth_getLogs",
      "eth_getProof", "eth_getBlockReceipts", "eth_getFilterLogs", "eth_simulateV1",
  };
  // Routed calls ask for the same few methods over and over: the last answer is kept.
  thread_local std::string last_method;
  thread_local std::int64_t last_ms = 0;
  if (!last_method.empty() && method == last_method) return last_ms;
  const auto ms = [&]() -> std::int64_t {
  if (method.starts_with("debug_") || method.starts_with("trace_")) return 60'000;
  // Asked for every routed call: the names are grouped by length, so a lookup compares the
  // method with at most a few names of its own length (cheaper than hashing it).
  struct Entry {
    std::string_view name;
    std::int64_t ms;
  };
  static const auto kByLength = [] {
    std::array<std::vector<Entry>, 48> t{};
    for (auto m : kCheap) t[m.size()].push_back({m, 5'000});
    for (auto m : kHeavy) t[m.size()].push_back({m, 20'000});
    return t;
  }();
  if (method.size() < kByLength.size()) {
    for (const auto& e : kByLength[method.size()]) {
      if (e.name == method) return e.ms;
    }
  }
  return 10'000;
  }();
  if (method.size() <= 64) {
    last_method.assign(method);
    last_ms = ms;
  }
  return ms;
}

std::int64_t attempt_timeout_ms(std::string_view method, const Provider& provider, const MethodPolicy& policy) {
  if (policy.timeout_ms) return *policy.timeout_ms;
  if (provider.timeout_set) return provider.timeout_ms;
  return default_method_timeout_ms(method);
}

std::string Profile::scrub(std::string text) const {
  // Secrets first: a path echoed whole then reads "/v2/***", its shape kept; a path whose key did
  // not look like one is still replaced whole.
  for (const auto* list : {&secrets, &url_paths}) {
    for (const auto& s : *list) {
      if (s.size() < 4) continue;  // too short to be a key, and replacing it would mangle text
      std::size_t pos = 0;
      while ((pos = text.find(s, pos)) != std::string::npos) {
        text.replace(pos, s.size(), "***");
        pos += 3;
      }
    }
  }
  return text;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string redact_url(std::string_view url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return "***";
  auto rest = url.substr(scheme_end + 3);
  auto path_pos = rest.find_first_of("/?#");
  auto authority = rest.substr(0, path_pos);
  if (auto at = authority.rfind('@'); at != std::string_view::npos) authority = authority.substr(at + 1);
  std::string out = fmt::format("{}://{}", url.substr(0, scheme_end), authority);
  if (path_pos != std::string_view::npos) {
    auto tail = rest.substr(path_pos);
    if (tail != "/") out += "/***";
  }
  return out;
}

std::string url_fingerprint(std::string_view url) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : url) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:012x}", h >> 16);
}

namespace {

std::string percent_decoded(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) && hex(s[i + 2])) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

/// A query parameter whose name says it holds a credential ("apikey", "access_token", "sig").
bool credential_name(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  for (std::string_view word : {"key", "token", "secret", "auth", "pass", "sig", "cred", "session"}) {
    if (n.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

bool looks_like_credential(std::string_view s) {
  if (s.size() < 16) return false;
  bool digit = false, upper = false, lower = false;
  for (unsigned char c : s) {
    if (std::isdigit(c)) digit = true;
    else if (std::isupper(c)) upper = true;
    else if (std::islower(c)) lower = true;
    else if (std::string_view("-_.~+=%:").find(static_cast<char>(c)) == std::string_view::npos) return false;
  }
  return digit || (upper && lower);
}

std::string url_path_and_query(std::string_view url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return {};
  auto rest = url.substr(scheme_end + 3);
  rest = rest.substr(0, rest.find('#'));
  const auto path_pos = rest.find_first_of("/?");
  if (path_pos == std::string_view::npos || rest.substr(path_pos) == "/") return {};
  return std::string(rest.substr(path_pos));
}

std::vector<std::string> url_credentials(std::string_view url) {
  std::vector<std::string> out;
  auto add = [&](std::string_view v) {
    if (v.empty()) return;
    out.emplace_back(v);
    if (auto d = percent_decoded(v); d != v) out.push_back(std::move(d));
  };
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return out;
  auto rest = url.substr(scheme_end + 3);
  rest = rest.substr(0, rest.find('#'));
  const auto path_pos = rest.find_first_of("/?");
  const auto authority = rest.substr(0, path_pos);
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    // User info is a credential by nature: the password, and the user when it stands alone.
    const auto info = authority.substr(0, at);
    const auto colon = info.find(':');
    const auto user = info.substr(0, colon);
    const auto password = colon == std::string_view::npos ? std::string_view() : info.substr(colon + 1);
    add(password);
    if (password.empty() || looks_like_credential(user)) add(user);
  }
  if (path_pos == std::string_view::npos) return out;
  const auto tail = rest.substr(path_pos);  // path and query
  const auto q = tail.find('?');
  for (auto path = tail.substr(0, q); !path.empty();) {
    const auto slash = path.find('/');
    const auto segment = path.substr(0, slash);
    if (looks_like_credential(segment)) add(segment);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  if (q == std::string_view::npos) return out;
  for (auto query = tail.substr(q + 1); !query.empty();) {
    const auto amp = query.find('&');
    const auto pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    const auto value = eq == std::string_view::npos ? pair : pair.substr(eq + 1);
    if ((eq != std::string_view::npos && credential_name(pair.substr(0, eq))) || looks_like_credential(value)) {
      add(value);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

namespace {

struct ProfileError {
  std::string message;
};

class Loader {
 public:
  Loader(std::string source, const EnvLookup& env) : source_(std::move(source)), env_(env) {}

  Profile load(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::DeepRecursion& e) {
      // yaml-cpp's own message for this is "bad file".
      throw ProfileError{at(e.mark, fmt::format("nested more than {} levels deep", kMaxDepth))};
    } catch (const YAML::ParserException& e) {
      throw ProfileError{at(e.mark, e.msg)};
    }
    Expansion expansion;
    check_expansion(root, 0, expansion);
    if (!root.IsMap()) throw error(root, "a profile must be a mapping with a 'chains' key");
    check_keys(root, {"name", "description", "chains", "routing", "health", "strategies"}, "profile");

    Profile p;
    p.source = source_;
    p.title = opt_string(root, "name").value_or("");
    p.description = opt_string(root, "description").value_or("");

    // Strategy parameters and routing first: chains reference nothing from them, but method
    // overrides reference provider ids, checked after the chains are read.
    if (auto s = root["strategies"]) {
      require_map(s, "strategies");
      check_keys(s, {"fastest", "latency_weighted"}, "strategies");
      if (auto f = s["fastest"]) {
        require_map(f, "strategies.fastest");
        check_keys(f, {"window_ms", "min_calls", "min_success_rate"}, "strategies.fastest");
        auto& fp = p.strategies.fastest;
        fp.window_ms = opt_int(f, "window_ms", 1).value_or(fp.window_ms);
        fp.min_calls = static_cast<int>(opt_int(f, "min_calls", 0).value_or(fp.min_calls));
        fp.min_success_rate = opt_double(f, "min_success_rate", 0, 1).value_or(fp.min_success_rate);
      }
      if (auto l = s["latency_weighted"]) {
        require_map(l, "strategies.latency_weighted");
        check_keys(l, {"window_ms", "beta", "ms_floor", "explore_floor", "min_calls", "min_success_rate"},
                   "strategies.latency_weighted");
        auto& lp = p.strategies.latency_weighted;
        lp.window_ms = opt_int(l, "window_ms", 1).value_or(lp.window_ms);
        lp.beta = opt_double(l, "beta", 0, 100).value_or(lp.beta);
        lp.ms_floor = opt_double(l, "ms_floor", 0, 1e9).value_or(lp.ms_floor);
        lp.explore_floor = opt_double(l, "explore_floor", 0, 1).value_or(lp.explore_floor);
        lp.min_calls = static_cast<int>(opt_int(l, "min_calls", 0).value_or(lp.min_calls));
        lp.min_success_rate = opt_double(l, "min_success_rate", 0, 1).value_or(lp.min_success_rate);
      }
    }

    if (auto h = root["health"]) {
      require_map(h, "health");
      check_keys(h, {"circuit_breaker", "rate_limit_default_ms"}, "health");
      p.health.rate_limit_default_ms =
          opt_int(h, "rate_limit_default_ms", 0).value_or(p.health.rate_limit_default_ms);
      if (auto cb = h["circuit_breaker"]) {
        require_map(cb, "health.circuit_breaker");
        check_keys(cb, {"failure_threshold", "recovery_timeout_ms", "max_recovery_timeout_ms",
                        "success_threshold", "half_open_max_inflight", "jitter"},
                   "health.circuit_breaker");
        auto& b = p.health.circuit_breaker;
        b.failure_threshold = static_cast<int>(opt_int(cb, "failure_threshold", 1).value_or(b.failure_threshold));
        b.recovery_timeout_ms = opt_int(cb, "recovery_timeout_ms", 0).value_or(b.recovery_timeout_ms);
        b.max_recovery_timeout_ms =
            opt_int(cb, "max_recovery_timeout_ms", 0).value_or(std::max(b.max_recovery_timeout_ms, b.recovery_timeout_ms));
        b.success_threshold = static_cast<int>(opt_int(cb, "success_threshold", 1).value_or(b.success_threshold));
        b.half_open_max_inflight =
            static_cast<int>(opt_int(cb, "half_open_max_inflight", 1).value_or(b.half_open_max_inflight));
        b.jitter = opt_double(cb, "jitter", 0, 1).value_or(b.jitter);
        if (b.max_recovery_timeout_ms < b.recovery_timeout_ms) {
          throw error(cb, "max_recovery_timeout_ms must not be below recovery_timeout_ms");
        }
      }
    }

    auto chains = root["chains"];
    if (!chains) throw error(root, "missing required key 'chains'");
    require_map(chains, "chains");
    if (chains.size() == 0) throw error(chains, "'chains' must list at least one chain");
    std::set<std::uint64_t> ids;
    for (auto it = chains.begin(); it != chains.end(); ++it) {
      Chain c = load_chain(it->first, it->second);
      if (!ids.insert(c.chain_id).second) {
        throw error(it->first, fmt::format("chain id {} is used by two chains", c.chain_id));
      }
      p.chains.push_back(std::move(c));
    }

    if (auto r = root["routing"]) {
      require_map(r, "routing");
      check_keys(r, {"default_strategy", "method_overrides", "timeout_ms", "max_attempts"}, "routing");
      if (auto ds = r["default_strategy"]) p.routing.default_strategy = strategy(ds);
      p.routing.timeout_ms = opt_int(r, "timeout_ms", 1).value_or(p.routing.timeout_ms);
      if (auto ma = opt_int(r, "max_attempts", 1)) p.routing.max_attempts = static_cast<int>(*ma);
      if (auto mo = r["method_overrides"]) {
        require_map(mo, "routing.method_overrides");
        for (auto it = mo.begin(); it != mo.end(); ++it) {
          MethodOverride o;
          o.pattern = scalar(it->first, "method name");
          // A copy (a Node is a handle): it->second lives in a proxy that dies with the statement.
          const YAML::Node v = it->second;
          require_map(v, "method override");
          check_keys(v, {"strategy", "providers", "timeout_ms", "broadcast", "max_response_mb"}, "method override");
          if (auto s = v["strategy"]) o.policy.strategy = strategy(s);
          if (auto t = opt_int(v, "timeout_ms", 1)) o.policy.timeout_ms = *t;
          if (auto b = v["broadcast"]) o.policy.broadcast = boolean(b);
          if (auto m = opt_int(v, "max_response_mb", 1)) o.policy.max_response_bytes = response_cap(v, *m);
          if (auto ps = v["providers"]) {
            o.policy.providers = string_list(ps, "providers");
            for (std::size_t i = 0; i < o.policy.providers.size(); ++i) {
              const auto& id = o.policy.providers[i];
              bool known = std::any_of(p.chains.begin(), p.chains.end(),
                                       [&](const Chain& c) { return c.find_provider(id) != nullptr; });
              if (!known) throw error(ps[i], fmt::format("unknown provider id '{}'", id));
            }
          }
          p.routing.method_overrides.push_back(std::move(o));
        }
      }
    }
    p.secrets = std::move(secrets_);
    p.url_paths = std::move(url_paths_);
    return p;
  }

 private:
  // yaml-cpp loads an alias as a second handle on the anchored node, but whatever reads the tree
  // (this loader, yaml-cpp's conversions) walks and copies it once per alias: 1 MB of nested
  // aliases would expand to gigabytes. The walk below counts what reading would see, and stops at
  // the first node over a bound (so its time is bounded too, cycles included).
  static constexpr int kMaxDepth = 64;
  static constexpr std::size_t kMaxNodes = 100'000;
  static constexpr std::size_t kMaxScalarBytes = 4 << 20;
  struct Expansion {
    std::size_t nodes = 0;
    std::size_t scalar_bytes = 0;
  };

  void check_expansion(const YAML::Node& n, int depth, Expansion& e) const {
    if (depth > kMaxDepth) throw error(n, fmt::format("nested more than {} levels deep", kMaxDepth));
    if (++e.nodes > kMaxNodes) {
      throw error(n, fmt::format("more than {} nodes once aliases are expanded", kMaxNodes));
    }
    if (n.IsScalar()) {
      e.scalar_bytes += n.Scalar().size();
      if (e.scalar_bytes > kMaxScalarBytes) {
        throw error(n, fmt::format("more than {} MiB of text once aliases are expanded", kMaxScalarBytes >> 20));
      }
    } else if (n.IsSequence()) {
      for (const auto& item : n) check_expansion(item, depth + 1, e);
    } else if (n.IsMap()) {
      for (auto it = n.begin(); it != n.end(); ++it) {
        check_expansion(it->first, depth + 1, e);
        check_expansion(it->second, depth + 1, e);
      }
    }
  }

  std::string at(const YAML::Mark& m, std::string_view msg) const {
    return m.is_null() ? fmt::format("{}: {}", source_, msg)
                       : fmt::format("{}:{}:{}: {}", source_, m.line + 1, m.column + 1, msg);
  }

  ProfileError error(const YAML::Node& n, std::string_view msg) const {
    auto m = n.Mark();
    std::string text = m.is_null() ? fmt::format("{}: {}", source_, msg)
                                   : fmt::format("{}:{}:{}: {}", source_, m.line + 1, m.column + 1, msg);
    // A substituted value may sit anywhere in a URL (even the host): never print one.
    for (const auto& secret : secrets_) {
      for (std::size_t pos = 0; !secret.empty() && (pos = text.find(secret, pos)) != std::string::npos;) {
        text.replace(pos, secret.size(), "***");
        pos += 3;
      }
    }
    return ProfileError{std::move(text)};
  }

  /// yaml-cpp converts "1" (quoted) to a number; a quoted scalar is a string in a profile.
  static bool quoted(const YAML::Node& n) { return n.Tag() == "!"; }

  void require_map(const YAML::Node& n, std::string_view what) const {
    if (!n.IsMap()) throw error(n, fmt::format("'{}' must be a mapping", what));
  }

  void check_keys(const YAML::Node& map, std::initializer_list<std::string_view> allowed,
                  std::string_view where) const {
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->first.IsScalar()) throw error(it->first, fmt::format("keys of {} must be names", where));
      auto k = it->first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        std::string list;
        for (auto a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
        throw error(it->first, fmt::format("unknown key '{}' in {} (expected one of: {})", k, where, list));
      }
      if (!seen.insert(k).second) throw error(it->first, fmt::format("duplicate key '{}' in {}", k, where));
    }
  }

  std::string scalar(const YAML::Node& n, std::string_view what) const {
    if (!n.IsScalar()) throw error(n, fmt::format("{} must be a string", what));
    return n.Scalar();
  }

  std::optional<std::string> opt_string(const YAML::Node& map, const char* key) const {
    auto n = map[key];
    if (!n) return std::nullopt;
    if (!n.IsScalar()) throw error(n, fmt::format("'{}' must be a string", key));
    return n.Scalar();
  }

  std::optional<std::int64_t> opt_int(const YAML::Node& map, const char* key, std::int64_t min) const {
    auto n = map[key];
    if (!n) return std::nullopt;
    std::int64_t v = 0;
    if (!n.IsScalar() || quoted(n) || !YAML::convert<std::int64_t>::decode(n, v)) {
      throw error(n, fmt::format("'{}' must be an integer", key));
    }
    if (v < min) throw error(n, fmt::format("'{}' must be at least {}", key, min));
    return v;
  }

  /// max_response_mb (already at least 1) in bytes; above 4096 MiB a cap bounds nothing.
  std::uint64_t response_cap(const YAML::Node& map, std::int64_t mb) const {
    if (mb > 4096) throw error(map["max_response_mb"], "'max_response_mb' must be at most 4096");
    return static_cast<std::uint64_t>(mb) << 20;
  }

  std::optional<double> opt_double(const YAML::Node& map, const char* key, double lo, double hi) const {
    auto n = map[key];
    if (!n) return std::nullopt;
    double v = 0;
    if (!n.IsScalar() || quoted(n) || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
      throw error(n, fmt::format("'{}' must be a number", key));
    }
    if (v < lo || v > hi) throw error(n, fmt::format("'{}' must be between {} and {}", key, lo, hi));
    return v;
  }

  bool boolean(const YAML::Node& n) const {
    bool v = false;
    if (!n.IsScalar() || quoted(n) || !YAML::convert<bool>::decode(n, v)) throw error(n, "expected true or false");
    return v;
  }

  Strategy strategy(const YAML::Node& n) const {
    auto name = scalar(n, "strategy");
    if (auto s = parse_strategy(name)) return *s;
    throw error(n, fmt::format("unknown strategy '{}' (expected one of: load_balanced, round_robin, random, "
                               "weighted, priority, fastest, latency_weighted)",
                               name));
  }

  std::vector<std::string> string_list(const YAML::Node& n, std::string_view what) const {
    if (!n.IsSequence()) throw error(n, fmt::format("'{}' must be a list", what));
    std::vector<std::string> out;
    for (const auto& item : n) out.push_back(scalar(item, what));
    return out;
  }

  /// ${VAR} substitution; an unset variable is an error naming it (never a value).
  std::string substitute(const YAML::Node& n, const std::string& text, bool secret_by_default) {
    std::string out;
    std::size_t i = 0;
    bool substituted = false;
    while (i < text.size()) {
      auto start = text.find("${", i);
      if (start == std::string::npos) {
        out.append(text, i);
        break;
      }
      out.append(text, i, start - i);
      auto end = text.find('}', start + 2);
      if (end == std::string::npos) throw error(n, "unterminated '${' in value");
      std::string var = text.substr(start + 2, end - start - 2);
      bool valid = !var.empty() && std::all_of(var.begin(), var.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      });
      if (!valid) throw error(n, fmt::format("invalid variable name '${{{}}}'", var));
      auto value = env_(var);
      if (!value) throw error(n, fmt::format("environment variable {} is not set", var));
      if (!value->empty()) secrets_.push_back(*value);
      out += *value;
      substituted = true;
      i = end + 1;
    }
    if (secret_by_default && !substituted && !out.empty()) secrets_.push_back(out);
    return out;
  }

  void check_url(const YAML::Node& n, const std::string& url, std::initializer_list<std::string_view> schemes) {
    CURLU* u = curl_url();
    auto rc = curl_url_set(u, CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME);
    char* scheme = nullptr;
    char* host = nullptr;
    bool ok = rc == CURLUE_OK && curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host != nullptr && host[0] != '\0';
    std::string s = scheme != nullptr ? scheme : "";
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    if (!ok) throw error(n, fmt::format("bad URL '{}'", redact_url(url)));
    if (std::find(schemes.begin(), schemes.end(), s) == schemes.end()) {
      throw error(n, fmt::format("bad URL '{}': scheme must be {}", redact_url(url),
                                 *schemes.begin() == "http" ? "http or https" : "ws or wss"));
    }
  }

  Chain load_chain(const YAML::Node& key, const YAML::Node& n) {
    Chain c;
    c.name = scalar(key, "chain name");
    bool name_ok = !c.name.empty() && std::all_of(c.name.begin(), c.name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
    });
    if (!name_ok) throw error(key, fmt::format("chain name '{}' may only hold letters, digits, '_', '-', '.'", c.name));
    require_map(n, fmt::format("chains.{}", c.name));
    check_keys(n, {"chain_id", "block_time_ms", "max_lag_blocks", "archival_threshold", "lag_trip_ms", "providers"},
               fmt::format("chain '{}'", c.name));
    auto cid = opt_int(n, "chain_id", 1);
    if (!cid) throw error(n, fmt::format("chain '{}' needs a 'chain_id'", c.name));
    c.chain_id = static_cast<std::uint64_t>(*cid);
    c.block_time_ms = opt_int(n, "block_time_ms", 1).value_or(c.block_time_ms);
    c.max_lag_blocks = static_cast<std::uint64_t>(opt_int(n, "max_lag_blocks", 0).value_or(2));
    c.archival_threshold = static_cast<std::uint64_t>(opt_int(n, "archival_threshold", 0).value_or(128));
    c.lag_trip_ms = opt_int(n, "lag_trip_ms", 0).value_or(c.lag_trip_ms);
    auto ps = n["providers"];
    if (!ps) throw error(n, fmt::format("chain '{}' needs a 'providers' list", c.name));
    if (!ps.IsSequence() || ps.size() == 0) throw error(ps, "'providers' must be a non-empty list");
    std::set<std::string> ids;
    int position = 0;
    for (const auto& pn : ps) {
      Provider p = load_provider(pn, ++position);
      if (!ids.insert(p.id).second) throw error(pn["id"], fmt::format("duplicate provider id '{}'", p.id));
      c.providers.push_back(std::move(p));
    }
    return c;
  }

  Provider load_provider(const YAML::Node& n, int position) {
    require_map(n, "provider");
    check_keys(n,
               {"id", "url", "ws_url", "headers", "api_key", "priority", "weight", "archival", "rate_limit",
                "methods", "limits", "timeout_ms"},
               "provider");
    Provider p;
    auto id = opt_string(n, "id");
    if (!id || id->empty()) throw error(n, "provider needs an 'id'");
    bool id_ok = std::all_of(id->begin(), id->end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
    if (!id_ok) throw error(n["id"], fmt::format("provider id '{}' may only hold letters, digits, '_', '-', '.'", *id));
    p.id = *id;
    std::string api_key;
    if (auto k = n["api_key"]) api_key = substitute(k, scalar(k, "api_key"), true);
    auto url = n["url"];
    if (!url) throw error(n, fmt::format("provider '{}' needs a 'url'", p.id));
    p.url = substitute(url, scalar(url, "url"), false);
    if (api_key.empty() && p.url.find("{api_key}") != std::string::npos) {
      throw error(url, fmt::format("the URL of provider '{}' holds {{api_key}} but the provider has no 'api_key'", p.id));
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
    // A key pasted into the URL is as secret as one from ${VAR}; and an upstream that echoes its
    // request line shows the whole path, whatever it holds.
    for (auto& c : url_credentials(p.url)) secrets_.push_back(std::move(c));
    if (auto t = url_path_and_query(p.url); !t.empty()) url_paths_.push_back(std::move(t));
    if (auto w = n["ws_url"]) {
      p.ws_url = substitute(w, scalar(w, "ws_url"), false);
      check_url(w, p.ws_url, {"ws", "wss"});
      for (auto& c : url_credentials(p.ws_url)) secrets_.push_back(std::move(c));
      if (auto t = url_path_and_query(p.ws_url); !t.empty()) url_paths_.push_back(std::move(t));
    }
    if (auto h = n["headers"]) {
      require_map(h, "headers");
      for (auto it = h.begin(); it != h.end(); ++it) {
        auto name = scalar(it->first, "header name");
        bool name_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        });
        if (!name_ok) throw error(it->first, fmt::format("bad header name '{}'", name));
        auto value = substitute(it->second, scalar(it->second, "header value"), true);
        if (value.find_first_of("\r\n") != std::string::npos) throw error(it->second, "header value holds a line break");
        p.headers.push_back({name, value});
      }
    }
    p.priority = static_cast<int>(opt_int(n, "priority", 0).value_or(position));
    p.weight = opt_double(n, "weight", 0, 1e9).value_or(1.0);
    if (auto a = n["archival"]) p.archival = boolean(a);
    if (auto rl = n["rate_limit"]) {
      require_map(rl, "rate_limit");
      check_keys(rl, {"rps", "burst"}, "rate_limit");
      Quota q;
      q.rps = opt_double(rl, "rps", 0.001, 1e9).value_or(0);
      if (q.rps == 0) throw error(rl, "rate_limit needs 'rps'");
      q.burst = opt_double(rl, "burst", 1, 1e9).value_or(std::max(1.0, q.rps));
      p.rate_limit = q;
    }
    if (auto m = n["methods"]) {
      require_map(m, "methods");
      check_keys(m, {"allow", "deny"}, "methods");
      if (auto a = m["allow"]) p.methods.allow = string_list(a, "allow");
      if (auto d = m["deny"]) p.methods.deny = string_list(d, "deny");
    }
    if (auto l = n["limits"]) {
      require_map(l, "limits");
      check_keys(l, {"max_block_range", "max_batch", "max_response_mb"}, "limits");
      if (auto r = opt_int(l, "max_block_range", 1)) p.limits.max_block_range = static_cast<std::uint64_t>(*r);
      if (auto b = opt_int(l, "max_batch", 1)) p.limits.max_batch = static_cast<std::size_t>(*b);
      if (auto m = opt_int(l, "max_response_mb", 1)) p.limits.max_response_bytes = response_cap(l, *m);
    }
    if (auto t = opt_int(n, "timeout_ms", 1)) {
      p.timeout_ms = *t;
      p.timeout_set = true;
    }
    p.fingerprint = url_fingerprint(p.url);
    return p;
  }

  std::string source_;
  const EnvLookup& env_;
  std::vector<std::string> secrets_;
  std::vector<std::string> url_paths_;
};

bool looks_like_path(std::string_view s) {
  auto ends = [&](std::string_view suf) { return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf; };
  return s.find('/') != std::string_view::npos || ends(".yaml") || ends(".yml");
}

std::optional<std::string> home_relative(const EnvLookup& env, const char* xdg, const char* fallback) {
  if (auto x = env(xdg); x && !x->empty()) return *x;
  if (auto h = env("HOME"); h && !h->empty()) return *h + "/" + fallback;
  return std::nullopt;
}

}  // namespace

Result<Profile> load_profile_text(std::string_view yaml, const std::string& source, const EnvLookup& env) {
  if (yaml.size() > kMaxProfileBytes) {
    return fail(fmt::format("{}: a profile may hold at most {} KiB ({} bytes here)", source, kMaxProfileBytes >> 10,
                            yaml.size()));
  }
  try {
    Loader loader(source, env);
    return loader.load(yaml);
  } catch (const ProfileError& e) {
    return fail(e.message);
  } catch (const YAML::Exception& e) {
    return fail(fmt::format("{}:{}:{}: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

/// The whole file, if it is a regular file of at most kMaxProfileBytes. Opened without blocking
/// and checked once open: a FIFO (or a device such as /dev/zero) is refused, even one put in place
/// after a check by name.
Result<std::string> read_profile_bytes(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) return fail(fmt::format("cannot read profile {}: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return fail(fmt::format("cannot read profile {}: {}", path.string(), std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return fail(fmt::format("profile {} is not a regular file", path.string()));
  auto too_big = [&] {
    return fail(fmt::format("profile {} is larger than {} KiB", path.string(), kMaxProfileBytes >> 10));
  };
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxProfileBytes) return too_big();
  std::string text;
  char buf[16384];
  for (;;) {  // a file growing while read is still bounded
    const auto n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(fmt::format("cannot read profile {}: {}", path.string(), std::strerror(errno)));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxProfileBytes) return too_big();
  }
  return text;
}

}  // namespace

Result<Profile> load_profile_file(const std::filesystem::path& path, const EnvLookup& env) {
  auto text = read_profile_bytes(path);
  if (!text) return tl::unexpected(text.error());
  auto p = load_profile_text(*text, path.string(), env);
  if (p) p->name = path.stem().string();
  return p;
}

std::vector<std::filesystem::path> profile_search_path(const EnvLookup& env) {
  std::vector<std::filesystem::path> dirs;
  if (auto v = env("RPCROUTE_PROFILES"); v && !v->empty()) {
    std::string_view rest = *v;
    while (!rest.empty()) {
      auto colon = rest.find(':');
      auto part = rest.substr(0, colon);
      if (!part.empty()) dirs.emplace_back(part);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  if (auto cfg = home_relative(env, "XDG_CONFIG_HOME", ".config")) dirs.emplace_back(*cfg + "/rpcroute/profiles");
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().parent_path() / "share/rpcroute/profiles");
  return dirs;
}

std::vector<ProfileLocation> list_profiles(const EnvLookup& env) {
  std::vector<ProfileLocation> out;
  std::set<std::string> seen;
  for (const auto& dir : profile_search_path(env)) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      auto ext = entry.path().extension();
      if (ext == ".yaml" || ext == ".yml") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (seen.insert(f.stem().string()).second) out.push_back({f.stem().string(), f.string()});
    }
  }
  if (seen.insert(std::string(kDefaultProfile)).second) out.push_back({std::string(kDefaultProfile), "embedded"});
  return out;
}

Result<Profile> find_profile(std::string_view name_or_path, const EnvLookup& env) {
  if (looks_like_path(name_or_path)) {
    std::filesystem::path path(name_or_path);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return fail(fmt::format("profile file {} does not exist", path.string()));
    return load_profile_file(path, env);
  }
  for (const auto& dir : profile_search_path(env)) {
    for (const char* ext : {".yaml", ".yml"}) {
      auto path = dir / (std::string(name_or_path) + ext);
      std::error_code ec;
      if (std::filesystem::is_regular_file(path, ec)) {
        auto p = load_profile_file(path, env);
        if (p) p->name = std::string(name_or_path);
        return p;
      }
    }
  }
  if (auto text = embedded_profile(name_or_path); !text.empty()) {
    auto p = load_profile_text(text, fmt::format("<embedded {}>", name_or_path), env);
    if (p) {
      p->name = std::string(name_or_path);
      p->source = "embedded";
    }
    return p;
  }
  return fail(fmt::format("unknown profile '{}' (see 'rpcroute profiles list')", name_or_path));
}

}  // namespace rpcroute
