#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace rpcroute::cli {

struct CallOptions {
  std::string method;
  std::vector<std::string> params;
  std::string profile;
  std::string chain;
  std::string strategy;
  std::string provider;
  std::string timeout;
  int max_attempts = 0;
  std::string state;
  bool no_state = false;
  std::string shared_state;
  bool json = false;
  bool verbose = false;
  bool raw = false;
  bool hedge = false;     // --hedge
  bool no_hedge = false;  // --no-hedge
  std::string min_block;  // --min-block N (decimal or 0x hex)
};

void setup_call(CLI::App& app, int& exit_code);
[[nodiscard]] int run_call(const CallOptions& options);

}  // namespace rpcroute::cli
