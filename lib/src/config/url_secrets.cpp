// What of a provider URL is secret, and how a URL is shown or keyed without its secrets: redaction
// for messages, the fingerprint that keys state, and the credentials the loader adds to a
// profile's secrets so that they are scrubbed from whatever is printed.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/config.hpp"

namespace rpcroute {

std::string redact_url(std::string_view url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return "***";
  auto rest = url.substr(scheme_end + 3);
  auto path_pos = rest.find_first_of("/?#");
  auto authority = rest.substr(0, path_pos);
  if (auto at = authority.rfind('@'); at != std::string_view::npos)
    authority = authority.substr(at + 1);
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
  for (std::string_view word :
       {"key", "token", "secret", "auth", "pass", "sig", "cred", "session"}) {
    if (n.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

bool looks_like_credential(std::string_view s) {
  if (s.size() < 16) return false;
  bool digit = false, upper = false, lower = false;
  for (unsigned char c : s) {
    if (std::isdigit(c))
      digit = true;
    else if (std::isupper(c))
      upper = true;
    else if (std::islower(c))
      lower = true;
    else if (std::string_view("-_.~+=%:").find(static_cast<char>(c)) == std::string_view::npos)
      return false;
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
    const auto password =
        colon == std::string_view::npos ? std::string_view() : info.substr(colon + 1);
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
    if ((eq != std::string_view::npos && credential_name(pair.substr(0, eq))) ||
        looks_like_credential(value)) {
      add(value);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

}  // namespace rpcroute
