#!/usr/bin/env bats
# Everyday use (issue 21): a /healthz that tells the truth (dead providers, half-open breakers, a
# start with nothing reachable), through the real binary against fake upstreams on 127.0.0.1.

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

# GET PATH from the sidecar node SC: sets code and body.
get() { # PATH
  local out=$BATS_TEST_TMPDIR/get
  code=$(curl -s --max-time 10 -o "$out" -w '%{http_code}' "$(node_url sc)$1") || true
  body=$(cat "$out" 2>/dev/null || true)
}

# Polls /healthz every 50 ms until it answers CODE, for at most LIMIT_MS; sets waited_ms.
healthz_until() { # CODE LIMIT_MS
  local t0
  t0=$(now_ms)
  while :; do
    get /healthz
    waited_ms=$(($(now_ms) - t0))
    [[ $code == "$1" ]] && return 0
    if ((waited_ms > $2)); then
      echo "/healthz still $code after $waited_ms ms (wanted $1): $body" >&2
      get /status
      echo "/status: $body" >&2
      return 1
    fi
    nap 0.05
  done
}

@test "/healthz: 503 right after start with every provider unreachable; /status says why; 200 once one answers" {
  dead_port d1
  dead_port d2
  write_profile "$P" d1 d2 --extra 'health: {circuit_breaker: {recovery_timeout_ms: 500}}'
  start_serve sc -p "$P" --state "$RPCROUTE_STATE"
  get /healthz
  assert_equal "$code" 503 "/healthz right after start"
  assert_json "$body" '.status == "degraded" and .chains[0].usable == 0'
  get /status
  assert_equal "$code" 200 "/status"
  assert_json "$body" '.health[0].usable == 0 and ([.health[0].providers[] | select(.up | not) | .why | length > 0] == [true, true])'
  # A provider comes up on d1's port: /healthz follows.
  respawn_anvil d1
  healthz_until 200 10000
  get /status
  assert_json "$body" '[.health[0].providers[] | select(.up) | .provider] == ["d1"]'
}

@test "/healthz: 503 within 2 s of the last provider dying, and stays 503 while breakers half-open against the dead nodes" {
  start_fake f1 --height 100
  start_fake f2 --height 100
  write_profile "$P" f1 f2 --extra 'health: {circuit_breaker: {recovery_timeout_ms: 500}}'
  start_serve sc -p "$P" --state "$RPCROUTE_STATE"
  healthz_until 200 5000
  # One of two dies: still 200 (the other is up), and /status names the dead one.
  kill_node f1
  sleep 1.5
  get /healthz
  assert_equal "$code" 200 "/healthz with one provider left"
  kill_node f2
  healthz_until 503 2000
  echo "/healthz turned 503 $waited_ms ms after the last provider died" >&3
  # The breakers open, half-open after 500 ms and their trials fail: never 200 meanwhile.
  local deadline half_open=0
  deadline=$(($(now_ms) + 4000))
  while (($(now_ms) < deadline)); do
    get /healthz
    assert_equal "$code" 503 "/healthz while the nodes stay dead"
    get /status
    jq -e '[.health[0].providers[].why] | any(test("half-open"))' <<<"$body" >/dev/null && half_open=1
    # Client traffic meanwhile (trials of the half-open breakers) does not make it healthy either.
    curl -s --max-time 5 -o /dev/null -X POST -H 'content-type: application/json' \
      --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' "$(node_url sc)/rpc/local" || true
    nap 0.1
  done
  assert_equal "$half_open" 1 "a breaker seen half-open in /status"
}

@test "every provider on another chain: serve warns at start; /healthz, eth_chainId and errors say the same" {
  start_fake f1 --height 100 --chain-id 31338
  start_fake f2 --height 100 --chain-id 31338
  write_profile "$P" f1 f2
  start_serve sc -p "$P" --state "$RPCROUTE_STATE"
  local deadline=$((SECONDS + 10))
  until grep -q "warning: every provider of chain 'local' is on another chain than the profile's 31337 (f1 is on 31338, f2 is on 31338)" "$(_proc_dir)/sc.log"; do
    ((SECONDS < deadline)) || { cat "$(_proc_dir)/sc.log" >&2; false; }
    nap 0.1
  done
  get /healthz
  assert_equal "$code" 503 "/healthz"
  get /status
  assert_json "$body" '[.health[0].providers[].why] | all(test("wrong chain id 31338"))'
  # eth_chainId is not answered with the profile's id while no provider is on that chain.
  local out=$BATS_TEST_TMPDIR/rpc
  http_once "$(node_port sc)" /rpc/local '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}' "$out"
  assert_equal "$HTTP_CODE" 503 "eth_chainId"
  assert_json "$(cat "$out.body")" '.error.code == -32050 and (tostring | test("wrong chain id 31338"))'
  http_once "$(node_port sc)" /rpc/local '{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber","params":[]}' "$out"
  assert_equal "$HTTP_CODE" 503 "eth_blockNumber"
  assert_json "$(cat "$out.body")" 'tostring | test("wrong chain id 31338")'
}

