#!/usr/bin/env bats
# Trust at the edges (issue 14), the transport's items, through the real binary and both HTTP
# clients (the native one for http://IP upstreams, curl with RPCROUTE_HTTP_CLIENT=curl):
#   - a keep-alive connection never answers a request with an answer meant for another (an
#     unsolicited extra response, glued to the real one or arriving later);
#   - an answer over the response cap (endless chunked, endless under a huge Content-Length) is
#     abandoned and fails over; limits.max_response_mb and the method override set the cap;
#   - a gzip bomb is refused unread (both clients ask for identity);
#   - running out of memory while taking an answer fails that attempt at once and routing goes on;
#     the sidecar keeps serving. (RPCROUTE_TEST_ALLOC_LIMIT makes one large allocation fail.)
#   - Retry-After (issue 23): both clients keep the first field, whatever its name's case, and the
#     router turns seconds or a date into the same deadline; junk or an absurd value is ignored.
#   - a chunked answer (most dynamic servers frame so) is joined byte for byte by both clients over
#     http and https, whole in one read (the native fast path) or a byte a chunk; an extra answer
#     glued after it never answers the next request (issue 17).

# jq programs are single-quoted on purpose; each test runs in its own subshell.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers

CLIENTS=(native curl)

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  make_test_pki "$BATS_FILE_TMPDIR/pki"
}

setup() {
  e2e_setup
  start_fake f --height 100
  start_fake h --height 100
}

teardown() {
  stop_all
}

# Runs the rest of the command (a function too) with the HTTP client $1 selected for http:// URLs.
with_client() { # native|curl CMD...
  local client=$1
  shift
  if [[ $client == curl ]]; then
    RPCROUTE_HTTP_CLIENT=curl "$@"
  else
    (
      unset RPCROUTE_HTTP_CLIENT
      "$@"
    )
  fi
}

# One call through F then H (priority), as JSON: sets output.
call_fh() { # CLIENT ARGS...
  local client=$1
  shift
  run --separate-stderr with_client "$client" "$RPCROUTE_BIN" call --profile "$P" --no-state --strategy priority --json "$@"
}

# ---------------------------------------------------------------------------------------------------
# Keep-alive desync

# POSTs a call to the sidecar SC_PORT; sets reply (body) and provider (X-Rpcroute-Provider).
sc_call() { # ID METHOD PARAMS_JSON
  local hdrs=$BATS_TEST_TMPDIR/hdrs
  reply=$(curl -s --max-time 30 -D "$hdrs" -X POST -H 'content-type: application/json' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":$1,\"method\":\"$2\",\"params\":$3}" "http://127.0.0.1:$SC_PORT/rpc/local")
  provider=$(tr -d '\r' <"$hdrs" | awk -F': ' 'tolower($1) == "x-rpcroute-provider" { print $2 }')
}

desync_case() { # CLIENT EXTRA_MS
  local client=$1 extra_ms=$2
  write_profile "$P" --strategy priority f h
  with_client "$client" start_serve sc --profile "$P" --no-probe --no-state
  SC_PORT=$(node_port sc)
  fake_control f "{\"queue\":[{\"mode\":\"extra\",\"extra_ms\":$extra_ms}]}"
  sc_call 1 eth_getBalance "[\"$DEV_ACCOUNT\",\"latest\"]"
  assert_equal "$(jq -r .result <<<"$reply")" 0xde0b6b3a7640000 "balance (F's real answer)"
  assert_equal "$provider" f "provider of the balance"
  # Sent at once: with extra_ms > 0 it is on the pooled connection before F's extra answer.
  sc_call 2 eth_gasPrice '[]'
  assert_equal "$(jq -r .result <<<"$reply")" 0x3b9aca00 "gas price (not F's 0xdeadbeef)"
  sleep $(((extra_ms + 999) / 1000 + 1))
  sc_call 3 eth_gasPrice '[]'
  assert_equal "$(jq -r .result <<<"$reply")" 0x3b9aca00 "gas price, later"
  assert_equal "$provider" f "F answers again, on a fresh connection"
}

