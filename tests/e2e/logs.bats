#!/usr/bin/env bats
# eth_getLogs splitting end to end (issue 19): a range wider than the providers take comes back
# exactly as the node answers it directly; a limit a provider states in its error is kept in the
# state file, so the next `call` splits up front, and `rank` shows it.

# jq programs are single-quoted on purpose; $stderr comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers

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

# A contract whose every call logs LOG1 with the block number as its topic:
# runtime NUMBER PUSH1 0 PUSH1 0 LOG1 STOP, behind an init that returns it.
LOGGER_INIT=0x6007600c60003960076000f34360006000a100
LOGGER=0x5FbDB2315678afecb367f032d93F642f64180aa3 # DEV_ACCOUNT's first deployment

# Sends a transaction from the unlocked dev account (anvil mines it at once).
dev_send() { # NAME TX_FIELDS_JSON
  node_rpc "$1" eth_sendTransaction "[{\"from\":\"$DEV_ACCOUNT\"$2}]" | grep -q '"result"'
}

@test "eth_getLogs over 20000 blocks against providers limited to 2000 returns the direct answer" {
  start_anvil n1
  dev_send n1 ",\"data\":\"$LOGGER_INIT\""
  # Logs spread over ~200 blocks: two calls, then 14 empty blocks, twelve times. Mining 20 000
  # anvil blocks takes minutes on a loaded machine; anvil answers [] past its head, so a 20 000
  # block range still gets the node's exact answer, and the 20-block limit below makes the logs
  # themselves span many parts.
  local _round
  for _round in $(seq 12); do
    dev_send n1 ",\"to\":\"$LOGGER\""
    dev_send n1 ",\"to\":\"$LOGGER\",\"value\":\"0x1\""
    node_rpc n1 anvil_mine '["0xe"]' | grep -q '"result"'
  done
  # Two providers on the one node, both limited to 2000 blocks: neither takes the range whole; it
  # stops at the head (~194), so one part of it goes out.
  write_profile "$P" --strategy priority "n1,limits={max_block_range: 2000}" \
    "n2,url=$(node_url n1),limits={max_block_range: 2000}"
  local filter='{"fromBlock":"0x0","toBlock":"0x4e1f","address":"'"$LOGGER"'"}'
  local direct
  direct=$(node_rpc n1 eth_getLogs "[$filter]" | jq -c '.result')
  assert_equal "$(jq 'length' <<<"$direct")" "24" "logs in the direct answer"
  run --separate-stderr rpcroute call -p "$P" --json eth_getLogs "$filter"
  assert_status 0
  assert_equal "$(jq -c '.result' <<<"$output")" "$direct" "merged answer"
  assert_jq '(.meta.attempts | length) == 1 and .meta.provider == "n1"'

  # Limited to 20 blocks, over `latest`: the logs themselves come from ten parts and more.
  write_profile "$P" --strategy priority "n1,limits={max_block_range: 20}" \
    "n2,url=$(node_url n1),limits={max_block_range: 20}"
  filter='{"fromBlock":"0x0","toBlock":"latest","address":"'"$LOGGER"'"}'
  direct=$(node_rpc n1 eth_getLogs "[$filter]" | jq -c '.result')
  run --separate-stderr rpcroute call -p "$P" --json eth_getLogs "$filter"
  assert_status 0
  assert_equal "$(jq -c '.result' <<<"$output")" "$direct" "merged answer over 20-block parts"
  assert_jq '(.meta.attempts | length) >= 10'
  # The same through the sidecar: its body is the node's answer too, under the client's id.
  start_serve sc -p "$P"
  local body
  body=$(curl -sf --max-time 60 -X POST -H 'content-type: application/json' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"eth_getLogs\",\"params\":[$filter]}" \
    "$(node_url sc)/rpc/local")
  assert_equal "$(jq -c '.result' <<<"$body")" "$direct" "sidecar answer"
  assert_equal "$(jq -c '.id' <<<"$body")" "5" "id"
}

