// The plain path of parse_body and parse_response (rpcroute/jsonrpc.hpp, namespace detail): one
// pass over a document that is one JSON-RPC object in the common, simple form. It validates the
// whole document as JSON — every value, skipped members included, since what we forward must be
// JSON — but knows only a subset: strings of printable ASCII without escapes, numbers without
// exponents (at most 40 characters), nesting up to 64 levels. Anything outside that subset, and
// every error, answers nullopt: the full path (simdjson On-Demand plus the grammar check) then
// reads the document from the start and reports exactly as it always has.

#include <algorithm>
#include <cstring>

#include "rpcroute/jsonrpc.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace rpcroute::jsonrpc::detail {
namespace {

constexpr int kMaxDepth = 64;
constexpr std::ptrdiff_t kMaxNumber = 40;

inline bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// The first byte from `p` that ends a plain string run: '"', '\\', a control character (< 0x20)
/// or a non-ASCII byte (whose UTF-8 the full path checks). 16 bytes per step where SSE2 is, so a
/// long hex result costs little more than a memchr.
/// `readable`: how far past `p` bytes may be loaded (at least `end`): with padding behind the
/// text, the last bytes are scanned 16 at a time too and a stop found past `end` means `end`.
inline const char* string_run_end(const char* p, const char* end, const char* readable) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'),
                space = _mm_set1_epi8(0x20);
  const char* const simd_end = readable - end >= 16 ? end : end - 15;  // loads start before it
  while (p < simd_end) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // Signed compare: bytes >= 0x80 are negative, so "< 0x20" catches them with the controls.
    const __m128i stop =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(b, quote), _mm_cmpeq_epi8(b, backslash)),
                     _mm_cmplt_epi8(b, space));
    if (const int mask = _mm_movemask_epi8(stop); mask != 0) {
      return std::min(end, p + __builtin_ctz(static_cast<unsigned>(mask)));
    }
    p += 16;
  }
  if (p >= end) return end;
#else
  (void)readable;
#endif
  while (p < end) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) return p;
    ++p;
  }
  return p;
}

class Scanner {
 public:
  /// `capacity`: the bytes readable from text.data() (0: just the text).
  Scanner(std::string_view text, std::size_t capacity)
      : p_(text.data()),
        end_(text.data() + text.size()),
        readable_(text.data() + std::max(capacity, text.size())) {}

  void ws() {
    // Most tokens follow one another directly: one compare decides that.
    while (p_ < end_ && static_cast<unsigned char>(*p_) <= ' ' && is_ws(*p_)) ++p_;
  }
  [[nodiscard]] bool at_end() const { return p_ == end_; }
  [[nodiscard]] bool peek(char c) const { return p_ < end_ && *p_ == c; }
  [[nodiscard]] const char* pos() const { return p_; }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++p_;
    return true;
  }

  /// A plain string at the cursor (which must be at its quote); `contents` without the quotes.
  bool string(std::string_view& contents) {
    if (!eat('"')) return false;
    const char* start = p_;
    p_ = string_run_end(p_, end_, readable_);
    if (p_ == end_ || *p_ != '"') return false;
    contents = std::string_view(start, static_cast<std::size_t>(p_ - start));
    ++p_;
    return true;
  }

  /// Any value, validated through its end.
  bool value(int depth) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '"': {
        std::string_view s;
        return string(s);
      }
      case '{': {
        if (depth >= kMaxDepth) return false;
        ++p_;
        ws();
        if (eat('}')) return true;
        for (;;) {
          std::string_view key;
          if (!string(key)) return false;
          ws();
          if (!eat(':')) return false;
          ws();
          if (!value(depth + 1)) return false;
          ws();
          if (eat('}')) return true;
          if (!eat(',')) return false;
          ws();
        }
      }
      case '[': {
        if (depth >= kMaxDepth) return false;
        ++p_;
        ws();
        if (eat(']')) return true;
        for (;;) {
          if (!value(depth + 1)) return false;
          ws();
          if (eat(']')) return true;
          if (!eat(',')) return false;
          ws();
        }
      }
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return number();
    }
  }

 private:
  /// What may follow a scalar: whitespace, a delimiter, or the end of the text.
  [[nodiscard]] bool delimited() const {
    if (p_ == end_) return true;
    const char c = *p_;
    return is_ws(c) || c == ',' || c == ']' || c == '}';
  }
  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0)
      return false;
    p_ += word.size();
    return delimited();
  }
  /// -?(0|[1-9][0-9]*)(\.[0-9]+)? — exponents, and numbers long enough to approach a double's
  /// range, are the full path's to judge.
  bool number() {
    const char* start = p_;
    eat('-');
    if (p_ == end_) return false;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      while (p_ < end_ && is_digit(*p_)) ++p_;
    } else {
      return false;
    }
    if (eat('.')) {
      const char* fraction = p_;
      while (p_ < end_ && is_digit(*p_)) ++p_;
      if (p_ == fraction) return false;
    }
    return p_ - start <= kMaxNumber && delimited();
  }

  const char* p_;
  const char* end_;
  const char* readable_;
};

