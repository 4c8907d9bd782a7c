#pragma once
// How `rpcroute bench` shows a run: tables per method, the warm-up and the errors; or JSON.
#include <string>

#include "rpcroute/bench.hpp"

namespace rpcroute::cli {

/// The text report: one table per method (fastest p50 first), the warm-up, the errors.
[[nodiscard]] std::string render_bench_text(const bench::Plan& plan, const bench::Results& results);
/// The JSON report (one object, no newline); `recorded`: the samples went into the state file.
[[nodiscard]] std::string render_bench_json(const bench::Plan& plan, const bench::Results& results,
                                            bool recorded);

}  // namespace rpcroute::cli
