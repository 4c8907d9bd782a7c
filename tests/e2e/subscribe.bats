#!/usr/bin/env bats
# rpcroute subscribe (issue 18): eth_subscribe from the command line, one JSON event per line, on
# the sidecar's own subscription machinery. Real anvil (--block-time 1) behind three TCP forwarders
# (tcp_proxy.mjs) as in ws_failover.bats, each provider's HTTP (what a failover's backfill uses)
# over HTTPS through an nginx front before its forwarder: killing a forwarder drops both. The heads
# must come exactly once and in order while the serving provider is killed twice; the logs of a
# filter must be exactly those anvil's eth_getLogs has; SIGINT ends it with whole lines and exit 0,
# after the provider confirmed the eth_unsubscribe (a sidecar's -v log shows it); when every
# provider is gone it ends with one error line and exit 3; bad arguments are usage
# errors (exit 2).

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

# Every subscribe runs under `timeout --foreground -k 30`, not bare `timeout`: a signal sent to bare
# `timeout` reaches its whole process group and is followed by a SIGCONT, and a SIGCONT landing
# while LeakSanitizer stops the world at exit (ASan builds) discards the SIGSTOP of its
# PTRACE_ATTACH, so its tracer and the test wait for good (google/sanitizers#777 is the family).
# --foreground forwards a signal alone, to the command alone; -k turns a hang into a failure.

load helpers

# PUSH1 1 PUSH1 0 PUSH1 0 LOG1 STOP: any call logs topic 0x…01, no data (as in ws_failover.bats).
EMITTER_INIT=0x67600160006000a10060005260086018f3
EMITTER=0x5fbdb2315678afecb367f032d93f642f64180aa3
TOPIC=0x0000000000000000000000000000000000000000000000000000000000000001
OTHER_TOPIC=0x0000000000000000000000000000000000000000000000000000000000000002

