#!/usr/bin/env bats
# rpcroute serve, the localhost sidecar (DESIGN.md sections 4, 6, 7, 9, 11; issue 4): a real client
# (cast) through it, routes, batches, response headers, failover on every kind of fault, a kill and
# restart of one of three anvil nodes under load, safety defaults (Host, Origin, CORS, body cap,
# token), graceful SIGTERM during load, the state file shared with `rpcroute rank`, /healthz /status
# /metrics, and secrets kept out of every output.
# Real anvil nodes for the happy paths and the load test, the fake upstream for faults.

# jq programs are single-quoted on purpose; $stderr and $stderr_lines come from bats; each test
# runs in its own subshell, so exports there are meant to be local.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN ANVIL CAST
  # Shared, never modified by a test (nothing is mined, nothing is killed): tests that kill a node
  # start their own.
  start_anvil a1
  start_anvil a2
  start_anvil a3
  make_test_pki "$BATS_FILE_TMPDIR/pki"
}

teardown_file() {
  stop_all
}

setup() {
  e2e_setup
  S=$RPCROUTE_STATE
  HDRS=$BATS_TEST_TMPDIR/headers
  BODYF=$BATS_TEST_TMPDIR/body
}

teardown() {
  # The sidecar's pid file is in the test's process folder: stop_all stops it with the nodes.
  stop_all
}

# ---------------------------------------------------------------------------------------------------
# Sidecar helpers

BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

# Starts `rpcroute serve` in the background on 127.0.0.1, a port of its choosing, with the state file
# $S; waits (up to 10 s) for its port file. Sets SC_PID, SC_PORT, SC_URL; stderr goes to $SC_LOG.
start_sidecar() { # SERVE ARGS...
  local dir port_file deadline
  dir=$(_proc_dir)
  port_file=$BATS_TEST_TMPDIR/sidecar.port
  SC_LOG=$BATS_TEST_TMPDIR/sidecar.log
  rm -f "$port_file"
  "$RPCROUTE_BIN" serve --listen 127.0.0.1:0 --port-file "$port_file" --state "$S" "$@" \
    </dev/null >>"$BATS_TEST_TMPDIR/sidecar.stdout" 2>"$SC_LOG" 3>&- &
  SC_PID=$!
  echo "$SC_PID" >"$dir/sidecar.pid"
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)); do
    if [[ -s $port_file ]]; then
      SC_PORT=$(<"$port_file")
      SC_PORT=${SC_PORT//[[:space:]]/}
      SC_URL=http://127.0.0.1:$SC_PORT
      return 0
    fi
    kill -0 "$SC_PID" 2>/dev/null || break
    sleep 0.02
  done
  echo "rpcroute serve did not write its port file" >&2
  cat "$SC_LOG" >&2
  return 1
}

# SIGTERM, then wait up to LIMIT seconds (default 10) for the sidecar to exit. Sets SC_EXIT and
# SC_STOP_MS (time from the signal to the exit); fails when it had to be killed.
stop_sidecar() { # [LIMIT_S]
  local limit=${1:-10} t0 deadline
  t0=$(now_ms)
  kill -TERM "$SC_PID" 2>/dev/null || true
  deadline=$((t0 + limit * 1000))
  while kill -0 "$SC_PID" 2>/dev/null && (($(now_ms) < deadline)); do sleep 0.02; done
  SC_STOP_MS=$(($(now_ms) - t0))
  if kill -0 "$SC_PID" 2>/dev/null; then
    echo "rpcroute serve still running ${limit}s after SIGTERM" >&2
    kill -9 "$SC_PID" 2>/dev/null || true
    wait "$SC_PID" 2>/dev/null || true
    rm -f "$(_proc_dir)/sidecar.pid"
    return 1
  fi
  SC_EXIT=0
  wait "$SC_PID" || SC_EXIT=$?
  rm -f "$(_proc_dir)/sidecar.pid"
}

# POST DATA (a JSON text, or @FILE) to the sidecar's PATH. Sets code (HTTP status, 000 when no
# answer) and body; the response headers are in $HDRS.
sc_post() { # PATH DATA [CURL ARGS...]
  local path=$1 data=$2
  shift 2
  rm -f "$HDRS" "$BODYF"
  code=$(curl -s --max-time 30 -D "$HDRS" -o "$BODYF" -w '%{http_code}' -X POST \
    -H 'content-type: application/json' --data-binary "$data" "$@" "$SC_URL$path") || true
  body=$(cat "$BODYF" 2>/dev/null || true)
}

# Any other request: sc_req METHOD PATH [CURL ARGS...]. Sets code and body like sc_post.
sc_req() { # METHOD PATH [CURL ARGS...]
  local method=$1 path=$2
  shift 2
  rm -f "$HDRS" "$BODYF"
  code=$(curl -s --max-time 30 -D "$HDRS" -o "$BODYF" -w '%{http_code}' -X "$method" "$@" "$SC_URL$path") || true
  body=$(cat "$BODYF" 2>/dev/null || true)
}

# Value of response header NAME of the last sc_post/sc_req (empty when absent).
hdr() { # NAME
  grep -i "^$1:" "$HDRS" 2>/dev/null | head -1 | cut -d: -f2- | tr -d '\r' | sed 's/^ *//'
}

_dump_http() {
  printf -- '--- HTTP %s\n--- headers:\n%s\n--- body:\n%s\n' "${code-}" "$(cat "$HDRS" 2>/dev/null)" "${body:0:2000}" >&2
}

assert_code() { # HTTP_STATUS
  if [[ ${code-} != "$1" ]]; then
    echo "expected HTTP $1" >&2
    _dump_http
    return 1
  fi
}

assert_body_jq() { # FILTER [JQ ARGS...]
  local filter=$1
  shift
  if ! jq -e "$@" "$filter" <<<"$body" >/dev/null 2>&1; then
    echo "jq filter failed on the body: $filter" >&2
    _dump_http
    return 1
  fi
}

assert_hdr() { # NAME ERE
  local v
  v=$(hdr "$1")
  if ! [[ $v =~ $2 ]]; then
    echo "header $1: [$v] does not match /$2/" >&2
    _dump_http
    return 1
  fi
}

# The six X-Rpcroute-* headers of an RPC answer are all present and well formed.
assert_rpc_headers() {
  assert_hdr X-Rpcroute-Provider '^[A-Za-z0-9_.,-]+$'
  assert_hdr X-Rpcroute-Upstream-Latency '^[0-9]+(\.[0-9]+)?$'
  assert_hdr X-Rpcroute-Attempts '^[0-9]+$'
  assert_hdr X-Rpcroute-Strategy '^[a-z_-]+$'
  assert_hdr X-Rpcroute-Cache '^[A-Za-z_-]+$'
  assert_hdr X-Rpcroute-Request-Id '^[A-Za-z0-9_-]+$'
}

metrics_text() { curl -s --max-time 5 "$SC_URL/metrics"; }

# Value of the sample of METRIC whose labels contain provider="ID" (and MORE, e.g. outcome="success");
# 0 when absent.
metric_of() { # METRIC ID [MORE_LABEL]
  local text=${METRICS_TEXT:-$(metrics_text)}
  awk -v m="$1" -v p="provider=\"$2\"" -v more="${3:-}" '
    index($0, m "{") == 1 && index($0, p) && (more == "" || index($0, more)) { v = $NF }
    END { print (v == "" ? 0 : v) }' <<<"$text"
}

# Restarts the anvil node NAME (killed before) on its old port, and waits until it answers.
restart_anvil() { # NAME
  local name=$1 dir port pid deadline
  dir=$(_proc_dir)
  port=$(node_port "$name")
  "$ANVIL" --host 127.0.0.1 --port "$port" --silent --chain-id 31337 </dev/null >>"$dir/$name.log" 2>&1 3>&- &
  pid=$!
  echo "$pid" >"$dir/$name.pid"
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
    _rpc_answers "$port" && return 0
    sleep 0.05
  done
  echo "restart_anvil $name: no answer on 127.0.0.1:$port" >&2
  cat "$dir/$name.log" >&2
  return 1
}

# Number of latency samples in the state file FILE with a timestamp at or after SINCE_MS.
samples_since() { # FILE SINCE_MS
  jq --argjson t "$2" '[.providers[]?.methods[]?.samples[]? | select(.[0] >= $t)] | length' "$1"
}

# ---------------------------------------------------------------------------------------------------
# 1. A real client through the sidecar; routes

@test "cast works through the sidecar: block-number, balance, chain-id (by chain name and by chain id)" {
  write_profile "$P" a1 a2 a3
  start_sidecar -p "$P"
  run --separate-stderr timeout 30 "$CAST" block-number --rpc-url "$SC_URL/rpc/local"
  assert_status 0
  [[ $output =~ ^[0-9]+$ ]] || { _dump_run; false; }
  run --separate-stderr timeout 30 "$CAST" balance "$DEV_ACCOUNT" --rpc-url "$SC_URL/rpc/local"
  assert_status 0
  assert_equal "$output" 10000000000000000000000 "cast balance"
  run --separate-stderr timeout 30 "$CAST" chain-id --rpc-url "$SC_URL/rpc/local"
  assert_status 0
  assert_equal "$output" 31337 "cast chain-id"
  # The chain by its decimal id.
  run --separate-stderr timeout 30 "$CAST" block-number --rpc-url "$SC_URL/rpc/31337"
  assert_status 0
  [[ $output =~ ^[0-9]+$ ]] || { _dump_run; false; }
  run --separate-stderr timeout 30 "$CAST" balance "$DEV_ACCOUNT" --rpc-url "$SC_URL/rpc/31337"
  assert_status 0
  assert_equal "$output" 10000000000000000000000 "cast balance by chain id"
  # POST / is the default profile's first chain.
  sc_post / "$BN"
  assert_code 200
  assert_body_jq '.result | test("^0x[0-9a-f]+$")'
}

