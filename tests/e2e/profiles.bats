#!/usr/bin/env bats
# Profiles: lookup, validation errors (exit 2, one line naming the problem), secrets never printed,
# URL redaction.

# jq programs are single-quoted on purpose; $stderr and $stderr_lines come from bats; each test
# runs in its own subshell, so exports there are meant to be local.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers

SECRET=s3cr3t-e2e-value-5f9c2a

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
}

setup() {
  e2e_setup
  start_fake f1 --height 100
  start_fake f2 --height 100
}

teardown() {
  stop_all
}

# One-line usage error: exit 2, exactly one line on stderr, starting "rpcroute: error:".
assert_usage_error() { # WORD_THE_LINE_MUST_NAME
  assert_status 2
  assert_stderr_lines 1
  assert_stderr_matches '^rpcroute: error: '
  if [[ $stderr != *"$1"* ]]; then
    echo "the error does not name '$1'" >&2
    _dump_run
    return 1
  fi
}

# A valid profile with providers whose URL path, query and userinfo hold $SECRET (through
# ${RPCROUTE_E2E_KEY}).
secret_profile() {
  export RPCROUTE_E2E_KEY=$SECRET
  cat >"$P" <<EOF
name: secretive
chains:
  local:
    chain_id: 31337
    providers:
      - id: keyed
        url: http://127.0.0.1:$(node_port f1)/v2/\${RPCROUTE_E2E_KEY}?apikey=\${RPCROUTE_E2E_KEY}
        priority: 1
      - id: plain
        url: $(node_url f2)
        priority: 2
      - id: userinfo
        url: http://user:\${RPCROUTE_E2E_KEY}@127.0.0.1:$(node_port f2)
        priority: 3
EOF
}

# ---------------------------------------------------------------------------------------------------
# Lookup

@test "profiles validate: a good profile is ok" {
  write_profile "$P" f1 f2
  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 0
  [[ $output == *ok* ]] || { _dump_run; false; }
}

@test "profiles validate: the shipped profiles/local.yaml is ok" {
  run --separate-stderr rpcroute profiles validate "$REPO/profiles/local.yaml"
  assert_status 0
}

@test "--profile NAME is found in RPCROUTE_PROFILES; RPCROUTE_PROFILE sets the default" {
  write_profile "$RPCROUTE_PROFILES/mine.yaml" --name mine f1 f2
  run --separate-stderr rpcroute call --profile mine eth_blockNumber
  assert_status 0
  assert_equal "$output" '"0x64"' "result"
  export RPCROUTE_PROFILE=mine
  run --separate-stderr rpcroute call eth_blockNumber
  assert_status 0
  assert_equal "$output" '"0x64"' "result"
}

@test "profiles list shows profiles from RPCROUTE_PROFILES and the embedded public one" {
  write_profile "$RPCROUTE_PROFILES/mine.yaml" --name mine f1
  run --separate-stderr rpcroute profiles list
  assert_status 0
  [[ $output == *mine* ]] || { _dump_run; false; }
  [[ $output == *public* ]] || { _dump_run; false; }
}

@test "profiles show public works (embedded default)" {
  run --separate-stderr rpcroute profiles show public
  assert_status 0
  run --separate-stderr rpcroute profiles show public --json
  assert_status 0
  assert_jq 'type == "object"'
}

@test "an unknown profile name: exit 2, one line naming it" {
  run --separate-stderr rpcroute call --profile no_such_profile_e2e eth_blockNumber
  assert_usage_error no_such_profile_e2e
}

@test "--chain selects by name or decimal chain id; default is the first chain" {
  # A node of chain 5 for the second chain: `call` checks each provider's chain id.
  start_fake f5 --height 100 --chain-id 5
  cat >"$P" <<EOF
name: two
chains:
  first:
    chain_id: 31337
    providers:
      - { id: f1, url: $(node_url f1) }
  second:
    chain_id: 5
    providers:
      - { id: f2, url: $(node_url f5) }
EOF
  run --separate-stderr rpcroute call --profile "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.chain == "first" and .meta.chain_id == 31337 and .meta.provider == "f1"'
  run --separate-stderr rpcroute call --profile "$P" --chain second --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.chain == "second" and .meta.provider == "f2"'
  run --separate-stderr rpcroute call --profile "$P" --chain 5 --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.chain == "second" and .meta.chain_id == 5 and .meta.provider == "f2"'
  run --separate-stderr rpcroute call --profile "$P" --chain 5 eth_chainId
  assert_status 0
  assert_equal "$output" '"0x5"' "eth_chainId of chain 5"
}

# ---------------------------------------------------------------------------------------------------
# Errors: exit 2, one line, naming the problem

