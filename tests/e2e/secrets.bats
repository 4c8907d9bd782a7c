#!/usr/bin/env bats
# Secrets (issue 6, DESIGN.md sections 10 and 12): an API key given through ${VAR} in provider URLs
# (path, query, userinfo, {api_key}) and in header values is used upstream, and appears in no output
# of any command — call (success, failure, -v, --json, --raw), bench, probe, rank, profiles
# show/validate/list (also with errors next to the key), state show — nor in the sidecar's logs (text
# and json), response headers and bodies (/status, /metrics, /healthz, 503 details), nor in the
# state file.
#
# The key is random per run ("sk_" + 32 hex digits + "+Q=", so it also has a URL-encoded form that
# differs), so no grep can pass by accident. What is searched for: the 32 hex digits (they survive
# any encoding: raw, URL-encoded, JSON-escaped) and the Basic credentials base64("user:KEY").
# Positive control: every provider reaches the fake upstream through record_proxy.py, which logs the
# bytes rpcroute sent; the key must be there (path, query, Authorization, X-Api-Key, Basic auth). The
# fake upstream ignores the path and query (only /_control and /_stats are special to it).

# jq programs are single-quoted on purpose; each test runs in its own subshell.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers
load sidecar_helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  command -v python3 >/dev/null || skip "python3 needed"
  local hex
  hex=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  [[ $hex =~ ^[0-9a-f]{32}$ ]]
  export SECRET_HEX=$hex
  export RPCROUTE_E2E_SECRET="sk_${hex}+Q="
  SECRET_URLENC=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$RPCROUTE_E2E_SECRET")
  SECRET_BASIC=$(printf 'user:%s' "$RPCROUTE_E2E_SECRET" | base64 -w0)
  export SECRET_URLENC SECRET_BASIC
}

setup() {
  e2e_setup
  ALL=$BATS_TEST_TMPDIR/everything
  : >"$ALL"
}

# The fake upstream f1 behind the recording proxy px, a dead port d1, and the profile $P. The first
# thing each test does (after a skip, so a skipped test starts nothing).
upstreams() {
  start_fake f1 --height 100
  dead_port d1
  start_proxy px f1
  secret_profile "$P"
}

teardown() {
  stop_all
}

# Starts record_proxy.py as NAME in front of the node UPSTREAM; its log is NAME.sent.
start_proxy() { # NAME UPSTREAM
  local name=$1 dir deadline
  dir=$(_proc_dir)
  rm -f "$dir/$name.port"
  python3 "$BATS_TEST_DIRNAME/record_proxy.py" --to "$(node_port "$2")" --port-file "$dir/$name.port" \
    --log "$dir/$name.sent" </dev/null >"$dir/$name.log" 2>&1 3>&- &
  echo "$!" >"$dir/$name.pid"
  deadline=$((SECONDS + 15))
  while ((SECONDS < deadline)); do
    [[ -s $dir/$name.port ]] && return 0
    sleep 0.05
  done
  echo "record_proxy did not start" >&2
  cat "$dir/$name.log" >&2
  return 1
}

# What the proxy px forwarded upstream.
sent_upstream() { cat "$(_proc_dir)/px.sent" 2>/dev/null; }

# A profile whose providers carry the key in every place a key goes, all on f1 through the proxy:
#   keyed     path and query, and two headers
#   apikeyed  api_key: with {api_key} in the URL path
#   bearer    api_key: without {api_key} (sent as Authorization: Bearer)
#   userinfo  user:KEY@ in the URL (Basic auth)
#   deadkeyed a dead port, key in the path (every attempt fails: connect_failed)
# EXTRA is appended at the top level.
secret_profile() { # FILE [EXTRA_YAML]
  local px d1
  px=$(node_port px)
  d1=$(node_port d1)
  cat >"$1" <<EOF
name: secretive
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - id: keyed
        url: http://127.0.0.1:$px/v3/\${RPCROUTE_E2E_SECRET}?apikey=\${RPCROUTE_E2E_SECRET}
        headers: { Authorization: "Bearer \${RPCROUTE_E2E_SECRET}", X-Api-Key: "\${RPCROUTE_E2E_SECRET}" }
        priority: 1
      - id: apikeyed
        url: http://127.0.0.1:$px/v2/{api_key}
        api_key: \${RPCROUTE_E2E_SECRET}
        priority: 2
      - id: bearer
        url: http://127.0.0.1:$px
        api_key: \${RPCROUTE_E2E_SECRET}
        priority: 3
      - id: userinfo
        url: http://user:\${RPCROUTE_E2E_SECRET}@127.0.0.1:$px/
        priority: 4
      - id: deadkeyed
        url: http://127.0.0.1:$d1/v3/\${RPCROUTE_E2E_SECRET}?apikey=\${RPCROUTE_E2E_SECRET}
        priority: 5
        timeout_ms: 2000
routing:
  default_strategy: priority
${2:-}
EOF
}

