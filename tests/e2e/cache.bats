#!/usr/bin/env bats
# Coalescing and the finality-aware answer cache of `rpcroute serve` (issue 19): 1,000 identical
# concurrent reads make one upstream request; X-Rpcroute-Cache says HIT, MISS or BYPASS; a block at
# or below finalized is kept, latest and unfinalized blocks never; safe and finalized heights are
# polled and shown in /status; /metrics counts; the same over HTTPS. Finality follows the head rule:
# a provider of three lying about its head and finalized block makes nothing final, over HTTP and
# HTTPS, and an absurd mark left in a state file is dropped. The fake upstream counts what reaches it
# (/_stats); anvil is the real node, its finality checked, not assumed.

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers
load sidecar_helpers
load tls_helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN ANVIL CAST
}

setup() {
  e2e_setup
  SC_HDRS=$BATS_TEST_TMPDIR/headers
}

teardown() {
  stop_all
}

# The X-Rpcroute-Cache value of the last sidecar_post.
cache_header() {
  tr -d '\r' <"$SC_HDRS" | awk -F': ' 'tolower($1) == "x-rpcroute-cache" { print $2 }'
}

# Calls of METHOD on the fake NAME so far.
fake_calls() { # NAME METHOD
  fake_stat "$1" '.methods[$m] // 0' --arg m "$2"
}

# Waits (up to 20 s) until /status shows a finalized block for the chain; prints it.
wait_finalized() { # [AT_LEAST]
  local deadline=$((SECONDS + 20)) f
  while ((SECONDS < deadline)); do
    sidecar_get /status
    f=$(jq -r '.finality[0].finalized // empty' <<<"$body")
    if [[ -n $f ]] && ((f >= ${1:-0})); then
      echo "$f"
      return 0
    fi
    nap 0.1
  done
  echo "no finalized block in /status: $body" >&2
  return 1
}

BALANCE_AT() { # BLOCK_HEX [ID]
  printf '{"jsonrpc":"2.0","id":%s,"method":"eth_getBalance","params":["0x00000000000000000000000000000000000000aa","%s"]}' \
    "${2:-1}" "$1"
}

CALL_LATEST() { # ID
  printf '{"jsonrpc":"2.0","id":%s,"method":"eth_call","params":[{"to":"0x00000000000000000000000000000000000000aa","data":"0x"},"latest"]}' "$1"
}

# Waits (up to 60 s) until the fake NAME holds HELD answers and the sidecar has WAITING calls
# waiting on another call's flight: every client is in, whatever the machine's load.
wait_coalesced() { # NAME HELD WAITING
  local deadline=$((SECONDS + 60)) held=""
  while ((SECONDS < deadline)); do
    held=$(fake_stat "$1" .held)
    sidecar_get /status
    if [[ $held == "$2" ]] && jq -e --argjson w "$3" '.cache.coalesced_waiting == $w' <<<"$body" >/dev/null; then
      return 0
    fi
    nap 0.2
  done
  echo "not all in flight: the fake holds $held (want $2); /status: $body" >&2
  return 1
}

