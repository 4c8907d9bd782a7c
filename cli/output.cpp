#include "output.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

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
    for (std::size_t i = 0; i < row.size(); ++i)
      width[i] = std::max(width[i], visible_width(row[i]));
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
  std::string span = a < 60     ? fmt::format("{:.1f}s", a)
                     : a < 3600 ? fmt::format("{:.0f}m", a / 60)
                                : fmt::format("{:.1f}h", a / 3600);
  return d >= 0 ? "in " + span : span + " ago";
}

namespace {

int stdout_errno = 0;                 // the first failed write's errno
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
  if (std::ferror(stdout) && stdout_errno == 0)
    stdout_errno = EIO;  // a failure fmt::print threw for
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

int finish_output(int code, int failed_errno) {
  return finish_stdout(failed_errno) || code != 0 ? code : 4;
}

}  // namespace rpcroute::cli
