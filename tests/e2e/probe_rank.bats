#!/usr/bin/env bats
# rpcroute probe and rpcroute rank: lag and chain-id exclusion, --min-healthy, the strategies'
# orders and first-choice probabilities (after bench), breaker and rate-limit tiers, --explain.
# Real anvil nodes for lag and chain id, the fake upstream for latency and faults.

# jq programs are single-quoted on purpose; $stderr and $stderr_lines come from bats; each test
# runs in its own subshell, so exports there are meant to be local.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN ANVIL
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

# Mines N blocks on the anvil node NAME.
anvil_mine() { # NAME N
  local url
  url=$(node_url "$1") || return 1
  curl -sf --max-time 5 -X POST -H 'content-type: application/json' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"anvil_mine\",\"params\":[\"$(printf '0x%x' "$2")\"]}" \
    "$url" | grep -q '"result"'
}

# Three fakes d0 d20 d60 answering after 0, 20 and 60 ms, in a profile $P (listed slowest first, so
# that profile order cannot pass for a latency order), with latency samples seeded by bench.
seeded_latency_fakes() {
  start_fake d0 --delay-ms 0
  start_fake d20 --delay-ms 20
  start_fake d60 --delay-ms 60
  write_profile "$P" d60 d20 d0
  run --separate-stderr rpcroute bench -p "$P" --methods eth_blockNumber --requests 10 --concurrency 2
  assert_status 0
}

# The first-choice probabilities add up to 1. rank prints each rounded to 6 decimals, so the sum of
# the printed values may be off by up to 5e-7 per candidate: 1e-6 plus that rounding allowance.
SUMS_TO_ONE='(.candidates | length) as $n | ([.candidates[].first_probability] | add) - 1 | fabs < 1e-6 + 5e-7 * $n'

# ---------------------------------------------------------------------------------------------------
# probe

@test "probe: a lagging node and a wrong-chain node are unhealthy; rank and call route around them" {
  start_anvil good1
  start_anvil good2
  start_anvil behind
  start_anvil other --chain-id 5
  anvil_mine good1 20
  anvil_mine good2 20
  anvil_mine behind 5
  write_profile "$P" good1 good2 behind other

  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.chain == "local" and .chain_id == 31337 and .healthy == 2 and .min_healthy == 1'
  assert_jq '[.providers[].provider] == ["good1", "good2", "behind", "other"]'
  assert_jq '[.providers[] | select(.provider | IN("good1", "good2")) | .healthy and .reachable and .height == 20 and .lag == 0] == [true, true]'
  assert_jq '.providers[] | select(.provider == "behind") | .healthy == false and .reachable and .height == 5 and .lag >= 15 and (.reason | test("lagging"))'
  assert_jq '.providers[] | select(.provider == "other") | .healthy == false and .reachable and .chain_id == 5 and (.reason | test("wrong chain id 5"))'
  assert_jq '[.providers[] | select(.healthy) | .chain_id] == [31337, 31337]'

  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.candidates[].provider] | sort == ["good1", "good2"]'
  assert_jq '[.excluded[] | select(.provider == "behind") | .reason | test("lagging")] == [true]'
  assert_jq '[.excluded[] | select(.provider == "other") | .reason | test("wrong chain id")] == [true]'

  run --separate-stderr rpcroute rank -p "$P"
  assert_status 0
  local excluded
  excluded=$(sed -n '/^excluded:/,$p' <<<"$output")
  [[ -n $excluded ]] || { echo "no 'excluded:' section" >&2; _dump_run; false; }
  grep -Eq '^ +behind +lagging' <<<"$excluded" || { _dump_run; false; }
  grep -Eq '^ +other +wrong chain id 5' <<<"$excluded" || { _dump_run; false; }
  # The table of candidates (before "excluded:") names neither.
  ! sed '/^excluded:/,$d' <<<"$output" | grep -Eq '(^| )(behind|other)( |$)' || { _dump_run; false; }

  for _ in $(seq 10); do
    run --separate-stderr rpcroute call -p "$P" --strategy load_balanced --json eth_blockNumber
    assert_status 0
    assert_jq '.meta.provider | IN("good1", "good2")'
    assert_jq '.result == "0x14"'
    assert_jq '[.meta.attempts[].provider | select(IN("behind", "other"))] == []'
  done
}

