#!/usr/bin/env bats
# Issue 19's consistency items end to end: a null lookup from a provider behind is asked again of
# one at the height (a receipt is never null once another provider has it mined); a split
# eth_getLogs has one deadline as a whole; `rewrite_latest` sends `latest` at the chain's height.

# jq programs are single-quoted on purpose; $stderr comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers
load tls_helpers

setup() {
  e2e_setup
  require_bins RPCROUTE_BIN FAKE_BIN ANVIL
}

teardown() {
  stop_all
}

# A JSON-RPC call straight to node NAME (no rpcroute); prints the whole answer.
node_rpc() { # NAME METHOD PARAMS_JSON
  local url
  url=$(node_url "$1") || return 1
  curl -sf --max-time 60 -X POST -H 'content-type: application/json' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}" "$url"
}

# The profile's chain gets KEY: VALUE (a chain-level setting write_profile has no option for).
chain_setting() { # FILE LINE
  sed -i "s/^    block_time_ms: 1000$/    block_time_ms: 1000\n    $2/" "$1"
}

# Two anvils: `low` at block 48, `high` at 49 with a transfer mined in its last block (its hash
# in $HASH). Both within max_lag_blocks, so neither is excluded for lag.
two_nodes_one_ahead() {
  start_anvil low
  start_anvil high
  node_rpc low anvil_mine '["0x30"]' | grep -q '"result"'
  node_rpc high anvil_mine '["0x30"]' | grep -q '"result"'
  HASH=$(node_rpc high eth_sendTransaction \
    "[{\"from\":\"$DEV_ACCOUNT\",\"to\":\"0x000000000000000000000000000000000000dEaD\",\"value\":\"0x1\"}]" |
    jq -r '.result')
  [[ $HASH == 0x* ]]
}

@test "a receipt polled through the sidecar is never null once another provider has it mined" {
  two_nodes_one_ahead
  local hash=$HASH
  assert_equal "$(node_rpc low eth_getTransactionReceipt "[\"$hash\"]" | jq -c '.result')" "null" \
    "the node behind has not seen it"
  write_profile "$P" --strategy priority low high
  # probe records both heights (48 and 49) in the state file the sidecar loads.
  run --separate-stderr rpcroute probe -p "$P"
  assert_status 0
  start_serve sc -p "$P"
  local url hdrs=$BATS_TEST_TMPDIR/headers body
  url=$(node_url sc)/rpc/local
  local ask='{"jsonrpc":"2.0","id":9,"method":"eth_getTransactionReceipt","params":["'"$hash"'"]}'
  # Each poll routed (not the cache's copy of the first answer). The first asks low, which says
  # null, then high; after that the hash sticks to high (read-your-writes), so low is not asked.
  local round
  for round in 1 2 3 4 5; do
    body=$(curl -s --max-time 30 -D "$hdrs" -X POST -H 'content-type: application/json' \
      -H 'Cache-Control: no-cache' --data "$ask" "$url")
    assert_json "$body" '.id == 9 and .result.transactionHash == $h and .result.blockNumber == "0x31"' \
      --arg h "$hash"
    grep -qi '^x-rpcroute-provider: high' "$hdrs"
    ((round > 1)) || grep -qi '^x-rpcroute-empty-retries: 1' "$hdrs" || {
      cat "$hdrs" >&2
      false
    }
  done
  # The one-shot CLI does the same; --json meta counts the retry, the null was a success for low.
  run --separate-stderr rpcroute call -p "$P" --json eth_getTransactionReceipt "$hash"
  assert_status 0
  assert_jq '.result.transactionHash == $h and .meta.provider == "high" and .meta.empty_retries == 1' \
    --arg h "$hash"
  assert_jq '.meta.attempts | length == 2 and .[0].provider == "low" and .[0].class == "success"'
  # A hash nobody has: null, once a provider at the height said so too.
  local nobody=0x1111111111111111111111111111111111111111111111111111111111111111
  run --separate-stderr rpcroute call -p "$P" --json eth_getTransactionReceipt "$nobody"
  assert_status 0
  assert_jq '.result == null and .meta.provider == "high" and .meta.empty_retries == 1'
  # The block by number: above low's height, so high answers.
  run --separate-stderr rpcroute call -p "$P" --json eth_getBlockByNumber 0x31 false
  assert_status 0
  assert_jq '.result.number == "0x31" and .meta.provider == "high"'
  # Turned off for receipts: low's null is the answer.
  write_profile "$P" --strategy priority low high \
    --extra '  method_overrides:
    eth_getTransactionReceipt: { retry_empty: false }'
  run --separate-stderr rpcroute call -p "$P" --json eth_getTransactionReceipt "$hash"
  assert_status 0
  assert_jq '.result == null and .meta.provider == "low" and (.meta | has("empty_retries") | not)'
}

