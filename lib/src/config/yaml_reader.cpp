#include "yaml_reader.hpp"

#include <curl/curl.h>
#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace rpcroute::detail {

namespace {

/// yaml-cpp converts "1" (quoted) to a number; a quoted scalar is a string in a profile.
bool quoted(const YAML::Node& n) { return n.Tag() == "!"; }

}  // namespace

YAML::Node YamlReader::parse(std::string_view text) const {
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
  return root;
}

void YamlReader::check_expansion(const YAML::Node& n, int depth, Expansion& e) const {
  if (depth > kMaxDepth) throw error(n, fmt::format("nested more than {} levels deep", kMaxDepth));
  if (++e.nodes > kMaxNodes) {
    throw error(n, fmt::format("more than {} nodes once aliases are expanded", kMaxNodes));
  }
  if (n.IsScalar()) {
    e.scalar_bytes += n.Scalar().size();
    if (e.scalar_bytes > kMaxScalarBytes) {
      throw error(n, fmt::format("more than {} MiB of text once aliases are expanded",
                                 kMaxScalarBytes >> 20));
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

std::string YamlReader::at(const YAML::Mark& m, std::string_view msg) const {
  return m.is_null() ? fmt::format("{}: {}", source_, msg)
                     : fmt::format("{}:{}:{}: {}", source_, m.line + 1, m.column + 1, msg);
}

ProfileError YamlReader::error(const YAML::Node& n, std::string_view msg) const {
  std::string text = at(n.Mark(), msg);
  // A substituted value may sit anywhere in a URL (even the host): never print one.
  for (const auto& secret : secrets_) {
    for (std::size_t pos = 0;
         !secret.empty() && (pos = text.find(secret, pos)) != std::string::npos;) {
      text.replace(pos, secret.size(), "***");
      pos += 3;
    }
  }
  return ProfileError{std::move(text)};
}

void YamlReader::require_map(const YAML::Node& n, std::string_view what) const {
  if (!n.IsMap()) throw error(n, fmt::format("'{}' must be a mapping", what));
}

void YamlReader::check_keys(const YAML::Node& map, std::initializer_list<std::string_view> allowed,
                            std::string_view where) const {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar())
      throw error(it->first, fmt::format("keys of {} must be names", where));
    auto k = it->first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string list;
      for (auto a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
      throw error(it->first,
                  fmt::format("unknown key '{}' in {} (expected one of: {})", k, where, list));
    }
    if (!seen.insert(k).second)
      throw error(it->first, fmt::format("duplicate key '{}' in {}", k, where));
  }
}

std::string YamlReader::scalar(const YAML::Node& n, std::string_view what) const {
  if (!n.IsScalar()) throw error(n, fmt::format("{} must be a string", what));
  return n.Scalar();
}

std::optional<std::string> YamlReader::opt_string(const YAML::Node& map, const char* key) const {
  auto n = map[key];
  if (!n) return std::nullopt;
  if (!n.IsScalar()) throw error(n, fmt::format("'{}' must be a string", key));
  return n.Scalar();
}

std::optional<std::int64_t> YamlReader::opt_int(const YAML::Node& map, const char* key,
                                                std::int64_t min) const {
  auto n = map[key];
  if (!n) return std::nullopt;
  std::int64_t v = 0;
  if (!n.IsScalar() || quoted(n) || !YAML::convert<std::int64_t>::decode(n, v)) {
    throw error(n, fmt::format("'{}' must be an integer", key));
  }
  if (v < min) throw error(n, fmt::format("'{}' must be at least {}", key, min));
  return v;
}

// Above 4096 MiB a cap bounds nothing.
std::uint64_t YamlReader::response_cap(const YAML::Node& map, std::int64_t mb) const {
  if (mb > 4096) throw error(map["max_response_mb"], "'max_response_mb' must be at most 4096");
  return static_cast<std::uint64_t>(mb) << 20;
}

std::optional<double> YamlReader::opt_double(const YAML::Node& map, const char* key, double lo,
                                             double hi) const {
  auto n = map[key];
  if (!n) return std::nullopt;
  double v = 0;
  if (!n.IsScalar() || quoted(n) || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
    throw error(n, fmt::format("'{}' must be a number", key));
  }
  if (v < lo || v > hi) throw error(n, fmt::format("'{}' must be between {} and {}", key, lo, hi));
  return v;
}

bool YamlReader::boolean(const YAML::Node& n) const {
  bool v = false;
  if (!n.IsScalar() || quoted(n) || !YAML::convert<bool>::decode(n, v))
    throw error(n, "expected true or false");
  return v;
}

Strategy YamlReader::strategy(const YAML::Node& n) const {
  auto name = scalar(n, "strategy");
  if (auto s = parse_strategy(name)) return *s;
  throw error(
      n, fmt::format("unknown strategy '{}' (expected one of: load_balanced, round_robin, random, "
                     "weighted, priority, fastest, latency_weighted)",
                     name));
}

std::vector<std::string> YamlReader::string_list(const YAML::Node& n, std::string_view what) const {
  if (!n.IsSequence()) throw error(n, fmt::format("'{}' must be a list", what));
  std::vector<std::string> out;
  for (const auto& item : n) out.push_back(scalar(item, what));
  return out;
}

std::string YamlReader::substitute(const YAML::Node& n, const std::string& text,
                                   bool secret_by_default) {
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

void YamlReader::check_url(const YAML::Node& n, const std::string& url,
                           std::initializer_list<std::string_view> schemes) const {
  CURLU* u = curl_url();
  auto rc = curl_url_set(u, CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME);
  char* scheme = nullptr;
  char* host = nullptr;
  bool ok = rc == CURLUE_OK && curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host != nullptr &&
            host[0] != '\0';
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

}  // namespace rpcroute::detail
