#include "bench_report.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "output.hpp"
#include "rpcroute/json.hpp"

namespace rpcroute::cli {

namespace {

std::string errors_cell(const bench::Tally& t) {
  std::string cell;
  for (auto cls : bench::kErrorClasses) {
    const int n = t.errors[static_cast<std::size_t>(cls)];
    if (n == 0) continue;
    if (!cell.empty()) cell += ", ";
    cell += fmt::format("{} {}", n, class_name(cls));
  }
  return cell.empty() ? "-" : cell;
}

std::string per_s_cell(double v) {
  return v >= 100 ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v);
}

/// The method, with the params given for it (abbreviated) when they were.
std::string method_label(const bench::Plan& plan, std::size_t m) {
  constexpr std::size_t kMaxParams = 60;
  const auto given = plan.given_params(m);
  if (given.empty()) return plan.methods[m];
  if (given.size() <= kMaxParams) return fmt::format("{} {}", plan.methods[m], given);
  return fmt::format("{} {}…", plan.methods[m], given.substr(0, kMaxParams));
}

/// Said loudly (issue 21): a method whose answers are mostly errors was not measured.
std::string mostly_errors_note(const bench::Plan& plan, std::size_t m, std::size_t p,
                               const bench::Tally& t) {
  const std::string example = t.messages.empty() ? std::string() : t.messages.front().first;
  const std::string hint =
      plan.given_params(m).empty()
          ? fmt::format("; give params: --call '{}:[...]' or --calls-file", plan.methods[m])
          : std::string();
  return fmt::format(
      "  !! MOSTLY ERRORS: {} answered {} of {} with an error{}: no latency measured or "
      "recorded{}\n",
      plan.providers[p]->id, t.answered - t.ok, t.answered,
      example.empty() ? std::string() : fmt::format(" ({})", example), hint);
}

std::string method_heading(const bench::Plan& plan, std::size_t m) {
  const std::string method = method_label(plan, m);
  if (plan.duration_ms) {
    return fmt::format("{} ({} per provider, concurrency {})", method,
                       format_ms(static_cast<double>(*plan.duration_ms)), plan.concurrency);
  }
  return fmt::format("{} ({} requests per provider, concurrency {})", method, plan.requests,
                     plan.workers());
}

/// Method m's heading, table and rate-limit notes.
std::string method_text(const bench::Plan& plan, const bench::Results& results, std::size_t m) {
  const auto figures = results.figures(m);
  Table table({"PROVIDER", "OK", "ERRORS", "P50", "P90", "P99", "MIN", "MAX", "REQ/S"});
  std::string notes;
  for (auto p : bench::order_by_p50(figures)) {
    const auto& t = results.tallies[m][p];
    const auto& f = figures[p];
    auto ms = [&](double v) { return f.has_latency ? format_ms(v) : std::string("-"); };
    const bool loud = t.mostly_errors();
    table.add({plan.providers[p]->id, std::to_string(t.ok), errors_cell(t) + (loud ? " !!" : ""),
               ms(f.p50), ms(f.p90), ms(f.p99), ms(f.min), ms(f.max), per_s_cell(f.per_s)});
    if (loud) notes += mostly_errors_note(plan, m, p, t);
    if (t.rate_limited > 0) {
      notes += fmt::format("  {}: rate-limited {} of {} (not counted as latency)\n",
                           plan.providers[p]->id, t.rate_limited, t.issued);
    }
  }
  return "\n" + method_heading(plan, m) + "\n" + table.render() + notes;
}

std::string warmup_text(const bench::Plan& plan, const bench::Results& results) {
  Table warm({"PROVIDER", "LATENCY", "CONNECT", "STATUS"});
  for (std::size_t p = 0; p < plan.providers.size(); ++p) {
    const auto& w = results.warmups[p];
    warm.add({plan.providers[p]->id, format_ms(w.latency_ms),
              w.connect_ms > 0 ? format_ms(w.connect_ms) : "-", w.ok ? "ok" : w.message});
  }
  return "\nwarm-up (connect), not counted above\n" + warm.render();
}

/// Each distinct message once per provider, with the methods it came from unless that is all.
std::string errors_text(const bench::Plan& plan, const bench::Results& results) {
  std::string errors;
  for (const auto& l : bench::error_lines(plan, results)) {
    std::string where;
    if (plan.methods.size() == 1) {
      where = "";
    } else if (l.methods.size() == plan.methods.size()) {
      where = " (every method)";
    } else {
      for (auto m : l.methods) where += fmt::format("{}{}", where.empty() ? " (" : ", ", m);
      where += ")";
    }
    errors +=
        fmt::format("  {}: {} ×{}{}\n", plan.providers[l.provider]->id, l.message, l.count, where);
  }
  return errors.empty() ? std::string() : "\nerrors\n" + errors;
}

void write_warmups(json::Writer& w, const bench::Plan& plan, const bench::Results& results) {
  w.begin_array();
  for (std::size_t p = 0; p < plan.providers.size(); ++p) {
    const auto& wu = results.warmups[p];
    w.begin_object();
    w.key("provider");
    w.value(plan.providers[p]->id);
    w.key("latency_ms");
    w.value(wu.latency_ms);
    w.key("connect_ms");
    w.value(wu.connect_ms);
    w.key("ok");
    w.value(wu.ok);
    w.key("chain_id");
    if (wu.chain_id)
      w.value(*wu.chain_id);
    else
      w.null();
    if (!wu.ok) {
      w.key("message");
      w.value(wu.message);
    }
    w.end_object();
  }
  w.end_array();
}

void write_tally(json::Writer& w, const std::string& provider, const bench::Tally& t,
                 const bench::Figures& f) {
  w.begin_object();
  w.key("provider");
  w.value(provider);
  w.key("requests");
  w.value(t.issued);
  w.key("ok");
  w.value(t.ok);
  w.key("errors");
  w.begin_object();
  for (auto cls : bench::kErrorClasses) {
    if (const int n = t.errors[static_cast<std::size_t>(cls)]; n > 0) {
      w.key(class_name(cls));
      w.value(n);
    }
  }
  w.end_object();
  w.key("rate_limited");
  w.value(t.rate_limited);
  w.key("mostly_errors");  // no latency measured: the answers were errors
  w.value(t.mostly_errors());
  auto ms = [&](const char* key, double v) {
    w.key(key);
    if (f.has_latency)
      w.value(v);
    else
      w.null();
  };
  ms("p50_ms", f.p50);
  ms("p90_ms", f.p90);
  ms("p99_ms", f.p99);
  ms("min_ms", f.min);
  ms("max_ms", f.max);
  w.key("requests_per_s");
  w.value(f.per_s, 1);
  w.key("messages");
  w.begin_array();
  for (const auto& [message, n] : t.messages) w.value(message);
  w.end_array();
  w.end_object();
}

void write_methods(json::Writer& w, const bench::Plan& plan, const bench::Results& results) {
  w.begin_array();
  for (std::size_t m = 0; m < plan.methods.size(); ++m) {
    const auto figures = results.figures(m);
    w.begin_object();
    w.key("method");
    w.value(plan.methods[m]);
    if (const auto given = plan.given_params(m); !given.empty()) {
      w.key("params");
      w.raw(given);
    }
    w.key("providers");
    w.begin_array();
    for (auto p : bench::order_by_p50(figures))
      write_tally(w, plan.providers[p]->id, results.tallies[m][p], figures[p]);
    w.end_array();
    w.end_object();
  }
  w.end_array();
}

}  // namespace

