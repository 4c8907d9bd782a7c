#pragma once
// What the sidecar keeps of a client's request, and the request-body budget all connections share.
// Light on purpose: the handlers read a Request without Beast's parser in sight (reader.hpp).

#include <boost/beast/http/verb.hpp>
#include <cstddef>
#include <cstdint>
#include <ostream>  // Beast 1.74's verb.hpp uses it without including it
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rpcroute::sidecar {

/// The request line, the three fields answers depend on, and the body, in buffers that a
/// connection reuses from one request to the next. A request with an Upgrade field also keeps all
/// its fields (fields()): a WebSocket handshake needs them. The fast path never takes such a
/// request; Beast's reader copies every field into reused slots, because it learns of the Upgrade
/// field only when it comes and a folded value is not left in the input to point at.
struct Request {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string_view method_string;  // static text for a known method, else method_storage
  std::string method_storage;
  std::string target;
  unsigned version = 11;
  bool keep_alive = true;
  std::string host;  // the first of each, as a request_parser's fields would answer
  std::string origin;
  std::string authorization;
  std::string body;
  std::string remote;
  bool expect_continue =
      false;              // Expect: 100-continue (HTTP/1.1): the client waits before the body
  bool upgrade = false;   // an Upgrade field arrived
  bool no_cache = false;  // Cache-Control: no-cache / no-store, or X-Rpcroute-Cache: bypass
  std::string min_block;  // X-Rpcroute-Min-Block, the first (issue 19); empty when absent
  unsigned seen = 0;      // which of host, origin, authorization arrived
  using Field = std::pair<std::string, std::string>;  // name as sent, value
  std::vector<Field>
      field_slots;  // the first field_count hold this request's fields (Beast's reader)
  std::size_t field_count = 0;

  /// Every field in arrival order when the request carries an Upgrade field; else empty.
  [[nodiscard]] std::span<const Field> fields() const {
    return upgrade ? std::span<const Field>(field_slots.data(), field_count)
                   : std::span<const Field>();
  }

  void clear() {
    method = boost::beast::http::verb::unknown;
    method_string = {};
    target.clear();
    version = 11;
    keep_alive = true;
    host.clear();
    origin.clear();
    authorization.clear();
    body.clear();
    expect_continue = false;
    upgrade = false;
    no_cache = false;
    min_block.clear();
    field_count = 0;
    seen = 0;
  }
};

/// The request-body bytes all connections hold, against --max-inflight-mb: a body that would pass
/// the cap is refused (503) before it is read, and a connection gives its bytes back once answered.
struct BodyBudget {
  std::size_t used = 0;
  std::size_t cap = SIZE_MAX;
  /// Adds `n` to the connection's `held` bytes, or answers false when that would pass the cap.
  [[nodiscard]] bool take(std::size_t& held, std::size_t n) {
    if (n > cap - used) return false;
    used += n;
    held += n;
    return true;
  }
  void give_back(std::size_t& held) {
    used -= held;
    held = 0;
  }
};

}  // namespace rpcroute::sidecar