@test "a provider that states its range limit in an error makes the next call split up front" {
  start_fake f1 --height 30000
  write_profile "$P" f1
  local filter='{"fromBlock":"0x0","toBlock":"0x4e1f"}' # 20 000 blocks
  # The first eth_getLogs is refused with Alchemy's wording; after that the fake answers [].
  fake_control f1 '{"queue":[{"mode":"rpc_error","code":-32602,"message":"Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range and no limit on the response size."}]}'
  local before after
  before=$(fake_requests f1)
  run --separate-stderr rpcroute call -p "$P" eth_getLogs "$filter"
  assert_status 0
  assert_equal "$output" "[]"
  after=$(fake_requests f1)
  assert_equal "$((after - before))" "12" "requests: the refused one, the head, ten parts of 2000"
  # Learned, in the state file.
  run --separate-stderr rpcroute state show --json
  assert_status 0
  assert_jq '[.. | objects | select(has("log_limit")) | .log_limit.blocks] == [2000]'
  run --separate-stderr rpcroute rank -p "$P" -m eth_getLogs "$filter"
  assert_status 0
  [[ $output == *"learned eth_getLogs range limits:"*"f1: 2000 blocks"* ]]
  run --separate-stderr rpcroute rank -p "$P" -m eth_getLogs --json "$filter"
  assert_status 0
  assert_jq '[.learned_limits[] | [.provider, .eth_getLogs_blocks, (.t_ms > 0)]] == [["f1", 2000, true]]'
  # The next call splits up front: ten requests, none refused.
  before=$(fake_requests f1)
  run --separate-stderr rpcroute call -p "$P" eth_getLogs "$filter"
  assert_status 0
  assert_equal "$output" "[]"
  after=$(fake_requests f1)
  assert_equal "$((after - before))" "11" "requests: the head, then ten parts, split up front"
}

@test "after --min-block N no answer comes from a provider below N" {
  start_anvil low
  start_anvil high
  node_rpc low anvil_mine '["0x30"]' | grep -q '"result"'
  node_rpc high anvil_mine '["0x32"]' | grep -q '"result"'
  write_profile "$P" --strategy priority low high
  # probe records both heights (48 and 50: within max_lag_blocks 2, so neither lags) in the state
  # file.
  run --separate-stderr rpcroute probe -p "$P"
  assert_status 0
  # Without --min-block the first provider answers; with it, only the one at or past the block.
  run --separate-stderr rpcroute call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '.meta.provider == "low"'
  for _ in 1 2 3 4 5; do
    run --separate-stderr rpcroute call -p "$P" --json --min-block 49 eth_getBalance "$DEV_ACCOUNT" latest
    assert_status 0
    assert_jq '.meta.provider == "high"'
    assert_jq '.meta.excluded | length == 1 and .[0].provider == "low" and .[0].kind == "height"
               and (.[0].reason | test("minimum block 49"))'
  done
  run --separate-stderr rpcroute call -p "$P" --json --min-block 0x32 eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '.meta.provider == "high"'
  # The sidecar: X-Rpcroute-Min-Block does the same, and X-Rpcroute-Block names the height.
  start_serve sc -p "$P"
  local url hdrs=$BATS_TEST_TMPDIR/headers
  url=$(node_url sc)/rpc/local
  local body='{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["'"$DEV_ACCOUNT"'","latest"]}'
  for _ in 1 2 3 4 5; do
    curl -s --max-time 30 -D "$hdrs" -o /dev/null -X POST -H 'content-type: application/json' \
      -H 'X-Rpcroute-Min-Block: 49' --data "$body" "$url"
    grep -qi '^x-rpcroute-provider: high' "$hdrs" || {
      cat "$hdrs" >&2
      false
    }
    grep -qi '^x-rpcroute-block: 50' "$hdrs"
  done
  curl -s --max-time 30 -D "$hdrs" -o /dev/null -X POST -H 'content-type: application/json' \
    --data "$body" "$url"
  grep -qi '^x-rpcroute-provider: low' "$hdrs"
  grep -qi '^x-rpcroute-block: 48' "$hdrs"
  local code
  code=$(curl -s --max-time 30 -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/json' \
    -H 'X-Rpcroute-Min-Block: soon' --data "$body" "$url")
  assert_equal "$code" "400" "a bad X-Rpcroute-Min-Block"
  # Past every provider: a clear error, nobody asked.
  run --separate-stderr rpcroute call -p "$P" --min-block 1000 eth_getBalance "$DEV_ACCOUNT" latest
  [[ $status -ne 0 ]]
  [[ $stderr == *"minimum block 1000"* ]]
  run --separate-stderr rpcroute call -p "$P" --min-block nope eth_blockNumber
  [[ $status -ne 0 ]]
  [[ $stderr == *"bad --min-block"* ]]
}
