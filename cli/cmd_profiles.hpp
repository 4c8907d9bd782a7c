#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace rpcroute::cli {

struct ProfilesOptions {
  std::string action;  // list | show | validate
  std::string target;
  bool json = false;
};

void setup_profiles(CLI::App& app, int& exit_code);
[[nodiscard]] int run_profiles(const ProfilesOptions& options);

}  // namespace rpcroute::cli
