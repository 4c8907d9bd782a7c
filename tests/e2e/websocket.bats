#!/usr/bin/env bats
# WebSocket clients of the sidecar (issue 18, the client side): JSON-RPC over ws:// on the RPC
# routes and the /ws/rpc/... alias, routed like HTTP (batches, failover), the same Host, Origin and
# token checks, eth_subscribe refused over HTTP, and the limits: a client that stops reading is
# closed with 1008 without delaying another, a client that answers no ping is closed, shutdown
# closes with 1001. Real clients: viem's webSocket() transport (viem_client.mjs), the `ws` package
# (what viem and ethers use in Node; ws_client.mjs), both pinned in scripts/setup, and cast.

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers

WS_CLIENT=$BATS_TEST_DIRNAME/ws_client.mjs

setup_file() {
  require_bins RPCROUTE_BIN ANVIL CAST
  if [[ ! -d $REPO/.tools/ws-client/node_modules/viem ]] || ! command -v node >/dev/null; then
    echo "missing node or .tools/ws-client (ws and viem); run scripts/setup" >&2
    return 1
  fi
  start_anvil a1
}

teardown_file() {
  stop_all
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

ws_client() { # MODE URL ARGS...
  timeout 40 node "$WS_CLIENT" "$@"
}

ws_url() { # NODE PATH
  echo "ws://127.0.0.1:$(node_port "$1")$2"
}

@test "websocket: unary calls, a batch and bad JSON over one socket, answered like HTTP" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe
  run ws_client call "$(ws_url sc /rpc/local)" "$BN" \
    '[{"jsonrpc":"2.0","id":"x","method":"eth_chainId"},{"jsonrpc":"2.0","id":3,"method":"eth_getBalance","params":["'"$DEV_ACCOUNT"'","latest"]},{"jsonrpc":"2.0","method":"eth_chainId"}]' \
    'not json'
  assert_status 0
  assert_equal "$(jq -sc '[.[] | .answer | objects | select(.id == 1) | .result | test("^0x[0-9a-f]+$")]' <<<"$output")" '[true]' "eth_blockNumber"
  assert_equal "$(jq -sc '[.[] | select(.answer | type == "array") | .answer[] | [.id, .result]]' <<<"$output")" \
    "[[\"x\",\"0x7a69\"],[3,\"$DEV_BALANCE\"]]" "the batch (the notification unanswered)"
  assert_equal "$(jq -sc '[.[] | .answer | objects | select(.error) | .error.code]' <<<"$output")" '[-32700]' "bad JSON"
  assert_equal "$(jq -sc '[.[] | select(.close) | .close]' <<<"$output")" '[1000]'
}

@test "websocket: viem's webSocket() transport reads through the sidecar, 20 calls in flight" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe
  run timeout 40 node "$BATS_TEST_DIRNAME/viem_client.mjs" "$(ws_url sc /rpc/local)" "$DEV_ACCOUNT"
  assert_status 0
  assert_equal "$(jq -c '[.chainId, (.block >= 0), .balances, .count]' <<<"$output")" \
    '[31337,true,["10000000000000000000000"],20]'
}

@test "websocket: /ws/rpc/... is an alias, and cast speaks to it" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe
  run timeout 30 "$CAST" chain-id --rpc-url "$(ws_url sc /ws/rpc/local)"
  assert_status 0
  assert_equal "$output" 31337
  run timeout 30 "$CAST" balance "$DEV_ACCOUNT" --rpc-url "$(ws_url sc /ws)"
  assert_status 0
  assert_equal "$output" 10000000000000000000000
}

@test "websocket: a call fails over to the next provider as over HTTP" {
  dead_port gone
  write_profile "$P" --strategy priority gone a1
  start_serve sc -p "$P" --no-state --no-probe -v
  run ws_client call "$(ws_url sc /rpc/local)" "$BN"
  assert_status 0
  assert_equal "$(jq -sc '[.[] | select(.answer) | .answer.result | test("^0x")]' <<<"$output")" '[true]'
  grep -q 'message eth_blockNumber provider=a1 attempts=2' "$(_node_file sc log)"
}

@test "websocket: the upgrade passes the Host, Origin and token checks, and needs a known chain" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe --token s3cret-ws
  local url
  url=$(ws_url sc /rpc/local)
  run ws_client open "$url"
  assert_equal "$(jq -c .refused <<<"$output")" 401 "no token"
  run ws_client open "$url" "Authorization=Bearer s3cret-ws" "Origin=https://evil.example"
  assert_equal "$(jq -c .refused <<<"$output")" 403 "a foreign Origin"
  run ws_client open "$url" "Authorization=Bearer s3cret-ws" "Host=rebind.example:80"
  assert_equal "$(jq -c .refused <<<"$output")" 403 "a DNS-rebinding Host"
  run ws_client open "$(ws_url sc /rpc/nochain)" "Authorization=Bearer s3cret-ws"
  assert_equal "$(jq -c .refused <<<"$output")" 404 "an unknown chain"
  run ws_client open "$(ws_url sc /status)" "Authorization=Bearer s3cret-ws"
  assert_equal "$(jq -c .refused <<<"$output")" 404 "not an RPC route"
  run ws_client open "$url" "Authorization=Bearer s3cret-ws" "Origin=http://localhost:3000"
  assert_equal "$(jq -c .open <<<"$output")" true "all checks passed"
}

