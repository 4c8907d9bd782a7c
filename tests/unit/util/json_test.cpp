#include "rpcroute/json.hpp"

#include <simdjson.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_json_test {

using namespace rpcroute;

TEST_CASE("json::quote escapes what JSON requires and round-trips", "[json]") {
  CHECK(json::quote("plain") == R"("plain")");
  CHECK(json::quote("a\"b\\c") == R"("a\"b\\c")");
  CHECK(json::quote("\n\r\t\b\f") == R"("\n\r\t\b\f")");
  CHECK(json::quote(std::string("\x01\x1f", 2)) == R"("\u0001\u001f")");
  CHECK(json::quote(std::string("nul\0x", 5)) == R"("nul\u0000x")");
  CHECK(json::quote("h\xc3\xa9llo") == "\"h\xc3\xa9llo\"");  // UTF-8 passes through

  const std::string every_control = [] {
    std::string s;
    for (int c = 0; c < 0x20; ++c) s.push_back(static_cast<char>(c));
    return s + "\"\\/\x7f end";
  }();
  simdjson::dom::parser parser;
  std::string_view back;
  auto quoted = json::quote(every_control);
  REQUIRE(parser.parse(quoted).get_string().get(back) == simdjson::SUCCESS);
  CHECK(back == every_control);
}

TEST_CASE("json::Writer places commas and nests", "[json]") {
  json::Writer w;
  w.begin_object();
  w.key("a");
  w.value(1);
  w.key("b");
  w.begin_array();
  w.value("x");
  w.value(true);
  w.null();
  w.begin_object();
  w.end_object();
  w.raw(R"({"r":[1]})");
  w.end_array();
  w.key("c");
  w.value(std::numeric_limits<std::uint64_t>::max());
  w.key("d");
  w.value(std::int64_t{-5});
  w.key("e");
  w.value(1.23456, 2);
  w.key("f");
  w.value(std::nan(""));
  w.end_object();
  CHECK(
      w.str() ==
      R"({"a":1,"b":["x",true,null,{},{"r":[1]}],"c":18446744073709551615,"d":-5,"e":1.23,"f":null})");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  CHECK(parser.parse(w.str()).get(doc) == simdjson::SUCCESS);
  auto taken = w.take();
  CHECK(taken.front() == '{');
}

TEST_CASE("json::append_double is locale-free and finite or null", "[json]") {
  std::string out;
  json::append_double(out, 0.5);
  CHECK(out == "0.500");
  out.clear();
  json::append_double(out, std::numeric_limits<double>::infinity(), 1);
  CHECK(out == "null");
  out.clear();
  json::append_double(out, -2.0, 0);
  CHECK(out == "-2");
}

}  // namespace unit_json_test