setup_file() {
  require_bins RPCROUTE_BIN ANVIL
  if ! command -v node >/dev/null || ! command -v nginx >/dev/null; then
    echo "missing node or nginx; run scripts/setup" >&2
    return 1
  fi
  make_test_pki "$BATS_FILE_TMPDIR/pki"
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

# Waits until FILE has at least N lines (at most LIMIT seconds).
wait_lines() { # FILE N LIMIT
  local deadline=$((SECONDS + $3))
  until (($(wc -l <"$1" 2>/dev/null || echo 0) >= $2)); do
    if ((SECONDS > deadline)); then
      echo "fewer than $2 lines in $1 within $3 s" >&2
      cat "$1" >&2
      return 1
    fi
    nap 0.1
  done
}

# anvil (--block-time 1) behind forwarders p1..pN, each with an HTTPS front (f1..fN) for its HTTP;
# the profile $P (priority: p1 first) with a 3 s resubscribe_timeout_ms.
start_chain() { # N
  local specs=() i
  start_anvil ch --block-time 1
  for ((i = 1; i <= $1; i++)); do
    start_forwarder "p$i" ch
    start_h2_front "$BATS_TEST_TMPDIR/f$i.port" "$(node_port "p$i")" h1
    specs+=("p$i,url=https://localhost:$(cat "$BATS_TEST_TMPDIR/f$i.port"),ws_url=ws://127.0.0.1:$(node_port "p$i"),timeout_ms=1500,tls={ ca_file: \"$TEST_PKI/ca.pem\" }")
  done
  write_profile "$P" --strategy priority "${specs[@]}"
  sed -i 's/^    block_time_ms: 1000$/&\n    websocket: { resubscribe_timeout_ms: 3000 }/' "$P"
}

# The emitter contract (the dev account's first transaction), then a call to it about once a
# block in the background until the test ends.
start_emitting() {
  node_result ch eth_sendTransaction "[{\"from\":\"$DEV_ACCOUNT\",\"data\":\"$EMITTER_INIT\"}]" >/dev/null
  local code deadline=$((SECONDS + 10)) dir
  until code=$(node_result ch eth_getCode "[\"$EMITTER\",\"latest\"]") && [[ $code == '"0x600160006000a100"' ]]; do
    ((SECONDS < deadline)) || { echo "emitter not deployed: $code" >&2; return 1; }
    nap 0.2
  done
  dir=$(_proc_dir)
  (
    while :; do
      node_result ch eth_sendTransaction "[{\"from\":\"$DEV_ACCOUNT\",\"to\":\"$EMITTER\"}]" >/dev/null || true
      sleep 0.9
    done
  ) </dev/null >/dev/null 2>&1 3>&- &
  echo "$!" >"$dir/txloop.pid"
}

# The heads printed in OUT: consecutive numbers, each parentHash the hash before, each hash the one
# anvil has at that height now. Prints "COUNT FIRST LAST".
check_heads() { # OUT
  local numbers first last n
  numbers=$(jq -r '.number' "$1" | while read -r n; do echo $((n)); done)
  first=$(head -n 1 <<<"$numbers")
  last=$(tail -n 1 <<<"$numbers")
  assert_equal "$(tr '\n' ' ' <<<"$numbers")" "$(seq -s ' ' "$first" "$last") " "the heads' numbers"
  assert_equal "$(jq -s '[range(1; length) as $i | select(.[$i].parentHash != .[$i - 1].hash)] | length' "$1")" 0 "parent links"
  local expected got
  got=$(jq -r '.hash' "$1" | tr '\n' ' ')
  expected=$(for ((n = first; n <= last; n++)); do
    node_result ch eth_getBlockByNumber "[\"$(printf '0x%x' "$n")\",false]" | jq -r .hash
  done | tr '\n' ' ')
  assert_equal "$got" "$expected" "the hashes anvil has"
  echo "$(wc -l <"$1") $first $last"
}

@test "subscribe: newHeads --count 16 prints every head once and in order while the serving provider is killed twice" {
  start_chain 3
  local out=$BATS_TEST_TMPDIR/heads.out err=$BATS_TEST_TMPDIR/heads.err
  timeout --foreground -k 30 90 "$RPCROUTE_BIN" subscribe newHeads --count 16 -p "$P" --no-state >"$out" 2>"$err" 3>&- &
  local pid=$!
  wait_lines "$out" 3 20 || { cat "$err" "$P" >&2; false; }
  kill -KILL "$(node_pid p1)" "$(cat "$(_proc_dir)/front-f1.pid")"
  wait_for_line "$err" 'newHeads opened again on p2' 20
  wait_lines "$out" 8 20
  kill -KILL "$(node_pid p2)" "$(cat "$(_proc_dir)/front-f2.pid")"
  wait_for_line "$err" 'newHeads opened again on p3' 20
  local status=0
  wait "$pid" || status=$?
  sed 's/^/# /' "$err" >&3
  assert_equal "$status" 0 "exit status"
  assert_equal "$(wc -l <"$out")" 16 "lines"
  local summary
  summary=$(check_heads "$out")
  echo "# heads: $summary" >&3
  # Each line is a header object as nodes send it.
  assert_equal "$(jq -s 'map(type == "object" and has("number") and has("hash") and has("parentHash")) | all' "$out")" true
}

@test "subscribe: newHeads --count 14 prints every head once and in order while the serving provider stalls" {
  # p1's forwarder stops (SIGSTOP): its WebSocket stays open and silent, its HTTP hangs. The stall
  # detector (3 block times without a head while p2's pollers see the chain move) fails over to p2,
  # and the heads missed meanwhile come over HTTP.
  start_chain 2
  local out=$BATS_TEST_TMPDIR/stall.out err=$BATS_TEST_TMPDIR/stall.err
  timeout --foreground -k 30 90 "$RPCROUTE_BIN" subscribe newHeads --count 14 -p "$P" --no-state >"$out" 2>"$err" 3>&- &
  local pid=$!
  wait_lines "$out" 4 20 || { cat "$err" "$P" >&2; false; }
  kill -STOP "$(node_pid p1)"
  wait_for_line "$err" 'no newHeads from provider p1 .*treated as dropped' 30
  wait_for_line "$err" 'newHeads opened again on p2' 20
  local status=0
  wait "$pid" || status=$?
  kill -KILL "$(node_pid p1)"
  sed 's/^/# /' "$err" >&3
  assert_equal "$status" 0 "exit status"
  assert_equal "$(wc -l <"$out")" 14 "lines"
  local summary
  summary=$(check_heads "$out")
  echo "# heads: $summary" >&3
  grep -Eq 'newHeads: [0-9]+ heads backfilled' "$err"
}

@test "subscribe: logs with --address and --topic print exactly the logs eth_getLogs has, across a failover" {
  start_chain 2
  start_emitting
  local out=$BATS_TEST_TMPDIR/logs.out err=$BATS_TEST_TMPDIR/logs.err
  timeout --foreground -k 30 60 "$RPCROUTE_BIN" subscribe logs --address "$EMITTER" --topic "$TOPIC|$OTHER_TOPIC" -p "$P" --no-state >"$out" 2>"$err" 3>&- &
  local pid=$!
  wait_lines "$out" 3 20
  local from
  from=$(($(head -n 1 "$out" | jq -r .blockNumber)))
  kill -KILL "$(node_pid p1)" "$(cat "$(_proc_dir)/front-f1.pid")"
  wait_for_line "$err" 'logs opened again on p2' 20
  wait_lines "$out" 8 20
  kill -INT "$pid"
  local status=0
  wait "$pid" || status=$?
  assert_equal "$status" 0 "exit status"
  # Up to the block before the last one printed: the signal may have come between two logs of it.
  local to
  to=$(($(tail -n 1 "$out" | jq -r .blockNumber) - 1))
  local expected
  expected=$(node_result ch eth_getLogs "[{\"address\":\"$EMITTER\",\"topics\":[\"$TOPIC\"],\"fromBlock\":\"$(printf '0x%x' "$from")\",\"toBlock\":\"$(printf '0x%x' "$to")\"}]" |
    jq -c '[.[] | [.blockNumber, .logIndex, .transactionHash]]')
  echo "# logs from $from to $to: $(wc -l <"$out") lines" >&3
  assert_equal "$(jq -sc --argjson to "$to" '[.[] | select((.blockNumber | ltrimstr("0x") | explode | reduce .[] as $c (0; . * 16 + (if $c >= 97 then $c - 87 else $c - 48 end))) <= $to) | [.blockNumber, .logIndex, .transactionHash]]' "$out")" "$expected" "the logs"
  assert_equal "$(jq -s 'map(.removed) | any' "$out")" false "removed logs"
  # A filter that matches nothing prints nothing.
  run --separate-stderr timeout --foreground -k 30 30 "$RPCROUTE_BIN" subscribe logs --address 0x00000000000000000000000000000000000000aa --topic null --topic "$TOPIC" -p "$P" --no-state --duration 3s
  assert_status 0
  assert_equal "$output" "" "the output of a filter that matches nothing"
}

@test "subscribe: SIGINT and SIGTERM mid-stream end it with whole lines and exit 0" {
  start_chain 1
  local sig
  for sig in INT TERM; do
    local out=$BATS_TEST_TMPDIR/$sig.out err=$BATS_TEST_TMPDIR/$sig.err
    timeout --foreground -k 30 60 "$RPCROUTE_BIN" subscribe newHeads -p "$P" --no-state >"$out" 2>"$err" 3>&- &
    local pid=$!
    wait_lines "$out" 2 20
    kill "-$sig" "$pid"
    local status=0
    wait "$pid" || status=$?
    assert_equal "$status" 0 "exit status after SIG$sig"
    assert_equal "$(wc -c <"$err")" 0 "stderr after SIG$sig"
    # Every line whole: each parses as a header and the file ends with a newline.
    assert_equal "$(jq -s 'map(has("hash")) | all' "$out")" true
    assert_equal "$(tail -c 1 "$out" | od -An -c | tr -d ' ')" '\n'
  done
  # A storm of SIGINTs (the copies `timeout` and a job kill send to the process group) changes
  # nothing: the first ends it, the rest are ignored until the exit.
  local out=$BATS_TEST_TMPDIR/storm.out err=$BATS_TEST_TMPDIR/storm.err
  "$RPCROUTE_BIN" subscribe newHeads -p "$P" --no-state >"$out" 2>"$err" 3>&- &
  local pid=$!
  wait_lines "$out" 2 20
  signal_storm INT "$pid"
  local status=0
  wait "$pid" || status=$?
  assert_equal "$status" 0 "exit status after a storm of SIGINT"
  assert_equal "$(wc -c <"$err")" 0 "stderr after a storm of SIGINT"
  # --duration ends it too, with exit 0.
  run --separate-stderr timeout --foreground -k 30 30 "$RPCROUTE_BIN" subscribe newHeads -p "$P" --no-state --duration 2500ms
  assert_status 0
  (($(wc -l <<<"$output") >= 1))
}

@test "subscribe: after SIGINT the provider gets eth_unsubscribe before the socket closes" {
  # The provider is a sidecar (its -v log has a line per WebSocket message) in front of anvil.
  start_anvil ch --block-time 1
  write_profile "$P" "ch,ws_url=ws://127.0.0.1:$(node_port ch)"
  start_serve sc -p "$P" --no-state -v
  local via=$BATS_TEST_TMPDIR/via.yaml out=$BATS_TEST_TMPDIR/via.out log
  log=$(_node_file sc log)
  write_profile "$via" "sc,url=http://127.0.0.1:$(node_port sc)/rpc/local,ws_url=ws://127.0.0.1:$(node_port sc)/rpc/local"
  timeout --foreground -k 30 60 "$RPCROUTE_BIN" subscribe newHeads -p "$via" --no-state >"$out" 3>&- &
  local pid=$!
  wait_lines "$out" 2 20
  kill -INT "$pid"
  local status=0
  wait "$pid" || status=$?
  assert_equal "$status" 0 "exit status"
  grep 'websocket' "$log" | sed 's/^/# /' >&3
  grep -Eq 'websocket .*: message eth_subscribe ' "$log"
  grep -Eq 'websocket .*: message eth_unsubscribe ' "$log"
}

@test "subscribe: every provider gone ends it with one error line and exit 3" {
  start_chain 2
  local out=$BATS_TEST_TMPDIR/dead.out err=$BATS_TEST_TMPDIR/dead.err
  timeout --foreground -k 30 60 "$RPCROUTE_BIN" subscribe newHeads -p "$P" --no-state >"$out" 2>"$err" 3>&- &
  local pid=$!
  wait_lines "$out" 2 20
  local killed_at=$SECONDS
  kill -KILL "$(node_pid p1)" "$(node_pid p2)"
  local status=0
  wait "$pid" || status=$?
  sed 's/^/# /' "$err" >&3
  assert_equal "$status" 3 "exit status"
  # Within the 3 s resubscribe_timeout_ms and the retries' last wait.
  ((SECONDS - killed_at <= 10))
  grep -Eq '^rpcroute: error: no provider can serve the newHeads subscription on chain .local.: no provider took the newHeads subscription again within 3000 ms' "$err"
  assert_equal "$(grep -c '^rpcroute: error:' "$err")" 1 "error lines"
  # Nothing torn: every line printed is a header.
  assert_equal "$(jq -s 'map(has("hash")) | all' "$out")" true
  # With nothing to open at the start: exit 3 at once, the same kind of line.
  run --separate-stderr timeout --foreground -k 30 30 "$RPCROUTE_BIN" subscribe newHeads -p "$P" --no-state
  assert_status 3
  assert_equal "$(grep -c '^rpcroute: error: no provider can serve the newHeads subscription' <<<"$stderr")" 1
}

@test "subscribe: bad arguments are usage errors (exit 2)" {
  write_profile "$P" "a,url=http://127.0.0.1:9,ws_url=ws://127.0.0.1:9"
  run --separate-stderr rpcroute subscribe newBlocks -p "$P" --no-state
  assert_status 2
  assert_stderr_matches "unknown subscription 'newBlocks' \\(expected one of: newHeads, logs, newPendingTransactions\\)"
  run --separate-stderr rpcroute subscribe logs --address 0x1234 -p "$P" --no-state
  assert_status 2
  assert_stderr_matches "bad --address '0x1234'"
  run --separate-stderr rpcroute subscribe logs --topic 0xzz -p "$P" --no-state
  assert_status 2
  assert_stderr_matches "bad --topic '0xzz' at position 0"
  run --separate-stderr rpcroute subscribe logs --topic null --topic null --topic null --topic null --topic null -p "$P" --no-state
  assert_status 2
  assert_stderr_matches "5 --topic given"
  run --separate-stderr rpcroute subscribe newHeads --address "$EMITTER" -p "$P" --no-state
  assert_status 2
  assert_stderr_matches "filter a logs subscription only"
  run --separate-stderr rpcroute subscribe newHeads --count 0 -p "$P" --no-state
  assert_status 2
  run --separate-stderr rpcroute subscribe newHeads --duration soon -p "$P" --no-state
  assert_status 2
  assert_stderr_matches "bad --duration 'soon'"
  run --separate-stderr rpcroute subscribe -p "$P" --no-state
  assert_status 2
  # A chain without any ws_url: a configuration error, said as such.
  write_profile "$P" "a,url=http://127.0.0.1:9"
  run --separate-stderr rpcroute subscribe newHeads -p "$P" --no-state
  assert_status 2
  assert_stderr_matches "no provider of chain 'local' in profile '[a-z0-9_-]+' has a ws_url: subscriptions need one"
}
