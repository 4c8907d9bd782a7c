// The sidecar's lifecycle: listen, accept (or refuse past --max-connections), sweep deadlines,
// flush the state, schedule the head pollers, drain at shutdown.
#include "server.hpp"

#include <fmt/format.h>
#include <malloc.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>

#include "connection.hpp"
#include "response_head.hpp"
#include "rpcroute/poller.hpp"
#include "state_watch.hpp"

namespace rpcroute::sidecar {

using tcp = asio::ip::tcp;

void apply_fence_environment(ServerConfig& config) {
  auto off = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && std::string_view(v) == "0";
  };
  if (off("RPCROUTE_FAST_HTTP1")) config.fast_http1 = false;
  if (off("RPCROUTE_PLAIN_JSON")) config.plain_json = false;
}

namespace {
ServerConfig with_fence_environment(ServerConfig config) {
  apply_fence_environment(config);
  return config;
}
}  // namespace

Server::Server(asio::io_context& io, ServerConfig config, std::vector<Profile> profiles,
               Engine& engine, StateStore& store, const Clock& clock, shared::SharedStore* shared)
    : io_(io),
      config_(with_fence_environment(std::move(config))),
      engine_(engine),
      store_(store),
      shared_(shared),
      clock_(clock),
      handlers_(config_, std::move(profiles), engine, store, clock, rng_, metrics_, shared),
      websockets_(config_, handlers_, metrics_),
      acceptor_(io) {
  body_budget_.cap = config_.max_inflight_bytes;
}

Server::~Server() = default;

