// The pure half of the bench engine: what to send, and what the answers add up to.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "rpcroute/bench.hpp"
#include "rpcroute/metrics.hpp"

namespace rpcroute::bench {

namespace {

// An address that exists on every chain: eth_getBalance and eth_getTransactionCount ask the same
// question everywhere.
constexpr std::string_view kFixedAddress = "0x0000000000000000000000000000000000000000";

[[nodiscard]] bool is_answer(Outcome o) { return o == Outcome::success || o == Outcome::rpc_error; }

}  // namespace

std::string params_for(std::string_view method, std::optional<std::uint64_t> head) {
  // Realistic and harmless (issue 21): a call that every node answers with a result, at latest,
  // so that the table measures answers, not -32602 errors.
  if (method == "eth_getBlockByNumber") return R"(["latest",false])";
  if (method == "eth_getBalance" || method == "eth_getTransactionCount" ||
      method == "eth_getCode") {
    return fmt::format(R"(["{}","latest"])", kFixedAddress);
  }
  if (method == "eth_getStorageAt") return fmt::format(R"(["{}","0x0","latest"])", kFixedAddress);
  if (method == "eth_getProof") return fmt::format(R"(["{}",[],"latest"])", kFixedAddress);
  if (method == "eth_call" || method == "eth_createAccessList") {
    // A call to an address without code: "0x" everywhere, no state read beyond the account.
    return fmt::format(R"([{{"to":"{}","data":"0x"}},"latest"])", kFixedAddress);
  }
  if (method == "eth_estimateGas") {
    return fmt::format(R"([{{"from":"{0}","to":"{0}","value":"0x0"}}])", kFixedAddress);
  }
  if (method == "eth_feeHistory") return R"(["0x4","latest",[25,75]])";
  if (method == "eth_getBlockTransactionCountByNumber" || method == "eth_getBlockReceipts" ||
      method == "eth_getUncleCountByBlockNumber") {
    return R"(["latest"])";
  }
  if (method == "eth_getLogs") {
    if (!head) return R"([{"fromBlock":"latest","toBlock":"latest"}])";
    return fmt::format(R"([{{"fromBlock":"0x{:x}","toBlock":"0x{:x}"}}])",
                       *head >= 3 ? *head - 3 : 0, *head);
  }
  return "[]";
}

std::string without_elapsed(std::string text) {
  constexpr std::string_view kAfter = " after ";
  for (auto at = text.find(kAfter); at != std::string::npos; at = text.find(kAfter, at + 1)) {
    auto end = at + kAfter.size();
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (end > at + kAfter.size() && text.compare(end, 3, " ms") == 0) text.erase(at, end + 3 - at);
  }
  return text;
}

std::string message_of(const Classification& c, const Profile& profile) {
  return without_elapsed(
      profile.scrub(c.message.empty() ? std::string(outcome_name(c.outcome)) : c.message));
}

void Tally::add(const Exchange& ex, const Profile& profile) {
  add(ex.per_call.front(), ex.latency_ms(), profile);
}

void Tally::add(const Classification& c, double latency_ms, const Profile& profile) {
  if (is_answer(c.outcome)) ++answered;
  if (c.cls == OutcomeClass::success) {
    ++ok;
    latencies_ms.push_back(latency_ms);
    return;
  }
  ++errors[static_cast<std::size_t>(c.cls)];
  if (c.cls == OutcomeClass::rate_limited) ++rate_limited;
  auto text = message_of(c, profile);
  for (auto& [m, n] : messages) {
    if (m == text) {
      ++n;
      return;
    }
  }
  if (messages.size() < kMaxMessages) {
    messages.emplace_back(std::move(text), 1);
  } else {
    ++other_messages;
  }
}

Figures figures_of(const Tally& t) {
  Figures f;
  if (!t.latencies_ms.empty()) {
    f.has_latency = true;
    f.p50 = quantile(t.latencies_ms, 0.5);
    f.p90 = quantile(t.latencies_ms, 0.9);
    f.p99 = quantile(t.latencies_ms, 0.99);
    auto [lo, hi] = std::minmax_element(t.latencies_ms.begin(), t.latencies_ms.end());
    f.min = *lo;
    f.max = *hi;
  }
  const auto wall_us = t.finished_us - t.started_us;
  // Successes only, like the latencies: errors answered fast are no throughput.
  if (wall_us > 0) f.per_s = static_cast<double>(t.ok) * 1e6 / static_cast<double>(wall_us);
  return f;
}

std::vector<std::size_t> order_by_p50(const std::vector<Figures>& figures) {
  std::vector<std::size_t> order(figures.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](std::size_t i) {
    return figures[i].has_latency ? figures[i].p50 : std::numeric_limits<double>::infinity();
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  return order;
}

bool Results::any_answer() const {
  for (const auto& per_method : tallies) {
    for (const auto& t : per_method) {
      if (t.answered > 0) return true;
    }
  }
  return false;
}

std::vector<Figures> Results::figures(std::size_t m) const {
  std::vector<Figures> out;
  out.reserve(tallies[m].size());
  for (const auto& t : tallies[m]) out.push_back(figures_of(t));
  return out;
}

std::vector<ErrorLine> error_lines(const Plan& plan, const Results& results) {
  std::vector<ErrorLine> lines;
  auto add_line = [&](std::size_t p, std::size_t m, const std::string& message, int n) {
    auto it = std::find_if(lines.begin(), lines.end(), [&](const ErrorLine& l) {
      return l.provider == p && l.message == message;
    });
    if (it == lines.end()) it = lines.insert(lines.end(), ErrorLine{p, message, 0, {}});
    it->count += n;
    if (it->methods.empty() || it->methods.back() != plan.methods[m])
      it->methods.push_back(plan.methods[m]);
  };
  for (std::size_t p = 0; p < plan.providers.size(); ++p) {
    for (std::size_t m = 0; m < plan.methods.size(); ++m) {
      const auto& t = results.tallies[m][p];
      for (const auto& [message, n] : t.messages) add_line(p, m, message, n);
      if (t.other_messages > 0) add_line(p, m, "other errors", t.other_messages);
    }
  }
  return lines;
}

}  // namespace rpcroute::bench
