#include "policy.hpp"

#include <algorithm>
#include <cctype>

namespace rpcroute::sidecar::policy {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
           return std::tolower(x) == std::tolower(y);
         });
}

}  // namespace

std::string host_only(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return lower(
        host.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  // One colon: a port. More: an IPv6 address without brackets, kept whole.
  auto colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(':') == colon) host = host.substr(0, colon);
  return lower(host);
}

bool loopback_name(std::string_view h) {
  return h == "localhost" || h == "127.0.0.1" || h == "::1" || h.ends_with(".localhost") ||
         (h.starts_with("127.") && h.find_first_not_of("0123456789.") == std::string_view::npos);
}

bool host_allowed(std::string_view host_header, std::string_view listen_host) {
  const auto host = host_only(host_header);
  return loopback_name(host) || host == lower(listen_host);
}

bool origin_allowed(std::string_view origin, const std::vector<std::string>& extra) {
  for (const auto& o : extra) {
    if (o == "*" || lower(o) == lower(origin)) return true;
  }
  auto o = lower(origin);
  std::string_view rest;
  if (o.starts_with("http://"))
    rest = std::string_view(o).substr(7);
  else if (o.starts_with("https://"))
    rest = std::string_view(o).substr(8);
  else
    return false;
  if (rest.find('/') != std::string_view::npos) return false;
  return loopback_name(host_only(rest));
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

bool bearer_token_matches(std::string_view authorization, std::string_view token) {
  return authorization.size() >= 7 && iequals(authorization.substr(0, 7), "Bearer ") &&
         constant_time_equal(authorization.substr(7), token);
}

bool cache_bypass(std::string_view cache_control, std::string_view rpcroute_cache) {
  auto iequal = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == y;
           });
  };
  auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  if (iequal(trim(rpcroute_cache), "bypass")) return true;
  while (!cache_control.empty()) {
    const auto comma = cache_control.find(',');
    const auto directive = trim(cache_control.substr(0, comma));
    if (iequal(directive, "no-cache") || iequal(directive, "no-store")) return true;
    if (comma == std::string_view::npos) break;
    cache_control.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace rpcroute::sidecar::policy
