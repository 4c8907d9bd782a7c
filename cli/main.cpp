// rpcroute: routes Ethereum JSON-RPC requests across providers. main only wires subcommands.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <system_error>
#include <vector>

#include "cmd_bench.hpp"
#include "cmd_call.hpp"
#include "cmd_cordon.hpp"
#include "cmd_init.hpp"
#include "cmd_probe.hpp"
#include "cmd_profiles.hpp"
#include "cmd_rank.hpp"
#include "cmd_serve.hpp"
#include "cmd_state.hpp"
#include "cmd_subscribe.hpp"
#include "cmd_top.hpp"
#include "help.hpp"
#include "output.hpp"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  rpcroute::cli::guard_standard_streams();
  CLI::App app{"rpcroute — route Ethereum JSON-RPC requests across providers, with failover"};
  app.set_version_flag("--version", std::string("rpcroute ") + RPCROUTE_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 success, 1 the node answered with a JSON-RPC error, 2 usage or configuration "
      "error,\n"
      "3 no provider could serve the request, 4 internal error or output that could not be "
      "written.\n"
      "See rpcroute(1).");
  int exit_code = 0;
  rpcroute::cli::setup_call(app, exit_code);
  rpcroute::cli::setup_subscribe(app, exit_code);
  rpcroute::cli::setup_bench(app, exit_code);
  rpcroute::cli::setup_state(app, exit_code);
  rpcroute::cli::setup_profiles(app, exit_code);
  rpcroute::cli::setup_probe(app, exit_code);
  rpcroute::cli::setup_rank(app, exit_code);
  rpcroute::cli::setup_serve(app, exit_code);
  rpcroute::cli::setup_top(app, exit_code);
  rpcroute::cli::setup_init(app, exit_code);
  rpcroute::cli::setup_cordon(app, exit_code);
  rpcroute::cli::setup_completion(app, exit_code);  // last: it completes every command above
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return rpcroute::cli::finish_output(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return rpcroute::cli::finish_output(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return rpcroute::cli::finish_output(app.exit(e));
  } catch (const CLI::ParseError& e) {
    // One line, like every other usage error, with the nearest command or option to a typo.
    const std::vector<std::string> args(argv + 1, argv + argc);
    rpcroute::cli::print_error(fmt::format("{}{} (see 'rpcroute --help')", e.what(),
                                           rpcroute::cli::suggestion(app, args)));
    return 2;
  } catch (const std::system_error& e) {
    // fmt::print throws when a write fails: on stdout, that is lost output, not an internal error.
    if (std::ferror(stdout)) return rpcroute::cli::finish_output(4, e.code().value());
    rpcroute::cli::print_error(fmt::format("internal error: {}", e.what()));
    return 4;
  } catch (const std::exception& e) {
    rpcroute::cli::print_error(fmt::format("internal error: {}", e.what()));
    return 4;
  }
  // Every command's output is checked here: a write that failed is an error, never exit 0.
  return rpcroute::cli::finish_output(exit_code);
}
