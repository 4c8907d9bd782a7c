#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <vector>

namespace rpcroute::jsonrpc {

inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
/// rpcroute's own: no provider could serve the request (DESIGN.md section 4).
inline constexpr int kNoProvider = -32050;

/// One request object as the client sent it.
struct Call {
  std::string id;              // raw JSON token ("7", "\"abc\"", "null"); empty for a notification
  std::string method;          // unescaped
  std::string params;          // raw JSON; "[]" when absent
  std::string invalid_reason;  // set when the object is not a valid request

  [[nodiscard]] bool valid() const { return invalid_reason.empty(); }
  [[nodiscard]] bool has_id() const { return !id.empty(); }
  /// The id to put in an answer: the client's, or null.
  [[nodiscard]] std::string_view reply_id() const {
    return id.empty() ? std::string_view("null") : id;
  }
};

/// A client body: one call or a batch.
struct Body {
  bool batch = false;
  std::vector<Call> calls;
};

struct BodyError {
  int code = kParseError;
  std::string message;
};

/// Parses a request body with simdjson On-Demand. Invalid JSON → -32700; a body that is not a
/// request object or a non-empty array → -32600. Invalid objects inside a batch are kept as calls
/// with invalid_reason set, so each gets its own -32600 answer. `capacity`: the bytes readable from
/// body.data() (a std::string's capacity); with SIMDJSON_PADDING (64) to spare, the body is parsed
/// in place rather than copied.
[[nodiscard]] tl::expected<Body, BodyError> parse_body(std::string_view body,
                                                       std::size_t capacity = 0);

struct RpcError {
  std::int64_t code = 0;
  std::string message;
  std::string data;  // raw JSON, empty when absent
};

/// One response object from a provider.
struct Reply {
  std::string id;  // raw token
  /// Raw JSON, a view into the text given to parse_response (which must outlive it): a large
  /// result is never copied to be forwarded.
  std::optional<std::string_view> result;
  std::optional<RpcError> error;
};

struct Response {
  bool batch = false;
  std::vector<Reply> replies;
};

/// Parses a provider's answer. Anything that is not a JSON-RPC response (or an array of them) is
/// an error describing what was wrong. Results are views into `body`.
[[nodiscard]] tl::expected<Response, std::string> parse_response(std::string_view body);
/// The same, parsing in place when the buffer behind `body` has `capacity` ≥ size + 64 bytes.
[[nodiscard]] tl::expected<Response, std::string> parse_response(std::string_view body,
                                                                 std::size_t capacity);

namespace detail {
/// The two ways parse_body and parse_response read a document, for tests and fuzzing. The plain
/// path takes the common case in one pass — one object of valid JSON whose strings hold printable
/// ASCII without escapes, numbers without exponents, and the expected members once each — and
/// answers nullopt for anything else; the full path (simdjson On-Demand plus the grammar check)
/// reads everything and says what is wrong. Whatever the plain path accepts, the full path must
/// read the same way.
/// `capacity`: bytes readable from text.data() (a std::string's capacity); with 16 to spare, the
/// last bytes are scanned with the rest.
[[nodiscard]] std::optional<Body> parse_plain_body(std::string_view text, std::size_t capacity = 0);
[[nodiscard]] std::optional<Response> parse_plain_response(std::string_view text,
                                                           std::size_t capacity = 0);
[[nodiscard]] tl::expected<Body, BodyError> parse_full_body(std::string_view text,
                                                            std::size_t capacity = 0);
[[nodiscard]] tl::expected<Response, std::string> parse_full_response(std::string_view text,
                                                                      std::size_t capacity = 0);
}  // namespace detail

/// {"jsonrpc":"2.0","id":ID,"method":M,"params":P}
[[nodiscard]] std::string make_call(std::string_view id, std::string_view method,
                                    std::string_view params);
void append_call(std::string& out, std::string_view id, std::string_view method,
                 std::string_view params);
/// {"jsonrpc":"2.0","id":ID,"result":R}
/// The envelope make_result writes: kResultHead, the id, kResultMiddle, the result, '}'.
inline constexpr std::string_view kResultHead = R"({"jsonrpc":"2.0","id":)";
inline constexpr std::string_view kResultMiddle = R"(,"result":)";
[[nodiscard]] std::string make_result(std::string_view id, std::string_view result);
/// {"jsonrpc":"2.0","id":ID,"error":{"code":C,"message":M[,"data":D]}}
[[nodiscard]] std::string make_error(std::string_view id, std::int64_t code,
                                     std::string_view message, std::string_view data = {});
/// The error object alone: {"code":C,"message":M[,"data":D]}
[[nodiscard]] std::string error_object(std::int64_t code, std::string_view message,
                                       std::string_view data = {});

/// "0x1a" → 26. Rejects anything that is not a JSON string holding a hex quantity.
[[nodiscard]] std::optional<std::uint64_t> parse_quantity(std::string_view raw_json_string);
[[nodiscard]] std::string to_quantity(std::uint64_t v);  // 26 → "\"0x1a\""

/// True when two raw id tokens denote the same id (1 and 1.0 are the same number).
[[nodiscard]] bool same_id(std::string_view a, std::string_view b);

}  // namespace rpcroute::jsonrpc
