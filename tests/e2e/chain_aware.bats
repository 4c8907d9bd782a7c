#!/usr/bin/env bats
# Chain-aware routing end to end (DESIGN.md sections 6, 7, 8, 10; issue 5, its "Must show" list):
# eth_blockNumber never backwards over nodes at different heights (consecutive `rpcroute call`s and
# concurrent sidecar clients), lag exclusion and the lag breaker trip, archive routing by block
# parameter, token-bucket quotas shared through the state file, the eth_getLogs range limit, chain-id
# exclusion, exclusion kinds and reasons in `rank --json` and in 503 details, max_batch splitting,
# broadcast of raw transactions, per-method default attempt timeouts.
# Real anvil nodes (heights made to differ with anvil_mine, one with chain id 5); the fake upstream
# where a request count or a delay is needed.

# jq programs are single-quoted on purpose; $stderr and $stderr_lines come from bats; each test
# runs in its own subshell, so exports there are meant to be local.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers

# helpers.bash asks python3 for a free port; on a loaded machine python3 takes seconds to start.
# This is its bash fallback (start_anvil retries when the port is taken in between).
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

# anvil's first dev key (DEV_ACCOUNT's) and its second account.
DEV_KEY=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80
DEV_ACCOUNT2=0x70997970C51812dc3A010C7d01b50e0d17dc79C8
BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

# jq: a hex quantity ("0x64") as a number.
HEX='def hex: ltrimstr("0x") | explode | reduce .[] as $c (0; . * 16 + (if $c >= 97 then $c - 87 elif $c >= 65 then $c - 55 else $c - 48 end));'

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN ANVIL CAST
  # Shared by the tests that do not care about exact heights: s1 and s2 (chain 31337) at the same
  # height (50 blocks mined, so block 1 is "old" with archival_threshold 10), x5 on chain id 5.
  # Only the broadcast test changes them (one transaction, mined on both).
  start_anvil s1
  start_anvil s2
  start_anvil x5 --chain-id 5
  anvil_mine s1 50
  anvil_mine s2 50
  anvil_mine x5 50
}

teardown_file() {
  stop_all
}

setup() {
  e2e_setup
  S=$RPCROUTE_STATE
}

teardown() {
  stop_all
}

# ---------------------------------------------------------------------------------------------------
# Helpers

# A JSON-RPC call straight to node NAME (no rpcroute); prints the whole answer.
node_rpc() { # NAME METHOD PARAMS_JSON
  local url
  url=$(node_url "$1") || return 1
  curl -sf --max-time 10 -X POST -H 'content-type: application/json' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}" "$url"
}

# Mines N blocks on the anvil node NAME.
anvil_mine() { # NAME N
  node_rpc "$1" anvil_mine "[\"$(printf '0x%x' "$2")\"]" | grep -q '"result"'
}

# The head of node NAME, in decimal.
node_height() { # NAME
  local hex
  hex=$(node_rpc "$1" eth_blockNumber '[]' | jq -r .result) || return 1
  echo $((hex))
}

# Mines node NAME up to block N (fails when it is already above).
mine_to() { # NAME N
  local h
  h=$(node_height "$1") || return 1
  if ((h > $2)); then
    echo "mine_to $1 $2: already at $h" >&2
    return 1
  fi
  ((h == $2)) || anvil_mine "$1" $(($2 - h))
}

# jq -e FILTER on ALL, the array of `call --json` outputs; on failure prints them one line each
# (provider, result, raised_from, excluded kinds), runs of equal lines counted.
assert_calls() { # ALL FILTER
  if ! jq -e "$2" <<<"$1" >/dev/null 2>&1; then
    printf 'jq filter failed: %s\non the calls (count, provider, result, raised_from, excluded):\n' "$2" >&2
    jq -r '.[] | "\(.meta.provider) \(.result // .error) \(.meta.raised_from // "-") \([.meta.excluded[]? | "\(.provider):\(.kind)"] | join(","))"' <<<"$1" | uniq -c >&2
    return 1
  fi
}

