// fake_upstream: a fault-injecting fake Ethereum JSON-RPC upstream for rpcroute's tests.
//
// One thread, one io_context, HTTP/1.1 keep-alive; every connection is its own coroutine, so a
// hanging or delayed answer never holds up another connection.
//
// Usage: fake_upstream [options]              (a flag's value may also be given as --flag=VALUE)
//   --listen HOST:PORT   address to listen on (default 127.0.0.1:0; port 0 picks a free port)
//   --port-file PATH     once listening, write the port and a newline to PATH (tmp file + rename)
//   --chain-id N         eth_chainId / net_version (default 31337)
//   --height N           head block number (default 100)
//   --mine-per-sec R     the head grows by R blocks per second (default 0; R may be fractional)
//   --finality-lag N     eth_getBlockByNumber("safe"/"finalized") answers the block N below the
//                        head (default 0: the head itself; a real chain's finality trails it)
//   --name NAME          web3_clientVersion answers "fake-upstream/NAME" (default "fake")
//   --mode MODE          default behaviour, see below (default ok)
//   --delay-ms N         wait N ms before acting, in every mode (default 0)
//   --status N           status mode: the HTTP status (default 503)
//   --retry-after VALUE  add "Retry-After: VALUE" to every answer on the JSON-RPC path
//   --body TEXT          status, malformed, html modes: the body to send instead of the default
//   --code N             rpc_error mode: error code (default -32603)
//   --message TEXT       rpc_error mode: error message (default "internal error"); its first
//                        "{target}" becomes the request-target (path and query), as echoed by
//                        providers that quote the URL (and its key) in their errors
//   --data JSON          rpc_error mode: error "data" member, any JSON value (default none)
//   --huge-bytes N       huge mode: length of the result string (default 5242880)
//   --drip-ms N          drip mode: pause before each byte of the body (default 100)
//   --extra-ms N         extra mode: 0 glues the extra answer to the real one (default), else it
//                        follows N ms later on the idle connection
//   --gzip-bytes N       gzip_bomb mode: the decoded size of the answer (default 268435456)
//   --chunk-bytes N      0: whole answers carry a Content-Length (default); N > 0: they are sent
//                        chunked instead, N body bytes per chunk (the framing of nginx's echo
//                        module, Cloudflare and most dynamic servers), in the modes that send a
//                        whole answer and in extra mode (the real answer; the extra one is not)
//   --tls-cert FILE      serve HTTPS (TLS 1.2/1.3, ALPN "http/1.1" only, HTTP/1.1) with this PEM
//   --tls-key FILE       certificate chain and its key; every mode and /_control, /_stats work the
//                        same over TLS (a clean close sends close_notify first; reset is an RST)
//   --tls-client-ca FILE with --tls-cert: require a client certificate signed by a CA of FILE
//                        (mTLS)
//   --tls-handshake hang with --tls-cert: never answer the ClientHello; what the client sends
//                        is read and dropped until it leaves (default: ok)
// Without a --tls-* flag it speaks plain HTTP exactly as before. Bad TLS files: exit 2, named.
//   --ws-fault FAULT     what WebSocket connections suffer (default none), see "WebSocket" below
//   --ws-slow-ms N       slow fault: the pause before each event (default 1000)
//   --ws-huge-bytes N    huge fault: the size of the string in each event (default 16777216)
//   --ws-delay-ms N      every answer to a call over a WebSocket waits N ms (default 0; answers
//                        may then pass each other, as a provider's may)
//   --ws-require-header NAME:VALUE   a WebSocket upgrade without the header NAME (any case) of
//                        exactly VALUE is declined with HTTP 401 and a JSON-RPC error body
//                        (-32001 "missing or invalid API key"), as a provider wanting a key does;
//                        HTTP POSTs are not checked
// On start it prints "listening on HOST:PORT" to stdout. SIGINT and SIGTERM end it with status 0.
//
// Modes, applied to each POST to any path other than /_control and /_stats:
//   ok         answer every call (single or batch; ids echoed byte for byte, batch order kept)
//   delay      ok, after --delay-ms
//   status     HTTP --status with --body (default: the reason phrase; Content-Type is
//              application/json if the body starts with { or [, text/html if <, else text/plain)
//   rpc_error  HTTP 200, every call answered {"error":{"code":--code,"message":--message}}
//   malformed  HTTP 200, application/json, not JSON: {"jsonrpc":"2.0","id":<id>,"result":0x12
//   truncated  Content-Length of the full ok answer, half the body sent, then the connection closed
//   html       HTTP 200, text/html, a Cloudflare-like challenge page
//   wrong_id   ok answer whose ids are the client's + 1000 (or "wrong" when not an integer)
//   close      read the request, close the connection without answering (FIN)
//   reset      read the request, reset the connection (SO_LINGER 0, RST)
//   hang       read the request, never answer; the connection stays open until the client leaves
//   huge       every result is a JSON string of --huge-bytes bytes ("0xaaaa…")
//   drip       the ok answer's status line and headers at once, then its body one byte every
//              --drip-ms (a slow body: first byte fast, last byte late)
//   overclaim  a head claiming Content-Length 2000000000, the ok answer's bytes, then nothing
//              more until the client leaves (a lying provider: memory must follow the bytes)
//   extra      the ok answer, then one unsolicited extra answer on the same connection: HTTP 200
//              {"jsonrpc":"2.0","id":<the same id>,"result":"0xdeadbeef"}, in the same write
//              (--extra-ms 0) or --extra-ms later; the connection then serves on (a keep-alive
//              desync: a client that reads it as the next request's answer is one answer behind)
//   endless    HTTP 200, chunked, {"jsonrpc":"2.0","id":<id>,"result":"0xaaaa… without end, as
//              fast as the client reads, until it leaves
//   endless_length   the same with a head claiming Content-Length 1099511627776 (1 TiB)
//   gzip_bomb  HTTP 200, Content-Encoding: gzip (whatever the request's Accept-Encoding), the ok
//              answer's envelope around a result string of --gzip-bytes decoded bytes ("0xaaaa…"):
//              about a thousandth of that on the wire
// Methods known in ok mode: eth_blockNumber eth_chainId net_version web3_clientVersion eth_syncing
// eth_gasPrice eth_getBalance eth_getTransactionCount eth_getCode eth_call eth_getLogs
// eth_getBlockByNumber (null above the head) eth_getTransactionReceipt (a hash's last four hex
// digits are its block: null above the head) eth_sendRawTransaction eth_newFilter
// eth_newBlockFilter eth_newPendingTransactionFilter ("0x1", "0x2", …) eth_getFilterChanges
// eth_getFilterLogs ([] or -32000 "filter not found") eth_uninstallFilter. Anything else gets
// -32601 "the method X does not exist/is not available"; a body that is not JSON gets -32700 with
// id null; a call without an id is answered with id null (no notification semantics). simdjson
// rejects integers wider than 64 bits, so a body holding one is answered as not JSON.
//
// WebSocket: a GET with an Upgrade: websocket on any path (over TLS too with --tls-cert: wss://)
// is accepted, and each text message is a JSON-RPC call or batch answered as in ok mode (the HTTP
// modes, queue, paths and hold do not apply to it), except:
//   eth_subscribe ["newHeads"]   a subscription id; then one eth_subscription event per block
//                                mined (--mine-per-sec), from the head at the time of the call on:
//                                {"number","hash","parentHash","timestamp"} exactly as
//                                eth_getBlockByNumber answers them (the hash of block N is a
//                                function of N alone: fakes of one chain agree with each other)
//   eth_subscribe ["logs",…] / ["newPendingTransactions"]   an id, never an event (no logs here)
//   eth_unsubscribe [ID]         true if ID was a subscription of this socket, else false
// The chain is looked at every 50 ms. Faults (--ws-fault, or "ws_fault" at run time; an open
// socket meets a new fault at its next event):
//   none       as above
//   drop       ws_drop: the TCP socket is closed (no close frame, no close_notify) instead of the
//              next event; a new socket is accepted and dropped likewise at its first event
//   stall      ws_stall: nothing more is sent, no event, no answer and no pong (what the client
//              sends is read and dropped), the socket stays open until the client leaves; a new
//              socket is upgraded and then stalls
//   garbage    ws_garbage: each event is replaced by a frame that is not one: in turn not JSON,
//              JSON that is not JSON-RPC, an event without a subscription, an event of a
//              subscription nobody holds; answers to calls are still sent
//   slow       ws_slow: each event waits --ws-slow-ms first (the socket falls behind the chain)
//   refuse     ws_refuse: an upgrade is refused with HTTP 503; open sockets are dropped as by drop
//              (--ws-require-header is checked before the fault: a 401 comes first)
//   huge       ws_huge: the next event carries an "extraData" string of --ws-huge-bytes bytes
//              (past the client's message limit) in one frame, of which only the header and the
//              first 1 KiB are sent: from then on nothing more is sent (the message never ends,
//              as from a provider that stalls mid-message) and nothing answered (neither
//              a close frame nor a ping: a client that waits for our side of the closing handshake
//              waits), what the client sends is read and dropped but for the code of its close
//              frame (1009 counts in "too_big"), and the socket stays open 30 s after the client's
//              FIN
//
// Control API:
//   POST /_control  JSON object, every field optional; answers 200 {"ok":true}, or 400
//                   {"ok":false,"error":"…"} (nothing applied) on an unknown field or bad value.
//     "mode", "delay_ms", "status", "retry_after" (string or number), "body", "code", "message",
//     "data" (any JSON), "huge_bytes", "drip_ms", "extra_ms", "gzip_bytes", "chunk_bytes",
//     "headers": [["Name", "value"], …]   more header fields on the answers of modes that send a
//                                       whole answer (ok, delay, status, rpc_error, malformed,
//                                       html, wrong_id, huge), after Retry-After, in order, names
//                                       spelled as given (a repeated or lower-case field)
//                                       change the default behaviour; giving "mode" resets the
//                                       behaviour fields not given in the same body to defaults
//     "height", "chain_id", "mine_per_sec"   change the chain ("height" restarts mining from there)
//     "block_number": JSON   eth_blockNumber answers this raw result instead of the head (a lying
//                            or invalid head: "0x", "-0x1", 5, "0x7fffffffffffffff"); null: the
//                            head
//     "queue": [{behaviour fields}, …]  append one-shot behaviours, each used by exactly one
//                                       JSON-RPC HTTP request (fields not given take the defaults
//                                       above, i.e. mode "ok"), before the default applies again
//     "clear_queue": true   drop queued behaviours (before "queue" of the same body is appended)
//     "paths": {"/PATH": {behaviour fields}, …}   per-path behaviour: POSTs to /PATH (query
//                                       ignored) use it instead of the default (queued one-shots
//                                       still come first); fields not given take the defaults;
//                                       replaces what /PATH had. One fake, many faulty "providers".
//     "clear_paths": true   drop every per-path behaviour (before "paths" of the same body)
//     "ws_fault": "none"|"drop"|"stall"|"garbage"|"slow"|"refuse"|"huge", "ws_slow_ms",
//     "ws_huge_bytes", "ws_delay_ms"   the WebSocket fault and its settings (not reset by "mode")
//     "reset_stats": true   zero the counters
//     "hold": true|false    true: every JSON-RPC answer from now on waits (after its delay) until
//                           a "hold": false releases them all at once; to have a router's
//                           clients all in flight at a known moment, whatever the machine's load
//   GET /_stats  {"requests":N,"calls":N,"methods":{"eth_blockNumber":N,…},"paths":{"/":N,…},
//                 "mode":"ok","height":N,"chain_id":N,"queued":N,"hanging":N,"held":N}
//     requests: JSON-RPC HTTP requests received (counted on receipt, whatever the answer);
//     calls: JSON-RPC calls in them (batch items each count; non-JSON or [] count none);
//     paths: those requests by path.
//     hanging: requests hang mode holds now (their client has not left); 0 once every client
//     gave up (a router that abandons work it no longer needs brings it back to 0 at once).
//     held: requests "hold" keeps waiting now.
//     ws: {"fault":NAME,"open":N,"upgrades":N,"refused":N,"calls":N,"subscriptions":N,
//          "unsubscribes":N,"events":N,"faulty":N,"drops":N,"stalls":N,"too_big":N,
//          "unauthorized":N}: WebSockets
//     open now, upgrades accepted and refused, JSON-RPC calls read from WebSockets (not in "calls"
//     above), subscriptions served and ended, head events sent whole, frames sent instead of
//     events (garbage, huge), sockets dropped and stalled, and close frames received with code
//     1009 (the client's "message too big"), upgrades declined with 401 (--ws-require-header).
//     reset_stats zeroes all but "open".
//     With --tls-cert only, a last member "tls":{"connections":N,"handshakes":N,"failures":N,
//     "hanging":N}: TCP connections accepted, TLS handshakes completed and failed (the client
//     refused the certificate, gave none under --tls-client-ca, …), connections held now by
//     --tls-handshake hang. reset_stats zeroes all but "hanging". Connection reuse shows here.
//
// Example:
//   fake_upstream --port-file /tmp/p --mode status --status 429 --retry-after 2
//   body='{"mode":"ok","queue":[{"mode":"hang"},{"mode":"rpc_error","code":-32005}]}'
//   curl -s -d "$body" http://127.0.0.1:$(cat /tmp/p)/_control
//   fake_upstream --port-file /tmp/p --tls-cert server.pem --tls-key server.key
//   curl -s --cacert ca.pem https://localhost:$(cat /tmp/p)/_stats
// tests/e2e/tls_helpers.bash makes the test PKI (make_test_pki) and starts a TLS fake
// (start_tls_fake).