@test "serve: an extra answer arriving while the next request is on its way is never its answer" {
  for client in "${CLIENTS[@]}"; do
    echo "# client $client" >&3
    desync_case "$client" 1500
    stop_all
    start_fake f --height 100
    start_fake h --height 100
  done
}

@test "serve: an extra answer glued to the real one never answers the next request" {
  for client in "${CLIENTS[@]}"; do
    desync_case "$client" 0
    stop_all
    start_fake f --height 100
    start_fake h --height 100
  done
}

# ---------------------------------------------------------------------------------------------------
# Chunked answers (issue 17: the native client's fast path takes a whole chunked answer too)

# Runs the rest of the command with the client $1: native (the default; native_tls the same),
# curl (every URL), or curl_tls (https through curl, http still native).
with_any_client() { # native|curl|curl_tls CMD...
  case $1 in
    curl_tls) shift; RPCROUTE_NATIVE_TLS=0 with_client native "$@" ;;
    native_tls) shift; with_client native "$@" ;;
    *) with_client "$@" ;;
  esac
}

@test "call and serve: a chunked answer is joined byte for byte over http and https; a glued extra never answers" {
  start_tls_fake t --height 100
  start_tls_fake u --height 100
  local block='["0x5f",true]' want_block client pt=$BATS_TEST_TMPDIR/tls.yaml
  # H sends every answer with a Content-Length: the reference bytes.
  want_block=$(node_result h eth_getBlockByNumber "$block")
  [[ $want_block == *'"hash"'* ]] || { echo "no block from h: $want_block" >&2; false; }
  write_profile "$P" --strategy priority f h
  local ca="tls={ ca_file: \"$TEST_PKI/ca.pem\" }"
  write_profile "$pt" --strategy priority "t,$ca" "u,$ca"
  # A byte a chunk, a few bytes a chunk, and the whole body in one chunk.
  for chunk in 1 7 100000; do
    fake_control f "{\"chunk_bytes\":$chunk}"
    fake_control t "{\"chunk_bytes\":$chunk}"
    for client in native curl; do
      call_fh "$client" eth_getBlockByNumber "$block"
      assert_status 0
      assert_jq '.meta.provider == "f"'
      assert_equal "$(jq -c .result <<<"$output")" "$want_block" "$client, chunks of $chunk: f's block"
    done
    for client in native curl_tls; do
      run --separate-stderr with_any_client "$client" "$RPCROUTE_BIN" call --profile "$pt" --no-state --json eth_getBlockByNumber "$block"
      assert_status 0
      assert_jq '.meta.provider == "t"'
      assert_equal "$(jq -c .result <<<"$output")" "$want_block" "https, $client, chunks of $chunk: t's block"
    done
  done
  # Through the sidecar: a chunked answer with an extra one glued after it, then the next request
  # on the pooled connection (http: native and curl; https: native TLS and curl).
  for client in native curl native_tls curl_tls; do
    local via=f profile=$P
    [[ $client == *_tls ]] && via=t profile=$pt
    with_any_client "$client" start_serve sc --profile "$profile" --no-probe --no-state
    SC_PORT=$(node_port sc)
    fake_control "$via" '{"queue":[{"mode":"extra","chunk_bytes":5}],"chunk_bytes":5}'
    sc_call 1 eth_getBalance "[\"$DEV_ACCOUNT\",\"latest\"]"
    assert_equal "$(jq -r .result <<<"$reply")" 0xde0b6b3a7640000 "$client: balance ($via's real answer)"
    assert_equal "$provider" "$via" "$client: provider of the balance"
    sc_call 2 eth_gasPrice '[]'
    assert_equal "$(jq -r .result <<<"$reply")" 0x3b9aca00 "$client: gas price (not $via's 0xdeadbeef)"
    assert_equal "$provider" "$via" "$client: $via answers again"
    kill_node sc
  done
}

# ---------------------------------------------------------------------------------------------------
# Retry-After (issue 23): what each client keeps of the field and the deadline it becomes

