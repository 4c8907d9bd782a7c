#include "curl_pool.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "curl_support.hpp"

namespace rpcroute::detail {

namespace {

bool same_headers(std::span<const Header> a, const std::vector<Header>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](auto& x, auto& y) {
           return x.name == y.name && x.value == y.value;
         });
}

bool same_tls(const TlsOptions* a, const TlsOptions& b) {
  static const TlsOptions none;
  const TlsOptions& x = a != nullptr ? *a : none;
  return x.ca_file == b.ca_file && x.ca_dir == b.ca_dir && x.cert_file == b.cert_file &&
         x.key_file == b.key_file && x.insecure == b.insecure;
}

Slist build_header_list(const std::vector<Header>& extra) {
  curl_slist* list = nullptr;
  auto add = [&list](const char* line) {
    curl_slist* next = curl::slist_append(list, line);
    if (next == nullptr) throw std::bad_alloc();
    list = next;
  };
  try {
    add("Content-Type: application/json");
    add("Accept: application/json");
    add("Accept-Encoding: identity");  // as the native client (DECISIONS.md)
    add("Expect:");                    // no 100-continue round trip on large bodies
    for (const auto& h : extra) add(fmt::format("{}: {}", h.name, h.value).c_str());
  } catch (...) {
    curl::slist_free_all(list);
    throw;
  }
  return Slist(list);
}

}  // namespace

EasyPool::Setup& EasyPool::setup_for(const CurlSetupRef& want) {
  for (auto& s : setups_) {
    if (s->http_version == want.http_version && same_headers(want.headers, s->headers) &&
        same_tls(want.tls, s->tls))
      return *s;
  }
  if (setups_.size() >= kMaxSetups) {
    auto oldest = setups_.end();
    for (auto it = setups_.begin(); it != setups_.end(); ++it) {
      if ((*it)->leased == 0 &&
          (oldest == setups_.end() || (*it)->last_used < (*oldest)->last_used))
        oldest = it;
    }
    if (oldest != setups_.end()) setups_.erase(oldest);
  }
  auto s = std::make_unique<Setup>();
  s->http_version = want.http_version;
  s->headers.assign(want.headers.begin(), want.headers.end());
  if (want.tls != nullptr) s->tls = *want.tls;
  s->header_list = build_header_list(s->headers);
  ++header_lists_built_;
  setups_.push_back(std::move(s));
  return *setups_.back();
}

void EasyPool::configure(CURL* e, const Setup& s) const {
  if (common_) common_(e);
  curl::easy_setopt(e, CURLOPT_HTTPHEADER, s.header_list.get());
  curl::easy_setopt(e, CURLOPT_HTTP_VERSION, s.http_version);
  if (!s.tls.empty()) apply_tls(e, s.tls);
}

EasyPool::Lease EasyPool::acquire(const CurlSetupRef& want) {
  Setup& s = setup_for(want);
  s.last_used = ++clock_;
  Lease lease;
  if (!s.idle.empty()) {
    lease.easy = std::move(s.idle.back());
    s.idle.pop_back();
  } else {
    lease.easy.reset(curl::easy_init());
    if (!lease.easy) return lease;
    ++handles_made_;
    configure(lease.easy.get(), s);
  }
  lease.setup = &s;
  ++s.leased;
  return lease;
}

void EasyPool::release(Lease lease) {
  if (lease.setup == nullptr) return;
  --lease.setup->leased;
  if (lease.easy && lease.setup->idle.size() < kIdlePerSetup)
    lease.setup->idle.push_back(std::move(lease.easy));
}

void EasyPool::clear() {
  std::erase_if(setups_, [](const auto& s) { return s->leased == 0; });
  for (auto& s : setups_) s->idle.clear();
}

}  // namespace rpcroute::detail
