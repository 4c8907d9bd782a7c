# shellcheck shell=bash
# Section `call`: one `rpcroute call` next to one plain curl request, as whole processes
# (hyperfine, RUNS runs after 10 warm-ups), against one local anvil node:
#   curl                              the same request, no routing
#   rpcroute call --no-state          process start, profile, routing, one upstream request
#   rpcroute call, 100-sample state   the same plus lock, read, merge, write and fsync of a state file
#                                     holding 100 samples (restored before every run)
# Sourced by tests/perf/run.

section_call() {
  ensure_anvil
  local profile=$work/call.yaml seed=$work/call-seed.json state=$work/call-state.json
  cat >"$profile" <<EOF
name: perf
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: anvil, url: "http://127.0.0.1:$anvil_port" }
EOF
  # 100 samples, recorded by bench as live traffic would be.
  "${client_cpu[@]}" "$rpcroute_bin" bench --profile "$profile" --state "$seed" --methods eth_blockNumber \
    --requests 100 --concurrency 1 >"$work/call-seed.log" 2>&1 || { cat "$work/call-seed.log" >&2; die "could not seed the state file"; }
  local samples
  samples=$(jq '[.providers[].methods[]?.samples | length] | add // 0' "$seed")
  # Fail now, with the message, rather than inside hyperfine.
  "$rpcroute_bin" call --profile "$profile" --no-state eth_blockNumber >/dev/null
  cp "$seed" "$state"
  "$rpcroute_bin" call --profile "$profile" --state "$state" eth_blockNumber >/dev/null

  local shell_opt=(-N)
  if ! hyperfine --help 2>/dev/null | grep -qE '^\s+-N\b'; then
    shell_opt=()
    say "call: this hyperfine has no -N; times include a shell start"
  fi
  local names=("curl" "rpcroute call --no-state" "rpcroute call, 100-sample state")
  local commands=(
    "curl -s -X POST -H 'content-type: application/json' --data '$bn_req' http://127.0.0.1:$anvil_port"
    "$rpcroute_bin call --profile $profile --no-state eth_blockNumber"
    "$rpcroute_bin call --profile $profile --state $state eth_blockNumber"
  )
  local args=("${shell_opt[@]}" --warmup 10 --runs "$runs" --style basic --prepare "cp $seed $state"
    --export-json "$work/hyperfine.json" --export-markdown "$work/hyperfine.md")
  local i
  for i in "${!names[@]}"; do args+=(-n "${names[$i]}" "${commands[$i]}"); done
  say "call: hyperfine, $runs runs each"
  local load_before
  load_before=$(loadavg)
  "${client_cpu[@]}" hyperfine "${args[@]}" >"$work/hyperfine.log" 2>&1 || { cat "$work/hyperfine.log" >&2; die "hyperfine failed"; }

  stat_of() { jq -r --arg n "$1" --arg f "$2" '.results[] | select(.command == $n) | .[$f]' "$work/hyperfine.json"; }
  cpu_of() { jq -r --arg n "$1" '.results[] | select(.command == $n) | .user + .system' "$work/hyperfine.json"; }
  ms() { awk -v s="$1" 'BEGIN { if (s == "" || s == "null") print "n/a"; else printf "%.1f ms", s * 1000 }'; }
  local curl_s plain_s state_s r
  curl_s=$(stat_of curl median); plain_s=$(stat_of "rpcroute call --no-state" median)
  state_s=$(stat_of "rpcroute call, 100-sample state" median)
  {
    echo "## rpcroute call vs curl (hyperfine)"
    echo
    echo "One \`eth_blockNumber\` against one local anvil node ($("$anvil_bin" --version | head -1)); $(hyperfine --version), ${shell_opt[*]:+${shell_opt[*]} }--warmup 10 --runs $runs,"
    echo "$(curl --version | head -1 | cut -d' ' -f1-2). The state file is restored to its $samples samples before every run (\`--prepare\`). Load average before: $load_before."
    echo
    cat "$work/hyperfine.md"
    echo
    echo "| Command | Median | CPU (user + system), mean |"
    echo "|:---|---:|---:|"
    for i in "${!names[@]}"; do
      echo "| \`${names[$i]}\` | $(ms "$(stat_of "${names[$i]}" median)") | $(ms "$(cpu_of "${names[$i]}")") |"
    done
    echo
    echo "The state file adds a lock, a read, a merge and an atomic rewrite (with fsync) per call: $(awk -v a="$state_s" -v b="$plain_s" 'BEGIN { printf "%.1f ms", (a - b) * 1000 }') here."
    echo
  } >"$out/call.md"

  r=$(ratio "$plain_s" "$curl_s")
  target_row "\`rpcroute call\` median wall time ≤ 1.2 × curl's (--no-state)" "$(ms "$plain_s")" "curl $(ms "$curl_s")" "${r}×" "$(met "$r <= 1.2")"
  r=$(ratio "$state_s" "$curl_s")
  target_row "\`rpcroute call\` median wall time ≤ 1.2 × curl's (${samples}-sample state file)" "$(ms "$state_s")" "curl $(ms "$curl_s")" "${r}×" "$(met "$r <= 1.2")"
  local cpu_plain cpu_curl
  cpu_plain=$(cpu_of "rpcroute call --no-state"); cpu_curl=$(cpu_of curl)
  figure_row "\`rpcroute call --no-state\` CPU time (user + system) per call" "$(ms "$cpu_plain")" "curl $(ms "$cpu_curl")" \
    "$(ratio "$cpu_plain" "$cpu_curl")×"
}