# Runs CMD like `run --separate-stderr`, keeps its stdout and stderr in $ALL (under a header naming
# it) and checks its exit status is one of STATUSES (e.g. 0, or 0,3) — so each command is known to
# have done what it was driven to do.
drive() { # STATUSES CMD...
  local want=$1
  shift
  run --separate-stderr "$@"
  {
    printf '=== %s (exit %s)\n' "$*" "$status"
    printf '%s\n' "$output"
    printf -- '--- stderr\n%s\n' "$stderr"
  } >>"$ALL"
  if [[ ,$want, != *",$status,"* ]]; then
    echo "expected exit status $want from: $*" >&2
    _dump_run
    return 1
  fi
}

# rpcroute, bounded in time, with the test's profile.
rr() { timeout -k 10 "$RPCROUTE_E2E_CALL_LIMIT" "$RPCROUTE_BIN" "$@"; }

# Neither the key (in any encoding: its hex digits) nor its Basic credentials in any FILE.
assert_no_secret() { # FILE...
  local f found=0
  for f in "$@"; do
    [[ -e $f ]] || continue
    if grep -aFn -e "$SECRET_HEX" -e "$SECRET_BASIC" "$f" >/dev/null 2>&1; then
      echo "the key appears in $f (under the command that printed it):" >&2
      awk -v k="$SECRET_HEX" -v b="$SECRET_BASIC" '
        /^=== / { head = $0 }
        index($0, k) || index($0, b) { if (n++ < 12) printf "%s\n    %d: %s\n", head, NR, substr($0, 1, 300) }' "$f" >&2
      found=1
    fi
  done
  ((found == 0))
}

# The checks must be able to fail: the key is what we search for, and the grep finds it in a file
# that holds it.
sanity_check_grep() {
  local probe=$BATS_TEST_TMPDIR/probe
  printf 'x %s y\n' "$SECRET_URLENC" >"$probe"
  if assert_no_secret "$probe" 2>/dev/null; then
    echo "assert_no_secret does not find the URL-encoded key" >&2
    return 1
  fi
  [[ $SECRET_URLENC != "$RPCROUTE_E2E_SECRET" ]]
}

# ---------------------------------------------------------------------------------------------------

@test "positive control: the key reaches the upstream in the path, the query, headers, Bearer and Basic auth" {
  upstreams
  sanity_check_grep
  # The profile holds only the variable, never the key.
  assert_no_secret "$P"
  local p
  for p in keyed apikeyed bearer userinfo; do
    drive 0 rr call -p "$P" --provider "$p" --json eth_blockNumber
    assert_jq '.result == "0x64" and .meta.provider == $p' --arg p "$p"
  done
  local sent
  sent=$(sent_upstream)
  local want
  for want in "POST /v3/$RPCROUTE_E2E_SECRET?apikey=$RPCROUTE_E2E_SECRET HTTP/1.1" \
    "Authorization: Bearer $RPCROUTE_E2E_SECRET" "X-Api-Key: $RPCROUTE_E2E_SECRET" \
    "POST /v2/$RPCROUTE_E2E_SECRET HTTP/1.1" "Authorization: Basic $SECRET_BASIC"; do
    if [[ $sent != *"$want"* ]]; then
      echo "not sent upstream: $want" >&2
      printf '%s\n' "$sent" | grep -a -E '^(POST|Authorization|X-Api)' >&2
      false
    fi
  done
  # Four requests, one per provider.
  assert_equal "$(fake_requests f1)" 4 "requests the fake received"
  assert_no_secret "$ALL" "$RPCROUTE_STATE" "$RPCROUTE_STATE.journal"
}