@test "routes: strategy segment, /rpc/provider/ID/CHAIN, /rpc/profile/NAME/CHAIN" {
  write_profile "$P" a1 a2 a3
  # A second profile on the search path ($RPCROUTE_PROFILES), with a3 only.
  write_profile "$RPCROUTE_PROFILES/other.yaml" a3
  start_sidecar -p "$P" --no-probe
  local i
  for i in 1 2 3; do
    sc_post /rpc/priority/local "$BN"
    assert_code 200
    assert_hdr X-Rpcroute-Strategy '^priority$'
    assert_hdr X-Rpcroute-Provider '^a1$'
    assert_body_jq '.id == 1 and (.result | test("^0x[0-9a-f]+$"))'
  done
  sc_post /rpc/round-robin/local "$BN"
  assert_code 200
  assert_hdr X-Rpcroute-Strategy '^round[-_]robin$'
  sc_post /rpc/latency-weighted/31337 "$BN"
  assert_code 200
  assert_hdr X-Rpcroute-Strategy '^latency[-_]weighted$'
  for i in 1 2 3 4; do
    sc_post /rpc/provider/a2/local "$BN"
    assert_code 200
    assert_hdr X-Rpcroute-Provider '^a2$'
    assert_hdr X-Rpcroute-Attempts '^1$'
  done
  # The default profile by its name, and another profile found on the search path.
  sc_post /rpc/profile/profile/local "$BN"
  assert_code 200
  assert_body_jq '.result | test("^0x[0-9a-f]+$")'
  for i in 1 2 3; do
    sc_post /rpc/profile/other/local "$BN"
    assert_code 200
    assert_hdr X-Rpcroute-Provider '^a3$'
    sc_post /rpc/profile/other/priority/local "$BN"
    assert_code 200
    assert_hdr X-Rpcroute-Provider '^a3$'
    assert_hdr X-Rpcroute-Strategy '^priority$'
  done
  # An unknown provider or profile is a 404, not a fallback.
  sc_post /rpc/provider/nope/local "$BN"
  assert_code 404
  sc_post /rpc/profile/nope/local "$BN"
  assert_code 404
}

# ---------------------------------------------------------------------------------------------------
# 2. Batches

@test "batch: items in order with ids as sent, one invalid item, eth_chainId answered locally" {
  start_fake f1 --height 100
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  start_sidecar -p "$P" --no-probe
  local batch
  batch='[{"jsonrpc":"2.0","id":"s-1","method":"eth_blockNumber","params":[]},
          {"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["'$DEV_ACCOUNT'","latest"]},
          {"jsonrpc":"2.0","id":null,"method":"eth_gasPrice","params":[]},
          42,
          {"jsonrpc":"2.0","id":9,"method":"eth_chainId","params":[]},
          {"jsonrpc":"2.0","id":"last","method":"eth_blockNumber","params":[]}]'
  sc_post /rpc/local "$batch"
  assert_code 200
  assert_body_jq 'type == "array" and length == 6'
  assert_body_jq '[.[].id] == ["s-1", 7, null, null, 9, "last"]'
  assert_body_jq '(.[1].id | type) == "number" and (.[2] | has("id"))'
  assert_body_jq '.[0].result == "0x64" and .[5].result == "0x64"'
  assert_body_jq '(.[1].result | test("^0x[0-9a-f]+$")) and (.[2].result | test("^0x[0-9a-f]+$"))'
  # Only the invalid item is an error.
  assert_body_jq '.[3].error.code == -32600 and (.[3] | has("result") | not)'
  assert_body_jq '[.[] | select(has("error"))] | length == 1'
  assert_body_jq '.[4].result == "0x7a69"'
  assert_rpc_headers
  # eth_chainId never reached a provider; the four routed calls did.
  local calls=0 n
  for f in f1 f2; do
    n=$(fake_stat "$f" '.methods.eth_chainId // 0')
    assert_equal "$n" 0 "$f eth_chainId calls"
    n=$(fake_stat "$f" .calls)
    calls=$((calls + n))
  done
  assert_equal "$calls" 4 "calls sent upstream"
}

@test "batch: --max-batch 3 answers 3 items; of 5 items the last 2 each get their own -32600, the rest are served" {
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe --max-batch 3
  local item='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
  sc_post /rpc/local "[$item,$item,$item]"
  assert_code 200
  assert_body_jq 'type == "array" and length == 3 and all(.[]; .result == "0x64")'
  local before
  before=$(fake_stat f1 .calls)
  sc_post /rpc/local '[{"jsonrpc":"2.0","id":"a","method":"eth_blockNumber","params":[]},
    {"jsonrpc":"2.0","id":"b","method":"eth_blockNumber","params":[]},
    {"jsonrpc":"2.0","id":"c","method":"eth_blockNumber","params":[]},
    {"jsonrpc":"2.0","id":"d","method":"eth_blockNumber","params":[]},
    {"jsonrpc":"2.0","method":"eth_blockNumber","params":[]},
    {"jsonrpc":"2.0","id":"e","method":"eth_blockNumber","params":[]}]'
  assert_code 200
  # An array answer, in order; the notification beyond the limit is not answered.
  assert_body_jq 'type == "array" and [.[].id] == ["a", "b", "c", "d", "e"]'
  assert_body_jq '.[0:3] | all(.[]; .result == "0x64")'
  assert_body_jq '.[3:] | all(.[]; .error.code == -32600 and (.error.message | test("max-batch")))'
  assert_equal "$(fake_stat f1 .calls)" "$((before + 3))" "calls sent upstream"
}

@test "batch: a 1,000-item viem-sized batch through serve to anvil succeeds by default" {
  write_profile "$P" a1 a2
  start_sidecar -p "$P" --no-probe
  local batch=$BATS_TEST_TMPDIR/batch.json
  # What viem's http(url, { batch: true }) sends for a burst: up to 1,000 calls in one POST.
  jq -cn --arg a "$DEV_ACCOUNT" '[range(1000) | if . % 2 == 0
    then {jsonrpc: "2.0", id: ., method: "eth_getBalance", params: [$a, "latest"]}
    else {jsonrpc: "2.0", id: ., method: "eth_blockNumber", params: []} end]' >"$batch"
  sc_post /rpc/local "@$batch"
  assert_code 200
  assert_body_jq 'type == "array" and length == 1000 and ([.[].id] == [range(1000)])'
  assert_body_jq 'all(.[]; has("result") and (.result | test("^0x[0-9a-f]+$")))'
}

@test "batch: split per provider's limits.max_batch (1,000 items to a provider taking 100: 10 upstream batches)" {
  start_fake f1 --height 100
  write_profile "$P" 'f1,limits={max_batch: 100}'
  start_sidecar -p "$P" --no-probe
  local batch=$BATS_TEST_TMPDIR/batch.json
  jq -cn '[range(1000) | {jsonrpc: "2.0", id: ., method: "eth_blockNumber", params: []}]' >"$batch"
  sc_post /rpc/local "@$batch"
  assert_code 200
  assert_body_jq 'type == "array" and length == 1000 and ([.[].id] == [range(1000)]) and all(.[]; .result == "0x64")'
  assert_equal "$(fake_stat f1 .calls)" 1000 "calls sent upstream"
  assert_equal "$(fake_requests f1)" 10 "upstream requests"
}

# ---------------------------------------------------------------------------------------------------
# 3. Response headers

@test "headers: the X-Rpcroute-* headers on every RPC answer; Attempts 2 when the priority-1 provider is a dead port" {
  dead_port d1
  start_fake f2 --height 100
  write_profile "$P" d1 f2
  start_sidecar -p "$P" --no-probe
  sc_post /rpc/priority/local "$BN"
  assert_code 200
  assert_rpc_headers
  assert_hdr X-Rpcroute-Attempts '^2$'
  assert_hdr X-Rpcroute-Provider '^f2$'
  assert_hdr X-Rpcroute-Strategy '^priority$'
  assert_body_jq '.result == "0x64" and .id == 1'
  local id1
  id1=$(hdr X-Rpcroute-Request-Id)
  # A plain call, a batch, an answer from the profile, a node's JSON-RPC error, and a 503.
  sc_post /rpc/local "$BN"
  assert_code 200
  assert_rpc_headers
  [[ $(hdr X-Rpcroute-Request-Id) != "$id1" ]] || { echo "request id repeated: $id1" >&2; false; }
  sc_post /rpc/local "[$BN,$BN]"
  assert_code 200
  assert_rpc_headers
  sc_post /rpc/local '{"jsonrpc":"2.0","id":3,"method":"eth_chainId","params":[]}'
  assert_code 200
  assert_body_jq '.result == "0x7a69"'
  assert_hdr X-Rpcroute-Attempts '^0$'
  assert_hdr X-Rpcroute-Strategy '^[a-z_-]+$'
  assert_hdr X-Rpcroute-Request-Id '^[A-Za-z0-9_-]+$'
  sc_post /rpc/local '{"jsonrpc":"2.0","id":4,"method":"eth_noSuchMethod","params":[]}'
  assert_rpc_headers
  sc_post /rpc/provider/d1/local "$BN"
  assert_code 503
  assert_hdr X-Rpcroute-Attempts '^1$'
  assert_hdr X-Rpcroute-Upstream-Latency '^[0-9]+(\.[0-9]+)?$'
  assert_hdr X-Rpcroute-Strategy '^[a-z_-]+$'
  assert_hdr X-Rpcroute-Request-Id '^[A-Za-z0-9_-]+$'
}

# ---------------------------------------------------------------------------------------------------
# 4. Failover on faulty providers

