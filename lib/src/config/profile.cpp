// The profile's own queries (chain and provider lookup, method policies and timeouts, glob
// matching, scrubbing secrets from text). Loading is profile_schema.cpp and profile_files.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <vector>

#include "rpcroute/config.hpp"
#include "rpcroute/methods.hpp"

namespace rpcroute {

std::string_view strategy_name(Strategy s) {
  switch (s) {
    case Strategy::load_balanced:
      return "load_balanced";
    case Strategy::round_robin:
      return "round_robin";
    case Strategy::random:
      return "random";
    case Strategy::weighted:
      return "weighted";
    case Strategy::priority:
      return "priority";
    case Strategy::fastest:
      return "fastest";
    case Strategy::latency_weighted:
      return "latency_weighted";
  }
  return "?";
}

std::string_view transport_mode_name(TransportMode m) {
  switch (m) {
    case TransportMode::http:
      return "http";
    case TransportMode::ws:
      return "ws";
    case TransportMode::automatic:
      return "auto";
  }
  return "?";
}

std::string_view transport_name(TransportKind k) { return k == TransportKind::ws ? "ws" : "http"; }

std::string_view group_name(ProviderGroup g) {
  return g == ProviderGroup::backup ? "backup" : "primary";
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
  if (!name_or_id.empty() && std::all_of(name_or_id.begin(), name_or_id.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
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
  return timeout_class_ms(method_info(method).timeout);
}

std::int64_t attempt_timeout_ms(std::string_view method, const Provider& provider,
                                const MethodPolicy& policy) {
  if (policy.timeout_ms) return *policy.timeout_ms;
  if (provider.timeout_set) return provider.timeout_ms;
  return default_method_timeout_ms(method);
}

std::vector<std::string> Profile::warnings() const {
  std::vector<std::string> out;
  for (const auto& c : chains) {
    for (const auto& p : c.providers) {
      if (!p.tls.insecure) continue;
      out.push_back(
          fmt::format("provider '{}' has tls.insecure: its certificate is not checked; "
                      "anyone on the path can read and change its answers",
                      p.id));
    }
  }
  return out;
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

}  // namespace rpcroute
