#include "grammar.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

namespace rpcroute::jsonrpc::detail {

namespace {

/// Byte classes for well_formed: 0 a byte inside a scalar, 1 whitespace, 2 a delimiter.
constexpr std::array<std::uint8_t, 256> kByteClass = [] {
  std::array<std::uint8_t, 256> t{};
  for (unsigned char c : {' ', '\n', '\r', '\t'}) t[c] = 1;
  for (unsigned char c : {',', ':', '[', ']', '{', '}', '"'}) t[c] = 2;
  return t;
}();

/// The quote that closes a string whose contents start at `p`, or nullptr. Short strings (keys,
/// quantities) are scanned in line; the rest of a long one (most of a large answer) with memchr,
/// a quote being the closing one when an even run of backslashes precedes it.
const char* closing_quote(const char* p, const char* end) {
  const char* const start = p;
  for (const char* stop = std::min(end, p + 32); p < stop; ++p) {
    if (*p == '\\') {
      ++p;  // the escaped byte
    } else if (*p == '"') {
      return p;
    }
  }
  while (p < end) {
    const auto* q =
        static_cast<const char*>(std::memchr(p, '"', static_cast<std::size_t>(end - p)));
    if (q == nullptr) return nullptr;
    const char* b = q;
    while (b > start && b[-1] == '\\') --b;
    if (((q - b) & 1) == 0) return q;
    p = q + 1;
  }
  return nullptr;
}

}  // namespace

bool well_formed(std::string_view text) {
  enum class Expect { value, value_or_close, key, key_or_close, colon, comma_or_close };
  std::string open;  // the open brackets; no allocation up to 15 levels
  Expect expect = Expect::value;
  bool done = false;
  std::size_t i = 0;
  const std::size_t n = text.size();
  const char* data = text.data();
  auto after_value = [&] {
    if (open.empty()) done = true;
    expect = Expect::comma_or_close;
  };
  while (i < n) {
    const char c = data[i];
    const auto cls = kByteClass[static_cast<unsigned char>(c)];
    if (cls == 1) {
      ++i;
      continue;
    }
    if (done) return false;
    bool value_expected = expect == Expect::value || expect == Expect::value_or_close;
    switch (c) {
      case '"': {
        const char* close = closing_quote(data + i + 1, data + n);
        if (close == nullptr) return false;
        i = static_cast<std::size_t>(close - data) + 1;
        if (expect == Expect::key || expect == Expect::key_or_close) {
          expect = Expect::colon;
        } else if (value_expected) {
          after_value();
        } else {
          return false;
        }
        continue;
      }
      case '[':
      case '{':
        if (!value_expected) return false;
        open.push_back(c);
        expect = c == '[' ? Expect::value_or_close : Expect::key_or_close;
        break;
      case ']':
      case '}': {
        bool empty = c == ']' ? expect == Expect::value_or_close : expect == Expect::key_or_close;
        if (open.empty() || open.back() != (c == ']' ? '[' : '{') ||
            !(empty || expect == Expect::comma_or_close)) {
          return false;
        }
        open.pop_back();
        after_value();
        break;
      }
      case ':':
        if (expect != Expect::colon) return false;
        expect = Expect::value;
        break;
      case ',':
        if (expect != Expect::comma_or_close || open.empty()) return false;
        expect = open.back() == '[' ? Expect::value : Expect::key;
        break;
      default:
        if (!value_expected) return false;
        while (i < n && kByteClass[static_cast<unsigned char>(data[i])] == 0) ++i;
        after_value();
        continue;
    }
    ++i;
  }
  return done;
}

}  // namespace rpcroute::jsonrpc::detail
