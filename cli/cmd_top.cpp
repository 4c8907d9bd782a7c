// rpcroute top: the dashboard's provider table in a terminal, refreshed once a second, from a
// sidecar's /dashboard/state (--url) or, without one, from the state file through the same view
// writer the sidecar uses (sidecar/dashboard_view.hpp). `q` quits; the terminal's mode is restored
// on every way out (q, end of input, SIGINT, SIGTERM, SIGHUP).
#include "cmd_top.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <simdjson.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>

#include "dashboard_view.hpp"
#include "options.hpp"
#include "output.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/transport.hpp"
#include "rpcroute/transport/curl_api.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_top(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<TopOptions>();
  auto* sub = app.add_subcommand(
      "top",
      "Providers per chain (tier, breaker, lag, p50, traffic share), refreshed live; q quits");
  sub->add_option("--url,-u", opts->url,
                  "A running sidecar (e.g. http://127.0.0.1:8545); without it, the state file");
  sub->add_option("--token", opts->token, "Bearer token of the sidecar (default: $RPCROUTE_TOKEN)");
  sub->add_option("--profile,-p", opts->profile,
                  "Without --url: profile name or path (default: $RPCROUTE_PROFILE or 'public')");
  sub->add_option("--state", opts->state,
                  "Without --url: state file (default: $RPCROUTE_STATE or "
                  "$XDG_STATE_HOME/rpcroute/state.json)");
  sub->add_option("--interval", opts->interval_s, "Seconds between refreshes (default 1)")
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_flag("--once", opts->once, "Print one picture and exit (no screen control)");
  sub->callback([opts, &exit_code] { exit_code = run_top(*opts); });
}