# Calls F alone (answering 429 with the header fields FIELDS, a JSON array of [name, value]) through
# CLIENT with the state file on; checks the answer's retry_after_ms and the state's deadline
# against WANT: exact ms, LO-HI, or "none" (no retry_after_ms; the state takes the 30 s default).
retry_after_case() { # CLIENT WHAT FIELDS WANT
  local client=$1 what=$2 fields=$3 want=$4 lo hi before after until
  echo "# $client: $what" >&3
  fake_control f "{\"mode\":\"status\",\"status\":429,\"headers\":$fields}"
  rpcroute state reset >/dev/null
  before=$(now_ms)
  run --separate-stderr with_client "$client" "$RPCROUTE_BIN" call --profile "$P" --json eth_blockNumber
  after=$(now_ms)
  assert_status 3
  assert_jq '.meta.attempts[0] | .provider == "f" and .outcome == "rate_limited" and .http_status == 429'
  if [[ $want == none ]]; then
    assert_jq '.meta | has("retry_after_ms") | not'
    lo=30000 hi=30000
  else
    lo=${want%-*} hi=${want#*-}
    assert_jq '.meta.retry_after_ms >= $lo and .meta.retry_after_ms <= $hi' --argjson lo "$lo" --argjson hi "$hi"
  fi
  # The state keeps the deadline: the attempt's time plus the wait.
  until=$(state_entry f | jq -e '.rate_limited_until_ms') ||
    { echo "$client, $what: no rate_limited_until_ms in the state" >&2; false; }
  ((until >= before + lo && until <= after + hi)) ||
    { echo "$client, $what: rate-limited until $until, expected in [$((before + lo)), $((after + hi))]" >&2; false; }
}

@test "call: both clients read Retry-After alike (seconds, date, repeated, any case, junk) and keep its deadline" {
  write_profile "$P" --strategy priority f
  local client at
  for client in "${CLIENTS[@]}"; do
    retry_after_case "$client" seconds '[["Retry-After","20"]]' 20000
    # 45 s ahead in whole seconds: 44 to 45 s when read, whatever the load (well apart from 30 s).
    at=$(LC_ALL=C date -u -d "@$(($(date +%s) + 45))" '+%a, %d %b %Y %H:%M:%S GMT')
    retry_after_case "$client" "an HTTP-date" "[[\"Retry-After\",\"$at\"]]" 40000-45000
    retry_after_case "$client" "repeated: the first wins" '[["Retry-After","7"],["Retry-After","60"]]' 7000
    retry_after_case "$client" "lower-case name" '[["retry-after","5"]]' 5000
    retry_after_case "$client" "junk" '[["Retry-After","soon"]]' none
    retry_after_case "$client" "past a week" '[["Retry-After","604801"]]' none
    retry_after_case "$client" "absent" '[]' none
  done
}

# ---------------------------------------------------------------------------------------------------
# Response cap

@test "call: an endless answer is abandoned at the response cap and fails over" {
  local mode client
  write_profile "$P" f,timeout_ms=20000,'limits={max_response_mb: 1}' h
  for client in "${CLIENTS[@]}"; do
    for mode in endless endless_length; do
      fake_control f "{\"mode\":\"$mode\"}"
      call_fh "$client" eth_getBalance "$DEV_ACCOUNT" latest
      assert_status 0
      assert_jq '.meta.provider == "h" and .result == "0xde0b6b3a7640000"'
      assert_jq '.meta.attempts[0] | .provider == "f" and .outcome == "too_large" and .class == "provider_failure"'
      assert_jq '.meta.attempts[0].message | test("response cap")'
    done
  done
}

@test "call: a method override's max_response_mb wins over the provider's" {
  write_profile "$P" f,'limits={max_response_mb: 1}' h \
    --extra '  method_overrides: { eth_getBalance: { max_response_mb: 8 } }'
  fake_control f '{"mode":"huge","huge_bytes":3000000}'
  for client in "${CLIENTS[@]}"; do
    call_fh "$client" eth_getBalance "$DEV_ACCOUNT" latest
    assert_status 0
    assert_jq '.meta.provider == "f" and (.result | length) == 3000000'
    call_fh "$client" eth_getCode "$DEV_ACCOUNT" latest  # the provider's 1 MiB applies
    assert_status 0
    assert_jq '.meta.provider == "h" and .meta.attempts[0].outcome == "too_large"'
  done
}

@test "profiles: max_response_mb is checked like the other keys" {
  write_profile "$P" f,'limits={max_response_mb: 0}' h
  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 2
  assert_stderr_matches "max_response_mb' must be at least 1"
  write_profile "$P" f,'limits={max_response_mb: 5000}' h
  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 2
  assert_stderr_matches "max_response_mb' must be at most 4096"
  write_profile "$P" f h --extra '  method_overrides: { eth_call: { max_response_mb: "8" } }'
  run --separate-stderr rpcroute profiles validate "$P"
  assert_status 2
  assert_stderr_matches "max_response_mb' must be an integer"
}

# ---------------------------------------------------------------------------------------------------
# Gzip bomb

@test "call and serve: a gzip bomb is refused unread, by both clients" {
  local client
  write_profile "$P" f,timeout_ms=20000 h
  # 1 GiB once inflated, about 1 MiB on the wire.
  fake_control f '{"mode":"gzip_bomb","gzip_bytes":1073741824}'
  for client in "${CLIENTS[@]}"; do
    run --separate-stderr with_client "$client" /usr/bin/time -f '%M' "$RPCROUTE_BIN" call --profile "$P" --no-state \
      --strategy priority --json eth_getBalance "$DEV_ACCOUNT" latest
    assert_status 0
    assert_jq '.meta.provider == "h" and .meta.attempts[0].outcome == "bad_response"'
    assert_jq '.meta.attempts[0].message | test("Content-Encoding")'
    echo "# $client: call peak RSS $(tail -n 1 <<<"$stderr") KiB" >&3
  done
}

# ---------------------------------------------------------------------------------------------------
# Out of memory

@test "call: out of memory taking an answer fails that attempt at once and goes on" {
  local client t0 t1
  write_profile "$P" f,timeout_ms=30000 h
  fake_control f '{"mode":"huge","huge_bytes":5000000}'
  for client in "${CLIENTS[@]}"; do
    t0=$(now_ms)
    RPCROUTE_TEST_ALLOC_LIMIT=2000000 call_fh "$client" eth_getBalance "$DEV_ACCOUNT" latest
    t1=$(now_ms)
    assert_status 0
    assert_jq '.meta.provider == "h" and .result == "0xde0b6b3a7640000"'
    assert_jq '.meta.attempts[0] | .provider == "f" and .outcome == "out_of_memory" and .class == "provider_failure"'
    # Not at F's 30 s attempt deadline (a generous bound: this detects a wait, not a speed).
    ((t1 - t0 < 20000)) || { echo "took $((t1 - t0)) ms" >&2; false; }
  done
}

@test "serve: out of memory inside a transfer fails the attempt, the sidecar keeps serving" {
  local client
  write_profile "$P" --strategy priority f,timeout_ms=30000 h
  for client in "${CLIENTS[@]}"; do
    RPCROUTE_TEST_ALLOC_LIMIT=2000000 with_client "$client" start_serve sc --profile "$P" --no-probe --no-state
    SC_PORT=$(node_port sc)
    fake_control f '{"mode":"huge","huge_bytes":5000000}'
    sc_call 1 eth_getBalance "[\"$DEV_ACCOUNT\",\"latest\"]"
    assert_equal "$(jq -r .result <<<"$reply")" 0xde0b6b3a7640000 "balance"
    assert_equal "$provider" h "provider"
    fake_control f '{"mode":"ok"}'
    sc_call 2 eth_gasPrice '[]'
    assert_equal "$(jq -r .result <<<"$reply")" 0x3b9aca00 "gas price"
    kill -0 "$(node_pid sc)"
    kill_node sc
  done
}
