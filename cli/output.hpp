#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
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

/// "rpcroute: error: ..." on stderr, one line.
void print_error(std::string_view message);
/// "rpcroute: warning: ..." on stderr.
void print_warning(std::string_view message);

/// Colours only on a terminal and never with NO_COLOR.
[[nodiscard]] bool use_color(std::FILE* stream);
[[nodiscard]] std::string paint(std::FILE* stream, std::string_view text, std::string_view sgr);

/// Aligned text table.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  [[nodiscard]] std::string render() const;
  [[nodiscard]] bool empty() const { return rows_.size() <= 1; }

 private:
  std::vector<std::vector<std::string>> rows_;
};

[[nodiscard]] std::string format_ms(double ms);
/// "in 12.0s", "3m ago", "-" for 0.
[[nodiscard]] std::string relative_time(std::int64_t t_ms, std::int64_t now_ms);

/// --profile value, else $RPCROUTE_PROFILE, else the embedded default.
[[nodiscard]] Result<Profile> load_selected_profile(const std::string& flag);

/// --chain value (name or id), else the profile's first chain; the error lists the chains.
[[nodiscard]] Result<const Chain*> select_chain(const Profile& profile, const std::string& flag);
/// "a,b" → those providers (unknown ids are an error listing the valid ones); empty → all.
[[nodiscard]] Result<std::vector<const Provider*>> select_providers(const Chain& chain, const std::string& list);

/// --strategy value: empty → none; unknown → an error listing the seven names.
[[nodiscard]] Result<std::optional<Strategy>> strategy_flag(const std::string& flag);

/// --state / --no-state / $RPCROUTE_STATE / XDG rules.
[[nodiscard]] std::optional<std::filesystem::path> resolve_state_path(const std::string& flag, bool no_state);

/// Duration "250", "250ms", "2s", "1.5s" → milliseconds; nullopt for anything else, negative or
/// longer than kMaxDurationMs.
[[nodiscard]] std::optional<std::int64_t> parse_duration_ms(std::string_view text);
inline constexpr std::int64_t kMaxDurationMs = 365LL * 86'400'000;

/// The check of an integer option: a decimal whole number in [min, max]. Unlike CLI::Range and
/// CLI::PositiveNumber it refuses "-1" for an unsigned option (CLI11 would wrap it), "0x10" and
/// "1e3", and its message names the range: "--max-batch: 0 is not a whole number from 1 to 1000000".
[[nodiscard]] CLI::Validator whole_number(std::int64_t min, std::int64_t max);

/// Writes all of `text` to stdout. A failure (a full disk, a closed pipe) is remembered and
/// reported by finish_stdout().
void write_stdout(std::string_view text);

/// Puts /dev/null, opened so that any use of it fails, on each of fds 0-2 that the caller closed:
/// otherwise the next file opened (the state lock, a socket) would take fd 1 and receive the output.
void guard_standard_streams();
/// Flushes stdout and lets it go (later writes fail), so a reader sees the whole output and its
/// end before slow work such as saving the state. False when any output was lost: then an error
/// is printed, except for a closed pipe (`| head`), which is quiet. Later calls return the same.
/// `failed_errno`: a write failure known otherwise (fmt::print throws one).
[[nodiscard]] bool finish_stdout(int failed_errno = 0);
/// The exit code once the output is finished: `code`, or 4 when it was 0 and output was lost.
[[nodiscard]] int finish_output(int code, int failed_errno = 0);

/// Command-line words as a JSON params array: a word that parses as JSON is taken as is, any other
/// as a string ("0x1" stays a string, 7 is a number, latest becomes "latest").
[[nodiscard]] std::string params_json(const std::vector<std::string>& words);

}  // namespace rpcroute::cli
