#pragma once
// A real redis-server for the shared-state tests: started on a free loopback port with no
// persistence, killed when the test ends. scripts/setup installs it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rpcroute::test {

class RedisServer {
 public:
  RedisServer() {
    port_ = free_port();
    const auto port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // Its start-up notices (overcommit, ...) are not the test's output.
      if (const int devnull = ::open("/dev/null", O_WRONLY); devnull >= 0) {
        ::dup2(devnull, 1);
        ::dup2(devnull, 2);
      }
      std::vector<const char*> argv{"redis-server", "--port",     port.c_str(), "--bind",
                                    "127.0.0.1",    "--save",     "",           "--appendonly",
                                    "no",           "--loglevel", "warning",    nullptr};
      ::execvp("redis-server", const_cast<char* const*>(argv.data()));
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto* c = connect(); c != nullptr) {
        redisFree(c);
        return;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-server did not start (is it installed? scripts/setup)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("redis-server did not answer within 10 s");
  }
  ~RedisServer() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  void signal(int sig) const { ::kill(pid_, sig); }

  /// A blocking connection for the test's own commands (null when none could be made).
  [[nodiscard]] redisContext* connect() const {
    timeval tv{1, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    if (c != nullptr && c->err != 0) {
      redisFree(c);
      return nullptr;
    }
    return c;
  }

 private:
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(fd);
      throw std::runtime_error("no free port");
    }
    ::close(fd);
    return ntohs(a.sin_port);
  }

  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace rpcroute::test
