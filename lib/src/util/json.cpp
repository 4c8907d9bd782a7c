#include "rpcroute/json.hpp"

#include <fmt/format.h>

#include <cmath>

namespace rpcroute::json {

void append_string(std::string& out, std::string_view s) {
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  // Runs that need no escape are appended whole.
  std::size_t run = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out.append("\\\"", 2);
        break;
      case '\\':
        out.append("\\\\", 2);
        break;
      case '\n':
        out.append("\\n", 2);
        break;
      case '\r':
        out.append("\\r", 2);
        break;
      case '\t':
        out.append("\\t", 2);
        break;
      case '\b':
        out.append("\\b", 2);
        break;
      case '\f':
        out.append("\\f", 2);
        break;
      default:
        fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
    }
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

std::string quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_string(out, s);
  return out;
}

void append_double(std::string& out, double v, int precision) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), "{:.{}f}", v, precision);
}

void Writer::separate() {
  if (need_comma_) out_.push_back(',');
  need_comma_ = true;
}

void Writer::begin_object() {
  separate();
  out_.push_back('{');
  need_comma_ = false;
}
void Writer::end_object() {
  out_.push_back('}');
  need_comma_ = true;
}
void Writer::begin_array() {
  separate();
  out_.push_back('[');
  need_comma_ = false;
}
void Writer::end_array() {
  out_.push_back(']');
  need_comma_ = true;
}
void Writer::key(std::string_view k) {
  separate();
  append_string(out_, k);
  out_.push_back(':');
  need_comma_ = false;
}
void Writer::value(std::string_view s) {
  separate();
  append_string(out_, s);
}
void Writer::value(std::int64_t v) {
  separate();
  fmt::format_to(std::back_inserter(out_), "{}", v);
}
void Writer::value(std::uint64_t v) {
  separate();
  fmt::format_to(std::back_inserter(out_), "{}", v);
}
void Writer::value(double v, int precision) {
  separate();
  append_double(out_, v, precision);
}
void Writer::value(bool v) {
  separate();
  out_ += v ? "true" : "false";
}
void Writer::null() {
  separate();
  out_ += "null";
}
void Writer::raw(std::string_view json) {
  separate();
  out_ += json;
}

}  // namespace rpcroute::json
