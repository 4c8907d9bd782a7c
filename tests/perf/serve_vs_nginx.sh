#!/usr/bin/env bash
# What does `rpcroute serve` cost in front of an upstream, next to nginx as a reverse proxy?
#
# One run, so that the ratios hold on a noisy machine:
#   - builds the Release binary (cmake --preset release; build-release/cli/rpcroute) if needed;
#   - starts, on free 127.0.0.1 ports and each in its own temporary prefix:
#       upstream  nginx (1 worker) answering POST / with {"jsonrpc":"2.0","id":0,"result":"0x1"},
#                 POST /large with a ~200 KB JSON-RPC result and POST /huge with a 50 MiB one
#                 (static files; the 405 nginx gives a POST on a file is turned into a 200 + the file);
#       proxy     nginx (1 worker) proxying to the upstream through a keep-alive pool (the reference);
#       sidecar   rpcroute serve --no-probe --no-state, one provider per chain (local → /, large →
#                 /large, huge → /huge);
#   - measures with wrk (fixed duration, 1 / 64 / 256 connections) requests/s and p50/p99 latency,
#     direct to the upstream, through nginx and through the sidecar, for eth_blockNumber and for an
#     eth_getLogs answered with the 200 KB body;
#   - samples the sidecar's memory (/proc/PID/status VmRSS, VmHWM): idle after start, during the
#     256-connection runs, and while one 50 MiB response passes through a freshly started sidecar;
#   - writes a Markdown report (figures, ratios, targets of issues 4 and 7, met or not) to
#     tests/perf/RESULTS-serve.md and prints it.
#
# With taskset and ≥ 2 cores, wrk runs on core 0 and every server (both nginx and the sidecar) on
# core 1, so the proxy and its upstream share one core in both the nginx and the sidecar case.
# It reports, it never fails because of a figure; not run by CI.
#
# Usage: tests/perf/serve_vs_nginx.sh
#   DURATION=10        seconds per wrk run (18 runs + 1 s warm-ups)
#   CONNECTIONS="1 64 256"
#   SKIP_BUILD=1       do not run cmake (use the binary as it is)
#   RPCROUTE_BIN=path  another rpcroute binary (implies SKIP_BUILD)
#   PIN=0              do not pin wrk and the servers to cores
#   RESULTS=path       where to write the report (default tests/perf/RESULTS-serve.md)
#   PROFILE=1          also perf-record the sidecar (cpu-clock, call graphs) during two more 64-connection
#                      runs and add its top costs to the report
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$(pwd)

duration=${DURATION:-10}
read -ra connections <<<"${CONNECTIONS:-1 64 256}"
results=${RESULTS:-$repo/tests/perf/RESULTS-serve.md}
nginx_bin=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
large_bytes=$((200 * 1024))
huge_bytes=$((50 * 1024 * 1024))

say() { echo "serve_vs_nginx: $*" >&2; }
die() { say "$*"; exit 1; }

[[ -x $nginx_bin ]] || die "nginx not found; apt-get install nginx-light"
for cmd in wrk curl jq awk; do
  command -v "$cmd" >/dev/null || die "$cmd not found (apt-get install wrk curl jq)"
done

# ---- build -----------------------------------------------------------------------------------
if [[ -n ${RPCROUTE_BIN:-} ]]; then
  rpcroute_bin=$RPCROUTE_BIN
  build_note="given binary"
else
  rpcroute_bin=$repo/build-release/cli/rpcroute
  build_note="Release (build-release)"
  if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    if [[ ! -f $repo/build-release/CMakeCache.txt ]]; then
      say "configuring the release preset"
      cmake --preset release >/dev/null
    fi
    say "building build-release/cli/rpcroute (Release)"
    if ! cmake --build --preset release -j2 --target rpcroute >"$repo/build-release/serve_vs_nginx.build.log" 2>&1; then
      [[ -x $rpcroute_bin ]] || { cat "$repo/build-release/serve_vs_nginx.build.log" >&2; die "the Release build failed"; }
      say "the Release build failed (build-release/serve_vs_nginx.build.log); measuring the existing binary"
      build_note="Release (build-release), **stale: the rebuild failed**"
    fi
  fi
