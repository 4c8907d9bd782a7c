#!/usr/bin/env bats
# Hostile HTTP against `rpcroute serve` (issue 6): slowloris, oversized headers and bodies, huge
# batches, deeply nested and invalid-UTF-8 JSON, pipelining, HTTP/1.0, missing Content-Length,
# chunked bodies, wrong Host and Origin, garbage request lines, clients that vanish mid-request.
# Each gets a clear answer (an HTTP status, and a JSON-RPC error where the body was read) within a
# bound, nothing it sent reaches the upstream unless it was a valid request, and a well-behaved
# client on another connection is served all the while (hostile_client.py --healthy).
#
# One sidecar for the whole file (--read-timeout 3s, so slow clients are cut off quickly), two
# chains: "local" (fake f1) takes the hostile requests, "other" (fake f2) the healthy client's, so
# f1's request count tells whether a hostile request went upstream. Limits under test (see
# sidecar/reader.hpp, server_config.hpp): headers 32 KiB (431), body --max-body 8 MiB (413), batch --max-batch 1000
# (-32600 for each item beyond), --read-timeout for one request's headers and body (408, then close).

# jq programs are single-quoted on purpose; each test runs in its own subshell.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers
load sidecar_helpers

READ_TIMEOUT_S=3
BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  command -v python3 >/dev/null || skip "python3 needed"
  e2e_setup_file_env
  start_fake f1 --height 100
  start_fake f2 --height 200 --chain-id 31338
  start_fake fh --height 100 --mode hang
  cat >"$BATS_FILE_TMPDIR/profile.yaml" <<EOF
name: hostile
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - id: f1
        url: $(node_url f1)
        priority: 1
      - id: fh
        url: $(node_url fh)
        priority: 9
        timeout_ms: 1500
  other:
    chain_id: 31338
    block_time_ms: 1000
    providers:
      - id: f2
        url: $(node_url f2)
routing:
  default_strategy: priority
EOF
  sidecar_start sc -p "$BATS_FILE_TMPDIR/profile.yaml" --state "$BATS_FILE_TMPDIR/state.json" --no-probe \
    --read-timeout "${READ_TIMEOUT_S}s" -v
}

# setup_file runs before e2e_setup: keep the sidecar away from the user's files too.
e2e_setup_file_env() {
  export HOME=$BATS_FILE_TMPDIR/home XDG_STATE_HOME=$BATS_FILE_TMPDIR/xdg-state
  export XDG_CONFIG_HOME=$BATS_FILE_TMPDIR/xdg-config RPCROUTE_PROFILES=$BATS_FILE_TMPDIR/profiles NO_COLOR=1
  unset RPCROUTE_PROFILE
  mkdir -p "$HOME" "$RPCROUTE_PROFILES"
}

teardown_file() {
  stop_all
}

# What a test started itself (not the shared sidecar and fakes).
teardown() {
  stop_all
}

setup() {
  e2e_setup
  sidecar_load sc
  kill -0 "$SC_PID" 2>/dev/null || {
    echo "the shared sidecar is gone; its log:" >&2
    cat "$SC_LOG" >&2
    false
  }
  F1_BEFORE=$(fake_requests f1)
  F1_STATS_BEFORE=$(fake_stats f1)
}

# Runs hostile_client.py CASE ARGS [:: CASE ARGS]... against the sidecar with a healthy client
# alongside; its JSON report is $output (.results[i] for the i-th case, .healthy).
hostile() { # [--wait S] CASE ARGS... [:: CASE ARGS...]...
  run --separate-stderr timeout 150 python3 "$BATS_TEST_DIRNAME/hostile_client.py" --port "$SC_PORT" --healthy \
    --healthy-path /rpc/other "$@"
  assert_status 0
  # The answers, in the test log.
  jq -r '.results[] | "# \(.case[0:90]): " + if .responses then
      ([.responses[] | "\(.status) in \(.t)s"] | join(", ")) + (if .closed then ", closed after \(.closed_after)s" else "" end)
    else del(.case, .case_s) | tostring end' <<<"$output" >&3 2>/dev/null || true
  jq -r '"# healthy client alongside: \(.healthy | del(.errors) | tostring)"' <<<"$output" >&3 2>/dev/null || true
}

