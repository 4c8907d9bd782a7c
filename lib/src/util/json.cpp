#include "rpcroute/json.hpp"

#include <cmath>

#include <fmt/format.h>

namespace rpcroute::json {

void append_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
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