fi
[[ -x $rpcroute_bin ]] || die "$rpcroute_bin not found"

# ---- processes and cleanup ---------------------------------------------------------------------
work=$(mktemp -d /tmp/serve_vs_nginx.XXXXXX)
chmod 755 "$work"   # nginx workers started by root run as nobody and read www/
pids=()       # every long-running process this script starts
upstream_pid="" proxy_pid="" sidecar_pid="" sidecar_port="" fresh_pid="" fresh_port=""
sampler=""    # the RSS sampler while one runs
cleanup() {
  local p
  [[ -n $sampler ]] && kill "$sampler" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [[ -n $sampler ]] && wait "$sampler" 2>/dev/null || true
  if [[ ${KEEP_WORK:-0} == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ulimit -n 20000 2>/dev/null || true

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

wrk_cpu=() server_cpu=() pin_note="not pinned"
if [[ ${PIN:-1} != 0 ]] && command -v taskset >/dev/null && (($(nproc) >= 2)); then
  wrk_cpu=(taskset -c 0)
  server_cpu=(taskset -c 1)
  pin_note="wrk on core 0; upstream nginx, proxy nginx and rpcroute serve on core 1 (taskset)"
fi

post() { # URL BODY → response body; fails on HTTP errors
  curl -sf --max-time 30 -X POST -H 'content-type: application/json' --data "$2" "$1"
}

wait_for() { # URL BODY WHAT
  for _ in $(seq 100); do
    post "$1" "$2" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  die "$3 did not answer on $1"
}

# ---- bodies ------------------------------------------------------------------------------------
mkdir -p "$work/www"
make_body() { # FILE TOTAL_BYTES: a JSON-RPC result that is one long hex string
  local prefix='{"jsonrpc":"2.0","id":0,"result":"0x' suffix='"}'
  local hex=$(($2 - ${#prefix} - ${#suffix}))
  { printf '%s' "$prefix"; head -c $(((hex + 1) / 2)) /dev/urandom | xxd -p | tr -d '\n' | head -c "$hex"; printf '%s' "$suffix"; } >"$1"
}
command -v xxd >/dev/null || die "xxd not found (apt-get install xxd)"
make_body "$work/www/large" "$large_bytes"
make_body "$work/www/huge" "$huge_bytes"

# ---- nginx upstream and proxy ----------------------------------------------------------------
nginx_conf() { # NAME PORT SERVER_BLOCK_BODY [HTTP_EXTRA]
  local dir=$work/$1
  mkdir -p "$dir/logs" "$dir/temp"
  cat >"$dir/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $dir/temp/body;
  proxy_temp_path $dir/temp/proxy;
  fastcgi_temp_path $dir/temp/fastcgi;
  uwsgi_temp_path $dir/temp/uwsgi;
  scgi_temp_path $dir/temp/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  ${4:-}
  server {
    listen 127.0.0.1:$2 backlog=4096;
$3
  }
}
EOF
}
start_nginx() { # NAME
  local dir=$work/$1
  "${server_cpu[@]}" "$nginx_bin" -p "$dir" -e "$dir/logs/error.log" -c "$dir/nginx.conf" </dev/null \
    >"$dir/logs/stdout.log" 2>&1 &
  pids+=($!)
  printf -v "${1}_pid" %s "$!"
}

upstream_port=$(free_port)
nginx_conf upstream "$upstream_port" "    root $work/www;
    default_type application/json;
    location = / { return 200 '{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":\"0x1\"}'; }
    # nginx answers a POST on a static file with 405; serve the file instead.
    location / { error_page 405 =200 \$uri; }"
start_nginx upstream

proxy_port=$(free_port)
# Buffers large enough to hold the 200 KB answer in memory (no temp files), the pool kept alive.
nginx_conf proxy "$proxy_port" "    location / {
      proxy_pass http://u;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_buffers 16 16k;
      proxy_max_temp_file_size 0;
    }" "upstream u { server 127.0.0.1:$upstream_port; keepalive 64; }"
start_nginx proxy

bn_req='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
logs_req='{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x1","toBlock":"0x2"}]}'
wait_for "http://127.0.0.1:$upstream_port/" "$bn_req" "upstream nginx"
wait_for "http://127.0.0.1:$proxy_port/" "$bn_req" "proxy nginx"
[[ $(post "http://127.0.0.1:$upstream_port/large" "$logs_req" | wc -c) == "$large_bytes" ]] ||
  die "upstream /large does not answer a POST with the $large_bytes-byte body"

# ---- sidecar -------------------------------------------------------------------------------------
cat >"$work/perf.yaml" <<EOF
name: perf
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: nginx, url: "http://127.0.0.1:$upstream_port/" }
  large:
    chain_id: 31338
    block_time_ms: 1000
    providers:
      - { id: nginx_large, url: "http://127.0.0.1:$upstream_port/large" }
  huge:
    chain_id: 31339
    block_time_ms: 1000
    providers:
      - { id: nginx_huge, url: "http://127.0.0.1:$upstream_port/huge", timeout_ms: 120000 }
routing:
  timeout_ms: 120000
EOF

start_sidecar() { # NAME → sets NAME_pid, NAME_port
  rm -f "$work/$1.port"
  "${server_cpu[@]}" "$rpcroute_bin" serve --listen 127.0.0.1:0 --port-file "$work/$1.port" --profile "$work/perf.yaml" \
    --no-probe --no-state </dev/null >"$work/$1.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do
    [[ -s $work/$1.port ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/$1.log" >&2; die "rpcroute serve exited"; }
    sleep 0.05
  done
  [[ -s $work/$1.port ]] || die "rpcroute serve did not write its port"
  printf -v "${1}_pid" %s "$pid"
  printf -v "${1}_port" %s "$(cat "$work/$1.port")"
}
stop_pid() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }   # PID VmRSS|VmHWM → KiB
reset_hwm() { echo 5 >"/proc/$1/clear_refs" 2>/dev/null; }            # VmHWM := VmRSS now
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

start_sidecar sidecar
# Idle: right after start, before any request.
idle_rss=$(kib "$sidecar_pid" VmRSS)
idle_hwm=$(kib "$sidecar_pid" VmHWM)

answer=$(post "http://127.0.0.1:$sidecar_port/rpc/local" "$bn_req") || die "the sidecar did not answer eth_blockNumber"
[[ $(jq -r .result <<<"$answer") == 0x1 && $(jq -r .id <<<"$answer") == 1 ]] ||
  die "unexpected answer through the sidecar: $answer"
answer=$(post "http://127.0.0.1:$sidecar_port/rpc/large" "$logs_req") || die "the sidecar did not answer the 200 KB call"
[[ ${#answer} -ge $((large_bytes - 16)) ]] || die "the 200 KB answer through the sidecar is ${#answer} bytes"
warm_rss=$(kib "$sidecar_pid" VmRSS)

# ---- wrk ----------------------------------------------------------------------------------------
wrk_script() { # FILE BODY
  cat >"$1" <<EOF
wrk.method = "POST"
wrk.body = '$2'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"mean":%.1f,"max":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
EOF
}
wrk_script "$work/bn.lua" "$bn_req"
wrk_script "$work/logs.lua" "$logs_req"

declare -A url
url[direct,bn]=http://127.0.0.1:$upstream_port/
url[nginx,bn]=http://127.0.0.1:$proxy_port/
url[sidecar,bn]=http://127.0.0.1:$sidecar_port/rpc/local
url[direct,large]=http://127.0.0.1:$upstream_port/large
url[nginx,large]=http://127.0.0.1:$proxy_port/large
url[sidecar,large]=http://127.0.0.1:$sidecar_port/rpc/large
declare -A lua=([bn]=$work/bn.lua [large]=$work/logs.lua)
declare -A body_name=([bn]="eth_blockNumber (39 B answer)" [large]="eth_getLogs, $((large_bytes / 1024)) KB answer")
targets=(direct nginx sidecar)

run_wrk() { # TARGET BODY CONNS SECONDS → the WRKJSON line
  local threads=1
  "${wrk_cpu[@]}" wrk -t"$threads" -c"$3" -d"$4"s --timeout 10s --latency -s "${lua[$2]}" "${url[$1,$2]}" \
    >"$work/wrk.$1.$2.$3.txt" 2>&1 || true
  grep '^WRKJSON ' "$work/wrk.$1.$2.$3.txt" | sed 's/^WRKJSON //' || echo '{}'
}

# CPU time (user + system) of the process doing the work: the upstream's worker for direct runs,
# the proxy's worker through nginx, the sidecar. Per request it is steadier than requests/s on a
# busy machine. (The upstream's work is the same in all three.)
clk_tck=$(getconf CLK_TCK)
server_pid() {
  case $1 in
    direct) pgrep -P "$upstream_pid" | head -1 ;;
    nginx) pgrep -P "$proxy_pid" | head -1 ;;
    sidecar) echo "$sidecar_pid" ;;
  esac
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

sample_rss() { # PID OUT: the largest VmRSS seen until killed
  local max=0 v
  while :; do
    v=$(kib "$1" VmRSS 2>/dev/null) || break
    [[ -n $v ]] && ((v > max)) && { max=$v; echo "$max" >"$2"; }
    sleep 0.1
  done
}

# CPU that the rest of the machine uses, measured while our servers are idle.
cpu_busy() { # SECONDS → percent of all cores busy
  local a b
  read -ra a </proc/stat; sleep "$1"; read -ra b </proc/stat
  awk -v a="${a[*]}" -v b="${b[*]}" 'BEGIN {
    n = split(a, x, " "); split(b, y, " "); t = 0; idle = 0
    for (i = 2; i <= n; i++) t += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6])
    printf "%.0f", (t > 0 ? 100 * (t - idle) / t : 0) }'
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
other_before=$(cpu_busy 2)
started=$(date -u +%Y-%m-%dT%H:%MZ)

jsonl=$work/results.jsonl
: >"$jsonl"
declare -A rss256 hwm256 nginx256
for body in bn large; do
  for t in "${targets[@]}"; do
    say "warm-up: $t, $body"
    run_wrk "$t" "$body" 64 1 >/dev/null
  done
  for c in "${connections[@]}"; do
    for t in "${targets[@]}"; do
      say "wrk ${duration}s: $t, $body, $c connections"
      if [[ $c == 256 && $t == sidecar ]]; then
        reset_hwm "$sidecar_pid" || true
        rm -f "$work/rss.max"
        sample_rss "$sidecar_pid" "$work/rss.max" &
        sampler=$!
      elif [[ $c == 256 && $t == nginx ]]; then
        worker=$(pgrep -P "$proxy_pid" | head -1 || true)
        rm -f "$work/rss.max"
        if [[ -n $worker ]]; then
          sample_rss "$worker" "$work/rss.max" &
          sampler=$!
        fi
      fi
      cpu_pid=$(server_pid "$t")
      cpu0=$(cpu_ticks "$cpu_pid")
      line=$(run_wrk "$t" "$body" "$c" "$duration")
      cpu1=$(cpu_ticks "$cpu_pid")
      load1=$(cut -d' ' -f1 /proc/loadavg)
      if [[ -n $sampler ]]; then
        kill "$sampler" 2>/dev/null || true
        wait "$sampler" 2>/dev/null || true
        sampler=""
        if [[ $t == sidecar ]]; then
          rss256[$body]=$(cat "$work/rss.max" 2>/dev/null || echo 0)
          hwm256[$body]=$(kib "$sidecar_pid" VmHWM)
        else
          nginx256[$body]=$(cat "$work/rss.max" 2>/dev/null || echo 0)
        fi
      fi
      [[ -n $line ]] || line='{}'
      jq -c --arg t "$t" --arg b "$body" --argjson c "$c" --argjson cpu "$(((cpu1 - cpu0) * 1000000 / clk_tck))" \
        --argjson load "$load1" '. + {target: $t, body: $b, conns: $c, cpu_us: $cpu, load: $load}' <<<"$line" >>"$jsonl"
    done
  done
done
after_load_rss=$(kib "$sidecar_pid" VmRSS)

# ---- optional: where the sidecar spends its CPU (PROFILE=1) -------------------------------------
profile_notes=""
if [[ ${PROFILE:-0} == 1 ]]; then
  if command -v perf >/dev/null && perf stat -e cpu-clock true >/dev/null 2>&1; then
    for body in bn large; do
      say "perf record (cpu-clock, call graphs) of the sidecar: $body, 64 connections, ${duration}s"
      perf record -e cpu-clock -F 999 -g -p "$sidecar_pid" -o "$work/perf.$body.data" -- sleep "$duration" \
        >"$work/perf.$body.log" 2>&1 &
      sampler=$!
      run_wrk sidecar "$body" 64 "$duration" >/dev/null
      wait "$sampler" 2>/dev/null || true
      sampler=""
      (
        set +o pipefail  # head closes the pipes early
        echo "### ${body_name[$body]}, 64 connections"
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
      ) >>"$work/profile.md"
    done
    profile_notes=$(cat "$work/profile.md")
  else
    profile_notes="(perf is missing or cannot sample here; no profile taken)"
  fi
fi
stop_pid "$sidecar_pid"

# ---- 50 MiB through a fresh sidecar -------------------------------------------------------------
say "one $((huge_bytes / 1024 / 1024)) MiB response through a fresh sidecar"
direct_huge=$(curl -s -o "$work/huge.direct" -w '%{http_code} %{size_download} %{time_total}' -X POST \
  -H 'content-type: application/json' --data "$logs_req" "http://127.0.0.1:$upstream_port/huge")
start_sidecar fresh
post "http://127.0.0.1:$fresh_port/rpc/local" "$bn_req" >/dev/null
huge_rss_before=$(kib "$fresh_pid" VmRSS)
huge_hwm_before=$(kib "$fresh_pid" VmHWM)
reset_hwm "$fresh_pid" && hwm_reset=yes || hwm_reset=no
rm -f "$work/rss.max"
sample_rss "$fresh_pid" "$work/rss.max" &
sampler=$!
sidecar_huge=$(curl -s -o "$work/huge.sidecar" -w '%{http_code} %{size_download} %{time_total}' -X POST \
  -H 'content-type: application/json' --data "$logs_req" "http://127.0.0.1:$fresh_port/rpc/huge")
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=""
huge_hwm_after=$(kib "$fresh_pid" VmHWM)
huge_rss_after=$(kib "$fresh_pid" VmRSS)
huge_rss_sampled=$(cat "$work/rss.max" 2>/dev/null || echo 0)
huge_ok=no
if cmp -s <(tail -c +30 "$work/huge.direct") <(tail -c +30 "$work/huge.sidecar"); then huge_ok=yes; fi
stop_pid "$fresh_pid"

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
other_after=$(cpu_busy 2)

# ---- report -------------------------------------------------------------------------------------
get() { # TARGET BODY CONNS FIELD
  jq -r --arg t "$1" --arg b "$2" --argjson c "$3" --arg f "$4" \
    'select(.target == $t and .body == $b and .conns == $c) | .[$f] // "n/a"' "$jsonl" | head -1
}
rps() { # TARGET BODY CONNS
  jq -r --arg t "$1" --arg b "$2" --argjson c "$3" \
    'select(.target == $t and .body == $b and .conns == $c) | if .requests then (.requests / (.duration_us / 1e6)) else "n/a" end' \
    "$jsonl" | head -1
}
cpu_per_req() { # TARGET BODY CONNS → µs of the server's CPU per request
  jq -r --arg t "$1" --arg b "$2" --argjson c "$3" \
    'select(.target == $t and .body == $b and .conns == $c) | if (.requests // 0) > 0 then "\(.cpu_us / .requests | . * 10 | round / 10) µs" else "n/a" end' \
    "$jsonl" | head -1
}
us() { awk -v v="$1" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else if (v >= 10000) printf "%.1f ms", v / 1000; else printf "%d µs", v }'; }
num() { awk -v v="$1" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else printf "%.0f", v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
met() { awk -v c="$1" 'BEGIN { print (c ? "met" : "**not met**") }'; }

rps_sc64=$(rps sidecar bn 64); rps_ng64=$(rps nginx bn 64)
p99_sc64=$(get sidecar bn 64 p99); p99_ng64=$(get nginx bn 64 p99)
p50_d1=$(get direct bn 1 p50); p50_sc1=$(get sidecar bn 1 p50); p50_ng1=$(get nginx bn 1 p50)
added_sc=$(awk -v a="$p50_sc1" -v b="$p50_d1" 'BEGIN { print a - b }')
added_ng=$(awk -v a="$p50_ng1" -v b="$p50_d1" 'BEGIN { print a - b }')
rps_ratio=$(ratio "$rps_sc64" "$rps_ng64")
p99_ratio=$(ratio "$p99_sc64" "$p99_ng64")
rps_ratio_large=$(ratio "$(rps sidecar large 64)" "$(rps nginx large 64)")
p99_ratio_large=$(ratio "$(get sidecar large 64 p99)" "$(get nginx large 64 p99)")
rss256_bn=${rss256[bn]:-0}
peak_limit=$((huge_bytes * 5 / 2 / 1024))

{
  echo "# rpcroute serve vs nginx"
  echo
  echo "Generated by \`tests/perf/serve_vs_nginx.sh\` on $started (${duration} s per wrk run)."
  echo
  echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(uname -sr)"
  echo "- machine load: load average $load_before before, $load_after after; CPU busy with other work while our servers idled: ${other_before}% before, ${other_after}% after (of all cores)"
  echo "- pinning: $pin_note"
  echo "- rpcroute: $(git -C "$repo" describe --always --dirty 2>/dev/null || echo "no git"), $build_note; \`serve --no-probe --no-state\`, one provider per chain"
  echo "- $("$nginx_bin" -v 2>&1 | sed 's/^nginx version: //'), 1 worker each: upstream (fixed body / static files), reference proxy (\`keepalive 64\` pool, HTTP/1.1, \`proxy_buffers 16 16k\`)"
  echo "- $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), 1 thread, \`--latency\`, keep-alive; POST $bn_req (or eth_getLogs for the 200 KB answer)"
  echo
  for body in bn large; do
    echo "## ${body_name[$body]}"
    echo
    echo "| path | conns | requests/s | p50 | p99 | max | errors (non-2xx / socket) | server CPU per request | load (1 min) |"
    echo "|:---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in "${connections[@]}"; do
      for t in "${targets[@]}"; do
        name=$t
        [[ $t == direct ]] && name="direct (upstream)"
        [[ $t == nginx ]] && name="through nginx"
        [[ $t == sidecar ]] && name="through rpcroute serve"
        sock=$(jq -r --arg t "$t" --arg b "$body" --argjson c "$c" \
          'select(.target == $t and .body == $b and .conns == $c) | ((.connect // 0) + (.read // 0) + (.write // 0) + (.timeout // 0))' "$jsonl" | head -1)
        echo "| $name | $c | $(num "$(rps "$t" "$body" "$c")") | $(us "$(get "$t" "$body" "$c" p50)") | $(us "$(get "$t" "$body" "$c" p99)") | $(us "$(get "$t" "$body" "$c" max)") | $(get "$t" "$body" "$c" status) / ${sock:-n/a} | $(cpu_per_req "$t" "$body" "$c") | $(get "$t" "$body" "$c" load) |"
      done
    done
    echo
  done
  echo "## Memory of rpcroute serve"
  echo
  echo "| when | VmRSS | VmHWM (peak) |"
  echo "|:---|---:|---:|"
  echo "| idle, right after start | $(mib "$idle_rss") MiB | $(mib "$idle_hwm") MiB |"
  echo "| idle, after the first two requests | $(mib "$warm_rss") MiB | |"
  echo "| 256 connections, eth_blockNumber (largest sample / peak) | $(mib "$rss256_bn") MiB | $(mib "${hwm256[bn]:-0}") MiB |"
  echo "| 256 connections, 200 KB answers (largest sample / peak) | $(mib "${rss256[large]:-0}") MiB | $(mib "${hwm256[large]:-0}") MiB |"
  echo "| idle after all the load | $(mib "$after_load_rss") MiB | |"
  echo "| fresh sidecar, before one $((huge_bytes / 1024 / 1024)) MiB answer | $(mib "$huge_rss_before") MiB | $(mib "$huge_hwm_before") MiB |"
  echo "| during it (largest sample / peak) | $(mib "$huge_rss_sampled") MiB | $(mib "$huge_hwm_after") MiB |"
  echo "| after it | $(mib "$huge_rss_after") MiB | |"
  echo
  echo "For reference, the nginx proxy worker at 256 connections: $(mib "${nginx256[bn]:-0}") MiB (eth_blockNumber), $(mib "${nginx256[large]:-0}") MiB (200 KB answers)."
  echo "The $((huge_bytes / 1024 / 1024)) MiB answer: direct \`$direct_huge\` (HTTP status, bytes, seconds), through the sidecar \`$sidecar_huge\`; same result bytes: $huge_ok."
  [[ $hwm_reset == yes ]] || echo "(VmHWM could not be reset through /proc/PID/clear_refs: the peaks include everything before.)"
  echo
  echo "## Targets (issues 4 and 7)"
  echo
  echo "| target | measured | |"
  echo "|:---|---:|:---|"
  echo "| sidecar requests/s ≥ 1.0 × nginx's at 64 connections | $(num "$rps_sc64") / $(num "$rps_ng64") = ${rps_ratio}× | $(met "$(awk -v r="$rps_ratio" 'BEGIN { print (r != "n/a" && r >= 1.0) }')") |"
  echo "| sidecar p99 ≤ nginx's at 64 connections | $(us "$p99_sc64") vs $(us "$p99_ng64") (${p99_ratio}×) | $(met "$(awk -v a="$p99_sc64" -v b="$p99_ng64" 'BEGIN { print (a != "n/a" && a <= b) }')") |"
  echo "| added p50 over direct at 1 connection ≤ 60 µs | $(num "$added_sc") µs ($(us "$p50_sc1") vs $(us "$p50_d1"); nginx adds $(num "$added_ng") µs) | $(met "$(awk -v a="$added_sc" 'BEGIN { print (a <= 60) }')") |"
  echo "| RSS idle ≤ 16 MB | $(mib "$idle_rss") MiB | $(met "$((idle_rss <= 16 * 1024))") |"
  echo "| RSS at 256 connections ≤ 32 MB (eth_blockNumber) | $(mib "$rss256_bn") MiB (peak $(mib "${hwm256[bn]:-0}") MiB) | $(met "$((rss256_bn <= 32 * 1024))") |"
  echo "| $((huge_bytes / 1024 / 1024)) MiB answer peaks at ≤ 2.5× its size ($(mib "$peak_limit") MiB) | peak $(mib "$huge_hwm_after") MiB = $(ratio "$huge_hwm_after" "$((huge_bytes / 1024))")× (growth over the idle process $(mib "$((huge_hwm_after - huge_rss_before))") MiB) | $(met "$((huge_hwm_after <= peak_limit))") |"
  echo
  echo "With the 200 KB answers at 64 connections: sidecar/nginx requests/s ${rps_ratio_large}×, p99 ${p99_ratio_large}×."
  echo "Proxy CPU per request at 64 connections (user + system of the proxy process alone): eth_blockNumber sidecar $(cpu_per_req sidecar bn 64) vs nginx $(cpu_per_req nginx bn 64); 200 KB sidecar $(cpu_per_req sidecar large 64) vs nginx $(cpu_per_req nginx large 64)."
  echo "Latencies are wrk's (\`latency:percentile\` in a \`done\` hook, the numbers \`--latency\` prints); requests/s = requests / duration."
  if [[ -n $profile_notes ]]; then
    echo
    echo "## Profile of the sidecar (PROFILE=1: perf record -e cpu-clock -g, separate ${duration} s runs)"
    echo
    echo "On a paravirtualised kernel, time spent with interrupts off is charged to \`pvm_irq_enable\` (or"
    echo "\`native_irq_enable\`); the inclusive system-call figures say which calls it belongs to."
    echo
    echo "$profile_notes"
  fi
} >"$results"

cat "$results"
echo
say "wrote ${results#"$repo"/}"
