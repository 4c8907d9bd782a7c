# shellcheck shell=bash
# Section `https`: the path real providers take (issue 17) — `rpcroute serve` reaching its upstream
# over TLS — next to nginx as a reverse proxy doing the same. wrk (1 thread, keep-alive) at each
# of CONNECTIONS, eth_blockNumber (39 B answer) and eth_getLogs (200 KB answer), four variants:
#   h2     the static upstream over TLS offering HTTP/2 (nginx `listen … ssl http2`); the sidecar's
#          provider is https://localhost asking for HTTP/1.1 (the default: the native client with
#          OpenSSL), nginx proxies over a keep-alive pool of TLS connections (HTTP/1.1: nginx has no
#          HTTP/2 to upstreams)
#   h1     the same upstream offering HTTP/1.1 only
#   h1curl the h1 upstream through curl's TLS (RPCROUTE_NATIVE_TLS=0): what the native TLS saves
#   curl   plain http://127.0.0.1 with the sidecar's curl client (RPCROUTE_HTTP_CLIENT=curl), next
#          to the plain nginx proxy of the serve section
# Both proxies verify the upstream's certificate against a test CA made by openssl for this run
# (harness.sh, ensure_pki). Requests/s, p50/p99/max, CPU per request of the proxy; ROUNDS rounds,
# nginx and the sidecar interleaved within each. HTTPS_VARIANTS="h1 h2" measures only those
# (default: all four). Sourced by tests/perf/run.

read -ra https_variants <<<"${HTTPS_VARIANTS:-h2 h1 h1curl curl}"
declare -A https_variant_name=(
  [h2]="HTTPS upstream, HTTP/2 offered" [h1]="HTTPS upstream, HTTP/1.1 only"
  [h1curl]="HTTPS upstream, HTTP/1.1 only, through curl (\`RPCROUTE_NATIVE_TLS=0\`)"
  [curl]="plain http upstream, sidecar's curl client (\`RPCROUTE_HTTP_CLIENT=curl\`)"
)