@test "cache: 1,000 identical concurrent reads make one upstream request, each answered with its id" {
  ulimit -n 4096 2>/dev/null || true # a sidecar with 1,000 clients, under a 1,024 default
  start_fake f1 --height 100
  # A deadline long enough for the slowest arrival on a loaded machine (the default is 30 s).
  cat >"$P" <<EOF
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: f1, url: "$(node_url f1)", timeout_ms: 120000 }
routing: { timeout_ms: 120000 }
EOF
  # No head poller: the head stays where it is. The fake holds the first read until every client
  # is in; `latest` is never cached, so each later one is a coalescing candidate, not a cache hit.
  sidecar_start sc -p "$P" --no-state --no-probe --max-connections 2000
  fake_control f1 '{"hold":true,"reset_stats":true}'
  # curl runs at most 300 transfers at once whatever --parallel-max says: four curls of 250, their
  # configs written first (bash's printf: no process per entry) so that all start together.
  local i k cfg data pids=() call
  call=$(CALL_LATEST %d)
  for k in 0 1 2 3; do
    cfg=$BATS_TEST_TMPDIR/curl.$k.cfg
    for ((i = k * 250 + 1; i <= (k + 1) * 250; i++)); do
      ((i > k * 250 + 1)) && echo next # one transfer per entry, none empty at the end
      # shellcheck disable=SC2059 # the format is the call with %d for its id
      printf -v data "$call" "$i"
      printf 'url = "%s/"\nheader = "content-type: application/json"\ndata = "%s"\noutput = "%s/out.%d"\n' \
        "$SC_URL" "${data//\"/\\\"}" "$BATS_TEST_TMPDIR" "$i"
    done >"$cfg"
  done
  for k in 0 1 2 3; do
    curl -s --max-time 180 --parallel --parallel-immediate --parallel-max 250 \
      -K "$BATS_TEST_TMPDIR/curl.$k.cfg" 2>"$BATS_TEST_TMPDIR/curl.$k.err" &
    pids+=($!)
  done
  wait_coalesced f1 1 999
  fake_control f1 '{"hold":false}'
  for k in "${pids[@]}"; do wait "$k"; done
  assert_equal "$(fake_calls f1 eth_call)" 1 "eth_call requests upstream"
  for ((i = 1; i <= 1000; i++)); do cat "$BATS_TEST_TMPDIR/out.$i"; done >"$BATS_TEST_TMPDIR/all"
  run jq -s -e 'length == 1000 and (map(.id) | sort) == [range(1; 1001)] and
    all(.[]; .result == "0x" and .jsonrpc == "2.0")' "$BATS_TEST_TMPDIR/all"
  [ "$status" -eq 0 ]
  sidecar_get /metrics
  [[ $body == *"rpcroute_coalesced_flights_total 1"$'\n'* ]]
  [[ $body == *"rpcroute_coalesced_calls_total 999"$'\n'* ]]
}

@test "cache: a shared failure is one failure upstream, each client gets it under its own id" {
  start_fake f1 --height 100
  write_profile "$P" f1
  sidecar_start sc -p "$P" --no-state --no-probe
  fake_control f1 '{"mode":"rpc_error","code":-32000,"message":"execution reverted","hold":true,"reset_stats":true}'
  local pids=() i
  for i in 1 2 3 4 5; do
    curl -s --max-time 60 -H 'content-type: application/json' --data-binary "$(CALL_LATEST "$i")" \
      -o "$BATS_TEST_TMPDIR/err.$i" "$SC_URL/" &
    pids+=($!)
  done
  wait_coalesced f1 1 4
  fake_control f1 '{"hold":false}'
  for i in "${pids[@]}"; do wait "$i"; done
  assert_equal "$(fake_calls f1 eth_call)" 1 "eth_call requests upstream"
  for i in 1 2 3 4 5; do
    assert_json "$(cat "$BATS_TEST_TMPDIR/err.$i")" '.id == $i and .error.message == "execution reverted"' \
      --argjson i "$i"
  done
}

