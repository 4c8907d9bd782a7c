#!/usr/bin/env bats
# Operators' controls (issue 21): `rpcroute cordon` / `uncordon` take a provider out of (and back
# into) the routing of every process sharing the state file, the running sidecar included, within a
# second; `--for` expires by itself; `group: backup` providers serve only when no primary is
# usable. Traffic is counted at the fake upstreams (/_stats); the sidecars run with --no-probe so
# that every request a fake counts is a client's.

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

# N requests to the sidecar SC's /rpc/local on one kept connection, each answered 200 with a result.
send() { # N
  local urls=() i out
  for ((i = 0; i < $1; i++)); do urls+=("$(node_url sc)/rpc/local"); done
  out=$(curl -s --max-time 30 -X POST -H 'content-type: application/json' --data "$BN" \
    -w '\n%{http_code}\n' "${urls[@]}") || true
  assert_equal "$(grep -c '^200$' <<<"$out")" "$1" "requests answered 200"
  assert_equal "$(grep -c '"result":"0x64"' <<<"$out")" "$1" "requests answered with the head"
}

# Client requests a fake received (the sidecars here do not poll).
served() { fake_stat "$1" '.methods.eth_blockNumber // 0'; }

# Polls /status until its JSON satisfies FILTER, for at most LIMIT_MS; sets waited_ms.
status_until() { # FILTER LIMIT_MS
  local t0 body
  t0=$(now_ms)
  while :; do
    body=$(curl -s --max-time 5 "$(node_url sc)/status" || true)
    waited_ms=$(($(now_ms) - t0))
    jq -e "$1" <<<"$body" >/dev/null 2>&1 && return 0
    if ((waited_ms > $2)); then
      echo "/status never matched $1 in $waited_ms ms: $body" >&2
      return 1
    fi
    nap 0.05
  done
}

@test "cordon: the CLI stops the sidecar's traffic to a provider within 1 s; uncordon restores it" {
  start_fake f1 --height 100
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  start_serve sc -p "$P" --state "$RPCROUTE_STATE" --no-probe
  send 20
  (($(served f1) > 0 && $(served f2) > 0))

  local t0
  run rpcroute cordon f1 -p "$P" --reason "disk swap"
  t0=$(now_ms)
  assert_status 0
  [[ $output == *"f1 on local (profile profile): cordoned: disk swap (until uncordoned)"* ]]
  status_until '.cordons[0].provider == "f1"' 5000
  echo "the sidecar saw the cordon $waited_ms ms after the command returned" >&3
  ((waited_ms <= 1000))
  # One second after the command: not one more request reaches f1.
  local rest=$((1000 - ($(now_ms) - t0)))
  ((rest <= 0)) || nap "$(printf '0.%03d' "$rest")"
  fake_control f1 '{"reset_stats":true}'
  fake_control f2 '{"reset_stats":true}'
  send 20
  assert_equal "$(served f1)" 0 "requests to the cordoned f1"
  assert_equal "$(served f2)" 20 "requests to f2"

  # /status, rank and a one-shot call say the same: cordoned, why, until when.
  status_until '.cordons[0] | .reason == "disk swap" and .until_ms == null and .since_ms > 0' 1000
  status_until '[.profiles[0].excluded[] | select(.provider == "f1" and .kind == "cordon")] | length == 1' 1000
  status_until '[.health[0].providers[] | select(.provider == "f1") | .why] == ["excluded: cordoned: disk swap (until uncordoned)"]' 1000
  run rpcroute rank -p "$P"
  assert_status 0
  [[ $output == *"f1"*"cordoned: disk swap (until uncordoned)"* ]]
  run rpcroute call eth_blockNumber -p "$P" --provider f1
  assert_status 3
  [[ $output == *"cordoned: disk swap"* ]]

  # The sidecar's own saves (it is learning all along) keep the cordon: merged, not overwritten.
  kill -TERM "$(node_pid sc)"
  local deadline=$((SECONDS + 15))
  while kill -0 "$(node_pid sc)" 2>/dev/null && ((SECONDS < deadline)); do nap 0.05; done
  run rpcroute state show --json
  assert_jq '[.providers[] | select(.provider == "f1") | .cordon | .on and .reason == "disk swap"] == [true]'
  start_serve sc -p "$P" --state "$RPCROUTE_STATE" --no-probe
  status_until '.cordons[0].provider == "f1"' 5000

  run rpcroute uncordon f1 -p "$P"
  assert_status 0
  [[ $output == *"f1 on local (profile profile): back in routing"* ]]
  status_until '.cordons == []' 5000
  echo "the sidecar saw the uncordon $waited_ms ms after the command returned" >&3
  ((waited_ms <= 1000))
  fake_control f1 '{"reset_stats":true}'
  send 20
  (($(served f1) > 0))
  # Lifting again is harmless and says so.
  run rpcroute uncordon f1 -p "$P"
  assert_status 0
  [[ $output == *"(it was not cordoned)"* ]]
}