// clang-format off
#include "rpcroute/asio_compat.hpp"  // before any Asio or Beast header
// clang-format on

#include <fmt/format.h>
#include <simdjson.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <cctype>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tl/expected.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#include "fake_tls.hpp"

namespace {

namespace asio = rpcroute::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace ondemand = simdjson::ondemand;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

constexpr std::size_t kMaxBodyBytes = 64 * 1024 * 1024;

constexpr std::string_view kUsage = R"(usage: fake_upstream [options]
  --listen HOST:PORT   (default 127.0.0.1:0)     --port-file PATH
  --chain-id N         (default 31337)           --height N (default 100)
  --mine-per-sec R     (default 0)               --name NAME (default fake)
  --finality-lag N     (default 0)
  --mode ok|delay|status|rpc_error|malformed|truncated|html|wrong_id|close|reset|hang|huge|drip|overclaim
         |extra|endless|endless_length|gzip_bomb
  --delay-ms N  --status N  --retry-after VALUE  --body TEXT
  --code N  --message TEXT  --data JSON  --huge-bytes N  --drip-ms N  --extra-ms N  --gzip-bytes N
  --chunk-bytes N
  --tls-cert FILE --tls-key FILE   serve HTTPS   --tls-client-ca FILE   --tls-handshake ok|hang
  --ws-fault none|drop|stall|garbage|slow|refuse|huge   --ws-slow-ms N   --ws-huge-bytes N
  --ws-delay-ms N   --ws-require-header NAME:VALUE
The control API and the modes are described at the top of tests/fakes/fake_upstream.cpp.
)";

template <class T>
using Expected = tl::expected<T, std::string>;
using Unexpected = tl::unexpected<std::string>;

// ---------------------------------------------------------------------------------------------
// Behaviour

enum class Mode {
  ok,
  delay,
  status,
  rpc_error,
  malformed,
  truncated,
  html,
  wrong_id,
  close,
  reset,
  hang,
  huge,
  drip,
  overclaim,
  extra,
  endless,
  endless_length,
  gzip_bomb
};

constexpr std::array<std::pair<Mode, std::string_view>, 18> kModeNames{{
    {Mode::ok, "ok"},
    {Mode::delay, "delay"},
    {Mode::status, "status"},
    {Mode::rpc_error, "rpc_error"},
    {Mode::malformed, "malformed"},
    {Mode::truncated, "truncated"},
    {Mode::html, "html"},
    {Mode::wrong_id, "wrong_id"},
    {Mode::close, "close"},
    {Mode::reset, "reset"},
    {Mode::hang, "hang"},
    {Mode::huge, "huge"},
    {Mode::drip, "drip"},
    {Mode::overclaim, "overclaim"},
    {Mode::extra, "extra"},
    {Mode::endless, "endless"},
    {Mode::endless_length, "endless_length"},
    {Mode::gzip_bomb, "gzip_bomb"},
}};

std::optional<Mode> parse_mode(std::string_view name) {
  for (const auto& [mode, mode_text] : kModeNames) {
    if (mode_text == name) return mode;
  }
  return std::nullopt;
}

std::string_view mode_name(Mode mode) {
  for (const auto& [m, mode_text] : kModeNames) {
    if (m == mode) return mode_text;
  }
  return "?";
}

/// Header fields as [name, value] pairs, in order (a name may repeat; its spelling is kept).
using Fields = std::vector<std::pair<std::string, std::string>>;

struct Behaviour {
  Mode mode = Mode::ok;
  std::uint64_t delay_ms = 0;
  unsigned status = 503;
  std::optional<std::string> retry_after;
  Fields headers;  // more header fields, sent as given
  std::optional<std::string> body;
  std::int64_t code = -32603;
  std::string message = "internal error";
  std::optional<std::string> data;  // raw JSON
  std::uint64_t huge_bytes = 5 * 1024 * 1024;
  std::uint64_t drip_ms = 100;
  std::uint64_t extra_ms = 0;
  std::uint64_t gzip_bytes = std::uint64_t{256} << 20;
  std::uint64_t chunk_bytes = 0;  // > 0: whole answers are sent chunked, this many bytes a chunk
};

// Some fields of a Behaviour, from the command line or a control request.
struct BehaviourPatch {
  std::optional<Mode> mode;
  std::optional<std::uint64_t> delay_ms;
  std::optional<unsigned> status;
  std::optional<std::string> retry_after;
  std::optional<Fields> headers;
  std::optional<std::string> body;
  std::optional<std::int64_t> code;
  std::optional<std::string> message;
  std::optional<std::string> data;
  std::optional<std::uint64_t> huge_bytes;
  std::optional<std::uint64_t> drip_ms;
  std::optional<std::uint64_t> extra_ms;
  std::optional<std::uint64_t> gzip_bytes;
  std::optional<std::uint64_t> chunk_bytes;

  void apply_to(Behaviour& behaviour) const {
    if (mode) {
      behaviour = Behaviour{};
      behaviour.mode = *mode;
    }
    if (delay_ms) behaviour.delay_ms = *delay_ms;
    if (status) behaviour.status = *status;
    if (retry_after) behaviour.retry_after = *retry_after;
    if (headers) behaviour.headers = *headers;
    if (body) behaviour.body = *body;
    if (code) behaviour.code = *code;
    if (message) behaviour.message = *message;
    if (data) behaviour.data = *data;
    if (huge_bytes) behaviour.huge_bytes = *huge_bytes;
    if (drip_ms) behaviour.drip_ms = *drip_ms;
    if (extra_ms) behaviour.extra_ms = *extra_ms;
    if (gzip_bytes) behaviour.gzip_bytes = *gzip_bytes;
    if (chunk_bytes) behaviour.chunk_bytes = *chunk_bytes;
  }
};

Expected<unsigned> checked_status(std::uint64_t status) {
  if (status < 100 || status > 599) return Unexpected{fmt::format("bad HTTP status {}", status)};
  return static_cast<unsigned>(status);
}

// What WebSocket connections suffer (--ws-fault, "ws_fault"); see the usage comment.
enum class WsFault { none, drop, stall, garbage, slow, refuse, huge };

constexpr std::array<std::pair<WsFault, std::string_view>, 7> kWsFaults{{
    {WsFault::none, "none"},
    {WsFault::drop, "drop"},
    {WsFault::stall, "stall"},
    {WsFault::garbage, "garbage"},
    {WsFault::slow, "slow"},
    {WsFault::refuse, "refuse"},
    {WsFault::huge, "huge"},
}};

std::optional<WsFault> parse_ws_fault(std::string_view name) {
  for (const auto& [fault, text] : kWsFaults) {
    if (text == name) return fault;
  }
  return std::nullopt;
}

std::string_view ws_fault_name(WsFault fault) {
  for (const auto& [f, text] : kWsFaults) {
    if (f == fault) return text;
  }
  return "none";
}

struct WsSettings {
  WsFault fault = WsFault::none;
  std::uint64_t slow_ms = 1000;
  std::uint64_t huge_bytes = std::uint64_t{16} << 20;  // past rpcroute serve's 8 MiB message limit
  std::uint64_t delay_ms = 0;                          // before each answer to a call
  std::string require_name;  // --ws-require-header: upgrades without it are declined (401)
  std::string require_value;
};

// ---------------------------------------------------------------------------------------------
// JSON text

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

std::string hex_quantity(std::uint64_t n) { return fmt::format("\"0x{:x}\"", n); }

std::string result_member(std::string_view result_json) {
  return fmt::format("\"result\":{}", result_json);
}

std::string error_member(std::int64_t code, std::string_view message,
                         const std::optional<std::string>& data = std::nullopt) {
  std::string out = fmt::format("\"error\":{{\"code\":{},\"message\":", code);
  append_json_string(out, message);
  if (data) {
    out += ",\"data\":";
    out += *data;
  }
  out += '}';
  return out;
}

// simdjson reads up to SIMDJSON_PADDING bytes past the end; give it that room in place.
simdjson::padded_string_view padded(std::string& text) {
  text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  return simdjson::padded_string_view(text.data(), text.size(), text.capacity());
}

template <class T>
std::optional<T> parse_number(std::string_view text, int base = 10) {
  T value{};
  const char* end = text.data() + text.size();
  std::from_chars_result parsed{};
  if constexpr (std::is_floating_point_v<T>) {
    parsed = std::from_chars(text.data(), end, value);
  } else {
    parsed = std::from_chars(text.data(), end, value, base);
  }
  if (text.empty() || parsed.ec != std::errc{} || parsed.ptr != end) return std::nullopt;
  return value;
}

std::optional<std::uint64_t> parse_hex_quantity(std::string_view text) {
  if (!text.starts_with("0x") && !text.starts_with("0X")) return std::nullopt;
  return parse_number<std::uint64_t>(text.substr(2), 16);
}

// ---------------------------------------------------------------------------------------------
// Incoming JSON-RPC

struct RpcError {
  std::int64_t code;
  std::string message;
};

struct Call {
  std::string id = "null";          // the client's id token, byte for byte
  std::string method;               // empty when the call is rejected
  std::vector<std::string> params;  // raw JSON of each parameter
  std::optional<RpcError> rejection;

  // Parameter i if it is a JSON string without escapes (hex data, block tags, filter ids).
  [[nodiscard]] std::optional<std::string_view> string_param(std::size_t i) const {
    if (i >= params.size()) return std::nullopt;
    const std::string_view raw = params[i];
    if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return std::nullopt;
    const std::string_view content = raw.substr(1, raw.size() - 2);
    if (content.find('\\') != std::string_view::npos) return std::nullopt;
    return content;
  }
};

