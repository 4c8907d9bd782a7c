#!/usr/bin/env bash
# Soak (issue 6; not in CI): SOAK_REQUESTS (default 1 000 000) requests through `rpcroute serve` in
# front of an nginx upstream with a fixed body (the approach of tests/perf/harness.sh), and the
# sidecar's resident memory (VmRSS) after a warm-up and at the end. Fails (exit 1) when it grew by
# 5 % or more, or when a request failed; prints the figures either way.
#
#   tests/perf/soak.sh                      # 1 000 000 requests
#   SOAK_REQUESTS=200000 tests/perf/soak.sh # a shorter run
#
# The load: wrk, 16 connections, a mix of eth_blockNumber, eth_getBalance, eth_call (each id a new
# number) and eth_chainId (answered by the sidecar itself), run in rounds of about SOAK_ROUND_SECONDS
# (default 20) until SOAK_REQUESTS have been answered; VmRSS is sampled after every round. The
# sidecar keeps a state file (flushed as in production) and writes no request log.
# Environment: RPCROUTE_BIN (default build/cli/rpcroute), NGINX (default: nginx on PATH),
# SOAK_CONNECTIONS (16), SOAK_WARMUP_SECONDS (15), SOAK_MAX_GROWTH_PCT (5), KEEP_WORK=1 keeps the
# work folder.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
rpcroute_bin=${RPCROUTE_BIN:-$repo/build/cli/rpcroute}
nginx_bin=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
requests_goal=${SOAK_REQUESTS:-1000000}
round_seconds=${SOAK_ROUND_SECONDS:-20}
warmup_seconds=${SOAK_WARMUP_SECONDS:-15}
connections=${SOAK_CONNECTIONS:-16}
max_growth=${SOAK_MAX_GROWTH_PCT:-5}

say() { echo "soak: $*" >&2; }
die() {
  say "$*"
  exit 2
}

[[ -x $rpcroute_bin ]] || die "no $rpcroute_bin (build first)"
[[ -x $nginx_bin ]] || die "no nginx (apt-get install nginx-light)"
command -v wrk >/dev/null || die "no wrk (apt-get install wrk)"

work=$(mktemp -d /tmp/rpcroute-soak.XXXXXX)
chmod 755 "$work"
pids=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ ${KEEP_WORK:-0} == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; } # PID VmRSS|VmHWM → KiB
post() { curl -sf --max-time 10 -X POST -H 'content-type: application/json' --data "$2" "$1"; }
bn_req='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

# ---- nginx: POST / answers a fixed JSON-RPC result --------------------------------------------------
upstream_port=$(free_port)
mkdir -p "$work/nginx/logs" "$work/nginx/temp"
cat >"$work/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/temp/body;
  proxy_temp_path $work/nginx/temp/proxy;
  fastcgi_temp_path $work/nginx/temp/fastcgi;
  uwsgi_temp_path $work/nginx/temp/uwsgi;
  scgi_temp_path $work/nginx/temp/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {
    listen 127.0.0.1:$upstream_port backlog=4096;
    default_type application/json;
    location = / { return 200 '{"jsonrpc":"2.0","id":0,"result":"0x1"}'; }
  }
}
EOF
"$nginx_bin" -p "$work/nginx" -e "$work/nginx/logs/error.log" -c "$work/nginx/nginx.conf" </dev/null \
  >"$work/nginx/logs/stdout.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do post "http://127.0.0.1:$upstream_port/" "$bn_req" >/dev/null 2>&1 && break; sleep 0.05; done
post "http://127.0.0.1:$upstream_port/" "$bn_req" >/dev/null || die "nginx did not answer"

# ---- the sidecar ---------------------------------------------------------------------------------------
cat >"$work/soak.yaml" <<EOF
name: soak
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: nginx, url: "http://127.0.0.1:$upstream_port/" }
EOF
"$rpcroute_bin" serve --listen 127.0.0.1:0 --port-file "$work/sidecar.port" -p "$work/soak.yaml" \
  --state "$work/state.json" --no-probe </dev/null >"$work/sidecar.log" 2>&1 &
