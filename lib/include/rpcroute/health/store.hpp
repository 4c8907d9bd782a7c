#pragma once
#include <string_view>

#include "rpcroute/config.hpp"
#include "rpcroute/health/model.hpp"

namespace rpcroute {

/// What routing reads of the health model: provider, chain and filter state by key (provider_key(),
/// chain_key(), filter_key()). Null when nothing is known yet. Pointers stay valid until the next
/// event is recorded.
class HealthView {
 public:
  virtual ~HealthView() = default;
  [[nodiscard]] virtual const ProviderState* provider(std::string_view key) const = 0;
  [[nodiscard]] virtual const ChainState* chain(std::string_view key) const = 0;
  [[nodiscard]] virtual const FilterPin* filter(std::string_view key) const = 0;
};

/// Where routing reports what it learns: events (model.hpp), applied at once to what the view shows
/// and kept until the store shares them (the state file's save, later Redis).
class HealthSink {
 public:
  virtual ~HealthSink() = default;
  virtual void record(Event event, const HealthConfig& health) = 0;
};

/// A view and a sink over the same health model: StateStore (one state file) implements it.
class HealthStore : public HealthView, public HealthSink {};

/// HealthView over a State held by the caller (tests, what-if planning).
class StateView final : public HealthView {
 public:
  explicit StateView(const State& state) : state_(state) {}
  [[nodiscard]] const ProviderState* provider(std::string_view key) const override {
    return find(state_.providers, key);
  }
  [[nodiscard]] const ChainState* chain(std::string_view key) const override {
    return find(state_.chains, key);
  }
  [[nodiscard]] const FilterPin* filter(std::string_view key) const override {
    return find(state_.filters, key);
  }

  template <class Map>
  [[nodiscard]] static const typename Map::mapped_type* find(const Map& map, std::string_view key) {
    auto it = map.find(key);
    return it == map.end() ? nullptr : &it->second;
  }

 private:
  const State& state_;
};

}  // namespace rpcroute