# jq functions for expect's filters, on hostile's report. C is a case's index, N a response's.
JQ_LIB='
def resp($c; $n): .results[$c].responses[$n];
def body($c; $n): resp($c; $n).body | fromjson;
# HTTP status CODE within S seconds of sending.
def status($c; $n; $code; $s): resp($c; $n) | .status == $code and .t != null and .t < $s;
# A JSON-RPC error CODE with id null and a message.
def rpc_error($c; $n; $code): body($c; $n) | .jsonrpc == "2.0" and .id == null and .error.code == $code
  and (.error.message | length > 0);
# The JSON error object of an HTTP-level refusal.
def json_error($c; $n): body($c; $n) | .error | type == "string" and length > 0;
def closing($c; $n): resp($c; $n).headers.connection == "close";
def closed($c): .results[$c].closed;
# The healthy client got every answer, none slower than 5 s.
def healthy: .healthy.ok >= 1 and .healthy.fail == 0 and .healthy.max_ms < 5000;
'

# Every jq FILTER (with JQ_LIB) holds on $output; one jq run, and on failure the failing ones named.
expect() { # FILTER...
  local all f
  all=$(printf '(%s), ' "$@")
  if jq -e "$JQ_LIB [${all%, }] | all" <<<"$output" >/dev/null 2>&1; then return 0; fi
  for f in "$@"; do
    jq -e "$JQ_LIB $f" <<<"$output" >/dev/null 2>&1 || echo "failed: $f" >&2
  done
  printf -- '--- report:\n%s\n' "${output:0:6000}" >&2
  return 1
}

# Nothing reached the upstream f1 since the test began.
assert_no_upstream() {
  assert_equal "$(fake_requests f1)" "$F1_BEFORE" "requests f1 received"
}

# A normal request on a fresh connection is answered, and nothing is left in flight (the /status
# request itself is the one).
assert_still_serving() {
  local code deadline inflight
  code=$(curl -s --max-time 10 -o "$BATS_TEST_TMPDIR/ok" -w '%{http_code}' -X POST -H 'content-type: application/json' \
    --data "$BN" "$SC_URL/rpc/local") || true
  assert_equal "$code" 200 "status of a normal request afterwards"
  assert_json "$(cat "$BATS_TEST_TMPDIR/ok")" '.result == "0x64"'
  deadline=$((SECONDS + 15))
  while :; do
    inflight=$(curl -s --max-time 10 "$SC_URL/status" | jq '.in_flight')
    [[ $inflight == 1 ]] && break
    ((SECONDS < deadline)) || { assert_equal "$inflight" 1 "in-flight requests seen by /status"; return 1; }
    sleep 0.2
  done
}

# ---------------------------------------------------------------------------------------------------
# Slow clients

@test "slowloris: headers dribbled a byte a second, or a body that stops, get 408 and a close at --read-timeout" {
  local bound=$((READ_TIMEOUT_S + 4))
  hostile --wait 15 slowloris :: raw 'POST /rpc/local HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"jso'
  # The first line came at once, then one byte a second: cut off at the read timeout, not later.
  expect "status(0; 0; 408; $bound)" "resp(0; 0).t >= $READ_TIMEOUT_S - 0.5" 'json_error(0; 0)' 'closing(0; 0)' \
    'closed(0) and .results[0].closed_after < 12' \
    "status(1; 0; 408; $bound)" 'closed(1)' 'healthy'
  assert_no_upstream
  assert_still_serving
}

@test "slowloris: 50 connections dribbling at once are all cut off; others are served meanwhile" {
  hostile --wait 15 slowloris_many 50
  expect '.results[0] | .told_408 == 50 and .closed == 50 and .max_closed_after < 12 and (.errors | length == 0)' 'healthy'
  assert_no_upstream
  assert_still_serving
}

@test "200 connections that send nothing do not keep others from being served" {
  hostile --wait 4 idle_many 200
  # They are kept (--idle-timeout 60 s) and do not get in the way.
  expect '.results[0] | .connections == 200 and .still_open == 200' 'healthy'
  assert_still_serving
}