# Runs `rpcroute call ARGS...` N times in a row, appending each answer (stdout) to OUT; fails on the
# first exit status other than 0, showing its stderr. Before call number AT (0: none) it runs the
# shell command HOOK. No process per call besides rpcroute itself (process starts cost 0.1-0.2 s on
# a loaded machine); the whole loop is bounded in time instead.
calls_in_a_row() { # N OUT AT HOOK ARGS...
  local n=$1 out=$2 at=$3 hook=$4 err=$BATS_TEST_TMPDIR/calls_in_a_row.err
  shift 4
  timeout 600 bash -c '
    n=$1 out=$2 at=$3 hook=$4 err=$5
    shift 5
    for ((i = 1; i <= n; i++)); do
      if ((i == at)); then eval "$hook" || { echo "hook before call $i failed: $hook" >&2; exit 90; }; fi
      "$RPCROUTE_BIN" call "$@" >>"$out" 2>"$err" || { rc=$?; echo "call $i exited $rc:" >&2; cat "$err" >&2; exit 91; }
    done' _ "$n" "$out" "$at" "$hook" "$err" "$@"
}

# A shell command that mines N blocks on the anvil node NAME (for calls_in_a_row's HOOK).
mine_cmd() { # NAME N
  local url
  url=$(node_url "$1") || return 1
  printf "curl -sf --max-time 10 -X POST -H 'content-type: application/json' --data '%s' %s | grep -q result" \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"anvil_mine\",\"params\":[\"$(printf '0x%x' "$2")\"]}" "$url"
}

# Starts `rpcroute serve` on 127.0.0.1 (a port of its choosing) with the state file $S; waits up to
# 20 s for its port file. Sets SC_PID and SC_URL; its stderr goes to $BATS_TEST_TMPDIR/sidecar.log.
start_sidecar() { # SERVE ARGS...
  local dir port_file port deadline
  dir=$(_proc_dir)
  port_file=$BATS_TEST_TMPDIR/sidecar.port
  rm -f "$port_file"
  "$RPCROUTE_BIN" serve --listen 127.0.0.1:0 --port-file "$port_file" --state "$S" "$@" \
    </dev/null >>"$BATS_TEST_TMPDIR/sidecar.stdout" 2>"$BATS_TEST_TMPDIR/sidecar.log" 3>&- &
  SC_PID=$!
  echo "$SC_PID" >"$dir/sidecar.pid"
  deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)); do
    if [[ -s $port_file ]]; then
      port=$(<"$port_file")
      SC_URL=http://127.0.0.1:${port//[[:space:]]/}
      return 0
    fi
    kill -0 "$SC_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "rpcroute serve did not write its port file" >&2
  cat "$BATS_TEST_TMPDIR/sidecar.log" >&2
  return 1
}

# The profile for the never-backwards tests: n1, n2 at 100 and n3 at 90, max_lag_blocks 2, heights
# fresh for the whole test (block_time_ms 60000: horizon 5 minutes), load_balanced.
three_heights() {
  start_anvil n1
  start_anvil n2
  start_anvil n3
  anvil_mine n1 100
  anvil_mine n2 100
  anvil_mine n3 90
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    max_lag_blocks: 2
    providers:
      - id: n1
        url: $(node_url n1)
      - id: n2
        url: $(node_url n2)
      - id: n3
        url: $(node_url n3)
routing:
  default_strategy: load_balanced
EOF
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.healthy == 2'
  assert_jq '.providers[] | select(.provider == "n3") | .healthy == false and .height == 90 and (.reason | test("lagging"))'
}

# ---------------------------------------------------------------------------------------------------
# 1. Never backwards, lag exclusion

@test "200 calls in a row over heights 100/100/90: the lagging node serves none, answers never decrease" {
  three_heights
  local out=$BATS_TEST_TMPDIR/calls.jsonl
  # Half-way n1 gets one block ahead of n2 (101 vs 100, within max_lag_blocks): from then on an
  # answer of n2 would go backwards unless raised to the high-water mark.
  calls_in_a_row 200 "$out" 101 "$(mine_cmd n1 1)" -p "$P" --json eth_blockNumber
  local all
  all=$(jq -cs . "$out")
  assert_calls "$all" 'length == 200'
  # The lagging node neither served nor was tried; both others served.
  assert_calls "$all" '[.[].meta.provider] | unique == ["n1", "n2"]'
  assert_calls "$all" '[.[].meta.attempts[].provider | select(. == "n3")] == []'
  assert_calls "$all" '[.[].meta.excluded[] | select(.provider == "n3") | .kind] | unique == ["lag"]'
  # Never decreasing; 100 first, 101 last.
  assert_calls "$all" "$HEX"' [.[].result | hex] as $h | $h[0] == 100 and $h[-1] == 101
                      and all(range(1; $h | length); $h[.] >= $h[. - 1])'
  # n2's 100 after the mark reached 101 was raised, and says so.
  assert_calls "$all" '[.[] | select(.meta.raised_from != null)] | length > 0 and
                      all(.meta.provider == "n2" and .meta.raised_from == "0x64" and .result == "0x65")'
}

