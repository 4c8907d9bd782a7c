# shellcheck shell=bash
# Section `ablation`: what each fast path of the sidecar is worth, switched off one at a time in the
# same run (issue 16). wrk (1 thread, keep-alive) posts eth_blockNumber through `rpcroute serve` at 64
# connections and at 1, against the nginx upstream's fixed 39 B answer, for each variant:
#   all on          the default binary, no switch
#   fast_http1=0    RPCROUTE_FAST_HTTP1=0: Beast's parser and serializer instead of the hand-written
#                   HTTP/1 request reader and response head
#   plain_json=0    RPCROUTE_PLAIN_JSON=0: simdjson for every body instead of the plain JSON path
#   http_client=curl RPCROUTE_HTTP_CLIENT=curl: libcurl to the upstream instead of the native client
#   caching_new=OFF the same sources built with -DRPCROUTE_CACHING_NEW=OFF (build-perf/no-caching-new):
#                   the C++ runtime's operator new/delete instead of rpcroute/alloc.hpp's
# The environment switches are read once when the sidecar starts ("0" turns a path off); a binary that
# does not know one simply ignores it (the row then measures the default). Every variant is its own
# sidecar, started before the first run; within a round the variants run one after another, so a
# change in the machine's load hits them alike. Requests/s over all rounds and the ratio to "all on";
# server CPU per request is the steadier figure on a busy machine. Sourced by tests/perf/run.

ablation_variants=(all_on fast_http1_off plain_json_off curl caching_new_off)
declare -A ablation_env=(
  [all_on]="" [fast_http1_off]="RPCROUTE_FAST_HTTP1=0" [plain_json_off]="RPCROUTE_PLAIN_JSON=0"
  [curl]="RPCROUTE_HTTP_CLIENT=curl" [caching_new_off]=""
)
declare -A ablation_name=(
  [all_on]="all on" [fast_http1_off]="\`RPCROUTE_FAST_HTTP1=0\`" [plain_json_off]="\`RPCROUTE_PLAIN_JSON=0\`"
  [curl]="\`RPCROUTE_HTTP_CLIENT=curl\`" [caching_new_off]="\`-DRPCROUTE_CACHING_NEW=OFF\` build"
)

# The second binary, built from the same sources as the first (the work tree, or the --rev export)
# with the caching operator new left out. Called by tests/perf/run after its own build.
ablation_build() { # SOURCE_DIR BUILD_DIR → ablation_bin
  local src=$1 dir=$2 log=$2/perf-build.log
  ablation_bin=${ABLATION_BIN:-$dir/cli/rpcroute}
  [[ -z ${ABLATION_BIN:-} ]] || return 0
  if ((!skip_build)); then
    mkdir -p "$dir"
    say "building rpcroute with -DRPCROUTE_CACHING_NEW=OFF in ${dir#"$repo"/} (log in ${log#"$repo"/})"
    if ! { cmake -S "$src" -B "$dir" -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release \
      -DRPCROUTE_BUILD_TESTS=OFF -DRPCROUTE_CACHING_NEW=OFF && cmake --build "$dir" -j2 --target rpcroute; } >"$log" 2>&1; then
      tail -30 "$log" >&2
      [[ -x $ablation_bin ]] || die "the -DRPCROUTE_CACHING_NEW=OFF build failed (${log#"$repo"/})"
      warn "ablation: the -DRPCROUTE_CACHING_NEW=OFF rebuild failed; its row measures a stale binary"
    fi
  fi
  [[ -x $ablation_bin ]] || die "$ablation_bin not found (build it, or give ABLATION_BIN)"
}