@test "a split eth_getLogs finishes within the request's one deadline, else one clear error" {
  start_fake f1 --height 30000
  write_profile "$P" "f1,limits={max_block_range: 2000}"
  local filter='{"fromBlock":"0x0","toBlock":"0x4e1f"}' # 20 000 blocks: ten parts of 2000
  # Every answer takes 800 ms: the head, then ten parts four at a time (about 3.2 s in all), while
  # each part alone fits in the 2 s deadline.
  fake_control f1 '{"mode":"delay","delay_ms":800}'
  run --separate-stderr rpcroute call -p "$P" --timeout 2s eth_getLogs "$filter"
  [[ $status -ne 0 ]]
  assert_equal "$output" "" "no partial answer"
  [[ $stderr == *"the split range did not finish within the deadline of 2000 ms"* ]] || {
    echo "$stderr" >&2
    false
  }
  # Time enough: the merged answer.
  run --separate-stderr rpcroute call -p "$P" --timeout 60s eth_getLogs "$filter"
  assert_status 0
  assert_equal "$output" "[]"
}

@test "rewrite_latest sends latest at the chain's height; off, the first provider answers" {
  start_anvil low
  start_anvil high
  node_rpc low anvil_mine '["0x30"]' | grep -q '"result"'
  node_rpc high anvil_mine '["0x32"]' | grep -q '"result"'
  write_profile "$P" --strategy priority low high
  run --separate-stderr rpcroute probe -p "$P"
  assert_status 0
  run --separate-stderr rpcroute call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '.meta.provider == "low"'
  chain_setting "$P" "rewrite_latest: true"
  grep -q '^    rewrite_latest: true$' "$P"
  for _ in 1 2 3; do
    # Sent as block 50: low is skipped (or, estimated there, says the block is out of range) and
    # high answers.
    run --separate-stderr rpcroute call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
    assert_status 0
    assert_jq '.result == $b and .meta.provider == "high"' --arg b "$DEV_BALANCE"
    run --separate-stderr rpcroute call -p "$P" --json eth_getBlockByNumber latest false
    assert_status 0
    assert_jq '.result.number == "0x32" and .meta.provider == "high"'
  done
  # Through the sidecar too.
  start_serve sc -p "$P"
  local hdrs=$BATS_TEST_TMPDIR/headers body
  body=$(curl -s --max-time 30 -D "$hdrs" -X POST -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["latest",false]}' \
    "$(node_url sc)/rpc/local")
  assert_json "$body" '.result.number == "0x32"'
  grep -qi '^x-rpcroute-provider: high' "$hdrs"
}

# Two TLS fakes, `tlow` at block 100 (priority 1) and `thigh` at 102, in profile $P (blocks every
# minute, so the estimates stay at the heights probe records); probe records both heights.
two_tls_fakes_one_ahead() {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  start_tls_fake tlow --height 100
  start_tls_fake thigh --height 102
  cat >"$P" <<EOF
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    providers:
      - { id: tlow, url: "$(node_url tlow)", priority: 1, tls: { ca_file: "$TEST_PKI/ca.pem" } }
      - { id: thigh, url: "$(node_url thigh)", priority: 2, tls: { ca_file: "$TEST_PKI/ca.pem" } }
routing:
  default_strategy: priority
EOF
  run --separate-stderr rpcroute probe -p "$P"
  assert_status 0
}