@test "call: success, failures, -v, --json and --raw never show the key" {
  upstreams
  drive 0 rr call -p "$P" eth_blockNumber
  drive 0 rr call -p "$P" -v eth_blockNumber
  drive 0 rr call -p "$P" --json eth_getBalance "$DEV_ACCOUNT" latest
  drive 0 rr call -p "$P" -v --json --strategy round_robin eth_gasPrice
  local p
  for p in keyed apikeyed bearer userinfo; do drive 0 rr call -p "$P" -v --json --provider "$p" eth_blockNumber; done
  run --separate-stderr rpcroute_stdin '{"jsonrpc":"2.0","id":"a","method":"eth_blockNumber","params":[]}' call -p "$P" --raw -v
  printf '=== raw\n%s\n%s\n' "$output" "$stderr" >>"$ALL"
  assert_status 0
  run --separate-stderr rpcroute_stdin '[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2,"method":"eth_nope"}]' call -p "$P" --raw -v --json
  printf '=== raw batch\n%s\n%s\n' "$output" "$stderr" >>"$ALL"
  # Failures: the dead provider alone, with and without --json; a node error; every provider failing
  # (HTTP 503, hang past the timeout, malformed answers); a method nobody has; a bad request.
  drive 3 rr call -p "$P" -v --provider deadkeyed eth_blockNumber
  drive 3 rr call -p "$P" -v --json --provider deadkeyed eth_blockNumber
  fake_control f1 '{"mode":"status","status":503}'
  drive 3 rr call -p "$P" -v eth_blockNumber
  drive 3 rr call -p "$P" -v --json eth_blockNumber
  fake_control f1 '{"mode":"malformed"}'
  drive 3 rr call -p "$P" -v --json eth_blockNumber
  fake_control f1 '{"mode":"rpc_error","code":-32005,"message":"rate limited"}'
  drive 3 rr call -p "$P" -v --json eth_blockNumber
  fake_control f1 '{"mode":"hang"}'
  drive 3 rr call -p "$P" -v --json --timeout 1s eth_blockNumber
  fake_control f1 '{"mode":"rpc_error","code":3,"message":"execution reverted"}'
  drive 1 rr call -p "$P" -v --json eth_call '{"to":"0x0000000000000000000000000000000000000000"}' latest
  fake_control f1 '{"mode":"ok"}'
  drive 1 rr call -p "$P" -v --json eth_noSuchMethod
  drive 2 rr call -p "$P" -v --provider nobody eth_blockNumber
  drive 2 rr call -p "$P" -v --chain nochain eth_blockNumber
  (($(fake_requests f1) >= 10))
  assert_no_secret "$ALL" "$RPCROUTE_STATE" "$RPCROUTE_STATE.journal"
}

@test "bench, probe and rank (text, --json, --explain) never show the key, also for failing providers" {
  upstreams
  drive 0 rr bench -p "$P" --requests 3 --methods eth_blockNumber,eth_gasPrice
  drive 0 rr bench -p "$P" --requests 2 --methods eth_blockNumber --json
  drive 0 rr probe -p "$P"
  drive 0 rr probe -p "$P" --json
  drive 0 rr rank -p "$P" --explain
  drive 0 rr rank -p "$P" --json
  drive 0 rr rank -p "$P" --strategy fastest --explain
  drive 0 rr rank -p "$P" --strategy latency_weighted --json --method eth_getLogs
  # Failing upstreams: errors in the tables and the exclusions.
  fake_control f1 '{"mode":"status","status":401,"body":"unauthorized"}'
  drive 0,3 rr bench -p "$P" --requests 2 --methods eth_blockNumber
  drive 0,3 rr bench -p "$P" --requests 2 --methods eth_blockNumber --json
  drive 3 rr probe -p "$P"
  drive 3 rr probe -p "$P" --json
  drive 0 rr rank -p "$P" --explain
  drive 0 rr rank -p "$P" --json
  assert_no_secret "$ALL" "$RPCROUTE_STATE" "$RPCROUTE_STATE.journal"
}