@test "out of file descriptors: the sidecar waits instead of spinning, and serves again once connections close" {
  command -v prlimit >/dev/null || skip "prlimit needed"
  # Under ASan the runtime needs descriptors of its own; scripts/test runs this suite on the g++
  # build too, where this case runs.
  [[ -z ${RPCROUTE_E2E_SANITIZED:-} ]] || skip "not under sanitizers (their runtime needs descriptors)"
  # A sidecar of its own with at most 48 open files, and 100 connections held for 3 s.
  sidecar_start lowfd -p "$BATS_FILE_TMPDIR/profile.yaml" --no-state --no-probe
  prlimit --pid "$SC_PID" --nofile=48:48
  local pid=$SC_PID
  run --separate-stderr timeout 60 python3 "$BATS_TEST_DIRNAME/hostile_client.py" --port "$SC_PORT" fd_flood "$pid" 100 3
  assert_status 0
  printf '# %s\n' "$output" >&3
  # Refusing to accept costs nothing; the connections beyond the limit wait in the backlog.
  expect '.results[0].held == 100' '.results[0].cpu_s < 0.5' '.results[0].after == [200]'
  kill -0 "$pid"
  sidecar_stop lowfd
  assert_equal "$SC_EXIT" 0 "sidecar exit"
  sidecar_load sc
}

# ---------------------------------------------------------------------------------------------------
# Size limits

@test "oversized headers: a 64 KiB or 1 MiB header, 5000 headers, a 40 KB target get 431; 300 headers are fine" {
  hostile big_header 65536 :: big_header 1048576 :: many_headers 5000 :: long_target 40000 :: many_headers 300
  expect 'status(0; 0; 431; 5)' 'json_error(0; 0)' 'closing(0; 0)' 'closed(0)' \
    'status(1; 0; 431; 5)' 'status(2; 0; 431; 5)' 'status(3; 0; 431; 5)' \
    'status(4; 0; 200; 5)' 'body(4; 0).result == "0x64"' 'healthy'
  # Only the last one went upstream.
  assert_equal "$(fake_requests f1)" $((F1_BEFORE + 1)) "requests f1 received"
  assert_still_serving
}

@test "a 10 MB body gets 413 (announced, sent, or chunked without a length) and nothing goes upstream" {
  # Announced but not sent: refused on the headers alone; sent in full; chunked, no Content-Length.
  hostile announced_body 10485760 :: big_body 10485760 :: chunked_big 10485760
  expect 'status(0; 0; 413; 5)' 'body(0; 0).error | test("larger than 8388608")' 'closing(0; 0)' \
    'status(1; 0; 413; 10)' 'closing(1; 0)' 'status(2; 0; 413; 10)' 'healthy'
  assert_no_upstream
  assert_still_serving
}

@test "a 10 000-item batch: the first 1,000 (--max-batch) are served, each of the others gets its own -32600" {
  hostile batch 10000
  expect 'status(0; 0; 200; 10)' 'body(0; 0) | length == 10000 and ([.[].id] == [range(10000)])' \
    'body(0; 0)[0:1000] | all(.result == "0x64")' \
    'body(0; 0)[1000:] | all(.error.code == -32600 and (.error.message | test("10000") and test("1000 ") and test("max-batch")))' \
    'healthy'
  # Only the first 1,000 calls went upstream.
  local calls_before
  calls_before=$(jq -e '.calls' <<<"$F1_STATS_BEFORE")
  assert_equal "$(fake_stat f1 .calls)" "$((calls_before + 1000))" "calls f1 received"
  assert_still_serving
}

# ---------------------------------------------------------------------------------------------------
# Bodies that are not (valid) JSON

@test "deeply nested JSON (100 000 '[' in params, balanced or not, objects, top level) gets -32700 at once" {
  hostile nested open 100000 :: nested balanced 100000 :: nested objects 100000 :: nested top 100000
  local c filters=()
  for c in 0 1 2 3; do
    filters+=("status($c; 0; 200; 10)" "rpc_error($c; 0; -32700)" "body($c; 0).error.message | test(\"deep\")")
  done
  expect "${filters[@]}" 'healthy'
  assert_no_upstream
  assert_still_serving
}

@test "invalid UTF-8 in the method, a param, the id or a key gets -32700; nothing goes upstream" {
  hostile bad_utf8 method :: bad_utf8 param :: bad_utf8 id :: bad_utf8 key :: bad_utf8 overlong :: bad_utf8 surrogate
  local c filters=()
  for c in 0 1 2 3 4 5; do
    filters+=("status($c; 0; 200; 10)" "rpc_error($c; 0; -32700)" "body($c; 0).error.message | test(\"UTF-8\")")
  done
  expect "${filters[@]}" 'healthy'
  assert_no_upstream
  assert_still_serving
}

