#include "options.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <CLI/CLI.hpp>
#include <charconv>

#include "rpcroute/json.hpp"

namespace rpcroute::cli {

Result<std::optional<Strategy>> strategy_flag(const std::string& flag) {
  if (flag.empty()) return std::optional<Strategy>();
  if (auto s = parse_strategy(flag)) return std::optional<Strategy>(*s);
  return fail(fmt::format(
      "unknown strategy '{}' (expected one of: load_balanced, round_robin, random, weighted, "
      "priority, fastest, latency_weighted)",
      flag));
}

std::optional<std::int64_t> parse_duration_ms(std::string_view text) {
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || v < 0) return std::nullopt;
  std::string_view unit(p, static_cast<std::size_t>(text.data() + text.size() - p));
  double scale = 0;
  if (unit.empty() || unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else
    return std::nullopt;
  // "inf", "nan" and 1e300 parse as doubles: converting them to an integer is undefined.
  const double ms = v * scale;
  if (!(ms <= static_cast<double>(kMaxDurationMs))) return std::nullopt;
  return static_cast<std::int64_t>(ms);
}

CLI::Validator whole_number(std::int64_t min, std::int64_t max) {
  auto check = [min, max](std::string& input) -> std::string {
    std::int64_t v = 0;
    const char* end = input.data() + input.size();
    auto [p, ec] = std::from_chars(input.data(), end, v);
    if (!input.empty() && ec == std::errc() && p == end && v >= min && v <= max) return {};
    return fmt::format("{} is not a whole number from {} to {}", input, min, max);
  };
  return CLI::Validator(check, fmt::format("INT in [{} - {}]", min, max));
}

std::string params_json(const std::vector<std::string>& words) {
  simdjson::dom::parser parser;
  std::string params = "[";
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) params += ',';
    simdjson::dom::element e;
    const auto& text = words[i];
    if (!text.empty() && parser.parse(text).get(e) == simdjson::SUCCESS) {
      params += text;
    } else {
      params += json::quote(text);
    }
  }
  params += ']';
  return params;
}

}  // namespace rpcroute::cli
