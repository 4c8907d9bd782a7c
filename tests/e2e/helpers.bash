# shellcheck shell=bash
# Variables set here are used by the suites that load this file; $stderr and $stderr_lines come
# from bats (run --separate-stderr).
# shellcheck disable=SC2034,SC2154
# Shared helpers for the end-to-end suites: start and stop anvil nodes and fake upstreams on
# 127.0.0.1, write profiles that point at them, run the real rpcroute binary, check its output.
#
# Nodes are named. Each one leaves NAME.port / NAME.pid / NAME.log in a process folder: the test's
# own ($BATS_TEST_TMPDIR) when started inside a test or setup(), the file's ($BATS_FILE_TMPDIR) when
# started in setup_file(). Lookups by name check the test's folder first. teardown() and
# teardown_file() call stop_all, which stops what that level started.

bats_require_minimum_version 1.5.0

# make_test_pki, start_tls_fake, start_h2_front.
# shellcheck source=tests/e2e/tls_helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/tls_helpers.bash"

REPO=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
RPCROUTE_BIN=${RPCROUTE_BIN:-$REPO/build/cli/rpcroute}
# RPCROUTE_E2E_BIN wins over the build tree's binary that ctest names: scripts/test points it at the
# binary `cmake --install` wrote (stripped, as shipped) for the suites the g++ build runs.
RPCROUTE_BIN=${RPCROUTE_E2E_BIN:-$RPCROUTE_BIN}
FAKE_BIN=${FAKE_BIN:-$REPO/build/tests/fakes/fake_upstream}
ANVIL=${ANVIL:-$REPO/.tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil}
CAST=${CAST:-$REPO/.tools/node_modules/@foundry-rs/cast-linux-amd64/bin/cast}
export REPO RPCROUTE_BIN FAKE_BIN ANVIL CAST

# anvil's first dev account and its genesis balance (10 000 ether).
DEV_ACCOUNT=0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266
DEV_BALANCE=0x21e19e0c9bab2400000

# A call that hangs longer than this is a bug in itself; fail it instead of stalling the suite.
RPCROUTE_E2E_CALL_LIMIT=${RPCROUTE_E2E_CALL_LIMIT:-60}

# ---------------------------------------------------------------------------------------------------
# Environment

# Fails the file early, with a hint, when a binary the suite needs is missing.
require_bins() { # BIN_VAR...
  local var
  for var in "$@"; do
    if [[ ! -x ${!var} ]]; then
      echo "missing $var=${!var}; run scripts/setup" >&2
      return 1
    fi
  done
}

# Isolates a test from the user's files: state, profiles, HOME and XDG folders all in the test's
# temporary folder. Call from setup().
e2e_setup() {
  export HOME=$BATS_TEST_TMPDIR/home
  export XDG_STATE_HOME=$BATS_TEST_TMPDIR/xdg-state
  export XDG_CONFIG_HOME=$BATS_TEST_TMPDIR/xdg-config
  export RPCROUTE_STATE=$BATS_TEST_TMPDIR/state.json
  export RPCROUTE_PROFILES=$BATS_TEST_TMPDIR/profiles
  export NO_COLOR=1
  unset RPCROUTE_PROFILE
  mkdir -p "$HOME" "$RPCROUTE_PROFILES"
  # The profile most tests write and pass with --profile.
  P=$BATS_TEST_TMPDIR/profile.yaml
}

# The binary under test, bounded in time (exit 124 means it hung). -k: a SIGTERM that does not end
# it is followed by SIGKILL (under ASan, the SIGCONT `timeout` sends after the SIGTERM can wedge
# LeakSanitizer's check at exit for good: see subscribe.bats).
rpcroute() {
  timeout -k 10 "$RPCROUTE_E2E_CALL_LIMIT" "$RPCROUTE_BIN" "$@"
}

# rpcroute with INPUT on stdin, for --raw.
rpcroute_stdin() { # INPUT ARGS...
  local input=$1
  shift
  printf '%s' "$input" | timeout -k 10 "$RPCROUTE_E2E_CALL_LIMIT" "$RPCROUTE_BIN" "$@"
}

now_ms() { date +%s%3N; }

