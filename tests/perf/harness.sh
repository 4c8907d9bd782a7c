# shellcheck shell=bash
# Shared pieces of tests/perf/run, sourced by it: processes and their cleanup, ports, pinning, the
# nginx upstream and reference proxy, anvil, the sidecar, wrk, memory sampling, formatting and the
# targets table. Nothing here runs on its own.

say() { echo "perf: $*" >&2; }
die() { say "$*"; exit 1; }

# ---- processes ------------------------------------------------------------------------------------
# Every long-running process the harness starts is in `pids`; cleanup ends them (TERM, then KILL
# after a second) on any exit, Ctrl-C included. Background jobs of a script ignore SIGINT, so they
# must be ended here.
pids=()
cleanup() {
  local p alive
  trap - INT TERM
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -n ${work:-} && -d $work ]]; then
    if [[ ${KEEP_WORK:-0} == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
  fi
}

stop_pid() { # PID: end one process started by the harness
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  local p kept=()
  for p in "${pids[@]}"; do [[ $p == "$1" ]] || kept+=("$p"); done
  pids=("${kept[@]}")
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Clients (wrk, hyperfine, curl, rpcroute bench) on core 0, servers (nginx, anvil, the sidecar) on
# core 1: a proxy and its upstream share one core in the nginx and in the sidecar case alike.
client_cpu=() server_cpu=() pin_note="not pinned"
setup_pinning() {
  if [[ ${PIN:-1} != 0 ]] && command -v taskset >/dev/null && (($(nproc) >= 2)); then
    client_cpu=(taskset -c 0)
    server_cpu=(taskset -c 1)
    pin_note="clients (wrk, hyperfine, rpcroute bench) on core 0; servers (nginx upstream and proxy, anvil, rpcroute serve) and the micro-benchmarks on core 1 (taskset)"
  fi
}

post() { # URL BODY → response body; fails on HTTP errors
  curl -sf --max-time 30 -X POST -H 'content-type: application/json' --data "$2" "$1"
}

post_any() { # URL BODY → response body whatever the HTTP status ('' when nothing came)
  curl -s --max-time 30 -X POST -H 'content-type: application/json' --data "$2" "$1" || true
}

# Something the reader must know about this run (a failed sanity check): printed now and listed at
# the top of the report.
warn() {
  say "WARNING: $*"
  printf -- '- **%s**\n' "$*" >>"$out/warnings.md"
}

wait_for() { # URL BODY WHAT
  for _ in $(seq 200); do
    post "$1" "$2" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  die "$3 did not answer on $1"
}

bn_req='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
logs_req='{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x1","toBlock":"0x2"}]}'
large_bytes=$((200 * 1024))
huge_bytes=$((50 * 1024 * 1024))

# ---- nginx: the fast static upstream and the reference proxy ---------------------------------------
nginx_bin=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}

make_body() { # FILE TOTAL_BYTES: the result of a JSON-RPC answer that is one long hex string, sized
  # so that the whole answer to a request with id 1 (the envelope written by the upstream) is
  # TOTAL_BYTES
  local prefix='{"jsonrpc":"2.0","id":1,"result":"' suffix='"}'
  local hex=$(($2 - ${#prefix} - ${#suffix} - 2))
  { printf '0x'; head -c $(((hex + 1) / 2)) /dev/urandom | xxd -p | tr -d '\n' | head -c "$hex"; } >"$1"
}

nginx_conf() { # NAME PORT SERVER_BLOCK_BODY [HTTP_EXTRA [MAIN_EXTRA [LISTEN_FLAGS]]]: a config in its own prefix under $work
  local dir=$work/$1
  mkdir -p "$dir/logs" "$dir/temp"
  cat >"$dir/nginx.conf" <<EOF
${5:-}
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
    listen 127.0.0.1:$2 backlog=4096${6:+ $6};
$3
  }
}
EOF
}

start_nginx() { # NAME → NAME_pid (the master; its one worker is its child)
  local dir=$work/$1
  "${server_cpu[@]}" "$nginx_bin" -p "$dir" -e "$dir/logs/error.log" -c "$dir/nginx.conf" </dev/null \
    >"$dir/logs/stdout.log" 2>&1 &
  pids+=($!)
  printf -v "${1}_pid" %s "$!"
}

nginx_worker() { pgrep -P "$1" | head -1 || true; }  # MASTER_PID → worker pid

upstream_port="" upstream_pid=""
echo_module="load_module /usr/lib/nginx/modules/ngx_http_echo_module.so;"
upstream_map="map \$request_body \$rpc_id {
    \"~\\\"id\\\":(?<id>\\\"[^\\\"]*\\\"|[0-9]+)\" \$id;
    default 0;
  }"
upstream_locations() { # the static upstream's server block (the plain one and the HTTPS ones alike)
  local envelope="echo_read_request_body; echo -n '{\"jsonrpc\":\"2.0\",\"id\":\$rpc_id,\"result\":\"';"
  echo "    root $work/www;
    default_type application/json;
    location = / { echo_read_request_body; echo -n '{\"jsonrpc\":\"2.0\",\"id\":\$rpc_id,\"result\":\"0x1\"}'; }
    location = /large { $envelope echo_location /files/large; echo -n '\"}'; }
    location = /huge { $envelope echo_location /files/huge; echo -n '\"}'; }
    location /files/ { internal; alias $work/www/; }"
}
# nginx (1 worker) answering POST / with {"jsonrpc":"2.0","id":ID,"result":"0x1"}, ID the request's
# (the router sends ids of its own and refuses an answer with another one: echo module, chunked),
# POST /large with a ~200 KB JSON-RPC result and POST /huge with a 50 MiB one (the same envelope
# around a static file's hex string, read by an internal subrequest).
ensure_upstream() {
  [[ -n $upstream_port ]] && return 0
  mkdir -p "$work/www"
  chmod 755 "$work" "$work/www"  # nginx workers started by root run as nobody and read www/
  make_body "$work/www/large" "$large_bytes"
  make_body "$work/www/huge" "$huge_bytes"
  chmod 644 "$work/www/large" "$work/www/huge"
  upstream_port=$(free_port)
  nginx_conf upstream "$upstream_port" "$(upstream_locations)" "$upstream_map" "$echo_module"
  start_nginx upstream
  wait_for "http://127.0.0.1:$upstream_port/" "$bn_req" "upstream nginx"
  [[ $(post "http://127.0.0.1:$upstream_port/large" "$logs_req" | wc -c) == "$large_bytes" ]] ||
    die "upstream /large does not answer a POST with the $large_bytes-byte body"
}

proxy_port="" proxy_pid=""
# The reference: nginx (1 worker) proxying to the upstream through a keep-alive pool, buffers large
# enough to hold the 200 KB answer in memory (no temp files).
ensure_proxy() {
  [[ -n $proxy_port ]] && return 0
  ensure_upstream
  proxy_port=$(free_port)
  nginx_conf proxy "$proxy_port" "    location / {
      proxy_pass http://u;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_buffers 16 16k;
      proxy_max_temp_file_size 0;
    }" "upstream u { server 127.0.0.1:$upstream_port; keepalive 64; }"
  start_nginx proxy
  wait_for "http://127.0.0.1:$proxy_port/" "$bn_req" "proxy nginx"
}