@test "sidecar, 4 concurrent clients x 50: no client sees a lower height than before, none below the probe's, the lagging node serves none" {
  three_heights
  start_sidecar -p "$P"
  local c
  # Each client POSTs eth_blockNumber 50 times in a row, one line per answer: body, provider header,
  # HTTP status. Client 1 mines one block on n1 before its 20th request, client 2 two on n2 before
  # its 30th (n1 101 → n2 102 ahead): answers of the node behind must be raised to the mark.
  client() { # ID
    local id=$1 urls=()
    # curl sends one POST per URL given, in order, on one kept-alive connection.
    batch() { # N
      urls=()
      for _ in $(seq "$1"); do urls+=("$SC_URL/rpc/local"); done
      curl -s --max-time 60 -X POST -H 'content-type: application/json' --data "$BN" \
        -w '\t%header{x-rpcroute-provider}\t%{http_code}\n' "${urls[@]}" >>"$BATS_TEST_TMPDIR/client$id.tsv"
    }
    case $id in
      1) batch 19 && anvil_mine n1 1 && batch 31 ;;
      2) batch 29 && anvil_mine n2 2 && batch 21 ;;
      *) batch 50 ;;
    esac
  }
  local pids=()
  for c in 1 2 3 4; do
    client "$c" &
    pids+=($!)
  done
  for c in "${pids[@]}"; do wait "$c" || { echo "client $c failed" >&2; false; }; done

  local parse="$HEX"' split("\n") | map(select(length > 0) | split("\t")
                 | {h: (.[0] | fromjson | .result | hex), p: .[1], code: .[2]})'
  local all="" lines
  for c in 1 2 3 4; do
    lines=$(jq -Rs "$parse" "$BATS_TEST_TMPDIR/client$c.tsv")
    assert_json "$lines" 'length == 50 and all(.code == "200")' || { cat "$BATS_TEST_TMPDIR/client$c.tsv" >&2; false; }
    # This client never saw a height lower than one it saw before.
    assert_json "$lines" '[.[].h] as $h | all(range(1; $h | length); $h[.] >= $h[. - 1])' ||
      { echo "client $c:" >&2; cut -f1,2 "$BATS_TEST_TMPDIR/client$c.tsv" | uniq -c >&2; false; }
    all+=$lines
  done
  all=$(jq -cs 'add' <<<"$all")
  assert_json "$all" 'length == 200'
  # Never below the greatest height at probe time; the lagging node served none.
  assert_json "$all" 'all(.h >= 100 and .h <= 102)'
  assert_json "$all" '[.[].p] | unique - ["n1", "n2"] == []' ||
    { jq -c '[.[].p] | group_by(.) | map({(.[0]): length}) | add' <<<"$all" >&2; false; }
  # Everybody ends at n2's 102 (the last requests came after both mines).
  assert_json "$all" '[.[].h] | max == 102'
}

@test "a node 20 blocks behind for longer than lag_trip_ms: lag exclusion, then an open breaker with reason lag" {
  start_anvil hi
  start_anvil lo
  anvil_mine hi 40
  anvil_mine lo 20
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    max_lag_blocks: 2
    lag_trip_ms: 2000
    providers:
      - id: hi
        url: $(node_url hi)
      - id: lo
        url: $(node_url lo)
routing:
  default_strategy: load_balanced
EOF
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.providers[] | select(.provider == "lo") | .healthy == false and .height == 20 and .lag == 20'
  # Behind, but not yet for lag_trip_ms: excluded for lag, breaker still closed.
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.candidates[].provider] == ["hi"]'
  assert_jq '.excluded | length == 1 and .[0].provider == "lo" and .[0].kind == "lag" and (.[0].reason | test("lagging 20 blocks behind"))'

  sleep 3
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.candidates[].provider] == ["hi"]'
  assert_jq '.excluded | length == 1 and .[0].provider == "lo" and .[0].kind == "breaker"'
  assert_jq '.excluded[0].reason | test("circuit breaker open \\(lag: 20 blocks behind for [0-9.]+s")'
  assert_jq '.excluded[0].retry_in_ms > 0'
  run --separate-stderr rpcroute rank -p "$P"
  assert_status 0
  grep -Eq '^ +lo +circuit breaker open \(lag: ' <<<"$output" || { _dump_run; false; }
  run --separate-stderr rpcroute state show --json
  assert_status 0
  assert_jq '[.providers[] | select(.provider == "lo") | .breaker | .state == "open" and (.reason | startswith("lag: 20 blocks behind"))] == [true]'
  assert_jq '[.providers[] | select(.provider == "hi") | .breaker.state] == ["closed"]'
}

