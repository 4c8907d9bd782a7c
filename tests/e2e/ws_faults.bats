#!/usr/bin/env bats
# The WebSocket fault table (issue 18): every WebSocket fault of the fake upstream, over ws:// and
# over wss://, behind `rpcroute serve`.
#
# A row is one fault (fake_upstream.cpp, "WebSocket"): drop, stall, garbage, slow, refuse, huge.
# Its profile has two fakes of one chain (4 blocks a second, the same heights: their blocks and
# hashes agree), F first by priority and H second, both with a ws_url (over wss://, H's is
# `from_url`: the wss:// twin of its https:// url); block_time_ms 250 and
# websocket.stall_blocks 4 (a silent socket is treated as dropped after 1 s while the head moves
# elsewhere), max_lag_blocks 40 (at 4 blocks a second, probes of a loaded machine see a fake a few
# blocks behind the other: it must stay a candidate). A client subscribes to newHeads through the sidecar (ws_client.mjs heads) and gets
# its first heads from F; then F's fault is set through /_control and the client must receive
# HEADS_AFTER more heads within LIMIT_S seconds, each number exactly once, in order, each head's
# parentHash the hash of the head before (no gap, no duplicate, no break). The fault must have hit
# (F's /_stats "ws" counts it) and, but for slow (which only delays), the subscription must have
# moved to H. The garbage and huge rows must leave the sidecar answering (/healthz) with its
# resident memory grown by less than RSS_GROWTH_KB. Two more huge rows turn the stall detector off
# in practice: the message over the limit alone must move the subscription, at once (ws_huge_row).
#
# Every row runs twice: fakes on ws:// (plain) and on wss:// (the fake's TLS mode, a test CA the
# profile trusts through tls: {ca_file}). Every row also checks that the sidecar's log never shows
# the providers' URL paths (each holds a key).
#
# A last test opens wss:// to fakes whose certificate fails (unknown CA, expired, wrong host), to
# one that never answers the ClientHello, and to one that wants a client certificate (mTLS, with
# and without the provider's cert_file): the subscription's error names the cause, never the URL.

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers

WS_CLIENT=$BATS_TEST_DIRNAME/ws_client.mjs
HEADS_BEFORE=3
HEADS_AFTER=10
LIMIT_S=25
RSS_GROWTH_KB=$((96 * 1024))
KEY=k3yInThePath9f2

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  if [[ ! -d $REPO/.tools/ws-client/node_modules/ws ]] || ! command -v node >/dev/null; then
    echo "missing node or .tools/ws-client (ws); run scripts/setup" >&2
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

