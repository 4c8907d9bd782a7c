#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <ctime>

#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"

namespace rpcroute {

std::string_view outcome_name(Outcome o) {
  switch (o) {
    case Outcome::success:
      return "success";
    case Outcome::rpc_error:
      return "rpc_error";
    case Outcome::rate_limited:
      return "rate_limited";
    case Outcome::connect_failed:
      return "connect_failed";
    case Outcome::dns_failed:
      return "dns_failed";
    case Outcome::tls_failed:
      return "tls_failed";
    case Outcome::timeout:
      return "timeout";
    case Outcome::transport_error:
      return "transport_error";
    case Outcome::http_error:
      return "http_error";
    case Outcome::bad_response:
      return "bad_response";
    case Outcome::wrong_id:
      return "wrong_id";
    case Outcome::too_large:
      return "too_large";
    case Outcome::out_of_memory:
      return "out_of_memory";
  }
  return "?";
}

std::optional<Outcome> parse_outcome(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(kLastOutcome); ++i) {
    if (outcome_name(static_cast<Outcome>(i)) == name) return static_cast<Outcome>(i);
  }
  return std::nullopt;
}

std::string_view class_name(OutcomeClass c) {
  switch (c) {
    case OutcomeClass::success:
      return "success";
    case OutcomeClass::deterministic:
      return "deterministic";
    case OutcomeClass::capability:
      return "capability";
    case OutcomeClass::rate_limited:
      return "rate_limited";
    case OutcomeClass::provider_failure:
      return "provider_failure";
    case OutcomeClass::unknown:
      return "unknown";
  }
  return "?";
}

namespace {

using C = OutcomeClass;

// Order matters: the first matching row wins. Rate limits come first ("request rate limited"
// beats anything else in the message), then capability, then deterministic.
constexpr MessageRule kMessageRules[] = {
    {"rate limit", "", C::rate_limited},
    {"too many requests", "", C::rate_limited},
    {"compute units", "", C::rate_limited},
    {"exceeded", "capacity", C::rate_limited},
    {"request rate exceeded", "", C::rate_limited},
    {"rate exceeded", "", C::rate_limited},
    {"requests per second", "", C::rate_limited},
    {"request count exceeded", "", C::rate_limited},
    {"quota exceeded", "", C::rate_limited},
    {"throughput", "exceeded", C::rate_limited},
    {"request limit reached", "", C::rate_limited},     // QuickNode -32007 "100/second request ..."
    {"timeout on the free tier", "", C::rate_limited},  // dRPC code 30: the free tier throttles
    {"missing trie node", "", C::capability},
    {"header not found", "", C::capability},
    {"state not available", "", C::capability},
    {"historical state", "", C::capability},
    {"state is not available", "", C::capability},
    {"state unavailable", "", C::capability},   // Besu "World state unavailable"
    {"no state available", "", C::capability},  // Nethermind -32002 "No state available for block"
    {"due to pruning", "", C::capability},      // Erigon "old data not available due to pruning"
    {"receipt not available", "", C::capability},  // Nethermind -32000, receipts pruned
    {"blockoutofrange", "", C::capability},
    {"block out of range", "", C::capability},
    {"unknown block", "", C::capability},
    {"block not found", "", C::capability},
    {"does not exist/is not available", "", C::capability},
    {"method not found", "", C::capability},
    {"method not supported", "", C::capability},
    {"method not enabled", "", C::capability},  // Besu -32604: not in its --rpc-http-api
    {"not supported", "", C::capability},
    {"unsupported method", "", C::capability},
    {"is not available", "", C::capability},
    {"block range", "", C::capability},
    {"is limited to", "", C::capability},
    {"range too large", "", C::capability},
    {"range limit", "", C::capability},      // Besu -32005 "... exceeds maximum RPC range limit"
    {"blocks distance", "", C::capability},  // Ankr "maximum [from, to] blocks distance: 10000"
    {"exceeds limit of", "range", C::capability},   // Infura -32602 "range N exceeds limit of M"
    {"too many logs", "", C::capability},           // Erigon "query returns too many logs, ..."
    {"exceeds max batch size", "", C::capability},  // Besu -32005: --rpc-http-max-batch-size
    {"range is too large", "", C::capability},
    {"query returned more than", "", C::capability},
    {"too many blocks", "", C::capability},
    {"log response size exceeded", "", C::capability},
    {"archive", "", C::capability},
    {"pruned", "", C::capability},
    {"execution reverted", "", C::deterministic},
    {"reverted", "", C::deterministic},
    {"nonce too low", "", C::deterministic},
    {"nonce too high", "", C::deterministic},
    {"insufficient funds", "", C::deterministic},
    {"already known", "", C::deterministic},
    {"known transaction", "", C::deterministic},
    {"transaction underpriced", "", C::deterministic},
    {"replacement transaction", "", C::deterministic},
    {"max fee per gas less than", "", C::deterministic},
    {"max priority fee per gas higher", "", C::deterministic},
    {"intrinsic gas too low", "", C::deterministic},
    {"gas required exceeds", "", C::deterministic},
    {"exceeds block gas limit", "", C::deterministic},
    {"invalid sender", "", C::deterministic},
    {"invalid signature", "", C::deterministic},
    {"out of gas", "", C::deterministic},
    {"invalid opcode", "", C::deterministic},
    {"invalid argument", "", C::deterministic},
    {"tx fee", "exceeds", C::deterministic},
};

constexpr CodeRule kCodeRules[] = {
    {3, C::deterministic},  // execution reverted with data
    {jsonrpc::kInvalidParams, C::deterministic},
    {jsonrpc::kInvalidRequest, C::deterministic},
    {jsonrpc::kParseError, C::deterministic},
    {jsonrpc::kMethodNotFound, C::capability},
    {-32001, C::capability},     // resource not found
    {-32004, C::capability},     // method not supported (EIP-1474)
    {-32604, C::capability},     // method not enabled (Besu)
    {-32003, C::deterministic},  // transaction rejected
    {-32010, C::deterministic},  // transaction cost exceeds limit
    {-32015, C::deterministic},  // VM execution error (Nethermind)
    {-32005, C::rate_limited},   // limit exceeded (EIP-1474)
    {429, C::rate_limited},
    {-32002, C::provider_failure},  // resource unavailable
    {jsonrpc::kInternalError, C::provider_failure},
    {-32000, C::unknown},
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

// A provider that asks for more than a week is not believed (nor is NaN): the default applies.
constexpr double kMaxRetryAfterMs = 7.0 * 86'400'000;

std::optional<std::int64_t> first_number_after(std::string_view text, std::string_view key) {
  auto pos = text.find(key);
  if (pos == std::string_view::npos) return std::nullopt;
  pos += key.size();
  while (pos < text.size() && (text[pos] == '"' || text[pos] == ':' || text[pos] == ' ')) ++pos;
  double v = 0;
  auto [p, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), v);
  if (ec != std::errc() || !(v >= 0 && v * 1000 <= kMaxRetryAfterMs)) return std::nullopt;
  return static_cast<std::int64_t>(v * 1000);
}

std::optional<std::int64_t> parse_http_date(std::string_view s, std::int64_t now_ms) {
  std::tm tm{};
  std::string str(s);
  if (strptime(str.c_str(), "%a, %d %b %Y %H:%M:%S", &tm) == nullptr) return std::nullopt;
  auto t = timegm(&tm);
  if (t < 0) return std::nullopt;
  auto ms = std::max<double>(0, static_cast<double>(t) * 1000 - static_cast<double>(now_ms));
  if (ms > kMaxRetryAfterMs) return std::nullopt;
  return static_cast<std::int64_t>(ms);
}

}  // namespace

