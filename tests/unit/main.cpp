#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <csignal>

// The tests run the library as the binary does: cli/main.cpp ignores SIGPIPE before anything
// else, because hiredis writes with write(2) and a peer that has closed would otherwise kill the
// process instead of failing the write with EPIPE.
int main(int argc, char* argv[]) {
  std::signal(SIGPIPE, SIG_IGN);
  return Catch::Session().run(argc, argv);
}