rss_kb() { # PID
  awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# Waits until the client has printed N heads in all.
wait_heads() { # FILE N LIMIT_S
  local deadline=$((SECONDS + $3)) got
  for (( ; ; )); do
    got=$(grep -c '"head"' "$1" 2>/dev/null) || got=${got:-0}
    ((got < $2)) || break
    if ((SECONDS > deadline)); then
      echo "fewer than $2 heads in $1 within $3 s:" >&2
      cat "$1" >&2
      return 1
    fi
    nap 0.1
  done
}

# One row: FAULT over SCHEME (ws or wss), with websocket.stall_blocks STALL_BLOCKS (default 4);
# with MOVE_LIMIT_S, H must have taken the subscription within that many seconds of the fault.
ws_fault_row() { # FAULT SCHEME [STALL_BLOCKS [MOVE_LIMIT_S]]
  local fault=$1 scheme=$2 stall_blocks=${3:-4} move_limit=${4:-} http=http host=127.0.0.1 tls="" n
  if [[ $scheme == wss ]]; then
    http=https host=localhost tls="        tls: { ca_file: $TEST_PKI/ca.pem }"
    start_tls_fake f --mine-per-sec 4 --ws-slow-ms 600
    start_tls_fake h --mine-per-sec 4
  else
    start_fake f --mine-per-sec 4 --ws-slow-ms 600
    start_fake h --mine-per-sec 4
  fi
  # One chain: the same height at (nearly) the same moment, so that both fakes' heads agree.
  fake_control f '{"height":1000}'
  fake_control h '{"height":1000}'
  {
    echo "name: e2e"
    echo "chains:"
    echo "  local:"
    echo "    chain_id: 31337"
    echo "    block_time_ms: 250"
    echo "    max_lag_blocks: 40"
    echo "    websocket: { stall_blocks: $stall_blocks }"
    echo "    providers:"
    for n in f h; do
      echo "      - id: $n"
      echo "        url: $http://$host:$(node_port "$n")/rpc/$KEY"
      if [[ -n $tls && $n == h ]]; then
        echo "        ws_url: from_url" # the wss:// twin of its https:// url (the fake serves both)
      else
        echo "        ws_url: $scheme://$host:$(node_port "$n")/ws/$KEY"
      fi
      echo "        timeout_ms: 1500"
      [[ -z $tls ]] || echo "$tls"
    done
    echo "routing:"
    echo "  default_strategy: priority"
  } >"$P"
  start_serve sc -p "$P" --no-state
  local out=$BATS_TEST_TMPDIR/heads.out log pid client rss_before rss_after summary
  log=$(_node_file sc log)
  pid=$(node_pid sc)
  WS_CLIENT_LIMIT_MS=$(((LIMIT_S + 15) * 1000)) timeout $((LIMIT_S + 20)) \
    node "$WS_CLIENT" heads "ws://127.0.0.1:$(node_port sc)/rpc/local" $((HEADS_BEFORE + HEADS_AFTER)) \
    >"$out" 3>&- &
  client=$!
  wait_heads "$out" "$HEADS_BEFORE" 15
  assert_equal "$(fake_stat f '.ws.subscriptions')" 1 "F serves the subscription first"
  rss_before=$(rss_kb "$pid")

  fake_control f "{\"ws_fault\":\"$fault\"}"
  if [[ -n $move_limit ]]; then
    local deadline=$((SECONDS + move_limit))
    until (($(fake_stat h '.ws.subscriptions') >= 1)); do
      ((SECONDS <= deadline)) || {
        echo "H took no subscription within $move_limit s of the $fault fault" >&2
        sed 's/^/sidecar: /' "$log" | tail -n 30 >&2
        return 1
      }
      nap 0.1
    done
  fi
  wait_heads "$out" $((HEADS_BEFORE + HEADS_AFTER)) "$LIMIT_S" || {
    sed 's/^/sidecar: /' "$log" | tail -n 30 >&2
    return 1
  }
  wait "$client"
  summary=$(grep '"heads"' "$out" | tail -n 1)
  echo "# $fault over $scheme: $summary" >&3
  grep -E 'backfilled|reorg|opened again|treated as dropped|could not be opened|WebSocket to' "$log" |
    head -n 8 | sed 's/^/#   /' >&3 || true
  assert_equal "$(jq -c '[.heads, .in_order, .gaps, .dups, .breaks, .errors]' <<<"$summary")" \
    "[$((HEADS_BEFORE + HEADS_AFTER)),true,[],0,0,[]]" "the heads after $fault"

  # The fault hit, and the subscription moved to H (slow only delays: it may stay on F).
  local hit
  case $fault in
    drop) hit=.ws.drops ;;
    stall) hit=.ws.stalls ;;
    garbage | huge) hit=.ws.faulty ;;
    slow) hit=.ws.events ;;
    refuse) hit='.ws.drops + .ws.refused' ;;
  esac
  (($(fake_stat f "$hit") > 0)) || {
    echo "the $fault fault did not hit: $(fake_stats f)" >&2
    return 1
  }
  if [[ $fault != slow ]]; then
    (($(fake_stat h '.ws.subscriptions') >= 1)) || {
      echo "no subscription moved to H: $(fake_stats h)" >&2
      return 1
    }
  fi
  # The sidecar still serves, and a garbage or huge frame did not grow it.
  curl -sf --max-time 5 "http://127.0.0.1:$(node_port sc)/healthz" >/dev/null
  rss_after=$(rss_kb "$pid")
  echo "#   sidecar RSS ${rss_before} kB -> ${rss_after} kB" >&3
  if [[ $fault == garbage || $fault == huge ]]; then
    ((rss_after - rss_before < RSS_GROWTH_KB)) || {
      echo "sidecar RSS grew from $rss_before to $rss_after kB" >&2
      return 1
    }
  fi
  # No URL path (the key) in what the sidecar printed.
  if grep -q "$KEY" "$log"; then
    echo "the sidecar's log shows a provider URL's key:" >&2
    grep "$KEY" "$log" >&2
    return 1
  fi
}

