#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace rpcroute::cli {

struct TopOptions {
  std::string url;  // a sidecar: its /dashboard/state; empty: the state file
  std::string token;
  std::string profile;
  std::string state;
  double interval_s = 1.0;
  bool once = false;
};

void setup_top(CLI::App& app, int& exit_code);
[[nodiscard]] int run_top(const TopOptions& options);

}  // namespace rpcroute::cli
