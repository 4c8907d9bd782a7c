// The JSON-RPC job's use of coalescing and the cache (issue 19): which single calls take part, the
// lookup before routing, what is kept after, and what /status shows of them.
#include <algorithm>
#include <string>

#include "handlers.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/json.hpp"

namespace rpcroute::sidecar {

ChainFinality Handlers::finality(const ProfileRuntime& rt, std::size_t chain_index) const {
  // The head the router believes (the head rule: a claim the others do not confirm, an absurd one
  // or a jump never counts), or the never-backwards mark while the providers still reach it (a
  // breaker that opens on the highest does not move it back). It keys coalescing ("has the head
  // moved"), so it moves with blocks, and caps finalized: a mark above it is not trusted.
  const Chain& chain = rt.profile.chains[chain_index];
  const std::int64_t now = clock_.now_ms();
  ChainFinality f;
  f.head = best_known_height(store_, rt.profile, chain, now, rt.chain_keys[chain_index]);
  if (const ChainState* cs = store_.chain(rt.chain_keys[chain_index])) {
    if (cs->high_water.block > f.head &&
        mark_supported(store_, rt.profile, chain, cs->high_water, now))
      f.head = cs->high_water.block;
    f.finalized = cs->finalized.block;
    f.known = cs->finalized.t_ms > 0;
  }
  return f;
}

bool Handlers::consult_cache(bool no_cache, const RpcTarget& target, RpcJob& job, Reply& reply) {
  const jsonrpc::Call& call = job.parsed.calls.front();
  // The catalogue row is the last one looked up (method_info keeps it per thread): reads without a
  // block, hash or constant to name (eth_blockNumber) leave here at no cost.
  if (!call.valid() || !call.has_id() || !coalescable(call.method)) return false;
  // Asked by the request or by --no-cache: not answered from the cache, nor kept.
  const bool bypass = target.provider.has_value() || no_cache || config_.no_cache;
  if (bypass) job.cache_header = "BYPASS";
  if (target.provider) return false;  // a provider named in the URL: its own answer, never shared
  ProfileRuntime& rt = *job.rt;
  if (!rt.profile.cache.coalesce && rt.cache == nullptr) return false;
  const auto index = static_cast<std::size_t>(job.chain - rt.profile.chains.data());
  const ChainFinality f = finality(rt, index);
  if (!cache_key(job.key, reinterpret_cast<std::uintptr_t>(job.chain), call.method, call.params))
    return false;
  job.shared = rt.profile.cache.coalesce;
  job.finality = f;
  ResponseCache* cache = rt.cache.get();
  if (cache == nullptr) return false;
  // A chain that went backwards (a dev chain restarted under the same URLs) may have rewritten
  // what was final: nothing kept before is trusted.
  // No head known now (every height stale: an idle sidecar without polls) is not a step back.
  if (f.head != 0) {
    if (f.head < rt.last_head[index]) cache->clear();
    rt.last_head[index] = f.head;
  }
  ChainActivity& activity = rt.activity[index];
  if (bypass) {
    cache->on_bypass();
    ++activity.cache_bypasses;
    return false;
  }
  job.rule = cache_rule(call.method);
  if (!request_cacheable(job.rule, call.method, call.params, f)) return false;
  if (const std::string* result = cache->find(job.key)) {
    ++activity.cache_hits;
    finish_hit(job, *result, reply);
    if (config_.dashboard) {
      dashboard_.record_hit(rt.profile.name, job.chain->name, call.method, clock_.now_ms(),
                            static_cast<double>(steady_us() - job.started_us) / 1000.0);
    }
    return true;
  }
  ++activity.cache_misses;
  job.keep = true;
  return false;
}

void Handlers::keep_answer(RpcJob& job, const CallOutcome& out) {
  // Only a provider's success that passed the exchange checks, and only the call that went
  // upstream (a joined call carries the same answer and no attempts).
  if (out.status != CallOutcome::Status::result || out.provider.empty() || out.attempts.empty())
    return;
  const std::string_view id = job.parsed.calls.front().id;
  const std::string_view response = out.response;
  const std::size_t head = jsonrpc::kResultHead.size() + id.size() + jsonrpc::kResultMiddle.size();
  if (response.size() <= head || response.back() != '}' ||
      !response.starts_with(jsonrpc::kResultHead) ||
      response.substr(jsonrpc::kResultHead.size(), id.size()) != id ||
      response.substr(head - jsonrpc::kResultMiddle.size(), jsonrpc::kResultMiddle.size()) !=
          jsonrpc::kResultMiddle)
    return;
  const std::string_view result = response.substr(head, response.size() - head - 1);
  ResponseCache* cache = job.rt->cache.get();
  if (cache != nullptr && result_cacheable(job.rule, result, job.finality))
    cache->insert(job.key, result);
}

CacheStats Handlers::cache_stats() const {
  CacheStats total;
  for (const auto& [name, rt] : profiles_) {
    if (rt->cache) total += rt->cache->stats();
  }
  return total;
}

void Handlers::write_cache_status(json::Writer& w) {
  const CacheStats s = cache_stats();
  w.key("cache");
  w.begin_object();
  w.key("max_bytes");
  w.value(static_cast<std::uint64_t>(s.max_bytes));
  w.key("bytes");
  w.value(static_cast<std::uint64_t>(s.bytes));
  w.key("entries");
  w.value(static_cast<std::uint64_t>(s.entries));
  w.key("hits");
  w.value(s.hits);
  w.key("misses");
  w.value(s.misses);
  w.key("evictions");
  w.value(s.evictions);
  w.key("coalesced_in_flight");
  w.value(static_cast<std::uint64_t>(coalescer_.in_flight()));
  w.key("coalesced_waiting");
  w.value(static_cast<std::uint64_t>(coalescer_.waiting()));
  w.end_object();
  // Each chain's head as the router believes it, and the safe and finalized blocks its providers
  // reported (null: none yet, or no provider answers that tag).
  w.key("finality");
  w.begin_array();
  for (auto& [name, rt] : profiles_) {
    for (std::size_t i = 0; i < rt->profile.chains.size(); ++i) {
      const ChainState* cs = store_.chain(rt->chain_keys[i]);
      w.begin_object();
      w.key("profile");
      w.value(name);
      w.key("chain");
      w.value(rt->profile.chains[i].name);
      auto put = [&](const char* key, const Height* h) {
        w.key(key);
        if (h == nullptr || h->t_ms == 0)
          w.null();
        else
          w.value(static_cast<std::uint64_t>(h->block));
      };
      const ChainFinality f = finality(*rt, i);
      w.key("head");
      if (f.head == 0)
        w.null();
      else
        w.value(static_cast<std::uint64_t>(f.head));
      put("safe", cs ? &cs->safe : nullptr);
      put("finalized", cs ? &cs->finalized : nullptr);
      w.end_object();
    }
  }
  w.end_array();
}

}  // namespace rpcroute::sidecar