@test "ws fault drop over ws://: heads go on from H, none lost or repeated" {
  ws_fault_row drop ws
}

@test "ws fault stall over ws://: heads go on from H, none lost or repeated" {
  ws_fault_row stall ws
}

@test "ws fault garbage over ws://: heads go on, the sidecar neither fails nor grows" {
  ws_fault_row garbage ws
}

@test "ws fault slow over ws://: heads go on in order" {
  ws_fault_row slow ws
}

@test "ws fault refuse over ws://: heads go on from H, none lost or repeated" {
  ws_fault_row refuse ws
}

@test "ws fault huge over ws://: heads go on, the sidecar neither fails nor grows" {
  ws_fault_row huge ws
}

# A message over the sidecar's limit (8 MiB; the fake's is 16 MiB) ends the socket at once: closed
# with 1009, the subscription moves to H. The fake's message never ends (its last byte is not sent)
# and it answers nothing, not even the closing handshake: waiting for that (what Beast's own
# message limit does) held the drop until the stall detector fired, or without one (stall_blocks
# 400: 100 s) until Beast's timer closed the socket 10 s after the read began. So H must take the
# subscription within 6 s of the fault.
ws_huge_row() { # SCHEME
  ws_fault_row huge "$1" 400 6
  local log
  log=$(_node_file sc log)
  grep -Eq 'provider f sent a message over the 8388608-byte limit: closed with 1009' "$log" || {
    echo "no line for the message over the limit in the sidecar's log:" >&2
    tail -n 20 "$log" >&2
    return 1
  }
  ! grep -q 'treated as dropped' "$log"
  (($(fake_stat f '.ws.too_big') >= 1)) || {
    echo "F got no close frame with 1009: $(fake_stats f)" >&2
    return 1
  }
}

@test "ws fault huge over ws://, stall detector far off: closed with 1009 at once, heads go on from H" {
  ws_huge_row ws
}

@test "ws fault huge over wss://, stall detector far off: closed with 1009 at once, heads go on from H" {
  ws_huge_row wss
}

@test "ws fault drop over wss://: heads go on from H, none lost or repeated" {
  ws_fault_row drop wss
}

@test "ws fault stall over wss://: heads go on from H, none lost or repeated" {
  ws_fault_row stall wss
}

@test "ws fault garbage over wss://: heads go on, the sidecar neither fails nor grows" {
  ws_fault_row garbage wss
}

@test "ws fault slow over wss://: heads go on in order" {
  ws_fault_row slow wss
}

@test "ws fault refuse over wss://: heads go on from H, none lost or repeated" {
  ws_fault_row refuse wss
}

@test "ws fault huge over wss://: heads go on, the sidecar neither fails nor grows" {
  ws_fault_row huge wss
}

# eth_subscribe through a sidecar whose only provider is NODE over wss:// with the tls: YAML given;
# prints the answer ({"answer":…}).
wss_subscribe_once() { # NAME NODE TLS_YAML
  local p=$BATS_TEST_TMPDIR/$1.yaml
  cat >"$p" <<YAML
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 250
    providers:
      - id: $2
        url: https://localhost:$(node_port "$2")/rpc/$KEY
        ws_url: wss://localhost:$(node_port "$2")/ws/$KEY
        timeout_ms: 1500
        tls: $3
routing:
  default_strategy: priority
YAML
  start_serve "$1" -p "$p" --no-state
  WS_CLIENT_LIMIT_MS=15000 node "$WS_CLIENT" call "ws://127.0.0.1:$(node_port "$1")/rpc/local" \
    '{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}' 3>&- | grep '"answer"'
  return "${PIPESTATUS[0]}"
}

