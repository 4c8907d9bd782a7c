#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace rpcroute::cli {

struct ProbeOptions {
  std::string profile;
  std::string chain;
  std::string providers;  // comma-separated ids; empty: all
  std::string timeout;
  int min_healthy = 1;
  std::string state;
  bool no_state = false;
  bool json = false;
};

void setup_probe(CLI::App& app, int& exit_code);
[[nodiscard]] int run_probe(const ProbeOptions& options);

}  // namespace rpcroute::cli
