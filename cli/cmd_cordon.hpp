#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace rpcroute::cli {

struct CordonOptions {
  bool on = true;  // cordon; false: uncordon
  std::string provider;
  std::string profile;
  std::string chain;
  std::string for_text;  // --for: empty, until uncordoned
  std::string reason;
  std::string state;
  std::string shared_state;
  bool json = false;
};

/// `rpcroute cordon` and `rpcroute uncordon`.
void setup_cordon(CLI::App& app, int& exit_code);
[[nodiscard]] int run_cordon(const CordonOptions& options);

}  // namespace rpcroute::cli
