#pragma once
// Help that helps (issue 21): "did you mean" for a mistyped subcommand or option, and shell
// completions generated from the CLI definition itself, so that they never miss an option.

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace rpcroute::cli {

/// The edit distance of two short words (insertions, deletions, substitutions, transpositions).
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate nearest to `word` when it is near enough to be a typo (at most a third of its
/// length, at least 1, at most 3 edits), else empty.
[[nodiscard]] std::string nearest(std::string_view word,
                                  const std::vector<std::string>& candidates);
/// " (did you mean 'call'?)" for the first mistyped subcommand or option in `args` (argv without
/// the program name) against `app`'s definition, or empty.
[[nodiscard]] std::string suggestion(CLI::App& app, const std::vector<std::string>& args);

/// `rpcroute completion bash|zsh|fish`: prints the script for the shell.
void setup_completion(CLI::App& app, int& exit_code);

}  // namespace rpcroute::cli