# ---------------------------------------------------------------------------------------------------
# 1b. The head must be the truth: liars, invalid heads, restarted chains (issues 14.3, 15.1)

# POSTs eth_blockNumber to the sidecar; prints "HTTP_CODE RESULT" (RESULT: the result or the error code).
sc_block_number() {
  local body
  body=$(curl -s --max-time 10 -X POST -H 'content-type: application/json' --data "$BN" \
    -w '\n%{http_code}' "$SC_URL/rpc/local") || return 1
  printf '%s %s\n' "${body##*$'\n'}" "$(jq -r '.result // .error.code' <<<"${body%$'\n'*}")"
}

@test "one provider over-reporting its head is quarantined: honest ones serve, answers are never raised to its height" {
  start_fake a --height 100
  start_fake b --height 100
  start_fake liar --height 20000000
  write_profile "$P" liar a b --strategy priority
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.healthy == 2'
  assert_jq '.providers[] | select(.provider == "liar") | .healthy == false and (.reason | test("height 20000000 is not believed"))'
  assert_jq '[.providers[] | select(.provider != "liar") | .lag] == [0, 0]'
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.candidates[].provider] == ["a", "b"]'
  assert_jq '.excluded | length == 1 and .[0].provider == "liar" and .[0].kind == "quarantine"'
  local out=$BATS_TEST_TMPDIR/calls.jsonl
  calls_in_a_row 6 "$out" 0 "" -p "$P" --json eth_blockNumber
  assert_calls "$(jq -cs . "$out")" 'length == 6 and all(.result == "0x64" and .meta.provider == "a" and .meta.raised_from == null)'

  # The same through the sidecar (its own probes find the liar).
  start_sidecar -p "$P" --strategy priority
  local deadline=$((SECONDS + 15)) line
  until curl -sf --max-time 5 "$SC_URL/status" | jq -e '[.profiles[].excluded[] | select(.provider == "liar" and .kind == "quarantine")] | length == 1' >/dev/null; do
    ((SECONDS < deadline)) || { curl -s "$SC_URL/status" >&2; false; }
    sleep 0.2
  done
  for _ in 1 2 3 4 5; do
    line=$(sc_block_number)
    assert_equal "$line" "200 0x64" "sidecar eth_blockNumber"
  done

  # With a fresh state the liar is the first choice again; it says 0x7fffffffffffffff: refused as a
  # provider failure even before anything is known about the others.
  kill -TERM "$SC_PID"
  wait "$SC_PID" || true
  rm -f "$S" "$S.journal"
  fake_control liar '{"block_number":"0x7fffffffffffffff"}'
  run --separate-stderr rpcroute call -p "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "a"'
  assert_jq '.meta.attempts[0] | .provider == "liar" and .outcome == "bad_response" and (.message | test("no chain is that long"))'
}

@test "a head answer that is not a quantity (\"0x\", \"-0x1\", a JSON number) is a provider failure, not a result" {
  start_fake bad
  start_fake good
  write_profile "$P" bad good --strategy priority
  local v
  for v in '"0x"' '"-0x1"' '5'; do
    fake_control bad "{\"block_number\":$v}"
    run --separate-stderr rpcroute call -p "$P" --no-state --json eth_blockNumber
    assert_status 0
    assert_jq '.result == "0x64" and .meta.provider == "good"'
    assert_jq '.meta.attempts[0] | .provider == "bad" and .outcome == "bad_response" and .class == "provider_failure"
               and (.message | test("not a block number"))'
  done
  # With nobody else to ask: exit 3, never the invalid head on stdout.
  write_profile "$P" bad
  run --separate-stderr rpcroute call -p "$P" --no-state eth_blockNumber
  assert_status 3
  assert_equal "$output" "" "stdout"
}

# A profile for the restart tests: the one anvil node "solo", lag_trip_ms 2000 (the old bug tripped its
# breaker for "lag" behind its own pre-restart height once that long had passed).
solo_profile() {
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    max_lag_blocks: 2
    lag_trip_ms: 2000
    providers:
      - id: solo
        url: $(node_url solo)
EOF
}