struct RpcRequest {
  bool batch = false;
  bool no_calls = false;  // not JSON, or an empty batch: answered, but not a call
  std::vector<Call> calls;

  static RpcRequest rejected(std::int64_t code, std::string message) {
    RpcRequest request;
    request.calls.emplace_back().rejection = RpcError{code, std::move(message)};
    return request;
  }
};

class RequestReader {
 public:
  // Reads a JSON-RPC body: a single call or a batch. Invalid input becomes a rejected call.
  RpcRequest read(std::string& body) { return read_json(padded(body)); }

  // Checks that text is one complete JSON value.
  [[nodiscard]] bool is_json(std::string& text) {
    const simdjson::padded_string_view json = padded(text);
    return validator_.parse(json.data(), json.size(), false).error() == simdjson::SUCCESS;
  }

  ondemand::parser& parser() { return parser_; }

 private:
  static RpcRequest parse_error() {
    RpcRequest request = RpcRequest::rejected(-32700, "parse error");
    request.no_calls = true;
    return request;
  }

  RpcRequest read_json(simdjson::padded_string_view json) {
    // On-Demand skips what it is not asked for without validating it, so validate first.
    if (validator_.parse(json.data(), json.size(), false).error()) return parse_error();
    ondemand::document doc;
    ondemand::json_type type{};
    if (parser_.iterate(json).get(doc) || doc.type().get(type)) return parse_error();

    if (type == ondemand::json_type::object) {
      ondemand::object object;
      RpcRequest request;
      request.calls.emplace_back();
      if (doc.get_object().get(object) || read_call(object, request.calls.back())) {
        return parse_error();
      }
      return request;
    }
    if (type != ondemand::json_type::array) return RpcRequest::rejected(-32600, "invalid request");

    RpcRequest request;
    request.batch = true;
    ondemand::array items;
    if (doc.get_array().get(items)) return parse_error();
    for (auto item_result : items) {
      ondemand::value item;
      ondemand::json_type item_type{};
      if (item_result.get(item) || item.type().get(item_type)) return parse_error();
      Call& call = request.calls.emplace_back();
      if (item_type != ondemand::json_type::object) {
        call.rejection = RpcError{-32600, "invalid request"};
        continue;
      }
      ondemand::object object;
      if (item.get_object().get(object) || read_call(object, call)) return parse_error();
    }
    if (request.calls.empty()) {
      request = RpcRequest::rejected(-32600, "empty batch");
      request.no_calls = true;
    }
    return request;
  }

  static simdjson::error_code read_call(ondemand::object& object, Call& call) {
    bool has_method = false;
    for (auto field_result : object) {
      ondemand::field field;
      std::string_view key;
      if (auto error = std::move(field_result).get(field)) return error;
      if (auto error = field.unescaped_key().get(key)) return error;
      ondemand::value value = field.value();
      if (key == "id") {
        std::string_view raw;
        if (auto error = simdjson::to_json_string(value).get(raw)) return error;
        call.id = raw;
      } else if (key == "method") {
        std::string_view method;
        if (value.get_string().get(method) == simdjson::SUCCESS) {
          call.method = method;
          has_method = true;
        }
      } else if (key == "params") {
        ondemand::array params;
        if (value.get_array().get(params)) continue;
        for (auto param_result : params) {
          ondemand::value param;
          std::string_view raw;
          if (auto error = param_result.get(param)) return error;
          if (auto error = simdjson::to_json_string(param).get(raw)) return error;
          call.params.emplace_back(raw);
        }
      }
    }
    if (!has_method) {
      call.method.clear();
      call.rejection = RpcError{-32600, "invalid request"};
    }
    return simdjson::SUCCESS;
  }

  simdjson::dom::parser validator_;
  ondemand::parser parser_;
};

// ---------------------------------------------------------------------------------------------
// The chain the fake pretends to follow

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A deterministic 32-byte value as "0x" + 64 hex digits.
std::string pseudo_hash(std::uint64_t seed) {
  std::string out = "\"0x";
  for (std::uint64_t word = 0; word < 4; ++word) {
    fmt::format_to(std::back_inserter(out), "{:016x}", splitmix64(seed * 4 + word));
  }
  out += '"';
  return out;
}

std::uint64_t fnv1a(std::string_view bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  }
  return hash;
}

class Chain {
 public:
  Chain(std::uint64_t chain_id, std::uint64_t height, double blocks_per_sec, std::string name)
      : chain_id_(chain_id),
        base_height_(height),
        blocks_per_sec_(blocks_per_sec),
        name_(std::move(name)) {}

  [[nodiscard]] std::uint64_t height() const {
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - epoch_;
    return base_height_ + static_cast<std::uint64_t>(elapsed.count() * blocks_per_sec_);
  }
  [[nodiscard]] std::uint64_t chain_id() const { return chain_id_; }

  void set_height(std::uint64_t height) {
    base_height_ = height;
    epoch_ = std::chrono::steady_clock::now();
  }
  void set_blocks_per_sec(double blocks_per_sec) {
    set_height(height());
    blocks_per_sec_ = blocks_per_sec;
  }
  void set_chain_id(std::uint64_t chain_id) { chain_id_ = chain_id; }
  void set_finality_lag(std::uint64_t lag) { finality_lag_ = lag; }
  // Raw JSON answering eth_blockNumber instead of the head; empty: the head.
  void set_block_number(std::string raw) { block_number_ = std::move(raw); }

  // The "result" or "error" member answering call, as a real node would.
  std::string answer(const Call& call) {
    if (call.rejection) return error_member(call.rejection->code, call.rejection->message);
    const std::string_view method = call.method;
    if (method == "eth_blockNumber") {
      return result_member(block_number_.empty() ? hex_quantity(height()) : block_number_);
    }
    if (method == "eth_chainId") return result_member(hex_quantity(chain_id_));
    if (method == "net_version") return result_member(fmt::format("\"{}\"", chain_id_));
    if (method == "web3_clientVersion") return result_member(json_string("fake-upstream/" + name_));
    if (method == "eth_syncing") return result_member("false");
    if (method == "eth_gasPrice") return result_member("\"0x3b9aca00\"");
    if (method == "eth_getBalance") return result_member("\"0xde0b6b3a7640000\"");
    if (method == "eth_getTransactionCount") return result_member("\"0x0\"");
    if (method == "eth_getCode" || method == "eth_call") return result_member("\"0x\"");
    if (method == "eth_getLogs") return result_member("[]");
    if (method == "eth_getBlockByNumber") return block_by_number(call);
    if (method == "eth_getTransactionReceipt") return receipt(call);
    if (method == "eth_sendRawTransaction") {
      const auto raw_tx = call.string_param(0);
      if (!raw_tx) return error_member(-32602, "missing value for required argument 0");
      return result_member(pseudo_hash(fnv1a(*raw_tx)));
    }
    if (method == "eth_newFilter" || method == "eth_newBlockFilter" ||
        method == "eth_newPendingTransactionFilter") {
      filters_.insert(next_filter_);
      return result_member(hex_quantity(next_filter_++));
    }
    if (method == "eth_getFilterChanges" || method == "eth_getFilterLogs") {
      if (!known_filter(call)) return error_member(-32000, "filter not found");
      return result_member("[]");
    }
    if (method == "eth_uninstallFilter") {
      const auto id = filter_id(call);
      return result_member(id && filters_.erase(*id) > 0 ? "true" : "false");
    }
    return error_member(-32601,
                        fmt::format("the method {} does not exist/is not available", method));
  }

 private:
  // Here a transaction hash's last four hex digits are the block it was mined in: its receipt
  // exists once the head reaches that block, and is null before (a node that has not seen it).
  std::string receipt(const Call& call) const {
    const auto hash = call.string_param(0);
    const auto hex = [](unsigned char c) { return std::isxdigit(c) != 0; };
    if (!hash || hash->size() != 66 || !hash->starts_with("0x") ||
        !std::all_of(hash->begin() + 2, hash->end(), hex)) {
      return error_member(-32602, "invalid argument 0: hex string has length other than 64");
    }
    const std::uint64_t block =
        parse_hex_quantity("0x" + std::string(hash->substr(62))).value_or(0);
    if (block > height()) return result_member("null");
    return result_member(fmt::format(
        R"({{"transactionHash":"{}","blockNumber":{},"blockHash":{},"status":"0x1","logs":[]}})",
        *hash, hex_quantity(block), pseudo_hash(block)));
  }

  std::string block_by_number(const Call& call) const {
    const auto tag = call.string_param(0);
    if (!tag) return error_member(-32602, "missing value for required argument 0");
    const std::uint64_t head = height();
    std::uint64_t number = head;
    if (*tag == "earliest") {
      number = 0;
    } else if (*tag == "safe" || *tag == "finalized") {
      number = head > finality_lag_ ? head - finality_lag_ : 0;
    } else if (*tag != "latest" && *tag != "pending") {
      const auto parsed = parse_hex_quantity(*tag);
      if (!parsed) return error_member(-32602, "invalid argument 0: hex string without 0x prefix");
      number = *parsed;
    }
    if (number > head) return result_member("null");
    return result_member(header_fields(number) + R"(,"transactions":[]})");
  }

 public:
  // Block `number`'s header as a newHeads event carries it: the same number, hash and parentHash
  // as eth_getBlockByNumber answers (every fake of the same chain id agrees on them).
  [[nodiscard]] static std::string head_json(std::uint64_t number) {
    return header_fields(number) + '}';
  }

 private:
  // `{"number":…,"hash":…,"parentHash":…,"timestamp":…` without the closing brace.
  static std::string header_fields(std::uint64_t number) {
    const std::string parent_hash =
        number == 0 ? "\"0x" + std::string(64, '0') + '"' : pseudo_hash(number - 1);
    return fmt::format(R"({{"number":{},"hash":{},"parentHash":{},"timestamp":{})",
                       hex_quantity(number), pseudo_hash(number), parent_hash,
                       hex_quantity(1'700'000'000 + 12 * number));
  }

  static std::optional<std::uint64_t> filter_id(const Call& call) {
    const auto id = call.string_param(0);
    return id ? parse_hex_quantity(*id) : std::nullopt;
  }
  bool known_filter(const Call& call) const {
    const auto id = filter_id(call);
    return id && filters_.contains(*id);
  }

  std::uint64_t chain_id_;
  std::uint64_t base_height_;
  std::uint64_t finality_lag_ = 0;
  double blocks_per_sec_;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  std::string name_;
  std::string block_number_;
  std::set<std::uint64_t> filters_;
  std::uint64_t next_filter_ = 1;
};

// ---------------------------------------------------------------------------------------------
// Answers in each mode

// The client's id + 1000 when it is an integer, else "wrong".
std::string wrong_id(std::string_view id) {
  const auto number = parse_number<std::int64_t>(id);
  if (!number || *number > INT64_MAX - 1000) return "\"wrong\"";
  return std::to_string(*number + 1000);
}

std::string huge_result(std::uint64_t bytes) {
  std::string out;
  out.reserve(bytes + 2);
  out += '"';
  if (bytes >= 2) {
    out += "0x";
    out.append(bytes - 2, 'a');
  } else {
    out.append(bytes, 'a');
  }
  out += '"';
  return out;
}

// The JSON-RPC answer body in the modes that answer with well-formed JSON-RPC.
std::string render_answer(const RpcRequest& request, const Behaviour& behaviour, Chain& chain) {
  std::string out;
  if (request.batch) out += '[';
  bool first = true;
  for (const Call& call : request.calls) {
    if (!first) out += ',';
    first = false;
    out += R"({"jsonrpc":"2.0","id":)";
    out += behaviour.mode == Mode::wrong_id ? wrong_id(call.id) : call.id;
    out += ',';
    if (behaviour.mode == Mode::rpc_error) {
      out += error_member(behaviour.code, behaviour.message, behaviour.data);
    } else if (behaviour.mode == Mode::huge && !call.rejection) {
      out += result_member(huge_result(behaviour.huge_bytes));
    } else {
      out += chain.answer(call);
    }
    out += '}';
  }
  if (request.batch) out += ']';
  return out;
}

std::string_view sniff_content_type(std::string_view body) {
  const auto start = body.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos) return "text/plain";
  if (body[start] == '{' || body[start] == '[') return "application/json";
  if (body[start] == '<') return "text/html";
  return "text/plain";
}

constexpr std::string_view kChallengePage = R"(<!DOCTYPE html>
<html lang="en-US">
<head><title>Just a moment...</title><meta http-equiv="refresh" content="390"></head>
<body><div id="cf-wrapper"><h1>Checking if the site connection is secure</h1>
<p>Enable JavaScript and cookies to continue</p></div></body>
</html>
)";

