// The dashboard's routes on the handlers: GET / and /dashboard (the page, compiled in from
// sidecar/dashboard/index.html), /dashboard/state (JSON) and /dashboard/events (SSE, served by
// Dashboard::stream once the connection has the answer). Off with --no-dashboard.
#include "dashboard_view.hpp"
#include "handlers.hpp"

namespace rpcroute::sidecar {

std::string_view dashboard_page();  // generated: dashboard/page.cpp.in

namespace http = boost::beast::http;

bool Handlers::dashboard_root(const Route& route, const Request& req) const {
  const auto& t = route.target;
  return config_.dashboard && route.kind == RouteKind::rpc &&
         (req.method == http::verb::get || req.method == http::verb::head) && t.chain.empty() &&
         t.profile.empty() && !t.strategy && !t.provider;
}

void Handlers::answer_dashboard(const Route& route, const Request& req, Reply& reply) {
  reply.header("Cache-Control", "no-store");
  if (!config_.dashboard) {
    reply.status = http::status::not_found;
    reply.body = json_error_body("the dashboard is off (--no-dashboard)");
    return;
  }
  const auto now = clock_.now_ms();
  if (route.kind == RouteKind::dashboard_state) {
    dashboard_.watched(now);
    json::Writer w;
    write_dashboard_state(w, now);
    reply.body = w.take();
    return;
  }
  if (route.kind == RouteKind::dashboard_events) {
    if (dashboard_.streams() >= Dashboard::kMaxStreams) {
      reply.status = http::status::service_unavailable;
      reply.body = json_error_body("too many dashboard streams open; retry later");
      reply.header("Retry-After", "5");
      return;
    }
    reply.content_type = "text/event-stream";
    reply.event_stream = req.method == http::verb::get;  // HEAD: the head alone
    return;
  }
  reply.body.assign(dashboard_page());
  reply.content_type = "text/html; charset=utf-8";
  // The page loads nothing from anywhere and talks to this sidecar only.
  reply.header("Content-Security-Policy",
               "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
               "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
               "frame-ancestors 'none'");
  reply.header("X-Content-Type-Options", "nosniff");
  reply.header("Referrer-Policy", "no-referrer");
}

void Handlers::write_dashboard_state(json::Writer& w, std::int64_t now) {
  w.begin_object();
  w.key("now_ms");
  w.value(now);
  w.key("chains");
  w.begin_array();
  for (auto& [name, rt] : profiles_) {
    const CacheStats* cache = rt->cache ? &rt->cache->stats() : nullptr;
    for (std::size_t i = 0; i < rt->profile.chains.size(); ++i) {
      const ChainCounters counters{rt->activity[i], cache};
      write_chain_view(w, *rt->router, rt->profile.chains[i], store_, config_.strategy, now,
                       &dashboard_, &counters);
    }
  }
  w.end_array();
  // WebSocket clients and the subscriptions held upstream for them: the sidecar's, not a chain's.
  w.key("websocket");
  w.begin_object();
  w.key("clients");
  w.value(metrics_.websockets());
  w.key("upstream_subscriptions");
  w.value(static_cast<std::uint64_t>(metrics_.websocket_upstream_subscriptions()));
  w.end_object();
  w.key("feed");
  w.begin_object();
  w.key("capacity");
  w.value(static_cast<std::uint64_t>(dashboard_.ring().capacity()));
  w.key("next_seq");
  w.value(dashboard_.ring().next_seq());
  w.key("streams");
  w.value(static_cast<std::uint64_t>(dashboard_.streams()));
  w.key("dropped_streams");
  w.value(dashboard_.dropped_streams());
  w.end_object();
  w.key("in_flight");
  w.value(metrics_.in_flight());
  w.end_object();
}

}  // namespace rpcroute::sidecar