# ---- HTTPS: a test CA, the static upstream over TLS, nginx proxying to it ----------------------------
# A throw-away CA and a server certificate for localhost / 127.0.0.1 (EC P-256), made with openssl in
# the run's temporary directory: the sidecar trusts it through its profile's tls.ca_file, nginx
# through proxy_ssl_trusted_certificate; nothing reads the system store.
pki=""
ensure_pki() {
  [[ -n $pki ]] && return 0
  pki=$work/pki
  mkdir -p "$pki"
  {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -subj /CN=rpcroute-perf-ca -keyout "$pki/ca.key" -out "$pki/ca.pem" &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
        -keyout "$pki/server.key" -out "$pki/server.csr" &&
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
        >"$pki/server.ext" &&
      openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial \
        -days 2 -extfile "$pki/server.ext" -out "$pki/server.pem"
  } >"$pki/openssl.log" 2>&1 || { cat "$pki/openssl.log" >&2; die "openssl could not make the test CA"; }
  chmod 755 "$pki"
  chmod 644 "$pki"/*.pem "$pki"/*.key
}

# The static upstream's answers over TLS, one nginx (1 worker) per protocol: tls_h2 offers HTTP/2
# by ALPN (`listen … ssl http2`; HTTP/1.1 to a client that asks for it, as nginx does), tls_h1 only
# HTTP/1.1. Same locations as the plain upstream (no further hop behind them: a third process on the
# servers' core would blur the comparison).
declare -A tls_port=() tls_proxy_port=()
ensure_tls_upstream() { # h2|h1 → tls_port[h2|h1]
  [[ -n ${tls_port[$1]:-} ]] && return 0
  ensure_upstream
  ensure_pki
  local port flags=ssl
  [[ $1 == h2 ]] && flags="ssl http2"
  port=$(free_port)
  nginx_conf "tls_$1" "$port" "$(upstream_locations)
    ssl_certificate $pki/server.pem;
    ssl_certificate_key $pki/server.key;
    ssl_session_cache shared:perf_$1:1m;" "$upstream_map" "$echo_module" "$flags"
  start_nginx "tls_$1"
  tls_port[$1]=$port
  local proto
  for _ in $(seq 200); do
    proto=$(curl -s --max-time 5 --cacert "$pki/ca.pem" -o /dev/null -w '%{http_version}' -X POST \
      -H 'content-type: application/json' --data "$bn_req" "https://localhost:$port/" 2>/dev/null) && break
    sleep 0.05
  done
  local want=1.1
  [[ $1 == h2 ]] && want=2
  [[ $proto == "$want" ]] || die "the HTTPS upstream ($1) did not answer over HTTP/$want on port $port (got '$proto')"
  [[ $(curl -s --max-time 30 --cacert "$pki/ca.pem" -X POST -H 'content-type: application/json' --data "$logs_req" \
    "https://localhost:$port/large" | wc -c) == "$large_bytes" ]] || die "the HTTPS upstream ($1) does not serve /large"
}

# The reference over TLS: nginx (1 worker) proxying to tls_h2 or tls_h1 through a keep-alive pool of
# TLS connections (HTTP/1.1: nginx has no HTTP/2 to upstreams), verifying the certificate against the
# test CA, sessions reused.
ensure_tls_proxy() { # h2|h1 → tls_proxy_port[h2|h1]
  [[ -n ${tls_proxy_port[$1]:-} ]] && return 0
  ensure_tls_upstream "$1"
  local port
  port=$(free_port)
  nginx_conf "tls_proxy_$1" "$port" "    location / {
      proxy_pass https://tu;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_ssl_trusted_certificate $pki/ca.pem;
      proxy_ssl_verify on;
      proxy_ssl_name localhost;
      proxy_ssl_server_name on;
      proxy_ssl_session_reuse on;
      proxy_buffers 16 16k;
      proxy_max_temp_file_size 0;
    }" "upstream tu { server 127.0.0.1:${tls_port[$1]}; keepalive 64; }"
  start_nginx "tls_proxy_$1"
  tls_proxy_port[$1]=$port
  wait_for "http://127.0.0.1:$port/" "$bn_req" "the nginx proxy to the HTTPS upstream ($1)"
}

# The sidecar's profile for HTTPS: chains tls_h2 / tls_h2_large (the HTTP/2 upstream, its fixed body
# and /large) and tls_h1 / tls_h1_large, every provider https://localhost (curl) trusting the test CA.
write_https_profile() { # → $work/https.yaml
  ensure_tls_upstream h2
  ensure_tls_upstream h1
  local v id=31400
  {
    echo "name: perf-https"
    echo "chains:"
    for v in h2 h1; do
      printf '  tls_%s:\n    chain_id: %d\n    block_time_ms: 1000\n    providers:\n' "$v" $((id++))
      printf '      - { id: %s, url: "https://localhost:%s/", tls: { ca_file: "%s" } }\n' "$v" "${tls_port[$v]}" "$pki/ca.pem"
      printf '  tls_%s_large:\n    chain_id: %d\n    block_time_ms: 1000\n    providers:\n' "$v" $((id++))
      printf '      - { id: %s_large, url: "https://localhost:%s/large", tls: { ca_file: "%s" } }\n' "$v" "${tls_port[$v]}" "$pki/ca.pem"
    done
    echo "routing:"
    echo "  timeout_ms: 120000"
    echo "$perf_cache"
  } >"$work/https.yaml"
}

# ---- anvil --------------------------------------------------------------------------------------------
anvil_bin=${ANVIL:-$repo/.tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil}
anvil_port="" anvil_pid=""
ensure_anvil() {
  [[ -n $anvil_port ]] && return 0
  [[ -x $anvil_bin ]] || die "$anvil_bin not found; run scripts/setup"
  anvil_port=$(free_port)
  "${server_cpu[@]}" "$anvil_bin" --host 127.0.0.1 --port "$anvil_port" --chain-id 31337 --silent \
    </dev/null >"$work/anvil.log" 2>&1 &
  anvil_pid=$!
  pids+=("$anvil_pid")
  wait_for "http://127.0.0.1:$anvil_port/" "$bn_req" "anvil"
}

# ---- the sidecar ----------------------------------------------------------------------------------------
# One provider per chain: local → the upstream's fixed body, large → /large, huge → /huge.
# The proxy comparisons measure proxying. wrk sends the same request on every connection, which the
# sidecar's coalescing answers with one upstream call for all of them (the 200 KB rows read 7-10x
# nginx's requests/s), and nginx does nothing like it here. So these profiles turn coalescing off;
# the cache stays as shipped (it keeps none of these answers: no head is known with --no-probe).
# The cache section measures the cache.
perf_cache="cache: { coalesce: false }"

write_serve_profile() {
  ensure_upstream
  cat >"$work/serve.yaml" <<EOF
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
$perf_cache
EOF
}

# BIN (default rpcroute_bin) runs with the VAR=VALUE settings added to its environment.
# The profile is $work/serve.yaml, or the one in sidecar_profile when it is set; it must write its
# port within sidecar_start_s seconds (10).
start_sidecar() { # NAME [BIN [VAR=VALUE…]] → NAME_pid, NAME_port: rpcroute serve --no-probe --no-state on a free port
  local profile=${sidecar_profile:-$work/serve.yaml}
  [[ -f $profile ]] || write_serve_profile
  rm -f "$work/$1.port"
  local bin=${2:-$rpcroute_bin}
  env "${@:3}" "${server_cpu[@]}" "$bin" serve --listen 127.0.0.1:0 --port-file "$work/$1.port" --profile "$profile" \
    --no-probe --no-state --grace 2s </dev/null >"$work/$1.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq $((${sidecar_start_s:-10} * 20))); do
    [[ -s $work/$1.port ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/$1.log" >&2; die "rpcroute serve exited"; }
    sleep 0.05
  done
  [[ -s $work/$1.port ]] || die "rpcroute serve did not write its port"
  printf -v "${1}_pid" %s "$pid"
  printf -v "${1}_port" %s "$(cat "$work/$1.port")"
}

# ---- wrk ----------------------------------------------------------------------------------------------
wrk_script() { # FILE BODY: POST BODY; the done hook prints one JSON line (WRKJSON …) of figures
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

run_wrk() { # URL LUA CONNS SECONDS LOG → the WRKJSON line ('{}' when wrk failed)
  "${client_cpu[@]}" wrk -t1 -c"$3" -d"$4"s --timeout 10s --latency -s "$2" "$1" >"$5" 2>&1 || true
  grep '^WRKJSON ' "$5" | sed 's/^WRKJSON //' | head -1 | grep . || echo '{}'
}

# ---- /proc --------------------------------------------------------------------------------------------
kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status" 2>/dev/null; }  # PID VmRSS|VmHWM → KiB
reset_hwm() { { echo 5 >"/proc/$1/clear_refs"; } 2>/dev/null; }                    # VmHWM := VmRSS now
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }  # user + system
clk_tck=$(getconf CLK_TCK)

sample_rss() { # PID OUT: the largest VmRSS seen, until killed
  local max=0 v
  while :; do
    v=$(kib "$1" VmRSS) || break
    [[ -n $v ]] || break
    ((v > max)) && { max=$v; echo "$max" >"$2"; }
    sleep 0.05
  done
}
sampler=""
start_sampler() { # PID OUT
  rm -f "$2"
  sample_rss "$1" "$2" &
  sampler=$!
  pids+=("$sampler")
}
stop_sampler() {
  if [[ -n $sampler ]]; then stop_pid "$sampler"; fi
  sampler=""
}

# Percent of all cores busy, over SECONDS (measured while our servers idle: the other work).
cpu_busy() {
  local a b
  read -ra a </proc/stat; sleep "$1"; read -ra b </proc/stat
  awk -v a="${a[*]}" -v b="${b[*]}" 'BEGIN {
    n = split(a, x, " "); split(b, y, " "); t = 0
    for (i = 2; i <= n; i++) t += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6])
    printf "%.0f", (t > 0 ? 100 * (t - idle) / t : 0) }'
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- formatting -----------------------------------------------------------------------------------------
us() { awk -v v="$1" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else if (v >= 10000) printf "%.1f ms", v / 1000; else printf "%d µs", v }'; }
num() { awk -v v="$1" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else printf "%.0f", v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "n/a" || b == "n/a" || a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
mib() { awk -v k="$1" 'BEGIN { if (k == "" || k == "n/a") print "n/a"; else printf "%.1f", k / 1024 }'; }
ns() { awk -v v="$1" 'BEGIN { if (v == "" || v == "n/a") print "n/a"; else if (v >= 1e6) printf "%.2f ms", v / 1e6; else if (v >= 1e4) printf "%.1f µs", v / 1000; else if (v >= 1000) printf "%.2f µs", v / 1000; else printf "%.0f ns", v }'; }
# met CONDITION: "met" when the awk expression is true, "**not met**" when false, "n/a" when it
# involves a missing figure.
met() {
  case $1 in *n/a*) echo "n/a"; return ;; esac
  awk "BEGIN { print (($1) ? \"met\" : \"**not met**\") }"
}

# target ROW…: one row of the targets table: target | measured | reference | ratio | met
target_row() { printf '| %s | %s | %s | %s | %s |\n' "$@" >>"$out/targets.md"; }
# figure ROW…: one row of the key-figures table (no target): what | measured | reference | ratio
figure_row() { printf '| %s | %s | %s | %s |\n' "$@" >>"$out/figures.md"; }