// ---------------------------------------------------------------------------------------------
// State shared by all connections (one thread, so no locks)

struct Stats {
  std::uint64_t requests = 0;
  std::uint64_t calls = 0;
  std::map<std::string, std::uint64_t, std::less<>> methods;
  std::map<std::string, std::uint64_t, std::less<>> paths;
  std::uint64_t connections = 0;       // TCP connections accepted (shown with TLS only)
  std::uint64_t tls_handshakes = 0;    // completed
  std::uint64_t tls_failures = 0;      // failed: the client refused our certificate, or no cert
  std::uint64_t ws_upgrades = 0;       // WebSocket upgrades accepted
  std::uint64_t ws_refused = 0;        // refused with 503 (fault refuse)
  std::uint64_t ws_calls = 0;          // JSON-RPC calls read from WebSockets (batch items each)
  std::uint64_t ws_subscriptions = 0;  // eth_subscribe calls answered with a subscription id
  std::uint64_t ws_unsubscribes = 0;   // eth_unsubscribe calls that ended one
  std::uint64_t ws_events = 0;         // eth_subscription events sent whole
  std::uint64_t ws_faulty = 0;         // frames sent instead of an event (garbage, huge)
  std::uint64_t ws_drops = 0;          // sockets closed mid-stream (drop, refuse)
  std::uint64_t ws_stalls = 0;         // sockets stalled (stall)
  std::uint64_t ws_too_big = 0;        // close frames received with 1009 (message too big)
  std::uint64_t ws_unauthorized = 0;   // upgrades declined with 401 (--ws-require-header)

  void record(const RpcRequest& request, std::string_view path) {
    ++requests;
    if (auto it = paths.find(path); it != paths.end()) {
      ++it->second;
    } else {
      paths.emplace(std::string(path), 1);
    }
    if (request.no_calls) return;
    calls += request.calls.size();
    for (const Call& call : request.calls) {
      if (!call.method.empty()) ++methods[call.method];
    }
  }
};

struct Upstream {
  explicit Upstream(Chain chain_) : chain(std::move(chain_)) {}

  Chain chain;
  Behaviour behaviour;
  std::deque<Behaviour> queue;
  std::map<std::string, Behaviour, std::less<>> paths;
  Stats stats;
  std::int64_t hanging = 0;  // requests held by hang mode now (not a counter: reset_stats keeps it)
  bool holding = false;      // "hold": answers wait on `gate` until released
  std::int64_t held = 0;     // requests waiting on it now
  std::unique_ptr<asio::steady_timer> gate;  // made by the first held request (its executor)
  bool tls = false;                          // serving HTTPS: /_stats shows the "tls" member
  std::int64_t handshakes_hanging = 0;       // --tls-handshake hang: connections held now
  WsSettings ws;
  std::int64_t ws_open = 0;      // WebSockets open now (not a counter)
  std::uint64_t ws_next_id = 1;  // subscription ids
  RequestReader reader;

  Behaviour next_behaviour(std::string_view path) {
    if (queue.empty()) {
      if (auto it = paths.find(path); it != paths.end()) return it->second;
      return behaviour;
    }
    Behaviour next = std::move(queue.front());
    queue.pop_front();
    return next;
  }

  [[nodiscard]] std::string stats_json() const {
    std::string out =
        fmt::format(R"({{"requests":{},"calls":{},"methods":{{)", stats.requests, stats.calls);
    bool first = true;
    for (const auto& [method, count] : stats.methods) {
      if (!first) out += ',';
      first = false;
      append_json_string(out, method);
      fmt::format_to(std::back_inserter(out), ":{}", count);
    }
    out += R"(},"paths":{)";
    first = true;
    for (const auto& [path, count] : stats.paths) {
      if (!first) out += ',';
      first = false;
      append_json_string(out, path);
      fmt::format_to(std::back_inserter(out), ":{}", count);
    }
    fmt::format_to(std::back_inserter(out),
                   R"(}},"mode":"{}","height":{},"chain_id":{},"queued":{},"hanging":{},"held":{})",
                   mode_name(behaviour.mode), chain.height(), chain.chain_id(), queue.size(),
                   hanging, held);
    fmt::format_to(std::back_inserter(out),
                   R"(,"ws":{{"fault":"{}","open":{},"upgrades":{},"refused":{},"calls":{},)"
                   R"("subscriptions":{},"unsubscribes":{},"events":{},"faulty":{},"drops":{},)"
                   R"("stalls":{},"too_big":{},"unauthorized":{}}}}})",
                   ws_fault_name(ws.fault), ws_open, stats.ws_upgrades, stats.ws_refused,
                   stats.ws_calls, stats.ws_subscriptions, stats.ws_unsubscribes, stats.ws_events,
                   stats.ws_faulty, stats.ws_drops, stats.ws_stalls, stats.ws_too_big,
                   stats.ws_unauthorized);
    if (tls) {
      out.pop_back();
      fmt::format_to(std::back_inserter(out),
                     R"(,"tls":{{"connections":{},"handshakes":{},"failures":{},"hanging":{}}}}})",
                     stats.connections, stats.tls_handshakes, stats.tls_failures,
                     handshakes_hanging);
    }
    return out;
  }
};

// ---------------------------------------------------------------------------------------------
// Control API

struct ControlRequest {
  BehaviourPatch behaviour;
  std::optional<std::uint64_t> height;
  std::optional<std::uint64_t> chain_id;
  std::optional<double> mine_per_sec;
  std::optional<std::string> block_number;  // "" restores the head
  std::vector<Behaviour> queue;
  std::vector<std::pair<std::string, Behaviour>> paths;
  bool clear_queue = false;
  bool clear_paths = false;
  bool reset_stats = false;
  std::optional<bool> hold;
  std::optional<WsFault> ws_fault;
  std::optional<std::uint64_t> ws_slow_ms;
  std::optional<std::uint64_t> ws_huge_bytes;
  std::optional<std::uint64_t> ws_delay_ms;

  void apply_to(Upstream& upstream) const {
    if (reset_stats) upstream.stats = Stats{};
    if (ws_fault) upstream.ws.fault = *ws_fault;
    if (ws_slow_ms) upstream.ws.slow_ms = *ws_slow_ms;
    if (ws_huge_bytes) upstream.ws.huge_bytes = *ws_huge_bytes;
    if (ws_delay_ms) upstream.ws.delay_ms = *ws_delay_ms;
    if (hold) {
      upstream.holding = *hold;
      if (!*hold && upstream.gate) upstream.gate->cancel();  // every held answer goes now
    }
    if (clear_queue) upstream.queue.clear();
    if (clear_paths) upstream.paths.clear();
    for (const auto& [path, b] : paths) upstream.paths.insert_or_assign(path, b);
    behaviour.apply_to(upstream.behaviour);
    if (chain_id) upstream.chain.set_chain_id(*chain_id);
    if (mine_per_sec) upstream.chain.set_blocks_per_sec(*mine_per_sec);
    if (height) upstream.chain.set_height(*height);
    if (block_number) upstream.chain.set_block_number(*block_number);
    upstream.queue.insert(upstream.queue.end(), queue.begin(), queue.end());
  }
};

template <class T>
Expected<T> read_value(ondemand::value& value, std::string_view key) {
  T out{};
  simdjson::error_code error = simdjson::SUCCESS;
  if constexpr (std::is_same_v<T, std::uint64_t>) {
    error = value.get_uint64().get(out);
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    error = value.get_int64().get(out);
  } else if constexpr (std::is_same_v<T, double>) {
    error = value.get_double().get(out);
  } else if constexpr (std::is_same_v<T, bool>) {
    error = value.get_bool().get(out);
  } else {
    static_assert(std::is_same_v<T, std::string>);
    std::string_view text;
    error = value.get_string().get(text);
    out = text;
  }
  if (error) return Unexpected{fmt::format("bad value for \"{}\"", key)};
  return out;
}

Expected<std::string> read_raw(ondemand::value& value, std::string_view key) {
  std::string_view raw;
  if (simdjson::to_json_string(value).get(raw)) {
    return Unexpected{fmt::format("bad value for \"{}\"", key)};
  }
  return std::string(raw);
}

// [["Name", "value"], …]: names and values of header fields, without CR, LF or NUL.
Expected<Fields> read_fields(ondemand::value& value) {
  const Unexpected bad{std::string("\"headers\" must be an array of [name, value] string pairs")};
  ondemand::array pairs;
  if (value.get_array().get(pairs)) return bad;
  Fields out;
  for (auto pair_result : pairs) {
    ondemand::array pair;
    if (std::move(pair_result).get_array().get(pair)) return bad;
    std::vector<std::string> parts;
    for (auto part_result : pair) {
      std::string_view text;
      if (std::move(part_result).get_string().get(text)) return bad;
      if (text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos) return bad;
      parts.emplace_back(text);
    }
    if (parts.size() != 2 || parts[0].empty()) return bad;
    out.emplace_back(std::move(parts[0]), std::move(parts[1]));
  }
  return out;
}

Expected<bool> read_behaviour_field(std::string_view key, ondemand::value& value,
                                    BehaviourPatch& patch) {
  auto store = [](auto& slot, auto read) -> Expected<bool> {
    if (!read) return Unexpected{read.error()};
    slot = *read;
    return true;
  };
  if (key == "mode") {
    auto name = read_value<std::string>(value, key);
    if (!name) return Unexpected{name.error()};
    patch.mode = parse_mode(*name);
    if (!patch.mode) return Unexpected{fmt::format("unknown mode \"{}\"", *name)};
    return true;
  }
  if (key == "status") {
    auto status = read_value<std::uint64_t>(value, key).and_then(checked_status);
    return store(patch.status, status);
  }
  if (key == "retry_after") {
    ondemand::json_type type{};
    if (value.type().get(type)) return Unexpected{"bad value for \"retry_after\""};
    if (type == ondemand::json_type::number) return store(patch.retry_after, read_raw(value, key));
    return store(patch.retry_after, read_value<std::string>(value, key));
  }
  if (key == "headers") return store(patch.headers, read_fields(value));
  if (key == "delay_ms") return store(patch.delay_ms, read_value<std::uint64_t>(value, key));
  if (key == "body") return store(patch.body, read_value<std::string>(value, key));
  if (key == "code") return store(patch.code, read_value<std::int64_t>(value, key));
  if (key == "message") return store(patch.message, read_value<std::string>(value, key));
  if (key == "data") return store(patch.data, read_raw(value, key));
  if (key == "huge_bytes") return store(patch.huge_bytes, read_value<std::uint64_t>(value, key));
  if (key == "drip_ms") return store(patch.drip_ms, read_value<std::uint64_t>(value, key));
  if (key == "extra_ms") return store(patch.extra_ms, read_value<std::uint64_t>(value, key));
  if (key == "gzip_bytes") return store(patch.gzip_bytes, read_value<std::uint64_t>(value, key));
  if (key == "chunk_bytes") return store(patch.chunk_bytes, read_value<std::uint64_t>(value, key));
  return false;
}