namespace {

std::atomic<int> g_signal{0};
extern "C" void on_top_signal(int sig) { g_signal = sig; }

/// Raw keys on a terminal for the life of `top`: the previous mode comes back in the destructor,
/// which every way out passes (signals only set a flag that ends the loop).
class RawTerminal {
 public:
  RawTerminal() {
    if (::isatty(STDIN_FILENO) == 0 || ::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

/// Waits up to `ms` for a key; true when `q` asks to quit. Input that ends (a pipe, /dev/null) is
/// no longer watched: `top` then runs until a signal.
bool quit_pressed(int ms, bool& input_open) {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, input_open ? 1 : 0, ms) <= 0) return false;  // timeout, or a signal
  char c = 0;
  const auto n = ::read(STDIN_FILENO, &c, 1);
  if (n <= 0) input_open = false;
  return n == 1 && (c == 'q' || c == 'Q');
}

std::size_t append_capped(char* data, std::size_t size, std::size_t n, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (s->size() + size * n > (std::size_t{16} << 20)) return 0;  // a state is far smaller
  s->append(data, size * n);
  return size * n;
}

/// GET URL/dashboard/state: the body, or an error that never shows the URL's secrets.
Result<std::string> fetch_state(const std::string& base, const std::string& token) {
  std::string url = base;
  while (!url.empty() && url.back() == '/') url.pop_back();
  url += "/dashboard/state";
  if (!init_curl()) return fail(curl::load_error());
  CURL* easy = curl::easy_init();
  if (easy == nullptr) return fail("cannot start an HTTP client");
  std::string body;
  curl_slist* headers = nullptr;
  const std::string auth = "Authorization: Bearer " + token;
  if (!token.empty()) headers = curl::slist_append(headers, auth.c_str());
  curl::easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl::easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl::easy_setopt(easy, CURLOPT_TIMEOUT_MS, 3000L);
  curl::easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl::easy_setopt(easy, CURLOPT_WRITEFUNCTION, append_capped);
  curl::easy_setopt(easy, CURLOPT_WRITEDATA, &body);
  const CURLcode rc = curl::easy_perform(easy);
  long status = 0;
  curl::easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  curl::slist_free_all(headers);
  curl::easy_cleanup(easy);
  if (rc != CURLE_OK)
    return fail(
        fmt::format("sidecar {} unreachable: {}", redact_url(base), curl::easy_strerror(rc)));
  if (status == 401) return fail("the sidecar wants a bearer token (--token or $RPCROUTE_TOKEN)");
  if (status == 404) return fail("the sidecar serves no dashboard (started with --no-dashboard?)");
  if (status != 200) return fail(fmt::format("the sidecar answered HTTP {}", status));
  return body;
}

/// The same JSON from the state file, through the sidecar's own view writer (no traffic counts:
/// the share is then the share of recent samples).
Result<std::string> local_state(const TopOptions& options) {
  Setup setup;
  if (!setup.select(options.profile, "")) return fail("");
  if (!setup.open_state(resolve_state_path(options.state, false))) return fail("");
  EventLoop loop;  // the planner sends nothing; the Router wants a transport
  Router router(setup.profile, loop.engine(), *setup.store, setup.clock, setup.rng);
  const auto now = setup.clock.now_ms();
  json::Writer w;
  w.begin_object();
  w.key("now_ms");
  w.value(now);
  w.key("chains");
  w.begin_array();
  for (const auto& chain : setup.profile.chains)
    sidecar::write_chain_view(w, router, chain, *setup.store, std::nullopt, now, nullptr);
  w.end_array();
  w.end_object();
  return w.take();
}

using Field = simdjson::simdjson_result<simdjson::dom::element>;

/// A member as text: "-" when missing or null.
std::string text_of(Field f) {
  simdjson::dom::element e;
  if (f.get(e) != simdjson::SUCCESS || e.is_null()) return "-";
  if (auto s = e.get_string(); !s.error()) return std::string(s.value());
  if (auto i = e.get_int64(); !i.error()) return std::to_string(i.value());
  if (auto u = e.get_uint64(); !u.error()) return std::to_string(u.value());
  return "-";
}

double number_of(Field f, double otherwise) {
  if (auto d = f.get_double(); !d.error()) return d.value();
  return otherwise;
}

std::string breaker_text(simdjson::dom::element p) {
  const std::string state = text_of(p["breaker"]);
  std::string text = state == "half_open" ? "half-open" : state;
  if (auto in = p["half_open_in_ms"].get_int64(); !in.error())
    text += fmt::format(" ({:.0f}s)", static_cast<double>(in.value()) / 1000.0);
  const char* sgr = state == "closed" ? "32" : state == "open" ? "1;31" : "33";
  return paint(stdout, text, sgr);
}

std::string size_text(double bytes) {
  if (bytes < 1024) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024);
  return fmt::format("{:.1f} MiB", bytes / (1024 * 1024));
}

/// A sidecar's chain: one line of its cache use and hedges ("" from the state file).
std::string activity_line(simdjson::dom::element c) {
  simdjson::dom::element cache;
  simdjson::dom::element hedges;
  const bool has_cache = c["cache"].get(cache) == simdjson::SUCCESS;
  const bool has_hedges = c["hedges"].get(hedges) == simdjson::SUCCESS;
  if (!has_cache && !has_hedges) return "";
  std::string line = "cache: off";
  if (has_cache && !cache.is_null()) {
    line = fmt::format("cache: {} hits, {} misses, {} bypasses, {} of {}", text_of(cache["hits"]),
                       text_of(cache["misses"]), text_of(cache["bypasses"]),
                       size_text(number_of(cache["bytes"], 0)),
                       size_text(number_of(cache["max_bytes"], 0)));
  }
  if (has_hedges)
    line +=
        fmt::format("; hedges: {} fired, {} won", text_of(hedges["fired"]), text_of(hedges["won"]));
  return line + "\n";
}

/// How a provider's single requests go now ("http" or "ws"), and its WebSocket's breaker when that
/// is not closed ("http, ws open"): the TRANSPORT column, as rank has it.
std::string transport_text(simdjson::dom::element p) {
  std::string text = text_of(p["transport"]);
  std::string_view breaker;
  if (p["ws_breaker"].get_string().get(breaker) == simdjson::SUCCESS && breaker != "closed")
    text += fmt::format(", ws {}", breaker);
  return text;
}

/// One chain's table. Share: of first attempts when the sidecar counted them, else of samples.
/// TRANSPORT only when a provider may use its WebSocket (`transport: ws` or `auto`).
std::string render_chain(simdjson::dom::element c) {
  std::string out = fmt::format("{} / {} (chain {}), strategy {}, head {}\n", text_of(c["profile"]),
                                text_of(c["chain"]), text_of(c["chain_id"]), text_of(c["strategy"]),
                                text_of(c["head"]));
  double samples = 0;
  for (auto p : c["providers"].get_array()) samples += number_of(p["samples"], 0);
  bool transports = false;
  for (auto p : c["providers"].get_array()) {
    simdjson::dom::element ws;
    transports |= p["ws_breaker"].get(ws) == simdjson::SUCCESS && !ws.is_null();
  }
  std::vector<std::string> head{"PROVIDER", "TIER",  "BREAKER", "LAG",
                                "P50",      "SHARE", "SUCCESS", "EXCLUDED"};
  if (transports) head.insert(head.begin() + 3, "TRANSPORT");
  Table t(head);
  for (auto p : c["providers"].get_array()) {
    const std::string tier = text_of(p["tier"]);
    const double share = number_of(c["first_attempts"], 0) == 0
                             ? (samples > 0 ? number_of(p["samples"], 0) / samples : -1)
                             : number_of(p["first_share"], 0);
    const double p50 = number_of(p["p50_ms"], -1);
    const double success = number_of(p["success_rate"], -1);
    std::string excluded = text_of(p["excluded"]);
    if (excluded.size() > 50) excluded = excluded.substr(0, 47) + "...";
    std::vector<std::string> row{text_of(p["provider"]),
                                 tier == "-" ? tier : tier + " " + text_of(p["tier_name"]),
                                 breaker_text(p),
                                 text_of(p["lag"]),
                                 p50 < 0 ? "-" : format_ms(p50),
                                 share < 0 ? "-" : fmt::format("{:.0f}%", share * 100),
                                 success < 0 ? "-" : fmt::format("{:.0f}%", success * 100),
                                 excluded};
    if (transports) row.insert(row.begin() + 3, transport_text(p));
    t.add(row);
  }
  return out + t.render() + activity_line(c);
}

Result<std::string> render(const std::string& json, std::string_view source, bool once) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS) return fail("the state is not JSON");
  std::string out = fmt::format("rpcroute top: {}{}\n\n", source, once ? "" : ", q quits");
  simdjson::dom::array chains;
  if (doc["chains"].get_array().get(chains) != simdjson::SUCCESS)
    return fail("the state has no chains");
  for (auto c : chains) out += render_chain(c) + "\n";
  simdjson::dom::element ws;
  if (doc["websocket"].get(ws) == simdjson::SUCCESS) {
    out += fmt::format("websocket: {} clients, {} upstream subscriptions\n", text_of(ws["clients"]),
                       text_of(ws["upstream_subscriptions"]));
  }
  return out;
}

}  // namespace

