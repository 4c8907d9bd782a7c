#include "rpcroute/jsonrpc.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <vector>

#include "grammar.hpp"
#include "rpcroute/json.hpp"

namespace rpcroute::jsonrpc {

namespace od = simdjson::ondemand;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  return s;
}

constexpr int kMaxDepth = 256;

/// Reads a value to its end, so that any syntax error inside it surfaces. On-Demand skips what it
/// is not asked for, and we forward what we skip: it must be valid JSON.
simdjson::error_code validate(od::value v, int depth) {
  if (depth > kMaxDepth) return simdjson::DEPTH_ERROR;
  od::json_type t;
  if (auto e = v.type().get(t)) return e;
  switch (t) {
    case od::json_type::object: {
      od::object o;
      if (auto e = v.get_object().get(o)) return e;
      for (auto field : o) {
        std::string_view key;
        if (auto e = field.unescaped_key().get(key)) return e;
        od::value fv;
        if (auto e = field.value().get(fv)) return e;
        if (auto e = validate(fv, depth + 1)) return e;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::array: {
      od::array a;
      if (auto e = v.get_array().get(a)) return e;
      for (auto item : a) {
        od::value iv;
        if (auto e = item.get(iv)) return e;
        if (auto e = validate(iv, depth + 1)) return e;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::string: {
      // Stage 1 has checked the string's UTF-8, its unescaped control characters and its closing
      // quote; only escapes remain to check. Without a backslash there is nothing to unescape: a
      // large hex result is not copied into the parser's string buffer.
      std::string_view token = v.raw_json_token();
      if (token.find('\\') == std::string_view::npos) return simdjson::SUCCESS;
      std::string_view s;
      return v.get_string().get(s);
    }
    case od::json_type::number: {
      double d;
      return v.get_double().get(d);
    }
    case od::json_type::boolean: {
      bool b;
      return v.get_bool().get(b);
    }
    case od::json_type::null: {
      bool n = false;
      if (auto e = v.is_null().get(n)) return e;
      return n ? simdjson::SUCCESS : simdjson::INCORRECT_TYPE;
    }
  }
  return simdjson::INCORRECT_TYPE;
}

/// The raw JSON text of any value, validated. `doc` tells where the value ended.
simdjson::error_code raw_of(od::value v, od::document& doc, std::string_view& out) {
  od::json_type t;
  if (auto e = v.type().get(t)) return e;
  std::string_view token = v.raw_json_token();
  if (auto e = validate(v, 0)) return e;
  if (t != od::json_type::object && t != od::json_type::array) {
    out = trim(token);
    return simdjson::SUCCESS;
  }
  const char* end = nullptr;
  if (auto e = doc.current_location().get(end)) return e;  // a nested value is followed by , } or ]
  out = trim(std::string_view(token.data(), static_cast<std::size_t>(end - token.data())));
  return simdjson::SUCCESS;
}

/// Validates a document that is a scalar (the type-specific getter checks the whole token).
simdjson::error_code validate_scalar(od::document& doc, od::json_type t) {
  switch (t) {
    case od::json_type::string: {
      std::string_view s;
      return doc.get_string().get(s);
    }
    case od::json_type::number: {
      double d;
      return doc.get_double().get(d);
    }
    case od::json_type::boolean: {
      bool b;
      return doc.get_bool().get(b);
    }
    case od::json_type::null: {
      bool n = false;
      if (auto e = doc.is_null().get(n)) return e;
      return n ? simdjson::SUCCESS : simdjson::INCORRECT_TYPE;
    }
    default:
      return simdjson::INCORRECT_TYPE;
  }
}

/// True when nothing but whitespace follows the document's value.
bool at_end(od::document& doc) {
  const char* loc = nullptr;
  return doc.current_location().get(loc) == simdjson::OUT_OF_BOUNDS;
}

od::parser& thread_parser() {
  thread_local od::parser parser;
  return parser;
}

/// The parser keeps index buffers sized for the largest document it has seen. After a large one
/// they are released, so that one huge answer does not stay resident in an idle process.
constexpr std::size_t kKeptParserCapacity = 1 << 20;
void release_large_parser() {
  auto& parser = thread_parser();
  if (parser.capacity() > kKeptParserCapacity) parser = od::parser{};
}

/// simdjson needs SIMDJSON_PADDING readable bytes past the end; copy only when we must.
class PaddedInput {
 public:
  explicit PaddedInput(std::string_view s, std::size_t capacity = 0)
      : view_(s), capacity_(capacity) {}
  simdjson::padded_string_view view() {
    if (capacity_ >= view_.size() + simdjson::SIMDJSON_PADDING) {
      return simdjson::padded_string_view(view_.data(), view_.size(), capacity_);
    }
    copy_ = simdjson::padded_string(view_);
    return simdjson::padded_string_view(copy_.data(), copy_.size(),
                                        copy_.size() + simdjson::SIMDJSON_PADDING);
  }
  /// The same bytes in the caller's text (views must not point into a copy that dies with us).
  [[nodiscard]] std::string_view original(std::string_view parsed) const {
    if (copy_.data() == nullptr || copy_.size() == 0) return parsed;
    return {view_.data() + (parsed.data() - copy_.data()), parsed.size()};
  }

 private:
  std::string_view view_;
  std::size_t capacity_;
  simdjson::padded_string copy_;
};

// Parses one request object; structural JSON errors propagate, request-shape errors become
// invalid_reason.
simdjson::error_code parse_call(od::object obj, od::document& doc, Call& call) {
  bool has_method = false;
  for (auto field : obj) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return e;
    od::value v;
    if (auto e = field.value().get(v)) return e;
    if (key == "id") {
      od::json_type t;
      if (auto e = v.type().get(t)) return e;
      std::string_view raw;
      if (t == od::json_type::object || t == od::json_type::array || t == od::json_type::boolean) {
        if (auto e = raw_of(v, doc, raw)) return e;
        if (call.invalid_reason.empty())
          call.invalid_reason = "id must be a string, a number or null";
        continue;
      }
      if (auto e = raw_of(v, doc, raw)) return e;
      call.id.assign(raw);
    } else if (key == "method") {
      od::json_type t;
      if (auto e = v.type().get(t)) return e;
      if (t != od::json_type::string) {
        std::string_view raw;
        if (auto e = raw_of(v, doc, raw)) return e;
        if (call.invalid_reason.empty()) call.invalid_reason = "method must be a string";
        continue;
      }
      std::string_view m;
      if (auto e = v.get_string().get(m)) return e;
      call.method.assign(m);
      has_method = true;
    } else if (key == "params") {
      od::json_type t;
      if (auto e = v.type().get(t)) return e;
      std::string_view raw;
      if (auto e = raw_of(v, doc, raw)) return e;
      if (t != od::json_type::array && t != od::json_type::object) {
        if (call.invalid_reason.empty())
          call.invalid_reason = "params must be an array or an object";
        continue;
      }
      call.params.assign(raw);
    } else if (key == "jsonrpc") {
      od::json_type t;
      if (auto e = v.type().get(t)) return e;
      std::string_view raw;
      if (t != od::json_type::string) {
        if (auto e = raw_of(v, doc, raw)) return e;
        if (call.invalid_reason.empty()) call.invalid_reason = "jsonrpc must be \"2.0\"";
        continue;
      }
      std::string_view version;
      if (auto e = v.get_string().get(version)) return e;
      if (version != "2.0" && call.invalid_reason.empty())
        call.invalid_reason = "jsonrpc must be \"2.0\"";
    } else {
      std::string_view raw;
      if (auto e = raw_of(v, doc, raw)) return e;  // skip, but validate
    }
  }
  if (!has_method && call.invalid_reason.empty()) call.invalid_reason = "missing method";
  if (has_method && call.method.empty() && call.invalid_reason.empty())
    call.invalid_reason = "empty method";
  if (call.params.empty()) call.params = "[]";
  return simdjson::SUCCESS;
}

}  // namespace

namespace {
tl::expected<Body, BodyError> parse_body_in(std::string_view text, std::size_t capacity) {
  auto bad_json = [](std::string_view why) {
    return tl::unexpected(BodyError{kParseError, fmt::format("parse error: {}", why)});
  };
  if (trim(text).empty()) return bad_json("empty body");
  PaddedInput input(text, capacity);
  od::document doc;
  if (auto e = thread_parser().iterate(input.view()).get(doc))
    return bad_json(simdjson::error_message(e));
  od::json_type t;
  if (auto e = doc.type().get(t)) return bad_json(simdjson::error_message(e));
  Body body;
  if (t == od::json_type::array) {
    body.batch = true;
    od::array arr;
    if (auto e = doc.get_array().get(arr)) return bad_json(simdjson::error_message(e));
    for (auto item : arr) {
      od::value v;
      if (auto e = item.get(v)) return bad_json(simdjson::error_message(e));
      od::json_type it;
      if (auto e = v.type().get(it)) return bad_json(simdjson::error_message(e));
      Call call;
      if (it == od::json_type::object) {
        od::object obj;
        if (auto e = v.get_object().get(obj)) return bad_json(simdjson::error_message(e));
        if (auto e = parse_call(obj, doc, call)) return bad_json(simdjson::error_message(e));
      } else {
        std::string_view raw;
        if (auto e = raw_of(v, doc, raw)) return bad_json(simdjson::error_message(e));
        call.invalid_reason = "a batch item must be a request object";
      }
      body.calls.push_back(std::move(call));
    }
    if (body.calls.empty())
      return tl::unexpected(BodyError{kInvalidRequest, "invalid request: empty batch"});
  } else if (t == od::json_type::object) {
    od::object obj;
    if (auto e = doc.get_object().get(obj)) return bad_json(simdjson::error_message(e));
    Call call;
    if (auto e = parse_call(obj, doc, call)) return bad_json(simdjson::error_message(e));
    body.calls.push_back(std::move(call));
  } else {
    // Validate the scalar before calling it a shape error: "01x" is a parse error.
    if (auto e = validate_scalar(doc, t)) return bad_json(simdjson::error_message(e));
    return tl::unexpected(
        BodyError{kInvalidRequest, "invalid request: expected an object or an array"});
  }
  if (!at_end(doc)) return bad_json("trailing content after the JSON value");
  if (!detail::well_formed(text)) return bad_json("misplaced bracket, comma or colon");
  return body;
}
}  // namespace

namespace {

/// The members of an error object we read: code (a number, clamped), message (a string) and data
/// (raw). Anything else, and a code or message of another type, is validated and skipped.
simdjson::error_code parse_error_fields(od::object eo, od::document& doc, RpcError& err) {
  for (auto ef : eo) {
    std::string_view ek;
    if (auto e = ef.unescaped_key().get(ek)) return e;
    od::value ev;
    if (auto e = ef.value().get(ev)) return e;
    std::string_view raw;
    od::json_type t;
    if (auto e = ev.type().get(t)) return e;
    if (ek == "code" && t == od::json_type::number) {
      double d;
      if (auto e = ev.get_double().get(d)) return e;
      // Clamped: a code beyond int64 (1e300) must not be cast as is (undefined behaviour).
      err.code = static_cast<std::int64_t>(std::clamp(d, -9.0e18, 9.0e18));
    } else if (ek == "message" && t == od::json_type::string) {
      std::string_view m;
      if (auto e = ev.get_string().get(m)) return e;
      err.message.assign(m);
    } else {
      if (auto e = raw_of(ev, doc, raw)) return e;
      if (ek == "data") err.data.assign(raw);
    }
  }
  return simdjson::SUCCESS;
}

/// A reply's "error" member. Null is no error (some servers send "error": null next to a result);
/// anything else but an object makes the answer not a response.
simdjson::error_code parse_error_member(od::value v, od::document& doc, Reply& reply,
                                        std::string& why) {
  od::json_type t;
  if (auto e = v.type().get(t)) return e;
  std::string_view raw;
  if (t == od::json_type::null) return raw_of(v, doc, raw);
  if (t != od::json_type::object) {
    if (auto e = raw_of(v, doc, raw)) return e;
    why = "error member is not an object";
    return simdjson::SUCCESS;
  }
  od::object eo;
  if (auto e = v.get_object().get(eo)) return e;
  RpcError err;
  if (auto e = parse_error_fields(eo, doc, err)) return e;
  reply.error = std::move(err);
  return simdjson::SUCCESS;
}

simdjson::error_code parse_reply(od::object obj, od::document& doc, const PaddedInput& input,
                                 Reply& reply, std::string& why) {
  // A member given twice makes the answer ambiguous (which id did it answer?): not a response.
  bool seen_id = false, seen_result = false, seen_error = false;
  auto once = [&](bool& seen, std::string_view key) {
    if (seen && why.empty()) why = fmt::format("{} given twice", key);
    seen = true;
  };
  for (auto field : obj) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return e;
    od::value v;
    if (auto e = field.value().get(v)) return e;
    std::string_view raw;
    if (key == "id")
      once(seen_id, key);
    else if (key == "result")
      once(seen_result, key);
    else if (key == "error")
      once(seen_error, key);
    if (key == "id") {
      if (auto e = raw_of(v, doc, raw)) return e;
      reply.id.assign(raw);
    } else if (key == "result") {
      if (auto e = raw_of(v, doc, raw)) return e;
      reply.result.emplace(input.original(raw));
    } else if (key == "error") {
      if (auto e = parse_error_member(v, doc, reply, why)) return e;
    } else {
      if (auto e = raw_of(v, doc, raw)) return e;
    }
  }
  if (why.empty()) {
    if (reply.result && reply.error)
      why = "both result and error";
    else if (!reply.result && !reply.error)
      why = "neither result nor error";
  }
  return simdjson::SUCCESS;
}

}  // namespace

tl::expected<Response, std::string> parse_response(std::string_view text) {
  return parse_response(text, 0);
}

namespace {
tl::expected<Response, std::string> parse_response_in(std::string_view text, std::size_t capacity);
tl::expected<Body, BodyError> parse_body_in(std::string_view text, std::size_t capacity);
}  // namespace

// The plain path first (plain.cpp): the usual small request or answer in one pass. Anything it
// declines, the full path reads from the start.
tl::expected<Response, std::string> parse_response(std::string_view text, std::size_t capacity) {
  if (auto plain = detail::parse_plain_response(text, capacity)) return std::move(*plain);
  return detail::parse_full_response(text, capacity);
}

tl::expected<Body, BodyError> parse_body(std::string_view text, std::size_t capacity) {
  if (auto plain = detail::parse_plain_body(text, capacity)) return std::move(*plain);
  return detail::parse_full_body(text, capacity);
}

tl::expected<Response, std::string> detail::parse_full_response(std::string_view text,
                                                                std::size_t capacity) {
  auto r = parse_response_in(text, capacity);
  if (text.size() > kKeptParserCapacity) release_large_parser();
  return r;
}

tl::expected<Body, BodyError> detail::parse_full_body(std::string_view text, std::size_t capacity) {
  auto r = parse_body_in(text, capacity);
  if (text.size() > kKeptParserCapacity) release_large_parser();
  return r;
}

namespace {

tl::expected<Response, std::string> parse_response_in(std::string_view text, std::size_t capacity) {
  if (trim(text).empty()) return tl::unexpected(std::string("empty body"));
  PaddedInput input(text, capacity);
  od::document doc;
  auto invalid = [](simdjson::error_code e) {
    return tl::unexpected(fmt::format("invalid JSON: {}", simdjson::error_message(e)));
  };
  if (auto e = thread_parser().iterate(input.view()).get(doc)) return invalid(e);
  od::json_type t;
  if (auto e = doc.type().get(t)) return invalid(e);
  Response resp;
  std::string why;
  if (t == od::json_type::object) {
    od::object obj;
    if (auto e = doc.get_object().get(obj)) return invalid(e);
    Reply r;
    if (auto e = parse_reply(obj, doc, input, r, why)) return invalid(e);
    resp.replies.push_back(std::move(r));
  } else if (t == od::json_type::array) {
    resp.batch = true;
    od::array arr;
    if (auto e = doc.get_array().get(arr)) return invalid(e);
    for (auto item : arr) {
      od::object obj;
      if (auto e = item.get_object().get(obj)) {
        if (e == simdjson::INCORRECT_TYPE)
          return tl::unexpected(std::string("batch answer holds a non-object"));
        return invalid(e);
      }
      Reply r;
      if (auto e = parse_reply(obj, doc, input, r, why)) return invalid(e);
      resp.replies.push_back(std::move(r));
    }
  } else {
    return tl::unexpected(std::string("not a JSON-RPC response"));
  }
  if (!at_end(doc)) return tl::unexpected(std::string("invalid JSON: trailing content"));
  if (!detail::well_formed(text))
    return tl::unexpected(std::string("invalid JSON: misplaced bracket, comma or colon"));
  if (!why.empty()) return tl::unexpected(fmt::format("not a JSON-RPC response: {}", why));
  return resp;
}

}  // namespace

std::optional<std::uint64_t> parse_quantity(std::string_view raw) {
  raw = trim(raw);
  if (raw.size() < 5 || raw.front() != '"' || raw.back() != '"') return std::nullopt;
  auto s = raw.substr(1, raw.size() - 2);
  if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') || s.size() > 18)
    return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), v, 16);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

bool same_id(std::string_view a, std::string_view b) {
  a = trim(a);
  b = trim(b);
  if (a == b) return true;
  if (a.empty() || b.empty() || a.front() == '"' || b.front() == '"') return false;
  // Integers compare as text (JSON has no leading zeros); only fractions and exponents go through
  // double, so that ids above 2^53 stay distinct.
  auto integral = [](std::string_view s) {
    return s.find_first_of(".eE") == std::string_view::npos;
  };
  if (integral(a) && integral(b)) return false;
  double x = 0, y = 0;
  auto [pa, ea] = std::from_chars(a.data(), a.data() + a.size(), x);
  auto [pb, eb] = std::from_chars(b.data(), b.data() + b.size(), y);
  return ea == std::errc() && eb == std::errc() && pa == a.data() + a.size() &&
         pb == b.data() + b.size() && x == y;
}

}  // namespace rpcroute::jsonrpc