// A behaviour given whole (an item of "queue", a value of "paths"), fields not given at defaults.
Expected<Behaviour> read_queued_behaviour(ondemand::value& value, std::string_view where) {
  ondemand::object object;
  if (value.get_object().get(object)) {
    return Unexpected{fmt::format("\"{}\" items must be objects", where)};
  }
  BehaviourPatch patch;
  for (auto field_result : object) {
    ondemand::field field;
    std::string_view key;
    if (std::move(field_result).get(field) || field.unescaped_key().get(key)) {
      return Unexpected{"bad JSON"};
    }
    auto known = read_behaviour_field(key, field.value(), patch);
    if (!known) return Unexpected{known.error()};
    if (!*known) return Unexpected{fmt::format("unknown field \"{}\" in \"{}\"", key, where)};
  }
  Behaviour behaviour;
  patch.apply_to(behaviour);
  return behaviour;
}

Expected<ControlRequest> read_control(std::string& body, RequestReader& reader) {
  if (!reader.is_json(body)) return Unexpected{"body is not JSON"};
  ondemand::document doc;
  ondemand::object object;
  if (reader.parser().iterate(padded(body)).get(doc) || doc.get_object().get(object)) {
    return Unexpected{"body must be a JSON object"};
  }
  ControlRequest control;
  for (auto field_result : object) {
    ondemand::field field;
    std::string_view key;
    if (std::move(field_result).get(field) || field.unescaped_key().get(key)) {
      return Unexpected{"bad JSON"};
    }
    ondemand::value& value = field.value();
    Expected<void> read;
    if (key == "height") {
      read = read_value<std::uint64_t>(value, key).map([&](auto v) { control.height = v; });
    } else if (key == "chain_id") {
      read = read_value<std::uint64_t>(value, key).map([&](auto v) { control.chain_id = v; });
    } else if (key == "block_number") {
      read = read_raw(value, key).map([&](std::string raw) {
        control.block_number = raw == "null" ? std::string() : std::move(raw);
      });
    } else if (key == "mine_per_sec") {
      read = read_value<double>(value, key).and_then([&](double v) -> Expected<void> {
        if (v < 0) return Unexpected{"\"mine_per_sec\" must not be negative"};
        control.mine_per_sec = v;
        return {};
      });
    } else if (key == "hold") {
      read = read_value<bool>(value, key).map([&](bool v) { control.hold = v; });
    } else if (key == "ws_fault") {
      read =
          read_value<std::string>(value, key).and_then([&](const std::string& v) -> Expected<void> {
            control.ws_fault = parse_ws_fault(v);
            if (!control.ws_fault) return Unexpected{fmt::format("unknown ws_fault \"{}\"", v)};
            return {};
          });
    } else if (key == "ws_slow_ms") {
      read = read_value<std::uint64_t>(value, key).map([&](auto v) { control.ws_slow_ms = v; });
    } else if (key == "ws_huge_bytes") {
      read = read_value<std::uint64_t>(value, key).map([&](auto v) { control.ws_huge_bytes = v; });
    } else if (key == "ws_delay_ms") {
      read = read_value<std::uint64_t>(value, key).map([&](auto v) { control.ws_delay_ms = v; });
    } else if (key == "reset_stats") {
      read = read_value<bool>(value, key).map([&](bool v) { control.reset_stats = v; });
    } else if (key == "clear_queue") {
      read = read_value<bool>(value, key).map([&](bool v) { control.clear_queue = v; });
    } else if (key == "clear_paths") {
      read = read_value<bool>(value, key).map([&](bool v) { control.clear_paths = v; });
    } else if (key == "paths") {
      ondemand::object paths;
      if (value.get_object().get(paths)) return Unexpected{"\"paths\" must be an object"};
      for (auto path_result : paths) {
        ondemand::field path_field;
        std::string_view path;
        if (std::move(path_result).get(path_field) || path_field.unescaped_key().get(path)) {
          return Unexpected{"bad JSON"};
        }
        if (!path.starts_with('/')) return Unexpected{"\"paths\" keys must start with /"};
        std::string path_text(path);  // the key's buffer is reused by the next read
        auto behaviour = read_queued_behaviour(path_field.value(), "paths");
        if (!behaviour) return Unexpected{behaviour.error()};
        control.paths.emplace_back(std::move(path_text), std::move(*behaviour));
      }
    } else if (key == "queue") {
      ondemand::array items;
      if (value.get_array().get(items)) return Unexpected{"\"queue\" must be an array"};
      for (auto item_result : items) {
        ondemand::value item;
        if (item_result.get(item)) return Unexpected{"bad JSON"};
        auto behaviour = read_queued_behaviour(item, "queue");
        if (!behaviour) return Unexpected{behaviour.error()};
        control.queue.push_back(std::move(*behaviour));
      }
    } else {
      auto known = read_behaviour_field(key, value, control.behaviour);
      if (!known) return Unexpected{known.error()};
      if (!*known) return Unexpected{fmt::format("unknown field \"{}\"", key)};
    }
    if (!read) return Unexpected{read.error()};
  }
  return control;
}

// ---------------------------------------------------------------------------------------------
// HTTP

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response make_response(const Request& request, unsigned status, std::string_view content_type,
                       std::string body) {
  Response response;
  response.version(request.version());
  response.result(status);
  response.set(http::field::server, "fake-upstream");
  response.set(http::field::content_type,
               beast::string_view(content_type.data(), content_type.size()));
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  return response;
}

std::string_view target_path(const Request& request) {
  const std::string_view target(request.target().data(), request.target().size());
  return target.substr(0, target.find('?'));
}

auto on_error(beast::error_code& error) { return asio::redirect_error(asio::use_awaitable, error); }

bool is_http_protocol_error(const beast::error_code& error) {
  return error.category() == make_error_code(http::error::end_of_stream).category();
}

// The HTTP side of a connection, over plain TCP (beast::tcp_stream) or over TLS (TlsStream, once
// its handshake is done): every mode behaves the same over both.
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

template <class Stream>
class Connection {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  template <class... StreamArgs>
  explicit Connection(Upstream& upstream, StreamArgs&&... stream_args)
      : stream_(std::forward<StreamArgs>(stream_args)...), upstream_(upstream) {}

  // The server side of the TLS handshake; false when it failed (counted in /_stats).
  asio::awaitable<bool> handshake() requires kTls {
    beast::error_code error;
    co_await stream_.async_handshake(ssl::stream_base::server, on_error(error));
    if (error) {
      ++upstream_.stats.tls_failures;
      co_return false;
    }
    ++upstream_.stats.tls_handshakes;
    co_return true;
  }

