#!/usr/bin/env bats
# Many hosts, one view (issue 20): sidecars sharing what they learn through a real redis-server
# that each test starts on a free loopback port (no persistence) and stops in teardown. Two and
# three sidecars on one Redis: an open breaker seen by all, heights that never go back across
# hosts, a Redis killed, paused or full while requests go on, a password kept secret, an HTTPS
# provider, three hosts hammering one rate-limited provider (plain and HTTPS), Redis itself over
# TLS (rediss://). The figure under heavier wrk load is tests/perf/sections/redis.sh.

# jq programs are single-quoted on purpose; each test runs in its own subshell.
# shellcheck disable=SC2016,SC2154

load helpers
load sidecar_helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
    echo "redis-server and redis-cli are needed (scripts/setup installs redis-server)" >&2
    return 1
  }
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

# Starts redis-server as NAME on a free port (or PORT=... for a restart on the same one) with no
# persistence and waits until it answers. REDIS ARGS are added (--requirepass, --maxmemory ...).
start_redis() { # NAME [REDIS ARGS...]
  local name=$1 dir port pid
  shift
  dir=$(_proc_dir)
  for _ in 1 2 3; do
    port=${PORT:-$(free_port)}
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning \
      "$@" </dev/null >"$dir/$name.log" 2>&1 3>&- &
    pid=$!
    echo "$pid" >"$dir/$name.pid"
    echo "$port" >"$dir/$name.port"
    for _ in $(seq 200); do
      # PONG, or NOAUTH when a password is required: it answers either way.
      [[ $(redis-cli -p "$port" ping 2>&1) =~ PONG|NOAUTH ]] && return 0
      kill -0 "$pid" 2>/dev/null || break
      nap 0.02
    done
    _stop_pid "$pid"
  done
  echo "start_redis $name: redis-server did not answer" >&2
  cat "$dir/$name.log" >&2
  return 1
}

redis_url() { echo "redis://127.0.0.1:$(node_port "${1:-redis}")/0"; }

# POSTs eth_blockNumber to sidecar NAME; prints the answer's result, fails on anything else.
bn_via() { # NAME
  local out
  sidecar_load "$1"
  out=$(curl -sS --max-time 5 -X POST -H 'content-type: application/json' --data "$BN" "$SC_URL/rpc/local") || return 1
  jq -er '.result' <<<"$out" || { echo "no result from $1: $out" >&2; return 1; }
}

status_of() { # NAME
  sidecar_load "$1"
  curl -sS --max-time 5 "$SC_URL/status"
}

metric_of() { # NAME METRIC (one without labels)
  sidecar_load "$1"
  curl -sS --max-time 5 "$SC_URL/metrics" | grep "^$2 " | awk '{print $NF}'
}

# The breaker gauge of PROVIDER in sidecar NAME's /metrics: 0 closed, 1 half-open, 2 open.
breaker_of() { # NAME PROVIDER
  sidecar_load "$1"
  curl -sS --max-time 5 "$SC_URL/metrics" | grep "^rpcroute_breaker_state{.*provider=\"$2\",transport=\"http\"}" | awk '{print $NF}'
}

# Waits up to LIMIT seconds (default 5) until the shared state of sidecar NAME is STATE.
wait_shared() { # NAME STATE [LIMIT_S]
  local deadline=$((SECONDS + ${3:-5})) s=""
  while ((SECONDS < deadline)); do
    s=$(status_of "$1" | jq -r '.shared_state.state')
    [[ $s == "$2" ]] && return 0
    nap 0.05
  done
  echo "sidecar $1: shared state '$s', not '$2'" >&2
  return 1
}

serve_shared() { # NAME [SERVE ARGS...]
  local name=$1
  shift
  sidecar_start "$name" --profile "$P" --no-state --no-probe --shared-state "$(redis_url)" "$@"
  wait_shared "$name" up
}