std::span<const MessageRule> message_rules() { return kMessageRules; }
std::span<const CodeRule> code_rules() { return kCodeRules; }

OutcomeClass classify_rpc_error(std::int64_t code, std::string_view message) {
  auto msg = lower(message);
  for (const auto& r : kMessageRules) {
    if (msg.find(r.needle) != std::string::npos &&
        (r.needle2.empty() || msg.find(r.needle2) != std::string::npos)) {
      return r.cls;
    }
  }
  for (const auto& r : kCodeRules) {
    if (r.code == code) return r.cls;
  }
  return C::unknown;
}

bool says_missing_state(std::string_view message) {
  const auto m = lower(message.substr(0, 1024));
  // Each wording says the node no longer has (or never kept) the old state or history, never that
  // it has not reached the block yet ("header not found", "block not found": a lagging node) nor
  // that the request is wrong ("invalid block range").
  for (std::string_view needle : {
           "missing trie node",       // geth, Cloudflare, Chainstack: pruned trie
           "state not available",     // geth
           "state is not available",  // geth (path scheme)
           "historical state",        // geth "required historical state unavailable"
           "state histories haven't been fully indexed",  // geth archive still indexing
           "state unavailable",                           // Besu -32000 "World state unavailable"
           "no state available",     // Nethermind -32002 "No state available for block"
           "pruned",                 // reth "State at block #N is pruned", geth 4444
           "due to pruning",         // Erigon PrunedError
           "data before txnum",      // Erigon 3 "... but data before txNum=N is not available"
           "state pruning",          // OpenEthereum "running with state pruning"
           "access to archive",      // Infura "does not have access to archive state"
           "receipt not available",  // Nethermind: old receipts pruned
       }) {
    if (m.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::int64_t retry_after_ms(std::string_view header, std::string_view message,
                            std::string_view data, std::int64_t now_ms) {
  if (!header.empty()) {
    std::int64_t secs = 0;
    auto [p, ec] = std::from_chars(header.data(), header.data() + header.size(), secs);
    if (ec == std::errc() && p == header.data() + header.size()) {
      if (secs >= 0 && secs <= static_cast<std::int64_t>(kMaxRetryAfterMs) / 1000)
        return secs * 1000;
    } else if (auto d = parse_http_date(header, now_ms)) {
      return *d;
    }
  }
  if (!data.empty()) {
    if (auto v = first_number_after(data, "\"retry_after\"")) return *v;
    if (auto v = first_number_after(data, "\"backoff_seconds\"")) return *v;
  }
  auto msg = lower(message);
  for (std::string_view key : {"try again in ", "retry in ", "retry after "}) {
    auto pos = msg.find(key);
    if (pos == std::string::npos) continue;
    auto rest = std::string_view(msg).substr(pos + key.size());
    double v = 0;
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (ec != std::errc() || !(v >= 0)) continue;
    auto unit = rest.substr(static_cast<std::size_t>(p - rest.data()));
    while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
    double scale = 1000;  // seconds unless told otherwise
    if (unit.rfind("ms", 0) == 0 || unit.rfind("millisecond", 0) == 0)
      scale = 1;
    else if (unit.rfind("min", 0) == 0 || (unit.rfind('m', 0) == 0 && unit.rfind("mi", 0) != 0))
      scale = 60'000;
    else if (unit.rfind('h', 0) == 0)
      scale = 3'600'000;
    auto ms = v * scale;
    if (!(ms <= kMaxRetryAfterMs)) continue;
    return static_cast<std::int64_t>(ms);
  }
  return -1;
}

namespace {

/// Length of the UTF-8 sequence at the start of `s` (1 to 4), or 0 when it is not one (a stray
/// continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut short).
std::size_t utf8_length(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F)) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F)) return 0;
    return 4;
  }
  return 0;
}

}  // namespace