@test "cache: HIT, MISS and BYPASS; a read at or below finalized goes upstream once" {
  start_fake f1 --height 100
  write_profile "$P" f1
  sidecar_start sc -p "$P" --no-state
  wait_finalized 100 >/dev/null  # the fake reports finalized = its head
  fake_control f1 '{"reset_stats":true}'
  sidecar_post / "$(BALANCE_AT 0x50 7)"
  assert_equal "$code" 200
  assert_equal "$(cache_header)" MISS
  sidecar_post / "$(BALANCE_AT 0x50 8)"
  assert_equal "$(cache_header)" HIT
  assert_json "$body" '.id == 8 and .result == "0xde0b6b3a7640000" and .jsonrpc == "2.0"'
  # The same read written otherwise (spaces, upper-case hex) is the same key.
  sidecar_post / '{"jsonrpc":"2.0","id":"x","method":"eth_getBalance","params":[ "0x00000000000000000000000000000000000000AA", "0x50" ]}'
  assert_equal "$(cache_header)" HIT
  assert_json "$body" '.id == "x"'
  assert_equal "$(fake_calls f1 eth_getBalance)" 1 "eth_getBalance requests upstream"
  # Bypassed on request: upstream again, and said so.
  sidecar_post / "$(BALANCE_AT 0x50 9)" -H 'Cache-Control: no-cache'
  assert_equal "$(cache_header)" BYPASS
  sidecar_post / "$(BALANCE_AT 0x50 10)" -H 'X-Rpcroute-Cache: bypass'
  assert_equal "$(cache_header)" BYPASS
  assert_equal "$(fake_calls f1 eth_getBalance)" 3 "eth_getBalance requests upstream"
  # latest is never kept; a method without anything to key (the head) says MISS.
  sidecar_post / "$(BALANCE_AT latest 11)"
  sidecar_post / "$(BALANCE_AT latest 12)"
  assert_equal "$(cache_header)" MISS
  assert_equal "$(fake_calls f1 eth_getBalance)" 5 "eth_getBalance requests upstream"
  # A provider named in the URL gives its own answer.
  sidecar_post /rpc/provider/f1/local "$(BALANCE_AT 0x50 13)"
  assert_equal "$(cache_header)" BYPASS
  # net_version is a constant: kept after the first (eth_chainId is answered from the profile).
  sidecar_post / '{"jsonrpc":"2.0","id":1,"method":"net_version","params":[]}'
  sidecar_post / '{"jsonrpc":"2.0","id":2,"method":"net_version","params":[]}'
  assert_equal "$(cache_header)" HIT
  assert_json "$body" '.id == 2 and .result == "31337"'
  # A batch is routed as before.
  sidecar_post / "[$(BALANCE_AT 0x50 20)]"
  assert_equal "$(cache_header)" MISS
  sidecar_get /metrics
  [[ $body == *"rpcroute_cache_hits_total 3"* ]]
  [[ $body == *"rpcroute_cache_bypasses_total 2"* ]]
  [[ $body =~ rpcroute_cache_bytes\ [1-9] ]]
  sidecar_get /status
  assert_json "$body" '.cache.entries == 2 and .cache.bytes > 0 and .cache.max_bytes == 33554432'
}

@test "cache: --cache-mb 0 turns it off; cache: { max_mb } in the profile sizes it" {
  start_fake f1 --height 100
  write_profile "$P" f1
  sidecar_start sc -p "$P" --no-state --cache-mb 0
  wait_finalized 100 >/dev/null
  sidecar_post / "$(BALANCE_AT 0x50 1)"
  sidecar_post / "$(BALANCE_AT 0x50 2)"
  assert_equal "$(cache_header)" MISS
  sidecar_stop sc
  write_profile "$P" f1 --extra 'cache: { max_mb: 1 }'
  sidecar_start sc2 -p "$P" --no-state
  sidecar_get /status
  assert_json "$body" '.cache.max_bytes == 1048576'
  sidecar_stop sc2
  # --no-cache: nothing kept, and said so.
  sidecar_start sc3 -p "$P" --no-state --no-probe --no-cache
  sidecar_post / "$(BALANCE_AT 0x50 3)"
  assert_equal "$(cache_header)" BYPASS
  sidecar_get /status
  assert_json "$body" '.cache.max_bytes == 0'
  run "$RPCROUTE_BIN" serve --cache-mb 70000 --no-state -p "$P"
  [ "$status" -ne 0 ]
}

