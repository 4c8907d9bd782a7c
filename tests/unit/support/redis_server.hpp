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
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rpcroute::test {

/// TLS for the server (rediss://): its certificate and key, the CA it checks client certificates
/// against, and whether clients must present one.
struct RedisTls {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  bool auth_clients = false;
};

/// A test PKI made with openssl in `dir` (EC P-256): ca.pem, server.pem/.key (DNS:localhost,
/// IP:127.0.0.1, signed by ca), client.pem/.key (signed by ca), other_ca.pem (trusted by nobody)
/// and wrong_host.pem (DNS:other.invalid, signed by ca, key server.key).
inline void make_redis_pki(const std::filesystem::path& dir) {
  const auto script = dir / "pki.sh";
  {
    std::ofstream out(script);
    out << R"sh(set -e
cd "$(dirname "$0")"
for n in ca other_ca server client; do
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $n.key
done
for n in ca other_ca; do
  openssl req -new -x509 -key $n.key -subj "/CN=rpcroute test $n" -days 2 \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -out $n.pem
done
sign() { # OUT KEY EXTENSION
  openssl req -new -key $2.key -subj /CN=$2 -addext "$3" -out $1.csr
  openssl x509 -req -in $1.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -copy_extensions copyall -out $1.pem
}
sign server server subjectAltName=DNS:localhost,IP:127.0.0.1
sign wrong_host server subjectAltName=DNS:other.invalid
sign client client extendedKeyUsage=clientAuth
)sh";
  }
  const std::string cmd = "bash '" + script.string() + "' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error("openssl could not make the test PKI in " + dir.string());
}

class RedisServer {
 public:
  /// With `tls`, it also serves TLS on tls_port() (the plain port stays, for the readiness check
  /// and the test's own commands).
  explicit RedisServer(const std::optional<RedisTls>& tls = std::nullopt) {
    port_ = free_port();
    const auto port = std::to_string(port_);
    std::vector<std::string> tls_args;
    if (tls) {
      do {
        tls_port_ = free_port();
      } while (tls_port_ == port_);
      tls_args = {"--tls-port",         std::to_string(tls_port_),
                  "--tls-cert-file",    tls->cert_file,
                  "--tls-key-file",     tls->key_file,
                  "--tls-ca-cert-file", tls->ca_file,
                  "--tls-auth-clients", tls->auth_clients ? "yes" : "no"};
    }
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
                                    "no",           "--loglevel", "warning"};
      for (const auto& a : tls_args) argv.push_back(a.c_str());
      argv.push_back(nullptr);
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
  /// rediss:// on the TLS port, by `host` ("127.0.0.1" or "localhost": both in the test
  /// certificate).
  [[nodiscard]] std::string tls_url(const std::string& host = "127.0.0.1") const {
    return "rediss://" + host + ":" + std::to_string(tls_port_);
  }
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
  int tls_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace rpcroute::test
