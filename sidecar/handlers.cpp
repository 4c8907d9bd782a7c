// The edge checks and the GET routes; the JSON-RPC job is in rpc_job.cpp.
#include "handlers.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "policy.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/plan_report.hpp"
#include "rpcroute/poller.hpp"

namespace rpcroute::sidecar {

namespace http = boost::beast::http;

namespace {
void log(const std::string& line) { fmt::print(stderr, "{}\n", line); }

void write_shared_status(json::Writer& w, const shared::SharedStatus& s);

void error(Reply& reply, http::status status, std::string_view message) {
  reply.status = status;
  reply.body = json_error_body(message);
}
}  // namespace

Handlers::Handlers(const ServerConfig& config, std::vector<Profile> profiles, Engine& engine,
                   StateStore& store, const Clock& clock, Random& rng, Metrics& metrics,
                   shared::SharedStore* shared)
    : config_(config),
      engine_(engine),
      transport_(std::make_unique<SplitTransport>(engine)),
      store_(store),
      shared_(shared),
      clock_(clock),
      rng_(rng),
      metrics_(metrics) {
  request_prefix_ = Random().engine()() & 0xffffffffULL;
  // Server::start_pollers watches these.
  (void)replace_profiles(std::move(profiles), config_.background_probes);
}

std::shared_ptr<ProfileRuntime> Handlers::make_runtime(Profile profile) {
  auto rt = std::make_shared<ProfileRuntime>();
  rt->profile = std::move(profile);
  rt->router = std::make_unique<Router>(rt->profile, *transport_, health(), clock_, rng_);
  if (shared_ != nullptr) shared_->watch(rt->profile);
  const std::int64_t mb = config_.cache_mb.value_or(rt->profile.cache.max_mb);
  if (mb > 0) rt->cache = std::make_unique<ResponseCache>(static_cast<std::size_t>(mb) << 20);
  for (const auto& chain : rt->profile.chains) {
    rt->chain_keys.push_back(chain_key(rt->profile.name, chain));
    auto& keys = rt->provider_keys.emplace_back();
    for (const auto& p : chain.providers)
      keys.push_back(provider_key(rt->profile.name, chain.name, p));
  }
  rt->last_head.assign(rt->profile.chains.size(), 0);
  rt->activity.assign(rt->profile.chains.size(), {});
  rt->finality_votes.resize(rt->profile.chains.size());
  return rt;
}

std::vector<std::shared_ptr<ProfileRuntime>> Handlers::replace_profiles(
    std::vector<Profile> profiles, bool polled) {
  std::vector<std::shared_ptr<ProfileRuntime>> replaced;
  for (auto& [name, rt] : profiles_) replaced.push_back(std::move(rt));
  profiles_.clear();
  unloadable_.clear();  // a file may have appeared on the search path
  default_profile_.clear();
  for (auto& p : profiles) {
    if (default_profile_.empty()) default_profile_ = p.name;
    auto name = p.name;
    auto rt = make_runtime(std::move(p));
    rt->polled = polled;
    profiles_.emplace(std::move(name), std::move(rt));
  }
  return replaced;
}

const std::shared_ptr<ProfileRuntime>& Handlers::runtime(const std::string& name) {
  static const std::shared_ptr<ProfileRuntime> kNone;
  const std::string& key = name.empty() ? default_profile_ : name;
  if (auto it = profiles_.find(key); it != profiles_.end()) return it->second;
  if (name.empty() || unloadable_.count(name) || profiles_.size() > 64) return kNone;
  // A URL names a profile, never a file: "x.yaml" would be read as a path.
  if (name.ends_with(".yaml") || name.ends_with(".yml") || name.find('/') != std::string::npos)
    return kNone;
  // Profiles on the search path are loaded on first use, by name only (never a path from a URL).
  auto loaded = find_profile(name);
  if (!loaded || (loaded->source == "embedded" && name != kDefaultProfile)) {
    if (!loaded) log(fmt::format("profile '{}' not served: {}", name, loaded.error().message));
    // Names come from request URLs: not remembered forever (a client could grow this set without
    // end); forgetting only costs a lookup on the search path again.
    if (unloadable_.size() >= kMaxUnloadable) unloadable_.clear();
    unloadable_.insert(name);
    return kNone;
  }
  auto& rt = profiles_.emplace(name, make_runtime(std::move(*loaded))).first->second;
  rt->on_demand = true;
  return rt;
}

bool Handlers::prepare(const Request& req, Reply& reply, RpcJob& job, EdgeLoad edge) {
  if (!admit(req, reply)) return false;
  if (req.method == http::verb::options) {
    reply.status = http::status::no_content;
    reply.header("Access-Control-Allow-Methods", "POST, GET, OPTIONS");
    reply.header("Access-Control-Allow-Headers", "Content-Type, Authorization");
    reply.header("Access-Control-Max-Age", "600");
    return false;
  }
  const Route& route = route_for(req.target);
  if (!authorized(req, route, reply)) return false;
  if (route.kind == RouteKind::not_found) {
    reply.status = http::status::not_found;
    reply.body = json_error_body(route.problem, "routes", route_shapes_json());
    return false;
  }
  if (route.kind != RouteKind::rpc || dashboard_root(route, req)) {
    if (req.method != http::verb::get && req.method != http::verb::head) {
      error(reply, http::status::method_not_allowed, "use GET");
      reply.header("Allow", "GET");
      return false;
    }
    if (route.kind == RouteKind::rpc || route.kind == RouteKind::dashboard_page ||
        route.kind == RouteKind::dashboard_state || route.kind == RouteKind::dashboard_events)
      answer_dashboard(route, req, reply);
    else
      answer_get(route, reply, edge);
    return false;
  }
  if (req.method != http::verb::post) {
    error(reply, http::status::method_not_allowed, "JSON-RPC routes take POST");
    reply.header("Allow", "POST, OPTIONS");
    return false;
  }
  return prepare_rpc(req.body, route, reply, job, req.no_cache, req.min_block);
}

bool Handlers::prepare_upgrade(const Request& req, Reply& reply, Route& route) {
  if (!admit(req, reply)) return false;
  route = parse_route(req.target);
  if (!authorized(req, route, reply)) return false;
  if (route.kind != RouteKind::rpc) {
    reply.status = http::status::not_found;
    reply.body = json_error_body(
        route.kind == RouteKind::not_found ? route.problem : "WebSocket is served on RPC routes",
        "routes", route_shapes_json());
    return false;
  }
  RpcJob job;
  return find_chain(route.target, reply, job);
}

bool Handlers::admit(const Request& req, Reply& reply) {
  // DNS rebinding: only loopback names, unless remote access was asked for on a remote address.
  // A client sends the same Host every time: the last one that passed is passed again as is. An
  // empty Host (HTTP/1.0) is not checked.
  const std::string_view host = req.host;
  if (check_host_ && !host.empty() && host != last_good_host_) {
    if (!policy::host_allowed(host, config_.host)) {
      error(reply, http::status::forbidden, "Host header is not a loopback name");
      return false;
    }
    last_good_host_.assign(host);
  }
  const std::string_view origin = req.origin;
  if (origin.empty()) return true;
  if (origin != last_good_origin_ && !policy::origin_allowed(origin, config_.allow_origins)) {
    error(reply, http::status::forbidden,
          fmt::format("origin {} is not allowed (see --allow-origin)",
                      std::string(origin.substr(0, 200))));
    return false;
  }
  last_good_origin_.assign(origin);
  reply.header("Access-Control-Allow-Origin", origin);
  reply.header("Vary", "Origin");
  reply.header("Access-Control-Expose-Headers",
               "X-Rpcroute-Provider, X-Rpcroute-Upstream-Latency, X-Rpcroute-Attempts, "
               "X-Rpcroute-Strategy, X-Rpcroute-Cache, X-Rpcroute-Request-Id, "
               "X-Rpcroute-Transport");
  return true;
}

const Route& Handlers::route_for(const std::string& target) {
  if (route_cache_target_.empty() || target != route_cache_target_) {
    route_cache_ = parse_route(target);
    if (route_cache_.kind != RouteKind::rpc)
      route_cache_target_.clear();
    else
      route_cache_target_ = target;
  }
  return route_cache_;
}

bool Handlers::authorized(const Request& req, const Route& route, Reply& reply) {
  if (config_.token.empty() || route.kind == RouteKind::healthz) return true;
  if (policy::bearer_token_matches(req.authorization, config_.token)) return true;
  error(reply, http::status::unauthorized, "missing or wrong bearer token");
  reply.header("WWW-Authenticate", "Bearer");
  return false;
}

void Handlers::answer_get(const Route& route, Reply& reply, EdgeLoad edge) {
  const auto now = clock_.now_ms();
  if (route.kind == RouteKind::metrics) {
    std::vector<const Profile*> list;
    for (auto& [name, rt] : profiles_) list.push_back(&rt->profile);
    metrics_.edge(edge.connections, edge.request_bytes);
    metrics_.cache(cache_stats(), coalescer_.stats());
    reply.body = metrics_.render(list, store_.state(), now);
    if (shared_ != nullptr) reply.body += Metrics::render_shared(shared_->status());
    reply.content_type = "text/plain; version=0.0.4";
    return;
  }
  json::Writer w;
  w.begin_object();
  if (route.kind == RouteKind::status) {
    write_status(w, edge, now);
  } else if (!write_health(w, now)) {
    reply.status = http::status::service_unavailable;
  }
  w.end_object();
  reply.body = w.take();
}

void Handlers::write_status(json::Writer& w, EdgeLoad edge, std::int64_t now) {
  w.key("profiles");
  w.begin_array();
  for (auto& [name, rt] : profiles_) {
    for (const auto& chain : rt->profile.chains) {
      RouteOptions opts;
      opts.strategy = config_.strategy;
      opts.with_stats = true;
      auto plan = rt->router->plan(chain, "eth_blockNumber", "[]", opts);
      write_plan_json(w, rt->profile, chain, "eth_blockNumber", plan, now, false);
    }
  }
  w.end_array();
  write_cordons(w, now);
  // What /healthz judges, provider by provider, with the reason each one not up is not.
  w.key("health");
  w.begin_array();
  for (auto& [name, rt] : profiles_) {
    for (const auto& chain : rt->profile.chains) write_chain_health(w, *rt, chain, now, true);
  }
  w.end_array();
  write_cache_status(w);
  w.key("in_flight");
  w.value(metrics_.in_flight());
  w.key("request_bytes_in_flight");
  w.value(static_cast<std::int64_t>(edge.request_bytes));
  write_reload_status(w, reload_status_);
  if (shared_ != nullptr) write_shared_status(w, shared_->status());
}

/// /status: the providers an operator took out of routing (`rpcroute cordon`), and until when.
void Handlers::write_cordons(json::Writer& w, std::int64_t now) {
  w.key("cordons");
  w.begin_array();
  for (auto& [name, rt] : profiles_) {
    for (const auto& chain : rt->profile.chains) {
      for (const auto& p : chain.providers) {
        const auto* ps = health().provider(provider_key(rt->profile.name, chain.name, p));
        if (ps == nullptr || !ps->cordon.active(now)) continue;
        w.begin_object();
        w.key("profile");
        w.value(rt->profile.name);
        w.key("chain");
        w.value(chain.name);
        w.key("provider");
        w.value(p.id);
        w.key("reason");
        w.value(ps->cordon.reason);
        w.key("since_ms");
        w.value(ps->cordon.t_ms);
        w.key("until_ms");
        if (ps->cordon.until_ms != 0)
          w.value(ps->cordon.until_ms);
        else
          w.null();
        w.end_object();
      }
    }
  }
  w.end_array();
}

namespace {
/// /status: the shared state's link, as `rpcroute_shared_state_*` in /metrics.
void write_shared_status(json::Writer& w, const shared::SharedStatus& s) {
  w.key("shared_state");
  w.begin_object();
  w.key("redis");
  w.value(s.url);
  w.key("state");
  w.value(shared::link_state_name(s.state));
  w.key("since_ms");
  w.value(s.since_ms);
  w.key("fallbacks");
  w.value(static_cast<std::int64_t>(s.fallbacks));
  w.key("syncs");
  w.value(static_cast<std::int64_t>(s.syncs));
  w.key("adopted");
  w.value(static_cast<std::int64_t>(s.adopted));
  w.key("write_errors");
  w.value(static_cast<std::int64_t>(s.write_errors));
  w.key("script_reloads");
  w.value(static_cast<std::int64_t>(s.script_reloads));
  w.key("last_error");
  w.value(s.last_error);
  w.end_object();
}
}  // namespace

bool Handlers::write_health(json::Writer& w, std::int64_t now) {
  bool all_ok = true;
  w.key("chains");
  w.begin_array();
  for (auto& [name, rt] : profiles_) {
    for (const auto& chain : rt->profile.chains)
      all_ok = write_chain_health(w, *rt, chain, now, false) > 0 && all_ok;
  }
  w.end_array();
  w.key("status");
  w.value(all_ok ? "ok" : "degraded");
  return all_ok;
}

std::int64_t Handlers::write_chain_health(json::Writer& w, const ProfileRuntime& rt,
                                          const Chain& chain, std::int64_t now, bool detail) {
  // Up: eligible for a plain read (not excluded: wrong chain, cordoned, lagging, ...) and alive by
  // its own record. Open breakers are planned as trials when nothing else is; they are not up.
  const auto plan = rt.router->plan(chain, "eth_blockNumber", "[]", {});
  w.begin_object();
  w.key("profile");
  w.value(rt.profile.name);
  w.key("chain");
  w.value(chain.name);
  if (detail) {
    w.key("providers");
    w.begin_array();
  }
  std::int64_t up = 0;
  for (const auto& p : chain.providers) {
    std::string why;
    const auto ex = std::find_if(plan.excluded.begin(), plan.excluded.end(),
                                 [&](const Exclusion& e) { return e.provider == p.id; });
    if (ex != plan.excluded.end()) {
      why = "excluded: " + ex->reason;
    } else {
      const auto* state = store_.provider(provider_key(rt.profile.name, chain.name, p));
      why = liveness_problem(state, chain, p, now, rt.polled);
    }
    if (why.empty()) ++up;
    if (!detail) continue;
    w.begin_object();
    w.key("provider");
    w.value(p.id);
    w.key("up");
    w.value(why.empty());
    if (!why.empty()) {
      w.key("why");
      w.value(why);
    }
    w.end_object();
  }
  if (detail) w.end_array();
  w.key("usable");
  w.value(up);
  w.end_object();
  return up;
}

}  // namespace rpcroute::sidecar
