#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rpcroute::cli {

struct ServeOptions {
  std::string listen = "127.0.0.1:8645";
  std::vector<std::string> profiles;
  std::string state;
  bool no_state = false;
  std::string shared_state;  // redis://... (issue 20); else the profile's shared_state
  std::string strategy;
  std::string log_format = "text";
  bool verbose = false;
  bool allow_remote = false;
  std::string token;
  std::vector<std::string> allow_origins;
  std::size_t max_body = 8 * 1024 * 1024;
  std::size_t max_batch = 1000;
  std::size_t max_connections = 1024;
  std::size_t max_inflight_mb = 256;
  std::optional<std::int64_t> cache_mb;  // overrides each profile's cache.max_mb
  bool no_cache = false;                 // --no-cache: as --cache-mb 0, and said BYPASS
  std::string grace = "10s";
  std::string read_timeout = "10s";
  std::string idle_timeout = "60s";
  std::string ws_ping_timeout = "30s";
  std::size_t ws_max_buffer_kb = 4096;
  bool no_probe = false;
  bool no_dashboard = false;
  std::string port_file;
};

void setup_serve(CLI::App& app, int& exit_code);
[[nodiscard]] int run_serve(const ServeOptions& options);

}  // namespace rpcroute::cli