  asio::awaitable<void> run() {
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(kMaxBodyBytes);
      beast::error_code error;
      co_await http::async_read_header(stream_, buffer_, parser, on_error(error));
      if (!error && beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        co_await http::async_write(stream_, go_on, on_error(error));
      }
      if (!error) co_await http::async_read(stream_, buffer_, parser, on_error(error));

      if (error == http::error::end_of_stream) {
        co_await finish_sending();
        co_return;
      }
      if (error == http::error::body_limit) {
        co_await reply_error_and_close(parser.get(), 413, "request body too large\n");
        co_return;
      }
      if (is_http_protocol_error(error)) {
        co_await reply_error_and_close(parser.get(), 400, "bad request\n");
        co_return;
      }
      if (error) co_return;  // the client went away

      Request request = parser.release();
      if (websocket::is_upgrade(request)) {
        co_await serve_websocket(std::move(request));
        co_return;
      }
      if (!co_await serve(request)) co_return;
    }
  }

 private:
  // Each serve* answers one request and says whether to keep the connection.
  asio::awaitable<bool> serve(Request& request) {
    const std::string_view path = target_path(request);
    if (path == "/_control") {
      if (request.method() != http::verb::post)
        co_return co_await send(method_not_allowed(request));
      co_return co_await serve_control(request);
    }
    if (path == "/_stats") {
      if (request.method() != http::verb::get) co_return co_await send(method_not_allowed(request));
      co_return co_await send(
          make_response(request, 200, "application/json", upstream_.stats_json()));
    }
    if (request.method() != http::verb::post) co_return co_await send(method_not_allowed(request));
    co_return co_await serve_rpc(request);
  }

  asio::awaitable<bool> serve_control(Request& request) {
    auto control = read_control(request.body(), upstream_.reader);
    if (!control) {
      std::string body = R"({"ok":false,"error":)" + json_string(control.error()) + "}";
      co_return co_await send(make_response(request, 400, "application/json", std::move(body)));
    }
    control->apply_to(upstream_);
    co_return co_await send(make_response(request, 200, "application/json", R"({"ok":true})"));
  }

  asio::awaitable<bool> serve_rpc(Request& request) {
    const std::string_view path = target_path(request);
    Behaviour behaviour = upstream_.next_behaviour(path);
    // Providers that echo the request URL in their errors (with the key in it).
    if (auto at = behaviour.message.find("{target}"); at != std::string::npos) {
      behaviour.message.replace(at, 8, request.target().data(), request.target().size());
    }
    const RpcRequest rpc = upstream_.reader.read(request.body());
    upstream_.stats.record(rpc, path);

    if (behaviour.delay_ms > 0) {
      asio::steady_timer timer(stream_.get_executor());
      timer.expires_after(std::chrono::milliseconds(behaviour.delay_ms));
      beast::error_code ignored;
      co_await timer.async_wait(on_error(ignored));
    }
    if (upstream_.holding) {
      if (!upstream_.gate) {
        upstream_.gate = std::make_unique<asio::steady_timer>(
            stream_.get_executor(), asio::steady_timer::time_point::max());
      }
      ++upstream_.held;
      beast::error_code ignored;
      co_await upstream_.gate->async_wait(on_error(ignored));
      --upstream_.held;
    }

    Response response;
    switch (behaviour.mode) {
      case Mode::ok:
      case Mode::delay:
      case Mode::rpc_error:
      case Mode::wrong_id:
      case Mode::huge:
        response = make_response(request, 200, "application/json",
                                 render_answer(rpc, behaviour, upstream_.chain));
        break;
      case Mode::status: {
        std::string body = behaviour.body.value_or(
            std::string(http::obsolete_reason(static_cast<http::status>(behaviour.status))) + "\n");
        const std::string_view content_type = sniff_content_type(body);
        response = make_response(request, behaviour.status, content_type, std::move(body));
        break;
      }
      case Mode::malformed:
        response =
            make_response(request, 200, "application/json",
                          behaviour.body.value_or(fmt::format(
                              R"({{"jsonrpc":"2.0","id":{},"result":0x12)", rpc.calls.front().id)));
        break;
      case Mode::html:
        response = make_response(request, 200, "text/html; charset=UTF-8",
                                 behaviour.body.value_or(std::string(kChallengePage)));
        break;
      case Mode::truncated:
        co_await send_truncated(render_answer(rpc, behaviour, upstream_.chain));
        co_return false;
      case Mode::drip:
        co_return co_await send_dripped(request, render_answer(rpc, behaviour, upstream_.chain),
                                        behaviour);
      case Mode::close:
        co_await close();
        co_return false;
      case Mode::reset:
        reset();
        co_return false;
      case Mode::hang:
        ++upstream_.hanging;
        co_await wait_until_client_leaves();
        --upstream_.hanging;
        co_return false;
      case Mode::overclaim:
        co_await send_overclaimed(render_answer(rpc, behaviour, upstream_.chain));
        co_return false;
      case Mode::extra:
        co_return co_await send_with_extra(request, render_answer(rpc, behaviour, upstream_.chain),
                                           rpc, behaviour);
      case Mode::endless:
      case Mode::endless_length:
        co_await send_endless(rpc, behaviour.mode == Mode::endless_length);
        co_return false;
      case Mode::gzip_bomb:
        co_return co_await send_gzip_bomb(request, rpc, behaviour);
    }
    if (behaviour.retry_after) response.set(http::field::retry_after, *behaviour.retry_after);
    for (const auto& [name, value] : behaviour.headers) response.insert(name, value);
    if (behaviour.chunk_bytes > 0) {
      const bool keep_alive = response.keep_alive();
      const std::string out = chunked(response, behaviour.chunk_bytes);
      beast::error_code error;
      co_await asio::async_write(stream_, asio::buffer(out), on_error(error));
      if (error) co_return false;
      if (!keep_alive) {
        co_await finish_sending();
        co_return false;
      }
      co_return true;
    }
    co_return co_await send(std::move(response));
  }

  static std::string_view text(beast::string_view s) { return {s.data(), s.size()}; }

  /// The response as sent with Transfer-Encoding: chunked, `per_chunk` body bytes a chunk.
  static std::string chunked(Response& response, std::uint64_t per_chunk) {
    response.erase(http::field::content_length);
    response.set(http::field::transfer_encoding, "chunked");
    std::string out = fmt::format("HTTP/1.1 {} {}\r\n", response.result_int(),
                                  text(response.reason()));
    for (const auto& field : response)
      out += fmt::format("{}: {}\r\n", text(field.name_string()), text(field.value()));
    out += "\r\n";
    const std::string_view body = response.body();
    for (std::size_t at = 0; at < body.size(); at += per_chunk) {
      const auto piece = body.substr(at, per_chunk);
      out += fmt::format("{:x}\r\n", piece.size());
      out += piece;
      out += "\r\n";
    }
    out += "0\r\n\r\n";
    return out;
  }

  static Response method_not_allowed(const Request& request) {
    return make_response(request, 405, "text/plain", "method not allowed\n");
  }

  asio::awaitable<bool> send(Response response) {
    response.prepare_payload();
    beast::error_code error;
    co_await http::async_write(stream_, response, on_error(error));
    if (error) co_return false;
    if (!response.keep_alive()) {
      co_await finish_sending();
      co_return false;
    }
    co_return true;
  }

  asio::awaitable<void> reply_error_and_close(const Request& request, unsigned status,
                                              std::string body) {
    Response response = make_response(request, status, "text/plain", std::move(body));
    response.keep_alive(false);
    co_await send(std::move(response));
  }

  // Promises the whole of body but sends only half of it.
  asio::awaitable<void> send_truncated(std::string body) {
    std::string head = fmt::format(
        "HTTP/1.1 200 OK\r\nServer: fake-upstream\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\n\r\n",
        body.size());
    head.append(body, 0, body.size() / 2);
    beast::error_code error;
    co_await asio::async_write(stream_, asio::buffer(head), on_error(error));
    co_await close();
  }

  // Claims a body of 2 000 000 000 bytes, sends the real (short) one, then waits for the client.
  asio::awaitable<void> send_overclaimed(std::string body) {
    std::string head =
        "HTTP/1.1 200 OK\r\nServer: fake-upstream\r\nContent-Type: application/json\r\n"
        "Content-Length: 2000000000\r\n\r\n";
    head += body;
    beast::error_code error;
    co_await asio::async_write(stream_, asio::buffer(head), on_error(error));
    if (!error) co_await wait_until_client_leaves();
  }

  // The head at once, then the body one byte at a time, drip_ms apart.
  asio::awaitable<bool> send_dripped(const Request& request, std::string body,
                                     const Behaviour& behaviour) {
    std::string head = fmt::format(
        "HTTP/1.1 200 OK\r\nServer: fake-upstream\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\n",
        body.size());
    if (behaviour.retry_after) head += fmt::format("Retry-After: {}\r\n", *behaviour.retry_after);
    if (!request.keep_alive()) head += "Connection: close\r\n";
    head += "\r\n";
    beast::error_code error;
    co_await asio::async_write(stream_, asio::buffer(head), on_error(error));
    asio::steady_timer timer(stream_.get_executor());
    for (std::size_t i = 0; i < body.size() && !error; ++i) {
      timer.expires_after(std::chrono::milliseconds(behaviour.drip_ms));
      beast::error_code ignored;
      co_await timer.async_wait(on_error(ignored));
      co_await asio::async_write(stream_, asio::buffer(&body[i], 1), on_error(error));
    }
    if (error) co_return false;
    if (!request.keep_alive()) {
      co_await close();
      co_return false;
    }
    co_return true;
  }

  // The ok answer, then an answer nobody asked for: glued to it, or extra_ms later.
  asio::awaitable<bool> send_with_extra(const Request& request, std::string body,
                                        const RpcRequest& rpc, const Behaviour& behaviour) {
    Response response = make_response(request, 200, "application/json", std::move(body));
    response.prepare_payload();
    std::string out =
        behaviour.chunk_bytes > 0 ? chunked(response, behaviour.chunk_bytes) : serialized(response);
    const std::string id = rpc.calls.empty() ? "null" : rpc.calls.front().id;
    const std::string extra_body = R"({"jsonrpc":"2.0","id":)" + id + R"(,"result":"0xdeadbeef"})";
    const std::string extra = fmt::format(
        "HTTP/1.1 200 OK\r\nServer: fake-upstream\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\n\r\n{}",
        extra_body.size(), extra_body);
    beast::error_code error;
    if (behaviour.extra_ms == 0) {
      out += extra;
      co_await asio::async_write(stream_, asio::buffer(out), on_error(error));
    } else {
      co_await asio::async_write(stream_, asio::buffer(out), on_error(error));
      asio::steady_timer timer(stream_.get_executor());
      timer.expires_after(std::chrono::milliseconds(behaviour.extra_ms));
      beast::error_code ignored;
      co_await timer.async_wait(on_error(ignored));
      if (!error) co_await asio::async_write(stream_, asio::buffer(extra), on_error(error));
    }
    co_return !error && response.keep_alive();
  }

  static std::string serialized(Response& response) {
    std::string out;
    http::serializer<false, http::string_body> writer(response);
    beast::error_code error;
    while (!error && !writer.is_done()) {
      writer.next(error, [&](beast::error_code&, const auto& buffers) {
        for (const auto& b : buffers) out.append(static_cast<const char*>(b.data()), b.size());
        writer.consume(beast::buffer_bytes(buffers));
      });
    }
    return out;
  }

  // An answer that never ends: chunked, or under a 1 TiB Content-Length.
  asio::awaitable<void> send_endless(const RpcRequest& rpc, bool claim_length) {
    const std::string id = rpc.calls.empty() ? "null" : rpc.calls.front().id;
    const std::string start = R"({"jsonrpc":"2.0","id":)" + id + R"(,"result":"0x)";
    std::string head =
        "HTTP/1.1 200 OK\r\nServer: fake-upstream\r\nContent-Type: application/json\r\n";
    head += claim_length ? "Content-Length: 1099511627776\r\n\r\n"
                         : "Transfer-Encoding: chunked\r\n\r\n";
    const std::string filler(64 * 1024, 'a');
    std::string filler_chunk =
        claim_length ? filler : fmt::format("{:x}\r\n{}\r\n", filler.size(), filler);
    head += claim_length ? start : fmt::format("{:x}\r\n{}\r\n", start.size(), start);
    beast::error_code error;
    co_await asio::async_write(stream_, asio::buffer(head), on_error(error));
    while (!error) co_await asio::async_write(stream_, asio::buffer(filler_chunk), on_error(error));
    co_await close();
  }

  // A small gzip body that inflates to gzip_bytes: the ok answer's envelope around "0xaaaa…".
  asio::awaitable<bool> send_gzip_bomb(const Request& request, const RpcRequest& rpc,
                                       const Behaviour& behaviour) {
    const std::string id = rpc.calls.empty() ? "null" : rpc.calls.front().id;
    const std::string start = R"({"jsonrpc":"2.0","id":)" + id + R"(,"result":"0x)";
    const std::string end = "\"}";
    const std::uint64_t fill = behaviour.gzip_bytes > start.size() + end.size()
                                   ? behaviour.gzip_bytes - start.size() - end.size()
                                   : 0;
    Response response = make_response(request, 200, "application/json", gzip_of(start, fill, end));
    response.set(http::field::content_encoding, "gzip");
    co_return co_await send(std::move(response));
  }

  // gzip of `start`, `fill` bytes of 'a', then `end`. Z_RLE: runs are all there is to find.
  static std::string gzip_of(std::string_view start, std::uint64_t fill, std::string_view end) {
    z_stream z{};
    deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 9, Z_RLE);
    std::string out;
    std::array<unsigned char, 64 * 1024> buffer{};
    const std::string filler(64 * 1024, 'a');
    auto feed = [&](std::string_view in, int flush) {
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
      z.avail_in = static_cast<uInt>(in.size());
      do {
        z.next_out = buffer.data();
        z.avail_out = static_cast<uInt>(buffer.size());
        deflate(&z, flush);
        out.append(reinterpret_cast<const char*>(buffer.data()), buffer.size() - z.avail_out);
      } while (z.avail_out == 0 || (flush == Z_FINISH && z.avail_in > 0));
    };
    feed(start, Z_NO_FLUSH);
    for (std::uint64_t left = fill; left > 0;) {
      const auto n = std::min<std::uint64_t>(left, filler.size());
      feed(std::string_view(filler.data(), n), Z_NO_FLUSH);
      left -= n;
    }
    feed(end, Z_FINISH);
    deflateEnd(&z);
    return out;
  }

  // -------------------------------------------------------------------------------------------
  // WebSocket: JSON-RPC over the socket, newHeads subscriptions, the ws faults

  // One WebSocket's state, shared by its reader (this coroutine) and its writer (ws_writer).
  struct WsPeer {
    explicit WsPeer(const asio::any_io_executor& ex)
        : wake(ex, asio::steady_timer::time_point::max()),
          finished(ex, asio::steady_timer::time_point::max()) {}
    asio::steady_timer wake;      // cancelled when an answer is queued
    asio::steady_timer finished;  // cancelled when the writer ends
    std::deque<std::string> answers;
    std::vector<std::string> heads;  // newHeads subscription ids, in order
    std::set<std::string> quiet;     // other subscriptions: answered, never an event
    std::uint64_t last_head = 0;     // events sent up to this height
    std::uint64_t garbage = 0;       // garbage frames sent (which kind comes next)
    bool done = false;               // the socket is gone, or was dropped: both loops end
    bool stalled = false;            // stall: nothing read or written until the client leaves
    bool huge = false;               // huge: the reader stopped, the frame is sent or on its way
    bool writing = true;             // the writer runs
    int delayed = 0;                 // answers waiting out --ws-delay-ms
  };
  using WsSocket = websocket::stream<Stream&>;

  asio::awaitable<void> serve_websocket(Request request) {
    const auto given = request[upstream_.ws.require_name];
    if (!upstream_.ws.require_name.empty() &&
        std::string_view(given.data(), given.size()) != upstream_.ws.require_value) {
      ++upstream_.stats.ws_unauthorized;
      Response refusal = make_response(
          request, 401, "application/json",
          R"({"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"missing or invalid API key"}})"
          "\n");
      refusal.keep_alive(false);
      co_await send(std::move(refusal));
      co_return;
    }
    if (upstream_.ws.fault == WsFault::refuse) {
      ++upstream_.stats.ws_refused;
      Response refusal = make_response(request, 503, "text/plain", "Service Unavailable\n");
      refusal.keep_alive(false);
      co_await send(std::move(refusal));
      co_return;
    }
    beast::get_lowest_layer(stream_).expires_never();
    WsSocket ws(stream_);
    ws.read_message_max(kMaxBodyBytes);
    beast::error_code error;
    co_await ws.async_accept(request, on_error(error));
    if (error) co_return;
    ++upstream_.stats.ws_upgrades;
    ++upstream_.ws_open;
    WsPeer peer(co_await asio::this_coro::executor);
    asio::co_spawn(co_await asio::this_coro::executor, ws_writer(ws, peer), asio::detached);
    while (!peer.done) {
      beast::flat_buffer in;
      co_await ws.async_read(in, on_error(error));
      if (error || peer.done || peer.huge) break;
      std::string body = beast::buffers_to_string(in.data());
      const RpcRequest rpc = upstream_.reader.read(body);
      upstream_.stats.ws_calls += rpc.no_calls ? 0 : rpc.calls.size();
      if (upstream_.ws.delay_ms > 0) {
        ++peer.delayed;
        asio::co_spawn(co_await asio::this_coro::executor,
                       ws_delayed_answer(peer, ws_answer(rpc, peer), upstream_.ws.delay_ms),
                       asio::detached);
        continue;
      }
      peer.answers.push_back(ws_answer(rpc, peer));
      peer.wake.cancel();
    }
    if (peer.stalled) {
      // Nothing answered, not even a ping: what the client sends is read and dropped.
      ++upstream_.stats.ws_stalls;
      std::array<char, 4096> discard{};
      beast::error_code gone;
      while (!gone) co_await socket().async_read_some(asio::buffer(discard), on_error(gone));
    } else if (peer.huge) {
      // Nothing answered either, but the client's frames are looked at for its close code.
      std::array<char, 4096> chunk{};
      std::string frames;
      beast::error_code gone;
      while (!gone) {
        const std::size_t n = co_await stream_.async_read_some(asio::buffer(chunk), on_error(gone));
        frames.append(chunk.data(), n);
        count_close_codes(frames);
      }
      // Its end (FIN) is not taken as one either: the socket stays open for a while.
      asio::steady_timer linger(co_await asio::this_coro::executor, kWsHugeLinger);
      co_await linger.async_wait(on_error(gone));
    }
    peer.done = true;
    beast::error_code ignored;
    socket().close(ignored);  // a writer blocked on a client that does not read ends too
    peer.wake.cancel();
    while (peer.writing) co_await peer.finished.async_wait(on_error(ignored));
    asio::steady_timer settle(co_await asio::this_coro::executor);
    while (peer.delayed > 0) {  // they see `done` within 10 ms
      settle.expires_after(std::chrono::milliseconds(10));
      co_await settle.async_wait(on_error(ignored));
    }
    --upstream_.ws_open;
  }

  // --ws-delay-ms: the answer is queued after the delay, unless the socket went first.
  asio::awaitable<void> ws_delayed_answer(WsPeer& peer, std::string answer, std::uint64_t ms) {
    asio::steady_timer pause(co_await asio::this_coro::executor);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    beast::error_code ignored;
    while (!peer.done && std::chrono::steady_clock::now() < until) {
      pause.expires_after(std::min<std::chrono::steady_clock::duration>(
          std::chrono::milliseconds(10), until - std::chrono::steady_clock::now()));
      co_await pause.async_wait(on_error(ignored));
    }
    if (!peer.done) {
      peer.answers.push_back(std::move(answer));
      peer.wake.cancel();
    }
    --peer.delayed;
  }

  // Every call answered as over HTTP in ok mode, but eth_subscribe and eth_unsubscribe.
  std::string ws_answer(const RpcRequest& rpc, WsPeer& peer) {
    std::string out;
    if (rpc.batch) out += '[';
    bool first = true;
    for (const Call& call : rpc.calls) {
      if (!first) out += ',';
      first = false;
      out += R"({"jsonrpc":"2.0","id":)";
      out += call.id;
      out += ',';
      if (call.rejection || (call.method != "eth_subscribe" && call.method != "eth_unsubscribe")) {
        out += upstream_.chain.answer(call);
      } else if (call.method == "eth_subscribe") {
        const auto kind = call.string_param(0);
        if (!kind ||
            (*kind != "newHeads" && *kind != "logs" && *kind != "newPendingTransactions")) {
          out += error_member(-32602, "invalid argument 0: unsupported subscription type");
        } else {
          const std::uint64_t n = upstream_.ws_next_id++;
          const std::string id = fmt::format("0x{:016x}{:016x}", splitmix64(n), n);
          if (*kind == "newHeads") {
            if (peer.heads.empty()) peer.last_head = upstream_.chain.height();
            peer.heads.push_back(id);
          } else {
            peer.quiet.insert(id);
          }
          ++upstream_.stats.ws_subscriptions;
          out += result_member(json_string(id));
        }
      } else {
        const auto id = call.string_param(0);
        bool ended = false;
        if (id) {
          auto it = std::find(peer.heads.begin(), peer.heads.end(), *id);
          if (it != peer.heads.end()) {
            peer.heads.erase(it);
            ended = true;
          } else {
            ended = peer.quiet.erase(std::string(*id)) > 0;
          }
        }
        if (ended) ++upstream_.stats.ws_unsubscribes;
        out += result_member(ended ? "true" : "false");
      }
      out += '}';
    }
    if (rpc.batch) out += ']';
    return out;
  }

  // The frame sent instead of an event under the garbage fault, in turn: not JSON, JSON that is
  // not JSON-RPC, an event without its subscription, an event of a subscription nobody has.
  static std::string garbage_frame(std::uint64_t n) {
    switch (n % 4) {
      case 0:
        return "\x01garbage, not JSON {\"jsonrpc\":";
      case 1:
        return R"({"hello":"world","list":[1,2,3]})";
      case 2:
        return R"({"jsonrpc":"2.0","method":"eth_subscription","params":{"result":{"number":7}}})";
      default:
        return R"({"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xdead","result":{"number":"0x1"}}})";
    }
  }

  // huge: how long the socket stays open after the client's FIN (a client that waits for our end
  // of the connection waits that long).
  static constexpr auto kWsHugeLinger = std::chrono::seconds(30);

  // Takes the whole client frames (masked) off the front of `frames`; a close frame with 1009
  // counts in ws_too_big. A frame longer than a client of ours sends is not looked into.
  void count_close_codes(std::string& frames) {
    for (;;) {
      if (frames.size() < 2) return;
      const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(frames[i]); };
      std::uint64_t length = byte(1) & 0x7f;
      std::size_t at = 2;
      if (length == 126 || length == 127) {
        const std::size_t bytes = length == 126 ? 2 : 8;
        if (frames.size() < at + bytes) return;
        length = 0;
        for (std::size_t i = 0; i < bytes; ++i) length = (length << 8) | byte(at + i);
        at += bytes;
      }
      if (length > 65536) {
        frames.clear();
        return;
      }
      const bool masked = (byte(1) & 0x80) != 0;
      const std::size_t mask_at = at;
      if (masked) at += 4;
      if (frames.size() < at + length) return;
      if ((byte(0) & 0x0f) == 0x8 && length >= 2) {
        unsigned code = 0;
        for (std::size_t i = 0; i < 2; ++i)
          code = (code << 8) | (byte(at + i) ^ (masked ? byte(mask_at + i) : 0));
        if (code == 1009) ++upstream_.stats.ws_too_big;
      }
      frames.erase(0, at + length);
    }
  }

  // One unfragmented text frame, its header and the first 1 KiB of its payload, written on the
  // stream under the WebSocket (the reader stopped): the message never ends.
  asio::awaitable<void> write_raw_frame(const std::string& payload, beast::error_code& error) {
    std::string frame;
    frame.push_back(static_cast<char>(0x81));  // FIN, text
    const std::uint64_t length = payload.size();
    if (length < 126) {
      frame.push_back(static_cast<char>(length));
    } else if (length < 65536) {
      frame.push_back(static_cast<char>(126));
      for (int shift = 8; shift >= 0; shift -= 8)
        frame.push_back(static_cast<char>((length >> shift) & 0xff));
    } else {
      frame.push_back(static_cast<char>(127));
      for (int shift = 56; shift >= 0; shift -= 8)
        frame.push_back(static_cast<char>((length >> shift) & 0xff));
    }
    frame.append(payload, 0, std::min<std::size_t>(payload.size(), 1024));
    co_await asio::async_write(stream_, asio::buffer(frame), on_error(error));
  }

  static std::string head_event(std::string_view subscription, std::string_view result) {
    return fmt::format(
        R"({{"jsonrpc":"2.0","method":"eth_subscription","params":{{"subscription":"{}","result":{}}}}})",
        subscription, result);
  }

  // Answers in order, then a head event per block mined since the last, per newHeads subscription
  // (the chain is looked at every 50 ms); the faults act here, event by event.
  asio::awaitable<void> ws_writer(WsSocket& ws, WsPeer& peer) {
    asio::steady_timer pause(co_await asio::this_coro::executor);
    beast::error_code error;
    const auto write = [&](const std::string& message) -> asio::awaitable<void> {
      co_await ws.async_write(asio::buffer(message), on_error(error));
      if (error) peer.done = true;
    };
    while (!peer.done) {
      if (peer.answers.empty()) {
        peer.wake.expires_after(std::chrono::milliseconds(50));
        beast::error_code ignored;
        co_await peer.wake.async_wait(on_error(ignored));
      }
      if (peer.done || peer.huge) break;  // huge: nothing follows its frame
      if (upstream_.ws.fault == WsFault::stall) {
        peer.stalled = true;
        beast::error_code ignored;
        socket().cancel(ignored);  // the reader stops, and with it the pongs
        break;
      }
      while (!peer.answers.empty() && !peer.done) {
        const std::string message = std::move(peer.answers.front());
        peer.answers.pop_front();
        co_await write(message);
      }
      const std::uint64_t head = upstream_.chain.height();
      while (!peer.done && !peer.heads.empty() && peer.last_head < head) {
        const WsFault fault = upstream_.ws.fault;
        if (fault == WsFault::stall || peer.huge) break;  // the next round stalls the socket
        if (fault == WsFault::drop || fault == WsFault::refuse) {
          // The TCP socket closed mid-stream: no close frame (over TLS no close_notify either).
          ++upstream_.stats.ws_drops;
          peer.done = true;
          beast::error_code ignored;
          socket().shutdown(tcp::socket::shutdown_both, ignored);
          socket().close(ignored);
          break;
        }
        if (fault == WsFault::slow) {
          pause.expires_after(std::chrono::milliseconds(upstream_.ws.slow_ms));
          beast::error_code ignored;
          co_await pause.async_wait(on_error(ignored));
          if (peer.done) break;
        }
        const std::uint64_t number = ++peer.last_head;
        const std::string head_result = Chain::head_json(number);
        const std::vector<std::string> subscriptions = peer.heads;
        for (const std::string& subscription : subscriptions) {
          if (peer.done) break;
          if (fault == WsFault::garbage) {
            co_await write(garbage_frame(peer.garbage++));
            ++upstream_.stats.ws_faulty;
          } else if (fault == WsFault::huge) {
            // A whole event, but its result carries a string past the client's message limit;
            // the reader stops first (nothing the client sends is answered from now on), and
            // nothing follows the frame.
            peer.huge = true;
            beast::error_code ignored;
            socket().cancel(ignored);
            std::string big = R"({"number":)" + hex_quantity(number) + R"(,"extraData":)" +
                              huge_result(upstream_.ws.huge_bytes) + '}';
            co_await write_raw_frame(head_event(subscription, big), error);
            ++upstream_.stats.ws_faulty;
            break;
          } else {
            co_await write(head_event(subscription, head_result));
            if (!peer.done) ++upstream_.stats.ws_events;
          }
        }
      }
    }
    peer.writing = false;
    peer.finished.cancel();
  }

  tcp::socket& socket() { return beast::get_lowest_layer(stream_).socket(); }

  // Over TLS, a clean end starts with close_notify (else the client reads a truncation attack,
  // not an end). asio's shutdown then awaits the client's own close_notify or FIN: not for long.
  asio::awaitable<void> tls_close_notify() {
    if constexpr (kTls) {
      beast::tcp_stream& tcp_stream = beast::get_lowest_layer(stream_);
      tcp_stream.expires_after(std::chrono::seconds(1));
      beast::error_code ignored;
      co_await stream_.async_shutdown(on_error(ignored));
      tcp_stream.expires_never();
    }
    co_return;  // a coroutine over plain TCP too, where it does nothing
  }

  // No more from us (FIN); the client may still send.
  asio::awaitable<void> finish_sending() {
    co_await tls_close_notify();
    beast::error_code ignored;
    socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  // A clean close (FIN), without an answer or in the middle of one.
  asio::awaitable<void> close() {
    co_await tls_close_notify();
    beast::error_code ignored;
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
  }

  // An abortive close (RST), over TLS too: no close_notify.
  void reset() {
    beast::error_code ignored;
    socket().set_option(tcp::socket::linger(true, 0), ignored);
    socket().close(ignored);
  }

  asio::awaitable<void> wait_until_client_leaves() {
    std::array<char, 4096> discard{};
    beast::error_code error;
    while (!error) co_await stream_.async_read_some(asio::buffer(discard), on_error(error));
  }

  Stream stream_;
  beast::flat_buffer buffer_;
  Upstream& upstream_;
};