@test "one provider on the right chain: no warning, eth_chainId answers the profile's id" {
  start_fake f1 --height 100 --chain-id 31338
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  start_serve sc -p "$P" --state "$RPCROUTE_STATE"
  healthz_until 200 5000
  sleep 1
  ! grep -q "warning: every provider" "$(_proc_dir)/sc.log" || false
  local out=$BATS_TEST_TMPDIR/rpc
  http_once "$(node_port sc)" /rpc/local '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}' "$out"
  assert_equal "$HTTP_CODE" 200
  assert_json "$(cat "$out.body")" '.result == "0x7a69"'
}

# A copy of scripts/rpcroute in a scratch tree, with scripts/setup and cmake stubbed: what a fresh
# clone's first run and the runs after it invoke (the real build takes minutes).
fake_tree() {
  T=$BATS_TEST_TMPDIR/tree
  mkdir -p "$T/scripts" "$T/lib/src" "$T/cli" "$T/sidecar" "$T/profiles" "$T/stubs"
  cp "$REPO/scripts/rpcroute" "$T/scripts/"
  echo 'int main() {}' >"$T/lib/src/a.cpp"
  touch "$T/CMakeLists.txt" "$T/CMakePresets.json" "$T/profiles/local.yaml"
  CALLS=$BATS_TEST_TMPDIR/calls
  : >"$CALLS"
  printf '#!/usr/bin/env bash\necho "setup $*" >>"%s"\n' "$CALLS" >"$T/scripts/setup"
  cat >"$T/stubs/cmake" <<STUB
#!/usr/bin/env bash
echo "cmake \$* (in \$PWD)" >>"$CALLS"
case " \$* " in
  *" --preset default "*) mkdir -p "$T/build"; touch "$T/build/CMakeCache.txt" ;;
  *" --build "*) mkdir -p "$T/build/cli"; printf '#!/bin/sh\necho "built rpcroute \$@"\n' >"$T/build/cli/rpcroute"; chmod +x "$T/build/cli/rpcroute" ;;
esac
STUB
  chmod +x "$T/scripts/setup" "$T/stubs/cmake"
}