@test "restarting the only anvil: the sidecar serves the new chain within 2 s, with no 503 after that" {
  start_anvil solo
  anvil_mine solo 20
  solo_profile
  start_sidecar -p "$P"
  local line
  line=$(sc_block_number)
  assert_equal "$line" "200 0x14" "before the restart"
  kill_node solo
  respawn_anvil solo
  anvil_mine solo 8
  local t0=$SECONDS n=0 block
  # ~6 s of requests: past lag_trip_ms, within the minute the old mark stayed fresh.
  while ((SECONDS - t0 < 6)); do
    line=$(sc_block_number)
    assert_equal "$line" "200 0x8" "eth_blockNumber $n after the restart"
    block=$(curl -s --max-time 10 -X POST -H 'content-type: application/json' -w '\n%{http_code}' \
      --data '{"jsonrpc":"2.0","id":2,"method":"eth_getBlockByNumber","params":["0x5",false]}' "$SC_URL/rpc/local")
    assert_equal "${block##*$'\n'}" 200 "eth_getBlockByNumber(5) $n: HTTP status"
    assert_json "${block%$'\n'*}" '.result.number == "0x5"'
    n=$((n + 1))
    sleep 0.3
  done
  ((n >= 2)) || { echo "only $n rounds" >&2; false; }
}

@test "restarting the only anvil: rpcroute call with a state file answers the new chain at once" {
  start_anvil solo
  anvil_mine solo 20
  solo_profile
  run --separate-stderr rpcroute call -p "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x14"'
  kill_node solo
  respawn_anvil solo
  anvil_mine solo 8
  # The state file says 20 (height and mark): a block the new chain has is served, not refused.
  run --separate-stderr rpcroute call -p "$P" --json eth_getBlockByNumber 0x5 false
  assert_status 0
  assert_jq '.result.number == "0x5"'
  local t0=$SECONDS n=0
  while ((SECONDS - t0 < 4)); do
    run --separate-stderr rpcroute call -p "$P" --json eth_blockNumber
    assert_status 0
    assert_jq '.result == "0x8" and .meta.raised_from == null and .meta.excluded == []'
    n=$((n + 1))
  done
  ((n >= 2)) || { echo "only $n calls" >&2; false; }
  run --separate-stderr rpcroute state show --json
  assert_status 0
  assert_jq '[.chains[].high_water.block] == [8]'
  assert_jq '[.providers[] | .breaker.state] == ["closed"]'
}

# ---------------------------------------------------------------------------------------------------
# 2. Archive routing

@test "eth_getBalance at block 1 goes to the archival node every time; latest goes to both" {
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    archival_threshold: 10
    providers:
      - id: s1
        url: $(node_url s1)
        archival: true
      - id: s2
        url: $(node_url s2)
        archival: false
routing:
  default_strategy: load_balanced
EOF
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.healthy == 2'
  local out=$BATS_TEST_TMPDIR/old.jsonl
  calls_in_a_row 20 "$out" 0 "" -p "$P" --json eth_getBalance "$DEV_ACCOUNT" 0x1
  local all
  all=$(jq -cs . "$out")
  assert_calls "$all" 'length == 20 and all(.meta.provider == "s1" and .result == "'"$DEV_BALANCE"'")'
  assert_calls "$all" 'all(.meta.excluded | length == 1 and .[0].provider == "s2" and .[0].kind == "archive"
                      and (.[0].reason | test("not archival.*block 1")))'
  assert_calls "$all" '[.[].meta.attempts[].provider] | unique == ["s1"]'

  out=$BATS_TEST_TMPDIR/latest.jsonl
  calls_in_a_row 24 "$out" 0 "" -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  all=$(jq -cs . "$out")
  assert_calls "$all" 'length == 24 and all(.meta.excluded == [])'
  assert_calls "$all" '[.[].meta.provider] | unique == ["s1", "s2"]'

  run --separate-stderr rpcroute rank -p "$P" -m eth_getBalance --json "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '([.candidates[].provider] | sort) == ["s1", "s2"] and .excluded == []'
  run --separate-stderr rpcroute rank -p "$P" -m eth_getBalance --json "$DEV_ACCOUNT" 0x1
  assert_status 0
  assert_jq '[.candidates[].provider] == ["s1"]'
  assert_jq '.excluded | length == 1 and .[0].provider == "s2" and .[0].kind == "archive" and (.[0].reason | test("archival: false"))'
}

