#!/usr/bin/env bats
# The fault matrix (issue 6; DESIGN.md sections 4, 6, 7, 11, 12): every fault kind × every strategy,
# through `rpcroute call` and through `rpcroute serve`, plus a "no healthy provider" column.
#
# A cell is one fault row and one strategy column. Its profile has two providers: F, the fault
# (priority 1, timeout_ms 500, more where F must answer), and H, a healthy fake (priority 2,
# timeout_ms 3000). The cell sends eth_getBalance until F has been tried as often as the row needs (a
# random strategy may put H first; at most MAX_REQUESTS requests), and checks every answer and F's
# health marks after each try:
#   fail     a provider failure: H answers; F's breaker counts it and opens at failure_threshold
#            (2; 1 in the latency_weighted column, whose ranking stops choosing F after one
#            failure; 1 for a timeout, which opens it at once); the next request skips F
#            ("circuit breaker open"), one attempt.
#   limit    a rate limit: H answers; F is marked rate-limited until the deadline the answer gave
#            (Retry-After seconds or date, error data backoff_seconds, else 30 s), its breaker is
#            untouched; the next request puts F in tier 2 behind H.
#   serve    not a failure (slow but within the timeout, huge): F's answer is returned, nothing marked.
#   exclude  a lagging or lying head or a wrong chain id, seen by `rpcroute probe` (call) or the sidecar's own
#            probes (serve): F is never tried and every answer lists it as excluded, with the reason.
# Every answer must be exactly one: for call one JSON document on stdout and nothing on stderr, exit
# 0; for serve one HTTP response (HTTP 200, Content-Length exact, nothing after it) holding one
# JSON-RPC response with the id sent. The "none" column replaces H by a dead port: exit 3 / HTTP 503
# with -32050 and one attempt per provider; where both breakers open, each is still tried as a trial
# (issue 15), and the 503 has no retry_after_ms.
# Checks go through the real outputs: call --json meta, `state show --json`, `rank --json`; the
# X-Rpcroute-* headers, /status and /metrics of the sidecar.
#
# Processes: one fake upstream "fx" serves every fault row on its own path (per-path behaviours of
# /_control; rows that run side by side, see row_test, each use a copy of their own: fx, fx1, …),
# H is another, and the lagging / wrong-chain rows have a fake each (another head or
# chain id); all started once in setup_file and never reconfigured (except the Retry-After date of
# http_429_date, set when its row starts). Sidecars: one per strategy with --no-probe (background
# polls would add failures and rate limits of their own) serving one profile per row, and one with its
# probes on for the lagging / wrong-chain rows. Breaker and rate-limit state is per profile, so rows
# do not see each other's marks; the CLI cells each use their own state file. The cells of a row run
# concurrently (they share nothing but the fakes), the rows one after another.
#
# The table (fault rows × strategy columns, pass/FAIL per cell, for call and for serve) is written to
# the test log (fd 3) by the last test and to $BATS_FILE_TMPDIR/fault_matrix.txt (also copied to
# $FAULT_MATRIX_OUT when set).
#
# Passes (tests/e2e/CMakeLists.txt), chosen by the environment:
#   e2e.fault_matrix        the whole grid, every provider http://127.0.0.1 (the native HTTP client);
#   e2e.fault_matrix_curl   RPCROUTE_HTTP_CLIENT=curl, FAULT_MATRIX_COLUMNS=subset;
#   e2e.fault_matrix_https  FAULT_MATRIX_TLS=1 (every provider https://localhost:PORT, the fakes
#                           serving TLS with a test CA made at test time, trusted through each
#                           provider's tls.ca_file, never the system store), FAULT_MATRIX_COLUMNS=subset.
# FAULT_MATRIX_COLUMNS=subset runs every fault row, through call and through serve, with the "none"
# column and FAULT_MATRIX_SUBSET (default 2) of the seven strategy columns: for row i (its index in
# ROWS) the strategies (2i + r + k) mod 7, k = 0, 1, …, where r is FAULT_MATRIX_ROTATE (default: the
# day number since the epoch) plus 3 for serve. Why a subset is enough there: what these passes add
# is another way of reading F's fault (the curl client, TLS), which every row still exercises, in
# both paths, with the no-healthy-provider column's error reporting; the strategy columns test the
# routing core, which is the same code whatever the client, and the full pass covers all of them.
# Each strategy still gets about 9 cells per path and pass, and the rotation moves the columns by
# one a day, so any 4 days in a row cover the whole grid. Cells left out show "-" in the table; the
# rotation used is printed in the log (set FAULT_MATRIX_ROTATE to reproduce a run).

# jq programs are single-quoted on purpose; cells run in subshells, so their variables are local.
# shellcheck disable=SC2016,SC2030,SC2031,SC2153,SC2154

load helpers

STRATEGIES=(load_balanced round_robin random weighted priority fastest latency_weighted)
ROWS=(dead_port reset close hang slow_over slow_body slow_under slow_body_under http_503 http_502_html html_200
  rpc_32603 malformed truncated wrong_id huge http_429_retry_after http_429_date http_429_plain
  rpc_32005 rpc_backoff rpc_compute_units lagging lying_height wrong_chain rpc_huge_message rpc_control_chars
  endless_chunked endless_length gzip_bomb extra_glued extra_late)
MAX_REQUESTS=${FAULT_MATRIX_MAX_REQUESTS:-40}
COLUMNS_MODE=${FAULT_MATRIX_COLUMNS:-all} # all | subset (see the header)
SUBSET=${FAULT_MATRIX_SUBSET:-2}
ROTATE=${FAULT_MATRIX_ROTATE:-$((EPOCHSECONDS / 86400))}
TLS=${FAULT_MATRIX_TLS:-0}
ROWS_AHEAD=${FAULT_MATRIX_ROWS_AHEAD:-0} # rows whose cells run ahead of their test (row_test)
BALANCE=0xde0b6b3a7640000 # the fake's eth_getBalance answer
HUGE_BYTES=5242880

# The fault fake of ROW: rows that run side by side (adjacent in ROWS, up to ROWS_AHEAD apart) get
# different copies, so a sidecar's pooled connections to one never carry two rows' faults at once.
fault_fake() { # ROW
  local i
  for i in "${!ROWS[@]}"; do [[ ${ROWS[$i]} != "$1" ]] || break; done
  i=$((i % (ROWS_AHEAD + 1)))
  if ((i == 0)); then echo fx; else echo "fx$i"; fi
}