@test "three sidecars: after the first host's breaker opens, the others send the dead provider at most 2 more requests each" {
  start_redis redis
  start_fake good
  start_fake bad
  write_profile "$P" --strategy round_robin good bad --extra 'health:
  circuit_breaker: { failure_threshold: 3, recovery_timeout_ms: 60000, jitter: 0 }'
  for h in h1 h2 h3; do serve_shared "$h"; done
  for h in h1 h2 h3; do bn_via "$h" >/dev/null; done
  fake_control bad '{"mode":"status","status":503}'
  # h1 alone meets the dead provider until its breaker opens.
  local deadline=$((SECONDS + 10))
  until [[ $(breaker_of h1 bad) == 2 ]]; do
    ((SECONDS < deadline)) || { echo "h1's breaker never opened" >&2; return 1; }
    bn_via h1 >/dev/null
  done
  local before after
  before=$(fake_requests bad)
  # The others hear of it (pub/sub) within a second; load on both; every answer is good.
  for _ in $(seq 12); do
    bn_via h2 >/dev/null
    bn_via h3 >/dev/null
  done
  after=$(fake_requests bad)
  echo "bad got $((after - before)) more requests from h2 and h3" >&3
  ((after - before <= 4))
  [[ $(breaker_of h2 bad) == 2 ]]
  [[ $(metric_of h3 'rpcroute_shared_state_adopted_total') -gt 0 ]]
  # A one-shot command on the same Redis knows it too.
  run rpcroute rank --profile "$P" --no-state --shared-state "$(redis_url)" --json
  assert_status 0
  jq -e '[.excluded[] | select(.provider == "bad" and .kind == "breaker")] | length == 1' <<<"$output"
}

@test "two sidecars: without Redis each host learns alone (the control case)" {
  start_redis redis
  start_fake good
  start_fake bad
  write_profile "$P" --strategy round_robin good bad --extra 'health:
  circuit_breaker: { failure_threshold: 3, recovery_timeout_ms: 60000, jitter: 0 }'
  sidecar_start h1 --profile "$P" --no-state --no-probe
  sidecar_start h2 --profile "$P" --no-state --no-probe
  fake_control bad '{"mode":"status","status":503}'
  for _ in $(seq 8); do bn_via h1 >/dev/null; done
  local before after
  before=$(fake_requests bad)
  for _ in $(seq 8); do bn_via h2 >/dev/null; done
  after=$(fake_requests bad)
  # h2 pays its own failure_threshold: what the shared case saves.
  ((after - before >= 3))
}

@test "a log-range limit learned by one host makes another split up front" {
  start_redis redis
  start_fake f1 --height 30000
  write_profile "$P" f1
  serve_shared h1
  serve_shared h2
  local filter='{"fromBlock":"0x0","toBlock":"0x4e1f"}' # 20 000 blocks
  local req="{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"eth_getLogs\",\"params\":[$filter]}"
  logs_via() { # NAME
    sidecar_load "$1"
    curl -sS --max-time 10 -X POST -H 'content-type: application/json' --data "$req" "$SC_URL/rpc/local" |
      jq -ce '.result'
  }
  # h1 meets the provider's range error (Alchemy's wording) once, then splits: 1 + 10 requests.
  fake_control f1 '{"queue":[{"mode":"rpc_error","code":-32602,"message":"Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range and no limit on the response size."}]}'
  [[ $(logs_via h1) == "[]" ]]
  assert_equal "$(fake_stats f1 | jq '.methods.eth_getLogs')" "11" "eth_getLogs requests from h1"
  # The limit reaches Redis; then h2 reads it (two refresh rounds after it is there).
  local port key deadline=$((SECONDS + 5))
  port=$(node_port redis)
  until key=$(redis-cli -p "$port" --scan --pattern 'rpcroute:p:*/f1#*' | head -1) && [[ -n $key ]] &&
    [[ $(redis-cli -p "$port" hget "$key" l) == 2000 ]]; do
    ((SECONDS < deadline)) || { echo "the limit never reached Redis" >&2; return 1; }
    nap 0.05
  done
  local syncs
  syncs=$(metric_of h2 rpcroute_shared_state_syncs_total)
  deadline=$((SECONDS + 5))
  until (($(metric_of h2 rpcroute_shared_state_syncs_total) >= syncs + 2)); do
    ((SECONDS < deadline)) || { echo "h2 did not refresh" >&2; return 1; }
    nap 0.05
  done
  # h2 never met the error: it splits up front, ten parts of 2000 (a host that did not know would
  # send the range whole, which this fake now answers in one request).
  fake_control f1 '{"reset_stats":true}'
  [[ $(logs_via h2) == "[]" ]]
  assert_equal "$(fake_stats f1 | jq '.methods.eth_getLogs')" "10" "eth_getLogs requests from h2"
  # A one-shot command on the same Redis shows it as learned.
  run --separate-stderr rpcroute rank -p "$P" --no-state --shared-state "$(redis_url)" -m eth_getLogs "$filter"
  assert_status 0
  [[ $output == *"learned eth_getLogs range limits:"*"f1: 2000 blocks"* ]]
}