# ---------------------------------------------------------------------------------------------------
# 3. Quotas and limits

# 50 sequential calls with a shared state file; prints "A_COUNT B_COUNT ELAPSED_MS".
quota_run() { # N
  local out=$BATS_TEST_TMPDIR/quota.$RANDOM.jsonl t0 t1
  t0=$(now_ms)
  calls_in_a_row "$1" "$out" 0 "" -p "$P" --json eth_blockNumber || return 1
  t1=$(now_ms)
  jq -rs --arg ms $((t1 - t0)) '[(map(select(.meta.provider == "s1")) | length),
         (map(select(.meta.provider == "s2")) | length), $ms] | @tsv' "$out"
}

quota_profile() { # RPS BURST
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    providers:
      - id: s1
        url: $(node_url s1)
        rate_limit: {rps: $1, burst: $2}
      - id: s2
        url: $(node_url s2)
routing:
  default_strategy: priority
EOF
}

@test "rate_limit on the preferred provider: at most burst + rps x elapsed go to it across processes, the rest to the other, no error" {
  local a b ms
  # The issue's numbers: {rps: 5, burst: 5}, 50 quick calls.
  quota_profile 5 5
  read -r a b ms < <(quota_run 50)
  echo "rps 5: s1 $a, s2 $b in $ms ms" >&3
  ((a + b == 50)) || { echo "s1 $a + s2 $b != 50" >&2; false; }
  # The first call to s1 on a fresh state file also asks it eth_chainId (the chain check, issue
  # 21), and that call draws a token of the burst like any other: at least burst - 1 calls.
  ((a >= 4)) || { echo "s1 served $a < burst 5 - 1 (the chain check's token)" >&2; false; }
  # Tokens: the burst, plus rps per second elapsed, plus 1 for rounding.
  ((a <= 5 + 5 * ms / 1000 + 1)) || { echo "s1 served $a in $ms ms: over the quota" >&2; false; }

  # A loaded machine may not make more than 5 rpcroute calls a second, which makes the bound above
  # hold trivially. One token a second is slower than any machine: most calls must go to s2.
  rm -f "$S" "$S.journal"  # the journal too: it would replay the last run's drawn bucket
  quota_profile 1 5
  read -r a b ms < <(quota_run 12)
  echo "rps 1: s1 $a, s2 $b in $ms ms" >&3
  ((a + b == 12)) || { echo "s1 $a + s2 $b != 12" >&2; false; }
  ((a >= 4)) || { echo "s1 served $a < burst 5 - 1 (the chain check's token)" >&2; false; }
  ((a <= 5 + ms / 1000 + 1)) || { echo "s1 served $a in $ms ms: over the quota" >&2; false; }
  ((b > 0)) || { echo "s2 served none" >&2; false; }
  # rank shows the quota exclusion right after the run (the bucket is empty or nearly).
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.excluded[] | select(.provider == "s1") | .kind == "quota" and (.reason | test("quota used up"))] | . == [] or . == [true]'
}

@test "eth_getLogs over 20000 blocks skips the provider with max_block_range 10000" {
  # Mining 20 000 anvil blocks takes over a minute on a loaded machine; the range decision depends
  # only on the request's bounds (and anvil answers [] past its head), so the nodes stay at ~50.
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    providers:
      - id: s1
        url: $(node_url s1)
        limits: {max_block_range: 10000}
      - id: s2
        url: $(node_url s2)
routing:
  default_strategy: priority
EOF
  local wide='{"fromBlock":"0x0","toBlock":"0x4e1f"}' narrow='{"fromBlock":"0x0","toBlock":"0x9"}'
  run --separate-stderr rpcroute call -p "$P" --json eth_getLogs "$wide"
  assert_status 0
  assert_jq '.result == [] and .meta.provider == "s2" and ([.meta.attempts[].provider] == ["s2"])'
  assert_jq '.meta.excluded | length == 1 and .[0].provider == "s1" and .[0].kind == "limit"
             and (.[0].reason | test("20000 blocks exceeds its max_block_range 10000"))'
  run --separate-stderr rpcroute rank -p "$P" -m eth_getLogs --json "$wide"
  assert_status 0
  assert_jq '[.candidates[].provider] == ["s2"]'
  assert_jq '.excluded | length == 1 and .[0].provider == "s1" and .[0].kind == "limit" and (.[0].reason | test("max_block_range"))'
  # A range within the limit goes to s1 (priority 1) as usual.
  run --separate-stderr rpcroute call -p "$P" --json eth_getLogs "$narrow"
  assert_status 0
  assert_jq '.meta.provider == "s1" and .meta.excluded == []'
  # Exactly 10000 blocks is within the limit.
  run --separate-stderr rpcroute rank -p "$P" -m eth_getLogs --json '{"fromBlock":"0x0","toBlock":"0x270f"}'
  assert_status 0
  assert_jq '[.candidates[].provider] == ["s1", "s2"] and .excluded == []'
}