@test "websocket: eth_subscribe over HTTP is told to use WebSocket" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe
  http_once "$(node_port sc)" /rpc/local '{"jsonrpc":"2.0","id":7,"method":"eth_subscribe","params":["newHeads"]}' "$BATS_TEST_TMPDIR/r"
  assert_equal "$HTTP_CODE" 200
  assert_equal "$(jq -c '[.id, .error.code]' "$BATS_TEST_TMPDIR/r.body")" '[7,-32601]'
  grep -q 'needs a WebSocket' "$BATS_TEST_TMPDIR/r.body"
}

@test "websocket: a client that stops reading is closed with 1008; another is not delayed" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe --ws-max-buffer-kb 64 -v
  # The sidecar answers batches of 1000 calls until the kernel's buffers fill: slow under sanitizers on a
  # loaded machine (CI once took over 30 s), so this client gets more time than the others.
  run env WS_CLIENT_LIMIT_MS=100000 timeout 110 node "$WS_CLIENT" slow "$(ws_url sc /rpc/local)" 400
  assert_status 0
  assert_equal "$(jq -c '[.a_close, (.a_reason | test("not reading")), .b_answers, .b_open]' <<<"$output")" \
    '[1008,true,40,true]'
  grep -q 'closing 1008 client is not reading' "$(_node_file sc log)"
  local deadline=$((SECONDS + 10)) metrics
  until metrics=$(curl -sf "http://127.0.0.1:$(node_port sc)/metrics") &&
    grep -q '^rpcroute_websocket_clients 0$' <<<"$metrics" || ((SECONDS > deadline)); do nap 0.1; done
  grep -q '^rpcroute_websocket_closes_total{code="1008"} 1$' <<<"$metrics"
  grep -q '^rpcroute_websocket_clients 0$' <<<"$metrics"
}

@test "websocket: a client that answers no ping is closed after --ws-ping-timeout" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe --ws-ping-timeout 1s
  # A raw client: the handshake, then it reads without ever answering a ping.
  run timeout 20 python3 - "$(node_port sc)" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /rpc/local HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
start, data = time.time(), b""
while True:
    d = s.recv(4096)
    if not d:
        break
    data += d
frames = data[data.find(b"\r\n\r\n") + 4:]
print(data.split(b"\r\n")[0].decode(), "ping" if frames[:1] == b"\x89" else "no-ping",
      "closed-in-time" if time.time() - start < 10 else "late")
EOF
  assert_status 0
  assert_equal "$output" "HTTP/1.1 101 Switching Protocols ping closed-in-time"
}

@test "websocket: SIGTERM closes an open client with 1001" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe
  local out=$BATS_TEST_TMPDIR/hold.out deadline
  ws_client hold "$(ws_url sc /rpc/local)" >"$out" 3>&- &
  local client=$!
  deadline=$((SECONDS + 20))
  until grep -q open "$out" 2>/dev/null || ((SECONDS > deadline)); do nap 0.05; done
  kill -TERM "$(node_pid sc)"
  wait "$client"
  assert_equal "$(jq -sc '[.[] | select(.close) | [.close, .reason]]' "$out")" '[[1001,"server shutting down"]]'
}

@test "websocket: 500 clients' identical newHeads subscriptions share one upstream one, each its own id" {
  start_anvil b1 --block-time 1
  # anvil serves WebSocket on its HTTP port: ws_url from_url (ws://127.0.0.1:PORT).
  write_profile "$P" "b1,ws_url=from_url"
  start_serve sc -p "$P" --no-state --no-probe
  run ws_client subs "$(ws_url sc /rpc/local)" 500 3 '["newHeads"]' "http://127.0.0.1:$(node_port sc)/metrics"
  assert_status 0
  # 500 ids, 3 consecutive heads each, one upstream subscription while they are subscribed and none
  # once the last one unsubscribed.
  assert_equal "$(jq -c '[.ids, .errors, .in_order, .counts, .unsubscribed, .stray, .upstream_during, .upstream_after]' <<<"$output")" \
    '[500,[],true,[3],[true],0,1,0]'
}

@test "websocket: eth_subscribe on a chain without a ws_url gets -32050 saying so" {
  write_profile "$P" a1
  start_serve sc -p "$P" --no-state --no-probe
  run ws_client call "$(ws_url sc /rpc/local)" '{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newHeads"]}'
  assert_status 0
  assert_equal "$(jq -sc '[.[] | .answer | objects | [.id, .error.code, (.error.message | test("ws_url"))]]' <<<"$output")" '[[5,-32050,true]]'
}
