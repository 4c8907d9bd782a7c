#!/usr/bin/env bats
# rpcroute call: output, failover, classification, breakers, rate limits, strategies, --raw.
# Real anvil nodes for the happy paths, the fake upstream for faults.

# jq programs are single-quoted on purpose; $stderr and $stderr_lines come from bats; each test
# runs in its own subshell, so exports there are meant to be local.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN ANVIL
  # Shared, never modified by a test: tests that kill a node start their own.
  start_anvil a1
  start_anvil a2
  start_anvil a3
  make_test_pki "$BATS_FILE_TMPDIR/pki"
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

# Three healthy fakes f1 f2 f3 (heights 100) in a profile $P, priority in that order.
three_fakes() { # [write_profile options]
  start_fake f1 --height 100
  start_fake f2 --height 100
  start_fake f3 --height 100
  write_profile "$P" "$@" f1 f2 f3
}

# ---------------------------------------------------------------------------------------------------
# Real nodes

@test "anvil: eth_blockNumber prints a hex quantity and exits 0" {
  write_profile "$P" a1 a2 a3
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 0
  [[ $output =~ ^\"0x(0|[1-9a-f][0-9a-f]*)\"$ ]] || { _dump_run; false; }
}

@test "libcurl is loaded only when a request needs curl; without it the native client still serves" {
  # The binary does not link libcurl (rpcroute/transport/curl_api.hpp): a call to an http:// node
  # starts without its thirty-odd libraries.
  run ldd "$RPCROUTE_BIN"
  assert_status 0
  [[ $output != *libcurl* && $output != *libldap* && $output != *libgssapi* ]] || { _dump_run; false; }
  # A libcurl.so.4 that is not curl (no curl_* functions) found first: the native path answers,
  # a request that needs curl fails with a message naming what is missing, not a crash.
  local fake=$BATS_TEST_TMPDIR/fakecurl
  mkdir -p "$fake"
  printf 'int rpcroute_not_curl;\n' >"$fake/empty.c"
  g++ -x c -shared -fPIC -o "$fake/libcurl.so.4" "$fake/empty.c"
  write_profile "$P" a1
  LD_LIBRARY_PATH=$fake run --separate-stderr rpcroute call --profile "$P" eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_equal "$output" "\"$DEV_BALANCE\"" "balance through the native client"
  LD_LIBRARY_PATH=$fake RPCROUTE_HTTP_CLIENT=curl run --separate-stderr rpcroute call --profile "$P" -v eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 3
  [[ $stderr == *"libcurl.so.4 has no curl_global_init"* ]] || { _dump_run; false; }
}

@test "anvil: eth_getBalance with bare-word params (address, latest)" {
  write_profile "$P" a1 a2 a3
  run --separate-stderr rpcroute call --profile "$P" eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_equal "$output" "\"$DEV_BALANCE\"" "balance"
}

@test "anvil: params that are valid JSON are sent as JSON (quoted string, false)" {
  write_profile "$P" a1 a2 a3
  run --separate-stderr rpcroute call --profile "$P" eth_getBlockByNumber '"0x0"' false
  assert_status 0
  assert_jq '.number == "0x0" and (.transactions | type == "array")'
}

@test "anvil: with the priority-1 node killed, --strategy priority succeeds on the second attempt" {
  start_anvil k1
  start_anvil k2
  start_anvil k3
  write_profile "$P" k1 k2 k3
  kill_node k1
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.attempts | length == 2'
  assert_jq '.meta.attempts[0].provider == "k1" and .meta.attempts[0].outcome == "connect_failed"'
  assert_jq '.meta.attempts[0].class == "provider_failure"'
  assert_jq '.meta.attempts[1].provider == "k2" and .meta.attempts[1].outcome == "success"'
  assert_jq '.meta.provider == "k2" and (.result | test("^0x[0-9a-f]+$"))'
}

@test "anvil: --json shows the result and the routing metadata" {
  write_profile "$P" a1 a2 a3
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result | test("^0x[0-9a-f]+$")'
  assert_jq '.meta.provider | IN("a1", "a2", "a3")'
  assert_jq '.meta.chain == "local" and .meta.chain_id == 31337'
  assert_jq '.meta.strategy == "load_balanced"'
  assert_jq '.meta.upstream_latency_ms | type == "number" and . >= 0'
  assert_jq '.meta.attempts | length == 1'
  assert_jq '.meta.attempts[0] | .outcome == "success" and .class == "success" and (.latency_ms | type == "number")'
  assert_jq '.meta.attempts[0].provider == .meta.provider'
}

@test "eth_chainId is answered from the profile without an upstream request" {
  three_fakes
  run --separate-stderr rpcroute call --profile "$P" --json eth_chainId
  assert_status 0
  assert_jq '.result == "0x7a69"'
  assert_jq '.meta.attempts == [] and .meta.provider == null'
  assert_equal "$(fake_requests f1)" 0 "f1 requests"
  assert_equal "$(fake_requests f2)" 0 "f2 requests"
  assert_equal "$(fake_requests f3)" 0 "f3 requests"
}

# ---------------------------------------------------------------------------------------------------
# Failover on provider failures

@test "failover: a port nobody listens on (connect_failed), then the next provider" {
  dead_port dead
  start_fake f2 --height 100
  write_profile "$P" dead f2
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "f2"'
  assert_jq '[.meta.attempts[] | [.provider, .outcome]] == [["dead", "connect_failed"], ["f2", "success"]]'
  assert_jq '.meta.attempts[0].class == "provider_failure"'
}

@test "failover: HTTP 503 (http_error), then the next provider" {
  start_fake f1 --mode status --status 503
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "f2"'
  assert_jq '.meta.attempts[0] | .provider == "f1" and .outcome == "http_error" and .http_status == 503 and .class == "provider_failure"'
  assert_equal "$(fake_requests f1)" 1 "f1 requests"
}

@test "failover: a hanging provider is cut off by its timeout_ms, well before the hang ends" {
  start_fake f1 --mode hang
  start_fake f2 --height 100
  write_profile "$P" f1,timeout_ms=800 f2
  local t0 elapsed
  t0=$(now_ms)
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  elapsed=$(($(now_ms) - t0))
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "f2"'
  assert_jq '.meta.attempts[0] | .provider == "f1" and .outcome == "timeout" and .class == "provider_failure"'
  assert_jq '.meta.attempts[0].latency_ms >= 700'
  ((elapsed < 5000)) || { echo "call took ${elapsed} ms" >&2; false; }
}

@test "failover: a slow provider (delay longer than timeout_ms) times out and the next one answers" {
  start_fake f1 --mode delay --delay-ms 20000 --height 100
  start_fake f2 --height 100
  write_profile "$P" f1,timeout_ms=500 f2
  local t0 elapsed
  t0=$(now_ms)
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  elapsed=$(($(now_ms) - t0))
  assert_status 0
  assert_jq '.meta.provider == "f2" and .meta.attempts[0].outcome == "timeout"'
  ((elapsed < 5000)) || { echo "call took ${elapsed} ms" >&2; false; }
}

@test "--timeout bounds the whole call when every provider hangs (exit 3)" {
  start_fake f1 --mode hang
  start_fake f2 --mode hang
  write_profile "$P" f1 f2
  local t0 elapsed
  t0=$(now_ms)
  run --separate-stderr rpcroute call --profile "$P" --timeout 1500 eth_blockNumber
  elapsed=$(($(now_ms) - t0))
  assert_status 3
  ((elapsed < 6000)) || { echo "call took ${elapsed} ms with --timeout 1500" >&2; false; }
}

@test "--timeout passed before any attempt: stderr names the deadline, as --json does, not 'no eligible provider'" {
  start_fake f1 --mode hang
  write_profile "$P" f1
  # 1 ms is over before the first attempt could start.
  run --separate-stderr rpcroute call --profile "$P" --timeout 1 eth_blockNumber
  assert_status 3
  [[ $stderr == *"deadline of 1 ms exceeded"* && $stderr != *"no eligible provider"* ]] ||
    { echo "stderr: $stderr" >&2; false; }
  run --separate-stderr rpcroute call --profile "$P" --timeout 1 --json eth_blockNumber
  assert_status 3
  [[ $output == *"deadline of 1 ms exceeded"* ]] || { echo "output: $output" >&2; false; }
}

@test "failover: HTTP 429 marks the provider rate-limited until Retry-After, persisted" {
  start_fake f1 --mode status --status 429 --retry-after 60 --height 100
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  local before
  before=$(now_ms)
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.provider == "f2"'
  assert_jq '.meta.attempts[0] | .provider == "f1" and .outcome == "rate_limited" and .class == "rate_limited" and .http_status == 429'

  local entry
  entry=$(state_entry f1)
  assert_json "$entry" '.rate_limited_until_ms > ($now + 50000)' --argjson now "$before"
  assert_json "$entry" '.rate_limited_until_ms <= ($now + 70000)' --argjson now "$(now_ms)"
  # A rate limit is not a health failure.
  assert_json "$entry" '(.breaker.state // "closed") == "closed"'

  # The next process puts the rate-limited provider in a lower tier: f2 is tried first now.
  fake_control f1 '{"mode":"ok"}'
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.attempts[0].provider == "f2"'
}

@test "failover: malformed JSON from a provider (bad_response), then the next provider" {
  start_fake f1 --mode malformed
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "f2"'
  assert_jq '.meta.attempts[0] | .provider == "f1" and .outcome == "bad_response" and .class == "provider_failure"'
}

@test "failover: truncated, HTML, wrong id, closed and reset answers are provider failures" {
  local mode
  for mode in truncated html wrong_id close reset; do
    start_fake "bad_$mode" --mode "$mode"
  done
  start_fake f2 --height 100
  for mode in truncated html wrong_id close reset; do
    write_profile "$P" "bad_$mode" f2
    run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
    echo "mode $mode" >&2
    assert_status 0
    assert_jq '.result == "0x64" and .meta.provider == "f2"'
    assert_jq '.meta.attempts | length == 2'
    assert_jq '.meta.attempts[0].class == "provider_failure" and .meta.attempts[0].outcome != "success"'
  done
}

@test "failover: method not found (-32601) is a capability error: next provider, breaker untouched" {
  start_fake f1 --mode rpc_error --code -32601 --message "the method eth_blockNumber does not exist/is not available"
  start_fake f2 --height 100
  write_profile "$P" f1 f2 --extra 'health: {circuit_breaker: {failure_threshold: 1, recovery_timeout_ms: 60000}}'
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.provider == "f2"'
  assert_jq '.meta.attempts[0] | .provider == "f1" and .class == "capability"'
  assert_json "$(state_entry f1)" '(.breaker.state // "closed") == "closed"'
}

# ---------------------------------------------------------------------------------------------------
# Deterministic errors: no failover

@test "no failover on execution reverted (code 3): exit 1, one attempt, error on stdout" {
  start_fake f1 --mode rpc_error --code 3 --message "execution reverted"
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  run --separate-stderr rpcroute call --profile "$P" --strategy priority eth_call '{"to":"0x0000000000000000000000000000000000000001","data":"0x"}' latest
  assert_status 1
  assert_jq '.code == 3 and (.message | test("execution reverted"))'
  assert_stderr_lines 1
  assert_equal "$(fake_requests f2)" 0 "f2 requests"

  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_call '{"to":"0x0000000000000000000000000000000000000001","data":"0x"}' latest
  assert_status 1
  assert_jq '.error.code == 3'
  assert_jq '.meta.attempts | length == 1'
  assert_jq '.meta.attempts[0] | .provider == "f1" and .class == "deterministic"'
  assert_equal "$(fake_requests f2)" 0 "f2 requests"
}

@test "no failover on invalid params (-32602): exit 1, one attempt" {
  start_fake f1 --mode rpc_error --code -32602 --message "invalid argument 0: hex string has length 3, want 40 for common.Address"
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_getBalance 0x123 latest
  assert_status 1
  assert_jq '.error.code == -32602'
  assert_jq '.meta.attempts | length == 1'
  assert_jq '.meta.attempts[0] | .provider == "f1" and .class == "deterministic"'
  assert_stderr_lines 1
  assert_equal "$(fake_requests f1)" 1 "f1 requests"
  assert_equal "$(fake_requests f2)" 0 "f2 requests"
}

@test "a deterministic error does not count toward the breaker" {
  start_fake f1 --mode rpc_error --code 3 --message "execution reverted"
  write_profile "$P" f1 --extra 'health: {circuit_breaker: {failure_threshold: 1, recovery_timeout_ms: 60000}}'
  run --separate-stderr rpcroute call --profile "$P" eth_call '{"to":"0x0000000000000000000000000000000000000001"}' latest
  assert_status 1
  run --separate-stderr rpcroute call --profile "$P" eth_call '{"to":"0x0000000000000000000000000000000000000001"}' latest
  assert_status 1
  assert_equal "$(fake_requests f1)" 2 "f1 requests"
  assert_json "$(state_entry f1)" '(.breaker.state // "closed") == "closed" and (.breaker.failures // 0) == 0'
}

# ---------------------------------------------------------------------------------------------------
# Nothing can serve

@test "all providers down: exit 3, a first line then one line per attempt on stderr" {
  dead_port p1
  start_fake p2 --mode status --status 502
  start_fake p3 --mode malformed
  write_profile "$P" p1 p2 p3
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 3
  assert_stderr_lines 4
  local line ids=()
  for line in "${stderr_lines[@]:1}"; do
    [[ $line =~ ^\ \ (p[123])([^0-9a-z_]|$) ]] || { echo "attempt line: [$line]" >&2; _dump_run; false; }
    ids+=("${BASH_REMATCH[1]}")
  done
  assert_equal "$(printf '%s\n' "${ids[@]}" | sort | tr '\n' ' ')" "p1 p2 p3 " "providers in attempt lines"
  [[ ${stderr_lines[0]} != "  "* ]]
}

@test "all providers down with --json: exit 3 and every attempt in meta" {
  dead_port p1
  dead_port p2
  write_profile "$P" p1 p2
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 3
  assert_jq '.meta.attempts | length == 2'
  assert_jq '[.meta.attempts[].outcome] == ["connect_failed", "connect_failed"]'
  assert_jq '.error | type == "object"'
}

@test "--max-attempts 1 stops after the first failure" {
  dead_port p1
  start_fake p2 --height 100
  write_profile "$P" p1 p2
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --max-attempts 1 --json eth_blockNumber
  assert_status 3
  assert_jq '.meta.attempts | length == 1 and .[0].provider == "p1"'
  assert_equal "$(fake_requests p2)" 0 "p2 requests"
}

# ---------------------------------------------------------------------------------------------------
# Circuit breaker across processes

breaker_profile() {
  start_fake f1 --mode status --status 500
  start_fake f2 --height 100
  write_profile "$P" f1 f2 --extra 'health: {circuit_breaker: {failure_threshold: 2, recovery_timeout_ms: 4000}}'
}

# Two calls, each failing on f1 then served by f2: the breaker of f1 opens.
open_f1_breaker() {
  for _ in 1 2; do
    run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
    assert_status 0
    assert_jq '.meta.attempts[0].provider == "f1" and .meta.provider == "f2"'
  done
  assert_json "$(state_entry f1)" '.breaker.state == "open"'
}

@test "breaker: opens after failure_threshold failures and the next process skips the provider" {
  breaker_profile
  open_f1_breaker
  local requests
  requests=$(fake_requests f1)
  assert_equal "$requests" 2 "f1 requests"

  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.provider == "f2"'
  assert_jq '[.meta.attempts[].provider] == ["f2"]'
  assert_jq '[.meta.excluded[] | select(.provider == "f1") | .reason | test("breaker"; "i")] == [true]'
  assert_equal "$(fake_requests f1)" "$requests" "f1 requests while open"
}

@test "breaker: half-opens after recovery_timeout_ms and the next call tries the provider again" {
  breaker_profile
  open_f1_breaker
  fake_control f1 '{"mode":"ok","height":100}'
  sleep 4.5
  # Half-open: eligible again, in a tier below the closed f2 (DESIGN.md section 4, step 5).
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '[.meta.excluded[]? | select(.provider == "f1")] == []'
  assert_jq '.meta.provider == "f2"'
  # With f2 failing, the call goes on to f1, which answers.
  fake_control f2 '{"mode":"status","status":503}'
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '[.meta.attempts[] | [.provider, .outcome]] == [["f2", "http_error"], ["f1", "success"]]'
  assert_jq '.meta.provider == "f1" and .result == "0x64"'
  assert_equal "$(fake_requests f1)" 3 "f1 requests"
  assert_json "$(state_entry f1)" '.breaker.state | IN("half_open", "closed")'
}

@test "breaker: a half-open provider with only itself to try is tried" {
  start_fake f1 --mode status --status 500
  write_profile "$P" f1 --extra 'health: {circuit_breaker: {failure_threshold: 2, recovery_timeout_ms: 4000}}'
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 3
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 3
  # Open, and nothing else usable: the call goes through as a trial (issue 15); its failure leaves
  # the breaker as it was, with no reopen and no new deadline.
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 3
  assert_jq '[.meta.attempts[].provider] == ["f1"]'
  assert_equal "$(fake_requests f1)" 3 "f1 requests: one trial while open"
  assert_json "$(state_entry f1)" '.breaker.state == "open" and .breaker.reopens == 0'
  fake_control f1 '{"mode":"ok","height":100}'
  sleep 4.5
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.provider == "f1" and .result == "0x64"'
}

@test "breaker: a failure in half-open reopens it" {
  breaker_profile
  open_f1_breaker
  sleep 4.5
  fake_control f2 '{"mode":"status","status":503}'
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 3
  assert_jq '[.meta.attempts[].provider] == ["f2", "f1"]'
  assert_json "$(state_entry f1)" '.breaker.state == "open" and .breaker.reopens >= 1'
  # Reopened: skipped again by the next process.
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 3
  assert_jq '[.meta.attempts[].provider] == ["f2"]'
  assert_jq '[.meta.excluded[] | select(.provider == "f1") | .reason | test("breaker"; "i")] == [true]'
}

# ---------------------------------------------------------------------------------------------------
# Selection

@test "--provider sends the request to that provider only" {
  three_fakes
  for _ in 1 2 3 4; do
    run --separate-stderr rpcroute call --profile "$P" --provider f2 --json eth_blockNumber
    assert_status 0
    assert_jq '.meta.provider == "f2" and (.meta.attempts | length == 1)'
  done
  assert_equal "$(fake_requests f1)" 0 "f1 requests"
  assert_equal "$(fake_requests f2)" 4 "f2 requests"
  assert_equal "$(fake_requests f3)" 0 "f3 requests"
}

@test "--provider does not fall back to others when that provider fails" {
  three_fakes
  fake_control f2 '{"mode":"status","status":503}'
  run --separate-stderr rpcroute call --profile "$P" --provider f2 --json eth_blockNumber
  assert_status 3
  assert_jq '[.meta.attempts[].provider] == ["f2"]'
  assert_equal "$(fake_requests f1)" 0 "f1 requests"
  assert_equal "$(fake_requests f3)" 0 "f3 requests"
}

@test "every strategy can be selected with --strategy, in either spelling" {
  three_fakes
  local s
  for s in load_balanced round_robin random weighted priority fastest latency_weighted; do
    run --separate-stderr rpcroute call --profile "$P" --strategy "$s" --json eth_blockNumber
    echo "strategy $s" >&2
    assert_status 0
    assert_jq '.meta.strategy == $s and .result == "0x64"' --arg s "$s"
    run --separate-stderr rpcroute call --profile "$P" --strategy "${s//_/-}" --json eth_blockNumber
    assert_status 0
    assert_jq '.meta.strategy | IN($s, $h)' --arg s "$s" --arg h "${s//_/-}"
  done
}

@test "the profile's default_strategy is used without --strategy" {
  three_fakes --strategy fastest
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.strategy == "fastest"'
}

@test "priority: the priority-1 provider serves while healthy" {
  start_fake f1 --height 100
  start_fake f2 --height 100
  start_fake f3 --height 100
  write_profile "$P" f1,priority=3 f2,priority=1 f3,priority=2
  for _ in 1 2 3; do
    run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
    assert_status 0
    assert_jq '.meta.provider == "f2"'
  done
}

# ---------------------------------------------------------------------------------------------------
# --raw

@test "--raw keeps a string id" {
  write_profile "$P" a1 a2 a3
  run --separate-stderr rpcroute_stdin '{"jsonrpc":"2.0","id":"abc","method":"eth_blockNumber","params":[]}' \
    call --profile "$P" --raw
  assert_status 0
  assert_jq '.jsonrpc == "2.0" and .id == "abc" and (.result | test("^0x[0-9a-f]+$"))'
}

@test "--raw keeps a number id" {
  write_profile "$P" a1 a2 a3
  run --separate-stderr rpcroute_stdin '{"jsonrpc":"2.0","id":7,"method":"eth_blockNumber","params":[]}' \
    call --profile "$P" --raw
  assert_status 0
  assert_jq '.id == 7 and (.id | type == "number") and (.result | test("^0x[0-9a-f]+$"))'
}

@test "--raw keeps a null id" {
  write_profile "$P" a1 a2 a3
  run --separate-stderr rpcroute_stdin '{"jsonrpc":"2.0","id":null,"method":"eth_blockNumber","params":[]}' \
    call --profile "$P" --raw
  assert_status 0
  assert_jq 'has("id") and .id == null and (.result | test("^0x[0-9a-f]+$"))'
}

@test "--raw batch returns an array in request order" {
  write_profile "$P" a1 a2 a3
  local batch
  batch='[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]},
          {"jsonrpc":"2.0","id":"two","method":"eth_chainId","params":[]},
          {"jsonrpc":"2.0","id":3,"method":"eth_getBalance","params":["'$DEV_ACCOUNT'","latest"]}]'
  run --separate-stderr rpcroute_stdin "$batch" call --profile "$P" --raw
  assert_status 0
  assert_jq 'type == "array" and length == 3'
  assert_jq '[.[].id] == [1, "two", 3]'
  assert_jq '.[1].result == "0x7a69"'
  assert_jq '.[2].result == $b' --arg b "$DEV_BALANCE"
}

@test "--raw with invalid JSON prints the -32700 response, exits 2 and sends nothing upstream" {
  three_fakes
  run --separate-stderr rpcroute_stdin '{not json' call --profile "$P" --raw
  assert_status 2
  assert_jq '.error.code == -32700 and .id == null'
  assert_equal "$(fake_requests f1)" 0 "f1 requests"
  assert_equal "$(fake_requests f2)" 0 "f2 requests"
  assert_equal "$(fake_requests f3)" 0 "f3 requests"
}

@test "--raw with an invalid request prints its -32600 answer, exits 2 and sends nothing upstream" {
  three_fakes
  run --separate-stderr rpcroute_stdin '{"jsonrpc":"2.0","id":7}' call --profile "$P" --raw
  assert_status 2
  assert_jq '.error.code == -32600 and .id == 7'
  assert_equal "$(fake_requests f1)" 0 "f1 requests"
  # In a batch with a valid call: the valid one is answered, the exit is still 2.
  run --separate-stderr rpcroute_stdin '[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2}]' \
    call --profile "$P" --raw
  assert_status 2
  assert_jq '.[0].result != null and .[1].error.code == -32600'
}

@test "--raw passes a node's JSON-RPC error through with the request id" {
  start_fake f1 --mode rpc_error --code 3 --message "execution reverted"
  write_profile "$P" f1
  run --separate-stderr rpcroute_stdin '{"jsonrpc":"2.0","id":"x1","method":"eth_call","params":[{"to":"0x0000000000000000000000000000000000000001"},"latest"]}' \
    call --profile "$P" --raw
  assert_status 1
  assert_jq '.id == "x1" and .error.code == 3'
}

# ---------------------------------------------------------------------------------------------------
# Hostile input and output: options, argv, what a provider says

# Runs rpcroute ARGS (bounded: an option that is wrongly accepted may start a server) and checks it
# refused them: exit 2, one short "rpcroute: error:" line naming OPTION, nothing on stdout.
refused() { # OPTION ARGS...
  local option=$1
  shift
  run --separate-stderr timeout 10 "$RPCROUTE_BIN" "$@"
  if [[ $status != 2 || -n $output || ${#stderr_lines[@]} != 1 || ${#stderr} -gt 160 ||
    $stderr != "rpcroute: error: "*"$option"* ]]; then
    echo "expected a one-line refusal (exit 2) naming $option from: $*" >&2
    _dump_run
    return 1
  fi
}

@test "options: negative, zero and malformed counts, limits and durations are refused (exit 2, a short line)" {
  dead_port d1
  write_profile "$P" d1
  local v
  for v in 0 -1 -5 abc 1e3 0x10 99999999999999999999; do
    refused --max-attempts call -p "$P" --max-attempts "$v" eth_blockNumber
  done
  # The message names the range in plain digits (CLI::PositiveNumber printed a double's 300 digits).
  refused --max-attempts call -p "$P" --max-attempts 0 eth_blockNumber
  [[ $stderr == *"0 is not a whole number from 1 to 1000"* ]] || { _dump_run; false; }
  for v in 0 -1 1.5; do refused --requests bench -p "$P" --requests "$v"; done
  for v in 0 -3; do refused --concurrency bench -p "$P" --concurrency "$v"; done
  refused --min-healthy probe -p "$P" --min-healthy -1
  for v in -1 0 18446744073709551615 0x100; do
    refused --max-body serve -p "$P" --no-state --no-probe --listen 127.0.0.1:0 --max-body "$v"
  done
  for v in -5 0; do refused --max-batch serve -p "$P" --no-state --no-probe --listen 127.0.0.1:0 --max-batch "$v"; done
  for v in 0 0ms nan; do
    refused --read-timeout serve -p "$P" --no-state --no-probe --listen 127.0.0.1:0 --read-timeout "$v"
    refused --idle-timeout serve -p "$P" --no-state --no-probe --listen 127.0.0.1:0 --idle-timeout "$v"
  done
  refused --grace serve -p "$P" --no-state --no-probe --listen 127.0.0.1:0 --grace -1
  # Durations that are not finite, or overflow milliseconds.
  for v in nan inf 1e400 1e300s -1 0; do
    refused --timeout call -p "$P" --timeout "$v" eth_blockNumber
    refused --timeout probe -p "$P" --timeout "$v"
    refused --timeout bench -p "$P" --timeout "$v"
  done
  for v in nan inf 1e300 0; do refused --duration bench -p "$P" --duration "$v"; done
  # The bounds themselves are accepted.
  run --separate-stderr rpcroute probe -p "$P" --no-state --min-healthy 0 --timeout 1s
  assert_status 0
  run --separate-stderr rpcroute call -p "$P" --no-state --max-attempts 1000 eth_blockNumber
  assert_status 3
}

@test "call: invalid UTF-8 in the method or a parameter is refused (exit 2) and nothing is sent" {
  start_fake f1 --height 100
  write_profile "$P" f1
  run --separate-stderr rpcroute call -p "$P" eth_getBalance $'\xff\xfe' latest
  assert_status 2
  assert_equal "$stderr" "rpcroute: error: parameter 1 is not valid UTF-8"
  run --separate-stderr rpcroute call -p "$P" eth_getBalance "$DEV_ACCOUNT" $'lat\xc3'
  assert_status 2
  assert_equal "$stderr" "rpcroute: error: parameter 2 is not valid UTF-8"
  run --separate-stderr rpcroute call -p "$P" $'eth_\xed\xa0\x80x'
  assert_status 2
  assert_equal "$stderr" "rpcroute: error: the method is not valid UTF-8"
  # A parameter that parses as JSON is no way around it.
  run --separate-stderr rpcroute call -p "$P" eth_call $'{"data":"\xff"}' latest
  assert_status 2
  run --separate-stderr rpcroute_stdin $'{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["\xff","latest"]}' \
    call -p "$P" --raw
  assert_status 2
  assert_jq '.error.code == -32700'
  assert_equal "$(fake_requests f1)" 0 "requests sent upstream"
  # Valid UTF-8 beyond ASCII goes through.
  run --separate-stderr rpcroute call -p "$P" web3_clientVersion 'héllo ✓'
  assert_status 0
  assert_equal "$(fake_requests f1)" 1 "requests sent upstream"
}

# Makes fake NAME answer every call with JSON-RPC error CODE whose message is the contents of FILE
# (any size: the control body goes through a file, not the command line).
fake_error_message_file() { # NAME CODE FILE
  local url body=$BATS_TEST_TMPDIR/control.json
  url=$(node_url "$1")
  jq -Rs --argjson code "$2" '{mode: "rpc_error", code: $code, message: .}' <"$3" >"$body"
  curl -sf --max-time 5 -X POST -H 'content-type: application/json' --data-binary "@$body" "$url/_control" >/dev/null
}

@test "call: a node's 200 KB error reaches stdout whole; the stderr report of it is cut to 512 bytes" {
  start_fake f1 --height 100
  write_profile "$P" f1
  local msg=$BATS_TEST_TMPDIR/msg
  { printf 'execution reverted: '; head -c 200000 /dev/zero | tr '\0' 'x'; } >"$msg"
  fake_error_message_file f1 3 "$msg"
  run --separate-stderr rpcroute call -p "$P" eth_call '{"to":"0x0000000000000000000000000000000000000001"}' latest
  assert_status 1
  # stdout: the node's error object, every byte of the message.
  assert_jq '.code == 3 and (.message | length) == 200020'
  # stderr: one line, cut, saying how long the whole was.
  assert_stderr_lines 1
  ((${#stderr} < 700)) || { echo "stderr is ${#stderr} bytes" >&2; false; }
  # The error object: {"code":3,"message":"…"} around the 200020 bytes.
  [[ $stderr == 'rpcroute: f1 answered with an error: {"code":3,"message":"execution reverted: xxx'*"… ($((200020 + 23)) bytes)" ]] ||
    { _dump_run; false; }
  # -v and --json: the attempt's message is our report, cut the same way; the error stays whole.
  run --separate-stderr rpcroute call -p "$P" -v --json eth_call '{"to":"0x0000000000000000000000000000000000000001"}' latest
  assert_status 1
  assert_jq '(.error.message | length) == 200020'
  assert_jq '.meta.attempts[0].message | (utf8bytelength <= 600) and endswith("… (200023 bytes)")'
  ((${#stderr} < 2000)) || { echo "stderr is ${#stderr} bytes" >&2; false; }
}

@test "call: control characters in a provider's error are escaped on stderr, JSON-escaped in --json" {
  start_fake f1 --height 100
  write_profile "$P" f1
  # ESC sequences, a line break that would forge an "rpcroute:" line, BEL, CR, DEL, C1 CSI.
  fake_control f1 '{"mode":"rpc_error","code":-32603,"message":"\u001b[31mred\u001b[0m\nrpcroute: error: forged\u0007\r\u007f\u009b2J"}'
  run --separate-stderr rpcroute call -p "$P" -v eth_blockNumber
  assert_status 3
  local raw=$BATS_TEST_TMPDIR/stderr
  printf '%s' "$stderr" >"$raw"
  if LC_ALL=C grep -qP '[\x01-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]' "$raw"; then
    echo "control characters on stderr:" >&2
    od -c "$raw" | head -20 >&2
    false
  fi
  assert_equal "$(grep -c '^rpcroute:' "$raw")" 2 "lines starting rpcroute: (the -v line and the failure)"
  [[ $stderr == *'f1: rpc_error (provider_failure) after '*': -32603: \x1b[31mred\x1b[0m\nrpcroute: error: forged\x07\r\x7f\xc2\x9b2J'* ]] ||
    { _dump_run; false; }
  run --separate-stderr rpcroute call -p "$P" --json eth_blockNumber
  assert_status 3
  printf '%s' "$output" >"$raw"
  if LC_ALL=C grep -qP '[\x01-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]' "$raw"; then
    echo "control characters in --json" >&2
    false
  fi
  assert_jq '.meta.attempts[0].message | startswith("-32603: \\x1b[31mred")'
}

# ---------------------------------------------------------------------------------------------------
# HTTPS providers (issue 17): the fake upstream over TLS and nginx as an HTTP/2 or HTTP/1.1 front,
# trusted through tls.ca_file with the test PKI made in setup_file (tls_helpers.bash), never the
# system CA store.

# Writes $P with the providers given on stdin (YAML list items, 6 spaces in), strategy priority.
https_profile() {
  {
    printf 'name: e2e\nchains:\n  local:\n    chain_id: 31337\n    block_time_ms: 1000\n    providers:\n'
    cat
    printf 'routing:\n  default_strategy: priority\n'
  } >"$P"
}

@test "https: a fake on https://localhost answers through tls.ca_file (also a relative path); without it, unknown CA" {
  start_tls_fake t1 --height 100
  https_profile <<EOF
      - { id: t1, url: "$(node_url t1)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "t1"'
  assert_jq '.meta.attempts | length == 1 and .[0].outcome == "success"'
  assert_equal "$stderr" "" "stderr"
  assert_json "$(fake_stats t1)" '.requests == 1 and .tls.handshakes >= 1'
  # A relative ca_file is the profile folder's, whatever the working directory.
  mkdir -p "$BATS_TEST_TMPDIR/conf/certs"
  cp "$TEST_PKI/ca.pem" "$BATS_TEST_TMPDIR/conf/certs/test-ca.pem"
  P=$BATS_TEST_TMPDIR/conf/profile.yaml https_profile <<EOF
      - { id: t1, url: "$(node_url t1)", tls: { ca_file: certs/test-ca.pem } }
EOF
  cd /
  run --separate-stderr rpcroute call --profile "$BATS_TEST_TMPDIR/conf/profile.yaml" eth_blockNumber
  assert_status 0
  assert_equal "$output" '"0x64"' "result"
  # Without tls: the system store, which does not know the test CA.
  https_profile <<EOF
      - { id: t1, url: "$(node_url t1)" }
EOF
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 3
  assert_jq '.meta.attempts[0] | .outcome == "tls_failed" and .class == "provider_failure"'
  assert_jq '.meta.attempts[0].message | test("TLS: unknown certificate authority")'
}

# Starts the plain fake "up" and an nginx front of KIND (h2, h1) before it; calls through the front
# with --json, the provider asking for HTTP version HTTP ("1.1", "2"; empty: the default). Leaves the
# front's access log in $FRONT_LOG.
call_through_front() { # KIND [HTTP]
  start_fake up --height 100
  start_h2_front "$BATS_TEST_TMPDIR/front.port" "$(node_port up)" "$1"
  FRONT_LOG=$(front_log "$BATS_TEST_TMPDIR/front.port")
  local http=""
  [[ -z ${2:-} ]] || http=", http: \"$2\""
  https_profile <<EOF
      - { id: front, url: "https://localhost:$(cat "$BATS_TEST_TMPDIR/front.port")/", tls: { ca_file: "$TEST_PKI/ca.pem" }$http }
EOF
  run --separate-stderr rpcroute call --profile "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '.result == "0xde0b6b3a7640000" and .meta.provider == "front"'
  assert_jq '.meta.attempts | length == 1 and .[0].outcome == "success"'
  assert_json "$(fake_stats up)" '.methods.eth_getBalance == 1'
}

@test "https: through an nginx HTTP/2 front with http: \"2\" the call answers, and nginx served it as HTTP/2.0" {
  call_through_front h2 2
  grep -Eq '^HTTP/2\.0 200 [0-9]+ [0-9]+ POST /$' "$FRONT_LOG" || { cat "$FRONT_LOG" >&2; false; }
  ! grep -E ' POST ' "$FRONT_LOG" | grep -v '^HTTP/2\.0 ' || { cat "$FRONT_LOG" >&2; false; }
}

@test "https: an HTTP/2 front is asked for HTTP/1.1 by default" {
  call_through_front h2
  grep -Eq '^HTTP/1\.1 200 [0-9]+ [0-9]+ POST /$' "$FRONT_LOG" || { cat "$FRONT_LOG" >&2; false; }
  ! grep -E ' POST ' "$FRONT_LOG" | grep -v '^HTTP/1\.1 ' || { cat "$FRONT_LOG" >&2; false; }
}

@test "https: through an nginx HTTP/1.1-only front the call answers over HTTP/1.1" {
  call_through_front h1
  grep -Eq '^HTTP/1\.1 200 [0-9]+ [0-9]+ POST /$' "$FRONT_LOG" || { cat "$FRONT_LOG" >&2; false; }
  ! grep -E ' POST ' "$FRONT_LOG" | grep -v '^HTTP/1\.1 ' || { cat "$FRONT_LOG" >&2; false; }
}

@test "https: providers on host names are resolved by the native client; an unknown name is a dns failure" {
  # LOCALHOST goes through the system's resolver (/etc/hosts: names match without regard to case),
  # not the shortcut for the literal localhost; so does the certificate's name.
  start_tls_fake t1 --height 100
  start_fake p1 --height 101
  https_profile <<EOF
      - { id: gone, url: "https://no-such-host.invalid:$(node_port t1)/" }
      - { id: t1, url: "https://LOCALHOST:$(node_port t1)/", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "t1"'
  # Where no resolver answers at all, the lookup is cut by the attempt's deadline instead.
  assert_jq '.meta.attempts[0] | .provider == "gone" and .class == "provider_failure"'
  assert_jq '.meta.attempts[0] | (.outcome == "dns_failed" and (.message | test("Could not resolve host: no-such-host.invalid"))) or .outcome == "timeout"'
  https_profile <<EOF
      - { id: p1, url: "http://LOCALHOST:$(node_port p1)/" }
EOF
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x65" and .meta.provider == "p1"'
  assert_json "$(fake_stats p1)" '.requests == 1'
}

@test "https: expired, not yet valid, unknown-CA and wrong-host certificates: tls_failed naming the cause, the next provider answers, no secret shown" {
  RPCROUTE_E2E_SECRET="sk_$(openssl rand -hex 12)"
  export RPCROUTE_E2E_SECRET
  declare -A causes=(
    [expired]='certificate expired'
    [not_yet_valid]='certificate not yet valid'
    [unknown_ca]='unknown certificate authority'
    [wrong_host]='host name mismatch'
  )
  start_fake good --height 100
  local cert port bad
  for cert in expired not_yet_valid unknown_ca wrong_host; do
    start_tls_fake "bad_$cert" "$cert" --height 100
    port=$(node_port "bad_$cert")
    # The secret in the URL's path (${VAR}) and as the api_key of {api_key}.
    bad="      - id: keyed
        url: https://localhost:$port/v3/\${RPCROUTE_E2E_SECRET}
        tls: { ca_file: \"$TEST_PKI/ca.pem\" }
      - id: apikeyed
        url: https://localhost:$port/v2/{api_key}
        api_key: \${RPCROUTE_E2E_SECRET}
        tls: { ca_file: \"$TEST_PKI/ca.pem\" }"
    https_profile <<EOF
$bad
      - { id: good, url: "$(node_url good)" }
EOF
    rm -f "$RPCROUTE_STATE"
    run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
    assert_status 0
    assert_jq '.result == "0x64" and .meta.provider == "good"'
    assert_jq '[.meta.attempts[] | .provider + ":" + .outcome] == ["keyed:tls_failed", "apikeyed:tls_failed", "good:success"]'
    assert_jq '[.meta.attempts[0,1].class] == ["provider_failure", "provider_failure"]'
    assert_jq '[.meta.attempts[0,1].message | contains($cause)] | all' --arg cause "TLS: ${causes[$cert]}"
    refute_output_contains "$RPCROUTE_E2E_SECRET"
    # curl's TLS (http: "2" providers, proxies) names the same cause.
    RPCROUTE_NATIVE_TLS=0 run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
    assert_jq '[.meta.attempts[] | .provider + ":" + .outcome] == ["keyed:tls_failed", "apikeyed:tls_failed", "good:success"]'
    assert_jq '[.meta.attempts[0,1].message | contains($cause)] | all' --arg cause "TLS: ${causes[$cert]}"
    refute_output_contains "$RPCROUTE_E2E_SECRET"
    # Nothing answers: the stderr report names the cause for each provider, without the secret.
    https_profile <<<"$bad"
    run --separate-stderr rpcroute call --profile "$P" -v eth_blockNumber
    assert_status 3
    assert_stderr_matches "^ +keyed: tls_failed .*TLS: ${causes[$cert]}"
    assert_stderr_matches "^ +apikeyed: tls_failed .*TLS: ${causes[$cert]}"
    refute_output_contains "$RPCROUTE_E2E_SECRET"
    run --separate-stderr rpcroute state show --json
    refute_output_contains "$RPCROUTE_E2E_SECRET"
    ! grep -qF "$RPCROUTE_E2E_SECRET" "$RPCROUTE_STATE"* || { echo "secret in the state file" >&2; false; }
    # The failed handshakes reached the fake, which served none of them.
    assert_json "$(fake_stats "bad_$cert")" '.requests == 0 and .tls.failures >= 6'
  done
}

@test "https: tls.insecure answers from unknown-CA, wrong-host and expired providers, with the warning on every run" {
  local warning="rpcroute: warning: provider 'dev' has tls.insecure: its certificate is not checked; anyone on the path can read and change its answers"
  local cert
  for cert in unknown_ca wrong_host expired; do
    start_tls_fake "t_$cert" "$cert" --height 100
    https_profile <<EOF
      - { id: dev, url: "$(node_url "t_$cert")", tls: { insecure: true } }
EOF
    run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
    assert_status 0
    assert_equal "$output" '"0x64"' "result ($cert)"
    assert_equal "$stderr" "$warning" "stderr ($cert)"
  done
  # Every command that loads the profile warns, not only call.
  run --separate-stderr rpcroute probe --profile "$P"
  [[ $stderr == *"$warning"* ]] || { _dump_run; false; }
}

@test "https: mTLS: without a client certificate tls_failed; with cert_file and key_file (or one file) it answers" {
  start_tls_fake m1 --height 100 --tls-client-ca "$TEST_PKI/client_ca.pem"
  local ca="ca_file: \"$TEST_PKI/ca.pem\""
  https_profile <<EOF
      - { id: m1, url: "$(node_url m1)", tls: { $ca } }
EOF
  local client
  for client in native curl; do
    RPCROUTE_NATIVE_TLS=$([[ $client == native ]] && echo 1 || echo 0) run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
    assert_status 3
    assert_jq '.meta.attempts[0] | .outcome == "tls_failed" and (.message | startswith("TLS: client certificate rejected"))'
  done
  # A certificate from a CA the fake does not accept.
  https_profile <<EOF
      - { id: m1, url: "$(node_url m1)", tls: { $ca, cert_file: "$TEST_PKI/client_unknown.pem", key_file: "$TEST_PKI/client.key" } }
EOF
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 3
  assert_jq '.meta.attempts[0].outcome == "tls_failed"'
  assert_json "$(fake_stats m1)" '.requests == 0'
  https_profile <<EOF
      - { id: m1, url: "$(node_url m1)", tls: { $ca, cert_file: "$TEST_PKI/client.pem", key_file: "$TEST_PKI/client.key" } }
EOF
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.attempts[0].outcome == "success"'
  # cert_file may hold the key too.
  cat "$TEST_PKI/client.pem" "$TEST_PKI/client.key" >"$BATS_TEST_TMPDIR/client-both.pem"
  https_profile <<EOF
      - { id: m1, url: "$(node_url m1)", tls: { $ca, cert_file: "$BATS_TEST_TMPDIR/client-both.pem" } }
EOF
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 0
  assert_equal "$output" '"0x64"' "result"
  assert_json "$(fake_stats m1)" '.requests == 2'
}

@test "https: a TLS handshake that never completes times out within timeout_ms and the next provider answers" {
  start_tls_fake hs --tls-handshake hang
  start_tls_fake t2 --height 100
  https_profile <<EOF
      - { id: hs, url: "$(node_url hs)", timeout_ms: 800, tls: { ca_file: "$TEST_PKI/ca.pem" } }
      - { id: t2, url: "$(node_url t2)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  local t0 elapsed
  t0=$(now_ms)
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  elapsed=$(($(now_ms) - t0))
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "t2"'
  assert_jq '.meta.attempts[0] | .provider == "hs" and .outcome == "timeout" and .class == "provider_failure"'
  assert_jq '.meta.attempts[0].latency_ms >= 700 and .meta.attempts[0].latency_ms < 2500'
  ((elapsed < 5000)) || { echo "call took ${elapsed} ms" >&2; false; }
}

@test "https: a missing ca_file, cert_file or key_file, tls on an http:// URL, insecure with ca_file: profile errors (exit 2)" {
  local file
  for file in ca_file cert_file key_file; do
    https_profile <<EOF
      - { id: t1, url: "https://localhost:1/", tls: { $file: "$BATS_TEST_TMPDIR/no-such-$file.pem" } }
EOF
    run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
    assert_status 2
    assert_stderr_matches "no-such-$file\\.pem"
    assert_equal "$output" "" "stdout ($file)"
  done
  https_profile <<EOF
      - { id: t1, url: "http://127.0.0.1:1/", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 2
  assert_stderr_matches 'tls'
  https_profile <<EOF
      - { id: t1, url: "https://localhost:1/", tls: { insecure: true, ca_file: "$TEST_PKI/ca.pem" } }
EOF
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 2
  assert_stderr_matches 'insecure'
}

@test "https: every fault mode of the fake is classified over TLS as over plain http (native TLS and curl)" {
  # MODE=behaviour; timeouts of 600 ms cut the slow ones, a 1 MiB cap the endless ones.
  declare -A rows=(
    [status]='{"mode":"status","status":503}'
    [rpc_error]='{"mode":"rpc_error","code":-32603}'
    [malformed]='{"mode":"malformed"}'
    [truncated]='{"mode":"truncated"}'
    [html]='{"mode":"html"}'
    [wrong_id]='{"mode":"wrong_id"}'
    [close]='{"mode":"close"}'
    [reset]='{"mode":"reset"}'
    [hang]='{"mode":"hang"}'
    [drip]='{"mode":"drip","drip_ms":200}'
    [overclaim]='{"mode":"overclaim"}'
    [endless]='{"mode":"endless"}'
    [endless_length]='{"mode":"endless_length"}'
    [gzip_bomb]='{"mode":"gzip_bomb","gzip_bytes":1048576}'
    [huge]='{"mode":"huge","huge_bytes":300000}'
    [extra]='{"mode":"extra","extra_ms":0}'
    [ok]='{"mode":"ok"}'
  )
  start_fake plain --height 100
  start_tls_fake tls --height 100
  local mode paths="" sep="" plain_outcome tls_outcome curl_outcome
  for mode in "${!rows[@]}"; do
    paths+="$sep\"/$mode\":${rows[$mode]}"
    sep=,
  done
  fake_control plain "{\"paths\":{$paths}}"
  fake_control tls "{\"paths\":{$paths}}"
  for mode in "${!rows[@]}"; do
    https_profile <<EOF
      - { id: p, url: "$(node_url plain)/$mode", timeout_ms: 600, limits: { max_response_mb: 1 } }
      - { id: t, url: "$(node_url tls)/$mode", timeout_ms: 600, limits: { max_response_mb: 1 }, tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
    RPCROUTE_HTTP_CLIENT=curl run --separate-stderr rpcroute call --profile "$P" --provider p --json eth_getBalance "$DEV_ACCOUNT" latest
    plain_outcome=$(jq -r '.meta.attempts[0].outcome' <<<"$output")
    run --separate-stderr rpcroute call --profile "$P" --provider t --json eth_getBalance "$DEV_ACCOUNT" latest
    tls_outcome=$(jq -r '.meta.attempts[0].outcome' <<<"$output")
    assert_equal "$tls_outcome" "$plain_outcome" "outcome of mode $mode over native TLS (over plain http: $plain_outcome)" ||
      { _dump_run; false; }
    # The same over curl's TLS (what an http: "2" provider or a proxy uses).
    RPCROUTE_NATIVE_TLS=0 run --separate-stderr rpcroute call --profile "$P" --provider t --json eth_getBalance "$DEV_ACCOUNT" latest
    curl_outcome=$(jq -r '.meta.attempts[0].outcome' <<<"$output")
    assert_equal "$curl_outcome" "$plain_outcome" "outcome of mode $mode over curl's TLS (over plain http: $plain_outcome)" ||
      { _dump_run; false; }
    if [[ $mode == ok || $mode == huge || $mode == extra ]]; then
      assert_equal "$tls_outcome" success "mode $mode"
    fi
  done
  # Every mode reached the TLS fake as a request (none failed in the handshake).
  assert_json "$(fake_stats tls)" '.requests == $n and .tls.failures == 0' --argjson n "$((2 * ${#rows[@]}))"
}