@test "profiles show, validate and list never show the key; nor do errors in a profile next to the key" {
  upstreams
  drive 0 rr profiles show "$P"
  drive 0 rr profiles show "$P" --json
  drive 0 rr profiles validate "$P"
  # By name, from the search path, in the list.
  cp "$P" "$RPCROUTE_PROFILES/keyed.yaml"
  drive 0 rr profiles list
  drive 0 rr profiles show keyed
  # Broken profiles, each with an error right next to the key (after substitution where there is
  # one), through validate, show, list and call.
  local broken=$RPCROUTE_PROFILES
  local good
  good=$(cat "$P")
  # YAML syntax: an unclosed flow map holding the key's variable.
  sed 's/X-Api-Key: "${RPCROUTE_E2E_SECRET}" }/X-Api-Key: "${RPCROUTE_E2E_SECRET}"/' "$P" >"$broken/syntax.yaml"
  # A bad URL scheme with the key in the path, and the key in the host (not a valid host name).
  sed 's|url: http://127.0.0.1:\([0-9]*\)/v3/|url: ftp://127.0.0.1:\1/v3/|' "$P" >"$broken/scheme.yaml"
  sed 's|url: http://127.0.0.1:\([0-9]*\)/v3/|url: http://${RPCROUTE_E2E_SECRET}:\1/v3/|' "$P" >"$broken/badhost.yaml"
  # An unknown key and a wrong type in the provider that holds the key.
  sed 's|^\(        priority: 1\)$|\1\n        bogus_key: ${RPCROUTE_E2E_SECRET}|' "$P" >"$broken/unknown.yaml"
  sed 's|^        priority: 1$|        priority: ${RPCROUTE_E2E_SECRET}|' "$P" >"$broken/type.yaml"
  # Another variable of the same URL is unset; an unterminated ${.
  sed 's|?apikey=${RPCROUTE_E2E_SECRET}|?apikey=${RPCROUTE_E2E_SECRET}\&other=${RPCROUTE_E2E_UNSET_VAR}|' "$P" >"$broken/unset.yaml"
  sed 's|?apikey=${RPCROUTE_E2E_SECRET}|?apikey=${RPCROUTE_E2E_SECRET}\&x=${RPCROUTE_E2E_SECRET|' "$P" >"$broken/unterminated.yaml"
  # A duplicate provider id after the keyed ones.
  printf '%s\n' "$good" | sed 's/^      - id: deadkeyed$/      - id: keyed/' >"$broken/duplicate.yaml"
  unset RPCROUTE_E2E_UNSET_VAR
  local f
  for f in "$broken"/{syntax,scheme,badhost,unknown,type,unset,unterminated,duplicate}.yaml; do
    cmp -s "$f" "$P" && { echo "sed did not break $f" >&2; false; }
    drive 2 rr profiles validate "$f"
    drive 2 rr profiles show "$f"
    drive 2 rr profiles show "$f" --json
    drive 2 rr call -p "$f" -v eth_blockNumber
    drive 2 rr rank -p "$f" --json
  done
  drive 0,2 rr profiles list
  assert_no_secret "$ALL" "$RPCROUTE_STATE" "$RPCROUTE_STATE.journal"
}

@test "state show (text and --json) and the state file never hold the key, after successes and failures" {
  upstreams
  drive 0 rr call -p "$P" eth_blockNumber
  drive 0 rr bench -p "$P" --requests 2 --methods eth_blockNumber
  drive 0 rr probe -p "$P"
  fake_control f1 '{"mode":"status","status":429,"retry_after":"30"}'
  drive 3 rr call -p "$P" eth_blockNumber
  fake_control f1 '{"mode":"ok"}'
  drive 0 rr call -p "$P" eth_newFilter '{}'
  drive 0 rr state show
  drive 0 rr state show --json
  assert_jq '(.providers | length) >= 4'
  drive 0 rr state path
  assert_no_secret "$ALL" "$RPCROUTE_STATE" "$RPCROUTE_STATE".*
}