/// Walks the members of the one top-level object: `on_member(key, raw value)` for each, false to
/// decline. Nothing but whitespace may surround the object.
template <class OnMember>
bool walk_object(std::string_view text, std::size_t capacity, OnMember&& on_member) {
  Scanner s(text, capacity);
  s.ws();
  if (!s.eat('{')) return false;
  s.ws();
  if (!s.eat('}')) {
    for (;;) {
      std::string_view key;
      if (!s.string(key)) return false;
      s.ws();
      if (!s.eat(':')) return false;
      s.ws();
      const char* start = s.pos();
      if (!s.value(1)) return false;
      if (!on_member(key, std::string_view(start, static_cast<std::size_t>(s.pos() - start))))
        return false;
      s.ws();
      if (s.eat('}')) break;
      if (!s.eat(',')) return false;
      s.ws();
    }
  }
  s.ws();
  return s.at_end();
}

}  // namespace

/// `key` is the member name `name` (a literal): sizes first, then a fixed-size compare.
template <std::size_t N>
inline bool is_key(std::string_view key, const char (&name)[N]) {
  return key.size() == N - 1 && std::memcmp(key.data(), name, N - 1) == 0;
}

std::optional<Body> parse_plain_body(std::string_view text, std::size_t capacity) {
  Call call;
  bool has_id = false, has_method = false, has_params = false, has_version = false;
  const bool ok = walk_object(text, capacity, [&](std::string_view key, std::string_view raw) {
    const char first = raw.front();
    if (is_key(key, "method")) {
      // A string (plain, so its contents are the method), not empty, given once.
      if (has_method || first != '"' || raw.size() < 3) return false;
      has_method = true;
      call.method.assign(raw.data() + 1, raw.size() - 2);
    } else if (is_key(key, "params")) {
      if (has_params || (first != '[' && first != '{')) return false;
      has_params = true;
      call.params.assign(raw.data(), raw.size());
    } else if (is_key(key, "id")) {
      if (has_id || first == '{' || first == '[' || first == 't' || first == 'f') return false;
      has_id = true;
      call.id.assign(raw.data(), raw.size());
    } else if (is_key(key, "jsonrpc")) {
      if (has_version || !is_key(raw, "\"2.0\"")) return false;
      has_version = true;
    }
    return true;
  });
  if (!ok || !has_method) return std::nullopt;
  if (!has_params) call.params = "[]";
  Body body;
  body.calls.push_back(std::move(call));
  return body;
}

std::optional<Response> parse_plain_response(std::string_view text, std::size_t capacity) {
  Reply reply;
  bool has_id = false, has_result = false, has_error = false;
  const bool ok = walk_object(text, capacity, [&](std::string_view key, std::string_view raw) {
    if (is_key(key, "result")) {
      if (has_result) return false;
      has_result = true;
      reply.result.emplace(raw);
    } else if (is_key(key, "id")) {
      if (has_id) return false;
      has_id = true;
      reply.id.assign(raw.data(), raw.size());
    } else if (is_key(key, "error")) {
      // "error": null next to a result is ignored, as the full path does; an error object is
      // the full path's to read.
      if (has_error || !is_key(raw, "null")) return false;
      has_error = true;
    }
    return true;
  });
  if (!ok || !has_result) return std::nullopt;
  Response response;
  response.replies.push_back(std::move(reply));
  return response;
}

}  // namespace rpcroute::jsonrpc::detail
