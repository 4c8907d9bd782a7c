# shellcheck shell=bash
# Section `redis`: sidecars sharing state through Redis (issue 20). A redis-server of its own on a
# free loopback port (no persistence), then:
#   overhead    one sidecar with shared_state on and one without, same upstream, wrk at 1 connection
#               (the median is the per-request cost) and at 64, interleaved rounds: the difference of
#               the medians is what Redis costs a request (the budget: 10 µs).
#   rate limit  three sidecars on one Redis, each under wrk at once, one provider with
#               rate_limit {rps, burst} beside one without: the limited provider's attempts summed
#               over the three /metrics, against rps × seconds + burst (the bound, ±5 %).
# Sourced by tests/perf/run.
# Environment: REDIS_PERF_PARTS="overhead rate_limit" (which parts run), REDIS_PERF_CONNS="1 64"
# (the overhead's wrk connection counts: "1" alone measures the per-request cost without a
# 64-connection run on a shared machine), REDIS_PERF_RPS, REDIS_PERF_BURST.

redis_rps=${REDIS_PERF_RPS:-200}
redis_burst=${REDIS_PERF_BURST:-50}
redis_parts=${REDIS_PERF_PARTS:-overhead rate_limit}
redis_conns=${REDIS_PERF_CONNS:-1 64}

start_redis_perf() { # → redis_port, redis_pid
  command -v redis-server >/dev/null || die "redis-server not found (scripts/setup installs it)"
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning \
    </dev/null >"$work/redis.log" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  for _ in $(seq 100); do
    [[ $(redis-cli -p "$redis_port" ping 2>/dev/null) == PONG ]] && return 0
    sleep 0.05
  done
  die "redis-server did not answer"
}

write_redis_profile() { # FILE SHARED(0|1) LIMITED(0|1)
  ensure_upstream
  {
    echo "name: perf_redis"
    echo "chains:"
    echo "  local:"
    echo "    chain_id: 31337"
    echo "    block_time_ms: 1000"
    echo "    providers:"
    if (($3)); then
      echo "      - { id: limited, url: \"http://127.0.0.1:$upstream_port/\", priority: 1, rate_limit: { rps: $redis_rps, burst: $redis_burst } }"
      echo "      - { id: spare, url: \"http://127.0.0.1:$upstream_port/?spare\", priority: 2 }"
      echo "routing:"
      echo "  default_strategy: priority"
    else
      echo "      - { id: nginx, url: \"http://127.0.0.1:$upstream_port/\" }"
    fi
    if (($2)); then
      echo "shared_state:"
      echo "  redis: \"redis://127.0.0.1:$redis_port/0\""
      echo "  prefix: \"perf$RANDOM:\""
    fi
  } >"$1"
}

metric_sum() { # METRIC_SUBSTRING PORT...
  local what=$1 port total=0 v
  shift
  for port in "$@"; do
    v=$(curl -sf "http://127.0.0.1:$port/metrics" | grep -F "$what" | awk '{ s += $NF } END { print s + 0 }')
    total=$((total + v))
  done
  echo "$total"
}

section_redis() {
  start_redis_perf
  [[ " $redis_parts " == *" overhead "* ]] && redis_overhead
  [[ " $redis_parts " == *" rate_limit "* ]] && redis_rate_limit
  stop_pid "$redis_pid"
}