asio::awaitable<void> serve_connection(tcp::socket socket, Upstream& upstream) {
  Connection<beast::tcp_stream> connection(upstream, std::move(socket));
  co_await connection.run();
}

// Accepts the connection and reads (and drops) what the client sends, the ClientHello first,
// never answering, until the client leaves: a TLS handshake that never completes.
asio::awaitable<void> hang_handshake(tcp::socket socket, Upstream& upstream) {
  ++upstream.handshakes_hanging;
  std::array<char, 4096> discard{};
  beast::error_code error;
  while (!error) {
    co_await socket.async_read_some(asio::buffer(discard),
                                    asio::redirect_error(asio::use_awaitable, error));
  }
  --upstream.handshakes_hanging;
}

asio::awaitable<void> serve_tls_connection(tcp::socket socket, Upstream& upstream,
                                           ssl::context& context, bool hang) {
  if (hang) {
    co_await hang_handshake(std::move(socket), upstream);
    co_return;
  }
  Connection<TlsStream> connection(upstream, std::move(socket), context);
  if (co_await connection.handshake()) co_await connection.run();
}

// Serves each accepted connection in its own coroutine: plain HTTP, or HTTPS when tls is set.
asio::awaitable<void> accept_connections(tcp::acceptor& acceptor, Upstream& upstream,
                                         ssl::context* tls, bool hang_handshakes) {
  for (;;) {
    beast::error_code error;
    tcp::socket socket =
        co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, error));
    if (error == asio::error::operation_aborted) co_return;
    if (error) {
      fmt::print(stderr, "fake_upstream: accept: {}\n", error.message());
      continue;
    }
    socket.set_option(tcp::no_delay(true), error);
    ++upstream.stats.connections;
    asio::co_spawn(acceptor.get_executor(),
                   tls == nullptr
                       ? serve_connection(std::move(socket), upstream)
                       : serve_tls_connection(std::move(socket), upstream, *tls, hang_handshakes),
                   [](const std::exception_ptr& failure) {
                     if (!failure) return;
                     try {
                       std::rethrow_exception(failure);
                     } catch (const std::exception& e) {
                       fmt::print(stderr, "fake_upstream: connection: {}\n", e.what());
                     }
                   });
  }
}

