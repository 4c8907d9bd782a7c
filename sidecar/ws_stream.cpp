// Gap-free, duplicate-free subscription streams: what a failover missed comes over HTTP.
#include "ws_stream.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "rpcroute/jsonrpc.hpp"

namespace rpcroute::sidecar {

namespace {

constexpr std::size_t kChunk = 32;  // heights fetched per batch

/// A string field of an object, copied; empty when absent.
std::string string_field(simdjson::ondemand::object& o, std::string_view name) {
  std::string_view v;
  if (o.find_field_unordered(name).get_string().get(v)) return {};
  return std::string(v);
}

bool parse_object(std::string_view raw, simdjson::padded_string& text,
                  simdjson::ondemand::document& doc, simdjson::ondemand::object& o) {
  static thread_local simdjson::ondemand::parser parser;
  text = simdjson::padded_string(raw);
  return !parser.iterate(text).get(doc) && !doc.get_object().get(o);
}

}  // namespace

std::string hex(std::uint64_t n) { return fmt::format("0x{:x}", n); }

std::optional<std::uint64_t> parse_hex(std::string_view s) {
  if (!s.starts_with("0x") || s.size() < 3) return std::nullopt;
  std::uint64_t n = 0;
  const auto [ptr, err] = std::from_chars(s.data() + 2, s.data() + s.size(), n, 16);
  if (err != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return n;
}

std::optional<BlockRef> parse_block(std::string_view raw) {
  simdjson::padded_string text;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object o;
  if (!parse_object(raw, text, doc, o)) return std::nullopt;
  BlockRef b;
  const auto number = parse_hex(string_field(o, "number"));
  b.hash = string_field(o, "hash");
  b.parent = string_field(o, "parentHash");
  if (!number || b.hash.empty()) return std::nullopt;
  b.number = *number;
  return b;
}

std::optional<LogRef> parse_log(std::string_view raw) {
  simdjson::padded_string text;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object o;
  if (!parse_object(raw, text, doc, o)) return std::nullopt;
  LogRef l;
  const auto block = parse_hex(string_field(o, "blockNumber"));
  l.block_hash = string_field(o, "blockHash");
  const auto index = parse_hex(string_field(o, "logIndex"));
  bool removed = false;
  if (!o.find_field_unordered("removed").get_bool().get(removed)) l.removed = removed;
  if (!block || !index || l.block_hash.empty()) return std::nullopt;
  l.block = *block;
  l.index = *index;
  return l;
}

std::vector<std::string> split_array(std::string_view raw) {
  static thread_local simdjson::ondemand::parser parser;
  std::vector<std::string> out;
  const simdjson::padded_string text(raw);
  simdjson::ondemand::document doc;
  simdjson::ondemand::array a;
  if (parser.iterate(text).get(doc) || doc.get_array().get(a)) return out;
  for (auto element : a) {
    simdjson::ondemand::object o;
    std::string_view json;
    if (element.get_object().get(o) || o.raw_json().get(json)) break;
    while (!json.empty() && (json.back() == ' ' || json.back() == '\n')) json.remove_suffix(1);
    out.emplace_back(json);
  }
  return out;
}

std::string mark_removed(std::string_view log) {
  std::string out(log);
  for (std::string_view field : {R"("removed":false)", R"("removed": false)"}) {
    if (const auto at = out.find(field); at != std::string::npos) {
      out.replace(at, field.size(), R"("removed":true)");
      return out;
    }
  }
  if (const auto brace = out.find('{'); brace != std::string::npos)
    out.insert(brace + 1, out.find('"', brace) == std::string::npos ? R"("removed":true)"
                                                                    : R"("removed":true,)");
  return out;
}

std::string logs_filter(std::string_view subscribe_params, std::uint64_t from, std::uint64_t to) {
  // ["logs",{...}]: the object's inside, with our range after it (a range of its own is ignored by
  // eth_subscribe; ours, last, is the one eth_getLogs keeps).
  std::string inner;
  if (const auto open = subscribe_params.find('{'); open != std::string_view::npos) {
    if (const auto close = subscribe_params.rfind('}');
        close != std::string_view::npos && close > open)
      inner = std::string(subscribe_params.substr(open + 1, close - open - 1));
  }
  while (!inner.empty() && (inner.back() == ' ' || inner.back() == '\n')) inner.pop_back();
  return fmt::format(R"([{{{}{}"fromBlock":"{}","toBlock":"{}"}}])", inner,
                     inner.empty() ? "" : ",", hex(from), hex(to));
}

// ---------------------------------------------------------------------------------------------

bool HeadStream::known(std::string_view hash) const {
  return std::any_of(ring_.begin(), ring_.end(), [&](const BlockRef& b) { return b.hash == hash; });
}

void HeadStream::record(const BlockRef& block) {
  // A replacement head takes the place of what was delivered at its height and above.
  while (!ring_.empty() && ring_.back().number >= block.number) ring_.pop_back();
  ring_.push_back(block);
  while (ring_.size() > kWindow) ring_.pop_front();
}

// NOLINTNEXTLINE(readability-function-size): the gap fetch and the walk back are one sequence
asio::awaitable<void> HeadStream::on_head(std::string raw, const WsChainConfig& config,
                                          Fetcher& fetcher, const Deliver& deliver,
                                          const Note& note) {
  const auto head = parse_block(raw);
  if (!head) {  // not a header we can follow: passed on as it came
    deliver(raw);
    co_return;
  }
  if (known(head->hash)) co_return;  // delivered already (the new provider's first head, often)
  if (ring_.empty()) {
    record(*head);
    deliver(raw);
    co_return;
  }
  const std::uint64_t last = ring_.back().number;
  const std::uint64_t max = config.max_backfill_blocks;
  // The heights missed, by number, in batches through the router.
  std::map<std::uint64_t, std::pair<BlockRef, std::string>> by_number;
  std::uint64_t cut = last;  // heights at or below it are connected or given up
  if (head->number > last + 1 && max > 0) {
    std::uint64_t lo = last + 1;
    const std::uint64_t hi = head->number - 1;
    if (hi - lo + 1 > max) {
      note(
          fmt::format("newHeads: {} heads missed, more than max_backfill_blocks ({}); {}..{} "
                      "are not sent",
                      hi - lo + 1, max, lo, hi - max));
      lo = hi - max + 1;
      cut = lo - 1;
    }
    for (std::uint64_t from = lo; from <= hi; from += kChunk) {
      Fetcher::Calls calls;
      for (std::uint64_t n = from; n <= std::min(hi, from + kChunk - 1); ++n)
        calls.emplace_back("eth_getBlockByNumber", fmt::format(R"(["{}",false])", hex(n)));
      auto got = co_await fetcher.fetch(std::move(calls));
      for (auto& r : got) {
        if (!r) continue;
        if (auto b = parse_block(*r)) by_number.emplace(b->number, std::pair{*b, std::move(*r)});
      }
    }
  } else if (head->number > last + 1) {
    cut = head->number - 1;
  }
  // From the head back along parent hashes to a head delivered (the fork point, or the last one),
  // the missed heights first, by hash where they do not connect (a reorg).
  std::deque<std::pair<BlockRef, std::string>> chain;
  chain.emplace_back(*head, std::move(raw));
  while (true) {
    const BlockRef& front = chain.front().first;
    if (front.parent.empty() || known(front.parent) || front.number == 0 ||
        front.number - 1 < ring_.front().number ||
        (front.number - 1 > last && front.number - 1 <= cut) || chain.size() > max + 1)
      break;
    if (auto it = by_number.find(front.number - 1);
        it != by_number.end() && it->second.first.hash == front.parent) {
      chain.push_front(std::move(it->second));
      by_number.erase(it);
      continue;
    }
    Fetcher::Calls calls;
    calls.emplace_back("eth_getBlockByHash", fmt::format(R"(["{}",false])", front.parent));
    auto got = co_await fetcher.fetch(std::move(calls));
    auto b = got.empty() || !got[0] ? std::nullopt : parse_block(*got[0]);
    if (!b || b->hash != front.parent || b->number + 1 != front.number) {
      note(fmt::format("newHeads: block {} not found; the heads from {} are sent unconnected",
                       front.parent, front.number));
      break;
    }
    chain.emplace_front(std::move(*b), std::move(*got[0]));
  }
  if (chain.size() > 1 || chain.front().first.number <= last) {
    const std::uint64_t first = chain.front().first.number;
    if (first <= last)
      note(fmt::format("newHeads: reorg at {} ({} heads replaced), {} heads sent from there", first,
                       last - first + 1, chain.size()));
    else
      note(fmt::format("newHeads: {} heads backfilled ({}..{})", chain.size() - 1, first,
                       chain.back().first.number - 1));
  }
  for (auto& [block, text] : chain) {
    if (known(block.hash)) continue;
    record(block);
    deliver(text);
  }
}

// ---------------------------------------------------------------------------------------------

void LogStream::on_log(const std::string& raw, const Deliver& deliver) {
  const auto log = parse_log(raw);
  if (!log) {
    deliver(raw);
    return;
  }
  auto same = [&](const Kept& k) {
    return k.ref.index == log->index && k.ref.block_hash == log->block_hash;
  };
  const auto it = std::find_if(ring_.begin(), ring_.end(), same);
  if (log->removed) {  // the node's own reorg: passed on, and forgotten
    if (it != ring_.end()) ring_.erase(it);
    deliver(raw);
    return;
  }
  if (it != ring_.end()) return;  // delivered already
  ring_.push_back({*log, raw});
  while (ring_.size() > kWindow) ring_.pop_front();
  deliver(raw);
}

// NOLINTNEXTLINE(readability-function-size): the reorg check and the fetch read as one sequence
asio::awaitable<void> LogStream::catch_up(const std::string& params, const WsChainConfig& config,
                                          Fetcher& fetcher, const Deliver& deliver,
                                          const Note& note) {
  if (ring_.empty() || config.max_backfill_blocks == 0) co_return;  // nothing to continue from
  Fetcher::Calls ask_head;
  ask_head.emplace_back("eth_blockNumber", "[]");
  auto head = co_await fetcher.fetch(std::move(ask_head));
  std::optional<std::uint64_t> to;
  if (!head.empty() && head[0]) to = jsonrpc::parse_quantity(*head[0]);
  if (!to) {
    note("logs: the chain's head is unknown; the logs missed are not backfilled");
    co_return;
  }
  // Is each block we delivered logs of still in the chain? From the newest down to a match.
  std::set<std::uint64_t, std::greater<>> blocks;
  for (const auto& k : ring_) blocks.insert(k.ref.block);
  const std::uint64_t last = *blocks.begin();
  std::optional<std::uint64_t> standing;  // the newest block still in the chain
  for (const std::uint64_t n : blocks) {
    std::string delivered_hash;
    for (const auto& k : ring_)
      if (k.ref.block == n) delivered_hash = k.ref.block_hash;
    Fetcher::Calls calls;
    calls.emplace_back("eth_getBlockByNumber", fmt::format(R"(["{}",false])", hex(n)));
    auto got = co_await fetcher.fetch(std::move(calls));
    auto b = got.empty() || !got[0] ? std::nullopt : parse_block(*got[0]);
    if (!b) {
      note(fmt::format("logs: block {} could not be fetched; the logs missed are not backfilled",
                       n));
      co_return;
    }
    if (b->hash == delivered_hash) {
      standing = n;
      break;
    }
  }
  std::uint64_t from = last;  // its logs after the last one delivered may be missing
  if (!standing || *standing != last) {
    // Replaced blocks: their logs go again as removed, newest first, as a node sends them.
    std::size_t removed = 0;
    for (auto it = ring_.rbegin(); it != ring_.rend();) {
      if (!standing || it->ref.block > *standing) {
        deliver(mark_removed(it->raw));
        ++removed;
        it = decltype(it)(ring_.erase(std::next(it).base()));
      } else {
        ++it;
      }
    }
    from = standing ? *standing + 1 : *blocks.rbegin();
    note(
        fmt::format("logs: reorg, {} logs sent as removed; fetching again from {}", removed, from));
  }
  if (*to < from) co_return;
  if (*to - from + 1 > config.max_backfill_blocks) {
    note(fmt::format(
        "logs: {} blocks missed, more than max_backfill_blocks ({}); {}..{} are not "
        "fetched",
        *to - from + 1, config.max_backfill_blocks, from, *to - config.max_backfill_blocks));
    from = *to - config.max_backfill_blocks + 1;
  }
  Fetcher::Calls ask_logs;
  ask_logs.emplace_back("eth_getLogs", logs_filter(params, from, *to));
  auto got = co_await fetcher.fetch(std::move(ask_logs));
  if (got.empty() || !got[0]) {
    note(fmt::format("logs: eth_getLogs {}..{} failed; those logs are not backfilled", from, *to));
    co_return;
  }
  std::size_t sent = 0;
  const Deliver counted = [&](const std::string& log) {
    ++sent;
    deliver(log);
  };
  for (const auto& log : split_array(*got[0])) on_log(log, counted);
  note(fmt::format("logs: backfilled blocks {}..{} ({} logs new)", from, *to, sent));
}

}  // namespace rpcroute::sidecar