# ---------------------------------------------------------------------------------------------------
# HTTP framing

@test "pipelining: six requests in one write (good, broken, batch, GET, 404, good) answered in order" {
  hostile pipeline
  expect '.results[0].responses | length == 6' '[.results[0].responses[].status] == [200, 200, 200, 200, 404, 200]' \
    'all(.results[0].responses[]; .version == "HTTP/1.1")' '.results[0].trailing == ""' \
    'body(0; 0) | .id == 11 and .result == "0x64"' 'rpc_error(0; 1; -32700)' 'body(0; 2) | [.[].id] == [13, 14]' \
    'body(0; 3).status == "ok"' 'body(0; 5) | .id == 16 and .result == "0x64"' 'status(0; 5; 200; 10)' \
    '.results[0].closed | not' 'healthy'
  # Three valid requests (one a batch of two) went upstream.
  assert_equal "$(fake_requests f1)" $((F1_BEFORE + 3)) "requests f1 received"
  # Cut into 7-byte pieces at arbitrary boundaries.
  hostile pipeline_split
  expect '[.results[0].responses[].status] == [200, 200, 200, 200]' \
    '[.results[0].responses[].body | fromjson | .id] == [20, 21, 22, 23]' 'healthy'
  assert_still_serving
}

@test "HEAD /healthz: headers only; the request pipelined after it is answered cleanly" {
  hostile head_then_get /healthz :: head_then_get /status
  expect '[.results[].responses[] | .version] == ["HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.1"]' \
    'status(0; 0; 200; 5)' 'resp(0; 0).body == ""' 'status(0; 1; 200; 5)' 'body(0; 1).status == "ok"' \
    'status(1; 1; 200; 5)' 'body(1; 1) | has("profiles")' '[.results[].trailing] == ["", ""]' 'healthy'
  assert_still_serving
}

@test "HTTP/1.0: answered as 1.0 and closed; with keep-alive two requests on one connection; no Host is fine" {
  hostile --wait 6 http10 :: http10_keepalive :: http10_nohost
  expect 'status(0; 0; 200; 5)' 'resp(0; 0).version == "HTTP/1.0"' 'body(0; 0).result == "0x64"' \
    'closed(0) and .results[0].closed_after < 5' \
    '.results[1].responses | length == 2' '[.results[1].responses[] | .status, .version] == [200, "HTTP/1.0", 200, "HTTP/1.0"]' \
    '[.results[1].responses[].body | fromjson | .id] == [1, 2]' \
    'resp(1; 0).headers.connection | ascii_downcase == "keep-alive"' 'closed(1) | not' \
    'status(2; 0; 200; 5)' 'closed(2)' 'healthy'
  assert_still_serving
}

@test "POST without Content-Length: an empty body (-32700), the unframed bytes then a 400, closed" {
  hostile no_length
  expect 'status(0; 0; 200; 5)' 'rpc_error(0; 0; -32700)' 'body(0; 0).error.message | test("empty")' \
    'status(0; 1; 400; 5)' 'json_error(0; 1)' 'closed(0)' 'healthy'
  assert_no_upstream
  assert_still_serving
}

@test "chunked request bodies: three chunks with an extension and a trailer work; a bad chunk size is 400" {
  # Content-Length and Transfer-Encoding together (the request smuggling shape) are refused too.
  hostile chunked :: chunked_bad :: smuggle
  expect 'status(0; 0; 200; 5)' 'body(0; 0) | .id == 7 and .result == "0x64"' \
    'status(1; 0; 400; 5)' 'json_error(1; 0)' 'closing(1; 0)' 'closed(1)' \
    'status(2; 0; 400; 5)' 'closed(2)' 'healthy'
  assert_equal "$(fake_requests f1)" $((F1_BEFORE + 1)) "requests f1 received"
  assert_still_serving
}

@test "Transfer-Encoding other than a lone chunked (chunked, identity / gzip / identity): 400 and a close" {
  # RFC 9112 section 6.3. The body is a whole second request: read as bodiless, it would be routed.
  hostile coding 'chunked, identity' :: coding gzip :: coding identity :: coding 'gzip, chunked' :: coding 'chunked, chunked'
  local c filters=()
  for c in 0 1 2 3 4; do
    filters+=("status($c; 0; 400; 5)" "json_error($c; 0)" "closing($c; 0)" "closed($c)"
      "(.results[$c].responses | length) == 1")
  done
  expect "${filters[@]}" 'healthy'
  assert_no_upstream
  assert_still_serving
}