# ---------------------------------------------------------------------------------------------------
# Ports and processes

# Prints a TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' && return
  fi
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

# Sleeps without a process. Polling loops wait a few milliseconds at a time, and each `sleep` is a
# fork and an exec (about 10 ms of CPU on a 2-core VM, more than the wait is worth): a read that
# times out on a FIFO nobody writes to costs two system calls. The FIFO is opened for the read
# only, so no process started meanwhile inherits it. Falls back to sleep outside bats.
nap() { # SECONDS
  local fifo=${BATS_FILE_TMPDIR:-/nonexistent}/.nap.fifo
  if [[ -p $fifo ]] || { [[ -d ${BATS_FILE_TMPDIR:-} ]] && { mkfifo "$fifo" 2>/dev/null || [[ -p $fifo ]]; }; }; then
    read -r -t "$1" _ <>"$fifo" || true
  else
    sleep "$1"
  fi
}

_proc_dir() {
  local dir
  if [[ -n ${BATS_TEST_TMPDIR:-} ]]; then
    dir=$BATS_TEST_TMPDIR/procs
  else
    dir=$BATS_FILE_TMPDIR/procs
  fi
  mkdir -p "$dir"
  echo "$dir"
}

# Path of NAME.EXT in the test's process folder, else the file's.
_node_file() { # NAME EXT
  local dir
  for dir in ${BATS_TEST_TMPDIR:+"$BATS_TEST_TMPDIR/procs"} ${BATS_FILE_TMPDIR:+"$BATS_FILE_TMPDIR/procs"}; do
    if [[ -f $dir/$1.$2 ]]; then
      echo "$dir/$1.$2"
      return 0
    fi
  done
  echo "no node named $1 (no $1.$2)" >&2
  return 1
}

node_port() { local f; f=$(_node_file "$1" port) && cat "$f"; }
node_pid() { local f; f=$(_node_file "$1" pid) && cat "$f"; }
node_url() {
  local port f
  if f=$(_node_file "$1" url 2>/dev/null); then cat "$f"; return; fi # https: tls_helpers.bash
  port=$(node_port "$1") && echo "http://127.0.0.1:$port"
}
node_log() { local f; f=$(_node_file "$1" log) && cat "$f"; }

# Exit 0 when something on PORT answers eth_blockNumber with a result. A TCP connect (no process)
# comes first: a node that does not listen yet costs no curl.
_rpc_answers() { # PORT
  local fd
  exec {fd}<>"/dev/tcp/127.0.0.1/$1" || return 1
  exec {fd}>&-
  curl -sf --max-time 1 -X POST -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' \
    "http://127.0.0.1:$1" 2>/dev/null | grep -q '"result"'
}

# Sends TERM, waits up to 5 s for the process to go, then KILL. Works for processes started by another
# subshell (setup_file), which `wait` cannot reap.
_stop_pid() { # PID
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    nap 0.05
  done
  kill -9 "$pid" 2>/dev/null || true
}

# Sends SIGNAL to PID over and over until it is gone (or a zombie), for up to LIMIT seconds (default
# 30): the second copy `timeout` and a shell's job kill send to a process's group, made a storm so
# that one lands in every phase of the exit. Fails when the process outlives the limit.
signal_storm() { # SIGNAL PID [LIMIT_S]
  local sig=$1 pid=$2 deadline=$((SECONDS + ${3:-30})) stat n=0
  while kill "-$sig" "$pid" 2>/dev/null; do
    ((++n % 64)) && continue # as dense as bash can: a look at the process every 64 signals
    read -r stat </proc/"$pid"/stat 2>/dev/null || return 0
    stat=${stat##*) }
    [[ ${stat:0:1} == Z ]] && return 0
    ((SECONDS < deadline)) || { echo "pid $pid still running after ${3:-30} s of SIG$sig" >&2; return 1; }
  done
}

# Starts anvil on a free port (chain id 31337 unless given) and waits, up to 10 s, until it answers.
start_anvil() { # NAME [ANVIL ARGS...]
  local name=$1 dir port pid arg deadline has_chain_id=0
  shift
  dir=$(_proc_dir)
  local args=("$@")
  for arg in "$@"; do
    case $arg in --chain-id | --chain-id=*) has_chain_id=1 ;; esac
  done
  ((has_chain_id)) || args+=(--chain-id 31337)
  # Another suite may take the port between free_port and anvil's bind: then anvil exits; retry.
  for _ in 1 2 3; do
    port=$(free_port)
    "$ANVIL" --host 127.0.0.1 --port "$port" --silent "${args[@]}" </dev/null >"$dir/$name.log" 2>&1 3>&- &
    pid=$!
    echo "$pid" >"$dir/$name.pid"
    echo "$port" >"$dir/$name.port"
    deadline=$((SECONDS + 10))
    while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
      _rpc_answers "$port" 2>/dev/null && return 0
      nap 0.05
    done
    _stop_pid "$pid"
  done
  echo "start_anvil $name: anvil did not answer on 127.0.0.1:$port" >&2
  cat "$dir/$name.log" >&2
  return 1
}

