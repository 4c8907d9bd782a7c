#include "rpcroute/sticky.hpp"

#include <simdjson.h>

#include <algorithm>
#include <vector>

#include "rpcroute/methods.hpp"
#include "rpcroute/transaction.hpp"

namespace rpcroute {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool is_hex_of(std::string_view s, std::size_t digits) {
  if (s.size() != digits + 2 || !(s.starts_with("0x") || s.starts_with("0X"))) return false;
  return std::all_of(s.begin() + 2, s.end(), [](unsigned char c) { return std::isxdigit(c); });
}

std::string join(std::string_view chain, std::string_view value) {
  std::string out;
  out.reserve(chain.size() + 1 + value.size());
  out.append(chain);
  out.push_back('/');
  out.append(value);
  return out;
}

}  // namespace

StickyKey sticky_key(std::string_view method, std::string_view params) {
  const StickySource source = method_info(method).sticky;
  if (source == StickySource::none) return {};
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::array arr;
  if (parser.parse(params.data(), params.size(), true).get(root) || root.get_array().get(arr) ||
      arr.size() == 0) {
    return {};
  }
  simdjson::dom::element first = arr.at(0);
  std::string_view s;
  switch (source) {
    case StickySource::address_param:
      if (first.get_string().get(s) || !is_hex_of(s, 40)) return {};
      return {StickyKey::Kind::sender, lower(s)};
    case StickySource::from_field:
      if (first.at_key("from").get_string().get(s) || !is_hex_of(s, 40)) return {};
      return {StickyKey::Kind::sender, lower(s)};
    case StickySource::raw_transaction:
      if (first.get_string().get(s)) return {};
      if (auto sender = transaction_sender(s)) return {StickyKey::Kind::sender, std::move(*sender)};
      return {};
    case StickySource::hash_param:
      if (first.get_string().get(s) || !is_hex_of(s, 64)) return {};
      return {StickyKey::Kind::transaction, lower(s)};
    case StickySource::none:
      break;
  }
  return {};
}

std::optional<std::string_view> StickyProviders::find(std::string_view chain, const StickyKey& key,
                                                      std::int64_t now_ms) const {
  if (key.empty() || entries_.empty()) return std::nullopt;
  auto it = entries_.find(join(chain, key.value));
  if (it == entries_.end() || now_ms - it->second.t_ms > window_ms_) return std::nullopt;
  return it->second.provider;
}

void StickyProviders::stick(std::string_view chain, const StickyKey& key,
                            std::string_view provider_id, std::int64_t now_ms) {
  if (key.empty()) return;
  auto k = join(chain, key.value);
  if (auto it = entries_.find(k); it != entries_.end()) {
    it->second = Entry{std::string(provider_id), now_ms};
    return;
  }
  if (entries_.size() >= capacity_) make_room(now_ms);
  entries_.emplace(std::move(k), Entry{std::string(provider_id), now_ms});
}

void StickyProviders::make_room(std::int64_t now_ms) {
  std::erase_if(entries_, [&](const auto& e) { return now_ms - e.second.t_ms > window_ms_; });
  if (entries_.size() < capacity_) return;
  // Full of live entries: drop the older half at once, so that a flood costs one pass per many
  // inserts.
  std::vector<std::int64_t> times;
  times.reserve(entries_.size());
  for (const auto& [k, e] : entries_) times.push_back(e.t_ms);
  auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
  std::nth_element(times.begin(), mid, times.end());
  const auto cutoff = *mid;
  std::erase_if(entries_, [&](const auto& e) { return e.second.t_ms <= cutoff; });
}

}  // namespace rpcroute