@test "the sidecar: -v logs (text and json), headers, bodies, /status, /metrics, /healthz and 503 details never show the key" {
  upstreams
  # A low breaker threshold, so failing providers open their breakers and /healthz turns 503.
  secret_profile "$P" 'health: { circuit_breaker: { failure_threshold: 1, recovery_timeout_ms: 60000 } }'
  local fmt
  for fmt in text json; do
    rm -f "$RPCROUTE_STATE"
    fake_control f1 '{"mode":"ok"}'
    sidecar_start "sc-$fmt" -p "$P" --state "$RPCROUTE_STATE" -v --log-format "$fmt"
    # Let the background probe visit every provider (it probes at start).
    sleep 1
    local reqs=0
    keep() {
      reqs=$((reqs + 1))
      { printf '=== sidecar %s: %s\n' "$fmt" "$1"; cat "$SC_HDRS"; printf '%s\n' "$body"; } >>"$ALL"
    }
    local BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
    sidecar_post /rpc/local "$BN"; assert_equal "$code" 200 "POST /rpc/local"; keep "/rpc/local"
    sidecar_post /rpc/round-robin/local "[$BN,$BN,$BN]"; assert_equal "$code" 200 "batch"; keep batch
    local p
    for p in keyed apikeyed bearer userinfo; do
      sidecar_post "/rpc/provider/$p/local" "$BN"; assert_equal "$code" 200 "provider $p"; keep "provider $p"
    done
    sidecar_post /rpc/provider/deadkeyed/local "$BN"; assert_equal "$code" 503 "dead provider"; keep "dead"
    [[ $body == *'"attempts"'* ]] || { echo "no attempts in the 503: $body" >&2; false; }
    sidecar_get /status; assert_equal "$code" 200 "/status"; keep /status
    sidecar_get /metrics; assert_equal "$code" 200 "/metrics"; keep /metrics
    sidecar_get /healthz; assert_equal "$code" 200 "/healthz"; keep /healthz
    sidecar_post /nope "$BN"; keep 404
    sidecar_post /rpc/local 'not json'; keep -32700
    # Every provider failing: 503 with the attempts, then breakers open and /healthz degrades.
    fake_control f1 '{"mode":"status","status":401,"body":"unauthorized"}'
    sidecar_post /rpc/local "$BN"; assert_equal "$code" 503 "all failing"; keep "all failing"
    sidecar_post /rpc/local "$BN"; keep "all open"
    sidecar_get /healthz; assert_equal "$code" 503 "/healthz, every breaker open"; keep "/healthz 503"
    sidecar_get /status; keep "/status, breakers open"
    sidecar_get /metrics; keep "/metrics, breakers open"
    sidecar_stop "sc-$fmt"
    assert_equal "$SC_EXIT" 0 "sidecar exit"
    # The log has a line per request (the format is the one asked for).
    if [[ $fmt == json ]]; then
      assert_equal "$(grep -c '^{' "$SC_LOG")" "$reqs" "JSON log lines"
    else
      assert_equal "$(grep -cE ' (GET|POST) /' "$SC_LOG")" "$reqs" "text log lines"
    fi
    { printf '=== sidecar %s log\n' "$fmt"; cat "$SC_LOG" "$SC_OUT"; } >>"$ALL"
    assert_no_secret "$SC_LOG" "$SC_OUT" "$RPCROUTE_STATE"
  done
  # The fake did receive the requests (through the proxy, with the key).
  [[ $(sent_upstream) == *"$RPCROUTE_E2E_SECRET"* ]]
  assert_no_secret "$ALL"
}

@test "an upstream that echoes the key in its error message: rpcroute's own report of the attempt does not repeat it" {
  upstreams
  # A provider saying "invalid key <KEY>" (as some do, with the key or the whole URL): a rate-limit
  # code, so every provider is tried and the answer is rpcroute's own -32050 with the attempts.
  local msg="invalid API key $RPCROUTE_E2E_SECRET for /v3/$RPCROUTE_E2E_SECRET"
  fake_control f1 "$(jq -cn --arg m "$msg" '{mode: "rpc_error", code: -32005, message: $m}')"
  drive 3 rr call -p "$P" -v eth_blockNumber
  drive 3 rr call -p "$P" -v --json eth_blockNumber
  drive 0,3 rr bench -p "$P" --requests 2 --methods eth_blockNumber
  sidecar_start sc -p "$P" --state "$RPCROUTE_STATE" --no-probe -v
  sidecar_post /rpc/local '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
  assert_equal "$code" 503 "sidecar status"
  { printf '=== sidecar 503\n'; cat "$SC_HDRS"; printf '%s\n' "$body"; } >>"$ALL"
  sidecar_stop sc
  assert_no_secret "$ALL" "$SC_LOG" "$RPCROUTE_STATE" "$RPCROUTE_STATE.journal"
}

