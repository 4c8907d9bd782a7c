#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

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

/// Writes all of `text` to stdout. A failure (a full disk, a closed pipe) is remembered and
/// reported by finish_stdout().
void write_stdout(std::string_view text);

/// Puts /dev/null, opened so that any use of it fails, on each of fds 0-2 that the caller closed:
/// otherwise the next file opened (the state lock, a socket) would take fd 1 and receive the
/// output.
void guard_standard_streams();
/// Flushes stdout and lets it go (later writes fail), so a reader sees the whole output and its
/// end before slow work such as saving the state. False when any output was lost: then an error
/// is printed, except for a closed pipe (`| head`), which is quiet. Later calls return the same.
/// `failed_errno`: a write failure known otherwise (fmt::print throws one).
[[nodiscard]] bool finish_stdout(int failed_errno = 0);
/// The exit code once the output is finished: `code`, or 4 when it was 0 and output was lost.
[[nodiscard]] int finish_output(int code, int failed_errno = 0);

}  // namespace rpcroute::cli