@test "unknown key in a profile: call exits 2 naming the key; validate gives file:line:column" {
  cat >"$P" <<EOF
name: bad
chains:
  local:
    chain_id: 31337
    providers:
      - id: f1
        url: $(node_url f1)
        colour: red
EOF
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_usage_error colour

  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 2
  local all="$output"$'\n'"$stderr"
  [[ $all =~ $P:8:[0-9]+:\ .*colour ]] || { echo "want $P:8:COLUMN: ... colour" >&2; _dump_run; false; }
}

@test "wrong type in a profile: exit 2 naming the key" {
  cat >"$P" <<EOF
name: bad
chains:
  local:
    chain_id: 31337
    providers:
      - id: f1
        url: $(node_url f1)
        priority: high
EOF
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_usage_error priority
  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 2
  local all="$output"$'\n'"$stderr"
  [[ $all =~ $P:8:[0-9]+: ]] || { _dump_run; false; }
}

@test "duplicate provider ids: exit 2 naming the id" {
  cat >"$P" <<EOF
name: bad
chains:
  local:
    chain_id: 31337
    providers:
      - { id: twin, url: $(node_url f1) }
      - { id: twin, url: $(node_url f2) }
EOF
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_usage_error twin
  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 2
}

@test "unknown strategy in a profile: exit 2 naming it" {
  write_profile "$P" f1 --strategy quickest_e2e
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_usage_error quickest_e2e
  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 2
}

@test "unknown chain: exit 2, one line naming it" {
  write_profile "$P" f1 f2
  run --separate-stderr rpcroute call --profile "$P" --chain no_such_chain_e2e eth_blockNumber
  assert_usage_error no_such_chain_e2e
  run --separate-stderr rpcroute call --profile "$P" --chain 424242 eth_blockNumber
  assert_usage_error 424242
}

@test "unknown --strategy: exit 2, one line naming it" {
  write_profile "$P" f1 f2
  run --separate-stderr rpcroute call --profile "$P" --strategy fastestest eth_blockNumber
  assert_usage_error fastestest
  assert_equal "$(fake_requests f1)$(fake_requests f2)" 00 "upstream requests"
}

@test "unset \${VAR} in a URL: exit 2, one line naming the variable" {
  unset RPCROUTE_E2E_UNSET_VAR
  cat >"$P" <<EOF
name: bad
chains:
  local:
    chain_id: 31337
    providers:
      - id: f1
        url: $(node_url f1)/\${RPCROUTE_E2E_UNSET_VAR}
EOF
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_usage_error RPCROUTE_E2E_UNSET_VAR
}

# ---------------------------------------------------------------------------------------------------
# Secrets

@test "secrets: a config error elsewhere does not print the value of a variable" {
  secret_profile
  run --separate-stderr rpcroute call --profile "$P" --chain no_such_chain_e2e eth_blockNumber
  assert_usage_error no_such_chain_e2e
  refute_output_contains "$SECRET"
  run --separate-stderr rpcroute call --profile "$P" --strategy nope_e2e eth_blockNumber
  assert_status 2
  refute_output_contains "$SECRET"
  # The same variable also used in a profile with an error in it.
  printf '        bogus_key: 1\n' >>"$P"
  run --separate-stderr rpcroute call --profile "$P" eth_blockNumber
  assert_usage_error bogus_key
  refute_output_contains "$SECRET"
  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 2
  refute_output_contains "$SECRET"
}

@test "secrets: failed attempts, --json, -v and the state file do not show the URL path" {
  secret_profile
  fake_control f1 '{"mode":"status","status":503}'
  run --separate-stderr rpcroute call --profile "$P" --strategy priority -v --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.attempts[0].provider == "keyed" and .meta.attempts[0].http_status == 503'
  refute_output_contains "$SECRET"
  fake_control f2 '{"mode":"status","status":503}'
  run --separate-stderr rpcroute call --profile "$P" --strategy priority -v eth_blockNumber
  assert_status 3
  refute_output_contains "$SECRET"
  if grep -aqF "$SECRET" "$RPCROUTE_STATE" "$RPCROUTE_STATE.journal" 2>/dev/null; then
    echo "the state file contains the secret" >&2
    false
  fi
}

@test "profiles show redacts URL paths and queries, keeps plain URLs" {
  secret_profile
  local port
  port=$(node_port f1)
  run --separate-stderr rpcroute profiles show "$P"
  assert_status 0
  refute_output_contains "$SECRET"
  refute_output_contains "/v2"
  refute_output_contains "apikey"
  refute_output_contains "user:"
  [[ $output == *"http://127.0.0.1:$port/***"* ]] || { _dump_run; false; }
  [[ $output == *"$(node_url f2)"* ]] || { _dump_run; false; }

  run --separate-stderr rpcroute profiles show "$P" --json
  assert_status 0
  refute_output_contains "$SECRET"
  refute_output_contains "apikey"
  grep -qF "http://127.0.0.1:$port/***" <<<"$output" || { _dump_run; false; }
}

