#pragma once
// libcurl, loaded when first needed rather than at start: the binary does not link it, so a `call`
// whose providers the native client serves (plain http, HTTPS over HTTP/1.1) never maps libcurl
// and the thirty-odd libraries it pulls in (Kerberos, LDAP, GnuTLS for librtmp, SSH, IDN, …).
// Relocating them was about three quarters of such a call's instructions. The handful of curl
// functions rpcroute uses are bound from libcurl.so.4 on first use; every call site goes through
// the wrappers below (the linker would reject a direct curl_* call, since nothing links libcurl).
#include <curl/curl.h>

#include <string>

namespace rpcroute::curl {

/// The functions rpcroute calls, bound from libcurl.so.4.
struct Api {
  decltype(&::curl_global_init) global_init;
  decltype(&::curl_easy_init) easy_init;
  decltype(&::curl_easy_cleanup) easy_cleanup;
  decltype(&::curl_easy_setopt) easy_setopt;
  decltype(&::curl_easy_getinfo) easy_getinfo;
  decltype(&::curl_easy_perform) easy_perform;
  decltype(&::curl_easy_strerror) easy_strerror;
  decltype(&::curl_multi_init) multi_init;
  decltype(&::curl_multi_cleanup) multi_cleanup;
  decltype(&::curl_multi_setopt) multi_setopt;
  decltype(&::curl_multi_add_handle) multi_add_handle;
  decltype(&::curl_multi_remove_handle) multi_remove_handle;
  decltype(&::curl_multi_socket_action) multi_socket_action;
  decltype(&::curl_multi_info_read) multi_info_read;
  decltype(&::curl_share_init) share_init;
  decltype(&::curl_share_cleanup) share_cleanup;
  decltype(&::curl_share_setopt) share_setopt;
  decltype(&::curl_slist_append) slist_append;
  decltype(&::curl_slist_free_all) slist_free_all;
};

/// Loads libcurl and runs curl_global_init, once per process (thread-safe); false when the library
/// or one of its functions is missing, or the global set-up failed (load_error() says which).
[[nodiscard]] bool available();

/// Why available() is false ("" while it is true).
[[nodiscard]] const std::string& load_error();

/// The bound functions; only after available() returned true.
[[nodiscard]] const Api& api();

inline CURL* easy_init() { return api().easy_init(); }
inline void easy_cleanup(CURL* e) { api().easy_cleanup(e); }
template <class T>
CURLcode easy_setopt(CURL* e, CURLoption option, T value) {
  return api().easy_setopt(e, option, value);
}
template <class T>
CURLcode easy_getinfo(CURL* e, CURLINFO info, T* out) {
  return api().easy_getinfo(e, info, out);
}
inline CURLcode easy_perform(CURL* e) { return api().easy_perform(e); }
inline const char* easy_strerror(CURLcode code) { return api().easy_strerror(code); }
inline CURLM* multi_init() { return api().multi_init(); }
inline CURLMcode multi_cleanup(CURLM* m) { return api().multi_cleanup(m); }
template <class T>
CURLMcode multi_setopt(CURLM* m, CURLMoption option, T value) {
  return api().multi_setopt(m, option, value);
}
inline CURLMcode multi_add_handle(CURLM* m, CURL* e) { return api().multi_add_handle(m, e); }
inline CURLMcode multi_remove_handle(CURLM* m, CURL* e) { return api().multi_remove_handle(m, e); }
inline CURLMcode multi_socket_action(CURLM* m, curl_socket_t fd, int mask, int* running) {
  return api().multi_socket_action(m, fd, mask, running);
}
inline CURLMsg* multi_info_read(CURLM* m, int* left) { return api().multi_info_read(m, left); }
inline CURLSH* share_init() { return api().share_init(); }
inline CURLSHcode share_cleanup(CURLSH* s) { return api().share_cleanup(s); }
template <class T>
CURLSHcode share_setopt(CURLSH* s, CURLSHoption option, T value) {
  return api().share_setopt(s, option, value);
}
inline curl_slist* slist_append(curl_slist* list, const char* line) {
  return api().slist_append(list, line);
}
inline void slist_free_all(curl_slist* list) { api().slist_free_all(list); }

}  // namespace rpcroute::curl
