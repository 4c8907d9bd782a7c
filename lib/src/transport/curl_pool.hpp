#pragma once
// Configured curl easy handles, kept per upstream set-up (issue 17). A handle is set up once —
// callbacks, the header list, the HTTP version, the TLS options — and then only what changes per
// request is set on it (URL, body, timeouts, the transfer's pointers): no curl_easy_reset and ~30
// setopts per request, no header list built per request.
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rpcroute/config.hpp"
#include "rpcroute/transport/curl_api.hpp"

namespace rpcroute::detail {

struct EasyDeleter {
  void operator()(CURL* e) const { curl::easy_cleanup(e); }
};
using EasyHandle = std::unique_ptr<CURL, EasyDeleter>;

struct SlistDeleter {
  void operator()(curl_slist* l) const { curl::slist_free_all(l); }
};
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

/// What a request asks of its handle's set-up (borrowed from the request: no copy per request).
struct CurlSetupRef {
  long http_version = CURL_HTTP_VERSION_2TLS;
  std::span<const Header> headers;  // the provider's extra headers
  const TlsOptions* tls = nullptr;  // the provider's tls: settings (none: defaults)
};

/// Handles for every set-up seen, each configured once. All on the io_context's thread.
class EasyPool {
 public:
  /// One set-up and the handles configured for it; stays alive while one of them is leased.
  struct Setup {
    long http_version = CURL_HTTP_VERSION_2TLS;
    std::vector<Header> headers;
    TlsOptions tls;
    Slist header_list;  // the fixed headers and the provider's, built once
    std::vector<EasyHandle> idle;
    std::size_t leased = 0;
    std::uint64_t last_used = 0;
  };

  struct Lease {
    EasyHandle easy;  // null when curl_easy_init failed
    Setup* setup = nullptr;
  };

  /// `common` gives a new handle what every handle has (callbacks, their data, the share handle).
  explicit EasyPool(std::function<void(CURL*)> common) : common_(std::move(common)) {}
  EasyPool(const EasyPool&) = delete;
  EasyPool& operator=(const EasyPool&) = delete;

  [[nodiscard]] Lease acquire(const CurlSetupRef& want);
  /// The handle goes back to its set-up's idle list (at most kIdlePerSetup), or is freed.
  void release(Lease lease);
  /// Frees every idle handle and every set-up no lease holds.
  void clear();

  [[nodiscard]] std::size_t setups() const { return setups_.size(); }
  [[nodiscard]] std::size_t handles_made() const { return handles_made_; }
  [[nodiscard]] std::size_t header_lists_built() const { return header_lists_built_; }

  static constexpr std::size_t kIdlePerSetup = 64;
  /// Set-ups kept; beyond it the least recently used one that no lease holds is dropped (a profile
  /// reloaded many times must not grow the pool).
  static constexpr std::size_t kMaxSetups = 64;

 private:
  Setup& setup_for(const CurlSetupRef& want);
  void configure(CURL* e, const Setup& s) const;

  std::function<void(CURL*)> common_;
  std::vector<std::unique_ptr<Setup>> setups_;
  std::uint64_t clock_ = 0;
  std::size_t handles_made_ = 0;
  std::size_t header_lists_built_ = 0;
};

}  // namespace rpcroute::detail
