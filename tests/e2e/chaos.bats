#!/usr/bin/env bats
# Chaos under load (issue 6): `rpcroute serve` in front of three anvil nodes while a separate process
# (wrk with a Lua script) keeps a bounded load on it, and nodes are killed with SIGKILL and restarted
# on the same port at random moments for CHAOS_SECONDS (default 30; 60 for the full run:
# CHAOS_SECONDS=60 bats tests/e2e/chaos.bats). A node is only killed while another one is up with its
# breaker closed (per /metrics), so every request must be answered with a result: no HTTP error, no
# JSON-RPC error, no socket error, no timeout. (Up is not enough: a node restarted a moment ago may
# still have an open breaker, and while another provider is usable the router does not send to an
# open breaker; only when none is usable does each open one admit a trial — devloop.bats.)
#
# The load: eth_blockNumber and eth_getBalance of anvil's first dev account, alternately, on 4
# connections with a short pause between requests (bounded: a few hundred requests per second at
# most). A restarted anvil starts again at its genesis; nothing is mined (anvil mines only on
# transactions), so every node always answers block 0 and the genesis balance, and lag never
# excludes a restarted node: the answers can be checked exactly.
#
# Reported on fd 3: requests answered, client errors, socket errors, kills and restarts, breaker
# transitions (sampled from /metrics every ~250 ms, so a very short state may be missed), duration.

# jq and Lua programs are single-quoted on purpose.
# shellcheck disable=SC2016

load helpers

CHAOS_SECONDS=${CHAOS_SECONDS:-30}