@test "probe: a lag exclusion lasts while the heights are fresh; rank and the sidecar's /status agree on it" {
  # 3 blocks behind with one-second blocks: the old rule let the lagging height's estimate catch up
  # within a second or two, while a polling sidecar kept excluding it.
  start_fake hi1 --height 20
  start_fake hi2 --height 20
  start_fake lo --height 17
  write_profile "$P" hi1 hi2 lo
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.providers[] | select(.provider == "lo") | .healthy == false and .lag == 3'
  start_serve sc -p "$P" --state "$RPCROUTE_STATE"
  sleep 4
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.candidates[].provider] | sort == ["hi1", "hi2"]'
  assert_jq '.excluded | length == 1 and .[0].provider == "lo" and .[0].kind == "lag" and (.[0].reason | test("lagging 3 blocks behind"))'
  run curl -sf --max-time 10 "$(node_url sc)/status"
  assert_status 0
  assert_jq '[.profiles[] | .excluded[] | select(.provider == "lo") | .kind] == ["lag"]'
  assert_jq '[.profiles[] | .candidates[].provider] | sort == ["hi1", "hi2"]'
}

@test "probe: --min-healthy decides the exit status; all providers dead exits 3" {
  start_fake f1
  start_fake f2
  dead_port f3
  write_profile "$P" f1 f2 f3

  run --separate-stderr rpcroute probe -p "$P" --min-healthy 3 --json
  assert_status 3
  assert_jq '.healthy == 2 and .min_healthy == 3'
  assert_jq '.providers[] | select(.provider == "f3") | .healthy == false and .reachable == false'
  assert_jq '[.providers[] | select(.provider != "f3") | .healthy and .height == 100 and .chain_id == 31337] == [true, true]'

  run --separate-stderr rpcroute probe -p "$P" --min-healthy 2 --json
  assert_status 0
  assert_jq '.healthy == 2 and .min_healthy == 2'

  # The table form gives the same status and a summary line.
  run --separate-stderr rpcroute probe -p "$P" --min-healthy 3
  assert_status 3
  [[ $output == *"2 of 3 provider(s) healthy"* ]] || { _dump_run; false; }

  dead_port x1
  dead_port x2
  write_profile "$P" x1 x2
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 3
  assert_jq '.healthy == 0 and (.providers | length == 2)'
  assert_jq '[.providers[] | .healthy == false and .reachable == false and .height == null and (.reason | length > 0)] == [true, true]'
}

@test "probe: a chain-id exclusion lifts when a later probe sees the right chain" {
  start_fake f1 --chain-id 5
  start_fake f2
  write_profile "$P" f1 f2

  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.providers[] | select(.provider == "f1") | .healthy == false and (.reason | test("wrong chain id 5"))'
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.candidates[].provider] == ["f2"]'
  assert_jq '[.excluded[] | select(.provider == "f1") | .reason | test("wrong chain id 5")] == [true]'

  fake_control f1 '{"chain_id":31337}'
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0
  assert_jq '.healthy == 2'
  assert_jq '.providers[] | select(.provider == "f1") | .healthy and .chain_id == 31337'
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.candidates[].provider] | sort == ["f1", "f2"]'
  assert_jq '.excluded == []'
}

# ---------------------------------------------------------------------------------------------------
# rank: strategies

@test "rank fastest after bench: ascending p50, the fastest tried first, and call uses it" {
  seeded_latency_fakes
  run --separate-stderr rpcroute rank -p "$P" --strategy fastest --json
  assert_status 0
  assert_jq '.strategy == "fastest" and .method == "eth_blockNumber"'
  assert_jq '[.candidates[].provider] == ["d0", "d20", "d60"]'
  assert_jq '[.candidates[].position] == [1, 2, 3]'
  assert_jq '[.candidates[].cold] == [false, false, false]'
  assert_jq '[.candidates[].samples | . >= 10] == [true, true, true]'
  assert_jq '[.candidates[].p50_ms] as $p | $p[0] < $p[1] and $p[1] < $p[2]'
  assert_jq '.candidates[1].p50_ms >= 20 and .candidates[2].p50_ms >= 60'
  assert_jq '[.candidates[] | .metric == .p50_ms] == [true, true, true]'
  assert_jq '[.candidates[].first_probability] == [1, 0, 0]'

  run --separate-stderr rpcroute call -p "$P" --strategy fastest --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.provider == "d0" and (.meta.attempts | length == 1)'
}