Result<std::uint16_t> Server::listen() {
  boost::system::error_code ec;
  auto address =
      asio::ip::make_address(config_.host == "localhost" ? "127.0.0.1" : config_.host, ec);
  if (ec) return fail(fmt::format("bad --listen address '{}'", config_.host));
  if (!address.is_loopback() && !config_.allow_remote) {
    return fail(
        fmt::format("refusing to listen on {} (not loopback) without --allow-remote and a token",
                    config_.host));
  }
  // A token always: --allow-remote on a loopback address turned the Host check off and let any
  // page a DNS-rebinding attack points at 127.0.0.1 through unauthenticated.
  if (config_.allow_remote && config_.token.empty()) {
    return fail("--allow-remote needs a bearer token (--token or $RPCROUTE_TOKEN)");
  }
  // Only clients on this host reach a loopback address, so a Host that is not a loopback name is
  // a rebinding page even with --allow-remote; remote clients name the host any way they like.
  handlers_.check_host(!config_.allow_remote || address.is_loopback());
  tcp::endpoint endpoint(address, config_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return fail(
        fmt::format("cannot listen on {}:{}: {}", config_.host, config_.port, ec.message()));
  port_ = acceptor_.local_endpoint().port();
  return port_;
}

void Server::log(const std::string& line) { fmt::print(stderr, "{}\n", line); }

void Server::save_state(std::string_view why) {
  // On the event loop: never waits for the lock; when another process holds it, the flush loop
  // saves the changes as soon as it is free.
  const bool saved = flush_state(false);
  log(fmt::format("rpcroute: {}: {}; serving on", why,
                  saved ? "state saved" : "the state file is locked, saving once it is free"));
}

bool Server::flush_state(bool wait) {
  if (!store_.dirty()) return true;
  if (wait) {
    if (auto r = store_.save(); !r)
      log(fmt::format("rpcroute: warning: state not saved: {}", r.error().message));
    return true;
  }
  // On the event loop: one non-blocking attempt at the lock. Another process holding it (even a
  // stopped one) must not stall every request; the changes stay pending for the next attempt.
  auto r = store_.try_save();
  if (!r) log(fmt::format("rpcroute: warning: state not saved: {}", r.error().message));
  const bool done = !r || *r;
  if (done) {
    if (flush_deferred_ >= kFlushWarnAfter)
      log("rpcroute: the state file lock is free again; state saved");
    flush_deferred_ = 0;
  } else if (++flush_deferred_ == kFlushWarnAfter) {
    log("rpcroute: warning: the state file is locked by another process; saving is deferred until "
        "it is free");
  }
  return done;
}

asio::awaitable<void> Server::flush_loop() {
  asio::steady_timer timer(io_);
  bool retry = false;
  while (!draining_) {
    timer.expires_after(
        std::chrono::milliseconds(retry ? kFlushRetryMs : config_.flush_interval_ms));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    retry = !flush_state(false);
    // Idle: give freed heap pages back (after large answers, glibc keeps them otherwise).
    if (metrics_.in_flight() == 0) malloc_trim(0);
  }
}

namespace {
/// One provider's watch; `rt` (a parameter, so in the frame) keeps what `target` points to alive.
asio::awaitable<void> watch_provider(std::shared_ptr<ProfileRuntime> rt, PollTarget target,
                                     bool recover) {
  if (recover)
    co_await recover_provider(target, rt->stop);
  else
    co_await poll_provider(target, rt->stop);
}
}  // namespace

void Server::start_pollers(const std::shared_ptr<ProfileRuntime>& rt) {
  for (std::size_t ci = 0; ci < rt->profile.chains.size(); ++ci) {
    const Chain& chain = rt->profile.chains[ci];
    for (const auto& provider : chain.providers) {
      // The chain's pollers share its finality votes: a mark needs a quorum of its providers.
      const PollTarget target{engine_,  handlers_.health(),     clock_, rng_, rt->profile, chain,
                              provider, &rt->finality_votes[ci]};
      asio::co_spawn(io_, watch_provider(rt, target, false), asio::detached);
      asio::co_spawn(io_, watch_provider(rt, target, true), asio::detached);
    }
  }
}

asio::awaitable<void> Server::warn_wrong_chains(std::uint64_t generation) {
  asio::steady_timer timer(io_);
  std::set<std::string> settled;  // warned, or some provider on the right chain: "profile/chain"
  for (int tick = 0; tick < 120 && !draining_ && generation == warn_generation_; ++tick) {
    timer.expires_after(std::chrono::milliseconds(500));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    bool all_settled = true;
    for (const auto& [name, rt] : handlers_.profiles()) {
      for (const auto& chain : rt->profile.chains) {
        const auto id = rt->profile.name + "/" + chain.name;
        if (settled.count(id)) continue;
        const auto warning = wrong_chain_warning(store_, rt->profile, chain);
        if (!warning.empty()) {
          log(fmt::format("rpcroute: warning: {}", warning));
          settled.insert(id);
        } else if (chain_id_confirmed(store_, rt->profile, chain)) {
          settled.insert(id);
        } else {
          all_settled = false;
        }
      }
    }
    if (all_settled) co_return;
  }
}

asio::awaitable<void> Server::accept_loop() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket =
        co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (draining_ || ec == asio::error::operation_aborted) co_return;
      // Out of descriptors (EMFILE, ENFILE) or memory: retrying at once would spin on the CPU.
      // Keep serving the connections we have and try again shortly.
      asio::steady_timer pause(io_, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (connections_.size() + websockets_.size() >= config_.max_connections) {
      metrics_.on_refused("connections");
      // A flood of them is not answered one by one: past a few, closed at once.
      if (refusing_ < 64) asio::co_spawn(io_, refuse_connection(std::move(socket)), asio::detached);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(io_, serve_connection(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> Server::refuse_connection(tcp::socket socket) {
  ++refusing_;
  const std::string body = json_error_body(fmt::format(
      "too many connections (--max-connections {}); retry later", config_.max_connections));
  std::string head;
  constexpr auto kStatus = boost::beast::http::status::service_unavailable;
  if (config_.fast_http1) {
    response_head(head, kStatus, 11, false, "application/json", "Retry-After: 1\r\n", body.size());
  } else {  // RPCROUTE_FAST_HTTP1=0: the whole answer from Beast's serializer, in `head`
    head = beast_serialized(kStatus, 11, false, "application/json", "Retry-After: 1\r\n", body);
  }
  boost::system::error_code ec;
  std::array<asio::const_buffer, 2> out{
      asio::buffer(head), config_.fast_http1 ? asio::buffer(body) : asio::const_buffer()};
  co_await asio::async_write(socket, out, asio::redirect_error(asio::use_awaitable, ec));
  socket.shutdown(tcp::socket::shutdown_send, ec);
  // Shared with the timer's handler, which may run after this frame has gone.
  auto shared = std::make_shared<tcp::socket>(std::move(socket));
  asio::steady_timer limit(io_, std::chrono::seconds(1));
  limit.async_wait([weak = std::weak_ptr<tcp::socket>(shared)](const boost::system::error_code& e) {
    if (auto s = weak.lock(); s && !e) {
      boost::system::error_code ignored;
      s->cancel(ignored);
    }
  });
  std::array<char, 4096> sink;
  while (!ec)
    co_await shared->async_read_some(asio::buffer(sink),
                                     asio::redirect_error(asio::use_awaitable, ec));
  limit.cancel();
  --refusing_;
}

asio::awaitable<void> Server::run() {
  asio::co_spawn(io_, flush_loop(), asio::detached);
  asio::co_spawn(io_, watch_state(store_, draining_), asio::detached);
  asio::co_spawn(io_, sweep_loop(), asio::detached);
  if (config_.background_probes) {
    for (const auto& [name, rt] : handlers_.profiles()) start_pollers(rt);
    asio::co_spawn(io_, warn_wrong_chains(warn_generation_), asio::detached);
  }
  if (loader_) asio::co_spawn(io_, watch_profiles(), asio::detached);
  co_await accept_loop();

  // Draining: wait for in-flight requests, within the grace period.
  asio::steady_timer timer(io_);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.grace_ms);
  // WebSocket clients are closed with 1001 once their calls are answered (shutdown()).
  while ((metrics_.in_flight() > 0 || websockets_.size() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(20));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  for (auto* c : connections_) {
    boost::system::error_code ec;
    c->socket->shutdown(tcp::socket::shutdown_both, ec);
    c->socket->close(ec);
  }
  websockets_.close_all();
  flush_state(true);  // nothing left to serve: may wait for the lock (a bounded wait)
  if (shared_ != nullptr) shared_->stop();
}

void Server::shutdown() {
  if (draining_) return;
  draining_ = true;
  for (const auto& [name, rt] : handlers_.profiles()) rt->stop = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  // Idle keep-alive connections: cancel their wait for a next request. One whose request already
  // arrived (its read completed, not yet resumed) still gets its answer, with Connection: close.
  for (auto* c : connections_) {
    if (!c->busy) c->socket->cancel(ec);
  }
  websockets_.going_away();
}

asio::awaitable<void> Server::sweep_loop() {
  asio::steady_timer timer(io_);
  // Also while draining: a slow client must not hold shutdown for the whole grace period.
  while (!draining_ || !connections_.empty()) {
    timer.expires_after(std::chrono::milliseconds(kSweepMs));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    const auto now = steady_us();
    for (auto* c : connections_) {
      // A client that left while its request is routed: stop the work (and free its memory) now,
      // not when the provider answers or times out.
      if (c->routing && !c->cancel->requested() && client_left(*c->socket)) c->cancel->request();
      if (c->deadline_us == 0 || now < c->deadline_us) continue;
      // The deadline stays: an operation that completed just before this cancel (its handler
      // queued) is followed by one that the next sweep cancels, and timed_out is checked too.
      c->timed_out = true;
      c->socket->cancel(ec);
    }
  }
}

}  // namespace rpcroute::sidecar
