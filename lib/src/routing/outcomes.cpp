// How a call ends (the 503 details, error answers) and what a success teaches.
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>

#include "executor_parts.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/methods.hpp"
#include "rpcroute/plan_report.hpp"

namespace rpcroute {

namespace {

std::optional<std::string> json_string_value(std::string_view raw) {
  if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return std::nullopt;
  return std::string(raw.substr(1, raw.size() - 2));
}

/// The "number" of a block object (the answer to eth_getBlockByNumber("latest")).
std::optional<std::uint64_t> block_number_of(std::string_view block_json) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(block_json.data(), block_json.size(), true).get(root)) return std::nullopt;
  simdjson::dom::element number;
  if (root.at_key("number").get(number)) return std::nullopt;
  std::string_view s;
  if (number.get_string().get(s)) return std::nullopt;
  return jsonrpc::parse_quantity(fmt::format("\"{}\"", s));
}

/// When the client may try again: the soonest exclusion that ends, else the soonest Retry-After.
std::int64_t retry_after(const CallOutcome& out) {
  std::int64_t retry = -1;
  for (const auto& e : out.excluded) {
    if (e.retry_in_ms > 0) retry = retry < 0 ? e.retry_in_ms : std::min(retry, e.retry_in_ms);
  }
  if (retry >= 0) return retry;
  for (const auto& a : out.attempts) {
    if (a.result.cls == OutcomeClass::rate_limited && a.result.retry_after_ms >= 0) {
      retry = retry < 0 ? a.result.retry_after_ms : std::min(retry, a.result.retry_after_ms);
    }
  }
  return retry;
}

}  // namespace

std::string error_response(const jsonrpc::Call& call, const std::string& error_object) {
  if (!call.has_id()) return {};
  return fmt::format(R"({{"jsonrpc":"2.0","id":{},"error":{}}})", call.id, error_object);
}

Classification Executor::scrubbed(const Classification& c) const {
  // A provider may echo the URL (and its key) in an error message: our report never repeats it.
  Classification out = c;
  if (!profile_.secrets.empty() || !profile_.url_paths.empty())
    out.message = profile_.scrub(std::move(out.message));
  return out;
}

void Executor::finish_unavailable(Item& item, const Chain& chain, std::string_view why) {
  // A null held from a provider behind (not_yet.cpp) is an answer: nobody at the height did better.
  if (deliver_held_null(item)) return;
  auto& out = item.out;
  item.done = true;
  out.status = CallOutcome::Status::unavailable;
  out.unavailable_reason = why;
  out.retry_after_ms = retry_after(out);
  json::Writer data;
  data.begin_object();
  data.key("attempts");
  data.begin_array();
  for (const auto& a : out.attempts) write_attempt_json(data, a);
  data.end_array();
  data.key("excluded");
  data.begin_array();
  for (const auto& e : out.excluded) write_exclusion_json(data, e, RetryField::omit);
  data.end_array();
  if (out.retry_after_ms >= 0) {
    data.key("retry_after_ms");
    data.value(out.retry_after_ms);
  }
  data.end_object();
  auto message =
      fmt::format("no provider could serve {} on {}: {}", item.call->method, chain.name, why);
  out.error = jsonrpc::error_object(jsonrpc::kNoProvider, message, data.str());
  out.response = item.call->has_id()
                     ? jsonrpc::make_error(item.call->id, jsonrpc::kNoProvider, message, data.str())
                     : std::string();
}

void Executor::on_success(const Chain& chain, const Candidate& cand, Item& item, std::int64_t now,
                          std::string_view result) {
  const auto& call = *item.call;
  const auto& info = method_info(call.method);
  learn_height(chain, cand, item, now, result);
  if (info.filter == FilterRole::creates) {
    if (auto id = json_string_value(result)) {
      store_.record(
          FilterEvent{filter_key(profile_.name, chain, *id), FilterPin{cand.provider->id, now}},
          profile_.health);
    }
  }
  if (item.plan.needs_archive && !cand.provider->archival) {
    store_.record(ArchivalEvent{std::string(cand.key), ArchivalSeen{true, now}}, profile_.health);
  }
  if (!item.plan.sticky.empty()) {
    traffic_.sticky.stick(chain.name, item.plan.sticky, cand.provider->id, now);
    if (info.replay_unsafe) {
      if (auto hash = json_string_value(result)) {
        traffic_.sticky.stick(chain.name, StickyKey{StickyKey::Kind::transaction, *hash},
                              cand.provider->id, now);
      }
    }
  }
}

void Executor::learn_height(const Chain& chain, const Candidate& cand, Item& item, std::int64_t now,
                            std::string_view result) {
  const auto& call = *item.call;
  auto& out = item.out;
  const std::string& ckey = planner_.chain_key_for(chain);
  if (call.method == "eth_blockNumber") {
    auto h = jsonrpc::parse_quantity(result);
    if (!h) return;
    observe_height(store_, profile_, chain, *cand.provider, Height{*h, now}, rng_.uniform(),
                   cand.key);
    // Never backwards: an answer below the high-water mark is raised to it while the mark is
    // fresh and the providers still reach it. A mark nobody has confirmed for a whole horizon, or
    // that the providers' head no longer supports (a restarted or reset chain: every provider
    // went back; a lone liar's height), is gone and the lower answer resets it at once.
    const ChainState* cs = store_.chain(ckey);
    const bool has_mark = cs != nullptr && cs->high_water.t_ms > 0;
    if (has_mark && *h < cs->high_water.block && height_fresh(cs->high_water, now, chain) &&
        mark_supported(store_, profile_, chain, cs->high_water, now)) {
      out.raised_from = *h;
      out.result = jsonrpc::to_quantity(cs->high_water.block);
    } else {
      store_.record(HighWaterEvent{ckey, Height{*h, now}, has_mark && *h < cs->high_water.block},
                    profile_.health);
    }
  } else if (call.method == "eth_getBlockByNumber" && item.plan.need.block &&
             item.plan.need.block->kind == BlockRef::Kind::latest) {
    auto h = block_number_of(result);
    if (!h) return;
    observe_height(store_, profile_, chain, *cand.provider, Height{*h, now}, rng_.uniform(),
                   cand.key);
    // Only a height the head rule believes may raise the mark.
    if (mark_supported(store_, profile_, chain, Height{*h, now}, now)) {
      store_.record(HighWaterEvent{ckey, Height{*h, now}, false}, profile_.health);
    }
  }
}

}  // namespace rpcroute