@test "cache: with anvil, a finalized block is kept, latest and unfinalized blocks never" {
  start_anvil a1
  write_profile "$P" a1
  # Anvil's finality lag is checked here, not assumed: mine until it reports a finalized block > 0.
  "$CAST" rpc --rpc-url "$(node_url a1)" anvil_mine 0x80 >/dev/null
  local fin_hex fin
  fin_hex=$("$CAST" rpc --rpc-url "$(node_url a1)" eth_getBlockByNumber finalized false | jq -r '.number')
  fin=$((fin_hex))
  ((fin > 2)) || skip "anvil reports no finalized block after 128 blocks ($fin_hex)"
  sidecar_start sc -p "$P" --no-state
  wait_finalized "$fin" >/dev/null
  local head_hex
  head_hex=$("$CAST" rpc --rpc-url "$(node_url a1)" eth_blockNumber | tr -d '"')
  local at
  at=$(printf '0x%x' $((fin - 1)))
  local get='{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["%s",false]}'
  sidecar_post / "$(printf "$get" "$at")"
  assert_equal "$(cache_header)" MISS
  local first=$body
  sidecar_post / "$(printf "$get" "$at")"
  assert_equal "$(cache_header)" HIT
  assert_equal "$body" "$first" "the kept block"
  # The head (above finalized) and latest: never kept.
  sidecar_post / "$(printf "$get" "$head_hex")"
  sidecar_post / "$(printf "$get" "$head_hex")"
  assert_equal "$(cache_header)" MISS
  sidecar_post / "$(printf "$get" latest)"
  sidecar_post / "$(printf "$get" latest)"
  assert_equal "$(cache_header)" MISS
  # A block by its hash is kept once it is known.
  local hash
  hash=$(jq -r '.result.hash' <<<"$first")
  sidecar_post / "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"eth_getBlockByHash\",\"params\":[\"$hash\",false]}"
  sidecar_post / "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"eth_getBlockByHash\",\"params\":[\"$hash\",false]}"
  assert_equal "$(cache_header)" HIT
  assert_json "$body" '.id == 6 and .result.hash == $h' --arg h "$hash"
  sidecar_get /status
  assert_json "$body" '.finality[0].safe >= .finality[0].finalized and .finality[0].head >= .finality[0].safe'
}

@test "cache: over HTTPS the kept answer is served without reaching the provider" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  start_tls_fake t1 --height 100
  cat >"$P" <<EOF
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: t1, url: "$(node_url t1)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  sidecar_start sc -p "$P" --no-state
  wait_finalized 100 >/dev/null
  fake_control t1 '{"reset_stats":true}'
  sidecar_post / "$(BALANCE_AT 0x40 1)"
  assert_equal "$(cache_header)" MISS
  sidecar_post / "$(BALANCE_AT 0x40 2)"
  assert_equal "$(cache_header)" HIT
  assert_json "$body" '.id == 2 and .result == "0xde0b6b3a7640000"'
  assert_equal "$(fake_calls t1 eth_getBalance)" 1 "eth_getBalance requests upstream"
}

