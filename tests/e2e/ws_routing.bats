#!/usr/bin/env bats
# Transports in routing (issue 18): `rpcroute serve` sends a provider's single requests over its
# WebSocket where its `transport:` says so, and `fastest` with `transport: auto` picks, per
# provider, whichever of its two transports its own samples show faster.
#
# Two fakes of one chain: A slow over HTTP (--mode delay) and fast over its WebSocket, B the
# reverse (--ws-delay-ms). After warm-up (each transport measured min_calls times: the
# strategy explores the one with fewer samples), A's requests go over its WebSocket and B's over
# HTTP: seen in X-Rpcroute-Transport, in /metrics' transport labels, and in `rpcroute rank
# --explain` from the state file the sidecar wrote. Then a socket that drops in the middle of a
# call (a TCP forwarder killed) fails over to HTTP on the next provider, and the client gets one
# answer with its own id. A provider's `headers:` go on its WebSocket upgrade (a fake that wants a
# key header declines an upgrade without it with 401: the call fails as that HTTP answer, the
# subscription names it). A WebSocket that never opens (a silent port) costs a call routed over it
# its attempt's timeout, not the socket's connect limits. Each over ws:// and over wss:// (a test
# CA the profile trusts).

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers

WS_CLIENT=$BATS_TEST_DIRNAME/ws_client.mjs
SLOW_MS=80
WARM=8  # requests per provider before the choice is checked (min_calls 3 per transport)

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  if ! command -v node >/dev/null || [[ ! -d $REPO/.tools/ws-client/node_modules/ws ]]; then
    echo "missing node (tcp_proxy.mjs) or .tools/ws-client (ws_client.mjs); run scripts/setup" >&2
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

# Starts fake NAME over SCHEME (ws: plain, wss: TLS) with FAKE ARGS.
fake_over() { # NAME SCHEME [FAKE ARGS...]
  local name=$1 scheme=$2
  shift 2
  if [[ $scheme == wss ]]; then
    start_tls_fake "$name" "$@"
  else
    start_fake "$name" "$@"
  fi
}

# Writes provider NAME's profile entry: its url, ws_url (WS_PORT, default its own port), and more
# YAML lines.
provider_yaml() { # NAME SCHEME WS_PORT [LINE...]
  local name=$1 scheme=$2 ws_port=${3:-} http=http host=127.0.0.1
  shift 3
  [[ $scheme == wss ]] && http=https host=localhost
  [[ -n $ws_port ]] || ws_port=$(node_port "$name")
  echo "      - id: $name"
  echo "        url: $http://$host:$(node_port "$name")/"
  echo "        ws_url: $scheme://$host:$ws_port/"
  [[ $scheme != wss ]] || echo "        tls: { ca_file: $TEST_PKI/ca.pem }"
  local line
  for line in "$@"; do echo "        $line"; done
}

# POSTs one eth_gasPrice with id ID to the sidecar's PATH; sets BODY and TRANSPORT (the
# X-Rpcroute-Transport header, "http" when absent) and PROVIDER.
post() { # PATH ID
  local hdrs=$BATS_TEST_TMPDIR/post.hdrs
  BODY=$(curl -sS --max-time 20 -D "$hdrs" -H 'Content-Type: application/json' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":$2,\"method\":\"eth_gasPrice\",\"params\":[]}" \
    "$(node_url sc)$1") || return 1
  TRANSPORT=$(awk -F': ' 'tolower($1) == "x-rpcroute-transport" { sub(/\r$/, "", $2); print $2 }' "$hdrs")
  TRANSPORT=${TRANSPORT:-http}
  PROVIDER=$(awk -F': ' 'tolower($1) == "x-rpcroute-provider" { sub(/\r$/, "", $2); print $2 }' "$hdrs")
}

# The value of METRIC's series with every LABEL (name="value" text) in the sidecar's /metrics.
metric() { # METRIC LABEL...
  local text m=$1
  shift
  text=$(curl -sS --max-time 5 "$(node_url sc)/metrics")
  awk -v m="$m" -v labels="$*" '
    BEGIN { n = split(labels, want, " ") }
    index($0, m "{") == 1 { ok = 1; for (i = 1; i <= n; i++) if (!index($0, want[i])) ok = 0; if (ok) v = $NF }
    END { print (v == "" ? 0 : v) }' <<<"$text"
}

