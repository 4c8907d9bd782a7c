#!/usr/bin/env bats
# The live dashboard (issue 22): /dashboard/state and the /dashboard/events stream through the real
# binary (the transport that served each call and each provider's, issue 18), the Host, Origin and token rules on the page and the stream, --no-dashboard, a slow stream
# reader dropped without holding the others, the page in headless Chromium (no console errors,
# every provider listed, a killed provider's open breaker within 2 s, a screenshot kept), and
# `rpcroute top` under tmux (the providers shown, q quits, the terminal mode restored).
# Artifacts (the screenshot, top's screen) go to the build's Testing/dashboard folder.

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers
load sidecar_helpers

BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

setup_file() {
  require_bins RPCROUTE_BIN ANVIL
  # Shared and never killed (no block time: the three stand at the same height); a2, the one the
  # tests kill, is each test's own.
  start_anvil a1
  start_anvil a3
}

teardown_file() {
  stop_all
}

setup() {
  e2e_setup
  ART=$(dirname "$(dirname "$RPCROUTE_BIN")")/Testing/dashboard
  mkdir -p "$ART"
  start_anvil a2
  write_profile "$P" a1 a2 a3
}

teardown() {
  [[ -z ${TMUX_SOCK:-} ]] || tmux -L "$TMUX_SOCK" kill-server 2>/dev/null || true
  stop_all
}

# N calls of eth_blockNumber through the sidecar.
traffic() { # N [METHOD]
  local i
  for ((i = 0; i < $1; i++)); do
    sidecar_post /rpc/local "{\"jsonrpc\":\"2.0\",\"id\":$i,\"method\":\"${2:-eth_blockNumber}\",\"params\":[]}"
  done
}

# Waits up to LIMIT seconds (default 10) until FILE holds TEXT.
wait_for_text() { # FILE TEXT [LIMIT_S]
  local deadline=$((SECONDS + ${3:-10}))
  while ((SECONDS < deadline)); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    nap 0.05
  done
  echo "no '$2' in $1 after ${3:-10} s:" >&2
  tail -c 2000 "$1" >&2
  return 1
}

