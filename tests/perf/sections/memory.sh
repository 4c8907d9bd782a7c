# shellcheck shell=bash
# Section `memory`: the sidecar's resident memory (/proc/PID/status VmRSS, and VmHWM, the peak):
# idle right after start and after its first requests; during MEMORY_SECONDS of wrk at 256
# connections (eth_blockNumber, then the 200 KB answers), sampled every 50 ms, with the nginx proxy
# worker under the same load as the reference; the same for eth_blockNumber to the HTTPS upstreams
# of the https section (a second sidecar, native TLS; upstreams offering HTTP/2 and HTTP/1.1); and while one 50 MiB response (an nginx static file)
# passes through a fresh sidecar, peak against the size, and whether the result arrives byte for
# byte (the sidecar forwards provider bytes, it does not rebuild JSON). Sourced by tests/perf/run.

section_memory() {
  ensure_upstream
  ensure_proxy
  start_sidecar memsc
  local idle_rss idle_hwm warm_rss
  sleep 0.5
  idle_rss=$(kib "$memsc_pid" VmRSS); idle_hwm=$(kib "$memsc_pid" VmHWM)
  post "http://127.0.0.1:$memsc_port/rpc/local" "$bn_req" >/dev/null || warn "memory: the sidecar did not answer eth_blockNumber"
  post "http://127.0.0.1:$memsc_port/rpc/large" "$logs_req" >/dev/null || warn "memory: the sidecar did not answer the 200 KB call"
  warm_rss=$(kib "$memsc_pid" VmRSS)

  wrk_script "$work/bn.lua" "$bn_req"
  wrk_script "$work/logs.lua" "$logs_req"
  local -A rss hwm nginx_rss reqs
  local -A sc_path=([bn]=/rpc/local [large]=/rpc/large) ng_path=([bn]=/ [large]=/large) lua=([bn]=$work/bn.lua [large]=$work/logs.lua)
  local body worker line
  worker=$(nginx_worker "$proxy_pid")
  for body in bn large; do
    say "memory: sidecar, 256 connections, $body, ${memory_seconds}s"
    reset_hwm "$memsc_pid" || true
    start_sampler "$memsc_pid" "$work/rss.max"
    line=$(run_wrk "http://127.0.0.1:$memsc_port${sc_path[$body]}" "${lua[$body]}" 256 "$memory_seconds" "$work/wrk.mem.$body.txt")
    stop_sampler
    rss[$body]=$(cat "$work/rss.max" 2>/dev/null || echo n/a)
    hwm[$body]=$(kib "$memsc_pid" VmHWM)
    reqs[$body]=$(jq -r '.requests // "n/a"' <<<"$line")
    if [[ -n $worker ]]; then
      say "memory: nginx proxy, 256 connections, $body, ${memory_seconds}s"
      start_sampler "$worker" "$work/rss.max"
      run_wrk "http://127.0.0.1:$proxy_port${ng_path[$body]}" "${lua[$body]}" 256 "$memory_seconds" "$work/wrk.memng.$body.txt" >/dev/null
      stop_sampler
      nginx_rss[$body]=$(cat "$work/rss.max" 2>/dev/null || echo n/a)
    fi
  done
  local after_load_rss
  after_load_rss=$(kib "$memsc_pid" VmRSS)
  stop_pid "$memsc_pid"

  # HTTPS: a fresh sidecar on the https section's profile (native TLS to https://localhost).
  ensure_tls_proxy h2
  ensure_tls_proxy h1
  write_https_profile
  local v tls_idle pid_var
  local -A tls_rss tls_hwm tls_reqs tls_nginx_rss
  for v in h2 h1; do
    # A fresh sidecar per upstream: the connections kept to the one measured before would count.
    sidecar_profile=$work/https.yaml start_sidecar memtls
    post "http://127.0.0.1:$memtls_port/rpc/tls_$v" "$bn_req" >/dev/null || warn "memory: the HTTPS sidecar did not answer eth_blockNumber ($v)"
    [[ $v == h2 ]] && tls_idle=$(kib "$memtls_pid" VmRSS)
    say "memory: sidecar, 256 connections, HTTPS $v, ${memory_seconds}s"
    reset_hwm "$memtls_pid" || true
    start_sampler "$memtls_pid" "$work/rss.max"
    line=$(run_wrk "http://127.0.0.1:$memtls_port/rpc/tls_$v" "$work/bn.lua" 256 "$memory_seconds" "$work/wrk.memtls.$v.txt")
    stop_sampler
    tls_rss[$v]=$(cat "$work/rss.max" 2>/dev/null || echo n/a)
    tls_hwm[$v]=$(kib "$memtls_pid" VmHWM)
    tls_reqs[$v]=$(jq -r '.requests // "n/a"' <<<"$line")
    pid_var=tls_proxy_${v}_pid
    worker=$(nginx_worker "${!pid_var}")
    if [[ -n $worker ]]; then
      say "memory: nginx proxy, 256 connections, HTTPS $v, ${memory_seconds}s"
      start_sampler "$worker" "$work/rss.max"
      run_wrk "http://127.0.0.1:${tls_proxy_port[$v]}/" "$work/bn.lua" 256 "$memory_seconds" "$work/wrk.memtlsng.$v.txt" >/dev/null
      stop_sampler
      tls_nginx_rss[$v]=$(cat "$work/rss.max" 2>/dev/null || echo n/a)
    fi
    stop_pid "$memtls_pid"
  done

  say "memory: one $((huge_bytes / 1024 / 1024)) MiB response through a fresh sidecar"
  local direct_huge sidecar_huge huge_before huge_hwm_before huge_sampled huge_hwm huge_after hwm_reset=yes same=no
  direct_huge=$("${client_cpu[@]}" curl -s -o "$work/huge.direct" -w '%{http_code} %{size_download} %{time_total}' -X POST \
    -H 'content-type: application/json' --data "$logs_req" "http://127.0.0.1:$upstream_port/huge")
  start_sidecar huge
  post "http://127.0.0.1:$huge_port/rpc/local" "$bn_req" >/dev/null || warn "memory: the fresh sidecar did not answer eth_blockNumber"
  huge_before=$(kib "$huge_pid" VmRSS); huge_hwm_before=$(kib "$huge_pid" VmHWM)
  reset_hwm "$huge_pid" || hwm_reset=no
  start_sampler "$huge_pid" "$work/rss.max"
  sidecar_huge=$("${client_cpu[@]}" curl -s -o "$work/huge.sidecar" -w '%{http_code} %{size_download} %{time_total}' -X POST \
    -H 'content-type: application/json' --data "$logs_req" "http://127.0.0.1:$huge_port/rpc/huge")
  stop_sampler
  huge_hwm=$(kib "$huge_pid" VmHWM); huge_after=$(kib "$huge_pid" VmRSS)
  huge_sampled=$(cat "$work/rss.max" 2>/dev/null || echo n/a)
  stop_pid "$huge_pid"
  # The upstream's id is 0, the sidecar answers with the client's (1): compare from the result on.
  if cmp -s <(tail -c +30 "$work/huge.direct") <(tail -c +30 "$work/huge.sidecar"); then same=yes; fi
  rm -f "$work/huge.direct" "$work/huge.sidecar"

  local size_kib=$((huge_bytes / 1024)) limit_kib=$((huge_bytes * 5 / 2 / 1024)) huge_ok=1
  # A failed transfer says nothing about the memory a passing one needs.
  if [[ $(cut -d' ' -f1-2 <<<"$sidecar_huge") != "200 $huge_bytes" ]]; then
    huge_ok=0
    warn "memory: the $((huge_bytes / 1024 / 1024)) MiB answer through the sidecar failed (HTTP status, bytes, seconds: $sidecar_huge); its memory targets are not measured"
  fi
  {
    echo "## Memory of rpcroute serve"
    echo
    echo "VmRSS / VmHWM from /proc; under load the largest VmRSS sampled every 50 ms and the peak (VmHWM reset before each run$([[ $hwm_reset == yes ]] || echo "; **the reset failed here: peaks include everything before**")). ${memory_seconds} s of wrk per load."
    echo
    echo "| when | VmRSS | VmHWM (peak) | reference |"
    echo "|:---|---:|---:|---:|"
    echo "| idle, right after start | $(mib "$idle_rss") MiB | $(mib "$idle_hwm") MiB | |"
    echo "| idle, after the first two requests | $(mib "$warm_rss") MiB | | |"
    echo "| 256 connections, eth_blockNumber ($(num "${reqs[bn]}") requests) | $(mib "${rss[bn]}") MiB | $(mib "${hwm[bn]}") MiB | nginx proxy worker $(mib "${nginx_rss[bn]:-n/a}") MiB |"
    echo "| 256 connections, 200 KB answers ($(num "${reqs[large]}") requests) | $(mib "${rss[large]}") MiB | $(mib "${hwm[large]}") MiB | nginx proxy worker $(mib "${nginx_rss[large]:-n/a}") MiB |"
    echo "| idle after that load | $(mib "$after_load_rss") MiB | | |"
    echo "| HTTPS sidecar, after its first request (fresh per upstream) | $(mib "$tls_idle") MiB | | |"
    for v in h2 h1; do
      echo "| HTTPS $v upstream, 256 connections, eth_blockNumber ($(num "${tls_reqs[$v]}") requests) | $(mib "${tls_rss[$v]}") MiB | $(mib "${tls_hwm[$v]}") MiB | nginx proxy worker $(mib "${tls_nginx_rss[$v]:-n/a}") MiB |"
    done
    echo "| fresh sidecar, before one $((huge_bytes / 1024 / 1024)) MiB answer | $(mib "$huge_before") MiB | $(mib "$huge_hwm_before") MiB | |"
    echo "| while it passes (largest sample / peak) | $(mib "$huge_sampled") MiB | $(mib "$huge_hwm") MiB | limit $(mib "$limit_kib") MiB (2.5 × size) |"
    echo "| after it | $(mib "$huge_after") MiB | | |"
    echo
    echo "The $((huge_bytes / 1024 / 1024)) MiB answer (HTTP status, bytes, seconds): direct \`$direct_huge\`, through the sidecar \`$sidecar_huge\`; result bytes identical: $same."
    echo
  } >"$out/memory.md"

  target_row "sidecar RSS idle ≤ 16 MB (MiB)" "$(mib "$idle_rss") MiB" "16 MiB" "$(ratio "$idle_rss" $((16 * 1024)))×" \
    "$(met "$idle_rss <= 16 * 1024")"
  target_row "sidecar RSS at 256 connections ≤ 32 MB (MiB), eth_blockNumber" "$(mib "${rss[bn]}") MiB (peak $(mib "${hwm[bn]}") MiB)" \
    "32 MiB; nginx worker $(mib "${nginx_rss[bn]:-n/a}") MiB" "$(ratio "${rss[bn]}" $((32 * 1024)))×" "$(met "${rss[bn]} <= 32 * 1024")"
  for v in h2 h1; do
    target_row "sidecar RSS at 256 connections ≤ 32 MB (MiB), HTTPS $v upstream, eth_blockNumber" \
      "$(mib "${tls_rss[$v]}") MiB (peak $(mib "${tls_hwm[$v]}") MiB)" "32 MiB; nginx worker $(mib "${tls_nginx_rss[$v]:-n/a}") MiB" \
      "$(ratio "${tls_rss[$v]}" $((32 * 1024)))×" "$(met "${tls_rss[$v]} <= 32 * 1024")"
  done
  local verdict_peak verdict_bytes
  verdict_peak=$(met "$huge_hwm <= $limit_kib")
  verdict_bytes=$([[ $same == yes ]] && echo "bytes kept (no direct measure of re-serialising)" || echo "**not met**")
  if ((!huge_ok)); then
    verdict_peak="n/a: the transfer failed"
    verdict_bytes="**not met: the transfer failed**"
  fi
  target_row "peak while passing a 50 MiB response ≤ 2.5 × its size" "$(mib "$huge_hwm") MiB (+$(mib "$((huge_hwm - huge_before))") MiB over idle)" \
    "$(mib "$limit_kib") MiB" "$(ratio "$huge_hwm" "$size_kib")× the size" "$verdict_peak"
  local t_sc t_direct
  t_sc=$(cut -d' ' -f3 <<<"$sidecar_huge"); t_direct=$(cut -d' ' -f3 <<<"$direct_huge")
  target_row "large bodies forwarded without re-serialising JSON (50 MiB answer)" \
    "result bytes identical: $same; $(ratio 50 "$t_sc") MiB/s through the sidecar" "direct $(ratio 50 "$t_direct") MiB/s" \
    "$(ratio "$t_sc" "$t_direct")× direct's time" "$verdict_bytes"
  figure_row "sidecar RSS at 256 connections, 200 KB answers" "$(mib "${rss[large]}") MiB" "nginx worker $(mib "${nginx_rss[large]:-n/a}") MiB" \
    "$(ratio "${rss[large]}" "${nginx_rss[large]:-n/a}")×"
}
