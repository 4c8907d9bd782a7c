#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace rpcroute::cli {

struct StateOptions {
  std::string action;  // path | show | reset
  std::string state;
  bool json = false;
};

void setup_state(CLI::App& app, int& exit_code);
[[nodiscard]] int run_state(const StateOptions& options);

}  // namespace rpcroute::cli