auto_choice_row() { # SCHEME
  local scheme=$1 i
  fake_over a "$scheme" --mode delay --delay-ms "$SLOW_MS"
  fake_over b "$scheme" --ws-delay-ms "$SLOW_MS"
  {
    echo "name: e2e"
    echo "chains:"
    echo "  local:"
    echo "    chain_id: 31337"
    echo "    providers:"
    provider_yaml a "$scheme" "" "transport: auto"
    provider_yaml b "$scheme" "" "transport: auto"
    echo "routing:"
    echo "  default_strategy: fastest"
  } >"$P"
  start_serve sc -p "$P"

  # Warm-up: each provider on its own route (fastest would send everything to one), each transport
  # explored until it has min_calls samples.
  for ((i = 1; i <= WARM; i++)); do
    post /rpc/provider/a/local "$i"
    post /rpc/provider/b/local "$((100 + i))"
  done
  # The choice: A over its WebSocket, B over HTTP, every time, each answer with its own id.
  for ((i = 1; i <= 5; i++)); do
    post /rpc/provider/a/local "$((200 + i))"
    assert_equal "$PROVIDER/$TRANSPORT" a/ws "A's request $i (over $scheme)"
    assert_equal "$(jq -c '.id' <<<"$BODY")" "$((200 + i))" "A's answer's id"
    post /rpc/provider/b/local "$((300 + i))"
    assert_equal "$PROVIDER/$TRANSPORT" b/http "B's request $i (over $scheme)"
    assert_equal "$(jq -c '.id' <<<"$BODY")" "$((300 + i))" "B's answer's id"
  done
  # Unpinned: whichever provider fastest puts first (both fast sides are about as fast), over its
  # fast transport.
  post /rpc/local 400
  case $PROVIDER in
    a) assert_equal "$TRANSPORT" ws "unpinned, A" ;;
    b) assert_equal "$TRANSPORT" http "unpinned, B" ;;
    *) echo "unexpected provider $PROVIDER" >&2; return 1 ;;
  esac

  # /metrics: attempts and latency by transport.
  local a_ws b_http a_http_after b_ws_after
  a_ws=$(metric rpcroute_attempts_total 'provider="a"' 'outcome="success"' 'transport="ws"')
  b_http=$(metric rpcroute_attempts_total 'provider="b"' 'outcome="success"' 'transport="http"')
  ((a_ws >= 5 && b_http >= 5)) || { echo "attempts: a ws $a_ws, b http $b_http" >&2; return 1; }
  (($(metric rpcroute_upstream_latency_seconds_count 'provider="a"' 'transport="ws"') >= 5))
  (($(metric rpcroute_upstream_latency_seconds_count 'provider="b"' 'transport="http"') >= 5))
  # The slow sides were only explored: at most WARM attempts each.
  a_http_after=$(metric rpcroute_attempts_total 'provider="a"' 'transport="http"')
  b_ws_after=$(metric rpcroute_attempts_total 'provider="b"' 'transport="ws"')
  ((a_http_after <= WARM && b_ws_after <= WARM)) || {
    echo "slow sides used: a http $a_http_after, b ws $b_ws_after" >&2
    return 1
  }

  # The state file the sidecar wrote (at exit): rank shows each provider's transport and both
  # transports' figures.
  kill_node sc
  run --separate-stderr rpcroute rank -p "$P" -m eth_gasPrice --json
  assert_status 0
  assert_jq '.candidates | map({(.provider): .transport}) | add == {"a":"ws","b":"http"}'
  assert_jq '.candidates[] | select(.provider == "a") | .transports.ws.p50_ms < .transports.http.p50_ms'
  assert_jq '.candidates[] | select(.provider == "b") | .transports.http.p50_ms < .transports.ws.p50_ms'
  assert_jq '[.candidates[].transports.ws.samples, .candidates[].transports.http.samples] | all(. >= 3)'
  run --separate-stderr rpcroute rank -p "$P" -m eth_gasPrice --explain
  assert_status 0
  echo "$output" | sed 's/^/# /' >&3
  [[ $output == *TRANSPORT* ]]
  grep -Eq '^#[0-9] a: .*it goes over its WebSocket \(WebSocket p50 .*; HTTP p50 ' <<<"$output"
  grep -Eq '^#[0-9] b: .*it goes over HTTP \(WebSocket p50 .*; HTTP p50 ' <<<"$output"
  # A row per transport under each provider.
  (($(grep -cE '^ +(http|ws) ' <<<"$output") == 4)) || { echo "$output" >&2; return 1; }
}

