#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace rpcroute::json {

/// Appends `s` as a JSON string literal (quoted, escaped). Invalid UTF-8 passes through as is.
void append_string(std::string& out, std::string_view s);
[[nodiscard]] std::string quote(std::string_view s);

/// Appends a double without locale effects, finite or null.
void append_double(std::string& out, double v, int precision = 3);

/// Minimal streaming writer: commas and nesting are handled, values are appended by the caller.
///   Writer w; w.begin_object(); w.key("a"); w.value(1); w.end_object();
class Writer {
 public:
  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  void key(std::string_view k);
  void value(std::string_view s);
  void value(const char* s) { value(std::string_view(s)); }
  void value(std::int64_t v);
  void value(int v) { value(static_cast<std::int64_t>(v)); }
  void value(std::uint64_t v);
  void value(double v, int precision = 3);
  void value(bool v);
  void null();
  /// Inserts already-serialised JSON.
  void raw(std::string_view json);

  [[nodiscard]] const std::string& str() const { return out_; }
  [[nodiscard]] std::string take() { return std::move(out_); }

 private:
  void separate();
  std::string out_;
  bool need_comma_ = false;
};

}  // namespace rpcroute::json
