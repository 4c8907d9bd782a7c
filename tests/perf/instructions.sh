#!/usr/bin/env bash
# Instructions per request of `rpcroute serve`, counted by callgrind: a figure that does not depend
# on what else runs on the machine (wrk's requests/s do), for before/after comparisons of the
# sidecar's hot path while others share the cores (issue 17). Not part of tests/perf/run.
#
#   - starts the HTTPS upstreams of tests/perf/run's https section (nginx over TLS with a test CA
#     made by openssl: HTTP/2 offered, HTTP/1.1 only) and the plain nginx upstream;
#   - per variant, starts the sidecar under `valgrind --tool=callgrind --instr-atstart=no`, warms it
#     up (1 s of wrk, not counted), then counts while wrk runs DURATION seconds at each of
#     CONNECTIONS, and divides the instructions (Ir) by the requests wrk completed;
#   - prints a Markdown table; KEEP_WORK=1 keeps the callgrind files (callgrind_annotate them).
#
# Usage: tests/perf/instructions.sh [VARIANT…]   (default: h2 h1 curl native)
#   h2      https://localhost, the upstream offering HTTP/2 (the native client asks for HTTP/1.1 over
#           OpenSSL; RPCROUTE_NATIVE_TLS=0 in SIDECAR_ENV measures curl instead)
#   h1      https://localhost, the upstream offering HTTP/1.1 only (the same native TLS path)
#   curl    http://127.0.0.1 with RPCROUTE_HTTP_CLIENT=curl
#   native  http://127.0.0.1, the native client (the reference)
#   nocache the same with the answer cache off (cache: { max_mb: 0 }; issue 19)
#   nodash  native with --no-dashboard: no decision recorded (issue 22; compare with native)
#   watched native with one dashboard stream open while counting (/dashboard/events: the latency
#           series and traffic counts are kept, and the stream's own writes are counted too)
#   nginx_h1, nginx_h2, nginx_plain   the reference proxy of tests/perf/run (nginx, keep-alive
#           pool) to the h1 / h2 HTTPS upstream or the plain one: what the sidecar is measured
#           against. nginx runs as one process (`master_process off`) under callgrind counting from
#           its start, twice (a short and a long wrk run after the same warm-up); per request is
#           the difference of the two counts over the difference of the requests, so start-up
#           and warm-up cancel out.
# Environment: RPCROUTE_BIN (default build-perf/cli/rpcroute, not rebuilt), DURATION=5,
#   CONNECTIONS="1 64", SIDECAR_ENV="VAR=VALUE …" (added to every variant), KEEP_WORK=1.
set -euo pipefail

self=$(realpath "${BASH_SOURCE[0]}")
cd "$(dirname "$self")/../.."
repo=$(pwd)
# shellcheck source=tests/perf/harness.sh
source "$repo/tests/perf/harness.sh"