sidecar_pid=$!
pids+=("$sidecar_pid")
for _ in $(seq 200); do [[ -s $work/sidecar.port ]] && break; sleep 0.05; done
[[ -s $work/sidecar.port ]] || die "rpcroute serve did not start: $(cat "$work/sidecar.log")"
url=http://127.0.0.1:$(cat "$work/sidecar.port")/rpc/local
post "$url" "$bn_req" | grep -q '"result":"0x1"' || die "the sidecar does not answer through nginx"

# ---- the load ------------------------------------------------------------------------------------------
cat >"$work/load.lua" <<'LUA'
local bodies = {
  '{"jsonrpc":"2.0","id":%d,"method":"eth_blockNumber","params":[]}',
  '{"jsonrpc":"2.0","id":%d,"method":"eth_getBalance","params":["0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","latest"]}',
  '{"jsonrpc":"2.0","id":%d,"method":"eth_call","params":[{"to":"0x0000000000000000000000000000000000000001","data":"0x"},"latest"]}',
  '{"jsonrpc":"2.0","id":%d,"method":"eth_chainId","params":[]}',
}
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  n = 0; bad = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  n = n + 1
  return wrk.format(nil, nil, nil, string.format(bodies[(n % 4) + 1], n))
end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"result"', 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do b = b + t:get("bad") end
  local e = summary.errors
  io.write(string.format("SOAK requests=%d bad=%d errors=%d p99_us=%d\n", summary.requests, b,
    e.connect + e.read + e.write + e.timeout + e.status, latency:percentile(99)))
end
LUA

run_round() { # SECONDS → "requests bad errors p99_us"
  wrk -t2 -c"$connections" -d"$1"s --timeout 10s -s "$work/load.lua" "$url" >"$work/wrk.out" 2>&1 || true
  sed -n 's/^SOAK requests=\([0-9]*\) bad=\([0-9]*\) errors=\([0-9]*\) p99_us=\([0-9]*\).*/\1 \2 \3 \4/p' "$work/wrk.out" | grep . ||
    die "wrk failed: $(cat "$work/wrk.out")"
}

say "warm-up: ${warmup_seconds}s of the same load"
read -r warm_requests warm_bad warm_errors _ < <(run_round "$warmup_seconds")
sleep 1
rss_start=$(kib "$sidecar_pid" VmRSS)
say "warm-up: $warm_requests requests; VmRSS now $rss_start KiB"

total=0 bad=0 errors=0 rounds=0 samples="$rss_start" t0=$SECONDS p99=0
while ((total < requests_goal)); do
  read -r n b e p < <(run_round "$round_seconds")
  total=$((total + n)) bad=$((bad + b)) errors=$((errors + e)) rounds=$((rounds + 1))
  ((p > p99)) && p99=$p
  samples+=" $(kib "$sidecar_pid" VmRSS)"
  say "round $rounds: $n requests ($total / $requests_goal), VmRSS $(kib "$sidecar_pid" VmRSS) KiB"
done
elapsed=$((SECONDS - t0))
sleep 1
rss_end=$(kib "$sidecar_pid" VmRSS)
hwm=$(kib "$sidecar_pid" VmHWM)
kill -0 "$sidecar_pid" || die "the sidecar died"

growth=$(awk -v a="$rss_start" -v b="$rss_end" 'BEGIN { printf "%.2f", (b - a) * 100 / a }')
cat <<EOF
soak: rpcroute serve → nginx (fixed body), $connections connections
  requests         $total in ${elapsed}s ($((total / (elapsed > 0 ? elapsed : 1))) per second), after $warm_requests warm-up requests
  failed           $bad not HTTP 200 with a result, $errors socket errors or timeouts (warm-up: $warm_bad, $warm_errors)
  worst round p99  $((p99 / 1000)) ms
  VmRSS start      $rss_start KiB (after the warm-up)
  VmRSS end        $rss_end KiB
  growth           $growth % (limit < $max_growth %)
  VmHWM            $hwm KiB
  VmRSS by round   $samples
EOF
status=0
if awk -v g="$growth" -v m="$max_growth" 'BEGIN { exit !(g >= m) }'; then
  say "FAIL: VmRSS grew by $growth % (limit $max_growth %)"
  status=1
fi
if ((bad + errors > 0)); then
  say "FAIL: $bad failed answers, $errors socket errors"
  status=1
fi
exit "$status"