drop_mid_call_row() { # SCHEME
  local scheme=$1 log
  fake_over a "$scheme" --ws-delay-ms 3000
  fake_over b "$scheme"
  start_forwarder fa a # A's WebSocket goes through it
  {
    echo "name: e2e"
    echo "chains:"
    echo "  local:"
    echo "    chain_id: 31337"
    echo "    providers:"
    provider_yaml a "$scheme" "$(node_port fa)" "transport: ws" "timeout_ms: 8000" "priority: 1"
    provider_yaml b "$scheme" "" "priority: 2"
    echo "routing:"
    echo "  default_strategy: priority"
  } >"$P"
  start_serve sc -p "$P" --no-state
  log=$(_node_file sc log)

  local out=$BATS_TEST_TMPDIR/drop.body hdrs=$BATS_TEST_TMPDIR/drop.hdrs
  curl -sS --max-time 20 -D "$hdrs" -o "$out" -H 'Content-Type: application/json' \
    -d '{"jsonrpc":"2.0","id":"mine-7","method":"eth_gasPrice","params":[]}' "$(node_url sc)/rpc/local" &
  local client=$!
  # The call is on A's socket (the fake holds its answer 3 s): drop the socket under it.
  local deadline=$((SECONDS + 10))
  until (($(fake_stat a '.ws.calls // 0' 2>/dev/null || echo 0) >= 1)); do
    ((SECONDS < deadline)) || { echo "no call reached A's WebSocket" >&2; cat "$log" >&2; return 1; }
    nap 0.05
  done
  kill -KILL "$(node_pid fa)"
  wait "$client"
  echo "# drop over $scheme: $(cat "$out")" >&3
  # One answer, the client's id, from B over HTTP after A's WebSocket attempt failed.
  assert_json "$(cat "$out")" '.id == "mine-7" and (.result | startswith("0x"))'
  (($(grep -c '"jsonrpc"' "$out") == 1))
  grep -qi '^x-rpcroute-provider: b' "$hdrs"
  grep -qi '^x-rpcroute-attempts: 2' "$hdrs"
  ! grep -qi '^x-rpcroute-transport:' "$hdrs"
  (($(metric rpcroute_attempts_total 'provider="a"' 'transport="ws"' 'outcome="transport_error"') >= 1)) ||
    { curl -sS "$(node_url sc)/metrics" | grep 'attempts_total' >&2; return 1; }
  # A's WebSocket is not there any more: the next call on A cannot connect (its breaker counts
  # it), and the call still gets its answer.
  post /rpc/local 8
  assert_equal "$(jq -c '.id' <<<"$BODY")" 8 "the next call's id"
}

# Writes a profile of two providers of fake K over SCHEME, both `transport: ws`: GOOD with
# `headers:` that carry the key K's upgrades need (X-Api-Key), BARE without them; BARE only when
# ONLY_BARE is 1.
key_profile() { # FILE SCHEME KEY ONLY_BARE
  local file=$1 scheme=$2 key=$3 only_bare=$4 http=http host=127.0.0.1 port
  [[ $scheme == wss ]] && http=https host=localhost
  port=$(node_port k)
  {
    echo "name: e2e"
    echo "chains:"
    echo "  local:"
    echo "    chain_id: 31337"
    echo "    block_time_ms: 250"
    echo "    providers:"
    local id
    for id in good bare; do
      [[ $id == good && $only_bare == 1 ]] && continue
      echo "      - id: $id"
      echo "        url: $http://$host:$port/"
      echo "        ws_url: $scheme://$host:$port/"
      echo "        transport: ws"
      echo "        timeout_ms: 3000"
      [[ $id == bare ]] || echo "        headers: { X-Api-Key: \"$key\" }"
      [[ $scheme != wss ]] || echo "        tls: { ca_file: $TEST_PKI/ca.pem }"
    done
    echo "routing:"
    echo "  default_strategy: priority"
  } >"$file"
}