redis_overhead() {
  local jsonl=$work/redis_overhead.jsonl v c r line
  : >"$jsonl"
  write_redis_profile "$work/redis_off.yaml" 0 0
  write_redis_profile "$work/redis_on.yaml" 1 0
  sidecar_profile=$work/redis_off.yaml start_sidecar rd_off
  sidecar_profile=$work/redis_on.yaml start_sidecar rd_on
  wrk_script "$work/rd.lua" "$bn_req"
  local conns_list
  read -ra conns_list <<<"$redis_conns"
  for v in off on; do
    local port_var=rd_${v}_port
    # Warm-up at the highest count measured (64 by default).
    run_wrk "http://127.0.0.1:${!port_var}/rpc/local" "$work/rd.lua" "${conns_list[-1]}" 1 "$work/wrk.rd.warm.$v.txt" >/dev/null
  done
  grep -q 'reachable' "$work/rd_on.log" || warn "redis: the shared sidecar did not reach Redis: $(tail -3 "$work/rd_on.log")"
  for c in "${conns_list[@]}"; do
    for ((r = 1; r <= rounds; r++)); do
      for v in off on; do
        local port_var=rd_${v}_port
        say "redis: wrk ${duration}s, shared state $v, $c connections, round $r/$rounds"
        line=$(run_wrk "http://127.0.0.1:${!port_var}/rpc/local" "$work/rd.lua" "$c" "$duration" "$work/wrk.rd.$v.$c.$r.txt")
        jq -c --arg v "$v" --argjson c "$c" '. + {variant: $v, conns: $c}' <<<"$line" >>"$jsonl"
      done
    done
  done
  local syncs
  syncs=$(metric_sum rpcroute_shared_state_syncs_total "$rd_on_port")
  stop_pid "$rd_off_pid"
  stop_pid "$rd_on_pid"
  local agg=$work/redis_overhead.agg.jsonl
  jq -s -c '
    def median: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
    group_by([.variant, .conns])[] | map(select((.requests // 0) > 0)) as $ok
    | {variant: .[0].variant, conns: .[0].conns,
       rps: (if ($ok | length) > 0 then ($ok | map(.requests) | add) / ($ok | map(.duration_us) | add) * 1e6 else null end),
       p50: ($ok | map(.p50) | median), p99: ($ok | map(.p99) | median),
       errors: ($ok | map(.status + .connect + .read + .write + .timeout) | add)}' "$jsonl" >"$agg"
  get() { jq -r --arg v "$1" --argjson c "$2" --arg f "$3" 'select(.variant == $v and .conns == $c) | .[$f] // "n/a"' "$agg" | head -1; }
  local d1
  d1=$(awk -v a="$(get on 1 p50)" -v b="$(get off 1 p50)" 'BEGIN { if (a == "n/a" || b == "n/a") print "n/a"; else print a - b }')
  {
    echo "## Shared state through Redis (issue 20)"
    echo
    echo "### Per-request cost of shared state"
    echo
    echo "wrk 1 thread, keep-alive, eth_blockNumber through \`rpcroute serve --no-probe --no-state\` to the nginx upstream, with and without \`shared_state\` (a local redis-server; $syncs refresh rounds answered during the run); $rounds round(s) of ${duration} s per row, interleaved."
    echo
    echo "| shared state | conns | requests/s | p50 | p99 | errors |"
    echo "|:---|---:|---:|---:|---:|---:|"
    for c in "${conns_list[@]}"; do
      for v in off on; do
        echo "| $v | $c | $(num "$(get "$v" "$c" rps)") | $(us "$(get "$v" "$c" p50)") | $(us "$(get "$v" "$c" p99)") | $(get "$v" "$c" errors) |"
      done
    done
    echo
    echo "Median difference at 1 connection (on − off): $d1 µs (budget ≤ 10 µs)."
    echo
  } >"$out/redis.md"
  figure_row "redis: per-request cost of shared state, p50 at 1 connection (on − off)" "$d1 µs" "off $(us "$(get off 1 p50)")" "budget 10 µs"
}

redis_rate_limit() {
  write_redis_profile "$work/redis_rl.yaml" 1 1
  wrk_script "$work/rd.lua" "$bn_req"  # also when the overhead part did not run
  local h ports=() secs=$((duration < 10 ? 10 : duration))
  for h in 1 2 3; do
    sidecar_profile=$work/redis_rl.yaml start_sidecar "rl$h"
    local port_var=rl${h}_port
    ports+=("${!port_var}")
  done
  sleep 1  # connected, first refresh done
  local wpids=()
  for h in 1 2 3; do
    run_wrk "http://127.0.0.1:${ports[h - 1]}/rpc/local" "$work/rd.lua" 16 "$secs" "$work/wrk.rl.$h.txt" >"$work/wrk.rl.$h.json" &
    wpids+=($!)
  done
  wait "${wpids[@]}"
  local limited spare bound ratio_v total
  # The metrics' profile label is the profile file's name (redis_rl.yaml), not its `name:`.
  limited=$(metric_sum 'rpcroute_attempts_total{profile="redis_rl",chain="local",provider="limited",outcome="success"}' "${ports[@]}")
  spare=$(metric_sum 'provider="spare",outcome="success"' "${ports[@]}")
  total=$(jq -s 'map(.requests // 0) | add' "$work"/wrk.rl.*.json)
  ((limited > 0)) || warn "redis: no attempt on provider limited was counted in /metrics (labels changed?)"
  bound=$((redis_rps * secs + redis_burst))
  ratio_v=$(ratio "$limited" "$bound")
  for h in 1 2 3; do
    local pid_var=rl${h}_pid
    stop_pid "${!pid_var}"
  done
  {
    echo "### Three sidecars, one quota"
    echo
    echo "Three sidecars on one Redis, each under wrk (16 connections, $secs s) at once; provider \`limited\` has \`rate_limit: { rps: $redis_rps, burst: $redis_burst }\`, \`spare\` none (priority order: limited first). $total requests answered in all."
    echo
    echo "| attempts on \`limited\` (3 hosts) | bound rps × s + burst | ratio | on \`spare\` |"
    echo "|---:|---:|---:|---:|"
    echo "| $limited | $bound | $ratio_v | $spare |"
    echo
  } >>"$out/redis.md"
  figure_row "redis: three sidecars on one quota (rps $redis_rps, burst $redis_burst, $secs s)" "$limited attempts" "bound $bound" "$ratio_v× (±5 %)"
}
