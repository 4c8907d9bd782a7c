#pragma once
// What /metrics and the dashboard both key their counters by: label tuples ordered by their text,
// and a call's status by name.
#include <string_view>
#include <tuple>

#include "rpcroute/executor.hpp"

namespace rpcroute::sidecar {

/// Orders label tuples by their text. Keys are tuples of strings; lookups pass tuples of
/// string_views, so a string is made only for a new key. (Both sides are compared as views:
/// mixed string / string_view tuple comparisons do not compile with every standard library.)
struct LabelLess {
  using is_transparent = void;
  template <class... T>
  static auto views(const std::tuple<T...>& t) {
    return std::apply([](const auto&... x) { return std::make_tuple(std::string_view(x)...); }, t);
  }
  template <class L, class R>
  bool operator()(const L& l, const R& r) const {
    return views(l) < views(r);
  }
};

/// A call's status as /metrics and the dashboard name it ("result", "rpc_error", …).
[[nodiscard]] std::string_view status_name(CallOutcome::Status s);

}  // namespace rpcroute::sidecar
