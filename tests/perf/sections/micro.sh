# shellcheck shell=bash
# Section `micro`: the Google Benchmark micro-benchmarks of tests/perf/micro (rpcroute_micro):
# request and response parsing, classification, ranking + tiering and whole plans for 4 / 16 / 64
# providers, state record / serialise / parse / merge / save. Pinned to the servers' core (idle by
# then); MICRO_REPETITIONS runs of each, the median reported; MICRO_FILTER narrows them (a
# --benchmark_filter regex). Sourced by tests/perf/run.

section_micro() {
  [[ -x $micro_bin ]] || die "$micro_bin not found (build the perf preset)"
  local json=$work/micro.json
  local args=(--benchmark_min_time="$micro_min_time" --benchmark_repetitions="$micro_repetitions"
    --benchmark_out="$json" --benchmark_out_format=json)
  [[ -n ${MICRO_FILTER:-} ]] && args+=(--benchmark_filter="$MICRO_FILTER")
  say "micro: rpcroute_micro, min time ${micro_min_time}s, $micro_repetitions repetition(s)"
  local load_before
  load_before=$(loadavg)
  "${server_cpu[@]}" "$micro_bin" "${args[@]}" >"$work/micro.txt" 2>&1 || { cat "$work/micro.txt" >&2; die "rpcroute_micro failed"; }

  # One line per benchmark, in the binary's order: the median of the repetitions (Google Benchmark's
  # own aggregate when there are several) and the best repetition; times in ns.
  local rows=$work/micro.rows.json
  jq -c '
    def ns(t): t * ({"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[.time_unit // "ns"]);
    .benchmarks as $all
    | [$all[] | select((.run_type // "iteration") == "iteration") | .run_name // .name] as $names
    | reduce $names[] as $n ([]; if index([$n]) then . else . + [$n] end)
    | .[] as $n
    | [$all[] | select((.run_name // .name) == $n)] as $runs
    | [$runs[] | select((.run_type // "iteration") == "iteration")] as $reps
    | (([$runs[] | select(.aggregate_name == "median")] | first) // $reps[0]) as $med
    | {name: $n, cpu: ($med | ns(.cpu_time)), real: ($med | ns(.real_time)),
       best_cpu: ($reps | map(ns(.cpu_time)) | min), best_real: ($reps | map(ns(.real_time)) | min),
       repetitions: ($reps | length), label: ($reps[0].label // ""), bytes_per_second: ($med.bytes_per_second // null),
       error: ([$reps[] | .error_message // empty] | first // null)}' "$json" >"$rows"
  cpu_of() { jq -r --arg n "$1" 'select(.name == $n) | .cpu' "$rows" | head -1; }
  real_of() { jq -r --arg n "$1" 'select(.name == $n) | .real' "$rows" | head -1; }
  best_of() { jq -r --arg n "$1" 'select(.name == $n) | .best_cpu' "$rows" | head -1; }

  local context
  context=$(jq -r '.context | "\(.num_cpus) CPUs at \(.mhz_per_cpu) MHz; the Google Benchmark library says it was built \(.library_build_type) (the Debian package: only its own timing loop, our code is Release)"' "$json")
  {
    echo "## Micro-benchmarks (Google Benchmark)"
    echo
    echo "\`build-perf/tests/perf/micro/rpcroute_micro\` ($context), min time ${micro_min_time} s per run, $micro_repetitions repetition(s)$( ((micro_repetitions > 1)) && echo ", the median shown"). Load average before: $load_before."
    echo "Inputs: a 200 B eth_call; a 100-call batch; a 39 B and a 200 KB eth_getLogs answer; profiles of N providers with 100 samples per provider and method (3 methods), 1 in 8 rate-limited, 1 in 16 half-open, 1 in 32 open (excluded from plans)."
    echo "\`rank/S/N\`: rank_candidates (strategy order, then tiers) on the candidates of a plan; \`plan/S/N\`: the whole Router::plan for eth_call (filters, breaker and lag checks, latency stats from the samples, rank, tiers)."
    echo
    echo "Targets and key figures use the median CPU time (the wall time also counts the time other processes took the core), except state/save, which waits for the disk; the best repetition shows what the code costs when the machine leaves it alone."
    echo
    echo "| benchmark | CPU time (median) | CPU time (best) | wall time (median) | throughput | note |"
    echo "|:---|---:|---:|---:|---:|:---|"
    jq -r '
      def t: if . >= 1e6 then "\(. / 1e6 * 100 | round / 100) ms" elif . >= 1e4 then "\(. / 1e3 * 10 | round / 10) µs"
             elif . >= 1e3 then "\(. / 1e3 * 100 | round / 100) µs" else "\(. | round) ns" end;
      def rate: if . == null then "" elif . >= 1e9 then "\(. / 1e9 * 100 | round / 100) GB/s" else "\(. / 1e6 | round) MB/s" end;
      "| \(.name) | \(.cpu | t) | \(.best_cpu | t) | \(.real | t) | \(.bytes_per_second | rate) | \(if .error then "**\(.error)**" else .label end) |"' "$rows"
    echo
  } >"$out/micro.md"

  local v slowest slowest_name lb
  v=$(cpu_of parse_body/request_200B)
  if [[ -n $v ]]; then
    target_row "parsing a 200 B request (parse_body) ≤ 300 ns" "$(ns "$v") (best $(ns "$(best_of parse_body/request_200B)"))" "300 ns" \
      "$(ratio "$v" 300)×" "$(met "$v <= 300")"
  fi
  read -r slowest slowest_name < <(jq -r 'select(.name | test("^rank/.*/16$")) | "\(.cpu) \(.name)"' "$rows" | sort -g | tail -1)
  lb=$(cpu_of rank/load_balanced/16)
  if [[ -n ${slowest:-} ]]; then
    target_row "ranking + tiering, 16 providers ≤ 1 µs (rank_candidates; slowest strategy)" \
      "$(ns "$slowest") (${slowest_name}, best $(ns "$(best_of "$slowest_name")")); load_balanced $(ns "$lb")" "1 µs" \
      "$(ratio "$slowest" 1000)×" "$(met "$slowest <= 1000")"
  fi
  for v in plan/load_balanced/16 plan/fastest/16 plan/latency_weighted/16 plan/fastest/64; do
    [[ -n $(cpu_of "$v") ]] && figure_row "whole plan (Router::plan), $(cut -d/ -f2 <<<"$v"), $(cut -d/ -f3 <<<"$v") providers" \
      "$(ns "$(cpu_of "$v")")" "" ""
  done
  for v in parse_body/batch_100 parse_response/small parse_response/logs_200KB classify/success classify/rate_limit_error classify/http_429 state/record_exchange/16 state/merge_in_memory/16; do
    [[ -n $(cpu_of "$v") ]] && figure_row "$v (CPU time)" "$(ns "$(cpu_of "$v")")" "" ""
  done
  v=state/save/16/real_time
  [[ -n $(real_of "$v") ]] && figure_row "state/save/16: lock, read, merge, write, fsync, rename (wall time)" "$(ns "$(real_of "$v")")" "" ""
  return 0
}