@test "rank latency_weighted after bench: probabilities sum to 1, the fastest is likeliest, explore floor" {
  seeded_latency_fakes
  run --separate-stderr rpcroute rank -p "$P" --strategy latency_weighted --json
  assert_status 0
  assert_jq '.candidates | length == 3'
  assert_jq "$SUMS_TO_ONE"
  assert_jq '(.candidates | max_by(.first_probability) | .first_probability) as $m
             | .candidates[] | select(.provider == "d0") | .first_probability == $m'
  assert_jq '[.candidates[] | select(.provider == "d0") | .first_probability]
             > [.candidates[] | select(.provider == "d60") | .first_probability]'
  assert_jq '[.candidates[].metric | . >= 0.05] == [true, true, true]'
  assert_jq '[.candidates[].cold] == [false, false, false]'

  # With ms_floor 30 (the default) d0 and d20 tie; with a 1 ms floor d0 is strictly the likeliest.
  write_profile "$P" d60 d20 d0 --extra 'strategies: {latency_weighted: {ms_floor: 1}}'
  run --separate-stderr rpcroute rank -p "$P" --strategy latency_weighted --json
  assert_status 0
  assert_jq "$SUMS_TO_ONE"
  assert_jq '([.candidates[] | select(.provider == "d0") | .first_probability][0]) as $d0
             | [.candidates[] | select(.provider != "d0") | .first_probability | . < $d0 and . < 0.5] == [true, true]'
  assert_jq '[.candidates[].metric | . >= 0.05] == [true, true, true]'
}

@test "rank weighted: first-choice probability is weight share; an open breaker's share is redistributed" {
  start_fake w60
  start_fake w30
  start_fake w10
  write_profile "$P" w60,weight=60 w30,weight=30 w10,weight=10 \
    --extra 'health: {circuit_breaker: {failure_threshold: 1, recovery_timeout_ms: 60000}}'
  run --separate-stderr rpcroute rank -p "$P" --strategy weighted --json
  assert_status 0
  assert_jq '.strategy == "weighted" and .excluded == []'
  assert_jq '[.candidates[] | {(.provider): .first_probability}] | add
             | (.w60 - 0.6 | fabs) < 1e-6 and (.w30 - 0.3 | fabs) < 1e-6 and (.w10 - 0.1 | fabs) < 1e-6'
  assert_jq '[.candidates[] | select(.provider == "w60") | .weight] == [60]'

  fake_control w60 '{"mode":"status","status":503}'
  run --separate-stderr rpcroute call -p "$P" --provider w60 --json eth_blockNumber
  assert_status 3
  run --separate-stderr rpcroute rank -p "$P" --strategy weighted --json
  assert_status 0
  assert_jq '[.candidates[].provider] | sort == ["w10", "w30"]'
  assert_jq '[.candidates[] | {(.provider): .first_probability}] | add
             | (.w30 - 0.75 | fabs) < 1e-6 and (.w10 - 0.25 | fabs) < 1e-6'
  assert_jq '.excluded | length == 1'
  assert_jq '.excluded[0] | .provider == "w60" and (.reason | test("circuit breaker open"))'
  assert_jq '.excluded[0].retry_in_ms > 0 and .excluded[0].retry_in_ms <= 63000'
  # Most of the recovery time is still ahead (the breaker opened a moment ago).
  assert_jq '.excluded[0].retry_in_ms > 50000'
}

@test "rank priority follows priority values; round_robin moves its cursor with each call" {
  start_fake f1
  start_fake f2
  start_fake f3
  write_profile "$P" f1,priority=3 f2,priority=1 f3,priority=2
  run --separate-stderr rpcroute rank -p "$P" --strategy priority --json
  assert_status 0
  assert_jq '[.candidates[].provider] == ["f2", "f3", "f1"]'
  assert_jq '[.candidates[].priority] == [1, 2, 3] and [.candidates[].metric] == [1, 2, 3]'
  assert_jq '[.candidates[].first_probability] == [1, 0, 0]'

  run --separate-stderr rpcroute rank -p "$P" --strategy round_robin --json
  assert_status 0
  local cursor0 first0
  cursor0=$(jq '.candidates[0].metric' <<<"$output")
  first0=$(jq -r '.candidates[0].provider' <<<"$output")
  assert_jq '[.candidates[].first_probability] == [1, 0, 0]'

  run --separate-stderr rpcroute call -p "$P" --strategy round_robin --json eth_blockNumber
  assert_status 0
  local p1 p2
  p1=$(jq -r .meta.provider <<<"$output")
  assert_equal "$p1" "$first0" "first round_robin call (rank said first)"
  run --separate-stderr rpcroute call -p "$P" --strategy round_robin --json eth_blockNumber
  assert_status 0
  p2=$(jq -r .meta.provider <<<"$output")
  [[ $p1 != "$p2" ]] || { echo "both round_robin calls went to $p1" >&2; false; }

  run --separate-stderr rpcroute rank -p "$P" --strategy round_robin --json
  assert_status 0
  assert_jq '[.candidates[].metric | . == (($c + 2) % 3)] == [true, true, true]' --argjson c "$cursor0"
  assert_jq '.candidates[0].provider != $a and .candidates[0].provider != $b' --arg a "$p1" --arg b "$p2"
}