# A provider whose WebSocket wants a key header (the fake declines an upgrade without it with 401):
# the profile's `headers:` go on the upgrade, so a routed call and a subscription work; without
# them the call fails at once as the provider's HTTP 401 (its JSON-RPC error named), and the
# subscription's error says the upgrade was declined with 401. The key is in no answer and no log.
headers_row() { # SCHEME
  local scheme=$1 key=wsK3y-$RANDOM$RANDOM out log
  fake_over k "$scheme" --ws-require-header "X-Api-Key:$key" --mine-per-sec 4
  key_profile "$P" "$scheme" "$key" 0
  start_serve sc -p "$P" --no-state --no-probe
  log=$(_node_file sc log)

  # A call pinned to GOOD goes over its WebSocket, the key on the upgrade.
  post /rpc/provider/good/local 11
  assert_equal "$PROVIDER/$TRANSPORT" good/ws "GOOD's call (over $scheme)"
  assert_json "$BODY" '.id == 11 and (.result | startswith("0x"))'
  (($(fake_stat k '.ws.upgrades') >= 1))
  assert_equal "$(fake_stat k '.ws.unauthorized')" 0 "upgrades declined while only GOOD was used"
  # A subscription (GOOD first by priority): its id comes back.
  out=$(WS_CLIENT_LIMIT_MS=15000 node "$WS_CLIENT" call "ws://127.0.0.1:$(node_port sc)/rpc/local" \
    '{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}' 3>&- | grep '"answer"')
  echo "# subscription with the key over $scheme: $out" >&3
  assert_json "$out" '.answer.result | test("^0x[0-9a-f]+$")'
  assert_equal "$(fake_stat k '.ws.subscriptions')" 1 "subscriptions served"

  # BARE: its upgrade is declined with 401; the call fails as that answer, well within its timeout.
  local started=$SECONDS
  post /rpc/provider/bare/local 12
  echo "# BARE's call over $scheme: $BODY" >&3
  assert_json "$BODY" '.id == 12 and (.error.data.attempts | length == 1)'
  assert_json "$BODY" '.error.data.attempts[0] | .provider == "bare" and .transport == "ws" and .outcome == "http_error" and .http_status == 401 and .message == "HTTP 401: missing or invalid API key"'
  ((SECONDS - started < 10)) || { echo "BARE's call took $((SECONDS - started)) s" >&2; return 1; }
  (($(fake_stat k '.ws.unauthorized') >= 1))
  (($(metric rpcroute_attempts_total 'provider="bare"' 'outcome="http_error"' 'transport="ws"') >= 1)) ||
    { curl -sS "$(node_url sc)/metrics" | grep 'attempts_total' >&2; return 1; }
  [[ $BODY != *"$key"* ]]
  kill_node sc

  # A subscription with only BARE: the upgrade's refusal is its error.
  key_profile "$BATS_TEST_TMPDIR/bare.yaml" "$scheme" "$key" 1
  start_serve sc_bare -p "$BATS_TEST_TMPDIR/bare.yaml" --no-state --no-probe
  out=$(WS_CLIENT_LIMIT_MS=15000 node "$WS_CLIENT" call "ws://127.0.0.1:$(node_port sc_bare)/rpc/local" \
    '{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}' 3>&- | grep '"answer"')
  echo "# subscription without the key over $scheme: $out" >&3
  assert_json "$out" '.answer.error.message | test("WebSocket to provider bare failed [(]handshake[)]: upgrade declined with HTTP 401")'
  [[ $out != *"$key"* ]]
  ! grep -qF "$key" "$log" "$(_node_file sc_bare log)"
}