@test "cordon --for lifts itself; the reason is cleaned and bounded; bad input is a usage error" {
  start_fake f1 --height 100
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  start_serve sc -p "$P" --state "$RPCROUTE_STATE" --no-probe
  local long
  long=$(printf 'x%.0s' {1..300})
  run rpcroute cordon f1 -p "$P" --for 2s --reason $'evil\e[31m\nline '"$long" --json
  assert_status 0
  assert_jq '.cordoned and .providers == ["f1"] and (.until_ms - .t_ms) == 2000'
  assert_jq '.reason | startswith("evil[31mline x") and length == 200 and (explode | all(. >= 32 and . != 127))'
  status_until '.cordons[0].provider == "f1" and .cordons[0].until_ms != null' 5000
  run rpcroute rank -p "$P" --json
  assert_jq '[.excluded[] | select(.provider == "f1") | .reason | test("^cordoned: evil\\[31mline x+ \\(until [0-9-]+T[0-9:]+Z, in [0-9.]+s\\)$")] == [true]'
  assert_jq '[.excluded[] | select(.provider == "f1") | .retry_in_ms > 0 and .retry_in_ms <= 2000] == [true]'
  # Expired: back in routing everywhere, with no command.
  status_until '.cordons == []' 5000
  fake_control f1 '{"reset_stats":true}'
  send 20
  (($(served f1) > 0))
  run rpcroute rank -p "$P" --json
  assert_jq '[.candidates[].provider] | sort == ["f1", "f2"]'

  run rpcroute cordon f1 -p "$P" --for soon
  assert_status 2
  [[ $output == *"--for: 'soon' is not a duration"* ]]
  run rpcroute cordon nobody -p "$P"
  assert_status 2
  [[ $output == *"unknown provider 'nobody' on chain local (providers: f1, f2)"* ]]
  run rpcroute cordon f1 -p "$P" --chain nowhere
  assert_status 2
}

@test "groups: backups get no request while a primary is up, all of them when every primary is dead" {
  start_fake p1 --height 100
  start_fake p2 --height 100
  start_fake b1 --height 100
  write_profile "$P" p1 p2 b1,group=backup
  start_serve sc -p "$P" --state "$RPCROUTE_STATE" --no-probe
  send 30
  assert_equal "$(served b1)" 0 "requests to the backup while the primaries are up"
  (($(served p1) > 0 && $(served p2) > 0))  # balanced among the primaries

  run rpcroute profiles show "$P"
  assert_status 0
  [[ $output == *GROUP* && $output =~ b1.*backup && $output =~ p1.*primary ]]
  run rpcroute rank -p "$P" --json
  assert_jq '[.candidates[] | {provider, group}] | map(select(.group == "backup")) == [{"provider":"b1","group":"backup"}]'
  assert_jq '.candidates[-1].provider == "b1" and .candidates[-1].first_probability == 0'

  # A cordoned primary leaves the other: still no backup.
  run rpcroute cordon p1 -p "$P"
  assert_status 0
  status_until '.cordons[0].provider == "p1"' 5000
  fake_control p2 '{"reset_stats":true}'
  send 10
  assert_equal "$(served b1)" 0 "requests to the backup with one primary cordoned"
  assert_equal "$(served p2)" 10

  # Every primary gone (p1 cordoned, p2 dead): every request is the backup's, answered.
  kill_node p2
  send 20
  assert_equal "$(served b1)" 20 "requests to the backup with no primary usable"
  run rpcroute rank -p "$P"
  assert_status 0
  [[ $output == *GROUP* ]]
}