std::string report_text(std::string_view text) {
  std::string out;
  out.reserve(std::min(text.size(), kMaxReportBytes));
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t n = utf8_length(text.substr(i));
    const auto c = static_cast<unsigned char>(text[i]);
    // C1 controls (U+0080 to U+009F, "\xc2\x9b" is CSI) steer terminals as ESC does.
    const bool control = n == 0 || c < 0x20 || c == 0x7F ||
                         (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0);
    std::string piece;
    if (!control) {
      piece.assign(text.substr(i, n));
    } else if (c == '\n' && n == 1) {
      piece = "\\n";
    } else if (c == '\r' && n == 1) {
      piece = "\\r";
    } else if (c == '\t' && n == 1) {
      piece = "\\t";
    } else {
      for (std::size_t k = 0; k < std::max<std::size_t>(n, 1); ++k) {
        piece += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + k]));
      }
    }
    if (out.size() + piece.size() > kMaxReportBytes) {
      out += fmt::format("… ({} bytes)", text.size());
      return out;
    }
    out += piece;
    i += std::max<std::size_t>(n, 1);
  }
  return out;
}

Classification classify_transport(TransportError e, std::string message) {
  Classification c;
  c.cls = C::provider_failure;
  c.message = std::move(message);
  switch (e) {
    case TransportError::none:
      c.cls = C::success;
      c.outcome = Outcome::success;
      break;
    case TransportError::connect:
      c.outcome = Outcome::connect_failed;
      break;
    case TransportError::dns:
      c.outcome = Outcome::dns_failed;
      break;
    case TransportError::timeout:
      c.outcome = Outcome::timeout;
      break;
    case TransportError::tls:
      c.outcome = Outcome::tls_failed;
      break;
    case TransportError::truncated:
    case TransportError::encoded:
      c.outcome = Outcome::bad_response;
      break;
    // Charged to the provider: its answer is what outgrew the cap or the memory left.
    case TransportError::too_large:
      c.outcome = Outcome::too_large;
      break;
    case TransportError::out_of_memory:
      c.outcome = Outcome::out_of_memory;
      break;
    case TransportError::reset:
    case TransportError::other:
      c.outcome = Outcome::transport_error;
      break;
    // Our side gave up (the client left): nothing to hold against the provider. The router does
    // not record such an attempt; should anything classify one, it leaves the breaker alone.
    case TransportError::cancelled:
      c.cls = C::capability;
      c.outcome = Outcome::transport_error;
      break;
  }
  return c;
}

Classification classify_http_status(long status, std::string_view body,
                                    std::string_view retry_after_header, std::int64_t now_ms) {
  Classification c;
  std::string rpc_message;
  std::string rpc_data;
  bool rpc_rate_limited = false;
  if (auto parsed = jsonrpc::parse_response(body);
      parsed && !parsed->replies.empty() && parsed->replies[0].error) {
    const auto& err = *parsed->replies[0].error;
    rpc_message = err.message;
    rpc_data = err.data;
    rpc_rate_limited = classify_rpc_error(err.code, err.message) == C::rate_limited;
  }
  if (status == 429 || rpc_rate_limited) {
    c.outcome = Outcome::rate_limited;
    c.cls = C::rate_limited;
    c.retry_after_ms = retry_after_ms(retry_after_header, rpc_message, rpc_data, now_ms);
    c.message = rpc_message.empty() ? fmt::format("HTTP {}", status)
                                    : fmt::format("HTTP {}: {}", status, rpc_message);
    return c;
  }
  c.outcome = Outcome::http_error;
  c.cls = C::provider_failure;
  c.message = rpc_message.empty() ? fmt::format("HTTP {}", status)
                                  : fmt::format("HTTP {}: {}", status, rpc_message);
  return c;
}

}  // namespace rpcroute