@test "rank --explain: one sentence per candidate, one line per excluded provider" {
  start_fake f1
  start_fake f2
  start_fake f3 --chain-id 5
  write_profile "$P" f1 f2 f3
  run --separate-stderr rpcroute probe -p "$P" --json
  assert_status 0

  run --separate-stderr rpcroute rank -p "$P" --strategy priority --explain
  assert_status 0
  local sentences excluded
  sentences=$(grep -Ec '^#[0-9]+ ' <<<"$output" || true)
  assert_equal "$sentences" 2 "lines starting with #N"
  grep -Eq '^#1 f1[: ]' <<<"$output" || { _dump_run; false; }
  grep -Eq '^#2 f2[: ]' <<<"$output" || { _dump_run; false; }
  grep -Eq '^#1 .*priority is 1' <<<"$output" || { _dump_run; false; }
  excluded=$(grep -c 'is excluded:' <<<"$output" || true)
  assert_equal "$excluded" 1 "'is excluded:' lines"
  grep -Eq '^f3 is excluded: wrong chain id 5' <<<"$output" || { _dump_run; false; }

  run --separate-stderr rpcroute rank -p "$P" --strategy priority --explain --json
  assert_status 0
  assert_jq '.candidates | length == 2'
  assert_jq '[.candidates[] | .position as $n | (.explain | type == "string" and startswith("#\($n) "))] | all'
  assert_jq '.candidates[0].explain | startswith("#1 f1")'

  # Without --explain there is no explain member.
  run --separate-stderr rpcroute rank -p "$P" --strategy priority --json
  assert_status 0
  assert_jq '[.candidates[] | has("explain")] | any | not'
}

@test "rank: a provider rate-limited by a 429 drops to tier 2 behind the healthy ones" {
  start_fake f1
  start_fake f2
  start_fake f3
  write_profile "$P" f1,priority=1 f2,priority=2 f3,priority=3
  fake_control f1 '{"queue":[{"mode":"status","status":429,"retry_after":60}]}'

  local before
  before=$(now_ms)
  run --separate-stderr rpcroute call -p "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.attempts[0].provider == "f1" and .meta.provider == "f2"'

  run --separate-stderr rpcroute rank -p "$P" --strategy priority --json
  assert_status 0
  assert_jq '[.candidates[].provider] == ["f2", "f3", "f1"]'
  assert_jq '[.candidates[].tier] == [1, 1, 2]'
  assert_jq '.candidates[2] | .tier_name == "rate_limited" and .breaker == "closed"'
  assert_jq '[.candidates[0:2][].rate_limited_until_ms] == [0, 0]'
  assert_jq '.candidates[2].rate_limited_until_ms > $now' --argjson now "$(now_ms)"
  # Retry-After 60: the deadline is about a minute after the call.
  assert_jq '.candidates[2].rate_limited_until_ms >= $t + 55000 and .candidates[2].rate_limited_until_ms <= $t + 65000' \
    --argjson t "$before"
  assert_jq '.excluded == []'
}

# ---------------------------------------------------------------------------------------------------
# Errors

@test "rank --strategy nope and probe -c nochain are usage errors (exit 2)" {
  dead_port f1
  write_profile "$P" f1
  run --separate-stderr rpcroute rank -p "$P" --strategy nope
  assert_status 2
  assert_stderr_lines 1
  assert_stderr_matches "nope"
  [[ -z $output ]] || { _dump_run; false; }

  run --separate-stderr rpcroute probe -p "$P" -c nochain
  assert_status 2
  assert_stderr_matches "nochain"
  [[ -z $output ]] || { _dump_run; false; }

  run --separate-stderr rpcroute rank -p "$P" -c nochain --json
  assert_status 2
  assert_stderr_matches "nochain"
}