@test "latency summaries: a host with no samples of its own ranks by what another measured" {
  start_redis redis
  start_fake slow --delay-ms 80
  start_fake fast
  write_profile "$P" --strategy round_robin slow fast
  serve_shared h1
  for _ in $(seq 12); do bn_via h1 >/dev/null; done # six samples of each on h1
  # Alone, a one-shot command has no samples: fastest is cold, the profile's order (slow first).
  run --separate-stderr rpcroute rank -p "$P" --no-state --strategy fastest --json
  assert_status 0
  assert_jq '.candidates[0].provider == "slow" and .candidates[0].samples == 0'
  # On the same Redis, once h1's counts are written (within a refresh): fast first, by the
  # summary standing for the samples it lacks.
  local deadline=$((SECONDS + 10))
  until run --separate-stderr rpcroute rank -p "$P" --no-state --shared-state "$(redis_url)" \
    --strategy fastest --json && jq -e '.candidates[0].provider == "fast"' <<<"$output" >/dev/null; do
    ((SECONDS < deadline)) || { echo "never ranked by the shared summary: $output" >&2; return 1; }
    nap 0.2
  done
  assert_jq '.candidates[0].shared_samples == 3 and .candidates[0].cold == false'
  assert_jq '[.candidates[] | select(.provider == "slow")][0].p50_ms > 50'
  # Bounded keys: one hash per provider and window, with a TTL.
  local port key
  port=$(node_port redis)
  key=$(redis-cli -p "$port" --scan --pattern 'rpcroute:l:*/fast#*' | head -1)
  [[ -n $key ]]
  (($(redis-cli -p "$port" pttl "$key") > 0))
  redis-cli -p "$port" hkeys "$key" | grep -q '^eth_blockNumber:'
}

@test "eth_blockNumber answers never decrease across three hosts" {
  start_redis redis
  start_fake ahead --height 1000
  start_fake behind --height 999
  write_profile "$P" --strategy round_robin ahead behind
  for h in h1 h2 h3; do serve_shared "$h"; done
  local max=0 v n
  for i in $(seq 45); do
    n=h$((i % 3 + 1))
    v=$(($(bn_via "$n")))
    if ((v < max)); then
      echo "request $i: $n answered $v after $max was answered" >&2
      return 1
    fi
    max=$v
  done
  ((max == 1000))
}