# Sets, for fault ROW: KIND (fail, limit, serve, exclude), HOW (how F is made: a JSON behaviour for
# the path /ROW of the shared fault fake; "dead" for a port nobody listens on; "fake ARGS..." for a
# fake of its own), OUTCOME (ERE on F's attempt outcome), CLASS (its class), LIMIT_MS (rate-limit
# deadline from the answer's time; 0: the absolute one in $BATS_FILE_TMPDIR/limit_at_ms), EXPLICIT
# (0 when the answer gave no deadline: 30 s by default), REASON (ERE on the exclusion reason),
# TIMEOUT_F (F's timeout_ms: generous where F must answer), BLOCK_TIME (the chain's block_time_ms),
# LIMITS_F (F's limits: mapping, flow style, or empty).
row_spec() { # ROW
  KIND=fail HOW="" OUTCOME="" CLASS=provider_failure LIMIT_MS=0 EXPLICIT=1 REASON="" TIMEOUT_F=500 BLOCK_TIME=1000
  LIMITS_F=""
  case $1 in
    dead_port) HOW=dead OUTCOME=connect_failed ;;
    reset) HOW='{"mode":"reset"}' OUTCOME=transport_error ;;
    close) HOW='{"mode":"close"}' OUTCOME=transport_error ;;
    hang) HOW='{"mode":"hang"}' OUTCOME=timeout ;;
    slow_over) HOW='{"mode":"delay","delay_ms":10000}' OUTCOME=timeout ;;
    slow_body) HOW='{"mode":"drip","drip_ms":200}' OUTCOME=timeout ;;
    slow_under) HOW='{"mode":"delay","delay_ms":200}' KIND=serve TIMEOUT_F=3000 ;;
    slow_body_under) HOW='{"mode":"drip","drip_ms":4}' KIND=serve TIMEOUT_F=5000 ;;
    http_503) HOW='{"mode":"status","status":503}' OUTCOME=http_error ;;
    http_502_html) HOW='{"mode":"status","status":502,"body":"<html><head><title>502 Bad Gateway</title></head></html>"}' OUTCOME=http_error ;;
    html_200) HOW='{"mode":"html"}' OUTCOME=bad_response ;;
    rpc_32603) HOW='{"mode":"rpc_error","code":-32603,"message":"internal error"}' OUTCOME=rpc_error ;;
    malformed) HOW='{"mode":"malformed"}' OUTCOME=bad_response ;;
    truncated) HOW='{"mode":"truncated"}' OUTCOME='bad_response|transport_error' ;;
    wrong_id) HOW='{"mode":"wrong_id"}' OUTCOME=wrong_id ;;
    huge) HOW="{\"mode\":\"huge\",\"huge_bytes\":$HUGE_BYTES}" KIND=serve TIMEOUT_F=15000 ;;
    http_429_retry_after) HOW='{"mode":"status","status":429,"retry_after":20}' KIND=limit LIMIT_MS=20000 ;;
    http_429_date) HOW='{"mode":"status","status":429}' KIND=limit ;; # the date: row_prepare
    http_429_plain) HOW='{"mode":"status","status":429}' KIND=limit LIMIT_MS=30000 EXPLICIT=0 ;;
    rpc_32005) HOW='{"mode":"rpc_error","code":-32005,"message":"limit exceeded"}' KIND=limit LIMIT_MS=30000 EXPLICIT=0 ;;
    rpc_backoff)
      HOW='{"mode":"rpc_error","code":-32005,"message":"project ID request rate exceeded","data":{"current_rps":13.333,"allowed_rps":10.0,"backoff_seconds":25.0}}'
      KIND=limit LIMIT_MS=25000
      ;;
    rpc_compute_units)
      HOW='{"mode":"rpc_error","code":429,"message":"Your app has exceeded its compute units per second capacity. If you have retries enabled, you can safely ignore this message."}'
      KIND=limit LIMIT_MS=30000 EXPLICIT=0
      ;;
    # Hostile messages (MESSAGE_ROWS): a provider failure whose text rpcroute must not print raw.
    rpc_huge_message) HOW='{"mode":"rpc_error","code":-32603,"message":"huge"}' OUTCOME=rpc_error ;; # 200 KB: row_prepare
    rpc_control_chars)
      HOW='{"mode":"rpc_error","code":-32603,"message":"\u001b[31mred\u001b[0m\nrpcroute: error: forged\u0007\r\u007f\u009b2J"}'
      OUTCOME=rpc_error
      ;;
    # Excluded for lag; once behind for longer than lag_trip_ms (30 s: a slow run gets there)
    # the breaker opens with reason lag instead. Either keeps F out.
    lagging) HOW='fake --height 90' KIND=exclude REASON='lagging 10 blocks behind|circuit breaker open \(lag: 10 blocks behind' ;;
    # Over-reporting its head: not believed (the honest H is not "lagging" behind it), quarantined.
    lying_height) HOW='fake --height 20000000' KIND=exclude REASON='height 20000000 is not believed' ;;
    wrong_chain) HOW='fake --chain-id 5' KIND=exclude REASON='wrong chain id 5' ;;
    # Memory bombs (issue 14): an endless body is abandoned at F's response cap (1 MiB here, so
    # the cap and not the timeout ends it), a coded answer is refused unread (identity was asked).
    endless_chunked) HOW='{"mode":"endless"}' OUTCOME=too_large LIMITS_F='{max_response_mb: 1}' ;;
    endless_length) HOW='{"mode":"endless_length"}' OUTCOME=too_large LIMITS_F='{max_response_mb: 1}' ;;
    gzip_bomb) HOW='{"mode":"gzip_bomb","gzip_bytes":1048576}' OUTCOME=bad_response ;;
    # An unsolicited extra answer after F's real one, glued to it or 50 ms later on the idle
    # connection: F's answer is returned, and the extra one never answers a later request (the
    # fault fake serves every row on one host:port, so the sidecar's pooled connections are shared).
    extra_glued) HOW='{"mode":"extra","extra_ms":0}' KIND=serve TIMEOUT_F=3000 ;;
    extra_late) HOW='{"mode":"extra","extra_ms":50}' KIND=serve TIMEOUT_F=3000 ;;
    *)
      echo "unknown fault row $1" >&2
      return 1
      ;;
  esac
  if [[ $KIND == limit ]]; then OUTCOME=rate_limited CLASS=rate_limited; fi
  # Lag is judged on heights seen within max(10 s, 3 block times): a long block time keeps the
  # heights of one `rpcroute probe` (and of the sidecar's polls, every 20 s) fresh for the whole
  # cell on a slow machine.
  if [[ $KIND == exclude ]]; then BLOCK_TIME=20000; fi
  return 0
}

# NEED: how many times F must be tried in a cell of strategy S.
need_tries() { # S
  case $KIND in
    fail) if [[ $1 == latency_weighted || $OUTCOME == timeout ]]; then NEED=1; else NEED=2; fi ;;
    limit | serve) NEED=1 ;;
    exclude) NEED=0 ;;
  esac
}

# ---------------------------------------------------------------------------------------------------
# Setup: fakes, profiles, sidecars

profiles_dir() { echo "$BATS_FILE_TMPDIR/profiles"; }

# ---------------------------------------------------------------------------------------------------
# The fakes over http://127.0.0.1 or, with FAULT_MATRIX_TLS=1, https://localhost (tls_helpers.bash:
# a test CA and a server certificate for localhost, made at test time in $BATS_FILE_TMPDIR/pki).

pki_dir() { echo "$BATS_FILE_TMPDIR/pki"; }

# Starts fake NAME: plain, or serving TLS with the test PKI's certificate for localhost.
fm_start_fake() { # NAME [FAKE ARGS...]
  local name=$1
  shift
  if [[ $TLS == 1 ]]; then start_tls_fake "$name" server "$@"; else start_fake "$name" "$@"; fi
}

# Base URL of a fake (or dead port) on PORT.
upstream_url() { # PORT
  if [[ $TLS == 1 ]]; then echo "https://localhost:$1"; else echo "http://127.0.0.1:$1"; fi
}

# curl to PATH of the fake NAME, trusting the test CA when it serves TLS; fails on any error.
fm_curl() { # NAME PATH [CURL ARGS...]
  local name=$1 path=$2 port tls=()
  shift 2
  port_of "$name"
  port=$PORT
  [[ $TLS != 1 ]] || tls=(--cacert "$(pki_dir)/ca.pem")
  curl -sf --max-time 5 "${tls[@]}" "$@" "$(upstream_url "$port")$path"
}

fm_control() { # NAME JSON|@FILE
  fm_curl "$1" /_control -X POST -H 'content-type: application/json' --data-binary "$2" >/dev/null
}

# How many eth_getBalance requests the fake NAME has seen; fails (printing nothing) when it cannot tell.
fm_balance_requests() { # NAME
  local stats n
  stats=$(fm_curl "$1" /_stats) || return 1
  n=$(jq -e '.methods.eth_getBalance // 0' <<<"$stats") || return 1
  [[ $n =~ ^[0-9]+$ ]] || return 1
  echo "$n"
}