@test "over HTTPS: a null receipt from the provider behind is asked again of the one at the height" {
  # The fake's receipts: a hash's last four hex digits are its block (0x66 = 102 here).
  local hash
  hash=0x$(printf '%060x' 7)0066
  two_tls_fakes_one_ahead
  # tlow, first by priority, is behind block 102 and says null; thigh has the receipt.
  run --separate-stderr rpcroute call -p "$P" --json eth_getTransactionReceipt "$hash"
  assert_status 0
  assert_jq '.result.transactionHash == $h and .result.blockNumber == "0x66" and
             .meta.provider == "thigh" and .meta.empty_retries == 1 and
             [.meta.attempts[].provider] == ["tlow", "thigh"]' --arg h "$hash"
  # A receipt neither has (block 0x70): thigh, at the height, says null too: a genuine null.
  hash=0x$(printf '%060x' 7)0070
  run --separate-stderr rpcroute call -p "$P" --json eth_getTransactionReceipt "$hash"
  assert_status 0
  assert_jq '.result == null and .meta.provider == "thigh" and .meta.empty_retries == 1'
}

@test "over HTTPS: rewrite_latest sends latest at the chain's height" {
  two_tls_fakes_one_ahead
  # Off: latest goes to tlow, first by priority.
  run --separate-stderr rpcroute call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '.meta.provider == "tlow"'
  # On: latest is sent as block 102, above tlow's height, so thigh serves it.
  sed -i 's/^    block_time_ms: 60000$/    block_time_ms: 60000\n    rewrite_latest: true/' "$P"
  grep -q '^    rewrite_latest: true$' "$P"
  run --separate-stderr rpcroute call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '.meta.provider == "thigh" and .meta.block == 102'
}

# The high-water mark of chain local in sidecar NAME's /metrics (empty when none).
mark_of() { # NAME
  curl -sf --max-time 5 "$(node_url "$1")/metrics" |
    awk '/^rpcroute_high_water_mark\{.*chain="local"/ { print $NF }'
}

# The height sidecar NAME last saw PROVIDER at (its /metrics gauge).
height_of() { # NAME PROVIDER
  curl -sf --max-time 5 "$(node_url "$1")/metrics" |
    awk -v p="provider=\"$2\"" '/^rpcroute_provider_height\{/ && index($0, p) { print $NF }'
}

# Waits up to LIMIT seconds (default 10) until the mark of sidecar NAME is VALUE.
wait_mark() { # NAME VALUE [LIMIT_S]
  local deadline=$((SECONDS + ${3:-10})) m=""
  while ((SECONDS < deadline)); do
    m=$(mark_of "$1")
    [[ $m == "$2" ]] && return 0
    nap 0.1
  done
  echo "sidecar $1: mark '$m', not '$2'" >&2
  return 1
}

@test "the sidecar's head poll raises the mark with no client request; a lone claim never does (one provider over HTTPS)" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  start_fake a --height 100
  start_fake b --height 100
  start_tls_fake t --height 100
  cat >"$P" <<EOF
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "$(node_url a)" }
      - { id: b, url: "$(node_url b)" }
      - { id: t, url: "$(node_url t)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  start_serve sc --profile "$P" --no-state
  # No client asks anything: the polls (one a second) alone raise the mark, and move it on.
  wait_mark sc 100
  local n
  for n in a b t; do fake_control "$n" '{"height":105}'; done
  wait_mark sc 105
  # The HTTPS provider alone claims 150, the two others 105: polled, seen, not believed.
  fake_control t '{"height":150}'
  local deadline=$((SECONDS + 10))
  until [[ $(height_of sc t) == 150 ]]; do
    ((SECONDS < deadline)) || { echo "t was not polled at 150" >&2; return 1; }
    nap 0.1
  done
  nap 2.5 # more polls of every provider
  [[ $(mark_of sc) == 105 ]] || { echo "mark $(mark_of sc) after a lone claim of 150" >&2; return 1; }
  # Confirmed by a second provider, the height is the chain's.
  fake_control a '{"height":150}'
  wait_mark sc 150
  # And a client asking now never gets less.
  local out
  out=$(curl -sf --max-time 5 -X POST -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' "$(node_url sc)/rpc/local")
  (($(jq -r .result <<<"$out") >= 150))
}
