#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace rpcroute::cli {

struct BenchOptions {
  std::string profile;
  std::string chain;
  std::vector<std::string> providers;  // empty: every provider of the chain
  std::vector<std::string> methods;    // empty and not given: the default read mix
  bool methods_given = false;
  std::vector<std::string> calls;  // --call 'METHOD:PARAMS_JSON', each measured with its params
  std::string calls_file;          // a JSON-RPC request or batch whose calls are measured
  int requests = 20;               // per provider and method
  std::string duration;            // overrides requests: each method runs this long
  int concurrency = 4;             // requests in flight per provider
  std::string timeout;             // per request; default the provider's timeout_ms
  std::string state;
  bool no_state = false;
  bool no_record = false;
  bool json = false;
};

void setup_bench(CLI::App& app, int& exit_code);
[[nodiscard]] int run_bench(const BenchOptions& options);

}  // namespace rpcroute::cli