std::string render_bench_text(const bench::Plan& plan, const bench::Results& results) {
  std::string out =
      fmt::format("chain {} ({}), {} provider{}\n", plan.chain->name, plan.chain->chain_id,
                  plan.providers.size(), plan.providers.size() == 1 ? "" : "s");
  for (std::size_t m = 0; m < plan.methods.size(); ++m) out += method_text(plan, results, m);
  out += warmup_text(plan, results);
  out += errors_text(plan, results);
  return out;
}

std::string render_bench_json(const bench::Plan& plan, const bench::Results& results,
                              bool recorded) {
  json::Writer w;
  w.begin_object();
  w.key("chain");
  w.value(plan.chain->name);
  w.key("chain_id");
  w.value(static_cast<std::uint64_t>(plan.chain->chain_id));
  w.key("requests_per_method");
  if (plan.duration_ms)
    w.null();
  else
    w.value(plan.requests);
  w.key("duration_s");
  if (plan.duration_ms)
    w.value(static_cast<double>(*plan.duration_ms) / 1000.0);
  else
    w.null();
  w.key("concurrency");
  w.value(plan.concurrency);
  w.key("recorded");
  w.value(recorded);
  w.key("warmup");
  write_warmups(w, plan, results);
  w.key("methods");
  write_methods(w, plan, results);
  w.end_object();
  return w.take();
}

}  // namespace rpcroute::cli