# Starts the fake upstream on a port of its choosing and waits, up to 10 s, for its port file.
start_fake() { # NAME [FAKE ARGS...]
  local name=$1 dir pid port deadline
  shift
  dir=$(_proc_dir)
  rm -f "$dir/$name.port.tmp"
  "$FAKE_BIN" --listen 127.0.0.1:0 --port-file "$dir/$name.port.tmp" --name "$name" "$@" \
    </dev/null >"$dir/$name.log" 2>&1 3>&- &
  pid=$!
  echo "$pid" >"$dir/$name.pid"
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
    port=""
    { read -r port || true; } 2>/dev/null <"$dir/$name.port.tmp" || true
    port=${port//[[:space:]]/}
    # The file may be half written: trust the port once the fake answers on it.
    if [[ $port =~ ^[0-9]+$ ]] && curl -sf --max-time 1 "http://127.0.0.1:$port/_stats" >/dev/null 2>&1; then
      echo "$port" >"$dir/$name.port"
      return 0
    fi
    nap 0.02
  done
  echo "start_fake $name: no port file from fake_upstream" >&2
  cat "$dir/$name.log" >&2
  return 1
}

# Prints a port below the kernel's ephemeral range (ip_local_port_range) that nothing listens on.
# A port bound to 0 (free_port, every fake, sidecar and outgoing connection) comes from that range,
# so another suite running beside this one never takes it later: a dead port stays dead (it once
# answered HTTP 502 in CI: a process started meanwhile had been given the same port).
unused_low_port() {
  local low=32768 port
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  ((low > 12000)) || low=32768
  while :; do
    port=$((10000 + RANDOM % (low - 10000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

# Registers NAME with a port that nothing listens on, nor will: a provider that refuses connections.
dead_port() { # NAME
  local dir
  dir=$(_proc_dir)
  unused_low_port >"$dir/$1.port"
}

# Stops one node (its port stays registered, so profiles can still point at the dead port).
kill_node() { # NAME
  local f
  f=$(_node_file "$1" pid) || return 1
  local pid
  read -r pid <"$f"
  _stop_pid "$pid"
  rm -f "$f"
}

# Stops every node started at the current level (test, or file in teardown_file).
stop_all() {
  local dir f pids=() pid
  dir=$(_proc_dir)
  for f in "$dir"/*.pid; do
    [[ -f $f ]] || continue
    read -r pid <"$f"
    pids+=("$pid")
    rm -f "$f"
  done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do _stop_pid "$pid"; done
}

# ---------------------------------------------------------------------------------------------------
# Fake upstream control

fake_control() { # NAME JSON
  local url tls
  url=$(node_url "$1") || return 1
  mapfile -t tls < <(node_curl_args "$1")
  curl -sf --max-time 5 "${tls[@]}" -X POST -H 'content-type: application/json' --data "$2" "$url/_control" >/dev/null
}

fake_stats() { # NAME
  local url tls
  url=$(node_url "$1") || return 1
  mapfile -t tls < <(node_curl_args "$1")
  curl -sf --max-time 5 "${tls[@]}" "$url/_stats"
}

# One value of the fake's /_stats: jq -r FILTER on them. Fails (status 1, the reason on stderr,
# nothing on stdout) when the fake does not answer, or FILTER yields nothing, null or false: bats
# sets no pipefail, and `fake_stats X | jq .y` would print nothing and succeed, so that two such
# values compared could pass empty against empty. Use `// 0` in FILTER only where the fake leaves
# a counter out until it counts one (.methods[name], .paths[path]).
fake_stat() { # NAME FILTER [JQ ARGS...]
  local name=$1 filter=$2 stats value
  shift 2
  stats=$(fake_stats "$name") || {
    echo "fake_stat: fake $name answered no /_stats" >&2
    return 1
  }
  if ! value=$(jq -er "$@" "$filter" <<<"$stats") || [[ -z $value ]]; then
    printf 'fake_stat: %s of fake %s is %s in:\n%s\n' "$filter" "$name" "${value:-nothing}" "$stats" >&2
    return 1
  fi
  printf '%s\n' "$value"
}

# Number of HTTP requests the fake received (control and stats requests not counted by the fake).
fake_requests() { # NAME
  fake_stat "$1" .requests
}

# ---------------------------------------------------------------------------------------------------
# Profiles

# Writes a profile for started (or dead_port) nodes.
#   write_profile FILE [--name N] [--chain C] [--chain-id ID] [--strategy S] [--extra YAML] SPEC...
# (options may come anywhere after FILE).
# SPEC is NODE[,key=value...]: the provider id is NODE, its url the node's, its priority its position
# (1, 2, ...) unless given; other keys are copied (timeout_ms=800, weight=30, url=http://...).
# --extra is appended at the top level (e.g. a health: section).
write_profile() {
  local file=$1
  shift
  local name=e2e chain=local chain_id=31337 strategy=load_balanced extra="" specs=()
  while (($#)); do
    case $1 in
      --name) name=$2; shift 2 ;;
      --chain) chain=$2; shift 2 ;;
      --chain-id) chain_id=$2; shift 2 ;;
      --strategy) strategy=$2; shift 2 ;;
      --extra) extra=$2; shift 2 ;;
      *) specs+=("$1"); shift ;;
    esac
  done
  {
    echo "name: $name"
    echo "chains:"
    echo "  $chain:"
    echo "    chain_id: $chain_id"
    echo "    block_time_ms: 1000"
    echo "    providers:"
    local spec index=0 id url priority kv key value rest
    for spec in "${specs[@]}"; do
      index=$((index + 1))
      id=${spec%%,*}
      rest=""
      [[ $spec == *,* ]] && rest=${spec#*,}
      url="" priority=$index
      local others=()
      if [[ -n $rest ]]; then
        local kvs
        IFS=, read -r -a kvs <<<"$rest"
        for kv in "${kvs[@]}"; do
          key=${kv%%=*}
          value=${kv#*=}
          case $key in
            url) url=$value ;;
            priority) priority=$value ;;
            *) others+=("$key: $value") ;;
          esac
        done
      fi
      [[ -n $url ]] || url=$(node_url "$id") || return 1
      echo "      - id: $id"
      echo "        url: $url"
      echo "        priority: $priority"
      for kv in "${others[@]}"; do echo "        $kv"; done
    done
    echo "routing:"
    echo "  default_strategy: $strategy"
    [[ -z $extra ]] || printf '%s\n' "$extra"
  } >"$file"
}

# ---------------------------------------------------------------------------------------------------
# State

state_json() { rpcroute state show --json; }

# Total number of latency samples in the state file (0 when there is none).
sample_count() {
  local json
  json=$(state_json) || return 1
  jq '[.providers[]?.methods[]?.samples | length] | add // 0' <<<"$json"
}

# The state entry of provider ID (null when none).
state_entry() { # ID
  local json
  json=$(state_json) || return 1
  jq --arg p "$1" '[.providers[]? | select(.provider == $p)] | first' <<<"$json"
}

# ---------------------------------------------------------------------------------------------------
# Assertions (print what was seen when they fail)

_dump_run() {
  printf -- '--- status: %s\n--- stdout:\n%s\n' "${status-}" "${output-}" >&2
  [[ -z ${stderr+x} ]] || printf -- '--- stderr:\n%s\n' "$stderr" >&2
}

assert_status() { # N
  if [[ ${status-} != "$1" ]]; then
    echo "expected exit status $1" >&2
    _dump_run
    return 1
  fi
}

# jq -e FILTER on $output (stdout of the last run).
assert_jq() { # FILTER [JQ ARGS...]
  local filter=$1
  shift
  if ! jq -e "$@" "$filter" <<<"$output" >/dev/null 2>&1; then
    echo "jq filter failed: $filter" >&2
    _dump_run
    return 1
  fi
}

# jq -e FILTER on a JSON text.
assert_json() { # JSON FILTER [JQ ARGS...]
  local json=$1 filter=$2
  shift 2
  if ! jq -e "$@" "$filter" <<<"$json" >/dev/null 2>&1; then
    printf 'jq filter failed: %s\non:\n%s\n' "$filter" "$json" >&2
    return 1
  fi
}

assert_stderr_lines() { # N
  local n=${#stderr_lines[@]}
  if [[ $n != "$1" ]]; then
    echo "expected $1 line(s) on stderr, got $n" >&2
    _dump_run
    return 1
  fi
}

# PATTERN (extended regex) matches $stderr.
assert_stderr_matches() { # ERE
  if ! grep -Eq -- "$1" <<<"$stderr"; then
    echo "stderr does not match /$1/" >&2
    _dump_run
    return 1
  fi
}

# TEXT appears in neither stdout nor stderr of the last run.
refute_output_contains() { # TEXT
  if [[ ${output-} == *"$1"* || ${stderr-} == *"$1"* ]]; then
    echo "output contains '$1'" >&2
    _dump_run
    return 1
  fi
}

assert_equal() { # ACTUAL EXPECTED [WHAT]
  if [[ $1 != "$2" ]]; then
    printf '%s: expected [%s], got [%s]\n' "${3:-value}" "$2" "$1" >&2
    return 1
  fi
}

# ---------------------------------------------------------------------------------------------------
# The sidecar as a named node, raw HTTP, restarting a node

# Starts `rpcroute serve ARGS...` as node NAME on a port of its choosing (--listen 127.0.0.1:0
# --port-file are added) and waits, up to 10 s, for its port file. NAME.port / .pid / .log live in the
# process folder like other nodes: node_url NAME is its base URL, stop_all stops it (SIGTERM).
start_serve() { # NAME SERVE ARGS...
  local name=$1 dir pid port deadline
  shift
  dir=$(_proc_dir)
  rm -f "$dir/$name.port.tmp"
  "$RPCROUTE_BIN" serve --listen 127.0.0.1:0 --port-file "$dir/$name.port.tmp" "$@" \
    </dev/null >"$dir/$name.log" 2>&1 3>&- &
  pid=$!
  echo "$pid" >"$dir/$name.pid"
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
    port=""
    { read -r port || true; } 2>/dev/null <"$dir/$name.port.tmp" || true
    port=${port//[[:space:]]/}
    if [[ $port =~ ^[0-9]+$ ]]; then
      echo "$port" >"$dir/$name.port"
      return 0
    fi
    nap 0.02
  done
  echo "start_serve $name: rpcroute serve wrote no port file" >&2
  cat "$dir/$name.log" >&2
  return 1
}

# One HTTP/1.1 POST of DATA (ASCII JSON) to 127.0.0.1:PORT PATH on a fresh connection with
# "Connection: close"; reads what the server sends until it closes the connection (at most LIMIT
# seconds, default 30). Leaves OUT.raw (every byte received) and OUT.body (the first response's body).
# Sets HTTP_CODE; HTTP_HDR, an associative array of the first response's headers (lower-case names);
# HTTP_RESPONSES, the number of HTTP responses seen (status lines at the start of the stream and after
# the first response); HTTP_EXTRA, the bytes received beyond the first response's Content-Length body
# (0 when the stream holds exactly one response; -1 without Content-Length). Returns 1 when the
# connection failed or the server did not close it in time. Forks only timeout and cat.
http_once() { # PORT PATH DATA OUT [LIMIT_S]
  local port=$1 path=$2 data=$3 out=$4 limit=${5:-30} fd rc=0 line rest="" length="" name
  local LC_ALL=C
  HTTP_CODE=000 HTTP_RESPONSES=0 HTTP_EXTRA=-1
  declare -gA HTTP_HDR=()
  : >"$out.body"
  exec {fd}<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf 'POST %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "$path" "$port" "${#data}" "$data" >&"$fd"
  timeout "$limit" cat <&"$fd" >"$out.raw" || rc=$?
  exec {fd}>&-
  {
    if IFS= read -r line && [[ $line =~ ^HTTP/1\.[01]\ ([0-9]{3}) ]]; then
      HTTP_CODE=${BASH_REMATCH[1]}
      HTTP_RESPONSES=1
      while IFS= read -r line; do
        line=${line%$'\r'}
        [[ -n $line ]] || break
        name=${line%%:*}
        name=${name,,}
        line=${line#*:}
        line=${line#"${line%%[! ]*}"}
        HTTP_HDR[$name]=$line
      done
      IFS= read -r -d '' rest || true
    fi
  } <"$out.raw"
  length=${HTTP_HDR[content-length]:-}
  if [[ $length =~ ^[0-9]+$ ]]; then
    HTTP_EXTRA=$((${#rest} - length))
    printf '%s' "${rest:0:length}" >"$out.body"
    rest=${rest:length}
    [[ $rest != *HTTP/1.* ]] || HTTP_RESPONSES=$((HTTP_RESPONSES + 1))
  else
    printf '%s' "$rest" >"$out.body"
  fi
  return $((rc != 0))
}

# Starts anvil node NAME again on the port it had (after kill_node or a SIGKILL), with ANVIL ARGS
# (chain id 31337 unless given), and waits up to 10 s until it answers. The port may still be in
# TIME_WAIT or taken for a moment: retried within those 10 s.
respawn_anvil() { # NAME [ANVIL ARGS...]
  local name=$1 dir port pid deadline arg has_chain_id=0
  shift
  dir=$(_proc_dir)
  port=$(node_port "$name") || return 1
  local args=("$@")
  for arg in "$@"; do
    case $arg in --chain-id | --chain-id=*) has_chain_id=1 ;; esac
  done
  ((has_chain_id)) || args+=(--chain-id 31337)
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)); do
    "$ANVIL" --host 127.0.0.1 --port "$port" --silent "${args[@]}" </dev/null >>"$dir/$name.log" 2>&1 3>&- &
    pid=$!
    echo "$pid" >"$dir/$name.pid"
    while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
      _rpc_answers "$port" 2>/dev/null && return 0
      nap 0.05
    done
    nap 0.2
  done
  _stop_pid "$pid"
  echo "respawn_anvil $name: no answer on 127.0.0.1:$port" >&2
  return 1
}

# ---------------------------------------------------------------------------------------------------
# TCP forwarders (tcp_proxy.mjs) in front of a node, for the WebSocket suites: a test stops one
# (SIGSTOP: a stalled socket) or kills it (a dropped one).

# A forwarder NAME to node TARGET's port, registered like a node (port, pid, log).
start_forwarder() { # NAME TARGET
  local dir deadline
  dir=$(_proc_dir)
  rm -f "$dir/$1.port"
  node "$REPO/tests/e2e/tcp_proxy.mjs" "$(node_port "$2")" "$dir/$1.port" </dev/null >"$dir/$1.log" 2>&1 3>&- &
  echo "$!" >"$dir/$1.pid"
  deadline=$((SECONDS + 10))
  until [[ -s $dir/$1.port ]] || ((SECONDS > deadline)); do nap 0.05; done
  [[ -s $dir/$1.port ]]
}

# JSON-RPC to a node directly; prints the result.
node_result() { # NODE METHOD PARAMS
  curl -sf --max-time 5 -X POST -H 'content-type: application/json' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}" "$(node_url "$1")" | jq -c .result
}

# Waits until FILE has a line matching ERE (at most LIMIT seconds).
wait_for_line() { # FILE ERE LIMIT
  local deadline=$((SECONDS + $3))
  until grep -Eq "$2" "$1" 2>/dev/null; do
    if ((SECONDS > deadline)); then
      echo "no line matching '$2' in $1 within $3 s" >&2
      cat "$1" >&2
      return 1
    fi
    nap 0.1
  done
}
