# shellcheck shell=bash
# Section `bench`: throughput of the bench engine (one io_context, one curl multi handle, one
# thread) from one core: `rpcroute bench` with 64 in flight for DURATION seconds against the nginx
# upstream's fixed body, next to wrk (one thread, 64 connections) against the same upstream from the
# same core — what one core of a lean HTTP client does. CPU time per request (user + system of the
# whole bench process, warm-up and start included) is the steadier figure on a busy machine.
# Sourced by tests/perf/run.

section_bench() {
  ensure_upstream
  cat >"$work/bench.yaml" <<EOF
name: perf
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: nginx, url: "http://127.0.0.1:$upstream_port/" }
EOF
  local concurrency=64 cpu user_s sys_s start_ns end_ns wall_s load_before
  say "bench: rpcroute bench, ${duration}s, concurrency $concurrency"
  load_before=$(loadavg)
  start_ns=$(date +%s%N)
  local TIMEFORMAT='%U %S'
  cpu=$( { time "${client_cpu[@]}" "$rpcroute_bin" bench --profile "$work/bench.yaml" --concurrency "$concurrency" \
    --methods eth_blockNumber --duration "${duration}s" --no-state --json >"$work/bench.json" 2>"$work/bench.err"; } 2>&1)
  end_ns=$(date +%s%N)
  jq -e '.methods[0].providers[0].ok > 0' "$work/bench.json" >/dev/null ||
    { cat "$work/bench.err" "$work/bench.json" >&2; die "rpcroute bench failed"; }
  read -r user_s sys_s <<<"$cpu"
  wall_s=$(awk -v a="$start_ns" -v b="$end_ns" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')

  say "bench: wrk ${duration}s, 64 connections, same upstream, same core"
  wrk_script "$work/bn.lua" "$bn_req"
  local wrk_line wrk_rps
  wrk_line=$(run_wrk "http://127.0.0.1:$upstream_port/" "$work/bn.lua" 64 "$duration" "$work/wrk.bench.txt")
  wrk_rps=$(jq -r 'if (.requests // 0) > 0 then .requests / (.duration_us / 1e6) else "n/a" end' <<<"$wrk_line")

  local p rps cpu_us
  p=$(jq -c '.methods[0].providers[0]' "$work/bench.json")
  rps=$(jq -r '.requests_per_s' <<<"$p")
  cpu_us=$(jq -r --arg u "$user_s" --arg s "$sys_s" '(($u | tonumber) + ($s | tonumber)) * 1e6 / .requests * 10 | round / 10' <<<"$p")
  {
    echo "## bench engine throughput (one core)"
    echo
    echo "\`rpcroute bench --methods eth_blockNumber --concurrency $concurrency --duration ${duration}s --no-state\` against the nginx upstream's fixed body; wrk (1 thread, 64 connections) on the same core against the same upstream as the reference. Load average before: $load_before."
    echo
    echo "| client | requests | requests/s | p50 | p99 | max | errors | CPU per request |"
    echo "|:---|---:|---:|---:|---:|---:|---:|---:|"
    jq -r --arg cpu "$cpu_us" '
      def t: if . == null then "n/a" elif . >= 10000 then "\(. / 100 | round / 10) ms" else "\(round) µs" end;
      "| rpcroute bench | \(.requests) | \(.requests_per_s | round) | \(.p50_ms * 1000 | t) | \(.p99_ms * 1000 | t) | \(.max_ms * 1000 | t) | \(.errors | if type == "object" then (to_entries | map(.value) | add // 0) else . end) | \($cpu) µs |"' <<<"$p"
    jq -r '
      def t: if . == null then "n/a" elif . >= 10000 then "\(. / 100 | round / 10) ms" else "\(round) µs" end;
      "| wrk | \(.requests // "n/a") | \(if (.requests // 0) > 0 then (.requests / (.duration_us / 1e6) | round) else "n/a" end) | \(.p50 | t) | \(.p99 | t) | \(.max | t) | \((.status // 0) + (.connect // 0) + (.read // 0) + (.write // 0) + (.timeout // 0)) | |"' <<<"$wrk_line"
    echo
    echo "rpcroute bench process: wall $wall_s s, user $user_s s, system $sys_s s (warm-up and start included); at its CPU per request one free core would do $(awk -v c="$cpu_us" 'BEGIN { if (c > 0) printf "%.0f", 1e6 / c; else print "n/a" }') requests/s."
    echo
  } >"$out/bench.md"
  figure_row "bench engine requests/s, one core, 64 in flight" "$(num "$rps") req/s ($cpu_us µs CPU per request)" \
    "wrk $(num "$wrk_rps") req/s" "$(ratio "$rps" "$wrk_rps")×"
}
