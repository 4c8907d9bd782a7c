// Fuzzes the client request parser (single calls and batches): jsonrpc::parse_body.
//
// Invariants checked besides "no crash, no exception":
// - whatever parse_body accepts is valid JSON to an independent parser (simdjson DOM): the router
//   forwards params and ids byte for byte, so accepting malformed JSON would pass it upstream;
// - a batch has exactly as many calls as the array has items, a single call exactly one;
// - a valid call rebuilt with make_call() parses back to the same id, method and params;
// - whatever the plain path accepts, the full path reads the same way (jsonrpc::detail).
#include <cstdint>
#include <string>

#include <simdjson.h>

#include "check.hpp"
#include "rpcroute/jsonrpc.hpp"

namespace {

using rpcroute::jsonrpc::Call;

bool starts_container(std::string_view raw) { return !raw.empty() && (raw.front() == '[' || raw.front() == '{'); }

void check_round_trip(const Call& call) {
  auto again = rpcroute::jsonrpc::parse_body(rpcroute::jsonrpc::make_call(call.id, call.method, call.params));
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(!again->batch && again->calls.size() == 1);
  const Call& c = again->calls.front();
  FUZZ_CHECK(c.valid());
  FUZZ_CHECK(c.method == call.method);
  FUZZ_CHECK(c.params == call.params);
  // make_call writes null for a notification's missing id.
  FUZZ_CHECK(c.id == (call.id.empty() ? std::string("null") : call.id));
}

/// A run of 20 digits: an integer that may not fit 64 bits.
bool has_big_integer(std::string_view text) {
  std::size_t run = 0;
  for (char c : text) {
    run = (c >= '0' && c <= '9') ? run + 1 : 0;
    if (run >= 20) return true;
  }
  return false;
}

void check_against_dom(std::string_view text, const rpcroute::jsonrpc::Body& body) {
  simdjson::dom::parser dom;
  simdjson::dom::element root;
  auto e = dom.parse(text.data(), text.size(), true).get(root);
  // The DOM parser refuses integers beyond 64 bits, which are valid JSON (an id may be one).
  if (e == simdjson::NUMBER_ERROR && has_big_integer(text)) return;
  FUZZ_CHECK(e == simdjson::SUCCESS);
  if (body.batch) {
    simdjson::dom::array items;
    FUZZ_CHECK(root.get_array().get(items) == simdjson::SUCCESS);
    FUZZ_CHECK(items.size() == body.calls.size());
    FUZZ_CHECK(!body.calls.empty());
  } else {
    FUZZ_CHECK(root.is_object());
    FUZZ_CHECK(body.calls.size() == 1);
  }
}

void check_plain_against_full(std::string_view text) {
  namespace detail = rpcroute::jsonrpc::detail;
  auto plain = detail::parse_plain_body(text);
  if (!plain) return;
  auto full = detail::parse_full_body(text);
  FUZZ_CHECK(full.has_value());
  FUZZ_CHECK(plain->batch == full->batch && plain->calls.size() == full->calls.size());
  for (std::size_t i = 0; i < plain->calls.size(); ++i) {
    const Call& a = plain->calls[i];
    const Call& b = full->calls[i];
    FUZZ_CHECK(a.id == b.id && a.method == b.method && a.params == b.params && a.invalid_reason == b.invalid_reason);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto text = rpcroute::fuzz::as_text(data, size);
  check_plain_against_full(text);
  auto body = rpcroute::jsonrpc::parse_body(text);
  if (!body) {
    const auto& e = body.error();
    FUZZ_CHECK(e.code == rpcroute::jsonrpc::kParseError || e.code == rpcroute::jsonrpc::kInvalidRequest);
    FUZZ_CHECK(!e.message.empty());
    return 0;
  }

  check_against_dom(text, *body);

  for (const auto& call : body->calls) {
    if (!call.valid()) {
      FUZZ_CHECK(!call.invalid_reason.empty());
      continue;
    }
    FUZZ_CHECK(!call.method.empty());
    FUZZ_CHECK(starts_container(call.params));
    FUZZ_CHECK(call.reply_id() == (call.has_id() ? std::string_view(call.id) : std::string_view("null")));
    check_round_trip(call);
  }
  return 0;
}
