# shellcheck shell=bash
# Section `serve`: what `rpcroute serve` costs in front of an upstream, next to nginx as a reverse
# proxy. wrk (1 thread, fixed duration, keep-alive) at each of CONNECTIONS, for eth_blockNumber (the
# upstream's fixed 39 B answer) and eth_getLogs answered with the 200 KB body: direct to the
# upstream, through nginx (1 worker, keep-alive pool), through the sidecar. Requests/s, p50/p99/max
# and the CPU time per request of the process doing the work; ROUNDS interleaved rounds per cell.
# PROFILE=1 adds a perf profile of the sidecar. BASELINE_BIN (set by `run --baseline REV`) adds a
# fourth path, the same sidecar built from another commit, interleaved with the others: a
# before/after in one run. Sourced by tests/perf/run.

section_serve() {
  ensure_upstream
  ensure_proxy
  start_sidecar sidecar
  [[ -z ${BASELINE_BIN:-} ]] || start_sidecar baseline "$BASELINE_BIN"
  # A wrong answer is reported, not fatal: the tables then show the errors it causes.
  local answer
  answer=$(post_any "http://127.0.0.1:$sidecar_port/rpc/local" "$bn_req")
  [[ $(jq -r .result <<<"$answer" 2>/dev/null) == 0x1 && $(jq -r .id <<<"$answer" 2>/dev/null) == 1 ]] ||
    warn "serve: unexpected eth_blockNumber answer through the sidecar: ${answer:0:300}"
  answer=$(post_any "http://127.0.0.1:$sidecar_port/rpc/large" "$logs_req")
  [[ ${#answer} -ge $((large_bytes - 16)) ]] ||
    warn "serve: the 200 KB answer through the sidecar is ${#answer} bytes: ${answer:0:300}"

  wrk_script "$work/bn.lua" "$bn_req"
  wrk_script "$work/logs.lua" "$logs_req"
  local -A url=(
    [direct,bn]=http://127.0.0.1:$upstream_port/
    [nginx,bn]=http://127.0.0.1:$proxy_port/
    [sidecar,bn]=http://127.0.0.1:$sidecar_port/rpc/local
    [direct,large]=http://127.0.0.1:$upstream_port/large
    [nginx,large]=http://127.0.0.1:$proxy_port/large
    [sidecar,large]=http://127.0.0.1:$sidecar_port/rpc/large
    [baseline,bn]=http://127.0.0.1:${baseline_port:-0}/rpc/local
    [baseline,large]=http://127.0.0.1:${baseline_port:-0}/rpc/large
  )
  local -A lua=([bn]=$work/bn.lua [large]=$work/logs.lua)
  local -A body_name=([bn]="eth_blockNumber (39 B answer)" [large]="eth_getLogs, $((large_bytes / 1024)) KB answer")
  local -A target_name=([direct]="direct (upstream)" [nginx]="through nginx" [sidecar]="through rpcroute serve"
    [baseline]="through rpcroute serve, baseline ${BASELINE_NAME:-}")
  local targets=(direct nginx sidecar)
  [[ -z ${BASELINE_BIN:-} ]] || targets+=(baseline)
  local jsonl=$work/serve.jsonl
  : >"$jsonl"

  # The process doing the work: the upstream's worker for direct runs, the proxy's worker through
  # nginx, the sidecar. Its CPU per request is steadier than requests/s on a busy machine.
  local -A server_pid=([direct]=$(nginx_worker "$upstream_pid") [nginx]=$(nginx_worker "$proxy_pid") [sidecar]=$sidecar_pid
    [baseline]=${baseline_pid:-0})

  # Each cell (body, connections) runs ROUNDS rounds, the three paths interleaved within a round, so
  # that a change in the machine's load hits all three alike.
  local body t c r line cpu0 cpu1 load1
  for body in bn large; do
    for t in "${targets[@]}"; do
      say "serve: warm-up $t, $body"
      run_wrk "${url[$t,$body]}" "${lua[$body]}" 64 1 "$work/wrk.warm.$t.$body.txt" >/dev/null
    done
    for c in "${connections[@]}"; do
      for ((r = 1; r <= rounds; r++)); do
        for t in "${targets[@]}"; do
          say "serve: wrk ${duration}s, $t, $body, $c connections, round $r/$rounds"
          cpu0=$(cpu_ticks "${server_pid[$t]}")
          line=$(run_wrk "${url[$t,$body]}" "${lua[$body]}" "$c" "$duration" "$work/wrk.$t.$body.$c.$r.txt")
          cpu1=$(cpu_ticks "${server_pid[$t]}")
          load1=$(cut -d' ' -f1 /proc/loadavg)
          jq -c --arg t "$t" --arg b "$body" --argjson c "$c" --argjson r "$r" --argjson cpu "$(((cpu1 - cpu0) * 1000000 / clk_tck))" \
            --argjson load "$load1" '. + {target: $t, body: $b, conns: $c, round: $r, cpu_us: $cpu, load: $load}' <<<"$line" >>"$jsonl"
        done
      done
    done
  done
  # One line per cell: requests/s over all rounds, the median round's p50 and p99, the largest max,
  # server CPU per request over all rounds.
  local agg=$work/serve.agg.jsonl
  jq -s -c '
    def median: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
    group_by([.target, .body, .conns])[]
    | map(select((.requests // 0) > 0)) as $ok
    | {target: .[0].target, body: .[0].body, conns: .[0].conns, rounds: length, ok_rounds: ($ok | length),
       requests: ($ok | map(.requests) | add),
       rps: (if ($ok | length) > 0 then ($ok | map(.requests) | add) / ($ok | map(.duration_us) | add) * 1e6 else null end),
       p50: ($ok | map(.p50) | median), p99: ($ok | map(.p99) | median), max: ($ok | map(.max) | max),
       p50_best: ($ok | map(.p50) | min),
       status: ($ok | map(.status) | add), sock: ($ok | map(.connect + .read + .write + .timeout) | add),
       cpu_per_req: (if ($ok | length) > 0 then ($ok | map(.cpu_us) | add) / ($ok | map(.requests) | add) else null end),
       load: (map(.load) | max)}' "$jsonl" >"$agg"

  local profile_notes=""
  if [[ ${PROFILE:-0} == 1 ]]; then
    profile_sidecar >"$work/profile.md"
    profile_notes=$(cat "$work/profile.md")
  fi
  stop_pid "$sidecar_pid"
  [[ -z ${BASELINE_BIN:-} ]] || stop_pid "$baseline_pid"

  # ---- figures ----
  get() { # TARGET BODY CONNS FIELD
    jq -r --arg t "$1" --arg b "$2" --argjson c "$3" --arg f "$4" \
      'select(.target == $t and .body == $b and .conns == $c) | .[$f] // "n/a"' "$agg" | head -1
  }
  rps() { get "$1" "$2" "$3" rps; }
  cpu_per_req() { # TARGET BODY CONNS → µs of the server's CPU per request
    local v
    v=$(get "$1" "$2" "$3" cpu_per_req)
    awk -v v="$v" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else printf "%.1f µs", v }'
  }
  errors() { # TARGET BODY CONNS → "non-2xx / socket", and failed rounds
    jq -r --arg t "$1" --arg b "$2" --argjson c "$3" \
      'select(.target == $t and .body == $b and .conns == $c) | "\(.status // "n/a") / \(.sock // "n/a")\(if .ok_rounds < .rounds then " (wrk failed in \(.rounds - .ok_rounds) of \(.rounds) rounds)" else "" end)"' \
      "$agg" | head -1
  }

  {
    echo "## Sidecar throughput and latency (wrk)"
    echo
    echo "wrk $(wrk -v 2>&1 | head -1 | cut -d' ' -f2), 1 thread, keep-alive, POST \`$bn_req\` (or eth_getLogs for the 200 KB answer), after a 1 s warm-up per path."
    echo "Each row: $rounds round(s) of ${duration} s, the ${#targets[@]} paths interleaved within each round; requests/s over all rounds, p50 and p99 the median round's, max the largest."
    echo "Upstream: nginx, 1 worker, a fixed body / static files. Reference proxy: nginx, 1 worker, \`keepalive 64\` upstream pool, HTTP/1.1, \`proxy_buffers 16 16k\`."
    echo "Sidecar: \`rpcroute serve --no-probe --no-state\`, one provider per chain. Server CPU per request: user + system time of the process doing the work (upstream worker, proxy worker, sidecar) over the run / requests."
    echo
    for body in bn large; do
      echo "### ${body_name[$body]}"
      echo
      echo "| path | conns | requests/s | p50 | p99 | max | errors (non-2xx / socket) | server CPU per request | load (1 min, highest) |"
      echo "|:---|---:|---:|---:|---:|---:|---:|---:|---:|"
      for c in "${connections[@]}"; do
        for t in "${targets[@]}"; do
          echo "| ${target_name[$t]} | $c | $(num "$(rps "$t" "$body" "$c")") | $(us "$(get "$t" "$body" "$c" p50)") | $(us "$(get "$t" "$body" "$c" p99)") | $(us "$(get "$t" "$body" "$c" max)") | $(errors "$t" "$body" "$c") | $(cpu_per_req "$t" "$body" "$c") | $(get "$t" "$body" "$c" load) |"
        done
      done
      echo
    done
    if [[ -n $profile_notes ]]; then
      echo "### Profile of the sidecar (PROFILE=1: perf record -e cpu-clock -g, separate ${duration} s runs at 64 connections)"
      echo
      echo "On a paravirtualised kernel, time spent with interrupts off is charged to \`pvm_irq_enable\` (or"
      echo "\`native_irq_enable\`); the inclusive system-call figures say which calls it belongs to."
      echo
      echo "$profile_notes"
      echo
    fi
  } >"$out/serve.md"

  # ---- targets ----
  local has64=0 has1=0
  for c in "${connections[@]}"; do
    [[ $c == 64 ]] && has64=1
    [[ $c == 1 ]] && has1=1
  done
  # Requests/s and latencies of error answers compare nothing: such cells are warned about and their
  # targets judged n/a.
  local bad
  bad=$(jq -r 'select((.status // 0) > 0 or (.sock // 0) > 0 or .ok_rounds < .rounds) | "\(.target) \(.body) \(.conns) connections: \(.status // "n/a") non-2xx, \(.sock // "n/a") socket errors"' "$agg")
  while IFS= read -r line; do
    [[ -n $line ]] && warn "serve: errors in $line (its figures are not comparable)"
  done <<<"$bad"
  clean() { # TARGET BODY CONNS → true when the cell had no errors
    [[ $(jq -r --arg t "$1" --arg b "$2" --argjson c "$3" \
      'select(.target == $t and .body == $b and .conns == $c) | (.status // 1) == 0 and (.sock // 1) == 0 and .ok_rounds == .rounds' \
      "$agg" | head -1) == true ]]
  }
  judged() { # VERDICT TARGET BODY CONNS…: the verdict, or n/a when a cell involved had errors
    local v=$1 t b c
    shift
    while (($#)); do
      t=$1 b=$2 c=$3
      shift 3
      clean "$t" "$b" "$c" || { echo "n/a: errors in the $t run"; return; }
    done
    echo "$v"
  }
  if ((has64)); then
    local rps_sc rps_ng p99_sc p99_ng r
    rps_sc=$(rps sidecar bn 64); rps_ng=$(rps nginx bn 64)
    p99_sc=$(get sidecar bn 64 p99); p99_ng=$(get nginx bn 64 p99)
    r=$(ratio "$rps_sc" "$rps_ng")
    target_row "sidecar requests/s ≥ 1.0 × nginx's, 64 connections, eth_blockNumber" "$(num "$rps_sc") req/s" \
      "nginx $(num "$rps_ng") req/s" "${r}×" "$(judged "$(met "$r >= 1.0")" sidecar bn 64 nginx bn 64)"
    r=$(ratio "$p99_sc" "$p99_ng")
    target_row "sidecar p99 ≤ nginx's, 64 connections, eth_blockNumber" "$(us "$p99_sc")" "nginx $(us "$p99_ng")" "${r}×" \
      "$(judged "$(met "$p99_sc <= $p99_ng")" sidecar bn 64 nginx bn 64)"
    rps_sc=$(rps sidecar large 64); rps_ng=$(rps nginx large 64)
    p99_sc=$(get sidecar large 64 p99); p99_ng=$(get nginx large 64 p99)
    figure_row "sidecar requests/s, 64 connections, 200 KB answers" "$(num "$rps_sc") req/s" "nginx $(num "$rps_ng") req/s" \
      "$(ratio "$rps_sc" "$rps_ng")×"
    figure_row "sidecar p99, 64 connections, 200 KB answers" "$(us "$p99_sc")" "nginx $(us "$p99_ng")" "$(ratio "$p99_sc" "$p99_ng")×"
    figure_row "proxy CPU per request, 64 connections, eth_blockNumber" "$(cpu_per_req sidecar bn 64)" \
      "nginx $(cpu_per_req nginx bn 64)" ""
    figure_row "proxy CPU per request, 64 connections, 200 KB answers" "$(cpu_per_req sidecar large 64)" \
      "nginx $(cpu_per_req nginx large 64)" ""
    if [[ -n ${BASELINE_BIN:-} ]]; then
      local rps_base
      rps_sc=$(rps sidecar bn 64); rps_base=$(rps baseline bn 64)
      r=$(ratio "$rps_sc" "$rps_base")
      target_row "sidecar requests/s within 3 % of the baseline ${BASELINE_NAME:-}, 64 connections, eth_blockNumber" \
        "$(num "$rps_sc") req/s" "baseline $(num "$rps_base") req/s" "${r}×" \
        "$(judged "$(met "$r >= 0.97")" sidecar bn 64 baseline bn 64)"
      figure_row "sidecar CPU per request vs the baseline, 64 connections, eth_blockNumber" \
        "$(cpu_per_req sidecar bn 64)" "baseline $(cpu_per_req baseline bn 64)" ""
      rps_sc=$(rps sidecar large 64); rps_base=$(rps baseline large 64)
      figure_row "sidecar requests/s vs the baseline, 64 connections, 200 KB answers" "$(num "$rps_sc") req/s" \
        "baseline $(num "$rps_base") req/s" "$(ratio "$rps_sc" "$rps_base")×"
    fi
  fi
  if ((has1)); then
    # The added p50 from the median rounds; on a busy machine also from each path's best round (the
    # one the rest of the machine disturbed least). A proxy cannot answer faster than its upstream,
    # so a negative figure is the machine's noise: the verdict is then inconclusive.
    local added_sc added_ng best_sc best_ng verdict
    added() { awk -v a="$(get "$1" bn 1 "$2")" -v b="$(get direct bn 1 "$2")" 'BEGIN { if (a == "n/a" || b == "n/a") print "n/a"; else print a - b }'; }
    added_sc=$(added sidecar p50); added_ng=$(added nginx p50)
    best_sc=$(added sidecar p50_best); best_ng=$(added nginx p50_best)
    verdict=$(judged "$(met "$added_sc <= 60")" sidecar bn 1 direct bn 1)
    if [[ $verdict != n/a* ]] && awk -v a="$added_sc" -v b="$added_ng" 'BEGIN { exit !(a < 0 || b < 0) }'; then
      verdict="inconclusive: a proxy measured faster than direct (noise)"
    fi
    local best_note=""
    ((rounds > 1)) && best_note="; best rounds: $(num "$best_sc") µs ($(us "$(get sidecar bn 1 p50_best)") vs $(us "$(get direct bn 1 p50_best)"))"
    target_row "added p50 over direct ≤ 60 µs, 1 connection, eth_blockNumber" \
      "$(num "$added_sc") µs ($(us "$(get sidecar bn 1 p50)") vs direct $(us "$(get direct bn 1 p50)"))$best_note" \
      "nginx adds $(num "$added_ng") µs$( ((rounds > 1)) && echo " (best rounds: $(num "$best_ng") µs)")" "" "$verdict"
    # Same hops (client → proxy → upstream), so steadier than against direct on a busy machine.
    figure_row "sidecar p50 − nginx p50, 1 connection, eth_blockNumber" \
      "$(awk -v a="$(get sidecar bn 1 p50)" -v b="$(get nginx bn 1 p50)" 'BEGIN { if (a == "n/a" || b == "n/a") print "n/a"; else printf "%+d µs", a - b }')" \
      "nginx p50 $(us "$(get nginx bn 1 p50)")" "$(ratio "$(get sidecar bn 1 p50)" "$(get nginx bn 1 p50)")×"
  fi
}

# perf record of the sidecar during two more 64-connection runs; prints Markdown.
profile_sidecar() {
  if ! command -v perf >/dev/null || ! perf stat -e cpu-clock true >/dev/null 2>&1; then
    echo "(perf is missing or cannot sample here; no profile taken)"
    return
  fi
  local body rec
  for body in bn large; do
    say "serve: perf record of the sidecar, $body, 64 connections, ${duration}s"
    perf record -e cpu-clock -F 999 -g -p "$sidecar_pid" -o "$work/perf.$body.data" -- sleep "$duration" \
      >"$work/perf.$body.log" 2>&1 &
    rec=$!
    pids+=("$rec")
    run_wrk "${url[sidecar,$body]}" "${lua[$body]}" 64 "$duration" "$work/wrk.profile.$body.txt" >/dev/null
    wait "$rec" 2>/dev/null || true
    (
      set +o pipefail  # head closes the pipes early
      echo "#### ${body_name[$body]}"
      echo
      echo '```'
      echo "by library (self):"
      perf report -i "$work/perf.$body.data" --no-children --sort dso -g none --stdio 2>/dev/null |
        grep -E '^ +[0-9]' | head -6
      echo
      echo "top functions (self):"
      perf report -i "$work/perf.$body.data" --no-children --sort dso,sym -g none --stdio 2>/dev/null |
        grep -E '^ +[0-9]' | sed -E 's/<.*//' | cut -c1-140 | head -15
      echo
      echo "system calls (inclusive):"
      perf report -i "$work/perf.$body.data" --children --sort sym -g none --stdio 2>/dev/null |
        grep -E '\[k\] (__x64_sys_[a-z_]+|__sys_(sendmsg|recvmsg)|exc_page_fault|schedule)$' | head -12
      echo '```'
      echo
    )
  done
}
