#!/usr/bin/env bats
# The state file: where it lives, its mode and shape, concurrent writers, corruption, reset.

# jq programs are single-quoted on purpose; $stderr and $stderr_lines come from bats; each test
# runs in its own subshell, so exports there are meant to be local.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
}

setup() {
  e2e_setup
  start_fake f1 --height 100
  start_fake f2 --height 100
  start_fake f3 --height 100
  write_profile "$P" f1 f2 f3
}

teardown() {
  stop_all
}

# ---------------------------------------------------------------------------------------------------
# Where the state file is

@test "state path: --state wins over RPCROUTE_STATE and XDG_STATE_HOME" {
  run --separate-stderr rpcroute state path --state "$BATS_TEST_TMPDIR/flag.json"
  assert_status 0
  assert_equal "$output" "$BATS_TEST_TMPDIR/flag.json" "path"
}

@test "state path: RPCROUTE_STATE wins over XDG_STATE_HOME" {
  run --separate-stderr rpcroute state path
  assert_status 0
  assert_equal "$output" "$BATS_TEST_TMPDIR/state.json" "path"
}

@test "state path: XDG_STATE_HOME/rpcroute/state.json, else ~/.local/state/rpcroute/state.json" {
  unset RPCROUTE_STATE
  run --separate-stderr rpcroute state path
  assert_status 0
  assert_equal "$output" "$XDG_STATE_HOME/rpcroute/state.json" "path"
  unset XDG_STATE_HOME
  run --separate-stderr rpcroute state path
  assert_status 0
  assert_equal "$output" "$HOME/.local/state/rpcroute/state.json" "path"
}

@test "call writes the state file at --state, RPCROUTE_STATE or XDG_STATE_HOME" {
  run --separate-stderr rpcroute call --profile "$P" --state "$BATS_TEST_TMPDIR/flag.json" eth_blockNumber
  assert_status 0
  [[ -f $BATS_TEST_TMPDIR/flag.json ]]
  [[ ! -e $RPCROUTE_STATE ]]

  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 0
  [[ -f $RPCROUTE_STATE ]]

  unset RPCROUTE_STATE
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 0
  [[ -f $XDG_STATE_HOME/rpcroute/state.json ]]
}

@test "--no-state reads and writes no state file" {
  run --separate-stderr rpcroute call --profile "$P" --no-state eth_blockNumber
  assert_status 0
  assert_equal "$output" '"0x64"' "result"
  [[ ! -e $RPCROUTE_STATE ]]
  [[ ! -e $XDG_STATE_HOME/rpcroute/state.json ]]
  [[ ! -e $HOME/.local/state/rpcroute/state.json ]]
}

# ---------------------------------------------------------------------------------------------------
# Content

@test "the state file has mode 0600, version 1, and keys without the URL" {
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 0
  assert_equal "$(stat -c %a "$RPCROUTE_STATE")" 600 "mode"
  local json
  json=$(cat "$RPCROUTE_STATE")
  assert_json "$json" '.version == 1'
  assert_json "$json" '.providers | length >= 1'
  # "<profile>/<chain>/<provider>#<fingerprint>"; a profile given by path is named after its file.
  assert_json "$json" '[.providers | to_entries[] | .key == "\(.value.profile)/local/\(.value.provider)#\(.value.fingerprint)"] | all'
  assert_json "$json" '[.providers[] | .chain == "local" and (.provider | IN("f1", "f2", "f3")) and (.fingerprint | length > 0)] | all'
  local port
  for port in $(node_port f1) $(node_port f2) $(node_port f3); do
    if grep -q "127.0.0.1:$port" "$RPCROUTE_STATE"; then
      echo "state file contains a provider URL (port $port)" >&2
      cat "$RPCROUTE_STATE" >&2
      false
    fi
  done
}

@test "state show --json prints the file; a call adds one eth_blockNumber sample" {
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  local provider
  provider=$(jq -r '.meta.provider' <<<"$output")
  run --separate-stderr rpcroute state show --json
  assert_status 0
  assert_jq '.version == 1'
  assert_jq '[.providers[].methods[].samples | length] | add == 1'
  assert_jq '[.providers[] | select(.provider == $p) | .methods.eth_blockNumber.samples | length] == [1]' --arg p "$provider"
  assert_jq '[.providers[] | select(.provider == $p) | .methods.eth_blockNumber.samples[0][0]] | .[0] > 1600000000000' --arg p "$provider"
}

@test "state show prints a table naming the providers" {
  local i
  for i in 1 2 3 4 5 6; do
    rpcroute call --profile "$P" --strategy round_robin eth_blockNumber >/dev/null
  done
  run --separate-stderr rpcroute state show
  assert_status 0
  [[ $output == *f1* && $output == *f2* && $output == *f3* ]] || { _dump_run; false; }
}

