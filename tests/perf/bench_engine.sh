#!/usr/bin/env bash
# Throughput of the bench engine (one io_context, one curl multi handle, one thread): how many
# requests per second `rpcroute bench` sustains with 64 in flight against an upstream that costs
# next to nothing. The upstream is nginx (Debian nginx-light) on a free 127.0.0.1 port answering
# every POST with a fixed JSON-RPC result; it runs in the foreground of its own temporary prefix
# (config, pid, logs, temp folders), never touching /etc/nginx or /var/log/nginx.
#
# With taskset available, rpcroute runs on one core and nginx on another, so the figure is what
# one core of rpcroute does. Other work on the machine lowers req/s; the CPU time per request
# (user + sys of the whole process, warm-up and start included) is the steadier figure, and the
# load average is printed next to it. Prints the figures; not run by CI, asserts nothing.
#
# Usage: tests/perf/bench_engine.sh [REQUESTS]      (default 100000; build first: scripts/setup)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$(pwd)

requests=${1:-100000}
concurrency=64
rpcroute_bin=${RPCROUTE_BIN:-$repo/build/cli/rpcroute}
nginx_bin=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}

[[ -x $rpcroute_bin ]] || { echo "bench_engine: $rpcroute_bin not found; build first" >&2; exit 1; }
[[ -x $nginx_bin ]] || { echo "bench_engine: nginx not found; apt-get install nginx-light" >&2; exit 1; }
command -v jq >/dev/null || { echo "bench_engine: jq not found" >&2; exit 1; }
command -v curl >/dev/null || { echo "bench_engine: curl not found" >&2; exit 1; }

work=$(mktemp -d)
nginx_pid=""
cleanup() {
  if [[ -n $nginx_pid ]]; then
    kill "$nginx_pid" 2>/dev/null || true
    wait "$nginx_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    return
  fi
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
  done
}

# Pin to different cores when there are at least two.
rpcroute_cpu=() nginx_cpu=()
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
  nginx_cpu=(taskset -c 0)
  rpcroute_cpu=(taskset -c 1)
fi

port=$(free_port)
mkdir -p "$work/logs" "$work/temp"
cat >"$work/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/temp/body;
  proxy_temp_path $work/temp/proxy;
  fastcgi_temp_path $work/temp/fastcgi;
  uwsgi_temp_path $work/temp/uwsgi;
  scgi_temp_path $work/temp/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {
    listen 127.0.0.1:$port;
    location / {
      default_type application/json;
      return 200 '{"jsonrpc":"2.0","id":0,"result":"0x1"}';
    }
  }
}
EOF
"${nginx_cpu[@]}" "$nginx_bin" -p "$work" -e "$work/logs/error.log" -c "$work/nginx.conf" </dev/null \
  >"$work/logs/stdout.log" 2>&1 &
nginx_pid=$!
request='{"jsonrpc":"2.0","id":0,"method":"eth_blockNumber","params":[]}'
for _ in $(seq 100); do
  curl -sf --max-time 1 -X POST --data "$request" "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
  sleep 0.05
done
curl -sf --max-time 1 -X POST --data "$request" "http://127.0.0.1:$port/" >/dev/null ||
  { echo "bench_engine: nginx did not start" >&2; cat "$work/logs/"* >&2; exit 1; }

cat >"$work/perf.yaml" <<EOF
name: perf
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: nginx, url: http://127.0.0.1:$port }
EOF

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start_ns=$(date +%s%N)
TIMEFORMAT='%U %S'
cpu=$( { time "${rpcroute_cpu[@]}" "$rpcroute_bin" bench --profile "$work/perf.yaml" --concurrency "$concurrency" \
  --methods eth_blockNumber --requests "$requests" --no-record --json >"$work/bench.json" 2>"$work/bench.err"; } 2>&1)
end_ns=$(date +%s%N)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

jq -e '.methods[0].providers[0].ok > 0' "$work/bench.json" >/dev/null ||
  { echo "bench_engine: bench failed" >&2; cat "$work/bench.err" "$work/bench.json" >&2; exit 1; }

read -r user_s sys_s <<<"$cpu"
wall_s=$(awk -v a="$start_ns" -v b="$end_ns" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
jq -r --arg wall "$wall_s" --arg user "$user_s" --arg sys "$sys_s" --arg load_before "$load_before" \
  --arg load_after "$load_after" --arg pinned "${rpcroute_cpu[*]:-no}" '
  .methods[0].providers[0] as $p
  | "bench engine: \($p.requests) eth_blockNumber, concurrency \(.concurrency), one local nginx",
    "  throughput:   \($p.requests_per_s | round) req/s (ok \($p.ok), errors \($p.errors | tostring))",
    "  latency:      p50 \($p.p50_ms) ms, p90 \($p.p90_ms) ms, p99 \($p.p99_ms) ms, max \($p.max_ms) ms",
    "  warm-up:      \(.warmup[0].latency_ms) ms (connect \(.warmup[0].connect_ms) ms)",
    "  process:      wall \($wall) s, user \($user) s, sys \($sys) s (rpcroute pinned: \($pinned))",
    "  cpu/request:  \((($user | tonumber) + ($sys | tonumber)) * 1e6 / $p.requests * 10 | round / 10) us, i.e. at most \($p.requests / (($user | tonumber) + ($sys | tonumber)) | round) req/s on one free core",
    "  load average: before \($load_before), after \($load_after)"
' "$work/bench.json"
