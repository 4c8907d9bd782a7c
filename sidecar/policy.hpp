#pragma once
// Who may use the sidecar (DESIGN.md section 11): the Host check against DNS rebinding, the
// browser Origin allow-list and the bearer token. Pure functions over header values, so that each
// rule is tested on its own (tests/unit/sidecar/policy_test.cpp); the server keeps only the caches
// of the last Host and Origin that passed.

#include <string>
#include <string_view>
#include <vector>

namespace rpcroute::sidecar::policy {

/// The host part of a Host header or an origin's authority, lower-cased, without port or brackets:
///   host_only("LocalHost:8545") == "localhost";  host_only("[::1]:8545") == "::1"
[[nodiscard]] std::string host_only(std::string_view host);

/// A name only this machine answers to: localhost, *.localhost, ::1 and 127.0.0.0/8 (lower case).
[[nodiscard]] bool loopback_name(std::string_view host);

/// A Host header a loopback listener accepts: a loopback name, or the --listen host itself.
/// `listen_host` is the address as given (any case).
[[nodiscard]] bool host_allowed(std::string_view host_header, std::string_view listen_host);

/// A browser Origin allowed to call: http(s)://localhost:*, 127.0.0.1:*, [::1]:* (and the other
/// loopback names), or one of `extra` (--allow-origin, compared without case; "*" allows any).
/// Anything else is refused, "null" (a sandboxed page, a file: URL) included.
[[nodiscard]] bool origin_allowed(std::string_view origin, const std::vector<std::string>& extra);

/// Equal strings, in a time that depends on their lengths only (not on where they differ).
[[nodiscard]] bool constant_time_equal(std::string_view a, std::string_view b);

/// An Authorization header that carries `token`: "Bearer <token>", the scheme in any case
/// (RFC 9110 section 11.1), the token exactly.
[[nodiscard]] bool bearer_token_matches(std::string_view authorization, std::string_view token);

/// A request that asks not to be answered from the cache: Cache-Control with a no-cache or no-store
/// directive, or X-Rpcroute-Cache: bypass (any case).
///   cache_bypass("max-age=0, No-Cache", "") == true;  cache_bypass("", "BYPASS") == true
[[nodiscard]] bool cache_bypass(std::string_view cache_control, std::string_view rpcroute_cache);

}  // namespace rpcroute::sidecar::policy
