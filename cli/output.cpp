#include "output.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "rpcroute/state.hpp"

namespace rpcroute::cli {

void print_error(std::string_view message) { fmt::print(stderr, "rpcroute: error: {}\n", message); }
void print_warning(std::string_view message) { fmt::print(stderr, "rpcroute: warning: {}\n", message); }

bool use_color(std::FILE* stream) {
  const char* no = std::getenv("NO_COLOR");
  if (no != nullptr && no[0] != '\0') return false;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::string_view(term) == "dumb") return false;
  return ::isatty(::fileno(stream)) != 0;
}

std::string paint(std::FILE* stream, std::string_view text, std::string_view sgr) {
  if (!use_color(stream)) return std::string(text);
  return fmt::format("\x1b[{}m{}\x1b[0m", sgr, text);
}

std::string Table::render() const {
  std::vector<std::size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

std::string format_ms(double ms) {
  if (ms < 10) return fmt::format("{:.2f} ms", ms);
  if (ms < 1000) return fmt::format("{:.1f} ms", ms);
  return fmt::format("{:.2f} s", ms / 1000);
}

std::string relative_time(std::int64_t t_ms, std::int64_t now_ms) {
  if (t_ms == 0) return "-";
  auto d = t_ms - now_ms;
  auto a = static_cast<double>(d < 0 ? -d : d) / 1000.0;
  std::string span = a < 60 ? fmt::format("{:.1f}s", a) : a < 3600 ? fmt::format("{:.0f}m", a / 60) : fmt::format("{:.1f}h", a / 3600);
  return d >= 0 ? "in " + span : span + " ago";
}

Result<Profile> load_selected_profile(const std::string& flag) {
  std::string name = flag;
  if (name.empty()) {
    const char* env = std::getenv("RPCROUTE_PROFILE");
    name = env != nullptr && env[0] != '\0' ? env : std::string(kDefaultProfile);
  }
  return find_profile(name);
}

std::optional<std::filesystem::path> resolve_state_path(const std::string& flag, bool no_state) {
  if (no_state) return std::nullopt;
  if (!flag.empty()) return std::filesystem::path(flag);
  return default_state_path();
}

std::optional<std::int64_t> parse_duration_ms(std::string_view text) {
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || v < 0) return std::nullopt;
  std::string_view unit(p, static_cast<std::size_t>(text.data() + text.size() - p));
  if (unit.empty() || unit == "ms") return static_cast<std::int64_t>(v);
  if (unit == "s") return static_cast<std::int64_t>(v * 1000);
  if (unit == "m") return static_cast<std::int64_t>(v * 60'000);
  return std::nullopt;
}

void write_stdout(std::string_view text) {
  // Through stdio, so that it interleaves correctly with fmt::print; a closed pipe is not an error.
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace rpcroute::cli