@test "wrong Host (DNS rebinding) and a foreign Origin get 403 with a JSON error; nothing goes upstream" {
  hostile host evil.example :: host evil.example:8545 :: host 127.0.0.1.evil.example :: host localhost.evil.example \
    :: origin https://evil.example :: origin http://localhost.evil.example :: origin null \
    :: origin http://127.0.0.1.evil.example:8545
  local c filters=()
  for c in 0 1 2 3; do
    filters+=("status($c; 0; 403; 5)" "body($c; 0).error | test(\"Host\")")
  done
  for c in 4 5 6 7; do
    filters+=("status($c; 0; 403; 5)" "body($c; 0).error | test(\"origin\")"
      "resp($c; 0).headers[\"access-control-allow-origin\"] == null")
  done
  expect "${filters[@]}" 'healthy'
  assert_no_upstream
  assert_still_serving
}

@test "garbage request lines and headers get 400 and a close; a target that is not a path gets 404" {
  local args=() text
  for text in 'GARBAGE\r\n\r\n' '\x00\x01\x02\x03\xff\r\n\r\n' '\r\n\r\n\r\n' 'GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n' \
    'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' 'POST /rpc/local\r\n\r\n' 'POST /rpc/local HTTP/1.1\r\nNoColonHeader\r\n\r\n' \
    'POST /rpc/local HTTP/1.1\r\nContent-Length: -1\r\n\r\n' \
    'POST /rpc/local HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n' \
    'POST /rpc/local HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}' \
    'POST /rpc/local HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 2\n\n{}' \
    'POST http://127.0.0.1/rpc/local HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}' \
    'CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' \
    'POST /rpc/%2e%2e/local HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}'; do
    args+=(raw "$text" ::)
  done
  hostile "${args[@]:0:${#args[@]}-1}"
  local c filters=()
  for c in $(seq 0 10); do
    filters+=("status($c; 0; 400; 5)" "json_error($c; 0)" "closing($c; 0)" "closed($c)")
  done
  # An absolute-form or authority-form target, or a segment that is not a name: 404 with the routes.
  for c in 11 12 13; do
    filters+=("status($c; 0; 404; 5)" "body($c; 0).routes | length > 0")
  done
  expect "${filters[@]}" 'healthy'
  assert_no_upstream
  assert_still_serving
}

# ---------------------------------------------------------------------------------------------------
# Clients that leave

@test "a client that closes (or resets) mid-body or mid-headers leaves nothing behind" {
  hostile close_mid_body :: reset_mid_body :: close_mid_headers
  expect 'healthy'
  assert_no_upstream
  assert_still_serving
}

@test "a client that leaves before a slow upstream answers: the request is cancelled, nothing stays in flight" {
  # fh hangs; its timeout_ms is 1500 (with the priority strategy /rpc/local never reaches it).
  hostile close_before_answer /rpc/provider/fh/local
  expect 'healthy'
  # Cancelled once the sweeper sees it gone (assert_still_serving waits up to 15 s for that).
  assert_still_serving
}

@test "after all of it the sidecar stops cleanly on SIGTERM (exit 0) and logged the refused requests" {
  sidecar_stop sc 20
  assert_equal "$SC_EXIT" 0 "sidecar exit status"
  # The log has a line for the statuses given before a body was read (408, 413, 431, 400).
  local s
  for s in 408 413 431 400; do
    grep -Eq " $s " "$SC_LOG" || { echo "no $s in the sidecar log" >&2; tail -50 "$SC_LOG" >&2; false; }
  done
  # With the parser's reason, not the status of the write that answered it ("400 Success").
  grep -Eq ' 400 bad ' "$SC_LOG" || { echo "no 400 line with its reason in the sidecar log" >&2; false; }
  if grep -E ' [0-9]{3} Success$' "$SC_LOG" >&2; then false; fi
  grep -q 'stopped' "$SC_LOG"
  jq -e '.version == 1' "$BATS_FILE_TMPDIR/state.json" >/dev/null
}
