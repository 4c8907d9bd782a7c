#include "reply.hpp"

#include "rpcroute/json.hpp"

namespace rpcroute::sidecar {

std::string json_error_body(std::string_view message, std::string_view extra_key,
                            std::string_view extra_raw) {
  json::Writer w;
  w.begin_object();
  w.key("error");
  w.value(message);
  if (!extra_key.empty()) {
    w.key(extra_key);
    w.raw(extra_raw);
  }
  w.end_object();
  return w.take();
}

}  // namespace rpcroute::sidecar