@test "scripts/rpcroute: the first run builds only the rpcroute target and says how long; the next ones run no configure and no build" {
  fake_tree
  run --separate-stderr env PATH="$T/stubs:$PATH" "$T/scripts/rpcroute" call eth_blockNumber
  assert_status 0
  assert_equal "$output" "built rpcroute call eth_blockNumber" "stdout is rpcroute's alone"
  [[ $stderr =~ about\ [0-9]+\ minutes ]] || { echo "no build time said up front: $stderr" >&2; false; }
  grep -qx "setup --no-build" "$CALLS" || { cat "$CALLS" >&2; false; }
  grep -q "^cmake --preset default (in $T)$" "$CALLS" || { cat "$CALLS" >&2; false; }
  # One build, of the rpcroute target only: no unit_tests, no fake_upstream, no "all".
  [[ $(grep -c -- '--build' "$CALLS") == 1 ]] || { cat "$CALLS" >&2; false; }
  grep -q -- "--build $T/build --target rpcroute " "$CALLS" || { cat "$CALLS" >&2; false; }
  # Again: nothing but the binary.
  : >"$CALLS"
  run --separate-stderr env PATH="$T/stubs:$PATH" "$T/scripts/rpcroute" --version
  assert_status 0
  assert_equal "$output" "built rpcroute --version"
  assert_equal "$(cat "$CALLS")" "" "second run: no setup, configure or build"
  # A source newer than the binary: rebuilt, not reconfigured.
  touch -d '+2 seconds' "$T/lib/src/a.cpp"
  run --separate-stderr env PATH="$T/stubs:$PATH" "$T/scripts/rpcroute" --version
  assert_status 0
  assert_equal "$(grep -c . "$CALLS")" 1 "one call after a change"
  grep -q -- "--build $T/build --target rpcroute " "$CALLS" || { cat "$CALLS" >&2; false; }
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

@test "the README's serve example runs alongside scripts/demo --keep; -p local finds the source tree's profile" {
  local p
  for p in 8545 8546 8547 8645; do
    port_busy "$p" && skip "port $p is in use (the demo and the sidecar's default need it)"
  done
  local dir log
  dir=$(_proc_dir)
  log=$BATS_TEST_TMPDIR/demo.log
  RPCROUTE_BIN=$RPCROUTE_BIN ANVIL=$ANVIL "$REPO/scripts/demo" --keep </dev/null >"$log" 2>&1 3>&- &
  echo $! >"$dir/demo.pid"
  local deadline=$((SECONDS + 60))
  until grep -q "run until Ctrl-C" "$log" && _rpc_answers 8545 2>/dev/null; do
    ((SECONDS < deadline)) || { cat "$log" >&2; false; }
    nap 0.1
  done
  # The README: `rpcroute serve -p profiles/local.yaml -v`, from the source tree, default port.
  (cd "$REPO" && exec "$RPCROUTE_BIN" serve -p profiles/local.yaml -v </dev/null >"$BATS_TEST_TMPDIR/sc.log" 2>&1 3>&-) &
  echo $! >"$dir/sc.pid"
  deadline=$((SECONDS + 10))
  until [[ $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8645/healthz) == 200 ]]; do
    ((SECONDS < deadline)) || { cat "$BATS_TEST_TMPDIR/sc.log" >&2; false; }
    nap 0.1
  done
  run curl -s --max-time 10 -X POST -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' http://127.0.0.1:8645/rpc/local
  assert_json "$output" '.result | test("^0x")'
  # `-p local` from the build tree: the source tree's profiles/local.yaml (not on the search path).
  run --separate-stderr rpcroute call -p local eth_chainId
  assert_status 0
  assert_equal "$output" '"0x7a69"'
}

# ---------------------------------------------------------------------------------------------------
# Help that helps

@test "a mistyped subcommand or option gets the nearest one: 'did you mean'" {
  run --separate-stderr rpcroute cal eth_blockNumber
  assert_status 2
  [[ $stderr == *"did you mean 'call'?"* ]] || { _dump_run; false; }
  run --separate-stderr rpcroute call --chian base eth_blockNumber
  assert_status 2
  [[ $stderr == *"did you mean '--chain'?"* ]] || { _dump_run; false; }
  run --separate-stderr rpcroute profiles shwo public
  assert_status 2
  [[ $stderr == *"did you mean 'show'?"* ]] || { _dump_run; false; }
  run --separate-stderr rpcroute serve --no-prob
  assert_status 2
  [[ $stderr == *"did you mean '--no-probe'?"* ]] || { _dump_run; false; }
  # Nothing near: the commands are listed.
  run --separate-stderr rpcroute xyzzy
  assert_status 2
  [[ $stderr == *"commands: call, "* ]] || { _dump_run; false; }
}

# Every command path ("call", "state show", ...) from the --help texts.
command_paths() { # [PATH...]
  local path=("$@") sub
  for sub in $("$RPCROUTE_BIN" "${path[@]}" --help | awk '/^Subcommands:/ { on = 1; next } /^[^ ]/ { on = 0 } on && NF { print $1 }'); do
    echo "${path[*]:+${path[*]} }$sub"
    # shellcheck disable=SC2086
    command_paths "${path[@]}" $sub
  done
}