@test "Redis killed and restarted under load: no client error, routing goes on, state merged back" {
  start_redis redis
  start_fake good
  start_fake bad
  write_profile "$P" --strategy round_robin good bad
  serve_shared h1
  serve_shared h2
  local port errors=$BATS_TEST_TMPDIR/errors
  port=$(node_port redis)
  : >"$errors"
  load_loop() {
    for _ in $(seq 150); do bn_via "$1" >/dev/null 2>>"$errors" || echo "error via $1" >>"$errors"; done
  }
  load_loop h1 &
  local l1=$!
  load_loop h2 &
  local l2=$!
  nap 0.5
  kill_node redis
  wait_shared h1 down 3
  fake_control bad '{"mode":"status","status":503}' # learned locally while Redis is away
  for _ in $(seq 12); do bn_via h1 >/dev/null; done
  [[ $(breaker_of h1 bad) == 2 ]]
  PORT=$port start_redis redis
  wait "$l1"
  wait "$l2"
  [[ ! -s $errors ]] || { cat "$errors" >&2; return 1; }
  wait_shared h1 up 5
  wait_shared h2 up 5
  [[ $(status_of h1 | jq '.shared_state.fallbacks') -ge 1 ]]
  # Logged once per outage, not per retry; never a password or a secret.
  [[ $(grep -c 'unreachable' "$(dirname "$SC_LOG")/h1.log") == 1 ]]
  # What h1 or h2 learned while Redis was away reached it when it came back.
  local deadline=$((SECONDS + 5))
  local key
  until key=$(redis-cli -p "$port" --scan --pattern 'rpcroute:p:*/bad#*' | head -1) && [[ -n $key ]] &&
    [[ $(redis-cli -p "$port" hget "$key" b) == "1 "* ]]; do
    ((SECONDS < deadline)) || { echo "nothing merged back into Redis" >&2; return 1; }
    nap 0.1
  done
}

@test "Redis paused (SIGSTOP): answers within the budget, down within a second, up after SIGCONT" {
  start_redis redis
  start_fake good
  write_profile "$P" good
  serve_shared h1
  kill -STOP "$(node_pid redis)"
  local t0 t1
  for _ in $(seq 10); do
    t0=$(now_ms)
    bn_via h1 >/dev/null
    t1=$(now_ms)
    # A request never waits on Redis; the bound leaves room for a loaded CI machine's curl.
    ((t1 - t0 < 2500)) || { echo "an answer took $((t1 - t0)) ms with Redis paused" >&2; kill -CONT "$(node_pid redis)"; return 1; }
  done
  wait_shared h1 down 2 || { kill -CONT "$(node_pid redis)"; return 1; }
  [[ $(metric_of h1 'rpcroute_shared_state_up') == 0 ]]
  kill -CONT "$(node_pid redis)"
  wait_shared h1 up 5
  bn_via h1 >/dev/null
}

@test "a full Redis (maxmemory, noeviction): routing goes on, refused writes are counted and logged once" {
  start_redis redis --maxmemory-policy noeviction
  start_fake good
  write_profile "$P" good
  serve_shared h1
  redis-cli -p "$(node_port redis)" config set maxmemory 1 >/dev/null
  for i in $(seq 20); do
    # Each answer is a new height, written to Redis (refused).
    fake_control good "{\"height\":$((2000 + i))}"
    bn_via h1 >/dev/null
  done
  local deadline=$((SECONDS + 5))
  until [[ $(status_of h1 | jq '.shared_state.write_errors') -gt 0 ]]; do
    ((SECONDS < deadline)) || { status_of h1 >&2; return 1; }
    nap 0.1
  done
  status_of h1 | jq -e '.shared_state.last_error | test("OOM")'
  [[ $(grep -c 'refuses writes' "$SC_LOG") == 1 ]]
}