variants=("$@")
((${#variants[@]})) || variants=(h2 h1 curl native)
rpcroute_bin=${RPCROUTE_BIN:-$repo/build-perf/cli/rpcroute}
duration=${DURATION:-5}
read -ra connections <<<"${CONNECTIONS:-1 64}"
read -ra extra_env <<<"${SIDECAR_ENV:-}"
[[ -x $rpcroute_bin ]] || die "$rpcroute_bin not found (cmake --preset perf && cmake --build --preset perf --target rpcroute)"
for cmd in valgrind callgrind_control wrk openssl xxd jq curl; do
  command -v "$cmd" >/dev/null || die "$cmd not found"
done

work=$(mktemp -d /tmp/rpcroute-instr.XXXXXX)
out=$work/out
mkdir -p "$out"
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM
ulimit -n 20000 2>/dev/null || true
setup_pinning
sidecar_start_s=60  # valgrind starts slowly

ensure_upstream
write_serve_profile
write_https_profile
wrk_script "$work/bn.lua" "$bn_req"
# The sidecar as the program callgrind runs: start_sidecar's BIN.
cat >"$work/callgrind-rpcroute" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$work/callgrind.%p.out "$rpcroute_bin" "\$@"
EOF
chmod +x "$work/callgrind-rpcroute"
sed 's|"\$@"$|"$@" --no-dashboard|' "$work/callgrind-rpcroute" >"$work/callgrind-rpcroute-nodash"
chmod +x "$work/callgrind-rpcroute-nodash"
grep -q -- '--no-dashboard$' "$work/callgrind-rpcroute-nodash" || die "no --no-dashboard wrapper"

sed 's/^cache: .*/cache: { max_mb: 0, coalesce: false }/' "$work/serve.yaml" >"$work/serve-nocache.yaml"
declare -A path=([h2]=/rpc/tls_h2 [h1]=/rpc/tls_h1 [curl]=/rpc/local [native]=/rpc/local [nocache]=/rpc/local
  [nodash]=/rpc/local [watched]=/rpc/local)
declare -A profile=([h2]=$work/https.yaml [h1]=$work/https.yaml [curl]=$work/serve.yaml [native]=$work/serve.yaml
  [nocache]=$work/serve-nocache.yaml [nodash]=$work/serve.yaml [watched]=$work/serve.yaml)
declare -A variant_env=([h2]="" [h1]="" [curl]="RPCROUTE_HTTP_CLIENT=curl" [native]="" [nocache]="" [nodash]=""
  [watched]="")

# The reference proxy under callgrind (variants nginx_*): prints one table row.
count_nginx() { # h1|h2|plain
  local kind=$1 name port dir c d pid line ir requests warm runs=()
  if [[ $kind == plain ]]; then
    ensure_proxy
    name=proxy port=$proxy_port pid=$proxy_pid
  else
    ensure_tls_proxy "$kind"
    name=tls_proxy_$kind port=${tls_proxy_port[$kind]}
    pid=$(eval echo "\${tls_proxy_${kind}_pid}")
  fi
  stop_pid "$pid"
  dir=$work/$name
  grep -q '^master_process off;' "$dir/nginx.conf" || sed -i 's/^daemon off;/daemon off;\nmaster_process off;/' "$dir/nginx.conf"
  for c in "${connections[@]}"; do
    runs=()
    for d in 1 $((duration + 1)); do
      "${server_cpu[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/nginx.$kind.$c.$d.out" \
        "$nginx_bin" -p "$dir" -e "$dir/logs/error.log" -c "$dir/nginx.conf" </dev/null >"$dir/logs/callgrind.log" 2>&1 &
      pid=$!
      pids+=("$pid")
      wait_for "http://127.0.0.1:$port/" "$bn_req" "nginx ($kind) under callgrind"
      run_wrk "http://127.0.0.1:$port/" "$work/bn.lua" 64 1 "$work/wrk.warm.nginx.txt" >/dev/null
      warm=$(grep '^WRKJSON ' "$work/wrk.warm.nginx.txt" | sed 's/^WRKJSON //' | jq -r '.requests // 0')
      say "nginx_$kind: counting, $c connection(s), ${d}s"
      line=$(run_wrk "http://127.0.0.1:$port/" "$work/bn.lua" "$c" "$d" "$work/wrk.nginx.$kind.$c.$d.txt")
      kill -QUIT "$pid"
      wait "$pid" || true
      ir=$(awk '/^totals:/ { print $2 }' "$work/nginx.$kind.$c.$d.out")
      requests=$(jq -r '.requests // 0' <<<"$line")
      runs+=("$((requests + warm)) $ir $requests")
    done
    read -r r1 i1 _ <<<"${runs[0]}"
    read -r r2 i2 n2 <<<"${runs[1]}"
    rows+=("| nginx_$kind | $c | $n2 | $((i2 - i1)) (difference) | $(awk -v i=$((i2 - i1)) -v r=$((r2 - r1)) 'BEGIN { if (r > 0) printf "%.0f", i / r; else print "n/a" }') | 0 |")
  done
}

rows=()
for v in "${variants[@]}"; do
  if [[ $v == nginx_* ]]; then
    count_nginx "${v#nginx_}"
    continue
  fi
  [[ -n ${path[$v]:-} ]] || die "unknown variant '$v' (h2 h1 curl native nocache nodash watched nginx_h1 nginx_h2 nginx_plain)"
  wrapper=$work/callgrind-rpcroute
  [[ $v != nodash ]] || wrapper=$work/callgrind-rpcroute-nodash
  # shellcheck disable=SC2086 # one VAR=VALUE word, or none
  sidecar_profile=${profile[$v]} start_sidecar "cg_$v" "$wrapper" ${variant_env[$v]} "${extra_env[@]}"
  pid_var=cg_${v}_pid port_var=cg_${v}_port
  pid=${!pid_var} url="http://127.0.0.1:${!port_var}${path[$v]}"
  answer=$(post_any "$url" "$bn_req")
  [[ $(jq -r .result <<<"$answer" 2>/dev/null) == 0x1 ]] || die "$v: unexpected answer: ${answer:0:300}"
  run_wrk "$url" "$work/bn.lua" 64 1 "$work/wrk.warm.$v.txt" >/dev/null
  stream_pid=""
  if [[ $v == watched ]]; then
    curl -sN -o /dev/null "http://127.0.0.1:${!port_var}/dashboard/events" &
    stream_pid=$!
    pids+=("$stream_pid")
    for _ in $(seq 200); do
      [[ $(curl -s "http://127.0.0.1:${!port_var}/dashboard/state" | jq -r '.feed.streams' 2>/dev/null) == 1 ]] && break
      sleep 0.1
    done
  fi
  for c in "${connections[@]}"; do
    say "$v: counting, $c connection(s), ${duration}s"
    callgrind_control -i on "$pid" >/dev/null
    line=$(run_wrk "$url" "$work/bn.lua" "$c" "$duration" "$work/wrk.$v.$c.txt")
    callgrind_control -i off "$pid" >/dev/null
    rm -f "$work"/callgrind.*.out.*
    callgrind_control --dump="$v-$c" "$pid" >/dev/null
    dump=""
    for _ in $(seq 100); do
      dump=$(ls "$work"/callgrind."$pid".out.* 2>/dev/null | head -1 || true)
      [[ -n $dump ]] && grep -q '^totals:' "$dump" && break
      sleep 0.1
    done
    [[ -n $dump ]] || die "$v: callgrind wrote no dump"
    ir=$(awk '/^totals:/ { print $2 }' "$dump")
    mv "$dump" "$work/callgrind.$v.$c.out"
    requests=$(jq -r '.requests // 0' <<<"$line")
    errors=$(jq -r '(.status // 0) + (.connect // 0) + (.read // 0) + (.write // 0) + (.timeout // 0)' <<<"$line")
    rows+=("| $v | $c | $requests | $ir | $(awk -v i="$ir" -v r="$requests" 'BEGIN { if (r > 0) printf "%.0f", i / r; else print "n/a" }') | $errors |")
  done
  [[ -z $stream_pid ]] || stop_pid "$stream_pid"
  stop_pid "$pid"
done

echo "Instructions per request of rpcroute serve (nginx_*: the reference proxy) (callgrind, Ir), eth_blockNumber; $rpcroute_bin; ${duration} s of wrk per row${SIDECAR_ENV:+; $SIDECAR_ENV}"
echo
echo "| variant | conns | requests | instructions | per request | wrk errors |"
echo "|:---|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
if [[ ${KEEP_WORK:-0} == 1 ]]; then echo; echo "callgrind files: $work/callgrind.VARIANT.CONNS.out"; fi