# 20 requests with the faulty provider BAD first (priority) and a healthy f_ok second, from one curl
# process over keep-alive: every answer is HTTP 200 with the result and the id sent.
twenty_ok() { # BAD
  local i urls=() tally
  for i in $(seq 20); do urls+=("$SC_URL/rpc/local"); done
  tally=$(curl -s --max-time 60 -X POST -H 'content-type: application/json' --data-binary "$BN" \
    -w '\n@@ %{http_code}\n' "${urls[@]}" | awk '
      /^@@ / { if ($2 == 200 && ok) good++; else { bad++; print "BAD " $2 " [" last "]" > "/dev/stderr" } ok = 0; next }
      { last = $0; if ($0 == "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"0x64\"}") ok = 1 }
      END { printf "%d %d\n", good, bad }')
  assert_equal "$tally" "20 0" "answers with a result, client errors ($1 first)"
}

@test "failover: hang, 5xx, 429 and malformed JSON providers never produce a client error next to a healthy one" {
  local mode
  declare -A args=(
    [hang]="--mode hang"
    [s503]="--mode status --status 503"
    [s429]="--mode status --status 429 --retry-after 30"
    [malformed]="--mode malformed"
  )
  start_fake f_ok --height 100
  for mode in hang s503 s429 malformed; do
    # shellcheck disable=SC2086
    start_fake "bad_$mode" ${args[$mode]} --height 100
    write_profile "$P" "bad_$mode,timeout_ms=500" f_ok --strategy priority
    start_sidecar -p "$P" --no-probe --strategy priority
    twenty_ok "bad_$mode"
    # The faulty provider was really tried first (before a breaker or rate limit set it aside).
    sc_req GET /metrics
    [[ $(METRICS_TEXT=$body metric_of rpcroute_attempts_total "bad_$mode") -ge 1 ]] || {
      echo "bad_$mode was never tried" >&2
      _dump_http
      false
    }
    (($(fake_requests "bad_$mode") >= 1))
    stop_sidecar
    rm -f "$S"
  done
}

@test "failover: a provider claiming a 2 GB body is failed over on its timeout; the sidecar's memory follows the bytes" {
  start_fake f_ok --height 100
  start_fake liar --mode overclaim --height 100
  write_profile "$P" "liar,timeout_ms=500" f_ok --strategy priority
  start_sidecar -p "$P" --no-probe --strategy priority
  local i before hwm
  before=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SC_PID/status")
  for i in 1 2 3; do
    sc_post /rpc/local "$BN"
    assert_code 200
    assert_equal "$body" '{"jsonrpc":"2.0","id":1,"result":"0x64"}' "answer $i"
  done
  (($(fake_requests liar) >= 1))
  # Peak resident memory: far from the claimed 2 GB (a build that committed it up front reached it;
  # the margin leaves room for AddressSanitizer's shadow and quarantine).
  hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$SC_PID/status")
  ((hwm - before < 400 * 1024)) || { echo "sidecar peak RSS ${hwm} kB (${before} kB before)" >&2; false; }
  stop_sidecar
}

@test "memory: a 24 MiB eth_getLogs answer is passed on in the provider's buffer, over http and https" {
  # The answer is made in place in the buffer the provider's bytes were read into: peak resident
  # memory grows by about the answer's size. A build that copied the result into a new response
  # (eth_getLogs kept its result for a split that never came, and the copy was sized one byte
  # short, so it doubled) grew by three times it. ASan's quarantine is off, as below.
  local size=$((24 * 1024 * 1024))
  local logs='{"jsonrpc":"2.0","id":7,"method":"eth_getLogs","params":[{"fromBlock":"0x1","toBlock":"0x2"}]}'
  start_fake big --mode huge --huge-bytes "$size"
  start_tls_fake tbig --mode huge --huge-bytes "$size"
  local via tls before hwm got limit
  for via in big tbig; do
    tls=""
    [[ $via == tbig ]] && tls=", tls: { ca_file: \"$TEST_PKI/ca.pem\" }"
    printf '      - { id: %s, url: "%s"%s }\n' "$via" "$(node_url "$via")" "$tls" | https_profile
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0" start_sidecar -p "$P" --no-probe
    sc_post /rpc/local '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
    assert_code 200
    before=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SC_PID/status")
    echo 5 >"/proc/$SC_PID/clear_refs" # VmHWM := VmRSS now
    got=$(curl -s --max-time 60 -o "$BATS_TEST_TMPDIR/logs.out" -w '%{http_code} %{size_download}' \
      -X POST -H 'content-type: application/json' --data-binary "$logs" "$SC_URL/rpc/local")
    hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$SC_PID/status")
    assert_equal "${got%% *}" 200 "$via: status"
    ((${got##* } > size)) || { echo "$via: ${got##* } bytes" >&2; false; }
    assert_equal "$(head -c 30 "$BATS_TEST_TMPDIR/logs.out")" '{"jsonrpc":"2.0","id":7,"resul' "$via: the client's id"
    # Seen: 1.0x the answer over http (1.2x under ASan), 1.15x over TLS (1.3-1.6x under ASan
    # before the TLS path reserved the body). The copy this guards against adds a whole 1x.
    limit=$((size * 3 / 2 / 1024))
    [[ $via == big ]] || limit=$((size * 7 / 4 / 1024))
    ((hwm - before < limit)) ||
      { echo "$via: sidecar peak RSS ${hwm} kB, ${before} kB before, for a $((size / 1024)) kB answer" >&2; false; }
    stop_sidecar
  done
}

@test "memory: idle keep-alive connections do not hold their last answer" {
  # 48 connections each fetch a 1 MiB answer, one after another, and stay open. The answers are
  # freed once written: the sidecar's resident memory grows by a few MiB, not by 48 MiB (a build
  # that kept each connection's last answer until its next request did). ASan's quarantine would
  # keep freed blocks resident, so it is off for this sidecar.
  start_fake big --mode huge --huge-bytes 1048576
  write_profile "$P" big
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0" start_sidecar -p "$P" --no-probe
  # eth_gasPrice: a 1 MiB string is no block height (a head answer like it is refused).
  sc_post /rpc/local '{"jsonrpc":"2.0","id":1,"method":"eth_gasPrice","params":[]}'
  assert_code 200
  local before after
  before=$(awk '/^VmRSS:/ { print $2 }' "/proc/$SC_PID/status")
  after=$(python3 - "$SC_PORT" "$SC_PID" <<'PY'
import socket, sys
port, pid = int(sys.argv[1]), sys.argv[2]
body = b'{"jsonrpc":"2.0","id":1,"method":"eth_gasPrice","params":[]}'
request = (b"POST /rpc/local HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
conns = []
for _ in range(48):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
    while len(rest) < length:
        rest += s.recv(1 << 20)
    assert len(rest) >= 1048576, len(rest)
    conns.append(s)  # stays open, idle
with open("/proc/%s/status" % pid) as f:
    print([l.split()[1] for l in f if l.startswith("VmRSS:")][0])
PY
)
  ((after - before < 24 * 1024)) || { echo "sidecar RSS ${after} kB after 48 idle connections (${before} kB before)" >&2; false; }
  stop_sidecar
}

# Resident memory of PID in kB.
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# Retries the shell command CMD every 0.2 s for up to LIMIT_S seconds; fails (printing WHAT) when it
# never succeeded.
eventually() { # LIMIT_S WHAT CMD...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "never: $what" >&2; return 1; }
    sleep 0.2
  done
}

metric_is() { # METRIC VALUE
  [[ $(curl -s --max-time 5 "$SC_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }') == "$2" ]]
}
hanging_is() { [[ $(fake_stat "$1" .hanging) == "$2" ]]; }  # NAME N: requests a hang-mode fake holds
rss_below() { (($(rss_kb "$SC_PID") < $1)); }                     # KB
post_code_is() { [[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' -d "$BN" "$SC_URL/rpc/local") == "$1" ]]; }

@test "memory: clients that leave while the provider hangs: upstream work abandoned, in-flight and memory back down" {
  # Issue 14.11: their requests were held until the provider's timeout (60 s here), 6 MiB each.
  start_fake h --mode hang --height 100
  write_profile "$P" h,timeout_ms=60000
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0" start_sidecar -p "$P" --no-probe
  local big=$BATS_TEST_TMPDIR/big.json i rss0 peak pids=()
  # 6 MiB of whitespace after a call that goes upstream (valid JSON; only the call is sent on).
  { printf '%s' "$BN"; head -c $((6 << 20)) /dev/zero | tr '\0' ' '; } >"$big"
  rss0=$(rss_kb "$SC_PID")
  for i in $(seq 1 8); do
    curl -s -o /dev/null --max-time 60 -X POST -H 'content-type: application/json' -H 'Expect:' \
      --data-binary "@$big" "$SC_URL/rpc/local" &
    pids+=($!)
  done
  eventually 40 "8 requests held by the hanging provider" hanging_is h 8
  peak=$(rss_kb "$SC_PID")
  ((peak - rss0 > 24 * 1024)) || { echo "the bodies were never held? RSS ${peak} kB (${rss0} kB before)" >&2; false; }
  kill "${pids[@]}"  # the clients give up
  wait "${pids[@]}" || true
  # Their work is abandoned at once: the provider's connections close, nothing stays in flight.
  eventually 5 "the provider's requests abandoned" hanging_is h 0
  eventually 5 "in-flight requests back to the /metrics one" metric_is rpcroute_in_flight_requests 1
  metric_is rpcroute_request_bytes_in_flight 0
  metric_is rpcroute_cancelled_total 8
  # And their memory is given back (the idle trim runs within the 5 s flush interval).
  eventually 15 "RSS back near $rss0 kB" rss_below $((rss0 + 16 * 1024))
  # The provider is not blamed for it: still served, its breaker closed.
  fake_control h '{"mode":"ok"}'
  sc_post /rpc/local "$BN"
  assert_code 200
  stop_sidecar
  assert_equal "$SC_EXIT" 0 "sidecar exit status"
}

@test "limits: --max-connections and --max-inflight-mb answer 503 with Retry-After beyond them; 0 is a usage error" {
  start_fake f1 --height 100
  start_fake h --mode hang --height 100
  write_profile "$P" f1 h,timeout_ms=60000 --strategy priority
  local opt
  for opt in --max-connections --max-inflight-mb --max-batch; do
    run --separate-stderr rpcroute serve -p "$P" --state "$S" --no-probe "$opt" 0
    assert_status 2
    assert_stderr_matches "$opt"
  done
  start_sidecar -p "$P" --no-probe --max-connections 3 --max-inflight-mb 1
  # Connections: three held open (idle), the fourth is told 503 at once.
  exec 5<>"/dev/tcp/127.0.0.1/$SC_PORT" 6<>"/dev/tcp/127.0.0.1/$SC_PORT" 7<>"/dev/tcp/127.0.0.1/$SC_PORT"
  sleep 0.3
  sc_post /rpc/local "$BN"
  assert_code 503
  assert_hdr Retry-After '^1$'
  assert_body_jq '.error | test("max-connections")'
  exec 5>&- 6>&- 7>&-
  eventually 5 "served again once they closed" post_code_is 200
  # Bytes: 700 kB held by a request stuck upstream; another 700 kB body is refused before it is
  # read (Content-Length), a small request still fits.
  local big=$BATS_TEST_TMPDIR/big.json stuck
  { printf '%s' "$BN"; head -c 700000 /dev/zero | tr '\0' ' '; } >"$big"
  curl -s -o /dev/null --max-time 4 -X POST -H 'content-type: application/json' -H 'Expect:' \
    --data-binary "@$big" "$SC_URL/rpc/provider/h/local" &
  stuck=$!
  eventually 10 "the first body held" metric_is rpcroute_request_bytes_in_flight 700063
  sc_post /rpc/local "@$big" -H 'Expect:'
  assert_code 503
  assert_hdr Retry-After '^1$'
  assert_body_jq '.error | test("max-inflight-mb")'
  sc_post /rpc/local "$BN"
  assert_code 200
  # Once the stuck client leaves, its bytes are given back and the same body goes through.
  wait "$stuck" || true
  eventually 5 "bytes given back" metric_is rpcroute_request_bytes_in_flight 0
  sc_post /rpc/local "@$big" -H 'Expect:'
  assert_code 200
  assert_body_jq '.result == "0x64"'
  sc_req GET /metrics
  [[ $body == *'rpcroute_refused_total{limit="connections"} 1'* && $body == *'rpcroute_refused_total{limit="memory"} 1'* ]] ||
    { echo "$body" | grep refused >&2; false; }
}

@test "failover: with only faulty providers, HTTP 503 with -32050 and one attempt per provider" {
  start_fake hang --mode hang
  start_fake s503 --mode status --status 503
  start_fake s429 --mode status --status 429 --retry-after 30
  start_fake malformed --mode malformed
  write_profile "$P" hang,timeout_ms=500 s503 s429 malformed
  start_sidecar -p "$P" --no-probe
  sc_post /rpc/local '{"jsonrpc":"2.0","id":"q","method":"eth_blockNumber","params":[]}'
  assert_code 503
  assert_rpc_headers
  assert_body_jq '.jsonrpc == "2.0" and .id == "q" and .error.code == -32050'
  assert_body_jq '.error.data.attempts | length == 4'
  assert_body_jq '[.error.data.attempts[].provider] | sort == ["hang", "malformed", "s429", "s503"]'
  assert_body_jq '.error.data.attempts[] | select(.provider == "hang") | .outcome == "timeout"'
  assert_body_jq '.error.data.attempts[] | select(.provider == "s503") | .outcome == "http_error" and .http_status == 503'
  assert_body_jq '.error.data.attempts[] | select(.provider == "s429") | .outcome == "rate_limited" and .http_status == 429'
  assert_body_jq '.error.data.attempts[] | select(.provider == "malformed") | .outcome == "bad_response"'
  assert_body_jq 'all(.error.data.attempts[]; (.latency_ms | type == "number") and (.message | type == "string"))'
  assert_hdr X-Rpcroute-Attempts '^4$'
}

@test "no failover on a deterministic error: the node's error is returned as is (HTTP 200), one attempt" {
  start_fake rev --mode rpc_error --code 3 --message "execution reverted"
  start_fake f_ok --height 100
  write_profile "$P" rev f_ok
  start_sidecar -p "$P" --no-probe
  sc_post /rpc/priority/local '{"jsonrpc":"2.0","id":"c","method":"eth_call","params":[{"to":"0x0000000000000000000000000000000000000001","data":"0x"},"latest"]}'
  assert_code 200
  assert_body_jq '.id == "c" and .error.code == 3 and (.error.message | test("execution reverted"))'
  assert_hdr X-Rpcroute-Attempts '^1$'
  assert_hdr X-Rpcroute-Provider '^rev$'
  assert_equal "$(fake_requests f_ok)" 0 "f_ok requests"
}

@test "background probe: a provider failing at start that comes up on the wrong chain is still excluded" {
  # The first probe learns nothing (503s); the poller must probe fully again, not only the head,
  # until it has the chain id. A breaker that never opens keeps the exclusion's kind chain_id.
  start_fake good --height 100
  start_fake late --height 100 --chain-id 5 --mode status --status 503
  cat >"$P" <<EOF
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: good, url: "$(node_url good)" }
      - { id: late, url: "$(node_url late)" }
health:
  circuit_breaker: { failure_threshold: 1000 }
EOF
  start_sidecar -p "$P"
  local deadline=$((SECONDS + 10))
  until (($(fake_requests late) > 0)) || ((SECONDS >= deadline)); do nap 0.1; done
  (($(fake_requests late) > 0)) || { echo "the sidecar never probed late" >&2; false; }
  fake_control late '{"mode":"ok"}'
  local ok=0
  deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)); do
    sc_req GET /status
    if jq -e '.profiles[0].excluded[] | select(.provider == "late" and .kind == "chain_id" and (.reason | test("wrong chain id 5")))' \
      <<<"$body" >/dev/null 2>&1; then
      ok=1
      break
    fi
    nap 0.25
  done
  ((ok)) || { echo "/status never excluded late (chain id 5, up after the first probe)" >&2; _dump_http; false; }
}

@test "background probe: a wrong chain id and a lagging node are excluded, with reasons, before any request" {
  start_fake good --height 100
  start_fake other --height 100 --chain-id 5
  start_fake behind --height 90
  write_profile "$P" other behind good
  start_sidecar -p "$P"
  local deadline=$((SECONDS + 8)) ok=0
  while ((SECONDS < deadline)); do
    sc_req GET /status
    if jq -e '[.profiles[0].excluded[].provider] | sort == ["behind", "other"]' <<<"$body" >/dev/null 2>&1; then
      ok=1
      break
    fi
    sleep 0.25
  done
  ((ok)) || { echo "/status never excluded other (chain id 5) and behind (10 blocks back)" >&2; _dump_http; false; }
  assert_body_jq '.profiles[0].excluded[] | select(.provider == "other") | .reason | test("chain"; "i")'
  assert_body_jq '.profiles[0].excluded[] | select(.provider == "behind") | .reason | test("lag|behind"; "i")'
  # (The probe itself reads a balance, for its archive check: count from here.)
  local before_other before_behind i
  before_other=$(fake_stat other '.methods.eth_getBalance // 0')
  before_behind=$(fake_stat behind '.methods.eth_getBalance // 0')
  for i in 1 2 3 4 5 6; do
    sc_post /rpc/round-robin/local "{\"jsonrpc\":\"2.0\",\"id\":$i,\"method\":\"eth_getBalance\",\"params\":[\"$DEV_ACCOUNT\",\"latest\"]}"
    assert_code 200
    assert_hdr X-Rpcroute-Provider '^good$'
  done
  assert_equal "$(fake_stat other '.methods.eth_getBalance // 0')" "$before_other" "eth_getBalance sent to the wrong chain"
  assert_equal "$(fake_stat behind '.methods.eth_getBalance // 0')" "$before_behind" "eth_getBalance sent to the lagging node"
}

# ---------------------------------------------------------------------------------------------------
# 5. Kill and restart a node under load

# A wrk script: POST eth_blockNumber; counts answers that are not HTTP 200 with a "result".
write_wrk_script() { # FILE
  cat >"$1" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) answers = 0; failures = 0; sample = "" end
function response(status, headers, body)
  answers = answers + 1
  if status ~= 200 or not string.find(body, '"result"', 1, true) then
    failures = failures + 1
    if sample == "" then sample = status .. " " .. string.sub(body, 1, 300) end
  end
end
function done(summary, latency, requests)
  local a, f, s = 0, 0, ""
  for _, t in ipairs(threads) do
    a = a + t:get("answers"); f = f + t:get("failures")
    if s == "" then s = t:get("sample") end
  end
  local e = summary.errors
  io.write(string.format("LOAD answers=%d failures=%d connect=%d read=%d write=%d timeout=%d status=%d\n",
    a, f, e.connect, e.read, e.write, e.timeout, e.status))
  io.write("SAMPLE " .. s .. "\n")
end
LUA
}

# The fallback load without wrk: WORKERS loops, each running curl processes that send 200 keep-alive
# POSTs each (no retries), until OUT_DIR/stop exists. Per request: "@@ STATUS" after the body.
curl_load() { # URL WORKERS OUT_DIR
  local url=$1 workers=$2 out=$3 w i urls=()
  for ((i = 0; i < 200; i++)); do urls+=("$url"); done
  for ((w = 0; w < workers; w++)); do
    (
      while [[ ! -e $out/stop ]]; do
        curl -s --retry 0 --max-time 120 -X POST -H 'content-type: application/json' --data-binary "$BN" \
          -w '\n@@ %{http_code}\n' "${urls[@]}" >>"$out/w$w" 2>/dev/null
      done
    ) &
  done
  wait
}

@test "load: SIGKILL of one of three anvil nodes under load and its restart cause no failed client request" {
  start_anvil n1
  start_anvil n2
  start_anvil n3
  # Nothing is mined: every node (and the restarted one) stays at height 0, so lag cannot exclude
  # the restarted node. Recovery is kept short and not doubled on reopen.
  write_profile "$P" n1 n2 n3 --extra 'health: {circuit_breaker: {failure_threshold: 3, recovery_timeout_ms: 2000, max_recovery_timeout_ms: 2000}}'
  start_sidecar -p "$P" --strategy load_balanced
  local url=$SC_URL/rpc/local out=$BATS_TEST_TMPDIR/load load_pid
  mkdir -p "$out"
  local use_wrk=0
  command -v wrk >/dev/null 2>&1 && [[ -z ${SERVE_E2E_NO_WRK:-} ]] && use_wrk=1
  if ((use_wrk)); then
    write_wrk_script "$out/post.lua"
    # Stopped with SIGINT once the restarted node serves again; 60 s is only the upper bound.
    wrk -t2 -c8 -d60s --timeout 5s -s "$out/post.lua" "$url" >"$out/wrk.out" 2>&1 3>&- &
    load_pid=$!
  else
    curl_load "$url" 4 "$out" 3>&- &
    load_pid=$!
  fi
  sleep 2
  local states=() s last="" t_kill t_open="" t_restart t_closed="" n2_before n2_after=0 deadline
  local killed_pid
  killed_pid=$(node_pid n2)
  kill -9 "$killed_pid"
  wait "$killed_pid" 2>/dev/null || true
  rm -f "$(_proc_dir)/n2.pid"
  t_kill=$(now_ms)
  # The breaker of n2 opens.
  deadline=$((t_kill + 8000))
  while (($(now_ms) < deadline)); do
    s=$(metric_of rpcroute_breaker_state n2)
    [[ $s == "$last" ]] || { states+=("$s@$(($(now_ms) - t_kill))ms"); last=$s; }
    if [[ $s == 2 ]]; then t_open=$(now_ms); break; fi
    sleep 0.1
  done
  sleep 1
  # Restart it on the same port; then it must serve client traffic again.
  restart_anvil n2
  t_restart=$(now_ms)
  n2_before=$(metric_of rpcroute_attempts_total n2 'outcome="success"')
  deadline=$((t_restart + 30000))
  while (($(now_ms) < deadline)); do
    METRICS_TEXT=$(metrics_text)
    s=$(METRICS_TEXT=$METRICS_TEXT metric_of rpcroute_breaker_state n2)
    [[ $s == "$last" ]] || { states+=("$s@$(($(now_ms) - t_kill))ms"); last=$s; }
    n2_after=$(METRICS_TEXT=$METRICS_TEXT metric_of rpcroute_attempts_total n2 'outcome="success"')
    if [[ $s == 0 ]] && ((n2_after > n2_before + 50)); then t_closed=$(now_ms); break; fi
    sleep 0.1
  done
  unset METRICS_TEXT
  # A little more load with all three nodes, then stop it.
  sleep 1
  if ((use_wrk)); then kill -INT "$load_pid" 2>/dev/null || true; else touch "$out/stop"; fi
  wait "$load_pid" || true
  local answers failures sockerr
  if ((use_wrk)); then
    cat "$out/wrk.out" >&2
    answers=$(sed -n 's/^LOAD answers=\([0-9]*\).*/\1/p' "$out/wrk.out")
    failures=$(sed -n 's/^LOAD .*failures=\([0-9]*\).*/\1/p' "$out/wrk.out")
    sockerr=$(awk '/^LOAD/ { n = 0; for (i = 4; i <= NF; i++) { split($i, kv, "="); n += kv[2] } print n }' "$out/wrk.out")
  else
    answers=$(cat "$out"/w* | grep -c '^@@ ' || true)
    failures=$(cat "$out"/w* | awk '/^@@ / { if ($2 != 200 || !ok) f++; ok = 0; next } /"result"/ { ok = 1 } END { print f + 0 }')
    sockerr=0
  fi
  local report
  report="requests=$answers failures=$failures socket_errors=$sockerr breaker(n2)=${states[*]} open_after_kill_ms=$((${t_open:-0} - t_kill)) closed_after_restart_ms=$((${t_closed:-0} - t_restart)) n2_successes=$n2_before->$n2_after"
  echo "# load: $report" >&3
  echo "$report" >&2
  # The load ran (speed is tests/perf's, not a functional test's: a loaded 2-core machine under
  # ASan may move a tenth of what a quiet one does); what is checked is that none of it failed.
  ((answers >= 500)) || { echo "only $answers requests: the load hardly ran" >&2; false; }
  assert_equal "$failures" 0 "failed client requests"
  assert_equal "$sockerr" 0 "socket errors"
  [[ -n $t_open ]] || { echo "the breaker of n2 never showed open" >&2; false; }
  [[ -n $t_closed ]] || { echo "n2 did not take traffic again within 30 s of its restart" >&2; false; }
  # The state file (saved at shutdown) agrees: n2 closed again, with samples from after its restart.
  stop_sidecar
  assert_equal "$SC_EXIT" 0 "sidecar exit"
  local entry
  entry=$(jq '[.providers[] | select(.provider == "n2")] | first' "$S")
  assert_json "$entry" '.breaker.state == "closed"'
  assert_json "$entry" '[.methods.eth_blockNumber.samples[] | select(.[0] > $t and .[2] == "success")] | length > 0' \
    --argjson t "$t_restart"
}

# ---------------------------------------------------------------------------------------------------
# 6. Safety defaults

@test "safety: Host and Origin checks, CORS for allowed origins, preflight" {
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe
  sc_post /rpc/local "$BN" -H 'Host: evil.example'
  assert_code 403
  sc_post /rpc/local "$BN" -H "Host: evil.example:$SC_PORT"
  assert_code 403
  sc_post /rpc/local "$BN" -H 'Origin: https://evil.example'
  assert_code 403
  sc_post /rpc/local "$BN" -H 'Origin: http://localhost.evil.example'
  assert_code 403
  assert_equal "$(fake_requests f1)" 0 "requests sent upstream for refused requests"
  # Loopback names are fine.
  sc_post /rpc/local "$BN" -H "Host: localhost:$SC_PORT"
  assert_code 200
  sc_post /rpc/local "$BN" -H 'Origin: http://localhost:3000'
  assert_code 200
  assert_body_jq '.result == "0x64"'
  assert_hdr Access-Control-Allow-Origin '^http://localhost:3000$'
  sc_post /rpc/local "$BN" -H 'Origin: http://127.0.0.1:5173'
  assert_code 200
  assert_hdr Access-Control-Allow-Origin '^http://127.0.0.1:5173$'
  sc_req OPTIONS /rpc/local -H 'Origin: http://localhost:3000' -H 'Access-Control-Request-Method: POST' \
    -H 'Access-Control-Request-Headers: content-type'
  assert_code 204
  assert_hdr Access-Control-Allow-Origin '^http://localhost:3000$'
  assert_hdr Access-Control-Allow-Methods 'POST'
  assert_hdr Access-Control-Allow-Headers '[Cc]ontent-[Tt]ype'
  sc_req OPTIONS /rpc/local -H 'Origin: https://evil.example' -H 'Access-Control-Request-Method: POST'
  assert_code 403
  [[ -z $(hdr Access-Control-Allow-Origin) ]] || { _dump_http; false; }
}

@test "safety: 9 MB body → 413, broken JSON → -32700, GET on an RPC route → 405, unknown route or chain → 404" {
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe
  local big=$BATS_TEST_TMPDIR/big.json
  python3 -c 'import sys; sys.stdout.write("[" + ",".join(["{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_blockNumber\",\"params\":[]}"] * 150000) + "]")' >"$big"
  (($(stat -c %s "$big") > 9 * 1000 * 1000)) || { ls -l "$big" >&2; false; }
  sc_post /rpc/local "@$big"
  assert_code 413
  # Also when the size is not announced (chunked upload).
  sc_post /rpc/local "@$big" -H 'Transfer-Encoding: chunked'
  assert_code 413
  # The sidecar still serves afterwards.
  sc_post /rpc/local "$BN"
  assert_code 200
  sc_post /rpc/local '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":['
  assert_code 200
  assert_body_jq '.error.code == -32700 and .id == null'
  sc_post /rpc/local 'not json at all'
  assert_code 200
  assert_body_jq '.error.code == -32700'
  assert_equal "$(fake_requests f1)" 1 "requests sent upstream"
  sc_req GET /rpc/local
  assert_code 405
  sc_req GET /  # the dashboard's page (dashboard.bats); POST / stays JSON-RPC
  assert_code 200
  sc_req POST /nope
  assert_code 404
  assert_body_jq '.routes | type == "array" and length > 0'
  assert_body_jq '.routes | any(test("/rpc/:chain")) and any(test("/rpc/provider/"))'
  sc_req GET /rpc/x/y/z/w
  assert_code 404
  assert_body_jq '.routes | type == "array"'
  sc_post /rpc/nochain "$BN"
  assert_code 404
  sc_post /rpc/999999 "$BN"
  assert_code 404
  sc_post /rpc/nonsense-strategy/local "$BN"
  assert_code 404
  sc_req POST /healthz
  assert_code 405
}

# Raw HTTP/1.1 over one socket (python3): sends TEXT, prints what comes back within WAIT_S seconds,
# then "CLOSED after N s" if the server closed the connection.
raw_http() { # PORT TEXT WAIT_S
  python3 - "$@" <<'PY'
import socket, sys, time
port, text, wait = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
s.sendall(text.replace("\\r\\n", "\r\n").encode())
s.settimeout(0.2)
data, t0, closed = b"", time.time(), None
while time.time() - t0 < wait:
    try:
        d = s.recv(65536)
    except socket.timeout:
        continue
    except ConnectionResetError:
        closed = time.time() - t0
        break
    if not d:
        closed = time.time() - t0
        break
    data += d
sys.stdout.write(data.decode(errors="replace"))
if closed is not None:
    sys.stdout.write("\nCLOSED after %.1f s\n" % closed)
PY
}

@test "HTTP/1.1: keep-alive and pipelining answer every request on one connection, in order" {
  command -v python3 >/dev/null || skip "python3 needed"
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe
  local req="" i b
  for i in 1 2 3 4 5; do
    b="{\"jsonrpc\":\"2.0\",\"id\":$i,\"method\":\"eth_blockNumber\",\"params\":[]}"
    req+="POST /rpc/local HTTP/1.1\\r\\nHost: 127.0.0.1:$SC_PORT\\r\\nContent-Type: application/json\\r\\nContent-Length: ${#b}\\r\\n\\r\\n$b"
  done
  run raw_http "$SC_PORT" "$req" 2
  assert_status 0
  assert_equal "$(grep -o 'HTTP/1.1 200 OK' <<<"$output" | wc -l)" 5 "answers" || { _dump_run; false; }
  assert_equal "$(grep -o '"id":[0-9]*' <<<"$output" | tr '\n' ' ')" '"id":1 "id":2 "id":3 "id":4 "id":5 ' "ids in order"
  [[ $output != *CLOSED* ]] || { echo "connection closed" >&2; _dump_run; false; }
  assert_equal "$(fake_requests f1)" 5 "upstream requests"
}

# A client that sends too slowly is told 408 and cut off; others are still served.
@test "a slow client is cut off after --read-timeout (and told 408)" {
  command -v python3 >/dev/null || skip "python3 needed"
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe --read-timeout 1s -v
  # Headers promise 100 bytes of body; 5 come.
  run raw_http "$SC_PORT" "POST /rpc/local HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nContent-Type: application/json\\r\\nContent-Length: 100\\r\\n\\r\\n{\"jso" 4
  assert_status 0
  [[ $output =~ CLOSED\ after\ ([0-9.]+) ]] || { echo "not closed within 4 s" >&2; _dump_run; false; }
  awk -v t="${BASH_REMATCH[1]}" 'BEGIN { exit !(t < 3) }' || { echo "closed only after ${BASH_REMATCH[1]} s" >&2; false; }
  # The sidecar still serves.
  sc_post /rpc/local "$BN"
  assert_code 200
  [[ $output == *"HTTP/1.1 408"* ]] || {
    echo "no 408 answer before the close; sidecar log:" >&2
    cat "$SC_LOG" >&2
    _dump_run
    false
  }
}

@test "safety: a non-loopback --listen needs --allow-remote and a token (exit 2)" {
  write_profile "$P" a1
  run --separate-stderr rpcroute serve -p "$P" --listen 0.0.0.0:0 --state "$S" --no-probe
  assert_status 2
  assert_stderr_matches 'allow-remote'
  unset RPCROUTE_TOKEN
  run --separate-stderr rpcroute serve -p "$P" --listen 0.0.0.0:0 --allow-remote --state "$S" --no-probe
  assert_status 2
  assert_stderr_matches '[Tt]oken'
  run --separate-stderr rpcroute serve -p "$P" --listen nonsense --state "$S" --no-probe
  assert_status 2
}

@test "safety: --allow-remote on a loopback address needs a token too, and keeps the Host check" {
  start_fake f1 --height 100
  write_profile "$P" f1
  unset RPCROUTE_TOKEN
  run --separate-stderr rpcroute serve -p "$P" --listen 127.0.0.1:0 --allow-remote --state "$S" --no-probe
  assert_status 2
  assert_stderr_matches '[Tt]oken'
  start_sidecar -p "$P" --no-probe --allow-remote --token T0k3n-e2e
  # A DNS-rebinding page reaches only loopback: its Host is refused even with the right token.
  sc_post /rpc/local "$BN" -H 'Authorization: Bearer T0k3n-e2e' -H 'Host: evil.example'
  assert_code 403
  assert_body_jq '.error | test("Host")'
  assert_equal "$(fake_requests f1)" 0 "requests sent upstream for a foreign Host"
  sc_post /rpc/local "$BN" -H 'Authorization: Bearer T0k3n-e2e' -H 'Host: localhost:8545'
  assert_code 200
  assert_body_jq '.result == "0x64"'
}

@test "safety: with --token, requests need 'Authorization: Bearer T' (401 without), /healthz does not" {
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe --allow-remote --token T0k3n-e2e
  sc_post /rpc/local "$BN"
  assert_code 401
  sc_post /rpc/local "$BN" -H 'Authorization: Bearer wrong'
  assert_code 401
  sc_post /rpc/local "$BN" -H 'Authorization: Bearer T0k3n-e2e-longer'
  assert_code 401
  sc_req GET /status
  assert_code 401
  sc_req GET /metrics
  assert_code 401
  assert_equal "$(fake_requests f1)" 0 "requests sent upstream without the token"
  sc_post /rpc/local "$BN" -H 'Authorization: Bearer T0k3n-e2e'
  assert_code 200
  assert_body_jq '.result == "0x64"'
  sc_req GET /status -H 'Authorization: Bearer T0k3n-e2e'
  assert_code 200
  sc_req GET /healthz
  assert_code 200
}

@test "safety: the token's scheme is case-insensitive ('bearer', 'BEARER'), the token itself is not" {
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe --allow-remote --token T0k3n-e2e
  local scheme
  for scheme in bearer BEARER bEaReR Bearer; do
    sc_post /rpc/local "$BN" -H "Authorization: $scheme T0k3n-e2e"
    assert_code 200
    assert_body_jq '.result == "0x64"'
  done
  sc_post /rpc/local "$BN" -H 'Authorization: bearer t0k3n-e2e'
  assert_code 401
  sc_post /rpc/local "$BN" -H 'Authorization: Basic T0k3n-e2e'
  assert_code 401
  sc_post /rpc/local "$BN" -H 'Authorization: bearer'
  assert_code 401
  assert_equal "$(fake_requests f1)" 4 "requests sent upstream"
}

# ---------------------------------------------------------------------------------------------------
# 7. SIGTERM during load

@test "SIGTERM during load: every accepted request answered, exit 0 within the grace period, state saved" {
  start_fake slow --delay-ms 50 --height 100
  write_profile "$P" slow
  local t_start
  t_start=$(now_ms)
  start_sidecar -p "$P" --no-probe --grace 5s
  local out=$BATS_TEST_TMPDIR/term w i urls=() pids=()
  mkdir -p "$out"
  for ((i = 0; i < 20; i++)); do urls+=("$SC_URL/rpc/local"); done
  # 50 clients, each one curl process sending 20 requests over keep-alive; per request: exit code,
  # HTTP status, body size, then the body on its own line.
  for ((w = 0; w < 50; w++)); do
    curl -s --retry 0 --max-time 30 -X POST -H 'content-type: application/json' --data-binary "$BN" \
      -w '\n@@ %{exitcode} %{http_code} %{size_download}\n' "${urls[@]}" >"$out/w$w" 2>/dev/null 3>&- &
    pids+=($!)
  done
  # Mid-way: once the upstream has seen 150 requests (of 1000).
  local deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)) && (($(fake_requests slow) < 150)); do sleep 0.02; done
  stop_sidecar 10
  local stop_ms=$SC_STOP_MS
  for pid in "${pids[@]}"; do wait "$pid" || true; done
  assert_equal "$SC_EXIT" 0 "sidecar exit status"
  ((stop_ms < 6000)) || { echo "exit took ${stop_ms} ms after SIGTERM (--grace 5s)" >&2; false; }
  # Each answer: 200 with a complete JSON-RPC result; a request that got no answer must be one that
  # found no listener (curl exit 7), never a cut connection or an empty 200.
  local tally
  tally=$(cat "$out"/w* | awk '
    /^@@ / {
      if ($3 == 200 && ok && $4 > 0) good++
      else if ($2 == 7 && $3 == "000") refused++
      else { bad++; if (bad <= 5) print "BAD " $0 " body=[" last "]" > "/dev/stderr" }
      ok = 0; last = ""; next
    }
    { last = $0; if ($0 ~ /^\{"jsonrpc":"2.0","id":1,"result":"0x64"\}$/) ok = 1 }
    END { printf "%d %d %d\n", good, refused, bad }')
  local good refused bad
  read -r good refused bad <<<"$tally"
  echo "# sigterm: answered=$good refused_after_close=$refused broken=$bad stop_ms=$stop_ms" >&3
  assert_equal "$bad" 0 "requests cut off or answered with an error"
  ((good >= 150)) || { echo "only $good answers" >&2; false; }
  ((refused > 0)) || { echo "the load had finished before SIGTERM: nothing to test" >&2; false; }
  assert_equal "$((good + refused + bad))" 1000 "requests accounted for"
  # Every request the upstream received was answered to the client.
  assert_equal "$(fake_requests slow)" "$good" "upstream requests vs answers"
  # The state file: valid JSON, holding this session's samples.
  jq -e '.version == 1' "$S" >/dev/null || { cat "$S" >&2; false; }
  local n
  n=$(samples_since "$S" "$t_start")
  ((n > 0)) || { echo "no samples from the session in $S" >&2; false; }
  assert_stderr_log_has 'stopped'
}

@test "SIGTERM with a request stuck upstream: exit 0 once --grace is over, state saved" {
  start_fake stuck --mode hang
  start_fake f_ok --height 100
  write_profile "$P" stuck,timeout_ms=30000 f_ok
  start_sidecar -p "$P" --no-probe --grace 1s
  sc_post /rpc/provider/f_ok/local "$BN"
  assert_code 200
  curl -s --max-time 30 -o /dev/null -X POST --data-binary "$BN" "$SC_URL/rpc/provider/stuck/local" 3>&- &
  local client=$! deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)) && (($(fake_requests stuck) < 1)); do sleep 0.05; done
  stop_sidecar 15
  wait "$client" || true
  assert_equal "$SC_EXIT" 0 "sidecar exit status"
  # Not before the grace period; well before the stuck request's 30 s timeout (a loaded machine
  # under ASan may take a few seconds more to save and exit, which is not what is tested).
  ((SC_STOP_MS >= 900 && SC_STOP_MS < 10000)) || { echo "exit ${SC_STOP_MS} ms after SIGTERM with --grace 1s" >&2; false; }
  jq -e '.version == 1 and ([.providers[] | select(.provider == "f_ok") | .methods.eth_blockNumber.samples[]] | length == 1)' "$S" >/dev/null ||
    { cat "$S" >&2; false; }
}

# The sidecar's stderr matches ERE.
assert_stderr_log_has() { # ERE
  grep -Eq -- "$1" "$SC_LOG" || { echo "sidecar log does not match /$1/:" >&2; cat "$SC_LOG" >&2; false; }
}

# Latency samples of f1's eth_blockNumber in the state file $S is N.
f1_samples_are() { # N
  jq -e --argjson n "$1" '[.providers[] | select(.provider == "f1") | .methods.eth_blockNumber.samples[]] | length == $n' "$S"
}

@test "SIGHUP (and SIGUSR1/2) save the state and serving goes on: nothing learned is lost to them" {
  # Issue 14.15: SIGHUP ended serve (exit 129) without saving. No profile reload exists: it saves.
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe
  sc_post /rpc/local "$BN"
  assert_code 200
  kill -HUP "$SC_PID"
  eventually 3 "one sample saved at SIGHUP" f1_samples_are 1
  sleep 0.2
  kill -0 "$SC_PID" || { echo "serve ended at SIGHUP" >&2; cat "$SC_LOG" >&2; false; }
  assert_stderr_log_has 'SIGHUP: state saved'
  sc_post /rpc/local "$BN"
  assert_code 200
  kill -USR1 "$SC_PID"
  eventually 3 "two samples saved at SIGUSR1" f1_samples_are 2
  kill -USR2 "$SC_PID"
  sleep 0.2
  kill -0 "$SC_PID" || { echo "serve ended at SIGUSR2" >&2; false; }
  sc_post /rpc/local "$BN"
  assert_code 200
  stop_sidecar
  assert_equal "$SC_EXIT" 0 "sidecar exit status"
  f1_samples_are 3
}

@test "Expect: 100-continue adds no second: a 1.5 MB body is answered at once; a refused one gets its status unsent" {
  # Issue 15.5: the 100 Continue never came, so curl sent bodies over 1 MiB after its own timeout
  # (1 s by default; 5 s here, so that a missing 100 cannot pass for speed).
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe --max-body 2000000
  local big=$BATS_TEST_TMPDIR/big.json huge=$BATS_TEST_TMPDIR/huge.json out code up t
  { printf '%s' "$BN"; head -c 1500000 /dev/zero | tr '\0' ' '; } >"$big"
  { printf '%s' "$BN"; head -c 3000000 /dev/zero | tr '\0' ' '; } >"$huge"
  out=$(curl -s --max-time 30 --expect100-timeout 5 -H 'Expect: 100-continue' -H 'content-type: application/json' \
    --data-binary "@$big" -o "$BODYF" -w '%{http_code} %{size_upload} %{time_total}' "$SC_URL/rpc/local") || true
  read -r code up t <<<"$out"
  assert_equal "$code" 200 "status of the 1.5 MB request"
  jq -e '.result == "0x64"' "$BODYF" >/dev/null || { cat "$BODYF" >&2; false; }
  assert_equal "$up" "$(stat -c %s "$big")" "bytes uploaded"
  awk -v t="$t" 'BEGIN { exit !(t < 3) }' || { echo "took $t s: the 100 Continue did not come" >&2; false; }
  # Over --max-body: 413 at once, and the body is never sent. Chunked (no length) is read, then cut.
  out=$(curl -s --max-time 30 --expect100-timeout 5 -H 'Expect: 100-continue' -H 'content-type: application/json' \
    --data-binary "@$huge" -o "$BODYF" -w '%{http_code} %{size_upload} %{time_total}' "$SC_URL/rpc/local") || true
  read -r code up t <<<"$out"
  assert_equal "$code" 413 "status of the 3 MB request"
  assert_equal "$up" 0 "bytes uploaded before the 413"
  awk -v t="$t" 'BEGIN { exit !(t < 3) }' || { echo "took $t s" >&2; false; }
  sc_post /rpc/local "@$huge" -H 'Expect: 100-continue' -H 'Transfer-Encoding: chunked'
  assert_code 413
  # Refused on its head (here: no token): the final status at once, the body never sent.
  stop_sidecar
  start_sidecar -p "$P" --no-probe --max-body 2000000 --allow-remote --token T0k3n-e2e
  out=$(curl -s --max-time 30 --expect100-timeout 5 -H 'Expect: 100-continue' -H 'content-type: application/json' \
    --data-binary "@$big" -o "$BODYF" -w '%{http_code} %{size_upload} %{time_total}' "$SC_URL/rpc/local") || true
  read -r code up t <<<"$out"
  assert_equal "$code" 401 "status without the token"
  assert_equal "$up" 0 "bytes uploaded before the 401"
  awk -v t="$t" 'BEGIN { exit !(t < 3) }' || { echo "took $t s" >&2; false; }
  out=$(curl -s --max-time 30 --expect100-timeout 5 -H 'Expect: 100-continue' -H 'content-type: application/json' \
    -H 'Authorization: Bearer T0k3n-e2e' --data-binary "@$big" -o "$BODYF" -w '%{http_code} %{size_upload}' \
    "$SC_URL/rpc/local") || true
  read -r code up <<<"$out"
  assert_equal "$code" 200 "status with the token"
  assert_equal "$up" "$(stat -c %s "$big")" "bytes uploaded with the token"
  # HTTP/1.0 has no 100 Continue: the request is read as it comes.
  out=$(curl -s --http1.0 --max-time 30 -H 'Expect: 100-continue' -H 'content-type: application/json' \
    -H 'Authorization: Bearer T0k3n-e2e' \
    --data-binary "@$big" -o "$BODYF" -w '%{http_code}' "$SC_URL/rpc/local") || true
  assert_equal "$out" 200 "status of the HTTP/1.0 request"
}

# ---------------------------------------------------------------------------------------------------
# 8. rank reads what the sidecar flushed

@test "rank run while the sidecar serves shows its samples; a concurrent rpcroute call's samples survive its flushes" {
  write_profile "$P" a1 a2 a3
  start_sidecar -p "$P" --no-probe
  # Another process writes the same state file while the sidecar runs: three samples for a3.
  local i
  for i in 1 2 3; do
    run --separate-stderr rpcroute call -p "$P" --state "$S" --provider a3 eth_blockNumber
    assert_status 0
  done
  # Then the sidecar serves a1 and a2 (never a3), six requests each.
  for i in $(seq 6); do
    sc_post /rpc/provider/a1/local "$BN"
    assert_code 200
    sc_post /rpc/provider/a2/local "$BN"
    assert_code 200
  done
  # Its next flush (every 5 s) makes them visible to rank.
  local deadline=$((SECONDS + 8)) ok=0
  while ((SECONDS < deadline)); do
    run --separate-stderr rpcroute rank -p "$P" --state "$S" --json
    if [[ $status == 0 ]] && jq -e '[.candidates[] | select(.provider != "a3" and .samples >= 6)] | length == 2' <<<"$output" >/dev/null 2>&1; then
      ok=1
      break
    fi
    sleep 0.5
  done
  ((ok)) || { echo "rank never showed the sidecar's samples for a1 and a2" >&2; _dump_run; false; }
  assert_jq '[.candidates[] | select(.provider == "a1" or .provider == "a2") | .samples] == [6, 6]'
  # The call's samples were merged, not overwritten.
  assert_jq '[.candidates[] | select(.provider == "a3") | .samples] == [3]'
  # Still serving (a1 again: a3 keeps only the call's samples).
  kill -0 "$SC_PID"
  sc_post /rpc/provider/a1/local "$BN"
  assert_code 200
  # And after the final flush at shutdown.
  stop_sidecar
  assert_equal "$SC_EXIT" 0 "sidecar exit"
  run --separate-stderr rpcroute rank -p "$P" --state "$S" --json
  assert_status 0
  assert_jq '[.candidates[] | select(.provider == "a3") | .samples] == [3]'
  assert_jq '[.candidates[].samples] | add == 16'
}

# ---------------------------------------------------------------------------------------------------
# 9. /healthz, /status, /metrics

@test "/healthz 503 before any provider answered and once every provider's breaker is open; /status shows why" {
  dead_port d1
  dead_port d2
  write_profile "$P" d1 d2 --extra 'health: {circuit_breaker: {failure_threshold: 1, recovery_timeout_ms: 60000}}'
  start_sidecar -p "$P" --no-probe
  # Nothing has answered yet (issue 21): not healthy, whatever the breakers say.
  sc_req GET /healthz
  assert_code 503
  sc_req GET /status
  assert_body_jq '[.health[0].providers[].why] == ["has not answered yet", "has not answered yet"]'
  sc_post /rpc/local "$BN"
  assert_code 503
  assert_body_jq '.error.code == -32050 and (.error.data.attempts | length == 2)'
  sc_req GET /healthz
  assert_code 503
  sc_req GET /status
  assert_code 200
  assert_body_jq '.profiles | type == "array" and length == 1'
  # Nothing is usable: the open breakers are candidates as trials (issue 15), not usable ones.
  assert_body_jq '[.profiles[0].candidates[].breaker] == ["open", "open"] and .profiles[0].excluded == []'
  # Each request is a trial of both; the 503 lists the attempts.
  sc_post /rpc/local "$BN"
  assert_code 503
  assert_body_jq '.error.code == -32050 and (.error.data.attempts | length == 2)'
  sc_req GET /metrics
  assert_code 200
  [[ $(METRICS_TEXT=$body metric_of rpcroute_breaker_state d1) == 2 ]] || { _dump_http; false; }
  [[ $(METRICS_TEXT=$body metric_of rpcroute_breaker_state d2) == 2 ]] || { _dump_http; false; }
}

@test "/healthz, /status and /metrics with healthy providers" {
  start_fake f1 --height 100
  start_fake f2 --height 100
  write_profile "$P" f1 f2
  start_sidecar -p "$P"
  local i
  for i in 1 2 3 4; do sc_post /rpc/local "$BN"; done
  sc_req GET /healthz
  assert_code 200
  sc_req GET /status
  assert_code 200
  assert_hdr Content-Type 'json'
  assert_body_jq '.profiles | type == "array" and length == 1'
  assert_body_jq '.profiles[0] | .chain == "local" and (.candidates | length == 2) and .excluded == []'
  assert_body_jq '[.profiles[0].candidates[].provider] | sort == ["f1", "f2"]'
  sc_req GET /metrics
  assert_code 200
  assert_hdr Content-Type '^text/plain'
  local m
  for m in rpcroute_requests_total rpcroute_upstream_latency_seconds_bucket rpcroute_breaker_state \
    rpcroute_in_flight_requests rpcroute_attempts_total rpcroute_provider_height rpcroute_high_water_mark \
    rpcroute_rate_limited; do
    grep -q "^$m" <<<"$body" || { echo "no $m in /metrics" >&2; _dump_http; false; }
  done
  # The four calls are counted.
  local total
  total=$(awk '/^rpcroute_requests_total\{.*method="eth_blockNumber".*outcome="result"/ { n += $NF } END { print n + 0 }' <<<"$body")
  assert_equal "$total" 4 "rpcroute_requests_total for eth_blockNumber"
  grep -q '^rpcroute_high_water_mark{.*} 100$' <<<"$body" || { _dump_http; false; }
}

# ---------------------------------------------------------------------------------------------------
# 10. Request log and secrets

@test "-v: one log line per request; the provider URLs' secrets appear in no log, header, page or state" {
  export SECRET=s3cr3t-value-xyz
  start_fake f1 --height 100
  dead_port d1
  local f1_port d1_port
  f1_port=$(node_port f1)
  d1_port=$(node_port d1)
  write_profile "$P" \
    "f1,url=\"http://127.0.0.1:$f1_port/?key=\${SECRET}\"" \
    "d1,url=\"http://127.0.0.1:$d1_port/v2/\${SECRET}/rpc\""
  start_sidecar -p "$P" -v
  local all=$BATS_TEST_TMPDIR/everything
  : >"$all"
  local n=0
  keep() { cat "$HDRS" "$BODYF" >>"$all" 2>/dev/null || true; n=$((n + 1)); }
  sc_post /rpc/priority/local "$BN"; assert_code 200; keep
  sc_post /rpc/local "[$BN,$BN]"; assert_code 200; keep
  sc_post /rpc/provider/d1/local "$BN"; assert_code 503; keep
  sc_post /rpc/provider/f1/local '{"jsonrpc":"2.0","id":2,"method":"eth_noSuchMethod","params":[]}'; keep
  sc_post /rpc/local 'broken'; keep
  sc_req GET /status; assert_code 200; keep
  sc_req GET /metrics; assert_code 200; keep
  sc_req GET /healthz; keep
  sc_req GET /nope; assert_code 404; keep
  # The fake received the secret (the URL is used as configured).
  (($(fake_requests f1) >= 1))
  stop_sidecar
  assert_equal "$SC_EXIT" 0 "sidecar exit"
  # One line per request, each naming its path and status.
  local lines
  lines=$(grep -cE ' (GET|POST) /[^ ]* [0-9]{3} ' "$SC_LOG" || true)
  assert_equal "$lines" "$n" "request log lines" || { cat "$SC_LOG" >&2; false; }
  grep -Eq ' POST /rpc/priority/local 200 eth_blockNumber provider=f1 ' "$SC_LOG" || { cat "$SC_LOG" >&2; false; }
  grep -Eq ' POST /rpc/provider/d1/local 503 ' "$SC_LOG" || { cat "$SC_LOG" >&2; false; }
  # Nowhere: the secret, nor the URLs' paths.
  local where
  for where in "$SC_LOG" "$all" "$S" "$BATS_TEST_TMPDIR/sidecar.stdout"; do
    if grep -Fq -e "$SECRET" -e '/v2/' -e '?key=' "$where"; then
      echo "secret or URL path found in $where:" >&2
      grep -F -e "$SECRET" -e '/v2/' -e '?key=' "$where" >&2
      false
    fi
  done
  [[ -s $S ]]
}

@test "--log-format json: one JSON object per request" {
  start_fake f1 --height 100
  write_profile "$P" f1
  start_sidecar -p "$P" --no-probe -v --log-format json
  sc_post /rpc/local "$BN"
  sc_post /rpc/local "$BN"
  sc_req GET /healthz
  stop_sidecar
  local objs
  objs=$(grep '^{' "$SC_LOG" | jq -s 'length')
  assert_equal "$objs" 3 "JSON log lines"
  grep '^{' "$SC_LOG" | jq -e -s '.[0] | .status == 200 and .path == "/rpc/local" and .rpc_method == "eth_blockNumber" and .provider == "f1"' >/dev/null ||
    { cat "$SC_LOG" >&2; false; }
}

# ---------------------------------------------------------------------------------------------------
# The fences around the fast paths (RPCROUTE_FAST_HTTP1, RPCROUTE_PLAIN_JSON; tests/perf ablation)

# The same requests, each answer as curl -i shows it (status line, headers, body), without the two
# headers that differ from one answer to the next.
fence_answers() {
  local u=$SC_URL j='content-type: application/json'
  local batch='[{"jsonrpc":"2.0","id":"a","method":"eth_blockNumber","params":[]},42,
                {"jsonrpc":"2.0","id":9,"method":"eth_chainId","params":[]},{"jsonrpc":"2.0","method":"eth_blockNumber"}]'
  ask() { # WHAT CURL ARGS...
    echo "--- $1"
    shift
    curl -s -i "$@"
    echo
  }
  {
    ask single -H "$j" --data-binary "$BN" "$u/rpc/local"
    ask batch -H "$j" --data-binary "$batch" "$u/rpc/local"
    ask "notification only" -H "$j" --data-binary '{"jsonrpc":"2.0","method":"eth_blockNumber"}' "$u/rpc/local"
    ask "broken JSON" -H "$j" --data-binary '{"jsonrpc":' "$u/rpc/local"
    ask "invalid request" -H "$j" --data-binary '{"jsonrpc":"2.0","id":1}' "$u/rpc/local"
    ask "escapes and exponents" -H "$j" \
      --data-binary '{"jsonrpc":"2.0","id":"\u0041","method":"eth_blockNumber","params":[],"x":1e3}' "$u/rpc/local"
    ask "HTTP/1.0, keep-alive" --http1.0 -H 'Connection: keep-alive' -H "$j" --data-binary "$BN" "$u/rpc/local"
    ask "HTTP/1.0" --http1.0 -H "$j" --data-binary "$BN" "$u/rpc/local"
    ask "Expect: 100-continue" -H 'Expect: 100-continue' -H "$j" --data-binary "$BN" "$u/rpc/local"
    ask "two on one connection" -H "$j" --data-binary "$BN" "$u/rpc/local" "$u/rpc/local"
    ask "HEAD /healthz" -I "$u/healthz"
    ask "GET on an RPC route" "$u/rpc/local"
    ask "GET on an RPC route, with Upgrade" -H 'Upgrade: websocket' -H 'Connection: Upgrade' "$u/rpc/local"
    ask "unknown route" "$u/nope"
    ask preflight -X OPTIONS -H 'Origin: http://localhost:3000' -H 'Access-Control-Request-Method: POST' "$u/rpc/local"
    ask "refused origin" -H 'Origin: https://evil.example' -H "$j" --data-binary "$BN" "$u/rpc/local"
    ask Host -H 'Host: evil.example' -H "$j" --data-binary "$BN" "$u/rpc/local"
  } | tr -d '\r' | grep -viE '^x-rpcroute-(request-id|upstream-latency):'
}

@test "fences: RPCROUTE_FAST_HTTP1=0 and RPCROUTE_PLAIN_JSON=0 answer byte for byte as the fast paths do" {
  start_fake f1 --height 100
  write_profile "$P" f1
  local on fast_off plain_off
  start_sidecar -p "$P" --no-probe
  on=$(fence_answers)
  stop_sidecar
  RPCROUTE_FAST_HTTP1=0 start_sidecar -p "$P" --no-probe
  fast_off=$(fence_answers)
  stop_sidecar
  RPCROUTE_PLAIN_JSON=0 start_sidecar -p "$P" --no-probe
  plain_off=$(fence_answers)
  stop_sidecar
  # The answers are the ones expected, not just equal.
  grep -q '^HTTP/1.1 200 OK$' <<<"$on"
  grep -q '"result":"0x64"' <<<"$on"
  grep -q '^HTTP/1.1 204 No Content$' <<<"$on"
  grep -q '^HTTP/1.0 200 OK$' <<<"$on"
  grep -q '^Connection: keep-alive$' <<<"$on"
  grep -q '^HTTP/1.1 405 Method Not Allowed$' <<<"$on"
  grep -q '^HTTP/1.1 403 Forbidden$' <<<"$on"
  grep -q -- '-32700' <<<"$on"
  grep -q -- '-32600' <<<"$on"
  assert_equal "$(grep -c '^--- ' <<<"$on")" 17 "answers" || { echo "$on" >&2; return 1; }
  if [[ $fast_off != "$on" ]]; then
    diff <(echo "$on") <(echo "$fast_off") >&2 || true
    return 1
  fi
  if [[ $plain_off != "$on" ]]; then
    diff <(echo "$on") <(echo "$plain_off") >&2 || true
    return 1
  fi
}

# ---------------------------------------------------------------------------------------------------
# 12. HTTPS providers (issue 17): the fake upstream over TLS (HTTP/1.1) and nginx as an HTTP/2 front,
# trusted through tls.ca_file with the test PKI made in setup_file (tls_helpers.bash).

# Writes $P with the providers given on stdin (YAML list items, 6 spaces in), strategy priority.
https_profile() {
  {
    printf 'name: e2e\nchains:\n  local:\n    chain_id: 31337\n    block_time_ms: 1000\n    providers:\n'
    cat
    printf 'routing:\n  default_strategy: priority\n'
  } >"$P"
}

# N client processes at once, each sending 5 requests over one keep-alive connection to PATH; every
# answer must be HTTP 200 with the result. Prints nothing; fails with the bad answers.
concurrent_ok() { # N PATH
  local n=$1 path=$2 i urls=() pids=() out=$BATS_TEST_TMPDIR/concurrent
  rm -f "$out".*
  for i in 1 2 3 4 5; do urls+=("$SC_URL$path"); done
  for i in $(seq "$n"); do
    curl -s --max-time 60 -X POST -H 'content-type: application/json' --data-binary "$BN" \
      -w '\n@@ %{http_code}\n' "${urls[@]}" >"$out.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  local good
  good=$(cat "$out".* | grep -c '^{"jsonrpc":"2.0","id":1,"result":"0x64"}$' || true)
  assert_equal "$good" $((n * 5)) "answers with the result" || { cat "$out".* | grep -v '"result":"0x64"' >&2; return 1; }
  assert_equal "$(cat "$out".* | grep -c '^@@ 200$')" $((n * 5)) "HTTP 200 answers"
}

@test "https: the sidecar over an HTTPS fake: sequential requests share one TLS connection, concurrent ones are all answered" {
  start_tls_fake t1 --height 100
  https_profile <<EOF
      - { id: t1, url: "$(node_url t1)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  start_sidecar -p "$P" --no-probe
  fake_control t1 '{"reset_stats":true}'
  twenty_ok t1
  # The fake counts the connection of fake_stats itself too.
  local stats
  stats=$(fake_stats t1)
  assert_json "$stats" '.requests == 20 and .tls.connections == 2 and .tls.handshakes == 2 and .tls.failures == 0'
  concurrent_ok 8 /rpc/local
  stats=$(fake_stats t1)
  assert_json "$stats" '.requests == 60 and .tls.failures == 0 and .tls.connections <= 11'
  sc_post /rpc/local "$BN"
  assert_code 200
  assert_rpc_headers
  assert_hdr X-Rpcroute-Provider '^t1$'
  assert_hdr X-Rpcroute-Attempts '^1$'
}

@test "https: the sidecar through an nginx HTTP/2 front with http: \"2\": HTTP/2.0 on one connection, concurrent requests answered" {
  start_fake up --height 100
  local pf=$BATS_TEST_TMPDIR/front.port log
  start_h2_front "$pf" "$(node_port up)" h2
  log=$(front_log "$pf")
  https_profile <<EOF
      - { id: front, url: "https://localhost:$(cat "$pf")/", tls: { ca_file: "$TEST_PKI/ca.pem" }, http: "2" }
EOF
  start_sidecar -p "$P" --no-probe
  twenty_ok front
  # Every POST over HTTP/2, all 20 on one connection (nginx's connection serial number).
  assert_equal "$(grep -c ' POST /$' "$log")" 20 "POSTs in the access log" || { cat "$log" >&2; false; }
  ! grep ' POST ' "$log" | grep -v '^HTTP/2\.0 200 ' || { cat "$log" >&2; false; }
  assert_equal "$(grep ' POST ' "$log" | cut -d' ' -f3 | sort -u | wc -l)" 1 "connections for 20 sequential requests" ||
    { cat "$log" >&2; false; }
  concurrent_ok 8 /rpc/local
  assert_equal "$(grep -c ' POST /$' "$log")" 60 "POSTs in the access log"
  ! grep ' POST ' "$log" | grep -v '^HTTP/2\.0 200 ' || { cat "$log" >&2; false; }
  assert_json "$(fake_stats up)" '.requests == 60'
}

@test "https: a wrong-certificate provider fails over to a good one and shows as tls_failed" {
  start_tls_fake bad wrong_host --height 100
  start_tls_fake good --height 100
  https_profile <<EOF
      - { id: bad, url: "$(node_url bad)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
      - { id: good, url: "$(node_url good)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  start_sidecar -p "$P" --no-probe --strategy priority
  sc_post /rpc/priority/local "$BN"
  assert_code 200
  assert_body_jq '.result == "0x64" and .id == 1'
  assert_hdr X-Rpcroute-Provider '^good$'
  assert_hdr X-Rpcroute-Attempts '^2$'
  # The provider alone: a 503 whose attempt names the failure and its cause.
  sc_post /rpc/provider/bad/local "$BN"
  assert_code 503
  assert_hdr X-Rpcroute-Attempts '^1$'
  assert_body_jq '.error.code == -32050 and .error.data.attempts[0].provider == "bad"'
  assert_body_jq '.error.data.attempts[0].outcome == "tls_failed"'
  assert_body_jq '.error.data.attempts[0].message | contains("TLS: host name mismatch")'
  (($(metric_of rpcroute_attempts_total bad 'outcome="tls_failed"') >= 2)) || { metrics_text >&2; false; }
  (($(metric_of rpcroute_attempts_total good 'outcome="success"') >= 1)) || { metrics_text >&2; false; }
  sc_req GET /status
  assert_code 200
  assert_body_jq '.profiles[0].candidates | map(.provider) | index("good") != null'
  assert_json "$(fake_stats bad)" '.requests == 0 and .tls.failures >= 2'
}

@test "https: a provider whose TLS handshake hangs does not hold up answers from the other" {
  start_tls_fake hs --tls-handshake hang
  start_tls_fake good --height 100
  https_profile <<EOF
      - { id: hs, url: "$(node_url hs)", timeout_ms: 3000, tls: { ca_file: "$TEST_PKI/ca.pem" } }
      - { id: good, url: "$(node_url good)", tls: { ca_file: "$TEST_PKI/ca.pem" } }
EOF
  start_sidecar -p "$P" --no-probe
  local i t0 elapsed out=$BATS_TEST_TMPDIR/hs pids=()
  t0=$(now_ms)
  # Four requests held by the hanging handshake...
  for i in 1 2 3 4; do
    curl -s --max-time 30 -o "$out.$i" -w '%{http_code}' -X POST -H 'content-type: application/json' \
      --data-binary "$BN" "$SC_URL/rpc/provider/hs/local" >"$out.$i.code" &
    pids+=($!)
  done
  sleep 0.3
  # ...while the other provider answers 20 requests, well before hs's timeout.
  SC_URL=$SC_URL/rpc/provider/good
  concurrent_ok 4 /local
  elapsed=$(($(now_ms) - t0))
  ((elapsed < 2500)) || { echo "good's answers took ${elapsed} ms next to the hanging handshakes" >&2; false; }
  wait "${pids[@]}"  # not the fakes and the sidecar, children of this shell too
  for i in 1 2 3 4; do
    assert_equal "$(cat "$out.$i.code")" 503 "HTTP status of the request to hs"
    jq -e '.error.data.attempts[0] | .provider == "hs" and .outcome == "timeout"' "$out.$i" >/dev/null ||
      { cat "$out.$i" >&2; false; }
  done
  elapsed=$(($(now_ms) - t0))
  ((elapsed < 8000)) || { echo "the hanging requests took ${elapsed} ms (timeout_ms 3000)" >&2; false; }
}