@test "a password from \${ENV} opens Redis and appears in no output, log, status or metrics" {
  local secret=Sh4r3d-St4te-P4ssw0rd-0123
  start_redis redis --requirepass "$secret"
  start_fake good
  write_profile "$P" good --extra "shared_state:
  redis: \"redis://127.0.0.1:$(node_port redis)/2\"
  prefix: \"team-a:\"
  password: \"\${TEST_REDIS_PW}\""
  TEST_REDIS_PW=$secret sidecar_start h1 --profile "$P" --state "$BATS_TEST_TMPDIR/s.json"
  wait_shared h1 up
  bn_via h1 >/dev/null
  status_of h1 | jq -e '.shared_state.redis == "redis://127.0.0.1:'"$(node_port redis)"'/2"'
  # The keys are in database 2 under the prefix.
  local deadline=$((SECONDS + 5))
  until REDISCLI_AUTH=$secret redis-cli -p "$(node_port redis)" -n 2 --scan --pattern 'team-a:*' | grep -q .; do
    ((SECONDS < deadline)) || return 1
    nap 0.1
  done
  sidecar_stop h1
  ! grep -rF "$secret" "$SC_LOG" "$SC_OUT" "$BATS_TEST_TMPDIR/s.json" || false
  # A wrong password: down, said once, without the password.
  TEST_REDIS_PW=wrong-$secret sidecar_start h2 --profile "$P" --no-state
  wait_shared h2 down
  status_of h2 | jq -e '.shared_state.last_error | test("authentication refused")'
  ! status_of h2 | grep -F "$secret" || false
  ! grep -F "$secret" "$SC_LOG" || false
  # A rediss:// URL where no Redis listens: the call answers on local state.
  TEST_REDIS_PW=x run rpcroute call --profile "$P" --no-state --shared-state "rediss://127.0.0.1:1/0" eth_blockNumber
  assert_status 0
}

# A wrk script: POST eth_blockNumber; counts the answers without a "result" (none is expected: the
# spare provider takes what the quota refuses).
write_bn_wrk() { # FILE
  cat >"$1" <<'LUA'
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) failures = 0 end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"result"', 1, true) then failures = failures + 1 end
end
function done(summary, latency, requests)
  local f = 0
  for _, t in ipairs(threads) do f = f + t:get("failures") end
  io.write(string.format("LOAD requests=%d failures=%d\n", summary.requests, f))
end
LUA
}

# Three sidecars on one Redis, provider `limited` (URL, rate_limit RPS and BURST, EXTRA YAML for
# its TLS) before `spare`, all three under wrk at once for SECS seconds. Idle before, the shared
# bucket is full (burst); the fake's own count of served calls from just before the first wrk
# starts to just after the last one ends must stay within burst + rps × that time (+5 % and 3
# tokens the hosts may hold from before) and reach 85 % of rps × SECS (the quota is used, not
# starved). The code before token leases served 120-131 % of the bound here.
three_hosts_one_quota() { # URL EXTRA RPS BURST SECS
  local url=$1 extra=$2 rps=$3 burst=$4 secs=$5 h t0 t1 c0 c1 served bound window
  command -v wrk >/dev/null || { echo "wrk is needed (scripts/setup installs it)" >&2; return 1; }
  cat >"$P" <<YAML
name: e2e
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: limited, url: "$url", priority: 1, rate_limit: { rps: $rps, burst: $burst }$extra }
      - { id: spare, url: "$(node_url spare)", priority: 2 }
routing:
  default_strategy: priority
