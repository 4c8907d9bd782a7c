# shellcheck shell=bash
# Section `tail`: hedged reads (issue 19). Two fake upstreams behind one sidecar (priority
# strategy): `stall` answers first and holds 1 request in 10 for 500 ms (a queue of one-shot
# behaviours), `fast` always answers at once. `rpcroute bench` sends TAIL_REQUESTS eth_getBalance
# calls (TAIL_CONCURRENCY at a time) through the sidecar, once with hedging off and once with
# `hedge: { min_ms: 20, max_extra: 0.15 }`; the section reports p50/p90/p99 and the extra upstream
# requests (what `fast` received over the client's calls). Target: p99 at least 5x lower with
# hedging, at most 15 % extra requests. The fake comes from the test build ($FAKE_BIN, default
# build/tests/fakes/fake_upstream). Sourced by tests/perf/run.

section_tail() {
  local fake=${FAKE_BIN:-$repo/build/tests/fakes/fake_upstream}
  if [[ ! -x $fake ]]; then
    warn "tail: no fake upstream at $fake (build the test target fake_upstream, or set FAKE_BIN); section skipped"
    return 0
  fi
  local n=${TAIL_REQUESTS:-2000} k=${TAIL_CONCURRENCY:-4}
  ((quick)) && n=${TAIL_REQUESTS:-500}
  local name
  for name in stall fast; do
    rm -f "$work/$name.port"
    "${server_cpu[@]}" "$fake" --listen 127.0.0.1:0 --port-file "$work/$name.port" --name "$name" \
      </dev/null >"$work/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do [[ -s $work/$name.port ]] && break; sleep 0.05; done
    [[ -s $work/$name.port ]] || die "tail: fake upstream $name did not start"
    printf -v "${name}_port" %s "$(tr -d '[:space:]' <"$work/$name.port")"
  done
  # shellcheck disable=SC2154  # stall_port, fast_port: set by printf -v above
  local stall_url=http://127.0.0.1:$stall_port fast_url=http://127.0.0.1:$fast_port
  {
    echo "## Hedged reads under stalls (issue 19)"
    echo
    echo "One sidecar, two fake upstreams (priority): the first holds 1 request in 10 for 500 ms, the second answers at once. \`rpcroute bench\` sends $n eth_getBalance calls, $k at a time, through the sidecar. Extra requests: what the second upstream received, over the calls."
    echo
    echo "| hedging | p50 | p90 | p99 | max | extra upstream requests | errors |"
    echo "|:---|---:|---:|---:|---:|---:|---:|"
  } >"$out/tail.md"
  local mode p99_off="" p99_on="" extra_on=""
  for mode in off on; do
    local prof=$work/tail_$mode.yaml hedge=""
    [[ $mode == on ]] && hedge="    hedge: { min_ms: 20, max_ms: 1000, max_extra: 0.15 }"
    cat >"$prof" <<EOF
name: tail
chains:
  local:
    chain_id: 31337
$hedge
    providers:
      - { id: stall, url: "$stall_url", priority: 1 }
      - { id: fast, url: "$fast_url", priority: 2 }
routing: { default_strategy: priority }
EOF
    # One stall every 10 requests, for as many requests as the run sends (and some to spare).
    local queue
    queue=$(awk -v n=$((n + 100)) 'BEGIN { printf "{\"clear_queue\":true,\"reset_stats\":true,\"queue\":["; for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? "," : ""), (i % 10 == 0 ? "{\"mode\":\"delay\",\"delay_ms\":500}" : "{}"); printf "]}" }')
    post "$stall_url/_control" "$queue" >/dev/null
    post "$fast_url/_control" '{"reset_stats":true}' >/dev/null
    sidecar_profile=$prof start_sidecar "tail_$mode"
    local sc_port_var="tail_${mode}_port" client=$work/tail_client.yaml
    cat >"$client" <<EOF
name: tailclient
chains:
  local:
    chain_id: 31337
    providers:
      - { id: sidecar, url: "http://127.0.0.1:${!sc_port_var}/rpc/local", timeout_ms: 10000 }
EOF
    say "tail: hedging $mode, $n calls, concurrency $k"
    "${client_cpu[@]}" "$rpcroute_bin" bench --profile "$client" --no-state --methods eth_getBalance \
      --requests "$n" --concurrency "$k" --json >"$work/tail_$mode.json" 2>"$work/tail_$mode.log" ||
      { cat "$work/tail_$mode.log" >&2; die "tail: bench failed"; }
    local pv="tail_${mode}_pid"
    stop_pid "${!pv}"
    local fig extra errors
    fig=$(jq -c '.methods[0].providers[0]' "$work/tail_$mode.json")
    extra=$(curl -sf "$fast_url/_stats" | jq -r --argjson n "$n" '.requests / $n * 100 | . * 10 | round / 10')
    errors=$(jq -r '.requests - .ok' <<<"$fig")
    local p50 p90 p99 max
    p50=$(jq -r '.p50_ms' <<<"$fig"); p90=$(jq -r '.p90_ms' <<<"$fig"); p99=$(jq -r '.p99_ms' <<<"$fig"); max=$(jq -r '.max_ms // "n/a"' <<<"$fig")
    echo "| $mode | $p50 ms | $p90 ms | $p99 ms | $max ms | $extra % | $errors |" >>"$out/tail.md"
    if [[ $mode == off ]]; then p99_off=$p99; else p99_on=$p99 extra_on=$extra; fi
  done
  local gain
  gain=$(ratio "$p99_off" "$p99_on")
  echo >>"$out/tail.md"
  echo "p99 with hedging off / on: ${gain}x (target ≥ 5x) at $extra_on % extra requests (target ≤ 15 %)." >>"$out/tail.md"
  target_row "hedged reads: p99 ≥ 5 × lower, ≤ 15 % extra requests (1 in 10 stalls 500 ms)" \
    "on: $p99_on ms, $extra_on % extra" "off: $p99_off ms" "${gain}×" \
    "$(met "${gain:-n/a} >= 5 && ${extra_on:-n/a} <= 15")"
}