@test "a key in the host name (as in https://KEY.eth.rpc.example/) appears in no output either" {
  upstreams
  # *.localhost resolves to 127.0.0.1 (curl), so the key can be a subdomain of a working URL.
  local lower=${SECRET_HEX}
  export RPCROUTE_E2E_HOSTKEY=k$lower
  cat >"$P" <<EOF
name: hostkey
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - id: hosted
        url: http://\${RPCROUTE_E2E_HOSTKEY}.localhost:$(node_port f1)/
EOF
  drive 0 rr call -p "$P" -v --json eth_blockNumber
  assert_jq '.result == "0x64"'
  drive 0 rr rank -p "$P" --explain
  drive 0 rr probe -p "$P" --json
  drive 0 rr profiles validate "$P"
  drive 0 rr profiles show "$P"
  drive 0 rr profiles show "$P" --json
  drive 0 rr state show --json
  assert_no_secret "$ALL" "$RPCROUTE_STATE" "$RPCROUTE_STATE.journal"
}

@test "a key pasted literally into a URL (path, ?apikey=), echoed by the upstream, appears in no output" {
  start_fake f1 --height 100
  # A provider failure (-32603) whose message quotes the request-target, keys and all.
  fake_control f1 '{"mode":"rpc_error","code":-32603,"message":"no such project at {target}"}'
  local port qkey=q${SECRET_HEX:0:7} echoed
  port=$(node_port f1)
  # The fake does echo what it was sent.
  echoed=$(curl -s --max-time 5 -d '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' "http://127.0.0.1:$port/v2/abc?apikey=x1")
  [[ $echoed == *'"no such project at /v2/abc?apikey=x1"'* ]] || { echo "no echo: $echoed" >&2; false; }
  # No ${VAR}: the keys are written into the profile as they were pasted.
  cat >"$P" <<EOF2
name: pasted
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - id: pathkey
        url: "http://127.0.0.1:$port/v2/$SECRET_HEX"
      - id: querykey
        url: "http://127.0.0.1:$port/rpc?apikey=$qkey&chain=local"
routing:
  default_strategy: priority
EOF2
  drive 3 rr call -p "$P" -v eth_blockNumber
  drive 3 rr call -p "$P" --json eth_blockNumber
  assert_jq '.meta.attempts | length == 2 and all(.message | startswith("-32603: no such project at /") and contains("***"))'
  drive 3 rr call -p "$P" -v --provider querykey eth_blockNumber
  drive 3 rr probe -p "$P"
  drive 3 rr probe -p "$P" --json
  drive 0,3 rr bench -p "$P" --requests 2 --methods eth_blockNumber
  drive 0,3 rr bench -p "$P" --requests 2 --methods eth_blockNumber --json
  # Its own state: the calls above opened both breakers in $RPCROUTE_STATE.
  sidecar_start sc -p "$P" --no-state --no-probe -v
  sidecar_post /rpc/local '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
  assert_equal "$code" 503 "sidecar status"
  { printf '=== sidecar 503\n'; cat "$SC_HDRS"; printf '%s\n' "$body"; } >>"$ALL"
  [[ $body == *'no such project at /v2/***'* ]] || { echo "the 503 lost the report: $body" >&2; false; }
  sidecar_stop sc
  assert_no_secret "$ALL" "$SC_LOG" "$RPCROUTE_STATE" "$RPCROUTE_STATE.journal"
  if grep -aFn "$qkey" "$ALL" "$SC_LOG" "$RPCROUTE_STATE" >&2; then
    echo "the query key $qkey appears above" >&2
    false
  fi
}