YAML
  for h in h1 h2 h3; do serve_shared "$h"; done
  for h in h1 h2 h3; do bn_via "$h" >/dev/null; done
  write_bn_wrk "$BATS_TEST_TMPDIR/bn.lua"
  local pids=() urls=()
  for h in h1 h2 h3; do
    sidecar_load "$h"
    urls+=("$SC_URL/rpc/local")
  done
  c0=$(fake_requests limited)
  nap 0.5 # the bucket refills to burst
  t0=$(now_ms)
  for h in 0 1 2; do
    wrk -t1 -c4 -d"${secs}s" --timeout 5s -s "$BATS_TEST_TMPDIR/bn.lua" "${urls[h]}" \
      >"$BATS_TEST_TMPDIR/wrk.$h" 2>&1 3>&- &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(now_ms)
  c1=$(fake_requests limited)
  served=$((c1 - c0))
  window=$((t1 - t0))
  bound=$((burst + rps * window / 1000))
  for h in 0 1 2; do
    grep -h LOAD "$BATS_TEST_TMPDIR/wrk.$h" >&3 || { cat "$BATS_TEST_TMPDIR/wrk.$h" >&2; return 1; }
    grep -q 'failures=0' "$BATS_TEST_TMPDIR/wrk.$h" || return 1
  done
  echo "limited served $served in $window ms of load; bound burst + rps × s = $bound ($((served * 100 / bound)) %)" >&3
  ((served * 100 <= bound * 105 + 300)) || { echo "over the bound: $served > $bound" >&2; return 1; }
  ((served * 100 >= rps * secs * 85)) || { echo "the quota went unused: $served in $window ms" >&2; return 1; }
}

@test "three sidecars hammered at once: the limited provider serves within burst + rps × s (±5 %)" {
  start_redis redis
  start_fake limited
  start_fake spare
  three_hosts_one_quota "$(node_url limited)" "" 100 30 5
}

@test "https: three sidecars on one quota of a provider over TLS stay within its bound" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  start_redis redis
  start_tls_fake limited
  start_fake spare
  three_hosts_one_quota "$(node_url limited)" ", tls: { ca_file: \"$TEST_PKI/ca.pem\" }" 100 30 4
}

@test "https: an open breaker of a provider over TLS is shared" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  start_redis redis
  start_tls_fake t1
  start_fake good
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    providers:
      - { id: good, url: "$(node_url good)", priority: 1 }
      - { id: t1, url: "$(node_url t1)", priority: 2, tls: { ca_file: "$TEST_PKI/ca.pem" } }
routing:
  default_strategy: round_robin
health:
  circuit_breaker: { failure_threshold: 2, recovery_timeout_ms: 60000, jitter: 0 }
EOF
  serve_shared h1
  serve_shared h2
  fake_control t1 '{"mode":"status","status":503}'
  for _ in $(seq 6); do bn_via h1 >/dev/null; done
  [[ $(breaker_of h1 t1) == 2 ]]
  local deadline=$((SECONDS + 2))
  until [[ $(breaker_of h2 t1) == 2 ]]; do
    ((SECONDS < deadline)) || return 1
    nap 0.05
  done
}

@test "rediss://: two sidecars sharing through Redis over TLS see one open breaker" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  local tls_port
  tls_port=$(free_port)
  start_redis redis --tls-port "$tls_port" --tls-cert-file "$TEST_PKI/server.pem" \
    --tls-key-file "$TEST_PKI/server.key" --tls-ca-cert-file "$TEST_PKI/ca.pem" --tls-auth-clients no
  start_fake good
  start_fake bad
  cat >"$P" <<EOF
name: e2e
chains:
  local:
    chain_id: 31337
    providers:
      - { id: good, url: "$(node_url good)", priority: 1 }
      - { id: bad, url: "$(node_url bad)", priority: 2 }
routing:
  default_strategy: round_robin
health:
  circuit_breaker: { failure_threshold: 2, recovery_timeout_ms: 60000, jitter: 0 }
shared_state:
  redis: "rediss://localhost:$tls_port/0"
  tls: { ca_file: "$TEST_PKI/ca.pem" }
EOF
  sidecar_start h1 --profile "$P" --no-state --no-probe
  wait_shared h1 up
  sidecar_start h2 --profile "$P" --no-state --no-probe
  wait_shared h2 up
  status_of h1 | jq -e '.shared_state.redis == "rediss://localhost:'"$tls_port"'/0"'
  fake_control bad '{"mode":"status","status":503}'
  for _ in $(seq 6); do bn_via h1 >/dev/null; done
  [[ $(breaker_of h1 bad) == 2 ]]
  local deadline=$((SECONDS + 2))
  until [[ $(breaker_of h2 bad) == 2 ]]; do
    ((SECONDS < deadline)) || return 1
    nap 0.05
  done
  # A CA that does not know Redis's certificate: down with the cause, routing goes on.
  sed -i "s|$TEST_PKI/ca.pem|$TEST_PKI/other_ca.pem|" "$P"
  sidecar_start h3 --profile "$P" --no-state --no-probe
  wait_shared h3 down
  status_of h3 | jq -e '.shared_state.last_error | test("TLS: ")'
  bn_via h3 >/dev/null
}