@test "round_robin: the cursor persists across processes" {
  local i providers=()
  for i in 1 2 3; do
    run --separate-stderr rpcroute call --profile "$P" --strategy round_robin --json eth_blockNumber
    assert_status 0
    providers+=("$(jq -r '.meta.provider' <<<"$output")")
  done
  assert_equal "$(printf '%s\n' "${providers[@]}" | sort | tr '\n' ' ')" "f1 f2 f3 " "providers of three calls"
}

@test "32 parallel calls on one state file lose no sample and leave valid JSON" {
  # Some history first, so writers also have to merge with existing content.
  rpcroute call --profile "$P" eth_blockNumber >/dev/null
  rpcroute call --profile "$P" eth_blockNumber >/dev/null
  local before after i failed=0 pids=()
  before=$(sample_count)
  assert_equal "$before" 2 "samples before"
  for i in $(seq 32); do
    rpcroute call --profile "$P" eth_blockNumber >"$BATS_TEST_TMPDIR/out.$i" 2>"$BATS_TEST_TMPDIR/err.$i" &
    pids+=("$!")
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      failed=$((failed + 1))
      echo "call $((i + 1)) failed: $(cat "$BATS_TEST_TMPDIR/err.$((i + 1))")" >&2
    fi
  done
  assert_equal "$failed" 0 "failed calls"
  jq -e . "$RPCROUTE_STATE" >/dev/null
  after=$(sample_count)
  assert_equal "$after" $((before + 32)) "samples after"
  # Every process saw the same answer.
  assert_equal "$(cat "$BATS_TEST_TMPDIR"/out.* | sort -u)" '"0x64"' "outputs"
  # Nothing was left behind: no temporary files next to the state file.
  local leftovers
  leftovers=$(find "$(dirname "$RPCROUTE_STATE")" -maxdepth 1 -name 'state.json?*' ! -name '*.lock' | wc -l)
  assert_equal "$leftovers" 0 "temporary files left next to the state file"
}

# ---------------------------------------------------------------------------------------------------
# Damage and reset

@test "a corrupt state file is moved aside with a warning and the call still succeeds" {
  mkdir -p "$BATS_TEST_TMPDIR/st"
  export RPCROUTE_STATE=$BATS_TEST_TMPDIR/st/state.json
  printf '{not json' >"$RPCROUTE_STATE"
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 0
  assert_equal "$output" '"0x64"' "result"
  assert_stderr_matches '[Ww]arn|moved|corrupt|unusable'
  # The damaged content is kept somewhere in the folder, and the state file is fresh and valid.
  grep -rlF '{not json' "$BATS_TEST_TMPDIR/st" >/dev/null || { ls -la "$BATS_TEST_TMPDIR/st" >&2; false; }
  jq -e '.version == 1' "$RPCROUTE_STATE" >/dev/null
  # Moved aside once: the next call is quiet.
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 0
  assert_stderr_lines 0
}

@test "a state file of an unknown version is moved aside and a fresh state starts" {
  mkdir -p "$BATS_TEST_TMPDIR/st"
  export RPCROUTE_STATE=$BATS_TEST_TMPDIR/st/state.json
  printf '{"version": 99, "providers": {}}' >"$RPCROUTE_STATE"
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_status 0
  assert_stderr_matches '[Ww]arn|moved|corrupt|unusable'
  jq -e '.version == 1' "$RPCROUTE_STATE" >/dev/null
  grep -rlF '"version": 99' "$BATS_TEST_TMPDIR/st" >/dev/null
}

@test "state reset deletes all entries" {
  rpcroute call --profile "$P" eth_blockNumber >/dev/null
  rpcroute call --profile "$P" eth_blockNumber >/dev/null
  assert_equal "$(sample_count)" 2 "samples before reset"
  run --separate-stderr rpcroute state reset
  assert_status 0
  run --separate-stderr rpcroute state show --json
  assert_status 0
  assert_jq '(.providers // {}) == {} and ((.chains // {}) == {}) and ((.filters // {}) == {})'
  assert_equal "$(sample_count)" 0 "samples after reset"
}

@test "the breaker state survives between processes through the state file" {
  fake_control f1 '{"mode":"status","status":500}'
  write_profile "$P" f1 f2 --extra 'health: {circuit_breaker: {failure_threshold: 2, recovery_timeout_ms: 60000}}'
  rpcroute call --profile "$P" --strategy priority eth_blockNumber >/dev/null
  assert_json "$(state_entry f1)" '.breaker.state == "closed" and .breaker.failures == 1'
  rpcroute call --profile "$P" --strategy priority eth_blockNumber >/dev/null
  assert_json "$(state_entry f1)" '.breaker.state == "open"'
  # With --no-state the process knows nothing of it and tries f1 again.
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --no-state --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.attempts[0].provider == "f1"'
  # With the state it does not.
  run --separate-stderr rpcroute call --profile "$P" --strategy priority --json eth_blockNumber
  assert_status 0
  assert_jq '[.meta.attempts[].provider] == ["f2"]'
}
