#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace rpcroute::cli {

struct InitOptions {
  std::vector<std::string> urls;
  std::string name = "mine";
  std::string output;
  bool force = false;
};

void setup_init(CLI::App& app, int& exit_code);
[[nodiscard]] int run_init(const InitOptions& options);

}  // namespace rpcroute::cli
