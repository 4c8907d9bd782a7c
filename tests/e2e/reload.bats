#!/usr/bin/env bats
# rpcroute serve's hot reload (issue 21): SIGHUP and an edited profile file load the profiles again.
# A broken profile leaves the served set in place, with the error in the log and in /status; a valid
# edit takes effect within a second or so, and a request in flight across it is answered on the set
# it started on; an HTTPS provider joins by a reload, and its URL (its key) never shows.
# Fakes only (no anvil): the suite takes seconds.

# jq programs are single-quoted on purpose; $body and $code come from sidecar_helpers.
# shellcheck disable=SC2016,SC2154

load helpers
load sidecar_helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  make_test_pki "$BATS_FILE_TMPDIR/pki"
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

BN='{"jsonrpc":"2.0","id":7,"method":"eth_blockNumber","params":[]}'

# The provider that answered the last sidecar_post.
answered_by() {
  grep -i '^x-rpcroute-provider:' "$SC_HDRS" | tr -d '\r' | awk '{print $2}'
}

# Polls /status until the jq FILTER holds (up to LIMIT seconds, default 15). Leaves it in $body.
status_until() { # FILTER [LIMIT_S]
  local deadline=$((SECONDS + ${2:-15}))
  while ((SECONDS < deadline)); do
    sidecar_get /status
    if [[ $code == 200 ]] && jq -e "$1" <<<"$body" >/dev/null 2>&1; then return 0; fi
    nap 0.05
  done
  echo "/status never matched $1: $body" >&2
  return 1
}

# Posts eth_blockNumber until PROVIDER answers it (up to LIMIT seconds, default 15).
answered_until() { # PROVIDER [LIMIT_S]
  local deadline=$((SECONDS + ${2:-15}))
  while ((SECONDS < deadline)); do
    sidecar_post /rpc/local "$BN"
    [[ $code == 200 && $(answered_by) == "$1" ]] && return 0
    nap 0.05
  done
  echo "$1 never answered (last: $code $(answered_by) $body)" >&2
  return 1
}

@test "reload: a broken profile (edited, then SIGHUP) leaves the served one in place; /status and the log say why" {
  start_fake f1 --height 100
  write_profile "$P" f1
  sidecar_start sc --profile "$P" --no-probe
  sidecar_post /rpc/local "$BN"
  assert_equal "$code" 200 "status"
  assert_equal "$(answered_by)" f1 "provider"
  status_until ".reload.ok and .reload.reloads == 0 and .reload.files == [\"$P\"]"
  # An unknown key on line 4: the watch finds the edit and refuses it.
  printf 'name: e2e\nchains:\n  local:\n    chain_idd: 5\n' >"$P"
  status_until '.reload.ok == false and .reload.last_trigger == "file changed"'
  assert_json "$body" '.reload.error | test("profile.yaml:4") and test("chain_idd")'
  # SIGHUP loads it again: refused again; f1 still serves.
  kill -HUP "$SC_PID"
  status_until '.reload.ok == false and .reload.last_trigger == "SIGHUP"'
  sidecar_post /rpc/local "$BN"
  assert_equal "$code" 200 "status"
  assert_equal "$(answered_by)" f1 "provider"
  assert_json "$body" '.result == "0x64" and .id == 7'
  grep -q 'reload (SIGHUP) failed; still serving the profiles loaded before: .*chain_idd' "$SC_LOG"
  # Fixed: the watch reloads it, and the error goes.
  write_profile "$P" f1
  status_until '.reload.ok and .reload.reloads == 1 and .reload.last_trigger == "file changed"'
  grep -q 'profiles reloaded (file changed): no provider or chain changed' "$SC_LOG"
  # SIGHUP reloads even an unchanged file; it still saves the state too.
  kill -HUP "$SC_PID"
  status_until '.reload.ok and .reload.reloads == 2 and .reload.last_trigger == "SIGHUP"'
  grep -q 'signal SIGHUP: state saved' "$SC_LOG"
  sidecar_post /rpc/local "$BN"
  assert_equal "$(answered_by)" f1 "provider"
}

@test "reload: a provider added and one removed take effect within seconds; a request in flight across the reload gets its answer" {
  start_fake f1 --height 100
  start_fake f3 --height 300
  write_profile "$P" f1
  sidecar_start sc --profile "$P" --no-probe
  sidecar_post /rpc/local "$BN"
  assert_equal "$(answered_by)" f1 "provider"
  # f1's next request takes 3 s: it is in flight across the reload.
  fake_control f1 '{"queue":[{"mode":"delay","delay_ms":3000}]}'
  curl -s --max-time 30 -D "$BATS_TEST_TMPDIR/slow.h" -o "$BATS_TEST_TMPDIR/slow.b" \
    -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":"slow","method":"eth_blockNumber","params":[]}' \
    "$SC_URL/rpc/local" &
  local slow=$! deadline=$((SECONDS + 10))
  until [[ $(fake_requests f1) == 2 ]] || ((SECONDS >= deadline)); do nap 0.02; done
  assert_equal "$(fake_requests f1)" 2 "requests f1 received"
  local t0 t1
  t0=$(now_ms)
  write_profile "$P" f3
  answered_until f3
  t1=$(now_ms)
  echo "the edit took effect after $((t1 - t0)) ms"
  ((t1 - t0 < 10000))
  grep -q 'profiles reloaded (file changed): profile profile: chain local: added f3; removed f1' "$SC_LOG"
  # The slow request was still in flight on f1 and gets f1's answer, to its own id.
  [[ ! -s $BATS_TEST_TMPDIR/slow.b ]]
  wait "$slow"
  assert_json "$(cat "$BATS_TEST_TMPDIR/slow.b")" '.id == "slow" and .result == "0x64"'
  grep -qi '^x-rpcroute-provider: f1' "$BATS_TEST_TMPDIR/slow.h"
  # f1 is out: nothing more reaches it (the posts above went to it until the reload); /status
  # knows only f3.
  local f1_requests
  f1_requests=$(fake_requests f1)
  for _ in 1 2 3; do sidecar_post /rpc/local "$BN"; done
  assert_equal "$(answered_by)" f3 "provider"
  assert_json "$body" '.result == "0x12c"'
  assert_equal "$(fake_requests f1)" "$f1_requests" "requests f1 received after the reload"
  sidecar_get /status
  assert_json "$body" '[.health[].providers[].provider] == ["f3"] and .reload.reloads == 1'
}