// ---------------------------------------------------------------------------------------------
// Command line

struct Options {
  tcp::endpoint listen{asio::ip::address_v4::loopback(), 0};
  std::optional<std::string> port_file;
  std::uint64_t chain_id = 31337;
  std::uint64_t height = 100;
  double mine_per_sec = 0;
  std::uint64_t finality_lag = 0;
  std::string name = "fake";
  BehaviourPatch behaviour;
  fake::TlsOptions tls;
  WsSettings ws;
  bool help = false;
};

Expected<tcp::endpoint> parse_endpoint(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return Unexpected{"--listen wants HOST:PORT"};
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const auto port = parse_number<std::uint16_t>(text.substr(colon + 1));
  beast::error_code error;
  const auto address = asio::ip::make_address(std::string(host), error);
  if (!port || error) return Unexpected{fmt::format("bad --listen address \"{}\"", text)};
  return tcp::endpoint{address, *port};
}

template <class T>
bool parse_into(std::string_view text, T& slot) {
  const auto number = parse_number<T>(text);
  if (number) slot = *number;
  return number.has_value();
}

template <class T>
bool parse_into(std::string_view text, std::optional<T>& slot) {
  const auto number = parse_number<T>(text);
  if (number) slot = *number;
  return number.has_value();
}

Expected<Options> parse_options(int argc, char** argv) {
  Options options;
  RequestReader json_checker;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    std::optional<std::string> inline_value;
    if (const auto eq = flag.find('='); flag.starts_with("--") && eq != std::string_view::npos) {
      inline_value = std::string(flag.substr(eq + 1));
      flag = flag.substr(0, eq);
    }
    if (flag == "--help" || flag == "-h") {
      options.help = true;
      continue;
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Unexpected{fmt::format("{} needs a value", flag)};
    }
    const auto bad = [&] {
      return Unexpected{fmt::format("bad value for {}: \"{}\"", flag, value)};
    };
    auto set_number = [&](auto& slot) { return parse_into(value, slot); };
    auto& b = options.behaviour;

    if (flag == "--listen") {
      auto endpoint = parse_endpoint(value);
      if (!endpoint) return Unexpected{endpoint.error()};
      options.listen = *endpoint;
    } else if (flag == "--port-file") {
      options.port_file = value;
    } else if (flag == "--name") {
      options.name = value;
    } else if (flag == "--chain-id") {
      if (!set_number(options.chain_id)) return bad();
    } else if (flag == "--height") {
      if (!set_number(options.height)) return bad();
    } else if (flag == "--finality-lag") {
      if (!set_number(options.finality_lag)) return bad();
    } else if (flag == "--mine-per-sec") {
      if (!set_number(options.mine_per_sec) || options.mine_per_sec < 0) return bad();
    } else if (flag == "--mode") {
      b.mode = parse_mode(value);
      if (!b.mode) return bad();
    } else if (flag == "--status") {
      std::optional<std::uint64_t> status;
      if (!set_number(status) || !checked_status(*status)) return bad();
      b.status = static_cast<unsigned>(*status);
    } else if (flag == "--delay-ms") {
      if (!set_number(b.delay_ms)) return bad();
    } else if (flag == "--code") {
      if (!set_number(b.code)) return bad();
    } else if (flag == "--huge-bytes") {
      if (!set_number(b.huge_bytes)) return bad();
    } else if (flag == "--drip-ms") {
      if (!set_number(b.drip_ms)) return bad();
    } else if (flag == "--extra-ms") {
      if (!set_number(b.extra_ms)) return bad();
    } else if (flag == "--gzip-bytes") {
      if (!set_number(b.gzip_bytes)) return bad();
    } else if (flag == "--chunk-bytes") {
      if (!set_number(b.chunk_bytes)) return bad();
    } else if (flag == "--retry-after") {
      b.retry_after = value;
    } else if (flag == "--body") {
      b.body = value;
    } else if (flag == "--message") {
      b.message = value;
    } else if (flag == "--data") {
      if (!json_checker.is_json(value)) return bad();
      b.data = value;
    } else if (flag == "--tls-cert") {
      options.tls.cert_file = value;
    } else if (flag == "--tls-key") {
      options.tls.key_file = value;
    } else if (flag == "--tls-client-ca") {
      options.tls.client_ca_file = value;
    } else if (flag == "--ws-fault") {
      const auto fault = parse_ws_fault(value);
      if (!fault) return bad();
      options.ws.fault = *fault;
    } else if (flag == "--ws-slow-ms") {
      if (!set_number(options.ws.slow_ms)) return bad();
    } else if (flag == "--ws-huge-bytes") {
      if (!set_number(options.ws.huge_bytes)) return bad();
    } else if (flag == "--ws-delay-ms") {
      if (!set_number(options.ws.delay_ms)) return bad();
    } else if (flag == "--ws-require-header") {
      const auto colon = value.find(':');
      if (colon == 0 || colon == std::string::npos) return bad();
      options.ws.require_name = value.substr(0, colon);
      options.ws.require_value = value.substr(colon + 1);
    } else if (flag == "--tls-handshake") {
      if (value != "ok" && value != "hang") return bad();
      options.tls.hang_handshake = value == "hang";
    } else {
      return Unexpected{fmt::format("unknown option {}", flag)};
    }
  }
  if (auto checked = fake::check_tls_options(options.tls); !checked) {
    return Unexpected{checked.error()};
  }
  return options;
}

void write_port_file(const std::string& path, unsigned short port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << '\n';
    out.close();
    if (!out) throw std::runtime_error(fmt::format("cannot write {}", tmp));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

int main(int argc, char** argv) {
  auto options = parse_options(argc, argv);
  if (!options) {
    fmt::print(stderr, "fake_upstream: {}\n{}", options.error(), kUsage);
    return 2;
  }
  if (options->help) {
    fmt::print("{}", kUsage);
    return 0;
  }

  std::unique_ptr<ssl::context> tls;
  if (options->tls.enabled()) {
    auto context = fake::make_tls_context(options->tls);
    if (!context) {
      fmt::print(stderr, "fake_upstream: {}\n", context.error());
      return 2;
    }
    tls = std::move(*context);
  }

  try {
    Upstream upstream(
        Chain(options->chain_id, options->height, options->mine_per_sec, options->name));
    upstream.chain.set_finality_lag(options->finality_lag);
    options->behaviour.apply_to(upstream.behaviour);
    upstream.tls = tls != nullptr;
    upstream.ws = options->ws;

    asio::io_context io{1};
    tcp::acceptor acceptor(io, options->listen);
    const tcp::endpoint bound = acceptor.local_endpoint();
    if (options->port_file) write_port_file(*options->port_file, bound.port());
    const std::string host = bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                                     : bound.address().to_string();
    fmt::print("listening on {}:{}\n", host, bound.port());
    std::fflush(stdout);

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&io](const beast::error_code&, int) { io.stop(); });
    asio::co_spawn(io,
                   accept_connections(acceptor, upstream, tls.get(), options->tls.hang_handshake),
                   asio::detached);
    io.run();
    upstream.gate.reset();  // before the io_context it was made on goes
  } catch (const std::exception& e) {
    fmt::print(stderr, "fake_upstream: {}\n", e.what());
    return 1;
  }
  return 0;
}