# Writes a profile with providers F (url F_URL, timeout_ms F_TIMEOUT, priority 1, limits F_LIMITS if
# given) and ID (url URL, timeout_ms 3000, priority 2); with FAULT_MATRIX_TLS both trust the test CA
# (tls.ca_file). Builtins only: setup_file writes about 260.
fm_profile() { # FILE STRATEGY THRESHOLD F_URL F_TIMEOUT ID URL BLOCK_TIME_MS [F_LIMITS]
  local f_limits=() tls=()
  [[ -z ${9:-} ]] || f_limits=("        limits: $9")
  [[ $TLS != 1 ]] || tls=("        tls: {ca_file: $BATS_FILE_TMPDIR/pki/ca.pem}")
  printf '%s\n' "name: e2e" "chains:" "  local:" "    chain_id: 31337" "    block_time_ms: $8" "    providers:" \
    "      - id: F" "        url: $4" "        priority: 1" "        timeout_ms: $5" "${f_limits[@]}" "${tls[@]}" \
    "      - id: $6" "        url: $7" "        priority: 2" "        timeout_ms: 3000" "${tls[@]}" \
    "routing:" "  default_strategy: $2" \
    "health: {circuit_breaker: {failure_threshold: $3, recovery_timeout_ms: 300000, max_recovery_timeout_ms: 300000}}" >"$1"
}

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  export NO_COLOR=1
  local row s dir t url_h url_d th
  declare -A url_f=()
  [[ $COLUMNS_MODE == all || $COLUMNS_MODE == subset ]] || { echo "FAULT_MATRIX_COLUMNS: all or subset, not $COLUMNS_MODE" >&2; return 1; }
  echo $((ROTATE % ${#STRATEGIES[@]})) >"$BATS_FILE_TMPDIR/rotate"
  echo "# FAULT_MATRIX_COLUMNS=$COLUMNS_MODE rotation $(rotation) FAULT_MATRIX_TLS=$TLS RPCROUTE_HTTP_CLIENT=${RPCROUTE_HTTP_CLIENT:-}" >&3
  if [[ $TLS == 1 ]]; then make_test_pki "$(pki_dir)"; fi
  # H, the shared fault fake fx (one path per row), and a fake of its own for rows that need
  # another chain.
  local pids=() pid paths=""
  fm_start_fake h --height 100 &
  pids+=($!)
  local k fakes=(fx)
  for ((k = 1; k <= ROWS_AHEAD; k++)); do fakes+=("fx$k"); done
  for k in "${fakes[@]}"; do
    fm_start_fake "$k" --height 100 &
    pids+=($!)
  done
  dead_port d_none
  for row in "${ROWS[@]}"; do
    row_spec "$row"
    case $HOW in
      dead) dead_port "f_$row" ;;
      fake\ *)
        # shellcheck disable=SC2086
        fm_start_fake "f_$row" --height 100 ${HOW#fake } &
        pids+=($!)
        ;;
      *) paths+=${paths:+,}"\"/$row\":$HOW" ;;
    esac
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  for k in "${fakes[@]}"; do fm_control "$k" "{\"paths\":{$paths}}"; done
  local procs=$BATS_FILE_TMPDIR/procs port
  for row in "${ROWS[@]}"; do
    row_spec "$row"
    case $HOW in
      dead | fake\ *)
        read -r port <"$procs/f_$row.port"
        url_f[$row]=$(upstream_url "$port")
        ;;
      *)
        read -r port <"$procs/$(fault_fake "$row").port"
        url_f[$row]=$(upstream_url "$port")/$row
        ;;
    esac
  done
  read -r port <"$procs/h.port"
  url_h=$(upstream_url "$port")
  read -r port <"$procs/d_none.port"
  url_d=$(upstream_url "$port")
  dir=$(profiles_dir)
  mkdir -p "$dir/none" "$dir/probe"
  for s in "${STRATEGIES[@]}"; do
    mkdir -p "$dir/$s"
    for row in "${ROWS[@]}"; do
      row_spec "$row"
      t=$dir/$s/$row.yaml
      [[ $KIND != exclude ]] || t=$dir/probe/${row}_$s.yaml
      th=2
      [[ $s != latency_weighted ]] || th=1
      fm_profile "$t" "$s" "$th" "${url_f[$row]}" "$TIMEOUT_F" H "$url_h" "$BLOCK_TIME" "$LIMITS_F"
    done
  done
  for row in "${ROWS[@]}"; do
    row_spec "$row"
    t=$dir/none/none_$row.yaml
    [[ $KIND != exclude ]] || t=$dir/probe/none_$row.yaml
    fm_profile "$t" load_balanced 2 "${url_f[$row]}" "$TIMEOUT_F" D "$url_d" "$BLOCK_TIME" "$LIMITS_F"
  done
  # One sidecar per strategy (no background probes), one with probes for the exclude rows.
  local args
  pids=()
  for s in "${STRATEGIES[@]}"; do
    args=()
    for t in "$dir/$s"/*.yaml; do args+=(-p "$t"); done
    if [[ $s == load_balanced ]]; then
      for t in "$dir/none"/*.yaml; do args+=(-p "$t"); done
    fi
    start_serve "sc_$s" "${args[@]}" --no-probe --no-state --strategy "$s" &
    pids+=($!)
  done
  args=()
  for t in "$dir/probe"/*.yaml; do args+=(-p "$t"); done
  start_serve sc_probe "${args[@]}" --no-state &
  pids+=($!)
  for pid in "${pids[@]}"; do wait "$pid"; done
  : >"$BATS_FILE_TMPDIR/matrix.tsv"
  echo "$EPOCHSECONDS" >"$BATS_FILE_TMPDIR/sidecars_started_s"
}

teardown_file() {
  # Rows started ahead whose test did not run (a filtered run) end before the fakes do.
  local rc deadline=$((SECONDS + 300))
  for rc in "$BATS_FILE_TMPDIR"/rows/*/*/started; do
    [[ -f $rc ]] || continue
    while [[ ! -f ${rc%started}rc ]] && ((SECONDS < deadline)); do nap 0.1; done
  done
  stop_all
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

# ---------------------------------------------------------------------------------------------------
# Checks inside a cell (a subshell with set -e: the first failed check ends the cell). Processes are
# costly on a loaded machine (a fork alone is about 5 ms of CPU here, an exec of jq or curl 25 ms):
# one jq per answer, builtins for the rest, and no $(…) around a function.

fail_cell() { # MESSAGE
  echo "FAILED: $1" >&2
  return 1
}

# MS: milliseconds since the epoch.
ms_now() { local t=${EPOCHREALTIME/./}; MS=$((t / 1000)); }

# PORT: the port of node NAME started in setup_file.
port_of() { # NAME
  read -r PORT <"$BATS_FILE_TMPDIR/procs/$1.port"
}