@test "dashboard: /dashboard/state shows every provider, its health and the plan, no URL" {
  sidecar_start sc --profile "$P" --no-state
  traffic 6
  sidecar_get /dashboard/state
  [ "$code" = 200 ]
  assert_json "$body" '.chains | length == 1'
  assert_json "$body" '.chains[0] | .chain == "local" and .chain_id == 31337 and .strategy == "load_balanced"'
  assert_json "$body" '[.chains[0].providers[].provider] == ["a1","a2","a3"]'
  assert_json "$body" '.chains[0].providers | all(.breaker == "closed" and .tier == 1 and .excluded == null)'
  assert_json "$body" '.chains[0].plan.candidates | length == 3 and all(.explain | test("^#[123] a[123]: "))'
  assert_json "$body" '.chains[0].providers | all(has("height") and has("lag") and has("first_share") and has("half_open_in_ms"))'
  assert_json "$body" '.feed.capacity == 512 and .feed.next_seq == 7'
  # Watched from the first state read on: the next calls are counted per provider.
  traffic 9
  sidecar_get /dashboard/state
  assert_json "$body" '.chains[0].first_attempts == 9 and ([.chains[0].providers[].first_share] | add) > 0.99'
  assert_json "$body" '.chains[0].series | length >= 1 and all(.method == "eth_blockNumber" and (.points | length) >= 1)'
  [[ $body != *http://* && $body != *127.0.0.1* ]]
  # The killed provider: open breaker with its time to half-open and the reason rank gives.
  # load_balanced draws the order at random, so how many calls reach a2 first varies: call until
  # its breaker opens (failure_threshold 5 of its own failures), at most 90 calls.
  kill_node a2
  local round
  for ((round = 0; round < 30; round++)); do
    traffic 3
    sidecar_get /dashboard/state
    jq -e '.chains[0].providers[1].breaker == "open"' <<<"$body" >/dev/null && break
  done
  assert_json "$body" '.chains[0].providers[1] | .breaker == "open" and .half_open_in_ms > 0 and (.excluded | test("circuit breaker open"))'
  assert_json "$body" '.chains[0].plan.excluded[0] | .provider == "a2" and .kind == "breaker"'
}

@test "dashboard: /dashboard/events streams each decision as it happens" {
  sidecar_start sc --profile "$P" --no-state
  traffic 3
  local out=$BATS_TEST_TMPDIR/events
  curl -sN --max-time 20 "$SC_URL/dashboard/events" >"$out" 3>&- &
  local curl_pid=$!
  # The recent past first (the last 100), then what happens.
  wait_for_text "$out" '"seq":3,'
  traffic 1 eth_gasPrice
  wait_for_text "$out" '"method":"eth_gasPrice"'
  kill "$curl_pid" 2>/dev/null || true
  wait "$curl_pid" 2>/dev/null || true
  grep -q '^event: decision$' "$out"
  grep -q '^id: 4$' "$out"
  local last
  last=$(grep '^data: ' "$out" | tail -1 | cut -c7-)
  assert_json "$last" '.method == "eth_gasPrice" and .chain == "local" and .status == "result" and (.provider | test("^a[123]$"))'
  assert_json "$last" '.attempts[0] | .class == "success" and .latency_ms >= 0'
  assert_json "$last" '.total_ms >= .attempts[0].latency_ms and .attempt_count == 1'
  ! grep -q '127.0.0.1\|http://' "$out" || false
  # HEAD: the head alone, nothing held open.
  run curl -sI --max-time 5 "$SC_URL/dashboard/events"
  [ "$status" -eq 0 ]
  [[ $output == *"text/event-stream"* ]]
}

@test "dashboard: a cache hit shows in the chain's counts, the feed and top; so does a bypass" {
  sidecar_start sc --profile "$P" --no-state
  local nv='{"jsonrpc":"2.0","id":1,"method":"net_version","params":[]}'
  # net_version is a constant: upstream once (a miss), then from the cache (a hit).
  sidecar_post /rpc/local "$nv"
  sidecar_post /rpc/local "$nv"
  grep -qi '^X-Rpcroute-Cache: HIT' "$SC_HDRS" || { cat "$SC_HDRS" >&2; false; }
  sidecar_post /rpc/local "$nv" -H 'Cache-Control: no-cache'
  grep -qi '^X-Rpcroute-Cache: BYPASS' "$SC_HDRS" || { cat "$SC_HDRS" >&2; false; }
  sidecar_get /dashboard/state
  [ "$code" = 200 ]
  assert_json "$body" '.chains[0].cache | .hits == 1 and .misses == 1 and .bypasses == 1 and .bytes > 0 and .max_bytes >= .bytes'
  assert_json "$body" '.chains[0].hedges == {"fired": 0, "won": 0}'
  assert_json "$body" '.websocket == {"clients": 0, "upstream_subscriptions": 0}'
  # The feed: the hit is a decision of its own, answered by the cache with no attempt.
  local out=$BATS_TEST_TMPDIR/events
  curl -sN --max-time 20 "$SC_URL/dashboard/events" >"$out" 3>&- &
  local curl_pid=$!
  wait_for_text "$out" '"seq":3,'
  kill "$curl_pid" 2>/dev/null || true
  wait "$curl_pid" 2>/dev/null || true
  local hits
  hits=$(grep '^data: ' "$out" | cut -c7- | jq -c 'select(.cache == "hit")')
  assert_equal "$(wc -l <<<"$hits")" 1 "cache hits in the feed"
  assert_json "$hits" '.method == "net_version" and .provider == null and .attempt_count == 0 and .status == "result" and .hedge == null'
  assert_json "$(grep '^data: ' "$out" | head -1 | cut -c7-)" '.cache == null and (.provider | test("^a[123]$"))'
  # top: a line per chain.
  run rpcroute top --url "$SC_URL" --once
  [ "$status" -eq 0 ]
  [[ $output == *"cache: 1 hits, 1 misses, 1 bypasses, "*" B of 32.0 MiB; hedges: 0 fired, 0 won"* ]] || { echo "$output" >&2; false; }
  [[ $output == *"websocket: 0 clients, 0 upstream subscriptions"* ]]
}

@test "dashboard: a hedge that won shows in the chain's counts, the feed and top" {
  start_fake slow --mode hang
  start_fake fast
  write_profile "$P" --strategy priority slow fast --extra $'  method_overrides:\n    eth_getBalance: { hedge: { min_ms: 50, max_ms: 150, max_extra: 0.5 } }'
  sidecar_start sc --profile "$P" --no-probe --no-state
  sidecar_post /rpc/local '{"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["0x0000000000000000000000000000000000000001","latest"]}'
  assert_equal "$code" 200
  grep -qi '^X-Rpcroute-Hedge: hedge' "$SC_HDRS" || { cat "$SC_HDRS" >&2; false; }
  sidecar_get /dashboard/state
  assert_json "$body" '.chains[0].hedges == {"fired": 1, "won": 1}'
  local out=$BATS_TEST_TMPDIR/events
  curl -sN --max-time 20 "$SC_URL/dashboard/events" >"$out" 3>&- &
  local curl_pid=$!
  wait_for_text "$out" '"seq":1,'
  kill "$curl_pid" 2>/dev/null || true
  wait "$curl_pid" 2>/dev/null || true
  assert_json "$(grep '^data: ' "$out" | head -1 | cut -c7-)" '.method == "eth_getBalance" and .hedge == "hedge" and .provider == "fast" and .cache == null'
  run rpcroute top --url "$SC_URL" --once
  [ "$status" -eq 0 ]
  [[ $output == *"hedges: 1 fired, 1 won"* ]] || { echo "$output" >&2; false; }
}

@test "dashboard: the feed and the provider table say which transport served, as rank does" {
  # a1 routes over its WebSocket (anvil serves ws:// on its HTTP port), a3 over HTTP.
  write_profile "$P" --strategy priority "a1,ws_url=ws://127.0.0.1:$(node_port a1)/,transport=ws" a3
  sidecar_start sc --profile "$P" --no-state
  sidecar_post /rpc/local "$BN"
  grep -qi '^X-Rpcroute-Transport: ws' "$SC_HDRS" || { cat "$SC_HDRS" >&2; false; }
  sidecar_post /rpc/provider/a3/local "$BN"
  ! grep -qi '^X-Rpcroute-Transport:' "$SC_HDRS" || { cat "$SC_HDRS" >&2; false; }
  local out=$BATS_TEST_TMPDIR/events
  curl -sN --max-time 20 "$SC_URL/dashboard/events" >"$out" 3>&- &
  local curl_pid=$!
  wait_for_text "$out" '"seq":2,'
  kill "$curl_pid" 2>/dev/null || true
  wait "$curl_pid" 2>/dev/null || true
  local first second
  first=$(grep '^data: ' "$out" | sed -n 1p | cut -c7-)
  second=$(grep '^data: ' "$out" | sed -n 2p | cut -c7-)
  assert_json "$first" '.provider == "a1" and .transport == "ws" and .attempts == [.attempts[0]] and .attempts[0].transport == "ws"'
  assert_json "$second" '.provider == "a3" and .transport == "http" and .attempts[0].transport == "http"'
  # The provider table: the transport each provider's requests take now, and the WebSocket's
  # breaker where the provider may use it.
  sidecar_get /dashboard/state
  [ "$code" = 200 ]
  assert_json "$body" '.chains[0].providers | map({(.provider): [.transport, .ws_breaker]}) | add == {"a1": ["ws", "closed"], "a3": ["http", null]}'
  assert_json "$body" '.chains[0].plan.candidates[0].explain | test("WebSocket")'
}

@test "dashboard: the page, its state and its stream obey the Host, Origin and token rules" {
  sidecar_start sc --profile "$P" --no-state --token sesame
  local path
  for path in / /dashboard /dashboard/state /dashboard/events; do
    sidecar_get "$path" --max-time 5
    [ "$code" = 401 ] || { echo "$path without token: $code" >&2; return 1; }
    sidecar_get "$path" --max-time 5 -H 'Authorization: Bearer wrong'
    [ "$code" = 401 ]
    sidecar_get "$path" --max-time 5 -H 'Authorization: Bearer sesame' -H 'Host: evil.example:80'
    [ "$code" = 403 ] || { echo "$path with a rebinding Host: $code" >&2; return 1; }
    sidecar_get "$path" --max-time 5 -H 'Authorization: Bearer sesame' -H 'Origin: http://evil.example'
    [ "$code" = 403 ] || { echo "$path from a foreign Origin: $code" >&2; return 1; }
  done
  sidecar_get / -H 'Authorization: Bearer sesame' -H 'Origin: http://localhost:3000'
  [ "$code" = 200 ]
  grep -qi '^content-type: text/html' "$SC_HDRS"
  grep -qi "^content-security-policy: default-src 'none'" "$SC_HDRS"
  grep -qi '^access-control-allow-origin: http://localhost:3000' "$SC_HDRS"
  [[ $body == *"<title>rpcroute dashboard</title>"* ]]
  # Self-contained: nothing loaded from elsewhere.
  ! grep -Eq '(src|href)="(https?:)?//' <<<"$body" || false
  sidecar_get /dashboard/state -H 'Authorization: Bearer sesame'
  [ "$code" = 200 ]
  run curl -sN --max-time 2 -H 'Authorization: Bearer sesame' "$SC_URL/dashboard/events"
  [[ $output == *"retry: 2000"* ]]
  # The root's POST is still JSON-RPC.
  sidecar_post / "$BN" -H 'Authorization: Bearer sesame'
  [ "$code" = 200 ]
  assert_json "$body" '.result | test("^0x")'
}

@test "dashboard: --no-dashboard serves no page, state or stream; GET / is as before" {
  sidecar_start sc --profile "$P" --no-state --no-dashboard
  sidecar_get /
  [ "$code" = 405 ]
  assert_json "$body" '.error | test("take POST")'
  for path in /dashboard /dashboard/state /dashboard/events; do
    sidecar_get "$path" --max-time 5
    [ "$code" = 404 ] || { echo "$path: $code" >&2; return 1; }
    assert_json "$body" '.error | test("--no-dashboard")'
  done
  sidecar_post / "$BN"
  [ "$code" = 200 ]
  sidecar_get /status
  [ "$code" = 200 ]
}

@test "dashboard: a stream reader that does not read is dropped; the others go on" {
  sidecar_start sc --profile "$P" --no-state
  local out=$BATS_TEST_TMPDIR/events
  curl -sN --max-time 30 "$SC_URL/dashboard/events" >"$out" 3>&- &
  local curl_pid=$!
  # A client that asks for the stream and never reads, with a small receive buffer.
  python3 -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /dashboard/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
time.sleep(30)' "$SC_PORT" 3>&- &
  local stuck_pid=$!
  local batch i
  batch=$(jq -cn '[range(1000) | {jsonrpc: "2.0", id: ., method: "eth_chainId", params: []}]')
  # The sidecar caps a stream's socket buffer (64 KiB): a few batches fill it, and the write
  # deadline (5 s) then drops the reader.
  local deadline=$((SECONDS + 25)) dropped=0
  while ((SECONDS < deadline)); do
    for i in 1 2 3 4 5; do sidecar_post /rpc/local "$batch"; done
    sidecar_get /dashboard/state
    dropped=$(jq '.feed.dropped_streams' <<<"$body")
    ((dropped >= 1)) && break
    nap 0.2
  done
  kill "$stuck_pid" 2>/dev/null || true
  [ "$dropped" -ge 1 ] || { kill "$curl_pid"; return 1; }
  # The reader that reads still gets what happens now.
  traffic 1 eth_gasPrice
  wait_for_text "$out" '"method":"eth_gasPrice"'
  kill "$curl_pid" 2>/dev/null || true
  # And the sidecar answers as ever.
  sidecar_post /rpc/local "$BN"
  [ "$code" = 200 ]
}

@test "dashboard: the page in headless Chromium: no console error, every provider, the open breaker within 2 s" {
  command -v chromium >/dev/null || { echo "chromium is not installed (scripts/setup)" >&2; return 1; }
  command -v node >/dev/null || { echo "node is not installed (scripts/setup: npm)" >&2; return 1; }
  sidecar_start sc --profile "$P" --no-state
  traffic 6
  run timeout 90 node "$BATS_TEST_DIRNAME/dashboard_browser.js" "$SC_URL" \
    a1,a2,a3 a2 "$(node_pid a2)" "$ART/dashboard.png" "$BATS_TEST_TMPDIR/chromium"
  echo "$output" >&2
  [ "$status" -eq 0 ]
  local result=${lines[${#lines[@]} - 1]}
  assert_json "$result" '.errors == [] and .providers == ["a1","a2","a3"] and .open_after_ms <= 2000'
  [ -s "$ART/dashboard.png" ]
  echo "$result" >"$ART/browser.json"
}

@test "dashboard: rpcroute top under tmux shows the providers and quits on q" {
  command -v tmux >/dev/null || { echo "tmux is not installed (scripts/setup)" >&2; return 1; }
  sidecar_start sc --profile "$P" --no-state
  traffic 6
  TMUX_SOCK=rpcroute-dash-$$-$BATS_TEST_NUMBER
  local screen=$BATS_TEST_TMPDIR/screen
  # After top: its exit status and whether the terminal is back in canonical mode.
  tmux -L "$TMUX_SOCK" -f /dev/null new-session -d -s top -x 120 -y 30 3>&- \
    "TERM=xterm-256color NO_COLOR= '$RPCROUTE_BIN' top --url '$SC_URL'; echo EXITED:\$?; stty -a | grep -Eo -- '-?icanon'; sleep 60"
  local deadline=$((SECONDS + 15))
  while ((SECONDS < deadline)); do
    tmux -L "$TMUX_SOCK" capture-pane -p -t top >"$screen"
    grep -q '^a3 ' "$screen" && break
    nap 0.1
  done
  cat "$screen" >&2
  grep -q 'local (chain 31337), strategy load_balanced' "$screen"
  grep -Eq '^a1 +1 healthy +closed' "$screen"
  grep -Eq '^a2 +1 healthy +closed' "$screen"
  grep -q '^PROVIDER +TIER +BREAKER +LAG +P50 +SHARE' "$screen" || grep -q 'PROVIDER' "$screen"
  # Colour on the terminal: the escape sequences are in the pane.
  tmux -L "$TMUX_SOCK" capture-pane -p -e -t top | grep -q $'\e\[32mclosed'
  # A killed provider: its breaker opens on the next refreshes (the picture kept for the README).
  kill_node a2
  deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)); do
    traffic 3
    tmux -L "$TMUX_SOCK" capture-pane -p -t top >"$screen"
    grep -q 'open (' "$screen" && break
  done
  wait_for_text_in_pane 'open ('
  grep -Eq '^a2 +- +open \([0-9]+s\) .*circuit breaker open' "$screen"
  cp "$screen" "$ART/top.txt"
  tmux -L "$TMUX_SOCK" send-keys -t top q
  wait_for_text_in_pane 'EXITED:0'
  wait_for_text_in_pane 'icanon'
  grep -qx 'icanon' "$screen"  # not -icanon: the terminal is back in canonical mode
  # Ctrl-C (SIGINT) ends it too, the terminal restored.
  tmux -L "$TMUX_SOCK" respawn-pane -k -t top \
    "'$RPCROUTE_BIN' top --url '$SC_URL'; echo EXITED:\$?; stty -a | grep -Eo -- '-?icanon'; sleep 60"
  wait_for_text_in_pane 'a3 '
  tmux -L "$TMUX_SOCK" send-keys -t top C-c
  wait_for_text_in_pane 'EXITED:0'
  wait_for_text_in_pane 'icanon'
  grep -qx 'icanon' "$screen"  # not -icanon: the terminal is back in canonical mode
}

# Waits up to 10 s until the tmux pane shows TEXT; the pane is left in $screen.
wait_for_text_in_pane() { # TEXT
  local deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)); do
    tmux -L "$TMUX_SOCK" capture-pane -p -t top >"$screen"
    grep -qF -- "$1" "$screen" && return 0
    nap 0.1
  done
  echo "the pane never showed '$1':" >&2
  cat "$screen" >&2
  return 1
}

@test "dashboard: rpcroute top --once without a sidecar reads the state file; errors are plain" {
  sidecar_start sc --profile "$P"
  traffic 6
  sidecar_stop sc
  run rpcroute top --profile "$P" --once
  [ "$status" -eq 0 ]
  [[ $output == *"rpcroute top: the state file"* ]]
  [[ $output == *"a1 "*"a2 "*"a3 "* ]]
  [[ $output != *$'\e['* ]]  # not a terminal: no colour, no screen control
  run rpcroute top --url "http://user:pw@127.0.0.1:$(dead_port x)" --once
  [ "$status" -eq 3 ]
  [[ $output == *unreachable* && $output != *pw* ]]
}
