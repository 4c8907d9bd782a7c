# shellcheck shell=bash
# Section `bombs`: memory under the memory-bomb upstreams of issue 14 (the fake upstream's endless
# and gzip_bomb modes), for both HTTP clients (native, and curl with RPCROUTE_HTTP_CLIENT=curl):
# the peak RSS of one `rpcroute call` (GNU time's %M) against an endless chunked body, an endless
# body under a 1 TiB Content-Length and a 1 GiB gzip bomb, with the default cap (128 MiB) and
# with `limits: {max_response_mb: 16}`; and the peak RSS (VmHWM) of a fresh `rpcroute serve` after
# three such requests. A healthy second provider answers after the bomb fails. The fake upstream
# comes from the test build ($FAKE_BIN, default build/tests/fakes/fake_upstream): the perf build
# has no tests. Sourced by tests/perf/run.

section_bombs() {
  local fake=${FAKE_BIN:-$repo/build/tests/fakes/fake_upstream}
  if [[ ! -x $fake ]]; then
    warn "bombs: no fake upstream at $fake (build the test target fake_upstream, or set FAKE_BIN); section skipped"
    return 0
  fi
  local name port
  for name in bomb healthy; do
    rm -f "$work/$name.port"
    "${server_cpu[@]}" "$fake" --listen 127.0.0.1:0 --port-file "$work/$name.port" --name "$name" \
      --gzip-bytes 1073741824 </dev/null >"$work/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do [[ -s $work/$name.port ]] && break; sleep 0.05; done
    [[ -s $work/$name.port ]] || die "bombs: fake upstream $name did not start"
    printf -v "${name}_port" %s "$(tr -d '[:space:]' <"$work/$name.port")"
  done
  local cap prof
  for cap in default 16; do
    prof=$work/bombs_$cap.yaml
    {
      echo "name: bombs"
      echo "chains:"
      echo "  local:"
      echo "    chain_id: 31337"
      echo "    providers:"
      echo "      - { id: bomb, url: \"http://127.0.0.1:$bomb_port/\", priority: 1, timeout_ms: 60000$([[ $cap == default ]] || echo ", limits: { max_response_mb: $cap }") }"
      echo "      - { id: healthy, url: \"http://127.0.0.1:$healthy_port/\", priority: 2 }"
      echo "routing: { default_strategy: priority, timeout_ms: 120000 }"
    } >"$prof"
  done
  local -a modes=(endless endless_length gzip_bomb)
  local client mode peak outcome req
  req='{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","latest"]}'
  {
    echo "## Memory under hostile upstreams (issue 14)"
    echo
    echo "Peak RSS of one \`rpcroute call\` whose first provider streams a bomb (the second answers), and of a fresh \`rpcroute serve\` after three such requests (VmHWM). Endless bodies run at loopback speed until the cap ends them; the gzip bomb inflates to 1 GiB and is about 1 MiB on the wire."
    echo
    echo "| upstream | client | cap | call: peak RSS | first attempt | serve: peak after 3 requests |"
    echo "|:---|:---|---:|---:|:---|---:|"
  } >"$out/bombs.md"
  for mode in "${modes[@]}"; do
    curl -sf -X POST --data "{\"mode\":\"$mode\"}" "http://127.0.0.1:$bomb_port/_control" >/dev/null
    for client in native curl; do
      for cap in default 16; do
        prof=$work/bombs_$cap.yaml
        say "bombs: $mode, $client client, cap $cap"
        local env_client=(env -u RPCROUTE_HTTP_CLIENT)
        [[ $client == curl ]] && env_client=(env RPCROUTE_HTTP_CLIENT=curl)
        peak=$("${env_client[@]}" /usr/bin/time -f '%M' -o "$work/time.out" "$rpcroute_bin" call --profile "$prof" --no-state \
          --json eth_getBalance 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266 latest >"$work/call.json" 2>/dev/null; tail -1 "$work/time.out")
        outcome=$(jq -r '.meta.attempts[0].outcome // "n/a"' "$work/call.json" 2>/dev/null || echo n/a)
        # The sidecar: three requests, its peak after them.
        rm -f "$work/bsc.port"
        "${env_client[@]}" "${server_cpu[@]}" "$rpcroute_bin" serve --listen 127.0.0.1:0 --port-file "$work/bsc.port" \
          --profile "$prof" --no-probe --no-state --grace 2s </dev/null >"$work/bsc.log" 2>&1 &
        local sc_pid=$! sc_hwm=n/a
        pids+=("$sc_pid")
        for _ in $(seq 200); do [[ -s $work/bsc.port ]] && break; sleep 0.05; done
        if [[ -s $work/bsc.port ]]; then
          for _ in 1 2 3; do post_any "http://127.0.0.1:$(cat "$work/bsc.port")/rpc/local" "$req" >/dev/null; done
          sc_hwm=$(kib "$sc_pid" VmHWM)
        else
          warn "bombs: the sidecar did not start ($mode, $client)"
        fi
        stop_pid "$sc_pid"
        echo "| $mode | $client | $([[ $cap == default ]] && echo "128 MiB (default)" || echo "$cap MiB") | $(mib "$peak") MiB | $outcome | $(mib "$sc_hwm") MiB |" >>"$out/bombs.md"
      done
    done
  done
  echo >>"$out/bombs.md"
}