# A jq verdict: prints "ok ..." or "FAIL ..."; fails the cell on FAIL (showing INPUT's start).
verdict() { # WHAT INPUT_FILE JQ ARGS...
  local what=$1 input=$2 v
  shift 2
  v=$(jq "$@" 2>&1) || v="FAIL jq: $v"
  if [[ $v != ok* ]]; then
    printf 'FAILED: %s: %s\n  on %s: %s\n' "$what" "$v" "$(basename "$input")" "$(head -c 1500 "$input")" >&2
    return 1
  fi
  VERDICT=${v#ok}
  VERDICT=${VERDICT# }
}

# jq arguments every verdict gets.
jq_args() {
  JQ_ARGS=(--arg kind "$KIND" --arg row "$ROW" --arg outcome "^($OUTCOME)$" --arg class "$CLASS"
    --arg reason "$REASON" --arg balance "$BALANCE" --argjson huge "$HUGE_BYTES")
}

# jq definitions shared by the verdicts.
JQ_DEFS='
def result_ok($who): if $row == "huge" and $who == "F" then (.result | type == "string" and length == $huge)
                     else .result == $balance end;
def verdict: if length == 0 then "ok" else "FAIL " + join("; ") end;
'

# The answer of one `rpcroute call --json` (slurped): one document, the strategy, who was tried and
# who answered, F's outcome, the result, F's exclusion. Prints "ok PROVIDERS" (attempted, in order).
JQ_CALL=$JQ_DEFS'
if length != 1 then "FAIL \(length) JSON documents on stdout" else
.[0] as $r | ([$r.meta.attempts[].provider] | join(",")) as $p
| [ (if $r.meta.strategy != $s then "strategy \($r.meta.strategy)" else empty end),
    (if ($kind == "fail" or $kind == "limit") and $p == "F,H" then
       (if $r.meta.provider != "H" then "provider \($r.meta.provider), expected H" else empty end),
       (if $r.meta.attempts[1].outcome != "success" then "H: \($r.meta.attempts[1].outcome)" else empty end),
       ($r.meta.attempts[0] | if (.outcome | test($outcome)) and .class == $class then empty
                              else "F: \(.outcome)/\(.class), expected \($outcome)/\($class)" end),
       ($r | if result_ok("H") then empty else "not the balance" end)
     elif $kind == "serve" and $p == "F" then
       (if $r.meta.provider != "F" then "provider \($r.meta.provider), expected F" else empty end),
       (if $row == "slow_under" and $r.meta.attempts[0].latency_ms < 190 then
          "F answered in \($r.meta.attempts[0].latency_ms) ms, before its delay" else empty end),
       ($r | if result_ok("F") then empty else "not F'"'"'s result" end)
     elif $p == "H" then
       (if $r.meta.provider != "H" then "provider \($r.meta.provider), expected H" else empty end),
       ($r | if result_ok("H") then empty else "not the balance" end),
       (if $kind == "exclude" and ([$r.meta.excluded[] | select(.provider == "F" and (.reason | test($reason)))] | length) != 1
        then "F not excluded with /\($reason)/: \($r.meta.excluded)" else empty end)
     else "attempts [\($p)] (fault kind \($kind))" end)
  ] | verdict | if . == "ok" then "ok " + $p else . end
end'

# F's marks in a state (state show --json) after TRIES tries of F; rate-limit window [LO, HI].
JQ_MARKS_STATE=$JQ_DEFS'
([.providers[] | select(.provider == "F")] | first // {}) as $f
| ($f.breaker // {}) as $b | ($f.rate_limited_until_ms // 0) as $rl
| [ if $kind == "fail" then
      (if $tries < $need then
         (if $b.state == "closed" and $b.failures == $tries then empty
          else "breaker \($b.state) with \($b.failures) failure(s) after \($tries), expected closed" end)
       elif $b.state != "open" then "breaker \($b.state) after \($tries) failures, expected open" else empty end),
      (if $rl == 0 then empty else "a failure set rate_limited_until_ms" end)
    elif $kind == "limit" then
      (if $b.state == "closed" and $b.failures == 0 then empty else "breaker \($b.state)/\($b.failures) after a rate limit" end),
      (if $rl >= $lo and $rl <= $hi then empty else "rate_limited_until_ms \($rl) - now = \($rl - $t1) ms, expected in [\($lo - $t1), \($hi - $t1)]" end)
    else
      (if $b.state == "closed" and $b.failures == 0 and $rl == 0 then empty else "marks on F: \($b), \($rl)" end)
    end
  ] | verdict'

# F's marks in /status (the profile's entry) after TRIES tries of F.
JQ_MARKS_STATUS=$JQ_DEFS'
(.profiles[] | select(.profile == $profile)) as $e
| ([$e.candidates[] | select(.provider == "F")] | first) as $c
| ([$e.excluded[] | select(.provider == "F")] | first) as $x
| [ if $kind == "fail" then
      (if $tries < $need then
         (if $c.breaker == "closed" and $c.tier == 1 then empty else "F: \($c // $x), expected closed in tier 1" end)
       elif ($x.reason // "" | test("circuit breaker open")) then empty
       else "F: \($c // $x), expected excluded by an open breaker" end)
    elif $kind == "limit" then
      (if $c.breaker == "closed" and $c.tier == 2 then empty else "F: \($c // $x), expected closed in tier 2" end),
      (if $c.rate_limited_until_ms >= $lo and $c.rate_limited_until_ms <= $hi then empty
       else "rate_limited_until_ms \($c.rate_limited_until_ms) - now = \($c.rate_limited_until_ms - $t1) ms, expected in [\($lo - $t1), \($hi - $t1)]" end)
    elif $kind == "serve" then
      (if $c.breaker == "closed" and $c.tier == 1 and $c.rate_limited_until_ms == 0 then empty else "F: \($c // $x), expected unmarked" end)
    else
      (if ($x.reason // "" | test($reason)) then empty else "F: \($c // $x), expected excluded with /\($reason)/" end)
    end
  ] | verdict'

# The rate-limit window [LIMIT_LO, LIMIT_HI] (ms since the epoch) for an answer between T0 and T1.
limit_window() { # T0 T1
  LIMIT_LO=0 LIMIT_HI=0
  [[ $KIND == limit ]] || return 0
  if ((LIMIT_MS > 0)); then
    LIMIT_LO=$(($1 + LIMIT_MS - 1500)) LIMIT_HI=$(($2 + LIMIT_MS + 1500))
  else
    local at
    read -r at <"$BATS_FILE_TMPDIR/limit_at_ms"
    LIMIT_LO=$((at - 1500)) LIMIT_HI=$((at + 1500))
  fi
}

# ---------------------------------------------------------------------------------------------------
# rpcroute call cells

# One `rpcroute call --json`; leaves CALL_OUT (stdout), CALL_ERR (stderr), CALL_RC.
cli_call() { # PROFILE STATE STRATEGY N
  CALL_OUT=$CELL/call.$4.json CALL_ERR=$CELL/call.$4.err CALL_RC=0
  rpcroute call -p "$1" --state "$2" --strategy "$3" --json eth_getBalance "$DEV_ACCOUNT" latest \
    >"$CALL_OUT" 2>"$CALL_ERR" || CALL_RC=$?
}

# A call that must succeed with one answer; sets PROVIDERS (those attempted, comma-separated).
cli_call_ok() { # PROFILE STATE STRATEGY N
  cli_call "$@"
  [[ $CALL_RC == 0 ]] || fail_cell "call $4: exit $CALL_RC, expected 0: $(head -c 1500 "$CALL_ERR")"
  [[ ! -s $CALL_ERR ]] || fail_cell "call $4: stderr not empty: $(head -c 1500 "$CALL_ERR")"
  verdict "call $4" "$CALL_OUT" -rs "${JQ_ARGS[@]}" --arg s "$3" "$JQ_CALL" "$CALL_OUT"
  PROVIDERS=$VERDICT
}

call_cell() { # ROW STRATEGY
  ROW=$1
  local s=$2 dir prof st need tries=0 i t0 t1
  row_spec "$ROW"
  jq_args
  if [[ $s == none ]]; then
    call_none_cell
    return
  fi
  dir=$(profiles_dir)
  prof=$dir/$s/$ROW.yaml
  [[ $KIND != exclude ]] || prof=$dir/probe/${ROW}_$s.yaml
  st=$CELL/state.json
  need_tries "$s"
  need=$NEED
  if [[ $KIND == exclude ]]; then
    rpcroute probe -p "$prof" --state "$st" >"$CELL/probe.out" 2>&1 || fail_cell "rpcroute probe exit $?: $(cat "$CELL/probe.out")"
  fi
  for ((i = 1; i <= MAX_REQUESTS; i++)); do
    ms_now
    t0=$MS
    cli_call_ok "$prof" "$st" "$s" "$i"
    ms_now
    t1=$MS
    if [[ $PROVIDERS == F* ]]; then
      tries=$((tries + 1))
      limit_window "$t0" "$t1"
      rpcroute state show --state "$st" --json >"$CELL/state.$i.json"
      verdict "marks after try $tries of F" "$CELL/state.$i.json" -r "${JQ_ARGS[@]}" --argjson tries "$tries" \
        --argjson need "$need" --argjson lo "${LIMIT_LO:-0}" --argjson hi "${LIMIT_HI:-0}" --argjson t1 "$t1" \
        "$JQ_MARKS_STATE" "$CELL/state.$i.json"
    fi
    if [[ $KIND == exclude ]]; then ((i < 3)) || break; else ((tries < need)) || break; fi
  done
  ((tries == need)) || fail_cell "F tried $tries time(s) in $MAX_REQUESTS requests, expected $need"
  # What the marks do to the next request.
  case $KIND in
    fail)
      cli_call_ok "$prof" "$st" "$s" next
      [[ $PROVIDERS == H ]] || fail_cell "after the breaker opened: attempts [$PROVIDERS]"
      verdict "after the breaker opened" "$CALL_OUT" -r \
        '[.meta.excluded[] | select(.provider == "F" and (.reason | test("circuit breaker open")))] | if length == 1 then "ok" else "FAIL F not excluded" end' "$CALL_OUT"
      ;;
    limit)
      cli_call_ok "$prof" "$st" "$s" next
      [[ $PROVIDERS == H ]] || fail_cell "rate-limited F tried before H: attempts [$PROVIDERS]"
      rpcroute rank -p "$prof" --state "$st" --strategy "$s" --method eth_getBalance --json >"$CELL/rank.json"
      verdict "rank: H in tier 1, F in tier 2" "$CELL/rank.json" -r \
        'if [.candidates[] | [.provider, .tier]] == [["H", 1], ["F", 2]] then "ok" else "FAIL \([.candidates[] | [.provider, .tier]])" end' "$CELL/rank.json"
      ;;
  esac
}

# The answer when no provider could serve (slurped `call --json`): -32050, the attempts, exclusions.
JQ_NONE=$JQ_DEFS'
if length != 1 then "FAIL \(length) JSON documents" else .[0] as $r
| ($r.error.data // {}) as $d
| [ (if $r.error.code == -32050 then empty else "error \($r.error)" end),
    (if $kind == "exclude" then
       # D is tried, or already set aside by its breaker (the sidecar probes it too); F never.
       (if [$d.attempts[] | [.provider, .outcome]] == [["D", "connect_failed"]]
           or ($d.attempts == [] and ([$d.excluded[] | select(.provider == "D" and (.reason | test("circuit breaker open")))] | length == 1))
        then empty else "attempts \($d.attempts), excluded \($d.excluded)" end),
       (if [$d.excluded[] | select(.provider == "F" and (.reason | test($reason)))] | length == 1 then empty else "excluded \($d.excluded)" end)
     elif $phase == "open" then
       # Both breakers open and nothing else usable: each is tried as a trial, and fails again.
       (if ([$d.attempts[].provider] | sort) == ["D", "F"] and $d.excluded == [] and $d.retry_after_ms == null then empty
        else "attempts \($d.attempts), excluded \($d.excluded): expected both breakers tried as trials" end)
     else
       (if [$d.attempts[].provider] | sort == ["D", "F"] then empty else "attempts \($d.attempts)" end),
       ($d.attempts[] | select(.provider == "F") | if (.outcome | test($outcome)) and .class == $class then empty
                                                  else "F: \(.outcome)/\(.class), expected \($outcome)/\($class)" end),
       ($d.attempts[] | select(.provider == "D") | if .outcome == "connect_failed" then empty else "D: \(.outcome)" end),
       (if all($d.attempts[]; (.latency_ms | type == "number") and (.message | type == "string")) then empty else "attempt details" end)
     end)
  ] | verdict
end'

# Rows whose provider's error message is hostile: what rpcroute reports of it (F's attempt in the
# answer's error data; the plain call's stderr) is escaped and cut to 512 bytes plus "… (N bytes)".
MESSAGE_ROWS=" rpc_huge_message rpc_control_chars "
JQ_MESSAGE='
([.error.data.attempts[]? | select(.provider == "F")] | first | .message // "") as $m
| [ (if ($m | utf8bytelength) > 600 then "F'"'"'s message is \($m | utf8bytelength) bytes" else empty end),
    (if $m | test("[\u0001-\u001f\u007f-\u009f]") then "control characters in F'"'"'s message" else empty end),
    (if $row == "rpc_huge_message" and ($m | test("… \\(2000[0-9][0-9] bytes\\)$") | not) then "not cut: \($m[-60:])" else empty end),
    (if $row == "rpc_control_chars" and ($m | contains("\\x1b[31mred\\x1b[0m\\nrpcroute: error: forged\\x07\\r\\x7f\\xc2\\x9b2J") | not)
     then "not escaped: \($m)" else empty end)
  ] | if length == 0 then "ok" else "FAIL " + join("; ") end'

# The plain call's stderr ERR for a MESSAGE_ROWS row: short, no control character, no forged line.
message_stderr_checks() { # ERR
  local size
  size=$(wc -c <"$1")
  ((size < 4000)) || fail_cell "plain call: $size bytes on stderr"
  if LC_ALL=C grep -qP '[\x01-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]' "$1"; then
    fail_cell "plain call: control characters on stderr: $(head -c 600 "$1" | od -c | head -12)"
  fi
  [[ $(grep -c '^rpcroute:' "$1") == 1 ]] || fail_cell "plain call: more than one rpcroute: line: $(head -c 1500 "$1")"
}

# No healthy provider: F and a dead port D.
call_none_cell() {
  local prof st
  prof=$(profiles_dir)/none/none_$ROW.yaml
  [[ $KIND != exclude ]] || prof=$(profiles_dir)/probe/none_$ROW.yaml
  st=$CELL/state.json
  if [[ $KIND == exclude ]]; then
    rpcroute probe -p "$prof" --state "$st" >"$CELL/probe.out" 2>&1 || true
  fi
  cli_call "$prof" "$st" load_balanced 1
  [[ $CALL_RC == 3 ]] || fail_cell "exit $CALL_RC, expected 3: $(head -c 1500 "$CALL_ERR")"
  verdict "no healthy provider" "$CALL_OUT" -rs "${JQ_ARGS[@]}" --arg phase first "$JQ_NONE" "$CALL_OUT"
  if [[ $MESSAGE_ROWS == *" $ROW "* ]]; then
    verdict "F's message" "$CALL_OUT" -r "${JQ_ARGS[@]}" "$JQ_MESSAGE" "$CALL_OUT"
  fi
  [[ $KIND != exclude ]] || return 0
  # Without --json: nothing on stdout, the reason and one line per attempt on stderr.
  local rc=0 out=$CELL/plain.out err=$CELL/plain.err text
  rpcroute call -p "$prof" --state "$st" eth_getBalance "$DEV_ACCOUNT" latest >"$out" 2>"$err" || rc=$?
  [[ $rc == 3 ]] || fail_cell "plain call: exit $rc, expected 3"
  [[ ! -s $out ]] || fail_cell "plain call: stdout not empty: $(head -c 500 "$out")"
  IFS= read -r -d '' text <"$err" || true
  [[ $text == "rpcroute: no provider could serve eth_getBalance"* ]] || fail_cell "plain call: stderr: $text"
  local re=$'\n''  F: ('"$OUTCOME"') \('"$CLASS"'\)'
  # A timeout opened F's breaker at once: this second call leaves it out.
  [[ $OUTCOME != timeout ]] || re=$'\n''  excluded F: circuit breaker open \(timeout\)'
  [[ $text =~ $re ]] || fail_cell "plain call: no F attempt line: $text"
  [[ $text == *$'\n  D: connect_failed (provider_failure)'* ]] || fail_cell "plain call: no D attempt line: $text"
  [[ $MESSAGE_ROWS != *" $ROW "* ]] || message_stderr_checks "$err"
  if [[ $KIND == fail ]]; then
    # Two failures each: both breakers are open; each is tried as a trial.
    cli_call "$prof" "$st" load_balanced 3
    [[ $CALL_RC == 3 ]] || fail_cell "third call: exit $CALL_RC, expected 3"
    verdict "both breakers open" "$CALL_OUT" -rs "${JQ_ARGS[@]}" --arg phase open "$JQ_NONE" "$CALL_OUT"
  fi
}

# ---------------------------------------------------------------------------------------------------
# rpcroute serve cells

# The body of one sidecar answer (slurped): one JSON-RPC response with the id sent, and the result
# (or, with $want 503, -32050 and what JQ_NONE checks).
JQ_SERVE=$JQ_DEFS'
if length != 1 then "FAIL \(length) JSON documents in the body" else .[0] as $r
| [ (if $r.jsonrpc == "2.0" and $r.id == $id then empty else "jsonrpc \($r.jsonrpc), id \($r.id), expected \($id)" end),
    (if $who == "" then empty elif ($r | result_ok($who)) then empty else "not \($who)'"'"'s result" end)
  ] | verdict
end'

# One request through sidecar node SC to PATH with id ID: exactly one HTTP response, status WANT, one
# JSON-RPC response with that id. Leaves RESP (RESP.body), PROVIDER, ATTEMPTS, STRATEGY.
serve_post() { # SC PATH ID WANT
  local sc=$1 path=$2 id=$3 want=$4 who=""
  RESP=$CELL/resp.$id
  port_of "$sc"
  http_once "$PORT" "$path" \
    "{\"jsonrpc\":\"2.0\",\"id\":\"$id\",\"method\":\"eth_getBalance\",\"params\":[\"$DEV_ACCOUNT\",\"latest\"]}" "$RESP" ||
    fail_cell "$id: no complete answer (HTTP $HTTP_CODE)"
  [[ $HTTP_RESPONSES == 1 && $HTTP_EXTRA == 0 ]] ||
    fail_cell "$id: expected exactly one HTTP response: $HTTP_RESPONSES response(s), $HTTP_EXTRA extra byte(s): $(head -c 800 "$RESP.raw")"
  [[ $HTTP_CODE == "$want" ]] || fail_cell "$id: HTTP $HTTP_CODE, expected $want: $(head -c 800 "$RESP.raw")"
  PROVIDER=${HTTP_HDR[x-rpcroute-provider]:-} ATTEMPTS=${HTTP_HDR[x-rpcroute-attempts]:-}
  STRATEGY=${HTTP_HDR[x-rpcroute-strategy]:-}
  [[ $want != 200 ]] || who=$PROVIDER
  verdict "$id: body" "$RESP.body" -rs "${JQ_ARGS[@]}" --arg id "$id" --arg who "$who" "$JQ_SERVE" "$RESP.body"
}

# Fetches /status of SC and checks F's marks in PROFILE (JQ_MARKS_STATUS); the extra jq args give
# tries, need, lo, hi, t1.
status_marks() { # SC PROFILE WHAT JQ ARGS...
  local sc=$1 profile=$2 what=$3 file=$CELL/status.json
  shift 3
  port_of "$sc"
  curl -sf --max-time 10 -o "$file" "http://127.0.0.1:$PORT/status" || fail_cell "$what: /status"
  verdict "$what" "$file" -r "${JQ_ARGS[@]}" --arg profile "$profile" "$@" "$JQ_MARKS_STATUS" "$file"
}

# Waits (up to 15 s) until the sidecar's own probes have excluded F in PROFILE.
wait_probed() { # SC PROFILE
  local deadline=$((SECONDS + 15))
  while ((SECONDS < deadline)); do
    if status_marks "$1" "$2" "probes" --argjson tries 0 --argjson need 0 --argjson lo 0 --argjson hi 0 --argjson t1 0 2>/dev/null; then
      return 0
    fi
    nap 0.3
  done
  status_marks "$1" "$2" "/status: the sidecar's probes excluded F" --argjson tries 0 --argjson need 0 \
    --argjson lo 0 --argjson hi 0 --argjson t1 0
}

serve_cell() { # ROW STRATEGY
  ROW=$1
  local s=$2 sc profile path need tries=0 i t0 t1
  row_spec "$ROW"
  jq_args
  if [[ $s == none ]]; then
    serve_none_cell
    return
  fi
  sc=sc_$s profile=$ROW
  if [[ $KIND == exclude ]]; then sc=sc_probe profile=${ROW}_$s; fi
  path=/rpc/profile/$profile/local
  need_tries "$s"
  need=$NEED
  [[ $KIND != exclude ]] || wait_probed "$sc" "$profile"
  for ((i = 1; i <= MAX_REQUESTS; i++)); do
    ms_now
    t0=$MS
    serve_post "$sc" "$path" "$ROW-$s-$i" 200
    ms_now
    t1=$MS
    [[ $STRATEGY == "$s" ]] || fail_cell "$i: X-Rpcroute-Strategy $STRATEGY"
    case $KIND:$PROVIDER:$ATTEMPTS in
      fail:H:2 | limit:H:2 | serve:F:1) tries=$((tries + 1)) ;;
      *:H:1) ;;
      *) fail_cell "$i: provider $PROVIDER after $ATTEMPTS attempt(s) (fault kind $KIND)" ;;
    esac
    if [[ $ROW == slow_under && $PROVIDER == F ]]; then
      local lat=${HTTP_HDR[x-rpcroute-upstream-latency]:-0}
      ((${lat%%.*} >= 190)) || fail_cell "$i: F answered in $lat ms, before its delay"
    fi
    if [[ $PROVIDER == F || $ATTEMPTS == 2 || $KIND == exclude ]]; then
      limit_window "$t0" "$t1"
      status_marks "$sc" "$profile" "/status after try $tries of F" --argjson tries "$tries" --argjson need "$need" \
        --argjson lo "$LIMIT_LO" --argjson hi "$LIMIT_HI" --argjson t1 "$t1"
    fi
    if [[ $KIND == exclude ]]; then ((i < 3)) || break; else ((tries < need)) || break; fi
  done
  ((tries == need)) || fail_cell "F tried $tries time(s) in $MAX_REQUESTS requests, expected $need"
  if [[ $KIND != exclude ]]; then
    # /metrics: every try of F counted under its outcome, and the breaker or rate-limit gauge.
    local text counted=0 gauge outcome=$OUTCOME
    [[ $KIND != serve ]] || outcome=success
    port_of "$sc"
    text=$(curl -sf --max-time 10 "http://127.0.0.1:$PORT/metrics")
    counted=$(awk -v p="profile=\"$profile\"" -v o="^($outcome)\$" '
      index($0, "rpcroute_attempts_total{") == 1 && index($0, p) && index($0, "provider=\"F\"") {
        split($0, a, "outcome=\""); split(a[2], b, "\""); if (b[1] ~ o) n += $NF }
      END { print n + 0 }' <<<"$text")
    [[ $counted == "$tries" ]] || fail_cell "/metrics: $counted attempt(s) of F with outcome /$outcome/, expected $tries"
    gauge=$(awk -v p="profile=\"$profile\"" -v m="$([[ $KIND == limit ]] && echo rpcroute_rate_limited || echo rpcroute_breaker_state)" '
      index($0, m "{") == 1 && index($0, p) && index($0, "provider=\"F\"") { v = $NF } END { print v + 0 }' <<<"$text")
    case $KIND in
      fail) [[ $gauge == 2 ]] || fail_cell "/metrics: rpcroute_breaker_state of F is $gauge, expected 2 (open)" ;;
      limit) [[ $gauge == 1 ]] || fail_cell "/metrics: rpcroute_rate_limited of F is $gauge, expected 1" ;;
      serve) [[ $gauge == 0 ]] || fail_cell "/metrics: rpcroute_breaker_state of F is $gauge, expected 0" ;;
    esac
  fi
  case $KIND in
    fail | limit)
      serve_post "$sc" "$path" "$ROW-$s-next" 200
      [[ $PROVIDER:$ATTEMPTS == H:1 ]] || fail_cell "next request: provider $PROVIDER after $ATTEMPTS attempt(s), expected H after 1"
      ;;
  esac
}

serve_none_cell() {
  local sc=sc_load_balanced profile=none_$ROW t0 t1
  [[ $KIND != exclude ]] || sc=sc_probe
  local path=/rpc/profile/$profile/local
  [[ $KIND != exclude ]] || wait_probed "$sc" "$profile"
  ms_now
  t0=$MS
  serve_post "$sc" "$path" "$ROW-none-1" 503
  ms_now
  t1=$MS
  verdict "503" "$RESP.body" -rs "${JQ_ARGS[@]}" --arg phase first "$JQ_NONE" "$RESP.body"
  if [[ $MESSAGE_ROWS == *" $ROW "* ]]; then
    verdict "F's message in the 503" "$RESP.body" -r "${JQ_ARGS[@]}" "$JQ_MESSAGE" "$RESP.body"
  fi
  [[ $KIND != exclude ]] || return 0
  [[ $ATTEMPTS == 2 ]] || fail_cell "X-Rpcroute-Attempts $ATTEMPTS, expected 2"
  if [[ $KIND == limit && $EXPLICIT == 1 ]]; then
    # When to come back: the rate limit's deadline, in the body and as Retry-After.
    limit_window "$t0" "$t1"
    verdict "retry_after_ms" "$RESP.body" -r --argjson lo "$((LIMIT_LO - t1))" --argjson hi "$((LIMIT_HI - t0))" \
      '.error.data.retry_after_ms as $v | if $v >= $lo and $v <= $hi then "ok" else "FAIL retry_after_ms \($v), expected in [\($lo), \($hi)]" end' "$RESP.body"
    [[ ${HTTP_HDR[retry-after]:-} =~ ^[0-9]+$ ]] || fail_cell "no Retry-After header on the 503"
  fi
  if [[ $KIND == fail ]]; then
    # A timeout opened F's breaker at once: the second request tries D alone.
    local second=2
    [[ $OUTCOME != timeout ]] || second=1
    serve_post "$sc" "$path" "$ROW-none-2" 503
    [[ $ATTEMPTS == "$second" ]] || fail_cell "second request: X-Rpcroute-Attempts $ATTEMPTS, expected $second"
    serve_post "$sc" "$path" "$ROW-none-3" 503
    verdict "both breakers open" "$RESP.body" -rs "${JQ_ARGS[@]}" --arg phase open "$JQ_NONE" "$RESP.body"
    [[ $ATTEMPTS == 2 ]] || fail_cell "third request: X-Rpcroute-Attempts $ATTEMPTS, expected 2 (both as trials)"
  fi
}

# ---------------------------------------------------------------------------------------------------
# Rows

# Per row, before its cells.
row_prepare() { # ROW
  if [[ $1 == rpc_huge_message ]]; then
    # A 200 KB message: too long for a command line, so the control body goes through a file.
    local body=$BATS_FILE_TMPDIR/huge_message.json
    head -c 200000 /dev/zero | tr '\0' 'x' |
      jq -Rs '{paths: {"/rpc_huge_message": {mode: "rpc_error", code: -32603, message: .}}}' >"$body"
    fm_control "$(fault_fake "$1")" "@$body"
  fi
  if [[ $1 == http_429_date ]]; then
    # Retry-After as an HTTP date 45 s ahead (whole seconds; 45 s tells it apart from the 30 s default).
    local at_s=$(($(date +%s) + 45))
    echo $((at_s * 1000)) >"$BATS_FILE_TMPDIR/limit_at_ms"
    fm_control "$(fault_fake "$1")" "{\"paths\":{\"/http_429_date\":{\"mode\":\"status\",\"status\":429,\"retry_after\":\"$(LC_ALL=C date -u -d "@$at_s" '+%a, %d %b %Y %H:%M:%S GMT')\"}}}"
  fi
}

# Rows can run ahead of their test: while a test checks its row, the cells of the next
# FAULT_MATRIX_ROWS_AHEAD rows (default 0: one row at a time) already run. Rows side by side share
# only H and the sidecars: each has its own profiles, state files and fault fake (fault_fake: a
# sidecar's pooled connections never carry two rows' faults), and a row's call and serve tests are
# 32 rows apart, so no two rows that could see each other's marks ever overlap. Off by default: a
# row costs about 9 s of CPU (process start-ups, half of it system time), so on two cores rows side
# by side gain little, and under load F's 500 ms attempt timeout then fails cells (F times out
# before showing its fault). In a filtered run (bats -f) a row ahead also runs the next row.
ROW_ORDER=()
for _row in "${ROWS[@]}"; do ROW_ORDER+=("call $_row"); done
for _row in "${ROWS[@]}"; do ROW_ORDER+=("serve $_row"); done
unset _row

# Whether the "none" column of ROW (row_spec set) has no cell: lag and a lie need an honest peer
# to be seen, and with only a dead one there is nothing to compare.
none_na() { # ROW
  [[ $KIND == serve || $1 == lagging || $1 == lying_height ]]
}

# The rotation of this run's subset (setup_file fixes it once, so a run over midnight keeps it).
rotation() {
  local r
  read -r r <"$BATS_FILE_TMPDIR/rotate"
  echo "$r"
}

# Sets COLS (the columns of ROW through PATH that this pass runs, in table order) and OUT_COLS (the
# subset's strategy columns it leaves out). row_spec ROW must have been called.
row_columns() { # call|serve ROW
  local path=$1 row=$2 i k r s
  COLS=() OUT_COLS=()
  if [[ $COLUMNS_MODE == all ]]; then
    COLS=("${STRATEGIES[@]}")
  else
    for i in "${!ROWS[@]}"; do [[ ${ROWS[$i]} != "$row" ]] || break; done
    r=$(rotation)
    [[ $path != serve ]] || r=$((r + 3))
    declare -A take=()
    for ((k = 0; k < SUBSET && k < ${#STRATEGIES[@]}; k++)); do take[$(((2 * i + r + k) % ${#STRATEGIES[@]}))]=1; done
    for i in "${!STRATEGIES[@]}"; do
      s=${STRATEGIES[$i]}
      if [[ -n ${take[$i]:-} ]]; then COLS+=("$s"); else OUT_COLS+=("$s"); fi
    done
  fi
  none_na "$row" || COLS+=(none)
}

# Starts the cells of ROW through PATH (call or serve), all strategies and "none" at once, in the
# background, once: the row's folder $BATS_FILE_TMPDIR/rows/PATH.ROW says it was started. The cells
# outlive the test that starts them, so they live in the file's folder and each writes its exit
# status to COL/rc when done.
row_launch() { # call|serve ROW
  local path=$1 row=$2 dir col cell
  dir=$BATS_FILE_TMPDIR/rows/$path.$row
  mkdir -p "$BATS_FILE_TMPDIR/rows"
  mkdir "$dir" 2>/dev/null || return 0
  row_spec "$row"
  row_prepare "$row"
  # Exclude rows through serve also check that F got none of the cells' requests: the count before
  # they start (row_test_excluded).
  if [[ $KIND == exclude && $path == serve ]]; then fm_balance_requests "f_$row" >"$dir/f_before"; fi
  ms_now
  echo "$MS" >"$dir/t0"
  mkdir -p "$dir/home" "$dir/profiles"
  row_columns "$path" "$row"
  echo "${COLS[*]}" >"$dir/columns"
  for col in "${COLS[@]}"; do
    cell=$dir/$col
    mkdir -p "$cell"
    : >"$cell/started"
    (
      # What e2e_setup gives a test, in the row's folder (the starting test's folder goes with it).
      export CELL=$cell HOME=$dir/home XDG_STATE_HOME=$dir/xdg-state XDG_CONFIG_HOME=$dir/xdg-config \
        RPCROUTE_STATE=$dir/state.json RPCROUTE_PROFILES=$dir/profiles
      set +e
      (
        set -e
        "${path}_cell" "$row" "$col"
      ) >"$cell/log" 2>&1
      echo $? >"$cell/rc.tmp"
      mv "$cell/rc.tmp" "$cell/rc"
    ) </dev/null >/dev/null 2>&1 3>&- &
  done
}

# Waits for the cells of ROW through PATH (started by row_launch), records each cell's result in
# matrix.tsv; fails (showing the failed cells' logs) when a cell failed.
row_finish() { # call|serve ROW
  local path=$1 row=$2 dir col cell cols=() failed=0 rc i t0 verdict
  dir=$BATS_FILE_TMPDIR/rows/$path.$row
  row_spec "$row"
  row_columns "$path" "$row"
  # The columns row_launch started (an earlier test may have started them).
  read -r -a cols <"$dir/columns"
  if none_na "$row"; then printf '%s\t%s\t%s\t%s\n' "$path" "$row" none "n/a" >>"$BATS_FILE_TMPDIR/matrix.tsv"; fi
  for col in "${OUT_COLS[@]}"; do
    printf '%s\t%s\t%s\t%s\n' "$path" "$row" "$col" "-" >>"$BATS_FILE_TMPDIR/matrix.tsv"
  done
  # No `wait`: the cells may be children of an earlier test's process. ctest's limit bounds a hang.
  for col in "${cols[@]}"; do
    while [[ ! -f $dir/$col/rc ]]; do nap 0.05; done
  done
  for i in "${!cols[@]}"; do
    col=${cols[$i]}
    cell=$dir/$col
    rc="?"
    read -r rc <"$cell/rc" || true
    verdict=pass
    if [[ $rc != 0 ]]; then
      failed=1
      verdict=FAIL
      printf -- '--- %s %s × %s (exit %s):\n%s\n' "$path" "$row" "$col" "$rc" "$(tail -c 4000 "$cell/log")" >&2
    fi
    printf '%s\t%s\t%s\t%s\n' "$path" "$row" "$col" "$verdict" >>"$BATS_FILE_TMPDIR/matrix.tsv"
  done
  read -r t0 <"$dir/t0"
  ms_now
  echo "# $path $row (${cols[*]}): $((MS - t0)) ms" >&3
  ((failed == 0))
}

# Runs ROW through PATH: starts it and the rows ahead of it (unless already started), then checks it.
row_test() { # call|serve ROW
  local i j
  for i in "${!ROW_ORDER[@]}"; do [[ ${ROW_ORDER[$i]} != "$1 $2" ]] || break; done
  for ((j = i; j <= i + ROWS_AHEAD && j < ${#ROW_ORDER[@]}; j++)); do
    # shellcheck disable=SC2086 # "PATH ROW"
    row_launch ${ROW_ORDER[$j]}
  done
  row_finish "$1" "$2"
}

# Exclude rows through serve also check that F got none of the cells' requests (the sidecar's probes
# only poll eth_blockNumber; `rpcroute probe` reads a balance, so through call F does get some).
row_test_excluded() { # call|serve ROW
  local before after
  row_test "$1" "$2"
  [[ $1 == serve ]] || return 0
  read -r before <"$BATS_FILE_TMPDIR/rows/$1.$2/f_before"
  after=$(fm_balance_requests "f_$2")
  [[ $before =~ ^[0-9]+$ ]] || { echo "no count of F's requests before the row" >&2; return 1; }
  assert_equal "$after" "$before" "eth_getBalance requests that reached F"
}

@test "call: dead port" { row_test call dead_port; }
@test "call: connection reset" { row_test call reset; }
@test "call: connection closed without an answer" { row_test call close; }
@test "call: hang" { row_test call hang; }
@test "call: slow, over the attempt timeout" { row_test call slow_over; }
@test "call: slow body (dripped), over the attempt timeout" { row_test call slow_body; }
@test "call: slow, under the attempt timeout" { row_test call slow_under; }
@test "call: slow body (dripped), under the attempt timeout" { row_test call slow_body_under; }
@test "call: HTTP 503" { row_test call http_503; }
@test "call: HTTP 502 with an HTML body" { row_test call http_502_html; }
@test "call: HTTP 200 with an HTML page" { row_test call html_200; }
@test "call: JSON-RPC -32603 internal error" { row_test call rpc_32603; }
@test "call: malformed JSON" { row_test call malformed; }
@test "call: truncated body" { row_test call truncated; }
@test "call: wrong id" { row_test call wrong_id; }
@test "call: huge response (5 MiB)" { row_test call huge; }
@test "call: HTTP 429 with Retry-After: 20" { row_test call http_429_retry_after; }
@test "call: HTTP 429 with Retry-After as an HTTP date" { row_test call http_429_date; }
@test "call: HTTP 429 without Retry-After" { row_test call http_429_plain; }
@test "call: JSON-RPC -32005 limit exceeded" { row_test call rpc_32005; }
@test "call: JSON-RPC -32005 with backoff_seconds in its data" { row_test call rpc_backoff; }
@test "call: JSON-RPC 429 compute units" { row_test call rpc_compute_units; }
@test "call: a 200 KB error message" { row_test call rpc_huge_message; }
@test "call: control characters in an error message" { row_test call rpc_control_chars; }
@test "call: lagging height (seen by rpcroute probe)" { row_test_excluded call lagging; }
@test "call: lying height (seen by rpcroute probe)" { row_test_excluded call lying_height; }
@test "call: wrong chain id (seen by rpcroute probe)" { row_test_excluded call wrong_chain; }
@test "call: endless chunked body" { row_test call endless_chunked; }
@test "call: endless body under a 1 TiB Content-Length" { row_test call endless_length; }
@test "call: gzip bomb" { row_test call gzip_bomb; }
@test "call: extra answer glued to the real one" { row_test call extra_glued; }
@test "call: extra answer later on the idle connection" { row_test call extra_late; }

@test "serve: dead port" { row_test serve dead_port; }
@test "serve: connection reset" { row_test serve reset; }
@test "serve: connection closed without an answer" { row_test serve close; }
@test "serve: hang" { row_test serve hang; }
@test "serve: slow, over the attempt timeout" { row_test serve slow_over; }
@test "serve: slow body (dripped), over the attempt timeout" { row_test serve slow_body; }
@test "serve: slow, under the attempt timeout" { row_test serve slow_under; }
@test "serve: slow body (dripped), under the attempt timeout" { row_test serve slow_body_under; }
@test "serve: HTTP 503" { row_test serve http_503; }
@test "serve: HTTP 502 with an HTML body" { row_test serve http_502_html; }
@test "serve: HTTP 200 with an HTML page" { row_test serve html_200; }
@test "serve: JSON-RPC -32603 internal error" { row_test serve rpc_32603; }
@test "serve: malformed JSON" { row_test serve malformed; }
@test "serve: truncated body" { row_test serve truncated; }
@test "serve: wrong id" { row_test serve wrong_id; }
@test "serve: huge response (5 MiB)" { row_test serve huge; }
@test "serve: HTTP 429 with Retry-After: 20" { row_test serve http_429_retry_after; }
@test "serve: HTTP 429 with Retry-After as an HTTP date" { row_test serve http_429_date; }
@test "serve: HTTP 429 without Retry-After" { row_test serve http_429_plain; }
@test "serve: JSON-RPC -32005 limit exceeded" { row_test serve rpc_32005; }
@test "serve: JSON-RPC -32005 with backoff_seconds in its data" { row_test serve rpc_backoff; }
@test "serve: JSON-RPC 429 compute units" { row_test serve rpc_compute_units; }
@test "serve: a 200 KB error message" { row_test serve rpc_huge_message; }
@test "serve: control characters in an error message" { row_test serve rpc_control_chars; }
@test "serve: lagging height (seen by the sidecar's probes)" { row_test_excluded serve lagging; }
@test "serve: lying height (seen by the sidecar's probes)" { row_test_excluded serve lying_height; }
@test "serve: wrong chain id (seen by the sidecar's probes)" { row_test_excluded serve wrong_chain; }
@test "serve: endless chunked body" { row_test serve endless_chunked; }
@test "serve: endless body under a 1 TiB Content-Length" { row_test serve endless_length; }
@test "serve: gzip bomb" { row_test serve gzip_bomb; }
@test "serve: extra answer glued to the real one" { row_test serve extra_glued; }
@test "serve: extra answer later on the idle connection" { row_test serve extra_late; }

# ---------------------------------------------------------------------------------------------------
# Persistent lag trips the breaker (DESIGN.md section 8: lag_trip_ms, default 30 s)

@test "serve: a provider lagging for longer than lag_trip_ms has its breaker tripped" {
  # The probing sidecar has watched f_lagging 10 blocks behind since setup_file. The trip comes
  # lag_trip_ms (30 s) after its first poll judged the lag; allow up to 120 s for a slow machine.
  local started text state=""
  read -r started <"$BATS_FILE_TMPDIR/sidecars_started_s"
  # Checked at least once, however late this row runs in the file.
  while :; do
    if ((EPOCHSECONDS >= started + 30)); then
      port_of sc_probe
      text=$(curl -sf --max-time 10 "http://127.0.0.1:$PORT/metrics") || text=""
      state=$(awk 'index($0, "rpcroute_breaker_state{") == 1 && index($0, "profile=\"lagging_priority\"") && index($0, "provider=\"F\"") { print $NF }' <<<"$text")
      [[ $state == 2 ]] && break
    fi
    ((EPOCHSECONDS < started + 120)) || break
    nap 1
  done
  assert_equal "$state" 2 "F's breaker state (2: open) after lagging beyond lag_trip_ms"
}

# ---------------------------------------------------------------------------------------------------
# The table

@test "the matrix: every cell passed (table in the log)" {
  local tsv=$BATS_FILE_TMPDIR/matrix.tsv out=$BATS_FILE_TMPDIR/fault_matrix.txt path row col v line cell
  declare -A result=()
  while IFS=$'\t' read -r path row col v; do result[$path/$row/$col]=$v; done <"$tsv"
  local pass=0 fail=0 out_of_pass=0 na=0 missing=0
  for v in "${result[@]}"; do
    case $v in pass) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; -) out_of_pass=$((out_of_pass + 1)) ;; *) na=$((na + 1)) ;; esac
  done
  {
    for path in call serve; do
      echo "fault matrix: rpcroute $path (rows: fault kinds; columns: strategies; none: no healthy provider)"
      printf -v line '%-21s' fault
      for col in "${STRATEGIES[@]}" none; do
        printf -v cell ' %-16s' "$col"
        line+=$cell
      done
      echo "$line"
      for row in "${ROWS[@]}"; do
        printf -v line '%-21s' "$row"
        for col in "${STRATEGIES[@]}" none; do
          printf -v cell ' %-16s' "${result[$path/$row/$col]:-not run}"
          line+=$cell
        done
        echo "$line"
      done
      echo
    done
    echo "cells: $pass pass, $fail FAIL, $na n/a, $out_of_pass not in this pass (FAULT_MATRIX_COLUMNS=$COLUMNS_MODE, rotation $(rotation))"
  } >"$out"
  while IFS= read -r line; do echo "# $line" >&3; done <"$out"
  [[ -z ${FAULT_MATRIX_OUT:-} ]] || cp "$out" "$FAULT_MATRIX_OUT"
  # A row whose test did not run (a filtered run, bats -f) leaves its cells "not run".
  for path in call serve; do
    for row in "${ROWS[@]}"; do
      for col in "${STRATEGIES[@]}" none; do [[ -n ${result[$path/$row/$col]:-} ]] || missing=$((missing + 1)); done
    done
  done
  ((missing == 0)) || echo "# $missing cell(s) not run" >&3
  ((fail == 0))
}