section_ablation() {
  ensure_upstream
  local v env bin
  for v in "${ablation_variants[@]}"; do
    bin=$rpcroute_bin
    [[ $v != caching_new_off ]] || bin=$ablation_bin
    env=${ablation_env[$v]}
    # shellcheck disable=SC2086 # the switch is one VAR=VALUE word, or none
    start_sidecar "ab_$v" "$bin" $env
    local answer port_var=ab_${v}_port
    answer=$(post_any "http://127.0.0.1:${!port_var}/rpc/local" "$bn_req")
    [[ $(jq -r .result <<<"$answer" 2>/dev/null) == 0x1 ]] ||
      warn "ablation: unexpected eth_blockNumber answer from the $v sidecar: ${answer:0:300}"
  done
  wrk_script "$work/ab.lua" "$bn_req"
  local jsonl=$work/ablation.jsonl c r line cpu0 cpu1 pid_var port_var conns=()
  : >"$jsonl"
  for c in "${connections[@]}"; do [[ $c != 64 && $c != 1 ]] || conns+=("$c"); done
  ((${#conns[@]})) || conns=(64 1)
  for v in "${ablation_variants[@]}"; do
    port_var=ab_${v}_port
    say "ablation: warm-up $v"
    run_wrk "http://127.0.0.1:${!port_var}/rpc/local" "$work/ab.lua" 64 1 "$work/wrk.ab.warm.$v.txt" >/dev/null
  done
  for c in "${conns[@]}"; do
    for ((r = 1; r <= rounds; r++)); do
      for v in "${ablation_variants[@]}"; do
        port_var=ab_${v}_port pid_var=ab_${v}_pid
        say "ablation: wrk ${duration}s, $v, $c connections, round $r/$rounds"
        cpu0=$(cpu_ticks "${!pid_var}")
        line=$(run_wrk "http://127.0.0.1:${!port_var}/rpc/local" "$work/ab.lua" "$c" "$duration" "$work/wrk.ab.$v.$c.$r.txt")
        cpu1=$(cpu_ticks "${!pid_var}")
        jq -c --arg v "$v" --argjson c "$c" --argjson cpu "$(((cpu1 - cpu0) * 1000000 / clk_tck))" \
          '. + {variant: $v, conns: $c, cpu_us: $cpu}' <<<"$line" >>"$jsonl"
      done
    done
  done
  for v in "${ablation_variants[@]}"; do
    pid_var=ab_${v}_pid
    stop_pid "${!pid_var}"
  done
  ablation_report "$jsonl" "${conns[@]}"
}

ablation_report() { # JSONL CONNS...
  local jsonl=$1 agg=$work/ablation.agg.jsonl c v base rps
  shift
  jq -s -c '
    def median: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
    group_by([.variant, .conns])[]
    | map(select((.requests // 0) > 0)) as $ok
    | {variant: .[0].variant, conns: .[0].conns, rounds: length, ok_rounds: ($ok | length),
       rps: (if ($ok | length) > 0 then ($ok | map(.requests) | add) / ($ok | map(.duration_us) | add) * 1e6 else null end),
       p50: ($ok | map(.p50) | median), p99: ($ok | map(.p99) | median),
       errors: ($ok | map(.status + .connect + .read + .write + .timeout) | add),
       cpu_per_req: (if ($ok | length) > 0 then ($ok | map(.cpu_us) | add) / ($ok | map(.requests) | add) else null end)}' \
    "$jsonl" >"$agg"
  get() { jq -r --arg v "$1" --argjson c "$2" --arg f "$3" 'select(.variant == $v and .conns == $c) | .[$f] // "n/a"' "$agg" | head -1; }
  {
    echo "## Ablation: the sidecar with each fast path off (wrk, eth_blockNumber)"
    echo
    echo "wrk 1 thread, keep-alive, POST \`$bn_req\` through \`rpcroute serve --no-probe --no-state\` to the nginx upstream's fixed 39 B answer; $rounds round(s) of ${duration} s per row, the variants interleaved within each round. Ratio: requests/s over \"all on\" at the same connection count (below 1: the path off costs throughput)."
    echo
    echo "| variant | conns | requests/s | ratio to all on | p50 | p99 | errors | sidecar CPU per request |"
    echo "|:---|---:|---:|---:|---:|---:|---:|---:|"
    for c in "$@"; do
      base=$(get all_on "$c" rps)
      for v in "${ablation_variants[@]}"; do
        rps=$(get "$v" "$c" rps)
        echo "| ${ablation_name[$v]} | $c | $(num "$rps") | $(ratio "$rps" "$base")× | $(us "$(get "$v" "$c" p50)") | $(us "$(get "$v" "$c" p99)") | $(get "$v" "$c" errors) | $(awk -v x="$(get "$v" "$c" cpu_per_req)" 'BEGIN { if (x == "n/a" || x == "") print "n/a"; else printf "%.1f µs", x }') |"
      done
    done
    echo
  } >"$out/ablation.md"
  for v in "${ablation_variants[@]}"; do
    [[ $v == all_on ]] && continue
    rps=$(get "$v" 64 rps)
    base=$(get all_on 64 rps)
    [[ $rps == n/a || -z $rps ]] && continue
    figure_row "ablation: sidecar requests/s with ${ablation_name[$v]}, 64 connections, eth_blockNumber" \
      "$(num "$rps") req/s" "all on $(num "$base") req/s" "$(ratio "$rps" "$base")×"
  done
}