# One of three providers claims an absurd head (10^9) and a finalized block just below it; the two
# honest ones stand at 100 with finality 36 blocks behind (64). The liar answers 300 ms late, so that
# its report comes last (a later honest one would drop a mark above the head anyway). The head
# rule does not believe the liar, so neither does the chain's finalized mark: a block above 64 is never answered from the
# cache, one at or below it is. ARG: plain or tls (every provider over HTTPS).
liar_finality_case() { # plain|tls
  local n tls="" liar_asked deadline
  if [[ $1 == tls ]]; then
    make_test_pki "$BATS_TEST_TMPDIR/pki"
    start_tls_fake h1 --height 100 --finality-lag 36
    start_tls_fake h2 --height 100 --finality-lag 36
    start_tls_fake liar --height 1000000000 --finality-lag 1 --delay-ms 300
    tls=", tls: { ca_file: \"$TEST_PKI/ca.pem\" }"
  else
    start_fake h1 --height 100 --finality-lag 36
    start_fake h2 --height 100 --finality-lag 36
    start_fake liar --height 1000000000 --finality-lag 1 --delay-ms 300
  fi
  {
    printf 'chains:\n  local:\n    chain_id: 31337\n    block_time_ms: 1000\n    providers:\n'
    for n in h1 h2 liar; do printf '      - { id: %s, url: "%s"%s }\n' "$n" "$(node_url "$n")" "$tls"; done
  } >"$P"
  sidecar_start sc -p "$P" --no-state
  # Every provider was asked for its finality (the liar too), and what it said was judged.
  deadline=$((SECONDS + 20))
  until liar_asked=$(fake_calls liar eth_getBlockByNumber) && ((liar_asked >= 2)); do
    ((SECONDS < deadline)) || { echo "the liar was never asked for its finality" >&2; return 1; }
    nap 0.1
  done
  wait_finalized 64 >/dev/null
  nap 1 # the liar's answer (300 ms late: after the honest ones) judged after its second lookup
  sidecar_get /status
  assert_json "$body" '.finality[0].finalized == 64 and .finality[0].safe == 64 and .finality[0].head == 100'
  # Above the honest finalized block (80 > 64): upstream each time, never kept.
  sidecar_post / "$(BALANCE_AT 0x50 1)"
  assert_equal "$(cache_header)" MISS
  assert_json "$body" '.id == 1 and .result == "0xde0b6b3a7640000"'
  sidecar_post / "$(BALANCE_AT 0x50 2)"
  assert_equal "$(cache_header)" MISS "a block above the believed finalized one"
  local receipt='{"jsonrpc":"2.0","id":3,"method":"eth_getTransactionReceipt","params":["0x0000000000000000000000000000000000000000000000000000000000000050"]}'
  sidecar_post / "$receipt"
  assert_json "$body" '.result.blockNumber == "0x50"'
  sidecar_post / "$receipt"
  assert_equal "$(cache_header)" MISS "a receipt in a block above the believed finalized one"
  # At or below it: kept.
  sidecar_post / "$(BALANCE_AT 0x40 4)"
  assert_equal "$(cache_header)" MISS
  sidecar_post / "$(BALANCE_AT 0x40 5)"
  assert_equal "$(cache_header)" HIT
  assert_json "$body" '.id == 5 and .result == "0xde0b6b3a7640000"'
}

@test "cache: a provider claiming an absurd head and finalized block cannot make the cache keep a block" {
  liar_finality_case plain
}

@test "cache: over HTTPS, a lying provider's finalized block is not believed either" {
  liar_finality_case tls
}

@test "cache: a finalized mark above the head, left in a state file from before, is dropped" {
  start_fake h1 --height 100 --finality-lag 36
  start_fake h2 --height 100 --finality-lag 36
  write_profile "$P" h1 h2
  sidecar_start sc -p "$P"
  wait_finalized 64 >/dev/null
  sidecar_stop sc
  # What a liar could leave there before finality followed the head (written in place: same file).
  local poisoned deadline
  poisoned=$(jq '.chains |= map_values(.finalized = {block: 999999999, t_ms: .high_water.t_ms} | .safe = .finalized)' \
    "$RPCROUTE_STATE")
  printf '%s\n' "$poisoned" >"$RPCROUTE_STATE"
  assert_equal "$(jq -c '[.chains[].finalized.block]' "$RPCROUTE_STATE")" "[999999999]" "the poisoned mark"
  sidecar_start sc2 -p "$P"
  # Never used: above the head, so no block counts as final by it.
  sidecar_post / "$(BALANCE_AT 0x50 1)"
  sidecar_post / "$(BALANCE_AT 0x50 2)"
  assert_equal "$(cache_header)" MISS "a block above the honest finalized one"
  # And dropped by the first finality report, which is believed again.
  deadline=$((SECONDS + 20))
  until sidecar_get /status && jq -e '.finality[0].finalized == 64' <<<"$body" >/dev/null; do
    ((SECONDS < deadline)) || { echo "the old mark stayed: $body" >&2; return 1; }
    nap 0.1
  done
  assert_json "$body" '.finality[0].safe == 64 and .finality[0].head == 100'
  sidecar_post / "$(BALANCE_AT 0x50 3)"
  assert_equal "$(cache_header)" MISS
  sidecar_post / "$(BALANCE_AT 0x40 4)"
  sidecar_post / "$(BALANCE_AT 0x40 5)"
  assert_equal "$(cache_header)" HIT
}