@test "completion bash|zsh|fish: every command and every option of each appears; bash completes them" {
  local paths
  mapfile -t paths < <(command_paths)
  ((${#paths[@]} >= 10)) || { printf '%s\n' "${paths[@]}" >&2; false; }
  local shell script path opt n=0
  for shell in bash zsh fish; do
    script=$("$RPCROUTE_BIN" completion "$shell")
    for path in "${paths[@]}"; do
      [[ $script == *"${path##* }"* ]] || { echo "$shell: no command '$path'" >&2; false; }
      # shellcheck disable=SC2086
      for opt in $("$RPCROUTE_BIN" $path --help | grep -E '^ +-' | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
        n=$((n + 1))
        case $shell in
          fish) [[ $script == *" -l ${opt#--}"* ]] ;;
          *) [[ $script == *" $opt"* || $script == *"'$opt"* ]] ;;
        esac || { echo "$shell: '$path' lacks $opt" >&2; false; }
      done
    done
  done
  echo "checked $n (shell, command, option) triples" >&3
  # bash: the function completes commands, nested commands and options.
  run bash -c 'source <("$RPCROUTE_BIN" completion bash)
    COMP_WORDS=(rpcroute ca); COMP_CWORD=1; _rpcroute; echo "${COMPREPLY[*]}"
    COMP_WORDS=(rpcroute state s); COMP_CWORD=2; _rpcroute; echo "${COMPREPLY[*]}"
    COMP_WORDS=(rpcroute call --ch); COMP_CWORD=2; _rpcroute; echo "${COMPREPLY[*]}"'
  assert_status 0
  assert_equal "${lines[0]}" "call"
  assert_equal "${lines[1]}" "show"
  assert_equal "${lines[2]}" "--chain"
  run bash -n <("$RPCROUTE_BIN" completion bash)
  assert_status 0
}

@test "cmake --install: a stripped binary and the three completion scripts" {
  local build prefix=$BATS_TEST_TMPDIR/prefix
  build=$(dirname "$(dirname "$RPCROUTE_BIN")")
  [[ -f $build/cmake_install.cmake ]] || skip "no cmake build tree around $RPCROUTE_BIN"
  run cmake --install "$build" --prefix "$prefix"
  assert_status 0
  [[ -x $prefix/bin/rpcroute ]]
  # Stripped: no symbol table, no debug info.
  run readelf -S "$prefix/bin/rpcroute"
  [[ $output != *.symtab* && $output != *.debug_info* ]] || { echo "not stripped" >&2; false; }
  "$prefix/bin/rpcroute" --version
  grep -q '^complete -o default -F _rpcroute rpcroute' "$prefix/share/bash-completion/completions/rpcroute"
  grep -q '^#compdef rpcroute' "$prefix/share/zsh/site-functions/_rpcroute"
  grep -q '^complete -c rpcroute' "$prefix/share/fish/vendor_completions.d/rpcroute.fish"
}

@test "bench: eth_call, eth_estimateGas, eth_getCode, eth_feeHistory get realistic params: every answer a result" {
  start_anvil a1
  write_profile "$P" a1
  run --separate-stderr rpcroute bench --profile "$P" --requests 4 --concurrency 2 \
    --methods eth_call,eth_estimateGas,eth_getCode,eth_getStorageAt,eth_feeHistory,eth_getBlockReceipts --json
  assert_status 0
  assert_jq '[.methods[].providers[0].ok] == [4, 4, 4, 4, 4, 4]'
  assert_jq '[.methods[].providers[0].errors] | all(. == {})'
}

@test "rank: a strategy that draws its order per request is listed by P(FIRST), and says so" {
  dead_port d1
  dead_port d2
  dead_port d3
  write_profile "$P" d1,weight=10 d2,weight=60 d3,weight=30
  local i
  for i in 1 2 3 4 5 6; do
    run --separate-stderr rpcroute rank -p "$P" --strategy weighted --no-state
    assert_status 0
    [[ $output == *"the order is drawn per request"* ]] || { _dump_run; false; }
    assert_equal "$(awk '$1 ~ /^[0-9]+$/ { printf "%s ", $2 }' <<<"$output")" "d2 d3 d1 " "listed order"
  done
  # A strategy with a fixed order keeps it, without the note.
  run --separate-stderr rpcroute rank -p "$P" --strategy priority --no-state
  [[ $output != *"drawn per request"* ]] || { _dump_run; false; }
  assert_equal "$(awk '$1 ~ /^[0-9]+$/ { printf "%s ", $2 }' <<<"$output")" "d1 d2 d3 " "priority order"
}

@test "profiles show: the effective timeout per method class, or the provider's own for all" {
  dead_port d1
  dead_port d2
  write_profile "$P" d1 d2,timeout_ms=3000
  run --separate-stderr rpcroute profiles show "$P" --json
  assert_status 0
  assert_jq '[.chains[0].providers[].effective_timeouts_ms] == [{"cheap":5000,"standard":10000,"heavy":20000,"trace":60000}, {"cheap":3000,"standard":3000,"heavy":3000,"trace":3000}]'
  run --separate-stderr rpcroute profiles show "$P"
  assert_status 0
  grep -Eq '^ +d1 .*5(\.0+)? ?s/10(\.0+)? ?s/20(\.0+)? ?s/60(\.0+)? ?s' <<<"$output" || { _dump_run; false; }
  grep -Eq '^ +d2 .*3(\.0+)? ?s \(all\)' <<<"$output" || { _dump_run; false; }
}

@test "init: three local anvils and a keyed URL make a profile that profiles validate accepts; the key is a \${ENV} reference" {
  start_anvil a1
  start_anvil a2
  start_anvil a3
  start_fake f1 --height 100 --ws-fault refuse # the fake speaks WebSocket; this one refuses it
  local key=abcdef0123456789XYZkey out=$BATS_TEST_TMPDIR/mine.yaml fport
  fport=$(node_port f1)
  run --separate-stderr rpcroute init "$(node_url a1)" "$(node_url a2)" "$(node_url a3)" \
    "http://127.0.0.1:$fport/v2/$key" --name mine --output "$out"
  assert_status 0
  [[ $stderr == *"chain 31337 (local)"* ]] || { _dump_run; false; }
  cat "$out" >&3
  grep -q '^  local:$' "$out"
  grep -q '^    chain_id: 31337$' "$out"
  assert_equal "$(grep -c '      - id: node' "$out")" 4 "providers"
  ! grep -q "$key" "$out" || { echo "the key was written as a literal" >&2; false; }
  [[ $stderr != *"$key"* ]] || { echo "the key was printed" >&2; false; }
  grep -q "/v2/\${RPCROUTE_NODE${fport}_KEY}\"" "$out"
  # Each anvil answered eth_chainId over WebSocket on its http port: a ws_url each, said so. The
  # fake refuses WebSocket upgrades (503): no ws_url for it, a plain note, and its key shown nowhere.
  local n
  for n in a1 a2 a3; do
    grep -q "ws_url: \"ws://127.0.0.1:$(node_port "$n")\"" "$out" || { echo "no ws_url for $n" >&2; false; }
  done
  assert_equal "$(grep -c 'ws_url:' "$out")" 3 "ws_url lines"
  assert_equal "$(grep -c 'WebSocket ws://127.0.0.1:[0-9]*: yes' <<<"$stderr")" 3 "WebSocket notes"
  grep -q "node${fport}: .*WebSocket ws://127.0.0.1:${fport}/.*: none (" <<<"$stderr" || { _dump_run; false; }
  # Accepted once the variable is set; the calls reach the nodes.
  export "RPCROUTE_NODE${fport}_KEY=$key"
  run --separate-stderr rpcroute profiles validate "$out"
  assert_status 0
  run --separate-stderr rpcroute call -p "$out" --no-state eth_blockNumber
  assert_status 0
  # Never over an existing file without --force.
  run --separate-stderr rpcroute init "$(node_url a1)" --output "$out"
  assert_status 2
  run --separate-stderr rpcroute init "$(node_url a1)" --output "$out" --force
  assert_status 0
}

@test "init: a WebSocket that refuses, or answers another chain, gets no ws_url and a plain note" {
  start_anvil a1
  start_anvil b1 --chain-id 5
  dead_port d1
  local out=$BATS_TEST_TMPDIR/ws.yaml
  # a1 with a WebSocket URL given (a port nobody listens on); a1 again with b1's WebSocket, which
  # answers chain 5.
  run --separate-stderr rpcroute init "$(node_url a1)" "ws://127.0.0.1:$(node_port d1)" \
    "$(node_url a1)" "ws://127.0.0.1:$(node_port b1)" --output "$out"
  assert_status 0
  cat "$out" >&3
  ! grep -q 'ws_url:' "$out" || { echo "a ws_url was written" >&2; false; }
  grep -q "WebSocket ws://127.0.0.1:$(node_port d1): none (connect: Connection refused)" <<<"$stderr" || { _dump_run; false; }
  grep -q "WebSocket ws://127.0.0.1:$(node_port b1): not written, it answers chain 5" <<<"$stderr" || { _dump_run; false; }
  run --separate-stderr rpcroute profiles validate "$out"
  assert_status 0
  # A WebSocket URL must follow a provider's http URL.
  run --separate-stderr rpcroute init "ws://127.0.0.1:$(node_port a1)"
  assert_status 2
}

@test "init: an https:// provider's wss:// twin is probed over TLS and written; a WebSocket whose certificate names another host is not" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  start_tls_fake s1 --height 100 --mine-per-sec 4
  start_tls_fake w1 wrong_host --height 100
  start_tls_fake h1 --tls-handshake hang
  local key=abcdef0123456789XYZkey out=$BATS_TEST_TMPDIR/tls.yaml s1 w1 h1 started
  s1=$(node_port s1)
  w1=$(node_port w1)
  h1=$(node_port h1)
  # The test CA through SSL_CERT_FILE, the system store's override (init writes no tls: itself).
  export SSL_CERT_FILE=$TEST_PKI/ca.pem
  # s1 three times: its own WebSocket (the wss:// twin of its URL); w1's, whose certificate is for
  # other.invalid; h1's, whose TLS handshake never ends (given up at 3 s, and not waited for).
  started=$SECONDS
  run --separate-stderr rpcroute init "https://localhost:$s1/v2/$key" \
    "https://localhost:$s1/v3/$key" "wss://localhost:$w1/ws/$key" \
    "https://localhost:$s1/v4/$key" "wss://localhost:$h1/ws/$key" --name tls --output "$out"
  assert_status 0
  ((SECONDS - started <= 8)) || { echo "init took $((SECONDS - started)) s" >&2; false; }
  cat "$out" >&3
  sed 's/^/# /' <<<"$stderr" >&3
  grep -q "^        ws_url: \"wss://localhost:$s1/v2/\${RPCROUTE_NODE${s1}_KEY}\"" "$out" || { echo "no wss:// ws_url for s1" >&2; false; }
  assert_equal "$(grep -c 'ws_url:' "$out")" 1 "ws_url lines"
  grep -Eq "^rpcroute: node$s1: chain 31337 .*WebSocket wss://localhost:$s1/[^ ]*: yes\$" <<<"$stderr" || { _dump_run; false; }
  grep -Eq "^rpcroute: node${s1}2: chain 31337 .*WebSocket wss://localhost:$w1/[^ ]*: none \(TLS: host name mismatch" <<<"$stderr" || { _dump_run; false; }
  grep -Eq "^rpcroute: node${s1}3: chain 31337 .*WebSocket wss://localhost:$h1/[^ ]*: none \(no answer within 3000 ms\)\$" <<<"$stderr" || { _dump_run; false; }
  ! grep -q "$key" "$out" || { echo "the key was written as a literal" >&2; false; }
  [[ $stderr != *"$key"* ]] || { echo "the key was printed" >&2; false; }
  # The profile serves: a subscription over the wss:// written gets the fake's heads.
  export "RPCROUTE_NODE${s1}_KEY=$key"
  run --separate-stderr rpcroute profiles validate "$out"
  assert_status 0
  run --separate-stderr timeout 30 "$RPCROUTE_BIN" subscribe newHeads -p "$out" --no-state --count 1
  assert_status 0
  assert_jq 'has("hash")'
}

@test "call: a provider on another chain (HTTPS), no probe before: the right one answers, the state keeps the mismatch, the next call skips it" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  start_tls_fake wrong --chain-id 5 --height 100
  start_fake right --height 100
  write_profile "$P" --strategy priority "wrong,tls={ ca_file: \"$TEST_PKI/ca.pem\" }" right
  run --separate-stderr rpcroute call -p "$P" --json eth_blockNumber
  assert_status 0
  assert_jq '.result == "0x64" and .meta.provider == "right" and [.meta.attempts[].provider] == ["right"]'
  assert_jq '[.meta.excluded[] | select(.provider == "wrong") | .kind] == ["chain_id"]'
  # The chain id was asked in the same batch as the call: one request to each.
  assert_json "$(fake_stats wrong)" '.requests == 1 and .methods.eth_chainId == 1 and .methods.eth_blockNumber == 1'
  assert_json "$(fake_stats right)" '.requests == 1 and .methods.eth_chainId == 1'
  assert_json "$(state_entry wrong)" '.probe.chain_id == 5'
  assert_json "$(state_entry right)" '.probe.chain_id == 31337'
  # The next call: the wrong one is left out before anything is sent; the right one is asked
  # nothing extra.
  run --separate-stderr rpcroute call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  assert_status 0
  assert_jq '.meta.provider == "right"'
  assert_jq '[.meta.excluded[] | select(.provider == "wrong") | .reason][0] | test("wrong chain id 5 .*seen by a call")'
  assert_json "$(fake_stats wrong)" '.requests == 1'
  assert_json "$(fake_stats right)" '.requests == 2 and .methods.eth_chainId == 1'
  run --separate-stderr rpcroute rank -p "$P" --json
  assert_status 0
  assert_jq '[.excluded[] | select(.provider == "wrong") | .kind] == ["chain_id"]'
}