@test "https: a cordon moves the sidecar's traffic to a backup over TLS within 1 s, and back" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  start_tls_fake t1 server --height 100
  start_tls_fake t2 server --height 100
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: t1, url: "$(node_url t1)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
      - { id: t2, url: "$(node_url t2)", tls: { ca_file: "$TEST_PKI/ca.pem" }, group: backup }
EOF
  start_serve sc -p "$P" --state "$RPCROUTE_STATE" --no-probe
  send 10
  assert_equal "$(served t2)" 0 "requests to the HTTPS backup"
  assert_equal "$(served t1)" 10
  local t0
  t0=$(now_ms)
  run rpcroute cordon t1 -p "$P" --reason maintenance --for 10m
  assert_status 0
  [[ $output == *"cordoned: maintenance (until "*"Z, in 600.0s)"* ]]
  status_until '.cordons[0].provider == "t1"' 5000
  local rest=$((1000 - ($(now_ms) - t0)))
  ((rest <= 0)) || nap "$(printf '0.%03d' "$rest")"
  send 10
  assert_equal "$(served t1)" 10 "requests to the cordoned t1 (the 10 before)"
  assert_equal "$(served t2)" 10 "requests to the backup"
  assert_json "$(fake_stats t2)" '.tls.handshakes >= 1'
  run rpcroute uncordon t1 -p "$P"
  assert_status 0
  status_until '.cordons == []' 5000
  send 10
  assert_equal "$(served t1)" 20
  assert_equal "$(served t2)" 10
}

@test "redis: a cordon given with --shared-state reaches a sidecar on another state file within 1 s" {
  command -v redis-server >/dev/null || skip "redis-server is not installed (scripts/setup installs it)"
  local port pid dir
  dir=$(_proc_dir)
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning \
    </dev/null >"$dir/redis.log" 2>&1 3>&- &
  pid=$!
  echo "$pid" >"$dir/redis.pid"
  for _ in $(seq 200); do
    [[ $(redis-cli -p "$port" ping 2>&1) == PONG ]] && break
    nap 0.02
  done
  local url=redis://127.0.0.1:$port/0
  start_fake f1 --height 100
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  # Another host: its own state file, the same Redis.
  start_serve sc -p "$P" --state "$BATS_TEST_TMPDIR/other-host.json" --no-probe --shared-state "$url"
  status_until '.shared_state.state == "up"' 5000
  send 10
  local t0
  t0=$(now_ms)
  run rpcroute cordon f1 -p "$P" --shared-state "$url" --reason "shared"
  assert_status 0
  status_until '.cordons[0].provider == "f1" and .cordons[0].reason == "shared"' 5000
  echo "the other host saw the cordon $(($(now_ms) - t0)) ms after the command started" >&3
  local rest=$((1000 - ($(now_ms) - t0)))
  ((rest <= 0)) || nap "$(printf '0.%03d' "$rest")"
  fake_control f1 '{"reset_stats":true}'
  send 10
  assert_equal "$(served f1)" 0 "requests to f1 on the other host"
  [[ $(redis-cli -p "$port" --scan --pattern 'rpcroute:p:*f1*' | head -1) != "" ]]
  run rpcroute uncordon f1 -p "$P" --shared-state "$url"
  assert_status 0
  status_until '.cordons == []' 5000
  # Redis away: the cordon still holds on this host's state file, with a warning.
  _stop_pid "$pid"
  run rpcroute cordon f2 -p "$P" --shared-state "$url"
  assert_status 0
  [[ $output == *"recorded in this host's state file only"* ]]
  run rpcroute rank -p "$P" --json
  assert_jq '[.excluded[] | select(.kind == "cordon") | .provider] == ["f2"]'
}
