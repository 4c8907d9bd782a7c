#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace rpcroute::cli {

struct RankOptions {
  std::string profile;
  std::string chain;
  std::string method = "eth_blockNumber";
  std::vector<std::string> params;
  std::string strategy;
  std::string state;
  bool no_state = false;
  std::string shared_state;
  bool json = false;
  bool explain = false;
};

void setup_rank(CLI::App& app, int& exit_code);
[[nodiscard]] int run_rank(const RankOptions& options);

}  // namespace rpcroute::cli