setup_file() {
  require_bins RPCROUTE_BIN ANVIL
  command -v wrk >/dev/null || {
    echo "wrk is needed (apt-get install wrk)" >&2
    return 1
  }
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

# The wrk script: alternate two reads; count answers, failures (not HTTP 200, or not the expected
# result for the id), and print one LOAD line and a sample failure in done().
write_load_script() { # FILE
  cat >"$1" <<LUA
local bodies = {
  '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}',
  '{"jsonrpc":"2.0","id":2,"method":"eth_getBalance","params":["$DEV_ACCOUNT","latest"]}',
}
local expected = {
  [1] = '{"jsonrpc":"2.0","id":1,"result":"0x0"}',
  [2] = '{"jsonrpc":"2.0","id":2,"result":"$DEV_BALANCE"}',
}
LUA
  cat >>"$1" <<'LUA'
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  answers = 0; failures = 0; statuses = ""; sample = ""; n = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  n = n + 1
  return wrk.format(nil, nil, nil, bodies[(n % 2) + 1])
end
function delay() return 5 end
function response(status, headers, body)
  answers = answers + 1
  local id = tonumber(string.match(body, '"id":(%d+)') or "0")
  if status ~= 200 or body ~= expected[id] then
    failures = failures + 1
    if sample == "" then sample = status .. " " .. string.sub(body, 1, 400) end
  end
end
function done(summary, latency, requests)
  local a, f, s = 0, 0, ""
  for _, t in ipairs(threads) do
    a = a + t:get("answers"); f = f + t:get("failures")
    if s == "" then s = t:get("sample") end
  end
  local e = summary.errors
  io.write(string.format("LOAD answers=%d failures=%d connect=%d read=%d write=%d timeout=%d status=%d p99_ms=%.1f max_ms=%.1f\n",
    a, f, e.connect, e.read, e.write, e.timeout, e.status, latency:percentile(99) / 1000, latency.max / 1000))
  io.write("SAMPLE " .. s .. "\n")
end
LUA
}

# Breaker states of n1 n2 n3 from the sidecar's /metrics, as "S1 S2 S3" (0 closed, 1 half-open, 2 open;
# ? when unknown).
breaker_states() { # URL
  curl -s --max-time 5 "$1/metrics" | awk '
    index($0, "rpcroute_breaker_state{") == 1 {
      for (i = 1; i <= 3; i++) if (index($0, "provider=\"n" i "\"")) s[i] = $NF
    }
    END { printf "%s %s %s\n", (1 in s ? s[1] : "?"), (2 in s ? s[2] : "?"), (3 in s ? s[3] : "?") }'
}

@test "chaos: SIGKILL and restart of anvil nodes at random moments under load; no client error while one node is up" {
  start_anvil n1
  start_anvil n2
  start_anvil n3
  # Short recovery, not doubled, so restarted nodes come back within the run; generous timeouts: the
  # machine may be loaded, and a slow answer must not count as a failure.
  write_profile "$P" n1,timeout_ms=5000 n2,timeout_ms=5000 n3,timeout_ms=5000 \
    --extra 'health: {circuit_breaker: {failure_threshold: 3, recovery_timeout_ms: 1000, max_recovery_timeout_ms: 2000}}'
  start_serve sc -p "$P" --state "$BATS_TEST_TMPDIR/sidecar-state.json" --strategy load_balanced
  local url sc_pid
  url=$(node_url sc)
  sc_pid=$(node_pid sc)
  local out=$BATS_TEST_TMPDIR/load
  mkdir -p "$out"
  write_load_script "$out/load.lua"

  # Load for the chaos period plus a few seconds with every node up again.
  local load_seconds=$((CHAOS_SECONDS + 4)) load_pid
  wrk -t2 -c4 -d"${load_seconds}s" --timeout 15s -s "$out/load.lua" "$url/rpc/local" >"$out/wrk.out" 2>&1 3>&- &
  load_pid=$!

  local t_start end_s kills=0 restarts=0 transitions=0 states prev="0 0 0" next_action
  local -A down=()
  local log=$out/chaos.log
  : >"$log"
  t_start=$(now_ms)
  end_s=$((SECONDS + CHAOS_SECONDS))
  next_action=$((SECONDS + 1))
  local i n m pid up_nodes down_nodes
  while ((SECONDS < end_s)); do
    # Sample the breakers.
    states=$(breaker_states "$url")
    if [[ $states != "$prev" ]]; then
      local a b
      read -r -a a <<<"$prev"
      read -r -a b <<<"$states"
      for i in 0 1 2; do
        if [[ ${a[$i]} != "${b[$i]}" ]]; then
          transitions=$((transitions + 1))
          echo "$(($(now_ms) - t_start)) ms: n$((i + 1)) breaker ${a[$i]} -> ${b[$i]}" >>"$log"
        fi
      done
      prev=$states
    fi
    if ((SECONDS >= next_action)); then
      up_nodes=() down_nodes=()
      for n in n1 n2 n3; do
        if [[ -n ${down[$n]:-} ]]; then down_nodes+=("$n"); else up_nodes+=("$n"); fi
      done
      # Restart a down node (always when two are down, else half the time); otherwise kill an up
      # node, but only while another up node has a closed breaker.
      local -a st
      read -r -a st <<<"$states"
      local victims=()
      for n in "${up_nodes[@]}"; do
        for m in "${up_nodes[@]}"; do
          if [[ $m != "$n" && ${st[${m#n} - 1]} == 0 ]]; then
            victims+=("$n")
            break
          fi
        done
      done
      if ((${#down_nodes[@]} > 0)) && { ((${#up_nodes[@]} == 1)) || ((RANDOM % 2 == 0)) || ((${#victims[@]} == 0)); }; then
        n=${down_nodes[RANDOM % ${#down_nodes[@]}]}
        respawn_anvil "$n"
        unset "down[$n]"
        restarts=$((restarts + 1))
        echo "$(($(now_ms) - t_start)) ms: restarted $n" >>"$log"
      elif ((${#victims[@]} > 0)); then
        n=${victims[RANDOM % ${#victims[@]}]}
        pid=$(node_pid "$n")
        kill -9 "$pid"
        rm -f "$BATS_TEST_TMPDIR/procs/$n.pid"
        down[$n]=1
        kills=$((kills + 1))
        echo "$(($(now_ms) - t_start)) ms: SIGKILL $n (pid $pid)" >>"$log"
      fi
      # The next moment: 0.3 to 3 s from now.
      next_action=$((SECONDS + (RANDOM % 3)))
      sleep "0.$((3 + RANDOM % 7))"
    fi
    sleep 0.25
  done
  # Every node up again for the rest of the load.
  for n in "${!down[@]}"; do
    respawn_anvil "$n"
    restarts=$((restarts + 1))
    echo "$(($(now_ms) - t_start)) ms: restarted $n (end of chaos)" >>"$log"
  done
  wait "$load_pid" || true
  local duration_ms=$(($(now_ms) - t_start))
  states=$(breaker_states "$url")

  local load answers failures sockerr sample
  load=$(grep '^LOAD ' "$out/wrk.out" || true)
  sample=$(sed -n 's/^SAMPLE //p' "$out/wrk.out")
  answers=$(sed -n 's/^LOAD answers=\([0-9]*\).*/\1/p' <<<"$load")
  failures=$(sed -n 's/^LOAD .*failures=\([0-9]*\).*/\1/p' <<<"$load")
  sockerr=$(awk '{ n = 0; for (i = 4; i <= 7; i++) { split($i, kv, "="); n += kv[2] } print n }' <<<"$load")
  local report
  report="chaos ${CHAOS_SECONDS}s (run ${duration_ms} ms): requests answered=${answers:-?} client errors=${failures:-?} socket errors/timeouts=${sockerr:-?} kills=$kills restarts=$restarts breaker transitions observed=$transitions (final states $states)"
  echo "# $report" >&3
  echo "# wrk: $load" >&3
  sed 's/^/# /' "$log" >&3
  echo "$report" >&2
  cat "$out/wrk.out" >&2
  cp "$log" "$BATS_FILE_TMPDIR/chaos.log"
  echo "$report" >"$BATS_FILE_TMPDIR/chaos.txt"

  [[ -n $load ]] || { echo "wrk printed no LOAD line" >&2; false; }
  [[ -z $sample ]] || echo "first failure: $sample" >&2
  assert_equal "$failures" 0 "client errors (HTTP not 200, or not the expected result)"
  assert_equal "$sockerr" 0 "socket errors and timeouts"
  # Restarting anvil takes seconds on a loaded machine: at least two kills, whatever the duration.
  ((kills >= 2)) || { echo "only $kills kills in ${CHAOS_SECONDS}s" >&2; false; }
  # Bounded but real load: a few requests per second at the very least, even on a loaded machine.
  ((answers >= 5 * CHAOS_SECONDS)) || { echo "only $answers requests answered" >&2; false; }
  ((transitions >= 1)) || { echo "no breaker transition observed" >&2; false; }
  # The sidecar survived and serves.
  kill -0 "$sc_pid"
  run curl -s --max-time 10 -o /dev/null -w '%{http_code}' "$url/healthz"
  assert_equal "$output" 200 "/healthz after the chaos"
}