@test "reload: https: a provider behind TLS joins by a reload; a new key in its URL is a new provider; no key shows" {
  start_fake f1 --height 100
  start_tls_fake t1 --height 200
  write_profile "$P" f1
  sidecar_start sc --profile "$P"
  sidecar_post /rpc/local "$BN"
  assert_equal "$(answered_by)" f1 "provider"
  write_profile "$P" \
    "t1,url=$(node_url t1)/v2/KEYONE1234567890,tls={ ca_file: \"$TEST_PKI/ca.pem\" }"
  kill -HUP "$SC_PID"
  status_until '.reload.reloads >= 1 and .reload.ok'
  answered_until t1
  assert_json "$body" '.result == "0xc8"'
  assert_json "$(fake_stats t1)" '.tls.handshakes >= 1 and .paths["/v2/KEYONE1234567890"] >= 1'
  grep -q 'profile profile: chain local: added t1; removed f1' "$SC_LOG"
  # f1's pollers stopped with its runtime (after their current wait: a poll interval is 1 s here).
  nap 2
  local f1_requests
  f1_requests=$(fake_requests f1)
  nap 2
  assert_equal "$(fake_requests f1)" "$f1_requests" "requests f1 received 2 s after the reload"
  # The key rotated: the same id with another URL.
  write_profile "$P" \
    "t1,url=$(node_url t1)/v2/KEYTWO0987654321,tls={ ca_file: \"$TEST_PKI/ca.pem\" }"
  local deadline=$((SECONDS + 15))
  until grep -q "t1's URL changed" "$SC_LOG" || ((SECONDS >= deadline)); do nap 0.05; done
  grep -q "profile profile: chain local: t1's URL changed" "$SC_LOG"
  sidecar_post /rpc/local "$BN"
  assert_equal "$(answered_by)" t1 "provider"
  assert_json "$(fake_stats t1)" '.paths["/v2/KEYTWO0987654321"] >= 1'
  sidecar_get /status
  local status=$body
  sidecar_get /metrics
  local key
  for key in KEYONE1234567890 KEYTWO0987654321; do
    if { cat "$SC_LOG"; echo "$status$body"; } | grep -q "$key"; then
      echo "$key shown" >&2
      return 1
    fi
  done
}

@test "reload: a WebSocket subscription on a removed provider moves to the new one, same id" {
  if [[ ! -x $ANVIL || ! -d $REPO/.tools/ws-client/node_modules/ws ]] || ! command -v node >/dev/null; then
    skip "needs anvil, node and .tools/ws-client (scripts/setup)"
  fi
  start_anvil b1 --block-time 1
  start_anvil b2 --block-time 1
  # b2's heads are 1000 and more: each event says which node it came from.
  timeout 30 "$CAST" rpc anvil_mine 1000 --rpc-url "$(node_url b2)" >/dev/null
  write_profile "$P" "b1,ws_url=ws://127.0.0.1:$(node_port b1)"
  sidecar_start sc --profile "$P" --no-probe
  local out=$BATS_TEST_TMPDIR/events deadline
  timeout 40 node "$BATS_TEST_DIRNAME/ws_client.mjs" listen "ws://127.0.0.1:$SC_PORT/rpc/local" '["newHeads"]' 9 >"$out" &
  local client=$!
  deadline=$((SECONDS + 15))
  until (($(grep -c '"number"' "$out" || true) >= 2)) || ((SECONDS >= deadline)); do nap 0.1; done
  write_profile "$P" "b2,ws_url=ws://127.0.0.1:$(node_port b2)"
  wait "$client"
  cat "$out"
  grep -q 'profiles reloaded (file changed): profile profile: chain local: added b2; removed b1' "$SC_LOG"
  # One subscription id throughout: b1's heads before the reload, b2's after it.
  assert_equal "$(jq -sc '[.[] | select(.id) | .id] | length' "$out")" 1 "subscribe answers"
  assert_json "$(jq -sc '.' "$out")" '([.[] | .subscription | strings] | unique | length == 1)
    and ([.[] | .number | numbers | select(. < 1000)] | length >= 2)
    and ([.[] | .number | numbers | select(. >= 1000)] | length >= 2)
    and ([.[] | .number | numbers] | . == (sort_by(. >= 1000)))'
  # The client gone, no upstream subscription is left open (on b1 or b2).
  deadline=$((SECONDS + 10))
  while sidecar_get /metrics && ! grep -Eq '^rpcroute_websocket_upstream_subscriptions 0$' <<<"$body"; do
    ((SECONDS < deadline)) || { grep websocket_upstream <<<"$body" >&2; false; }
    nap 0.1
  done
}
