#include "output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include "rpcroute/json.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute::cli {

// A closed or full stderr must not turn a message into an exception (fmt throws on a failed write).
void print_error(std::string_view message) {
  try {
    fmt::print(stderr, "rpcroute: error: {}\n", message);
  } catch (const std::exception&) {
  }
}
void print_warning(std::string_view message) {
  try {
    fmt::print(stderr, "rpcroute: warning: {}\n", message);
  } catch (const std::exception&) {
  }
}

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

namespace {

/// Width on screen: colour sequences take none, UTF-8 continuation bytes neither.
std::size_t visible_width(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b') {
      while (i < s.size() && s[i] != 'm') ++i;
      continue;
    }
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++n;
  }
  return n;
}

}  // namespace

std::string Table::render() const {
  std::vector<std::size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], visible_width(row[i]));
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - visible_width(row[i]) + 2, ' ');
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

Result<const Chain*> select_chain(const Profile& profile, const std::string& flag) {
  const Chain* chain = flag.empty() ? &profile.chains.front() : profile.find_chain(flag);
  if (chain != nullptr) return chain;
  std::string names;
  for (const auto& c : profile.chains) names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", c.name, c.chain_id);
  return fail(fmt::format("unknown chain '{}' in profile '{}' (chains: {})", flag, profile.name, names));
}

Result<std::vector<const Provider*>> select_providers(const Chain& chain, const std::string& list) {
  std::vector<const Provider*> out;
  if (list.empty()) {
    for (const auto& p : chain.providers) out.push_back(&p);
    return out;
  }
  std::string_view rest = list;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    auto id = rest.substr(0, comma);
    if (!id.empty()) {
      const Provider* p = chain.find_provider(id);
      if (p == nullptr) {
        std::string ids;
        for (const auto& q : chain.providers) ids += fmt::format("{}{}", ids.empty() ? "" : ", ", q.id);
        return fail(fmt::format("unknown provider '{}' on chain {} (providers: {})", id, chain.name, ids));
      }
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (out.empty()) return fail("no provider selected");
  return out;
}

Result<std::optional<Strategy>> strategy_flag(const std::string& flag) {
  if (flag.empty()) return std::optional<Strategy>();
  if (auto s = parse_strategy(flag)) return std::optional<Strategy>(*s);
  return fail(fmt::format("unknown strategy '{}' (expected one of: load_balanced, round_robin, random, weighted, "
                          "priority, fastest, latency_weighted)",
                          flag));
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
  double scale = 0;
  if (unit.empty() || unit == "ms") scale = 1;
  else if (unit == "s") scale = 1000;
  else if (unit == "m") scale = 60'000;
  else return std::nullopt;
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

namespace {

int stdout_errno = 0;                // the first failed write's errno
std::optional<bool> stdout_finished;  // finish_stdout()'s answer, once given

}  // namespace

void write_stdout(std::string_view text) {
  // Through stdio, so that it interleaves correctly with fmt::print.
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    if (stdout_errno == 0) stdout_errno = errno;
  }
}

void guard_standard_streams() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free descriptor is this one. Opened the wrong way round: a read of fd 0 or a
    // write to fd 1 or 2 fails (EBADF) as it would on the closed descriptor.
    const int opened = ::open("/dev/null", (fd == 0 ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
    if (opened >= 0 && opened != fd) ::close(opened);
  }
}

bool finish_stdout(int failed_errno) {
  if (stdout_finished) return *stdout_finished;
  if (stdout_errno == 0) stdout_errno = failed_errno;
  if (std::fflush(stdout) != 0 && stdout_errno == 0) stdout_errno = errno;
  if (std::ferror(stdout) && stdout_errno == 0) stdout_errno = EIO;  // a failure fmt::print threw for
  // Let the descriptor go (readers see the end now); a later write fails instead of reusing it.
  if (const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC); null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::close(null);
  }
  stdout_finished = stdout_errno == 0;
  if (stdout_errno != 0 && stdout_errno != EPIPE) {
    print_error(fmt::format("cannot write the output: {}", std::strerror(stdout_errno)));
  }
  return *stdout_finished;
}

int finish_output(int code, int failed_errno) { return finish_stdout(failed_errno) || code != 0 ? code : 4; }

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
