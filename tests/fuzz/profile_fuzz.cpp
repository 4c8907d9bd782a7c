// Fuzzes profile loading: load_profile_text (YAML parsing, validation, ${VAR} substitution).
//
// The environment answers every variable except those starting with UNSET with a recognisable
// value, "fuzzsecret-" and the variable's name.
//
// Invariants checked besides "no crash, no exception":
// - a loaded profile is what validation promises: at least one chain, unique chain ids and names,
//   at least one provider per chain with a unique, well-formed id, an http(s) URL, the URL's
//   fingerprint, a policy for any method;
// - substituted values are secrets: Profile::scrub removes them from the URLs and header values,
//   and no error message ever shows one (unless the input spelled it out itself). Values written
//   in the file (a literal api_key) are not checked: the file already shows them.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>

#include "check.hpp"
#include "rpcroute/config.hpp"

namespace {

using namespace rpcroute;

constexpr std::string_view kSecretPrefix = "fuzzsecret-";

std::optional<std::string> fuzz_env(const std::string& name) {
  if (name.rfind("UNSET", 0) == 0) return std::nullopt;
  return std::string(kSecretPrefix) + name;
}

bool well_formed_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

bool http_url(std::string_view url) {
  auto lower = std::string(url.substr(0, 8));
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  // curl (which validates the URL) also takes "http:/host" and "http:host".
  return lower.rfind("http:", 0) == 0 || lower.rfind("https:", 0) == 0;
}

void check_profile(const Profile& p) {
  FUZZ_CHECK(!p.chains.empty());
  std::set<std::uint64_t> chain_ids;
  std::set<std::string> chain_names;
  for (const auto& chain : p.chains) {
    FUZZ_CHECK(well_formed_name(chain.name));
    FUZZ_CHECK(chain.chain_id >= 1);
    FUZZ_CHECK(chain_ids.insert(chain.chain_id).second);
    FUZZ_CHECK(chain_names.insert(chain.name).second);
    FUZZ_CHECK(p.find_chain(chain.name) != nullptr);
    // A name wins over an id: a chain named "5" shadows another chain's id 5.
    const Chain* by_id = p.find_chain(std::to_string(chain.chain_id));
    FUZZ_CHECK(by_id != nullptr && (by_id == &chain || by_id->name == std::to_string(chain.chain_id)));
    FUZZ_CHECK(!chain.providers.empty());
    std::set<std::string> ids;
    for (const auto& provider : chain.providers) {
      FUZZ_CHECK(well_formed_name(provider.id));
      FUZZ_CHECK(ids.insert(provider.id).second);
      FUZZ_CHECK(chain.find_provider(provider.id) == &provider);
      FUZZ_CHECK(http_url(provider.url));
      FUZZ_CHECK(provider.fingerprint == url_fingerprint(provider.url));
      FUZZ_CHECK(provider.timeout_ms >= 1);
      FUZZ_CHECK(provider.weight >= 0);
      for (const auto& secret : p.secrets) {
        if (secret.rfind(kSecretPrefix, 0) != 0) continue;  // a value written in the file itself
        FUZZ_CHECK(p.scrub(provider.url).find(secret) == std::string::npos);
        for (const auto& h : provider.headers) FUZZ_CHECK(p.scrub(h.value).find(secret) == std::string::npos);
      }
    }
  }
  for (const auto& secret : p.secrets) FUZZ_CHECK(!secret.empty());
  FUZZ_CHECK(p.routing.timeout_ms >= 1);
  const auto& b = p.health.circuit_breaker;
  FUZZ_CHECK(b.failure_threshold >= 1 && b.success_threshold >= 1);
  FUZZ_CHECK(b.max_recovery_timeout_ms >= b.recovery_timeout_ms);
  for (const auto& o : p.routing.method_overrides) (void)p.policy_for(o.pattern);
  (void)p.policy_for("eth_blockNumber");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto text = rpcroute::fuzz::as_text(data, size);
  EnvLookup env = fuzz_env;
  auto profile = load_profile_text(text, "fuzz.yaml", env);
  if (profile) {
    check_profile(*profile);
    return 0;
  }
  const auto& message = profile.error().message;
  FUZZ_CHECK(message.rfind("fuzz.yaml", 0) == 0);
  if (text.find(kSecretPrefix) == std::string_view::npos) {
    FUZZ_CHECK(message.find(kSecretPrefix) == std::string::npos);
  }
  return 0;
}
