#include "rpcroute/transport/curl_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

namespace rpcroute::curl {

namespace {

// The soname of libcurl's ABI 4, which every libcurl since 7.16 keeps.
constexpr const char* kSoname = "libcurl.so.4";

struct Loaded {
  Api api{};
  std::string error;
};

template <class F>
bool bind(void* lib, const char* name, F& fn, std::string& error) {
  fn =
      reinterpret_cast<F>(dlsym(lib, name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  if (fn == nullptr && error.empty()) error = fmt::format("{} has no {}", kSoname, name);
  return fn != nullptr;
}

Loaded load() {
  Loaded l;
  // RTLD_LOCAL: curl's dependencies stay out of the global symbol scope. Never closed.
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    l.error = fmt::format("cannot load {} (install libcurl4): {}", kSoname,
                          why != nullptr ? why : "unknown error");
    return l;
  }
  Api& a = l.api;
  std::string& e = l.error;
  bind(lib, "curl_global_init", a.global_init, e);
  bind(lib, "curl_easy_init", a.easy_init, e);
  bind(lib, "curl_easy_cleanup", a.easy_cleanup, e);
  bind(lib, "curl_easy_setopt", a.easy_setopt, e);
  bind(lib, "curl_easy_getinfo", a.easy_getinfo, e);
  bind(lib, "curl_easy_perform", a.easy_perform, e);
  bind(lib, "curl_easy_strerror", a.easy_strerror, e);
  bind(lib, "curl_multi_init", a.multi_init, e);
  bind(lib, "curl_multi_cleanup", a.multi_cleanup, e);
  bind(lib, "curl_multi_setopt", a.multi_setopt, e);
  bind(lib, "curl_multi_add_handle", a.multi_add_handle, e);
  bind(lib, "curl_multi_remove_handle", a.multi_remove_handle, e);
  bind(lib, "curl_multi_socket_action", a.multi_socket_action, e);
  bind(lib, "curl_multi_info_read", a.multi_info_read, e);
  bind(lib, "curl_share_init", a.share_init, e);
  bind(lib, "curl_share_cleanup", a.share_cleanup, e);
  bind(lib, "curl_share_setopt", a.share_setopt, e);
  bind(lib, "curl_slist_append", a.slist_append, e);
  bind(lib, "curl_slist_free_all", a.slist_free_all, e);
  if (e.empty() && a.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    e = fmt::format("{}: curl_global_init failed", kSoname);
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

bool available() { return loaded().error.empty(); }

const std::string& load_error() { return loaded().error; }

const Api& api() { return loaded().api; }

}  // namespace rpcroute::curl
