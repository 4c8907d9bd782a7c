# shellcheck shell=bash
# Section `cache` (issue 19): cached by-hash reads through `rpcroute serve` next to nginx proxying
# the same request to the static upstream. The sidecar keeps eth_getBlockByHash once non-null (the
# upstream answers every call with "0x1"); one warm-up request fills the cache, then wrk (1 thread,
# keep-alive) at 64 connections, ROUNDS interleaved rounds. The issue wants ≥ 2× nginx's
# requests/s. Also eth_blockNumber through the sidecar with the cache on (default) and off
# (--cache-mb 0): the hot path must not get slower for an uncached method. Sourced by
# tests/perf/run.

section_cache() {
  ensure_upstream
  ensure_proxy
  start_sidecar cache_on
  [[ -f $work/serve.yaml ]] || write_serve_profile
  sed 's/^cache: .*/cache: { max_mb: 0, coalesce: false }/' "$work/serve.yaml" >"$work/serve-nocache.yaml"
  sidecar_profile=$work/serve-nocache.yaml start_sidecar cache_off
  local hash_req='{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByHash","params":["0x88e96d4537bea4d9c05d12549907b32561d3bf31f45aae734cdc119f13406cb6",false]}'
  local answer
  answer=$(post_any "http://127.0.0.1:$cache_on_port/rpc/local" "$hash_req")
  [[ $(jq -r .result <<<"$answer" 2>/dev/null) == 0x1 ]] ||
    warn "cache: unexpected eth_getBlockByHash answer through the sidecar: ${answer:0:300}"
  curl -s -D "$work/cache.hdrs" -o /dev/null -X POST -H 'content-type: application/json' --data "$hash_req" \
    "http://127.0.0.1:$cache_on_port/rpc/local"
  grep -qi '^x-rpcroute-cache: HIT' "$work/cache.hdrs" || warn "cache: the second eth_getBlockByHash was not a HIT"
  wrk_script "$work/hash.lua" "$hash_req"
  wrk_script "$work/bn.lua" "$bn_req"
  local -A url=(
    [nginx,hash]=http://127.0.0.1:$proxy_port/
    [hit,hash]=http://127.0.0.1:$cache_on_port/rpc/local
    [on,bn]=http://127.0.0.1:$cache_on_port/rpc/local
    [off,bn]=http://127.0.0.1:$cache_off_port/rpc/local
  )
  local -A lua=([hash]=$work/hash.lua [bn]=$work/bn.lua)
  local cells=("nginx hash" "hit hash" "on bn" "off bn") cell t b r line
  local jsonl=$work/cache.jsonl
  : >"$jsonl"
  for cell in "${cells[@]}"; do
    read -r t b <<<"$cell"
    run_wrk "${url[$t,$b]}" "${lua[$b]}" 64 1 "$work/wrk.cache.warm.$t.txt" >/dev/null
  done
  for ((r = 1; r <= rounds; r++)); do
    for cell in "${cells[@]}"; do
      read -r t b <<<"$cell"
      say "cache: wrk ${duration}s, $t $b, 64 connections, round $r/$rounds"
      line=$(run_wrk "${url[$t,$b]}" "${lua[$b]}" 64 "$duration" "$work/wrk.cache.$t.$b.$r.txt")
      jq -c --arg t "$t" '. + {target: $t}' <<<"$line" >>"$jsonl"
    done
  done
  stop_pid "$cache_on_pid"
  stop_pid "$cache_off_pid"
  rps_of() { jq -s -r --arg t "$1" 'map(select(.target == $t and (.requests // 0) > 0)) | if length == 0 then "n/a" else (map(.requests) | add) / (map(.duration_us) | add) * 1e6 end' "$jsonl"; }
  errs_of() { jq -s -r --arg t "$1" 'map(select(.target == $t)) | map((.status // 1) + (.connect // 0) + (.read // 0) + (.write // 0) + (.timeout // 0)) | add' "$jsonl"; }
  local hit nginx on off ratio_hit ratio_bn
  hit=$(rps_of hit); nginx=$(rps_of nginx); on=$(rps_of on); off=$(rps_of off)
  ratio_hit=$(ratio "$hit" "$nginx"); ratio_bn=$(ratio "$on" "$off")
  {
    echo "## Answer cache (issue 19)"
    echo
    echo "wrk, 1 thread, 64 connections, keep-alive, $rounds round(s) of ${duration} s, the paths interleaved; requests/s over all rounds."
    echo
    echo "| path | requests/s | errors |"
    echo "|:---|---:|---:|"
    echo "| eth_getBlockByHash through nginx (to the upstream) | $(num "$nginx") | $(errs_of nginx) |"
    echo "| eth_getBlockByHash through rpcroute serve, cache HIT | $(num "$hit") | $(errs_of hit) |"
    echo "| eth_blockNumber through rpcroute serve, cache on (32 MiB) | $(num "$on") | $(errs_of on) |"
    echo "| eth_blockNumber through rpcroute serve, cache off (max_mb: 0) | $(num "$off") | $(errs_of off) |"
    echo
  } >"$out/cache.md"
  target_row "cached by-hash reads ≥ 2 × nginx's requests/s, 64 connections" "$(num "$hit") req/s" \
    "nginx $(num "$nginx") req/s" "${ratio_hit}×" "$(met "$ratio_hit >= 2")"
  figure_row "eth_blockNumber with the cache on vs off, 64 connections" "$(num "$on") req/s" "off $(num "$off") req/s" \
    "${ratio_bn}×"
}