@test "the secret URL is used for the request: the provider answers through it" {
  secret_profile
  run --separate-stderr rpcroute call --profile "$P" --provider keyed --json eth_blockNumber
  assert_status 0
  assert_jq '.meta.provider == "keyed" and .result == "0x64"'
  refute_output_contains "$SECRET"
}

# ---------------------------------------------------------------------------------------------------
# Hostile profiles: size, file kind, alias expansion, depth

# Runs rpcroute ARGS bounded in time (a FIFO nobody writes to would hang a reader) and checks the
# one-line usage error naming WORD.
refuses_profile() { # WORD ARGS...
  local word=$1
  shift
  run --separate-stderr timeout 10 "$RPCROUTE_BIN" "$@"
  assert_usage_error "$word"
}

@test "a FIFO, /dev/zero or a profile over 1 MiB is refused at once (exit 2), by call and profiles validate" {
  local fifo=$BATS_TEST_TMPDIR/fifo.yaml big=$BATS_TEST_TMPDIR/big.yaml
  mkfifo "$fifo"
  refuses_profile "not a regular file" call -p "$fifo" eth_blockNumber
  refuses_profile "not a regular file" profiles validate "$fifo"
  refuses_profile "not a regular file" call -p /dev/zero eth_blockNumber
  refuses_profile "not a regular file" profiles show /dev/zero
  # By name, the search path passes over it.
  mkfifo "$RPCROUTE_PROFILES/piped.yaml"
  refuses_profile "unknown profile 'piped'" call -p piped eth_blockNumber
  # Valid YAML (a comment pads it) just over the bound.
  write_profile "$big" f1
  { printf '#'; head -c $((1024 * 1024)) /dev/zero | tr '\0' 'x'; printf '\n'; } >>"$big"
  refuses_profile "larger than 1024 KiB" profiles validate "$big"
  refuses_profile "larger than 1024 KiB" call -p "$big" eth_blockNumber
  # Under it, the same profile loads.
  write_profile "$big" f1
  { printf '#'; head -c $((1000 * 1000)) /dev/zero | tr '\0' 'x'; printf '\n'; } >>"$big"
  run --separate-stderr rpcroute profiles validate "$big"
  assert_status 0
}

@test "aliases that expand past 100 000 nodes or 4 MiB of text are refused with file:line:column" {
  # A billion laughs: 10 levels of 10 aliases, under 1 KB of YAML.
  write_profile "$P.base" f1
  {
    cat "$P.base"
    echo 'x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]'
    local i
    for i in 1 2 3 4 5 6 7 8 9; do
      echo "x$i: &a$i [*a$((i - 1)), *a$((i - 1)), *a$((i - 1)), *a$((i - 1)), *a$((i - 1)), *a$((i - 1)), *a$((i - 1)), *a$((i - 1)), *a$((i - 1)), *a$((i - 1))]"
    done
  } >"$P"
  ((($(wc -c <"$P")) < 2000))
  refuses_profile "nodes once aliases are expanded" profiles validate "$P"
  [[ $stderr =~ $P:[0-9]+:[0-9]+:\  ]] || { _dump_run; false; }
  refuses_profile "nodes once aliases are expanded" call -p "$P" eth_blockNumber
  # One 512 KiB string read through ten aliases.
  {
    printf 's: &s %s\n' "$(head -c $((512 * 1024)) /dev/zero | tr '\0' 'm')"
    cat "$P.base"
    echo 'x: [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s]'
  } >"$P"
  refuses_profile "MiB of text once aliases are expanded" profiles validate "$P"
}

@test "nesting too deep gets a real message with file:line:column, not \"bad file\"" {
  local deep
  write_profile "$P.base" f1
  deep=$(printf '%*s' 3000 '' | tr ' ' '[')
  { cat "$P.base"; echo "x: $deep"; } >"$P"
  refuses_profile "nested more than 64 levels deep" profiles validate "$P"
  [[ $stderr =~ $P:[0-9]+:[0-9]+:\  ]] || { _dump_run; false; }
  [[ $stderr != *"bad file"* ]] || { _dump_run; false; }
  deep=$(printf '%*s' 100 '' | tr ' ' '[')$(printf '%*s' 100 '' | tr ' ' ']')
  { cat "$P.base"; echo "x: $deep"; } >"$P"
  refuses_profile "nested more than 64 levels deep" call -p "$P" eth_blockNumber
}