@test "max_batch 2: a batch of 5 goes out in 3 requests and comes back whole, in order, with its ids" {
  start_fake fb
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    providers:
      - id: fb
        url: $(node_url fb)
        limits: {max_batch: 2}
routing:
  default_strategy: priority
EOF
  local batch='[{"jsonrpc":"2.0","id":"a","method":"eth_blockNumber"},
    {"jsonrpc":"2.0","id":2,"method":"eth_gasPrice"},
    {"jsonrpc":"2.0","id":3,"method":"eth_getBalance","params":["'"$DEV_ACCOUNT"'","latest"]},
    {"jsonrpc":"2.0","id":"d","method":"eth_getTransactionCount","params":["'"$DEV_ACCOUNT"'","latest"]},
    {"jsonrpc":"2.0","id":5,"method":"net_version"}]'
  run --separate-stderr rpcroute_stdin "$batch" call -p "$P" --raw
  assert_status 0
  assert_jq 'length == 5 and [.[].id] == ["a", 2, 3, "d", 5] and all(has("result"))'
  assert_jq '.[0].result == "0x64" and .[4].result == "31337"'
  run fake_stats fb
  assert_status 0
  # `call` asked the chain id alongside the first request, within max_batch: one call more.
  assert_jq '.calls == 6 and .requests == 3 and .methods.eth_chainId == 1'
}

# ---------------------------------------------------------------------------------------------------
# 4. Chain id, exclusions in rank and in 503 details

@test "a node on another chain id: excluded with kind chain_id after probe, never serves" {
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    providers:
      - id: x5
        url: $(node_url x5)
      - id: s1
        url: $(node_url s1)
      - id: s2
        url: $(node_url s2)
routing:
  default_strategy: priority
EOF
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.providers[] | select(.provider == "x5") | .healthy == false and .chain_id == 5'
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.candidates[].provider] == ["s1", "s2"]'
  assert_jq '.excluded | length == 1 and .[0].provider == "x5" and .[0].kind == "chain_id" and (.[0].reason | test("wrong chain id 5"))'
  # x5 is priority 1: were it not excluded it would serve every call.
  for _ in $(seq 8); do
    run --separate-stderr rpcroute call -p "$P" --json eth_blockNumber
    assert_status 0
    assert_jq '.meta.provider == "s1" and ([.meta.attempts[].provider] == ["s1"])'
    assert_jq '[.meta.excluded[] | select(.provider == "x5") | .kind] == ["chain_id"]'
  done
  run --separate-stderr rpcroute call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '.meta.provider == "s1"'
}

