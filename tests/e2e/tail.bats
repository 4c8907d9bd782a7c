#!/usr/bin/env bats
# Tail latency (issue 19): hedged reads. A slow first provider is overtaken by the next one
# (`call --hedge`, a profile's `hedge:`, over HTTPS too); the losing attempt is cancelled (the fake
# sees its client leave) and is not held against its provider (no breaker opens at a threshold of
# one failure); sends are never hedged; the sidecar says so in X-Rpcroute-Hedge and /metrics.

# jq programs are single-quoted on purpose; $stderr comes from bats.
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

BAL='eth_getBalance 0x0000000000000000000000000000000000000001 latest'
# The method override that hedges eth_getBalance early, with room in the budget.
HEDGE_BALANCE=$'  method_overrides:\n    eth_getBalance: { hedge: { min_ms: 50, max_ms: 150, max_extra: 0.5 } }'

@test "hedge: a stalled first provider is overtaken; the loser is cancelled and not a failure" {
  start_fake slow --mode hang
  start_fake fast
  write_profile "$P" --strategy priority slow fast --extra "$HEDGE_BALANCE
health:
  circuit_breaker: { failure_threshold: 1 }"
  local t0 t1
  t0=$(now_ms)
  # shellcheck disable=SC2086
  run --separate-stderr rpcroute call -p "$P" --json --timeout 20s $BAL
  t1=$(now_ms)
  assert_status 0
  assert_jq '.meta.provider == "fast"'
  assert_jq '.meta.hedge == "hedge"'
  assert_jq '[.meta.attempts[].provider] == ["fast"]'
  (( t1 - t0 < 5000 )) || { echo "took $((t1 - t0)) ms: the hedge did not cut the stall" >&2; false; }
  # The hung attempt was abandoned (the fake saw its client leave) and nothing was held against
  # `slow`: its breaker (threshold 1) is closed, and it has no sample.
  assert_equal "$(fake_stat slow .hanging)" 0 "requests still hanging on slow"
  assert_json "$(state_entry slow)" '. == null or ((.breaker.state // "closed") == "closed" and (.breaker.failures // 0) == 0)'
  # --no-hedge: the same call waits for the stalled provider until its timeout.
  # shellcheck disable=SC2086
  run --separate-stderr rpcroute call -p "$P" --json --no-hedge --max-attempts 1 --timeout 400ms $BAL
  assert_status 3
  assert_equal "$(fake_requests fast)" 1 "requests to fast"
}

@test "hedge: --hedge on a profile without hedge; sends are never hedged" {
  start_fake slow --mode delay --delay-ms 900
  start_fake fast
  write_profile "$P" --strategy priority slow fast
  # shellcheck disable=SC2086
  run --separate-stderr rpcroute call -p "$P" --json $BAL
  assert_status 0
  assert_jq '.meta.provider == "slow" and (.meta | has("hedge") | not)'
  assert_equal "$(fake_requests fast)" 0 "requests to fast without --hedge"
  # With --hedge (the defaults) the delay is slow's p90 for the method (its one 900 ms sample):
  # once slow hangs, fast answers after it.
  fake_control slow '{"mode":"hang"}'
  # shellcheck disable=SC2086
  run --separate-stderr rpcroute call -p "$P" --json --hedge --timeout 20s $BAL
  assert_status 0
  assert_jq '.meta.provider == "fast" and .meta.hedge == "hedge"'
  assert_equal "$(fake_requests fast)" 1 "requests to fast with --hedge"
  # A send waits for the slow provider whatever --hedge says.
  run --separate-stderr rpcroute call -p "$P" --json --hedge --timeout 1s eth_sendRawTransaction 0x02
  assert_equal "$(fake_requests fast)" 1 "requests to fast after a send"
}

@test "hedge: the sidecar's answer says which attempt won; a losing hedge opens no breaker" {
  start_fake first --mode delay --delay-ms 300
  start_fake second --mode hang
  write_profile "$P" --strategy priority first second --extra "$HEDGE_BALANCE
health:
  circuit_breaker: { failure_threshold: 1 }"
  sidecar_start sc --profile "$P" --no-probe --no-state
  local req='{"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["0x0000000000000000000000000000000000000001","latest"]}'
  sidecar_post /rpc/local "$req"
  assert_equal "$code" 200
  assert_json "$body" '.id == 7 and .result != null'
  grep -qi '^X-Rpcroute-Hedge: first' "$SC_HDRS" || { cat "$SC_HDRS" >&2; false; }
  grep -qi '^X-Rpcroute-Provider: first' "$SC_HDRS"
  assert_equal "$(fake_stat second .hanging)" 0 "hedges still hanging on second"
  sidecar_get /metrics
  grep -q 'rpcroute_hedges_total{profile="profile",chain="local",won="first"} 1' <<<"$body" || {
    grep hedge <<<"$body" >&2
    false
  }
  grep -Eq 'rpcroute_breaker_state\{[^}]*provider="second"[^}]*\} 0' <<<"$body" || {
    grep breaker <<<"$body" >&2
    false
  }
  # A fast first answer fires no hedge and sends no header.
  fake_control first '{"mode":"ok"}'
  sidecar_post /rpc/local "$req"
  assert_equal "$code" 200
  ! grep -qi '^X-Rpcroute-Hedge' "$SC_HDRS" || false
}

@test "hedge: over HTTPS, a slow provider is overtaken" {
  start_tls_fake ts1 --mode delay --delay-ms 3000
  start_tls_fake ts2
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    hedge: { min_ms: 50, max_ms: 200 }
    providers:
      - { id: ts1, url: "$(node_url ts1)", priority: 1, tls: { ca_file: "$TEST_PKI/ca.pem" } }
      - { id: ts2, url: "$(node_url ts2)", priority: 2, tls: { ca_file: "$TEST_PKI/ca.pem" } }
routing:
  default_strategy: priority
EOF
  local t0 t1
  t0=$(now_ms)
  # shellcheck disable=SC2086
  run --separate-stderr rpcroute call -p "$P" --json $BAL
  t1=$(now_ms)
  assert_status 0
  assert_jq '.meta.provider == "ts2" and .meta.hedge == "hedge"'
  (( t1 - t0 < 2500 )) || { echo "took $((t1 - t0)) ms" >&2; false; }
}
