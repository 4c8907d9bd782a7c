// Shared upstream subscriptions: one per (profile, chain, params), fanned out to each client under
// its own id.
#include "ws_subscriptions.hpp"

#include <fmt/format.h>

#include <random>
#include <set>
#include <span>
#include <vector>

#include "handlers.hpp"
#include "rpcroute/blocks.hpp"
#include "ws_stream.hpp"
#include "ws_upstream.hpp"

namespace rpcroute::sidecar {

namespace {

constexpr std::size_t kMaxEarly = 256;   // events held for a client before its answer is out
constexpr std::size_t kMaxInbox = 1024;  // events waiting while a backfill runs
constexpr auto kStallTick = std::chrono::milliseconds(250);
constexpr auto kMinShun = std::chrono::seconds(60);  // a stalled or dropped provider: tried last
constexpr auto kMaxRetry = std::chrono::seconds(30);
using Clock = std::chrono::steady_clock;

/// The params without whitespace outside strings: `["newHeads"]` and `[ "newHeads" ]` share.
std::string canonical(std::string_view params) {
  std::string out;
  out.reserve(params.size());
  bool in_string = false;
  bool escaped = false;
  for (char c : params) {
    if (in_string) {
      out.push_back(c);
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
      out.push_back(c);
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      out.push_back(c);
    }
  }
  return out;
}

/// The first string of a params array (`["0xabc"]` → 0xabc), or empty.
std::string first_string(std::string_view params) {
  const auto open = params.find('"');
  if (open == std::string_view::npos) return {};
  const auto close = params.find('"', open + 1);
  if (close == std::string_view::npos) return {};
  return std::string(params.substr(open + 1, close - open - 1));
}

CallOutcome local_answer(const jsonrpc::Call& call, std::string result) {
  CallOutcome o;
  o.status = CallOutcome::Status::local;
  if (call.has_id()) o.response = jsonrpc::make_result(call.id, result);
  o.result = std::move(result);
  return o;
}

CallOutcome error_answer(const jsonrpc::Call& call, std::int64_t code, std::string_view message) {
  CallOutcome o;
  o.status = CallOutcome::Status::unavailable;
  o.error = jsonrpc::error_object(code, message);
  if (call.has_id()) o.response = jsonrpc::make_error(call.id, code, message);
  return o;
}

/// The stream's fetches through the router (failover, breakers and limits as any call), all within
/// the chain's backfill_timeout_ms from its creation.
class RouterFetcher final : public Fetcher {
 public:
  RouterFetcher(std::shared_ptr<ProfileRuntime> rt, const Chain& chain)
      : rt_(std::move(rt)),
        chain_(chain),
        deadline_(Clock::now() + std::chrono::milliseconds(chain.websocket.backfill_timeout_ms)) {}

  asio::awaitable<std::vector<std::optional<std::string>>> fetch(Calls calls) override {
    std::vector<std::optional<std::string>> out(calls.size());
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    if (left <= 0) co_return out;
    std::vector<jsonrpc::Call> list;
    list.reserve(calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i)
      list.push_back(
          {std::to_string(i + 1), std::move(calls[i].first), std::move(calls[i].second), {}});
    RouteOptions options;
    options.timeout_ms = left;
    const std::vector<CallOutcome> outs = co_await rt_->router->route(
        chain_, std::span<const jsonrpc::Call>(list.data(), list.size()), options);
    for (std::size_t i = 0; i < outs.size() && i < out.size(); ++i) {
      if (outs[i].status == CallOutcome::Status::result && !outs[i].result.empty() &&
          outs[i].result != "null")
        out[i] = outs[i].result;
    }
    co_return out;
  }