int run_top(const TopOptions& options) {
  std::string token = options.token;
  if (token.empty()) {
    if (const char* t = std::getenv("RPCROUTE_TOKEN"); t != nullptr) token = t;
  }
  const bool tty = ::isatty(STDOUT_FILENO) != 0 && !options.once;
  struct sigaction sa {};
  sa.sa_handler = on_top_signal;  // no SA_RESTART: poll() returns and the loop ends
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  RawTerminal raw;
  const std::string source = options.url.empty() ? "the state file" : redact_url(options.url);
  const int wait_ms = static_cast<int>(options.interval_s * 1000);
  bool input_open = true;
  for (;;) {
    auto json = options.url.empty() ? local_state(options) : fetch_state(options.url, token);
    Result<std::string> frame =
        json ? render(*json, source, options.once) : tl::unexpected(json.error());
    if (!frame) {
      if (frame.error().message.empty()) return code_of(ExitCode::usage);  // printed already
      if (options.once) {
        print_error(frame.error().message);
        return code_of(ExitCode::unavailable);
      }
      frame = fmt::format("rpcroute top: {}\n", frame.error().message);
    }
    write_stdout(tty ? "\x1b[H\x1b[2J" + *frame : *frame);
    std::fflush(stdout);
    if (options.once) return 0;
    if (quit_pressed(wait_ms, input_open) || g_signal != 0) break;
  }
  return 0;
}

}  // namespace rpcroute::cli
