#include "yaml_reader.hpp"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>
#include <set>

namespace rpcroute::detail {

namespace {

/// yaml-cpp converts "1" (quoted) to a number; a quoted scalar is a string in a profile.
bool quoted(const YAML::Node& n) { return n.Tag() == "!"; }

bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

/// The scheme (lower case) of an absolute URL, scheme://[user@]host[:port][/path][?query], with a
/// host name or address and a port in range; nullopt for anything else. It applies what curl's
/// URL parser checked for profiles before the binary stopped linking libcurl (curl_api.hpp): no
/// space or control character anywhere, a host of letters, digits, '-', '.', '_' and '~' (or an
/// IPv6 address in brackets), a decimal port up to 65535. Path and query are the provider's.
std::optional<std::string> url_scheme(std::string_view url) {
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return std::nullopt;
  }
  const auto sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0 ||
      std::isalpha(static_cast<unsigned char>(url[0])) == 0)
    return std::nullopt;
  std::string scheme;
  for (char c : url.substr(0, sep)) {
    if (!alnum(c) && c != '+' && c != '-' && c != '.') return std::nullopt;
    scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  auto authority = url.substr(sep + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  std::string_view host;
  std::string_view port;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = authority.substr(1, close - 1);
    for (char c : host) {
      if (std::isxdigit(static_cast<unsigned char>(c)) == 0 && c != ':' && c != '.')
        return std::nullopt;
    }
    const auto after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') return std::nullopt;
    has_port = !after.empty();
    if (has_port) port = after.substr(1);
  } else {
    const auto colon = authority.find(':');
    host = authority.substr(0, colon);
    has_port = colon != std::string_view::npos;
    if (has_port) port = authority.substr(colon + 1);
    for (char c : host) {
      if (!alnum(c) && c != '-' && c != '.' && c != '_' && c != '~') return std::nullopt;
    }
  }
  if (host.empty()) return std::nullopt;
  if (has_port && !port.empty()) {  // "host:" is the scheme's default port
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc{} || end != port.data() + port.size() || value > 65535) return std::nullopt;
  }
  return scheme;
}

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
    // yaml-cpp keeps both entries of a key given twice; a free-keyed map (chains, overrides,
    // headers) would then hold two of one name. Refused here for every map, whatever its keys.
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (it->first.IsScalar() && !seen.insert(it->first.Scalar()).second)
        throw error(it->first, fmt::format("duplicate key '{}'", it->first.Scalar()));
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
  const auto scheme = url_scheme(url);
  if (!scheme) throw error(n, fmt::format("bad URL '{}'", redact_url(url)));
  const std::string& s = *scheme;
  if (std::find(schemes.begin(), schemes.end(), s) == schemes.end()) {
    throw error(n, fmt::format("bad URL '{}': scheme must be {}", redact_url(url),
                               *schemes.begin() == "http" ? "http or https" : "ws or wss"));
  }
}

}  // namespace rpcroute::detail
