// Broadcast (a method policy's `broadcast: true`): one call sent to every eligible provider at
// once; the first success answers, the other sends finish in the background.
#include <fmt/format.h>

#include <algorithm>

#include "executor_parts.hpp"

namespace rpcroute {

namespace {

/// A broadcast transaction that another provider already has is not an error.
bool says_already_known(std::string_view message) {
  std::string m(message);
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  for (std::string_view needle :
       {"already known", "known transaction", "already imported", "already exists", "alreadyknown",
        "already in the pool", "already have"}) {
    if (m.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

struct Executor::Broadcast {
  explicit Broadcast(const asio::any_io_executor& ex)
      : wake(ex, asio::steady_timer::time_point::max()) {}
  asio::steady_timer wake;
  std::size_t pending = 0;
  bool winner = false;
  std::string result;
  std::string provider;
  double latency_ms = 0;
  std::optional<std::string> error;  // the answer that was an error, returned if nobody succeeds
  bool error_known = false;          // it says "already known"
  std::string error_provider;
  double error_latency_ms = 0;
  std::vector<AttemptRecord> attempts;
};

asio::awaitable<void> Executor::route_broadcast(const Chain& chain, Item& item,
                                                std::int64_t deadline_us) {
  auto ex = co_await asio::this_coro::executor;
  auto b = std::make_shared<Broadcast>(ex);
  const auto& call = *item.call;
  b->pending = item.plan.candidates.size();
  for (const auto& cand : item.plan.candidates) {
    ++background_;
    asio::co_spawn(ex, broadcast_send(b, &chain, cand, call.method, call.params, deadline_us),
                   asio::detached);
  }
  if (!b->winner && b->pending > 0) {
    boost::system::error_code ec;
    co_await b->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  auto& out = item.out;
  out.broadcast = true;
  out.attempts = b->attempts;
  item.done = true;
  if (b->winner) {
    out.status = CallOutcome::Status::result;
    out.result = b->result;
    out.provider = b->provider;
    out.upstream_latency_ms = b->latency_ms;
    out.response = call.has_id() ? jsonrpc::make_result(call.id, out.result) : std::string();
    co_return;
  }
  if (b->error) {
    out.status = CallOutcome::Status::rpc_error;
    out.provider = b->error_provider;
    out.upstream_latency_ms = b->error_latency_ms;
    out.error = *b->error;
    out.response = error_response(call, out.error);
    co_return;
  }
  finish_unavailable(item, chain, "the broadcast reached no provider");
}

asio::awaitable<void> Executor::broadcast_send(std::shared_ptr<Broadcast> b, const Chain* chain,
                                               Candidate cand, std::string method,
                                               std::string params, std::int64_t deadline_us) {
  const Provider& provider = *cand.provider;
  const auto policy = profile_.policy_for(method);
  const auto remaining_ms = std::max<std::int64_t>(1, (deadline_us - clock_.mono_us()) / 1000);
  const auto timeout = std::min(attempt_timeout_ms(method, provider, policy), remaining_ms);
  const UpstreamCall one{method, params};
  const std::vector<UpstreamCall> upstream{one};
  if (provider.rate_limit) {
    store_.record(QuotaEvent{std::string(cand.key), clock_.now_ms(), 1.0, *provider.rate_limit},
                  profile_.health);
  }
  Exchange ex = co_await send_exchange(transport_, provider, upstream, timeout, clock_, profile_);
  const auto now = clock_.now_ms();
  record_exchange(store_, profile_.health, cand.key, upstream, ex, now, rng_.uniform(),
                  {.trial = cand.breaker == BreakerState::open});
  const auto& c = ex.per_call[0];
  const jsonrpc::Reply* reply = ex.replies[0];
  const double latency_ms = ex.latency_ms();
  b->attempts.push_back(
      {provider.id, scrubbed(c), ex.http.status, latency_ms, TransportKind::http});
  if (c.cls == OutcomeClass::success && !b->winner) {
    b->winner = true;
    b->result = *reply->result;
    b->provider = provider.id;
    b->latency_ms = latency_ms;
    b->wake.cancel();
  } else if (reply != nullptr && reply->error &&
             (c.cls == OutcomeClass::deterministic || c.cls == OutcomeClass::unknown)) {
    // "already known" from one provider while another accepted the transaction is not an error.
    // When nobody accepted it, "already known" (it is in a pool) is returned before any other
    // error, then the first error that came.
    const bool known = says_already_known(reply->error->message);
    if (!b->error || (known && !b->error_known)) {
      b->error =
          jsonrpc::error_object(reply->error->code, reply->error->message, reply->error->data);
      b->error_known = known;
      b->error_provider = provider.id;
      b->error_latency_ms = latency_ms;
    }
  }
  (void)chain;
  if (--b->pending == 0) b->wake.cancel();
  if (--background_ == 0 && drained_) drained_->cancel();
}

asio::awaitable<void> Executor::drain() {
  while (background_ > 0) {
    drained_.emplace(co_await asio::this_coro::executor, asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await drained_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  drained_.reset();
}

}  // namespace rpcroute