@test "nothing eligible: exit 3 / HTTP 503 with every exclusion's kind and reason (call --json, sidecar body, rank)" {
  local h
  h=$(node_height s1)
  # fd denies eth_getBalance; it stands at the anvil nodes' height so that nobody lags.
  start_fake fd --height "$h"
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    archival_threshold: 10
    providers:
      - id: s1
        url: $(node_url s1)
        archival: false
      - id: s2
        url: $(node_url s2)
        archival: false
      - id: x5
        url: $(node_url x5)
      - id: fd
        url: $(node_url fd)
        methods: {deny: ["eth_getBalance"]}
routing:
  default_strategy: load_balanced
EOF
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.healthy == 3'
  local kinds='[.[] | {(.provider): .kind}] | add == {"s1": "archive", "s2": "archive", "x5": "chain_id", "fd": "method"}'
  local reasons='all(.reason | type == "string" and length > 10)'

  run --separate-stderr rpcroute call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" 0x1
  assert_status 3
  assert_jq '.meta.provider == null and .meta.attempts == []'
  assert_jq ".meta.excluded | ($kinds) and ($reasons)"
  assert_jq '.meta.excluded[] | select(.provider == "s1") | .reason | test("not archival.*block 1")'
  assert_jq '.meta.excluded[] | select(.provider == "x5") | .reason | test("wrong chain id 5")'
  assert_jq '.meta.excluded[] | select(.provider == "fd") | .reason | test("denied")'
  assert_jq ".error.code == -32050 and (.error.data.excluded | ($kinds) and ($reasons))"
  assert_stderr_matches 'excluded s1: not archival'

  run --separate-stderr rpcroute rank -p "$P" -m eth_getBalance --json "$DEV_ACCOUNT" 0x1
  assert_status 0
  assert_jq ".candidates == [] and (.excluded | ($kinds) and ($reasons))"

  start_sidecar -p "$P"
  local body code
  body=$BATS_TEST_TMPDIR/body
  code=$(curl -s --max-time 30 -o "$body" -w '%{http_code}' -X POST -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["'"$DEV_ACCOUNT"'","0x1"]}' "$SC_URL/rpc/local")
  assert_equal "$code" 503 "HTTP status"
  output=$(<"$body")
  assert_jq '.id == 7 and .error.code == -32050 and .error.data.attempts == []'
  assert_jq ".error.data.excluded | ($kinds) and ($reasons)"
  # The same request at latest is served (by s1 or s2) through the same sidecar.
  code=$(curl -s --max-time 30 -o "$body" -w '%{http_code}' -X POST -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":8,"method":"eth_getBalance","params":["'"$DEV_ACCOUNT"'","latest"]}' "$SC_URL/rpc/local")
  assert_equal "$code" 200 "HTTP status for latest"
  output=$(<"$body")
  assert_jq '.id == 8 and (.result | test("^0x"))'
}

# ---------------------------------------------------------------------------------------------------
# 5. Method policies: broadcast, default timeouts

@test "broadcast: a raw transaction reaches both nodes; sending it again is the node's answer, not a 503" {
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 60000
    providers:
      - id: s1
        url: $(node_url s1)
      - id: s2
        url: $(node_url s2)
routing:
  default_strategy: priority
  method_overrides:
    eth_sendRawTransaction: {broadcast: true}
EOF
  local tx hash
  tx=$(timeout 60 "$CAST" mktx --private-key "$DEV_KEY" "$DEV_ACCOUNT2" --value 1 --rpc-url "$(node_url s1)")
  [[ $tx =~ ^0x[0-9a-f]+$ ]] || { echo "cast mktx: [$tx]" >&2; false; }
  hash=$("$CAST" keccak "$tx")
  run --separate-stderr rpcroute call -p "$P" --json eth_sendRawTransaction "$tx"
  assert_status 0
  assert_jq '.result == $h and .meta.broadcast == true' --arg h "$hash"
  # Both nodes have it (anvil automines it): s2 too, though priority would have sent it to s1 only.
  local n
  for n in s1 s2; do
    run node_rpc "$n" eth_getTransactionByHash "[\"$hash\"]"
    assert_status 0
    assert_jq '.result.hash == $h' --arg h "$hash"
  done

  run --separate-stderr rpcroute call -p "$P" --json eth_sendRawTransaction "$tx"
  assert_status 1
  assert_jq '.error.code != -32050 and (.error.message | test("nonce|known"; "i"))'
  assert_jq '[.meta.attempts[].class] | all(. == "deterministic")'
}

@test "default attempt timeout: eth_blockNumber gives up on a 6 s provider after 5 s and fails over; the provider's timeout_ms overrides it" {
  start_fake slow --mode delay --delay-ms 6000
  start_fake fast
  write_profile "$P" slow fast --strategy priority
  run --separate-stderr rpcroute call -p "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "fast"'
  assert_jq '[.meta.attempts[].provider] == ["slow", "fast"] and .meta.attempts[0].outcome == "timeout"'
  assert_jq '.meta.attempts[0].latency_ms >= 4500 and .meta.attempts[0].latency_ms < 5990'

  # A timeout opens the breaker at once (issue 15.3): the next call skips slow.
  run --separate-stderr rpcroute call -p "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.provider == "fast" and (.meta.attempts | length) == 1'
  assert_jq '[.meta.excluded[] | select(.provider == "slow" and .kind == "breaker")] | length == 1'

  # The provider's own timeout_ms wins over the method default (a fresh state: no open breaker).
  write_profile "$P" slow,timeout_ms=1500 fast --strategy priority
  run --separate-stderr rpcroute call -p "$P" --no-state --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.provider == "fast" and .meta.attempts[0].outcome == "timeout"'
  assert_jq '.meta.attempts[0].latency_ms >= 1000 and .meta.attempts[0].latency_ms < 4000'
}