 private:
  std::shared_ptr<ProfileRuntime> rt_;  // the chain lives in it
  const Chain& chain_;
  Clock::time_point deadline_;
};

enum class Kind : std::uint8_t { heads, logs, other };

Kind kind_of(std::string_view params) {
  const std::string first = first_string(params);
  if (first == "newHeads") return Kind::heads;
  if (first == "logs") return Kind::logs;
  return Kind::other;
}

}  // namespace

struct WsSubscriptions::Shared {
  explicit Shared(const asio::any_io_executor& ex) : opened(ex) {}
  std::string key;
  std::shared_ptr<ProfileRuntime> rt;  // moved to the new one by a reload (rebind)
  const Chain* chain = nullptr;
  std::string params;
  const Provider* provider = nullptr;  // where it is open
  std::string upstream_id;
  bool opening = false;
  bool served = false;        // it was open once: another open continues its clients' stream
  asio::steady_timer opened;  // waiters for the first open
  struct Client {
    std::uint64_t session = 0;
    Sink sink;
    Ended ended;
    bool bare = false;  // the sink takes results alone (rpcroute subscribe)
    // Until its eth_subscribe answer is out, a client's events wait here: the client could not
    // match them to its subscription yet.
    bool ready = false;
    std::vector<std::string> early;
  };
  std::map<std::string, Client> clients;
  // The stream (ws_stream.hpp): events wait in `inbox` while one is being handled (a backfill).
  Kind kind = Kind::other;
  HeadStream heads;
  LogStream logs;
  struct Item {
    bool catch_up = false;  // logs: fetch what the last resubscribe missed
    std::string result;
  };
  std::deque<Item> inbox;
  bool draining = false;
  Clock::time_point last_event{};  // the last event from upstream, or the last (re)open
};

WsSubscriptions::WsSubscriptions(std::size_t max_message, Host host)
    : max_message_(max_message), host_(std::move(host)), id_prefix_(std::random_device{}()) {}

WsSubscriptions::~WsSubscriptions() { *alive_ = false; }

std::size_t WsSubscriptions::upstream_count() const { return by_upstream_.size(); }

void WsSubscriptions::publish() {
  if (host_.upstream_count) host_.upstream_count(by_upstream_.size());
}

WsUpstream& WsSubscriptions::upstream_for(const Provider& provider,
                                          std::shared_ptr<ProfileRuntime> owner) {
  auto& [slot, slot_owner] = upstreams_[&provider];
  if (!slot) {
    slot_owner = std::move(owner);
    slot = std::make_unique<WsUpstream>(
        ex_, provider, max_message_,
        [this, &provider](std::string_view id, std::string_view result) {
          on_event(provider, id, result);
        },
        [this, &provider] { on_drop(provider); });
  }
  return *slot;
}

asio::awaitable<CallOutcome> WsSubscriptions::subscribe(std::uint64_t session,
                                                        std::shared_ptr<ProfileRuntime> rt,
                                                        const Chain& chain,
                                                        const jsonrpc::Call& call,
                                                        Listener listener) {
  const std::string params = canonical(call.params);
  const std::string key = fmt::format("{}\n{}\n{}", rt->profile.name, chain.name, params);
  ex_ = co_await asio::this_coro::executor;
  if (!watching_) {
    watching_ = true;
    asio::co_spawn(ex_, watch_stalls(alive_), asio::detached);
  }
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    auto shared = std::make_shared<Shared>(ex_);
    shared->key = key;
    shared->kind = kind_of(params);
    shared->rt = std::move(rt);
    shared->chain = &chain;
    shared->params = params;
    it = by_key_.emplace(key, std::move(shared)).first;
  }
  Shared& shared = *it->second;
  const std::string client_id = fmt::format("0x{:016x}{:016x}", id_prefix_, ++id_counter_);
  shared.clients[client_id] = {
      session, std::move(listener.sink), std::move(listener.ended), listener.bare, false, {}};
  by_client_[client_id] = &shared;
  // After each wait the subscription is looked up again: its clients may all have left.
  std::string error = "no provider could open the subscription";
  if (shared.provider == nullptr && shared.opening) {
    // Another client's subscribe is on its way: its outcome is ours.
    while ((it = by_key_.find(key)) != by_key_.end() && it->second->opening) {
      it->second->opened.expires_at(asio::steady_timer::time_point::max());
      boost::system::error_code ignored;
      co_await it->second->opened.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
  } else if (shared.provider == nullptr) {
    error = co_await open(shared);
    it = by_key_.find(key);
    if (it != by_key_.end() && it->second->provider == nullptr) {
      // Nobody is served: every client waiting on it gets the error (they are removed). Clients
      // served before (its provider went meanwhile) stay: reopen() goes on trying for them.
      for (auto& [id, c] : it->second->clients) {
        if (!c.ready) by_client_.erase(id);
      }
      std::erase_if(it->second->clients, [](const auto& c) { return !c.second.ready; });
      if (it->second->clients.empty()) by_key_.erase(it);
    }
  }
  if (by_client_.count(client_id) == 0) co_return error_answer(call, jsonrpc::kNoProvider, error);
  // The answer is written as soon as this returns, in the same run of the loop: the events held
  // for this client go after it.
  asio::post(ex_, [this, client_id] {
    auto found = by_client_.find(client_id);
    if (found == by_client_.end()) return;
    auto& client = found->second->clients.at(client_id);
    client.ready = true;
    for (auto& m : client.early) client.sink(std::move(m));
    client.early.clear();
  });
  co_return local_answer(call, fmt::format("\"{}\"", client_id));
}

asio::awaitable<std::string> WsSubscriptions::open(Shared& shared) {
  shared.opening = true;
  const std::string key = shared.key;  // `shared` may go if every client leaves meanwhile
  std::string error = "no provider of this chain has a ws_url";
  // Held across the waits: a reload may move `shared` to another profile meanwhile, and the plan
  // points into this one.
  const std::shared_ptr<ProfileRuntime> rt = shared.rt;
  const Plan plan = rt->router->plan(*shared.chain, "eth_subscribe", shared.params, {});
  std::vector<const Provider*> order;
  for (const auto& candidate : plan.candidates) order.push_back(candidate.provider);
  const auto now = Clock::now();
  std::stable_partition(order.begin(), order.end(), [&](const Provider* p) {
    auto it = shunned_.find(p);
    return it == shunned_.end() || it->second < now;
  });
  for (const Provider* candidate : order) {
    const Provider& provider = *candidate;
    if (provider.ws_url.empty()) continue;
    auto answer = co_await upstream_for(provider, rt).call("eth_subscribe", shared.params);
    if (!answer) {
      error = answer.error();
      continue;
    }
    shared.provider = &provider;
    shared.last_event = Clock::now();
    shared.upstream_id = first_string(*answer);
    by_upstream_[{&provider, shared.upstream_id}] = &shared;
    break;
  }
  shared.opening = false;
  shared.opened.cancel();
  if (shared.clients.empty()) {  // every client left while it opened
    if (shared.provider != nullptr) {
      upstream_for(*shared.provider, rt)
          .notify("eth_unsubscribe", fmt::format("[\"{}\"]", shared.upstream_id));
      by_upstream_.erase({shared.provider, shared.upstream_id});
    }
    by_key_.erase(key);
    error = "every client left";
  } else if (shared.provider != nullptr && std::exchange(shared.served, true)) {
    // Open again (by reopen(), or a new client's subscribe meanwhile): logs catch up first.
    fmt::print(stderr, "rpcroute: websocket subscription on {}: {} opened again on {}\n",
               shared.chain->name, first_string(shared.params), shared.provider->id);
    if (auto found = by_key_.find(key); found != by_key_.end() && shared.kind == Kind::logs) {
      shared.inbox.push_front({true, {}});
      kick(found->second);
    }
  }
  publish();
  co_return error;
}

void WsSubscriptions::on_event(const Provider& provider, std::string_view id,
                               std::string_view result) {
  auto it = by_upstream_.find({&provider, std::string(id)});
  if (it == by_upstream_.end()) return;
  Shared& shared = *it->second;
  shared.last_event = Clock::now();
  if (shared.inbox.size() >= kMaxInbox) {
    // Too much waiting behind a backfill: heads are fetched again from the gap they leave; logs
    // by a catch-up from the last one delivered.
    if (shared.kind == Kind::logs) {
      shared.inbox.clear();
      shared.inbox.push_back({true, {}});
    } else {
      shared.inbox.pop_front();
    }
  }
  shared.inbox.push_back({false, std::string(result)});
  if (auto found = by_key_.find(shared.key); found != by_key_.end()) kick(found->second);
}

void WsSubscriptions::kick(const std::shared_ptr<Shared>& shared) {
  if (shared->draining || shared->inbox.empty()) return;
  shared->draining = true;
  asio::co_spawn(ex_, drain(shared, alive_), asio::detached);
}

asio::awaitable<void> WsSubscriptions::drain(std::shared_ptr<Shared> shared,
                                             std::shared_ptr<bool> alive) {
  const std::string chain = shared->chain->name;
  const Note note = [chain](const std::string& line) {
    fmt::print(stderr, "rpcroute: websocket subscription on {}: {}\n", chain, line);
  };
  const Deliver deliver = [this, shared, alive](const std::string& result) {
    if (*alive) fan_out(*shared, result);
  };
  while (*alive && !shared->inbox.empty() && !shared->clients.empty()) {
    Shared::Item item = std::move(shared->inbox.front());
    shared->inbox.pop_front();
    RouterFetcher fetcher(shared->rt, *shared->chain);
    const WsChainConfig config = shared->chain->websocket;
    try {
      if (shared->kind == Kind::heads)
        co_await shared->heads.on_head(std::move(item.result), config, fetcher, deliver, note);
      else if (shared->kind == Kind::logs && item.catch_up)
        co_await shared->logs.catch_up(shared->params, config, fetcher, deliver, note);
      else if (shared->kind == Kind::logs)
        shared->logs.on_log(item.result, deliver);
      else
        deliver(item.result);
    } catch (const std::exception& e) {
      note(fmt::format("an event was dropped: {}", e.what()));
    }
  }
  shared->draining = false;
  if (*alive && !shared->inbox.empty() && !shared->clients.empty()) kick(shared);
}

void WsSubscriptions::fan_out(Shared& shared, const std::string& result) {
  for (auto& [client_id, client] : shared.clients) {
    if (client.bare) {
      if (client.ready)
        client.sink(result);
      else if (client.early.size() < kMaxEarly)
        client.early.push_back(result);
      continue;
    }
    auto event = fmt::format(
        R"({{"jsonrpc":"2.0","method":"eth_subscription","params":{{"subscription":"{}","result":{}}}}})",
        client_id, result);
    if (client.ready)
      client.sink(std::move(event));
    else if (client.early.size() < kMaxEarly)
      client.early.push_back(std::move(event));
  }
}

void WsSubscriptions::on_drop(const Provider& provider) {
  // Tried last for a while, like a stalled one; and an only provider that keeps dropping waits.
  const auto now = Clock::now();
  shunned_[&provider] = std::max(shunned_[&provider], now + kMinShun);
  const auto first_wait = drops_[&provider].next_wait(now);
  // Every subscription open there is opened again where the routing order says now.
  std::vector<std::string> keys;
  for (auto it = by_upstream_.begin(); it != by_upstream_.end();) {
    if (it->first.first == &provider) {
      it->second->provider = nullptr;
      keys.push_back(it->second->key);
      it = by_upstream_.erase(it);
    } else {
      ++it;
    }
  }
  publish();
  for (const auto& key : keys) asio::co_spawn(ex_, reopen(key, alive_, first_wait), asio::detached);
}

asio::awaitable<void> WsSubscriptions::reopen(std::string key, std::shared_ptr<bool> alive,
                                              std::chrono::milliseconds first_wait) {
  asio::steady_timer pause(ex_);
  auto wait = std::chrono::milliseconds(500);
  const auto since = Clock::now();
  boost::system::error_code ignored;
  if (first_wait.count() > 0) {
    fmt::print(stderr, "rpcroute: websocket: dropped again soon: reopen in {} ms\n",
               first_wait.count());
    pause.expires_after(first_wait);
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  while (*alive) {
    auto found = by_key_.find(key);
    if (found == by_key_.end() || found->second->provider != nullptr) co_return;
    if (found->second->opening) {  // a new client's subscribe is trying: its outcome first
      pause.expires_after(std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      continue;
    }
    const std::shared_ptr<Shared> shared = found->second;
    const std::string error = co_await open(*shared);
    if (!*alive || by_key_.count(key) == 0) co_return;
    if (shared->provider != nullptr) co_return;  // open() queued what its clients missed
    // Past the chain's resubscribe_timeout_ms without a provider: its clients are told.
    const auto limit = std::chrono::milliseconds(shared->chain->websocket.resubscribe_timeout_ms);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(since + limit - Clock::now());
    if (left.count() <= 0) {
      end(key, fmt::format("no provider took the {} subscription again within {} ms: {}",
                           first_string(shared->params), limit.count(), error));
      co_return;
    }
    const auto nap = std::min(wait, left);
    fmt::print(stderr,
               "rpcroute: a subscription could not be opened again: {} (next try in {} ms)\n",
               error, nap.count());
    pause.expires_after(nap);
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    wait = std::min<std::chrono::milliseconds>(wait * 2, kMaxRetry);
  }
}

asio::awaitable<void> WsSubscriptions::watch_stalls(std::shared_ptr<bool> alive) {
  asio::steady_timer tick(ex_);
  while (*alive) {
    tick.expires_after(kStallTick);
    boost::system::error_code ignored;
    co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    if (!*alive) co_return;
    check_stalls();
  }
}

void WsSubscriptions::check_stalls() {
  const auto now = Clock::now();
  std::map<const Provider*, std::string> stalled;
  for (auto& [key, shared] : by_key_) {
    if (shared->kind != Kind::heads || shared->provider == nullptr || shared->opening) continue;
    const WsChainConfig& config = shared->chain->websocket;
    if (config.stall_blocks <= 0) continue;
    const auto limit =
        std::chrono::milliseconds(config.stall_blocks * shared->chain->block_time_ms);
    if (now - shared->last_event < limit) continue;
    const auto last = shared->heads.last_number();
    const std::uint64_t elsewhere = head_elsewhere(*shared);
    if (!last || elsewhere <= *last) continue;
    stalled[shared->provider] = fmt::format(
        "no newHeads from provider {} for {} ms while the chain's head moved to {} elsewhere "
        "(last sent {}): treated as dropped",
        shared->provider->id, limit.count(), elsewhere, *last);
    shunned_[shared->provider] = now + std::max<Clock::duration>(kMinShun, 10 * limit);
  }
  for (const auto& [provider, why] : stalled) {
    fmt::print(stderr, "rpcroute: websocket: {}\n", why);
    if (auto up = upstreams_.find(provider); up != upstreams_.end()) up->second.socket->close();
    on_drop(*provider);
  }
}

std::uint64_t WsSubscriptions::head_elsewhere(const Shared& shared) const {
  const ProfileRuntime& rt = *shared.rt;
  const Chain& chain = *shared.chain;
  std::size_t ci = 0;
  while (ci < rt.profile.chains.size() && &rt.profile.chains[ci] != &chain) ++ci;
  if (ci == rt.profile.chains.size() || ci >= rt.chain_keys.size() || shared.provider == nullptr)
    return 0;
  // The head rule's, not the highest raw height: a liar's claim must not make an honest socket
  // look stalled.
  return rpcroute::head_elsewhere(host_.health(), rt.profile, chain, *shared.provider,
                                  rt.chain_keys[ci], host_.now_ms());
}

void WsSubscriptions::rebind(const Runtimes& current) {
  std::set<const Provider*> gone;
  for (auto& [key, shared] : by_key_) {
    auto now = current.find(shared->rt->profile.name);
    if (now == current.end() || now->second == shared->rt) continue;
    const Chain* chain = nullptr;
    for (const auto& c : now->second->profile.chains) {
      if (c.name == shared->chain->name) chain = &c;
    }
    if (chain == nullptr) continue;
    if (const Provider* open = shared->provider; open != nullptr) {
      const Provider* same = chain->find_provider(open->id);
      if (same == nullptr || same->fingerprint != open->fingerprint || same->ws_url != open->ws_url)
        gone.insert(open);
    }
    shared->rt = now->second;
    shared->chain = chain;
  }
  for (const Provider* provider : gone) {
    if (auto up = upstreams_.find(provider); up != upstreams_.end()) up->second.socket->close();
    on_drop(*provider);
  }
}

CallOutcome WsSubscriptions::unsubscribe(std::uint64_t session, const jsonrpc::Call& call) {
  const std::string id = first_string(call.params);
  auto it = by_client_.find(id);
  if (it == by_client_.end() || it->second->clients.at(id).session != session)
    return local_answer(call, "false");
  remove_client(id);
  return local_answer(call, "true");
}

void WsSubscriptions::drop_session(std::uint64_t session) {
  std::vector<std::string> ids;
  for (auto& [id, shared] : by_client_) {
    if (shared->clients.at(id).session == session) ids.push_back(id);
  }
  for (const auto& id : ids) {
    if (auto last = remove_client(id))
      last->first->notify("eth_unsubscribe", fmt::format("[\"{}\"]", last->second));
  }
}

asio::awaitable<void> WsSubscriptions::leave(std::uint64_t session) {
  std::vector<std::string> ids;
  for (auto& [id, shared] : by_client_) {
    if (shared->clients.at(id).session == session) ids.push_back(id);
  }
  std::vector<std::pair<WsUpstream*, std::string>> open;
  for (const auto& id : ids) {
    if (auto last = remove_client(id)) open.push_back(std::move(*last));
  }
  // The sockets stay while this object does (upstreams_ is never pruned).
  for (auto& [socket, upstream_id] : open)
    (void)co_await socket->call("eth_unsubscribe", fmt::format("[\"{}\"]", upstream_id));
}

std::optional<std::pair<WsUpstream*, std::string>> WsSubscriptions::remove_client(
    const std::string& client_id) {
  auto it = by_client_.find(client_id);
  if (it == by_client_.end()) return std::nullopt;
  Shared& shared = *it->second;
  by_client_.erase(it);
  shared.clients.erase(client_id);
  if (!shared.clients.empty()) return std::nullopt;
  // The last one: the upstream subscription goes too.
  std::optional<std::pair<WsUpstream*, std::string>> last;
  if (shared.provider != nullptr) {
    if (auto up = upstreams_.find(shared.provider); up != upstreams_.end())
      last.emplace(up->second.socket.get(), shared.upstream_id);
    by_upstream_.erase({shared.provider, shared.upstream_id});
  }
  if (!shared.opening) by_key_.erase(shared.key);
  publish();
  return last;
}

void WsSubscriptions::end(const std::string& key, const std::string& reason) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  const std::shared_ptr<Shared> shared = it->second;
  by_key_.erase(it);
  if (shared->provider != nullptr) {  // not reached today: it ends for want of one
    by_upstream_.erase({shared->provider, shared->upstream_id});
    shared->provider = nullptr;
  }
  // Taken out first: a client's callbacks may unsubscribe or drop its session.
  std::map<std::string, Shared::Client> clients;
  clients.swap(shared->clients);
  shared->inbox.clear();
  for (const auto& [id, client] : clients) by_client_.erase(id);
  publish();
  const std::string error = jsonrpc::error_object(
      jsonrpc::kNoProvider, fmt::format("no provider can serve this subscription: {}", reason));
  for (auto& [id, client] : clients) {
    if (!client.bare) {
      client.sink(fmt::format(
          R"({{"jsonrpc":"2.0","method":"eth_subscription","params":{{"subscription":"{}","error":{}}}}})",
          id, error));
    }
    if (client.ended) client.ended(reason);
  }
}

}  // namespace rpcroute::sidecar
