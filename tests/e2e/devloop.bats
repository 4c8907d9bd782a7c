#!/usr/bin/env bats
# The sidecar in a developer's loop (issue 15): nodes that come back are used at once, a hung node is
# left fast. Real anvil nodes behind `rpcroute serve` (and `rpcroute call` with a state file), under
# polling traffic like an app's: one eth_blockNumber request every POLL_S seconds, each on its own
# connection and in the background, so that a slow answer does not hold the next poll back.

# jq programs are single-quoted on purpose.
# shellcheck disable=SC2016

load helpers

setup_file() {
  require_bins RPCROUTE_BIN ANVIL
}

setup() {
  e2e_setup
}

teardown() {
  # A stopped node would ignore SIGTERM until the end of stop_all's wait.
  local f
  for f in "$BATS_TEST_TMPDIR"/procs/*.pid; do
    [[ -f $f ]] && kill -CONT "$(cat "$f")" 2>/dev/null || true
  done
  stop_polling
  stop_all
}

POLL_S=${POLL_S:-0.1}

# Starts polling URL in the background; one line per request in LOG:
#   START_MS END_MS HTTP_CODE OK(1 when HTTP 200: the sidecar answers errors of its own with 503) PROVIDER ATTEMPTS
# One process per request (curl); times from bash's clock, so a loaded machine skews them little.
start_polling() { # URL LOG
  local url=$1 log=$2
  : >"$log"
  touch "$BATS_TEST_TMPDIR/polling"
  (
    while [[ -f $BATS_TEST_TMPDIR/polling ]]; do
      (
        t=${EPOCHREALTIME/./}
        t0=${t:0:-3}
        w=$(curl -s --max-time 20 -o /dev/null -H 'content-type: application/json' \
          --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' \
          -w '%{http_code} %header{x-rpcroute-provider} %header{x-rpcroute-attempts}' "$url" 2>/dev/null) || true
        read -r code provider attempts <<<"$w"
        ok=0
        [[ $code == 200 ]] && ok=1
        t=${EPOCHREALTIME/./}
        echo "$t0 ${t:0:-3} ${code:-000} $ok ${provider:--} ${attempts:-0}" >>"$log"
      ) 3>&- &
      sleep "$POLL_S"
    done
    wait
  ) 3>&- &
  echo $! >"$BATS_TEST_TMPDIR/polling.pid"
}

# Stops the poll loop and waits for the requests in flight.
stop_polling() {
  rm -f "$BATS_TEST_TMPDIR/polling"
  local f=$BATS_TEST_TMPDIR/polling.pid
  [[ -f $f ]] || return 0
  local pid
  pid=$(cat "$f")
  rm -f "$f"
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
}

# The breaker state of provider ID from the sidecar's /metrics: 0 closed, 1 half-open, 2 open.
breaker_of() { # URL ID
  curl -s --max-time 5 "$1/metrics" |
    awk -v id="$2" 'index($0, "rpcroute_breaker_state{") == 1 && index($0, "provider=\"" id "\"") { print $NF }'
}

# Waits up to LIMIT_S seconds until every provider ID... has breaker state STATE.
wait_breakers() { # URL STATE LIMIT_S ID...
  local url=$1 state=$2 limit=$3 id all
  shift 3
  local deadline=$((SECONDS + limit))
  while ((SECONDS < deadline)); do
    all=1
    for id in "$@"; do
      [[ $(breaker_of "$url" "$id") == "$state" ]] || all=0
    done
    ((all)) && return 0
    sleep 0.05
  done
  echo "breakers of $* not $state within ${limit}s" >&2
  return 1
}

@test "serve: a node back after every breaker opened serves within 2 s of its return, under polling traffic" {
  start_anvil n1
  start_anvil n2
  # Default breaker settings: failure_threshold 5, recovery_timeout_ms 30 000.
  write_profile "$P" n1 n2
  start_serve sc -p "$P" --state "$BATS_TEST_TMPDIR/sc-state.json"
  local url log=$BATS_TEST_TMPDIR/polls
  url=$(node_url sc)
  start_polling "$url/rpc/local" "$log"
  sleep 1
  kill -9 "$(node_pid n1)" "$(node_pid n2)"
  wait_breakers "$url" 2 20 n1 n2
  sleep 2  # both down a while, as in the issue (a restart, a few seconds)
  respawn_anvil n1
  local back
  back=$(now_ms)
  # The first answer with a result among requests sent after the node returned.
  local first="" deadline=$((SECONDS + 15))
  while ((SECONDS < deadline)); do
    first=$(awk -v t="$back" '$1 >= t && $4 == 1 { print $2 }' "$log" | sort -n | head -1)
    [[ -n $first ]] && break
    sleep 0.1
  done
  stop_polling
  cat "$log" >&2
  [[ -n $first ]] || { echo "no request was served within 15 s of n1's return" >&2; false; }
  local delay=$((first - back))
  echo "# first answer $delay ms after n1 returned" >&3
  ((delay <= 2000)) || { echo "first answer $delay ms after n1 returned" >&2; false; }
  # And it is n1's breaker that closed: n2 is still down.
  [[ $(breaker_of "$url" n1) == 0 ]]
}

@test "call: with every breaker open in the state file, a node that is back serves the next call as a trial" {
  start_anvil n1
  start_anvil n2
  write_profile "$P" n1 n2 --extra 'health: {circuit_breaker: {failure_threshold: 2, recovery_timeout_ms: 60000}}'
  kill_node n1
  kill_node n2
  for _ in 1 2; do
    run rpcroute call -p "$P" eth_blockNumber
    assert_status 3
  done
  run rpcroute state show --json
  assert_status 0
  assert_json "$output" '[.providers[] | .breaker.state] == ["open", "open"]'

  respawn_anvil n2
  run --separate-stderr rpcroute call -p "$P" eth_blockNumber
  assert_status 0
  assert_equal "$output" "\"0x0\""
  run rpcroute state show --json
  assert_json "$output" '.providers[] | select(.provider == "n2") | .breaker.state == "closed"'
  assert_json "$output" '.providers[] | select(.provider == "n1") | .breaker.state == "open"'
}

@test "serve: a hung node (SIGSTOP) opens its breaker within a couple of block times and traffic moves away" {
  start_anvil n1
  start_anvil n2
  start_anvil n3
  # Default breaker settings and attempt timeouts (5 s for eth_blockNumber); block_time_ms 1000.
  write_profile "$P" n1 n2 n3
  start_serve sc -p "$P" --state "$BATS_TEST_TMPDIR/sc-state.json"
  local url log=$BATS_TEST_TMPDIR/polls
  url=$(node_url sc)
  POLL_S=0.2 start_polling "$url/rpc/local" "$log"
  sleep 1.5
  local stopped opened
  kill -STOP "$(node_pid n1)"
  stopped=$(now_ms)
  wait_breakers "$url" 2 20 n1
  opened=$(now_ms)
  echo "# n1's breaker open $((opened - stopped)) ms after SIGSTOP" >&3
  # Keep polling until well past the first timeouts (5 s).
  while (($(now_ms) < stopped + 7000)); do sleep 0.2; done
  kill -CONT "$(node_pid n1)"
  stop_polling
  cat "$log" >&2
  # A couple of block times (1 s each) plus the poll's 2 s timeout, with room for a loaded machine;
  # with five timeouts to count it took 8 s and more.
  (((opened - stopped) <= 5000)) || { echo "n1's breaker opened $((opened - stopped)) ms after SIGSTOP" >&2; false; }
  # Every request was answered with a result (the hung node's were failed over) ...
  run awk '$3 != 200 || $4 != 1' "$log"
  assert_equal "$output" "" "requests without a result"
  # ... and from 3.5 s after the SIGSTOP on, none went to the hung node first.
  run awk -v t=$((stopped + 3500)) '$1 >= t && $6 != 1' "$log"
  assert_equal "$output" "" "requests that tried n1 first after it was found hung"
  local late
  late=$(awk -v t=$((stopped + 3500)) '$1 >= t' "$log" | wc -l)
  ((late >= 5)) || { echo "only $late requests after 3.5 s" >&2; false; }
}

# A contract whose code emits one log (LOG0) when called: a call's receipt shows whether the node
# that mined it also holds the contract.
INIT_CODE=0x6560006000a0006000526006601af3

@test "serve: a deploy-then-call flow through load_balanced on nodes of one chain sees its own nonce and receipt every time" {
  require_bins CAST
  # "Nodes of one chain" on one machine: three anvil forks of a first anvil share its chain id and
  # history, but each has its own mempool and mines on its own, as real providers' nodes hold a
  # transaction before it propagates. Only the router keeps a sender on one of them. The profile
  # tolerates the forks' diverging heights (max_lag_blocks), as nodes of one chain do not diverge.
  start_anvil root
  local n
  for n in n1 n2 n3; do start_anvil "$n" --fork-url "$(node_url root)"; done
  cat >"$P" <<YAML
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    max_lag_blocks: 1000
    providers:
      - { id: n1, url: "$(node_url n1)" }
      - { id: n2, url: "$(node_url n2)" }
      - { id: n3, url: "$(node_url n3)" }
routing:
  default_strategy: load_balanced
YAML
  start_serve sc -p "$P" --no-state
  local rpc key=0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d
  local sender=0x70997970C51812dc3A010C7d01b50e0d17dc79C8
  rpc=$(node_url sc)/rpc/local
  local round nonce receipt contract expected=0
  for round in 1 2 3 4; do
    run timeout 60 "$CAST" nonce --rpc-url "$rpc" --block pending "$sender"
    assert_status 0
    assert_equal "$output" "$expected" "round $round: the sender's pending nonce before its deploy"
    run timeout 60 "$CAST" send --rpc-url "$rpc" --private-key "$key" --timeout 20 --json --create "$INIT_CODE"
    assert_status 0
    receipt=$output
    assert_json "$receipt" '.status == "0x1"'
    contract=$(jq -r '.contractAddress' <<<"$receipt")
    [[ $contract == 0x* ]]
    run timeout 60 "$CAST" nonce --rpc-url "$rpc" --block pending "$sender"
    assert_equal "$output" "$((expected + 1))" "round $round: the pending nonce after the deploy"
    run timeout 60 "$CAST" send --rpc-url "$rpc" --private-key "$key" --timeout 20 --json "$contract"
    assert_status 0
    receipt=$output
    assert_json "$receipt" '.status == "0x1"'
    # The call ran the contract's code: the node that mined it is the one that holds the contract.
    assert_json "$receipt" '.logs | length == 1'
    run timeout 60 "$CAST" receipt --rpc-url "$rpc" --json "$(jq -r '.transactionHash' <<<"$receipt")"
    assert_status 0
    assert_json "$output" '.status == "0x1"'
    expected=$((expected + 2))
  done
}