# The mark of chain local in Redis (the c: hash's block), as redis-cli prints it; empty when none.
redis_mark() { # PORT
  local key
  key=$(redis-cli -p "$1" --scan --pattern 'rpcroute:c:*' | head -1)
  [[ -n $key ]] && redis-cli -p "$1" hget "$key" b
}

# Writes a new height through sidecar h1 (an answer raises the mark, written to Redis at once) and
# waits until Redis holds it.
mark_lands() { # PORT HEIGHT
  fake_control good "{\"height\":$2}"
  bn_via h1 >/dev/null
  local deadline=$((SECONDS + 5))
  until [[ $(redis_mark "$1") == "$2" ]]; do
    ((SECONDS < deadline)) || { echo "mark $2 never reached Redis (has '$(redis_mark "$1")')" >&2; return 1; }
    nap 0.05
  done
}

# Redis forgets the Lua scripts between two writes (SCRIPT FLUSH): the second write lands, nothing
# is refused or logged, the link stays up, and the reload is counted.
flush_between_writes() { # PORT (plain, for redis-cli)
  local port=$1
  mark_lands "$port" 3000
  [[ $(redis-cli -p "$port" script flush) == OK ]]
  mark_lands "$port" 3100
  mark_lands "$port" 3200 # EVALSHA again after the reload
  local s
  s=$(status_of h1)
  jq -e '.shared_state.state == "up" and .shared_state.write_errors == 0 and
    .shared_state.fallbacks == 0 and .shared_state.script_reloads >= 1' <<<"$s" || { echo "$s" >&2; return 1; }
  (($(metric_of h1 rpcroute_shared_state_script_reloads_total) >= 1))
  ! grep -q 'refuses writes' "$SC_LOG"
  # Another host reads what was written after the flush.
  serve_shared h2
  (($(bn_via h2 | xargs printf '%d') >= 3200))
}

@test "SCRIPT FLUSH between two writes: the second lands in Redis, nothing refused, link up" {
  start_redis redis
  start_fake good --height 2000
  write_profile "$P" good
  serve_shared h1
  flush_between_writes "$(node_port redis)"
}

@test "rediss://: SCRIPT FLUSH between two writes, the second lands as over plain Redis" {
  make_test_pki "$BATS_TEST_TMPDIR/pki"
  local tls_port
  tls_port=$(free_port)
  start_redis redis --tls-port "$tls_port" --tls-cert-file "$TEST_PKI/server.pem" \
    --tls-key-file "$TEST_PKI/server.key" --tls-ca-cert-file "$TEST_PKI/ca.pem" --tls-auth-clients no
  start_fake good --height 2000
  cat >"$P" <<EOF2
name: e2e
chains:
  local:
    chain_id: 31337
    providers:
      - { id: good, url: "$(node_url good)" }
shared_state:
  redis: "rediss://localhost:$tls_port/0"
  tls: { ca_file: "$TEST_PKI/ca.pem" }
EOF2
  sidecar_start h1 --profile "$P" --no-state --no-probe
  wait_shared h1 up
  status_of h1 | jq -e '.shared_state.redis | startswith("rediss://")'
  # h2 (started by the helper) joins through the profile's rediss:// URL as well.
  serve_shared() { sidecar_start "$1" --profile "$P" --no-state --no-probe && wait_shared "$1" up; }
  flush_between_writes "$(node_port redis)"
}
