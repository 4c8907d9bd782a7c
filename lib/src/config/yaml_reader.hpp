#pragma once
// Reading a profile's YAML, below its schema (profile_schema.cpp): the document with bounds on
// what its aliases expand to, errors that name the place ("source:line:column: message") and
// never a secret, typed fields stricter than yaml-cpp's conversions, and ${VAR} substitution.
// Internal to the config loader: every failure is thrown as a ProfileError, caught by
// load_profile_text.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/config.hpp"

namespace rpcroute::detail {

/// A profile that cannot be loaded; the message is the one the user sees.
struct ProfileError {
  std::string message;
};

class YamlReader {
 public:
  YamlReader(std::string source, const EnvLookup& env) : source_(std::move(source)), env_(env) {}

  /// The document's root; refused when nested more than kMaxDepth levels, when its aliases
  /// expand to more than kMaxNodes nodes or kMaxScalarBytes of text, or when a map gives a key
  /// twice.
  [[nodiscard]] YAML::Node parse(std::string_view text) const;

  /// "source:line:column: msg" (or "source: msg" without a position), every secret seen so far
  /// replaced with "***".
  [[nodiscard]] ProfileError error(const YAML::Node& n, std::string_view msg) const;

  void require_map(const YAML::Node& n, std::string_view what) const;
  /// Refuses a key outside `allowed` (listing the allowed ones). A key given twice was refused
  /// by parse(), in every map.
  void check_keys(const YAML::Node& map, std::initializer_list<std::string_view> allowed,
                  std::string_view where) const;
  [[nodiscard]] std::string scalar(const YAML::Node& n, std::string_view what) const;
  [[nodiscard]] std::optional<std::string> opt_string(const YAML::Node& map, const char* key) const;
  /// An unquoted integer of at least `min`; a quoted "1" is a string in a profile.
  [[nodiscard]] std::optional<std::int64_t> opt_int(const YAML::Node& map, const char* key,
                                                    std::int64_t min) const;
  /// An unquoted finite number in [lo, hi].
  [[nodiscard]] std::optional<double> opt_double(const YAML::Node& map, const char* key, double lo,
                                                 double hi) const;
  /// max_response_mb (already at least 1) in bytes.
  [[nodiscard]] std::uint64_t response_cap(const YAML::Node& map, std::int64_t mb) const;
  [[nodiscard]] bool boolean(const YAML::Node& n) const;
  [[nodiscard]] Strategy strategy(const YAML::Node& n) const;
  [[nodiscard]] std::vector<std::string> string_list(const YAML::Node& n,
                                                     std::string_view what) const;

  /// ${VAR} substitution; an unset variable is an error naming it (never a value). Each value
  /// substituted becomes a secret; so does the whole text when `secret_by_default` and nothing
  /// was substituted (an api_key given in clear).
  [[nodiscard]] std::string substitute(const YAML::Node& n, const std::string& text,
                                       bool secret_by_default);
  /// A URL curl can parse, with a host and one of `schemes` (the first names the family in the
  /// message: "http or https", "ws or wss").
  void check_url(const YAML::Node& n, const std::string& url,
                 std::initializer_list<std::string_view> schemes) const;

  [[nodiscard]] const std::string& source() const { return source_; }
  void add_secret(std::string secret) { secrets_.push_back(std::move(secret)); }
  /// The secrets gathered while reading, for Profile::secrets.
  [[nodiscard]] std::vector<std::string> take_secrets() { return std::move(secrets_); }

  // yaml-cpp loads an alias as a second handle on the anchored node, but whatever reads the tree
  // (this loader, yaml-cpp's conversions) walks and copies it once per alias: 1 MB of nested
  // aliases would expand to gigabytes. parse() counts what reading would see, and stops at the
  // first node over a bound (so its time is bounded too, cycles included).
  static constexpr int kMaxDepth = 64;
  static constexpr std::size_t kMaxNodes = 100'000;
  static constexpr std::size_t kMaxScalarBytes = 4 << 20;

 private:
  struct Expansion {
    std::size_t nodes = 0;
    std::size_t scalar_bytes = 0;
  };
  void check_expansion(const YAML::Node& n, int depth, Expansion& e) const;
  [[nodiscard]] std::string at(const YAML::Mark& m, std::string_view msg) const;

  std::string source_;
  const EnvLookup& env_;
  std::vector<std::string> secrets_;
};

}  // namespace rpcroute::detail
