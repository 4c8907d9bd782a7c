#pragma once
// Option values as the subcommands read them: durations, whole numbers, strategies, params words.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/config.hpp"
#include "rpcroute/error.hpp"

namespace CLI {
class Validator;
}

namespace rpcroute::cli {

/// --strategy value: empty → none; unknown → an error listing the seven names.
[[nodiscard]] Result<std::optional<Strategy>> strategy_flag(const std::string& flag);

/// Duration "250", "250ms", "2s", "1.5s", "10m", "2h" → milliseconds; nullopt for anything else,
/// negative or longer than kMaxDurationMs.
[[nodiscard]] std::optional<std::int64_t> parse_duration_ms(std::string_view text);
inline constexpr std::int64_t kMaxDurationMs = 365LL * 86'400'000;

/// The check of an integer option: a decimal whole number in [min, max]. Unlike CLI::Range and
/// CLI::PositiveNumber it refuses "-1" for an unsigned option (CLI11 would wrap it), "0x10" and
/// "1e3", and its message names the range: "--max-batch: 0 is not a whole number from 1 to
/// 1000000".
[[nodiscard]] CLI::Validator whole_number(std::int64_t min, std::int64_t max);

/// Command-line words as a JSON params array: a word that parses as JSON is taken as is, any other
/// as a string ("0x1" stays a string, 7 is a number, latest becomes "latest").
[[nodiscard]] std::string params_json(const std::vector<std::string>& words);

}  // namespace rpcroute::cli