section_https() {
  ensure_proxy
  ensure_tls_proxy h2
  ensure_tls_proxy h1
  write_https_profile
  sidecar_profile=$work/https.yaml start_sidecar tlssc
  sidecar_profile=$work/https.yaml start_sidecar tlscurl "$rpcroute_bin" RPCROUTE_NATIVE_TLS=0
  start_sidecar curlsc "$rpcroute_bin" RPCROUTE_HTTP_CLIENT=curl

  local -A url=(
    [nginx,h2,bn]=http://127.0.0.1:${tls_proxy_port[h2]}/
    [nginx,h2,large]=http://127.0.0.1:${tls_proxy_port[h2]}/large
    [sidecar,h2,bn]=http://127.0.0.1:$tlssc_port/rpc/tls_h2
    [sidecar,h2,large]=http://127.0.0.1:$tlssc_port/rpc/tls_h2_large
    [nginx,h1,bn]=http://127.0.0.1:${tls_proxy_port[h1]}/
    [nginx,h1,large]=http://127.0.0.1:${tls_proxy_port[h1]}/large
    [sidecar,h1,bn]=http://127.0.0.1:$tlssc_port/rpc/tls_h1
    [sidecar,h1,large]=http://127.0.0.1:$tlssc_port/rpc/tls_h1_large
    [nginx,h1curl,bn]=http://127.0.0.1:${tls_proxy_port[h1]}/
    [nginx,h1curl,large]=http://127.0.0.1:${tls_proxy_port[h1]}/large
    [sidecar,h1curl,bn]=http://127.0.0.1:$tlscurl_port/rpc/tls_h1
    [sidecar,h1curl,large]=http://127.0.0.1:$tlscurl_port/rpc/tls_h1_large
    [nginx,curl,bn]=http://127.0.0.1:$proxy_port/
    [nginx,curl,large]=http://127.0.0.1:$proxy_port/large
    [sidecar,curl,bn]=http://127.0.0.1:$curlsc_port/rpc/local
    [sidecar,curl,large]=http://127.0.0.1:$curlsc_port/rpc/large
  )
  # A wrong answer is reported, not fatal: the tables then show the errors it causes.
  local v answer
  for v in "${https_variants[@]}"; do
    answer=$(post_any "${url[sidecar,$v,bn]}" "$bn_req")
    [[ $(jq -r .result <<<"$answer" 2>/dev/null) == 0x1 && $(jq -r .id <<<"$answer" 2>/dev/null) == 1 ]] ||
      warn "https: unexpected eth_blockNumber answer through the sidecar ($v): ${answer:0:300}"
    answer=$(post_any "${url[sidecar,$v,large]}" "$logs_req")
    [[ ${#answer} -ge $((large_bytes - 16)) ]] ||
      warn "https: the 200 KB answer through the sidecar ($v) is ${#answer} bytes: ${answer:0:300}"
  done

  wrk_script "$work/bn.lua" "$bn_req"
  wrk_script "$work/logs.lua" "$logs_req"
  local -A lua=([bn]=$work/bn.lua [large]=$work/logs.lua)
  local -A server_pid=(
    [nginx,h2]=$(nginx_worker "$tls_proxy_h2_pid") [nginx,h1]=$(nginx_worker "$tls_proxy_h1_pid")
    [nginx,curl]=$(nginx_worker "$proxy_pid") [nginx,h1curl]=$(nginx_worker "$tls_proxy_h1_pid")
    [sidecar,h2]=$tlssc_pid [sidecar,h1]=$tlssc_pid [sidecar,h1curl]=$tlscurl_pid [sidecar,curl]=$curlsc_pid
  )
  local jsonl=$work/https.jsonl body c r t line cpu0 cpu1 load1
  : >"$jsonl"
  for body in bn large; do
    for v in "${https_variants[@]}"; do
      for t in nginx sidecar; do
        say "https: warm-up $t, $v, $body"
        run_wrk "${url[$t,$v,$body]}" "${lua[$body]}" 64 1 "$work/wrk.https.warm.$t.$v.$body.txt" >/dev/null
      done
    done
    for c in "${connections[@]}"; do
      for ((r = 1; r <= rounds; r++)); do
        for v in "${https_variants[@]}"; do
          for t in nginx sidecar; do
            say "https: wrk ${duration}s, $t, $v, $body, $c connections, round $r/$rounds"
            cpu0=$(cpu_ticks "${server_pid[$t,$v]}")
            line=$(run_wrk "${url[$t,$v,$body]}" "${lua[$body]}" "$c" "$duration" "$work/wrk.https.$t.$v.$body.$c.$r.txt")
            cpu1=$(cpu_ticks "${server_pid[$t,$v]}")
            load1=$(cut -d' ' -f1 /proc/loadavg)
            jq -c --arg t "$t" --arg v "$v" --arg b "$body" --argjson c "$c" --argjson r "$r" \
              --argjson cpu "$(((cpu1 - cpu0) * 1000000 / clk_tck))" --argjson load "$load1" \
              '. + {target: $t, variant: $v, body: $b, conns: $c, round: $r, cpu_us: $cpu, load: $load}' <<<"$line" >>"$jsonl"
          done
        done
      done
    done
  done
  stop_pid "$tlssc_pid"
  stop_pid "$curlsc_pid"

  local agg=$work/https.agg.jsonl
  jq -s -c '
    def median: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
    group_by([.target, .variant, .body, .conns])[]
    | map(select((.requests // 0) > 0)) as $ok
    | {target: .[0].target, variant: .[0].variant, body: .[0].body, conns: .[0].conns,
       rounds: length, ok_rounds: ($ok | length),
       rps: (if ($ok | length) > 0 then ($ok | map(.requests) | add) / ($ok | map(.duration_us) | add) * 1e6 else null end),
       p50: ($ok | map(.p50) | median), p99: ($ok | map(.p99) | median), max: ($ok | map(.max) | max),
       status: ($ok | map(.status) | add), sock: ($ok | map(.connect + .read + .write + .timeout) | add),
       cpu_per_req: (if ($ok | length) > 0 then ($ok | map(.cpu_us) | add) / ($ok | map(.requests) | add) else null end),
       load: (map(.load) | max)}' "$jsonl" >"$agg"

  hget() { # TARGET VARIANT BODY CONNS FIELD
    jq -r --arg t "$1" --arg v "$2" --arg b "$3" --argjson c "$4" --arg f "$5" \
      'select(.target == $t and .variant == $v and .body == $b and .conns == $c) | .[$f] // "n/a"' "$agg" | head -1
  }
  hclean() { # TARGET VARIANT BODY CONNS → true when the cell had no errors
    [[ $(jq -r --arg t "$1" --arg v "$2" --arg b "$3" --argjson c "$4" \
      'select(.target == $t and .variant == $v and .body == $b and .conns == $c) | (.status // 1) == 0 and (.sock // 1) == 0 and .ok_rounds == .rounds' \
      "$agg" | head -1) == true ]]
  }
  local bad
  bad=$(jq -r 'select((.status // 0) > 0 or (.sock // 0) > 0 or .ok_rounds < .rounds) | "\(.target) \(.variant) \(.body) \(.conns) connections: \(.status // "n/a") non-2xx, \(.sock // "n/a") socket errors"' "$agg")
  while IFS= read -r line; do
    [[ -n $line ]] && warn "https: errors in $line (its figures are not comparable)"
  done <<<"$bad"

  local -A body_name=([bn]="eth_blockNumber (39 B answer)" [large]="eth_getLogs, $((large_bytes / 1024)) KB answer")
  {
    echo "## HTTPS upstreams and the curl client (wrk)"
    echo
    echo "wrk, 1 thread, keep-alive, after a 1 s warm-up per path; $rounds round(s) of ${duration} s per row, nginx and the sidecar interleaved; requests/s over all rounds, p50 and p99 the median round's, max the largest."
    echo "HTTPS upstream: the static answers served by nginx (1 worker) over TLS 1.3 with a certificate from a test CA made for this run; \`h2\` offers HTTP/2 by ALPN, \`h1\` HTTP/1.1 only."
    echo "Reference proxy: nginx (1 worker), \`proxy_pass https://…\`, \`keepalive 64\` TLS pool, HTTP/1.1, \`proxy_ssl_verify on\` with the test CA, sessions reused. Sidecar: \`rpcroute serve --no-probe --no-state\`, one provider per chain, \`https://localhost:PORT\` with \`tls: { ca_file }\`, HTTP/1.1 (the native client with OpenSSL; \`h1curl\`: through curl)."
    echo "The ratio is the sidecar's requests/s over nginx's; \`+p50\` the sidecar's p50 minus nginx's. CPU per request: user + system time of the proxy process over the run / requests."
    echo
    for v in "${https_variants[@]}"; do
      for body in bn large; do
        echo "### ${https_variant_name[$v]}: ${body_name[$body]}"
        echo
        echo "| conns | nginx req/s | sidecar req/s | ratio | nginx p50 / p99 / max | sidecar p50 / p99 / max | +p50 | CPU per request (nginx / sidecar) | errors (non-2xx / socket, nginx; sidecar) |"
        echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for c in "${connections[@]}"; do
          local ng sc
          ng=$(hget nginx "$v" "$body" "$c" rps); sc=$(hget sidecar "$v" "$body" "$c" rps)
          printf '| %s | %s | %s | %s× | %s / %s / %s | %s / %s / %s | %s | %s / %s | %s / %s; %s / %s |\n' "$c" \
            "$(num "$ng")" "$(num "$sc")" "$(ratio "$sc" "$ng")" \
            "$(us "$(hget nginx "$v" "$body" "$c" p50)")" "$(us "$(hget nginx "$v" "$body" "$c" p99)")" "$(us "$(hget nginx "$v" "$body" "$c" max)")" \
            "$(us "$(hget sidecar "$v" "$body" "$c" p50)")" "$(us "$(hget sidecar "$v" "$body" "$c" p99)")" "$(us "$(hget sidecar "$v" "$body" "$c" max)")" \
            "$(https_added_p50 "$v" "$body" "$c")" \
            "$(https_cpu nginx "$v" "$body" "$c")" "$(https_cpu sidecar "$v" "$body" "$c")" \
            "$(hget nginx "$v" "$body" "$c" status)" "$(hget nginx "$v" "$body" "$c" sock)" \
            "$(hget sidecar "$v" "$body" "$c" status)" "$(hget sidecar "$v" "$body" "$c" sock)"
        done
        echo
      done
    done
  } >"$out/https.md"

  # ---- targets ----
  local has64=0 has1=0 r verdict
  for c in "${connections[@]}"; do
    [[ $c == 64 ]] && has64=1
    [[ $c == 1 ]] && has1=1
  done
  https_judged() { # VERDICT VARIANT BODY CONNS: the verdict, or n/a when nginx's or the sidecar's cell had errors
    if hclean nginx "$2" "$3" "$4" && hclean sidecar "$2" "$3" "$4"; then echo "$1"; else echo "n/a: errors in the run"; fi
  }
  for v in h2 h1; do
    if ((has64)); then
      r=$(ratio "$(hget sidecar "$v" bn 64 rps)" "$(hget nginx "$v" bn 64 rps)")
      target_row "HTTPS ($v upstream): sidecar requests/s ≥ 1.0 × nginx's, 64 connections, eth_blockNumber" \
        "$(num "$(hget sidecar "$v" bn 64 rps)") req/s" "nginx $(num "$(hget nginx "$v" bn 64 rps)") req/s" "${r}×" \
        "$(https_judged "$(met "$r >= 1.0")" "$v" bn 64)"
      figure_row "HTTPS ($v upstream): sidecar requests/s, 64 connections, 200 KB answers" \
        "$(num "$(hget sidecar "$v" large 64 rps)") req/s" "nginx $(num "$(hget nginx "$v" large 64 rps)") req/s" \
        "$(ratio "$(hget sidecar "$v" large 64 rps)" "$(hget nginx "$v" large 64 rps)")×"
    fi
    if ((has1)); then
      r=$(ratio "$(hget sidecar "$v" bn 1 rps)" "$(hget nginx "$v" bn 1 rps)")
      target_row "HTTPS ($v upstream): sidecar requests/s ≥ 0.9 × nginx's, 1 connection, eth_blockNumber" \
        "$(num "$(hget sidecar "$v" bn 1 rps)") req/s" "nginx $(num "$(hget nginx "$v" bn 1 rps)") req/s" "${r}×" \
        "$(https_judged "$(met "$r >= 0.9")" "$v" bn 1)"
      local added
      added=$(awk -v a="$(hget sidecar "$v" bn 1 p50)" -v b="$(hget nginx "$v" bn 1 p50)" \
        'BEGIN { if (a == "n/a" || b == "n/a") print "n/a"; else print a - b }')
      target_row "HTTPS ($v upstream): added p50 over nginx ≤ 30 µs, 1 connection, eth_blockNumber" \
        "$(https_added_p50 "$v" bn 1) ($(us "$(hget sidecar "$v" bn 1 p50)") vs $(us "$(hget nginx "$v" bn 1 p50)"))" \
        "30 µs" "" "$(https_judged "$(met "$added <= 30")" "$v" bn 1)"
    fi
  done
  for c in 64 1; do
    [[ " ${connections[*]} " == *" $c "* ]] || continue
    figure_row "plain http, sidecar's curl client: requests/s, $c connection(s), eth_blockNumber" \
      "$(num "$(hget sidecar curl bn "$c" rps)") req/s" "nginx $(num "$(hget nginx curl bn "$c" rps)") req/s" \
      "$(ratio "$(hget sidecar curl bn "$c" rps)" "$(hget nginx curl bn "$c" rps)")×"
  done
}

https_added_p50() { # VARIANT BODY CONNS → "+N µs" (sidecar p50 − nginx p50)
  awk -v a="$(hget sidecar "$1" "$2" "$3" p50)" -v b="$(hget nginx "$1" "$2" "$3" p50)" \
    'BEGIN { if (a == "n/a" || b == "n/a" || a == "" || b == "") print "n/a"; else printf "%+d µs", a - b }'
}

https_cpu() { # TARGET VARIANT BODY CONNS → µs of the proxy's CPU per request
  awk -v v="$(hget "$@" cpu_per_req)" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else printf "%.1f µs", v }'
}