@test "wss:// TLS failures name their cause and never the URL; a hung handshake ends; mTLS is served" {
  local ca="{ ca_file: $TEST_PKI/ca.pem }" out cert cause
  for cert in unknown_ca expired wrong_host; do
    start_tls_fake "$cert" "$cert"
    out=$(wss_subscribe_once "sc_$cert" "$cert" "$ca")
    echo "# $cert: $out" >&3
    case $cert in
      unknown_ca) cause="unknown certificate authority" ;;
      expired) cause="certificate expired" ;;
      wrong_host) cause="host name mismatch" ;;
    esac
    assert_equal "$(jq -r '.answer.error.message' <<<"$out" | grep -c "WebSocket to provider $cert failed (tls): TLS: $cause")" 1 "$cert"
    [[ $out != *"$KEY"* ]] || { echo "the answer shows the key: $out" >&2; return 1; }
    ! grep -q "$KEY" "$(_node_file "sc_$cert" log)"
  done
  # A server that never answers the ClientHello: the connect limit (5 s) covers the handshake.
  start_tls_fake hang --tls-handshake hang
  out=$(wss_subscribe_once sc_hang hang "$ca")
  echo "# hang: $out" >&3
  assert_json "$out" '.answer.error.message | test("WebSocket to provider hang failed [(]tls[)]: no TLS handshake within 5 s")'
  # mTLS: the fake wants a client certificate; the provider's cert_file/key_file serve wss:// too.
  start_tls_fake mtls --tls-client-ca "$TEST_PKI/client_ca.pem" --mine-per-sec 4
  out=$(wss_subscribe_once sc_mtls mtls \
    "{ ca_file: $TEST_PKI/ca.pem, cert_file: $TEST_PKI/client.pem, key_file: $TEST_PKI/client.key }")
  echo "# mtls: $out" >&3
  assert_json "$out" '.answer.result | test("^0x[0-9a-f]{32}$")'
  assert_equal "$(fake_stat mtls '.ws.subscriptions')" 1 "subscriptions served over mTLS"
  # Without the client certificate the fake refuses the connection, and the cause is named.
  out=$(wss_subscribe_once sc_nocert mtls "$ca")
  echo "# mtls without a client certificate: $out" >&3
  assert_json "$out" '.answer.error.message | test("WebSocket to provider mtls failed .*TLS: client certificate rejected")'
}

@test "ws: an only provider that drops each subscription at its first event is reopened ever more slowly" {
  # Tried last is tried first when it is the only candidate: without a wait, the subscription was
  # opened again every ~250 ms (each next block), about 20 times in 5 s. With it: at once after
  # the first drop, then after 250 ms, 500 ms, 1 s, 2 s — about 6.
  start_fake f --mine-per-sec 4 --ws-fault drop
  cat >"$P" <<YAML
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 250
    providers:
      - { id: f, url: "http://127.0.0.1:$(node_port f)/rpc/$KEY", ws_url: "ws://127.0.0.1:$(node_port f)/ws/$KEY" }
routing:
  default_strategy: priority
YAML
  start_serve sc -p "$P" --no-state
  run env WS_CLIENT_LIMIT_MS=20000 timeout 25 node "$WS_CLIENT" listen "ws://127.0.0.1:$(node_port sc)/rpc/local" '["newHeads"]' 5
  assert_status 0
  local subs
  subs=$(fake_stat f '.ws.subscriptions')
  echo "subscriptions opened on f in 5 s: $subs" >&3
  ((subs >= 3 && subs <= 9)) || {
    echo "f took $subs subscriptions in 5 s (expected 3-9)" >&2
    tail -n 20 "$(_node_file sc log)" >&2
    return 1
  }
  grep -q 'dropped again soon: reopen in' "$(_node_file sc log)"
}
