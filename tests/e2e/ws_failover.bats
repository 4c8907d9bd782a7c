#!/usr/bin/env bats
# WebSocket subscriptions that survive provider failures (issue 18): three providers in front of
# ONE anvil (--block-time 1), each a TCP forwarder (tcp_proxy.mjs) a test can stop (SIGSTOP: a
# stalled socket) or kill (a dropped one). A client subscribed through the sidecar to newHeads and
# to the logs of a contract that some transaction calls in most blocks must see every head exactly
# once and in order, and every log exactly once (checked against anvil's own eth_getLogs), while
# the serving provider stalls and then, on the next one, is killed.

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers

WS_CLIENT=$BATS_TEST_DIRNAME/ws_client.mjs
# PUSH1 1 PUSH1 0 PUSH1 0 LOG1 STOP: any call logs topic 0x…01, no data. Deployed by the code below.
EMITTER_INIT=0x67600160006000a10060005260086018f3
TOPIC=0x0000000000000000000000000000000000000000000000000000000000000001

setup_file() {
  require_bins RPCROUTE_BIN ANVIL
  if [[ ! -d $REPO/.tools/ws-client/node_modules/ws ]] || ! command -v node >/dev/null; then
    echo "missing node or .tools/ws-client (ws); run scripts/setup" >&2
    return 1
  fi
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

# Waits until the client has printed N more heads than it had.
wait_heads() { # FILE N
  local want deadline=$((SECONDS + 30))
  want=$(($(grep -c '"head"' "$1" || true) + $2))
  until (($(grep -c '"head"' "$1" || true) >= want)); do
    if ((SECONDS > deadline)); then
      echo "fewer than $want heads in $1" >&2
      return 1
    fi
    nap 0.2
  done
}

@test "ws failover: newHeads and logs exactly once and in order while the serving provider stalls, then another is killed" {
  start_anvil ch --block-time 1
  # The emitter (the dev account's first transaction: its address is known), then a transaction
  # to it about once a block, for the whole test.
  node_result ch eth_sendTransaction "[{\"from\":\"$DEV_ACCOUNT\",\"data\":\"$EMITTER_INIT\"}]" >/dev/null
  local emitter=0x5fbdb2315678afecb367f032d93f642f64180aa3 dir code
  local deadline=$((SECONDS + 10))
  until code=$(node_result ch eth_getCode "[\"$emitter\",\"latest\"]") && [[ $code == '"0x600160006000a100"' ]]; do
    ((SECONDS < deadline)) || { echo "emitter not deployed: $code" >&2; return 1; }
    nap 0.2
  done
  dir=$(_proc_dir)
  (
    while :; do
      node_result ch eth_sendTransaction "[{\"from\":\"$DEV_ACCOUNT\",\"to\":\"$emitter\"}]" >/dev/null || true
      sleep 0.9
    done
  ) </dev/null >/dev/null 2>&1 3>&- &
  echo "$!" >"$dir/txloop.pid"

  start_forwarder p1 ch
  start_forwarder p2 ch
  start_forwarder p3 ch
  local specs=() p
  for p in p1 p2 p3; do specs+=("$p,ws_url=ws://127.0.0.1:$(node_port "$p"),timeout_ms=1500"); done
  write_profile "$P" --strategy priority "${specs[@]}"
  start_serve sc -p "$P" --no-state
  local out=$BATS_TEST_TMPDIR/follow.out log
  log=$(_node_file sc log)
  WS_CLIENT_LIMIT_MS=120000 timeout 130 node "$WS_CLIENT" follow "ws://127.0.0.1:$(node_port sc)/rpc/local" 40 \
    "{\"address\":\"$emitter\",\"topics\":[\"$TOPIC\"]}" "$(node_url ch)" >"$out" 3>&- &
  local client=$!
  wait_heads "$out" 6

  # p1 stalls: its socket stays open and silent; the stall detector (3 block times while the
  # others' heads move) fails over to p2 and the heads missed meanwhile are backfilled.
  kill -STOP "$(node_pid p1)"
  wait_for_line "$log" 'no newHeads from provider p1 .*treated as dropped' 20
  wait_for_line "$log" 'newHeads opened again on p2' 20
  kill -KILL "$(node_pid p1)"
  wait_heads "$out" 8

  # p2 is killed: its socket drops; p3 takes over.
  kill -KILL "$(node_pid p2)"
  wait_for_line "$log" 'newHeads opened again on p3' 20

  wait "$client"
  local summary
  summary=$(grep '"heads"' "$out" | tail -n 1)
  echo "# $summary" >&3
  grep -E 'backfilled|reorg|opened again|treated as dropped' "$log" | sed 's/^/# /' >&3
  assert_equal "$(jq -c '[.heads, .in_order, .gaps, .dups, .errors]' <<<"$summary")" '[40,true,[],0,[]]' "the heads"
  assert_equal "$(jq -c '[.logs_missing, .logs_extra, .logs_dups, (.logs_expected > 15)]' <<<"$summary")" '[0,0,0,true]' "the logs"
  # The stall left a gap that came over HTTP.
  grep -Eq 'newHeads: [0-9]+ heads backfilled' "$log"
}

@test "ws failover: a reorg while the serving provider stalls reaches the client from the fork point" {
  start_anvil ch --block-time 1
  start_forwarder p1 ch
  start_forwarder p2 ch
  local specs=() p
  for p in p1 p2; do specs+=("$p,ws_url=ws://127.0.0.1:$(node_port "$p"),timeout_ms=1500"); done
  write_profile "$P" --strategy priority "${specs[@]}"
  start_serve sc -p "$P" --no-state
  local out=$BATS_TEST_TMPDIR/chain.out log
  log=$(_node_file sc log)
  WS_CLIENT_LIMIT_MS=60000 timeout 70 node "$WS_CLIENT" chain "ws://127.0.0.1:$(node_port sc)/rpc/local" 20 "$(node_url ch)" >"$out" 3>&- &
  local client=$!
  wait_heads "$out" 4
  # p1 stalls, and meanwhile the chain drops its last 3 blocks for others: p2's first head does
  # not follow the last one sent; the sidecar walks back by parent hash to the fork point.
  kill -STOP "$(node_pid p1)"
  curl -sf --max-time 5 -X POST -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":1,"method":"anvil_reorg","params":[3,[]]}' "$(node_url ch)" >/dev/null
  wait_for_line "$log" 'newHeads opened again on p2' 20
  kill -KILL "$(node_pid p1)"
  wait "$client"
  local summary
  summary=$(grep '"breaks"' "$out" | tail -n 1)
  echo "# $summary" >&3
  grep -E 'backfilled|reorg|opened again|treated as dropped' "$log" | sed 's/^/# /' >&3
  # Every head follows the last one delivered at the height below, none twice, and what the client
  # holds last at each height is the chain's.
  assert_equal "$(jq -c '[.breaks, .dups, .stale, (.heads > 10)]' <<<"$summary")" '[0,0,0,true]'
  grep -Eq 'newHeads: reorg at [0-9]+' "$log"
}

@test "ws failover: when no provider can serve any more, an error notification, then a close with 1013" {
  start_anvil ch --block-time 1
  start_forwarder p1 ch
  start_forwarder p2 ch
  local specs=() p
  for p in p1 p2; do specs+=("$p,ws_url=ws://127.0.0.1:$(node_port "$p"),timeout_ms=1500"); done
  write_profile "$P" --strategy priority "${specs[@]}"
  sed -i 's/^    block_time_ms: 1000$/&\n    websocket: { resubscribe_timeout_ms: 3000 }/' "$P"
  start_serve sc -p "$P" --no-state
  local out=$BATS_TEST_TMPDIR/ended.out log
  log=$(_node_file sc log)
  timeout 50 node "$WS_CLIENT" listen "ws://127.0.0.1:$(node_port sc)/rpc/local" '["newHeads"]' 40 >"$out" 3>&- &
  local client=$!
  wait_for_line "$out" '"number":' 20
  local killed_at=$SECONDS
  kill -KILL "$(node_pid p1)" "$(node_pid p2)"
  wait "$client"
  sed 's/^/# /' "$out" >&3
  # Within the 3 s resubscribe_timeout_ms and the last retry's wait, long before the client's 40 s.
  ((SECONDS - killed_at <= 10))
  local id
  id=$(jq -r 'select(.id) | .id' "$out")
  # The error notification for the subscription, then the close: the last two lines.
  assert_json "$(tail -n 2 "$out" | head -n 1)" '.subscription == $id and .ended.code == -32050
    and (.ended.message | test("^no provider can serve this subscription: no provider took the newHeads subscription again within 3000 ms: "))' --arg id "$id"
  assert_equal "$(tail -n 1 "$out")" '{"close":1013,"reason":"no provider can serve a subscription of this connection"}' "the close"
  grep -q 'a subscription ended, closing with 1013' "$log"
}

# The logs client's lines in FILE as [block, index, hash] (removed ones dropped), from block FROM
# to block TO.
logs_of() { # FILE FROM TO
  jq -c --argjson from "$2" --argjson to "$3" \
    'select(.log and (.log[3] | not) and .log[0] >= $from and .log[0] <= $to) | .log[0:3]' "$1"
}

# The node's own eth_getLogs for the emitter's topic over FROM..TO, one [block, index, hash] a line.
anvil_logs() { # EMITTER FROM TO
  node_result ch eth_getLogs "[{\"address\":\"$1\",\"topics\":[\"$TOPIC\"],\"fromBlock\":\"$(printf '0x%x' "$2")\",\"toBlock\":\"$(printf '0x%x' "$3")\"}]" |
    jq -c 'def n: ltrimstr("0x") | explode | reduce .[] as $c (0; . * 16 + (if $c >= 97 then $c - 87 else $c - 48 end));
      .[] | [(.blockNumber | n), (.logIndex | n), .blockHash]'
}

@test "ws failover: a logs client that subscribes while the retries wait gets the same gap-free stream as the others" {
  # One provider, its WebSocket through a forwarder that refuses (SIGUSR2) and then forwards again
  # (SIGHUP); its HTTP (the catch-up's eth_getLogs) straight to anvil. Client A holds a logs
  # subscription; the provider refuses: A's subscription is retried, ever more slowly. While the
  # retries wait (8 s), the provider is back and client B subscribes to the same filter: B's
  # subscribe opens it again. A must still get every log of the outage (the catch-up), and B the
  # same stream from there: the catch-up first, then the live logs.
  start_anvil ch --block-time 1
  node_result ch eth_sendTransaction "[{\"from\":\"$DEV_ACCOUNT\",\"data\":\"$EMITTER_INIT\"}]" >/dev/null
  local emitter=0x5fbdb2315678afecb367f032d93f642f64180aa3 dir code
  local deadline=$((SECONDS + 10))
  until code=$(node_result ch eth_getCode "[\"$emitter\",\"latest\"]") && [[ $code == '"0x600160006000a100"' ]]; do
    ((SECONDS < deadline)) || { echo "emitter not deployed: $code" >&2; return 1; }
    nap 0.2
  done
  dir=$(_proc_dir)
  (
    while :; do
      node_result ch eth_sendTransaction "[{\"from\":\"$DEV_ACCOUNT\",\"to\":\"$emitter\"}]" >/dev/null || true
      sleep 0.9
    done
  ) </dev/null >/dev/null 2>&1 3>&- &
  echo "$!" >"$dir/txloop.pid"

  start_forwarder p1 ch
  write_profile "$P" --strategy priority "p1,url=$(node_url ch),ws_url=ws://127.0.0.1:$(node_port p1),timeout_ms=1500"
  sed -i 's/^    block_time_ms: 1000$/&\n    websocket: { resubscribe_timeout_ms: 60000 }/' "$P"
  start_serve sc -p "$P" --no-state
  local log a=$BATS_TEST_TMPDIR/a.out b=$BATS_TEST_TMPDIR/b.out filter url
  log=$(_node_file sc log)
  url="ws://127.0.0.1:$(node_port sc)/rpc/local"
  filter="{\"address\":\"$emitter\",\"topics\":[\"$TOPIC\"]}"
  node "$WS_CLIENT" logs "$url" "$filter" >"$a" 3>&- &
  echo "$!" >"$dir/client-a.pid"
  wait_for_line "$a" '"log"' 20
  local first
  first=$(jq -s 'map(select(.log)) | .[0].log[0]' "$a")

  kill -USR2 "$(node_pid p1)"
  wait_for_line "$log" 'next try in 8000 ms' 30
  kill -HUP "$(node_pid p1)"
  local before
  before=$(($(node_result ch eth_blockNumber '[]' | tr -d '"')))
  ((before > first)) || { echo "anvil's head $before is not past block $first" >&2; return 1; }
  node "$WS_CLIENT" logs "$url" "$filter" >"$b" 3>&- &
  echo "$!" >"$dir/client-b.pid"
  wait_for_line "$b" '"id":"0x' 10
  # A few blocks of live logs after it, for both.
  local until_block=$((before + 5)) last_a last_b
  deadline=$((SECONDS + 30))
  until last_a=$(jq -s 'map(select(.log)) | .[-1].log[0] // 0' "$a") && last_b=$(jq -s 'map(select(.log)) | .[-1].log[0] // 0' "$b") &&
    ((last_a >= until_block && last_b >= until_block)); do
    ((SECONDS < deadline)) || { echo "no logs up to block $until_block: A at $last_a, B at $last_b" >&2; cat "$log" >&2; return 1; }
    nap 0.2
  done
  kill "$(cat "$dir/client-a.pid")" "$(cat "$dir/client-b.pid")"
  grep -E 'opened again|could not be opened|backfilled|reorg' "$log" | sed 's/^/# /' >&3
  assert_equal "$(jq -c 'select(.id != null or .error != null) | .error' "$b")" null "B's subscribe answer"
  # A: every log from its first block up to the one before until_block (that one may be partial),
  # exactly once.
  local to=$((until_block - 1))
  assert_equal "$(logs_of "$a" "$first" "$to")" "$(anvil_logs "$emitter" "$first" "$to")" "A's logs"
  # B: the same stream from its first log on, and that first log is from before B subscribed: the
  # catch-up reached B too.
  local b_first
  b_first=$(jq -s 'map(select(.log)) | .[0].log[0]' "$b")
  echo "# A's logs from block $first, B's from $b_first; B subscribed at block $before" >&3
  ((b_first <= before)) || { echo "B's first log is from block $b_first, after it subscribed at $before" >&2; return 1; }
  assert_equal "$(logs_of "$b" "$b_first" "$to")" "$(anvil_logs "$emitter" "$b_first" "$to")" "B's logs"
  assert_equal "$(jq -c 'select(.log and .log[3])' "$a" "$b")" "" "removed logs"
  grep -Eq 'logs opened again on p1' "$log"
  grep -Eq 'logs: backfilled blocks [0-9]+\.\.[0-9]+ \([1-9][0-9]* logs new\)' "$log"
}