# A WebSocket that never opens: SILENT's ws_url is a port that takes the connection and never
# answers (a TLS fake whose handshake hangs: over wss:// the TLS handshake hangs, over ws:// the
# upgrade does), its url is B's. SILENT is first (priority) with `transport: ws` and a 1 s
# timeout: the call must fail over to B within the attempt's time, not the socket's own limits
# (5 s for connect and TLS, 5 s more for the upgrade). The timeout trips SILENT's WebSocket
# breaker (a full attempt's timeout does): /metrics shows it open (rpcroute_breaker_state,
# transport="ws") beside its closed HTTP one, and the next call goes to SILENT over HTTP.
silent_row() { # SCHEME
  local scheme=$1 http=http host=127.0.0.1 t0 elapsed_ms
  [[ $scheme == wss ]] && http=https host=localhost
  start_tls_fake silent --tls-handshake hang
  fake_over b "$scheme"
  {
    echo "name: e2e"
    echo "chains:"
    echo "  local:"
    echo "    chain_id: 31337"
    echo "    providers:"
    echo "      - id: silent"
    echo "        url: $http://$host:$(node_port b)/"
    echo "        ws_url: $scheme://$host:$(node_port silent)/"
    echo "        transport: ws"
    echo "        timeout_ms: 1000"
    echo "        priority: 1"
    [[ $scheme != wss ]] || echo "        tls: { ca_file: $TEST_PKI/ca.pem }"
    provider_yaml b "$scheme" "" "priority: 2"
    echo "routing:"
    echo "  default_strategy: priority"
  } >"$P"
  start_serve sc -p "$P" --no-state --no-probe

  t0=$(date +%s%N)
  post /rpc/local 31
  elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
  echo "# over $scheme: answered by $PROVIDER/$TRANSPORT in $elapsed_ms ms: $BODY" >&3
  assert_json "$BODY" '.id == 31 and (.result | startswith("0x"))'
  assert_equal "$PROVIDER/$TRANSPORT" b/http "the answer after SILENT's attempt (over $scheme)"
  grep -qi '^x-rpcroute-attempts: 2' "$BATS_TEST_TMPDIR/post.hdrs"
  # The attempt ended with its timeout (1 s), well before the connect limit (5 s) would end it.
  ((elapsed_ms < 4500)) || { echo "the call took $elapsed_ms ms" >&2; return 1; }
  assert_equal "$(metric rpcroute_attempts_total 'provider="silent"' 'outcome="timeout"' 'transport="ws"')" 1 \
    "SILENT's WebSocket attempts that timed out"
  # /metrics: SILENT's WebSocket breaker open (2) beside its closed HTTP one; B, HTTP only, has no
  # WebSocket row.
  assert_equal "$(metric rpcroute_breaker_state 'provider="silent"' 'transport="ws"')" 2 "SILENT's ws breaker"
  assert_equal "$(metric rpcroute_breaker_state 'provider="silent"' 'transport="http"')" 0 "SILENT's http breaker"
  if curl -sS --max-time 5 "$(node_url sc)/metrics" | grep '^rpcroute_breaker_state{.*provider="b",transport="ws"}' >&2; then
    return 1
  fi
  # rpcroute top says so too: SILENT's requests go over HTTP now, its WebSocket's breaker open.
  run --separate-stderr rpcroute top --url "$(node_url sc)" --once
  assert_status 0
  sed 's/^/# /' <<<"$output" >&3
  grep -Eq '^PROVIDER +TIER +BREAKER +TRANSPORT +LAG ' <<<"$output" || { _dump_run; false; }
  grep -Eq '^silent +[^ ]+ [^ ]+ +closed +http, ws open +' <<<"$output" || { _dump_run; false; }
  grep -Eq '^b +[^ ]+ [^ ]+ +closed +http +' <<<"$output" || { _dump_run; false; }
  # A full attempt's timeout trips SILENT's WebSocket breaker: the next call is SILENT's over HTTP.
  post /rpc/local 32
  assert_equal "$PROVIDER/$TRANSPORT" silent/http "the call after the WebSocket breaker opened"
  assert_json "$BODY" '.id == 32 and (.result | startswith("0x"))'
}

@test "ws routing: fastest with transport auto sends A over its WebSocket and B over HTTP (ws://)" {
  auto_choice_row ws
}

@test "ws routing: fastest with transport auto sends A over its WebSocket and B over HTTP (wss://)" {
  auto_choice_row wss
}

@test "ws routing: a socket dropped mid-call fails over, one answer with the client's id (ws://)" {
  drop_mid_call_row ws
}

@test "ws routing: a socket dropped mid-call fails over, one answer with the client's id (wss://)" {
  drop_mid_call_row wss
}

@test "ws routing: a provider's headers go on its WebSocket upgrade; without them, HTTP 401 (ws://)" {
  headers_row ws
}

@test "ws routing: a provider's headers go on its WebSocket upgrade; without them, HTTP 401 (wss://)" {
  headers_row wss
}

@test "ws routing: a WebSocket that never opens costs a call its attempt timeout only (ws://)" {
  silent_row ws
}

@test "ws routing: a WebSocket that never opens costs a call its attempt timeout only (wss://)" {
  silent_row wss
}
