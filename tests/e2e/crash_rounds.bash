#!/usr/bin/env bash
# The kill -9 rounds of crash_state.bats, as a plain bash script: bats traces every command of a
# test (its DEBUG trap), which makes a loop of a few thousand commands take minutes on a busy
# machine. Run by the test with the helpers' environment (see crash_state.bats); exits 0 when every
# check held, else 1 with what failed on stderr. Prints a summary on stdout.
#
# Environment: RPCROUTE_BIN, P (profile with providers c1..cK and s1 on one fake upstream), S (state
# file, holding one c1 sample), WORK (a folder for its files), K, ROUNDS, and BATS_TEST_DIRNAME /
# BATS_TEST_TMPDIR so helpers.bash and sidecar_helpers.bash can be sourced.
#
# Each round starts K `rpcroute call --provider cJ` at once; each is SIGKILLed with probability 1/2
# at a random moment within the time a call takes to finish (a moving average over the calls that
# exited 0, measured from its start to its exit, so a kill's own delay never feeds it), so some land
# in the middle of the final state write (a journal append, or a compaction when the journal is
# full). Every fifth round, c1's call is killed mid-append for certain (RPCROUTE_TEST_STATE_CRASH:
# half a record written, then SIGKILL). Then, read as every reader reads it (`state show`:
# snapshot + journal):
#   - the snapshot is valid JSON with "version": 1;
#   - every call that exited 0 has its sample: one on cJ timestamped between its start and its exit;
#   - cJ holds no more samples than calls made on it (nothing applied twice), and no fewer than
#     calls that finished;
#   - nothing was ever moved aside as unusable (no torn file was seen by a reader).
# Meanwhile a sidecar serves traffic (about 7 requests a second, each adding a sample on s1); its
# flushes compact snapshot + journal. It is ended, a few seconds into its life, one of four ways,
# then replaced:
#   0: SIGKILL around its first periodic flush (5 s after start);
#   1: SIGTERM, then SIGKILL 0-40 ms later (during its shutdown flush, or just after its exit);
#   2: SIGTERM alone;
#   3: SIGKILL by RPCROUTE_TEST_STATE_CRASH at its first flush, between the new snapshot's rename
#      and the old journal's removal (the journal left behind must never be applied again).
# A sidecar that exited 0 must have flushed one s1 sample per request it answered.

set -uo pipefail
# shellcheck disable=SC2317 # helpers.bash calls it (bats defines it)
bats_require_minimum_version() { :; }
# shellcheck source=tests/e2e/helpers.bash
source "$BATS_TEST_DIRNAME/helpers.bash"
# shellcheck source=tests/e2e/sidecar_helpers.bash
source "$BATS_TEST_DIRNAME/sidecar_helpers.bash"

fail() {
  echo "$*" >&2
  exit 1
}

# The hot loop forks as little as it can (a fork costs 100+ ms on a loaded machine): time from
# $EPOCHREALTIME, random numbers and sleeps without subshells or external commands.
now() { # VAR: milliseconds since the epoch
  local now_us=${EPOCHREALTIME/[.,]/}
  printf -v "$1" '%d' $((now_us / 1000))
}
rand_between() { # VAR LO HI
  printf -v "$1" '%d' $(($2 + (RANDOM * 32768 + RANDOM) % ($3 - $2 + 1)))
}
exec {SLEEP_FD}<> <(:)
nap_ms() { # MS: sleep without running sleep(1)
  local nap_s
  printf -v nap_s '%d.%03d' $(($1 / 1000)) $(($1 % 1000))
  read -r -t "$nap_s" -u "$SLEEP_FD" _ || true
}

BG_PIDS=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local pid
  for pid in ${BG_PIDS[@]+"${BG_PIDS[@]}"}; do kill "$pid" 2>/dev/null || true; done
  [[ -z ${SC_PID:-} ]] || kill -9 "$SC_PID" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 1' INT TERM # (timeout sends TERM): still stop the background loops and the sidecar

# ---------------------------------------------------------------------------------------------------
# The sidecar's lives

gen=0 gen_start=0 t_begin=0 t_end=0 gen_ok="" gen_stop="" gen_rc="" gen_mode=0 sc_name="" traffic_pid=""
sc_killed=0 sc_clean=0 sc_term_then_kill_exit0=0 sc_samples_checked=0 sc_hooked=0

# The state as every reader sees it: snapshot + journal.
merged_state() { "$RPCROUTE_BIN" state show --json --state "$S"; }

# POST eth_blockNumber to provider s1 through the sidecar at URL about every 0.1 s; one "ok" line in
# OK_FILE per answer with a result; until STOP_FILE exists.
start_traffic() { # URL OK_FILE STOP_FILE
  local url=$1 ok=$2 stop=$3
  (
    body='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
    answer=$ok.answer
    while [[ ! -e $stop ]]; do
      : >"$answer"
      curl -s --max-time 10 -o "$answer" -X POST -H 'content-type: application/json' --data "$body" \
        "$url/rpc/provider/s1/local" 2>/dev/null
      line=""
      read -r line <"$answer" || true
      [[ $line != *'"result"'* ]] || echo ok >>"$ok"
      nap_ms 100
    done
  ) &
  traffic_pid=$!
  BG_PIDS+=("$traffic_pid")
}

new_generation() {
  gen=$((gen + 1))
  sc_name=sc$gen
  gen_mode=$((gen % 4))
  gen_ok=$WORK/gen$gen.ok
  gen_stop=$WORK/gen$gen.stop
  : >"$gen_ok"
  now gen_start
  local crash=""
  ((gen_mode != 3)) || crash=compact-renamed
  RPCROUTE_TEST_STATE_CRASH=$crash sidecar_start "$sc_name" -p "$P" --state "$S" --no-probe ||
    fail "sidecar $gen did not start"
  gen_rc=$SC_RC_FILE
  start_traffic "$SC_URL" "$gen_ok" "$gen_stop"
  local delay after pid=$SC_PID
  case $gen_mode in
    0) rand_between delay 4850 5200 ;;
    3) delay=30000 ;; # it kills itself at its first flush
    *) rand_between delay 800 6000 ;;
  esac
  rand_between after 0 40
  case $gen_mode in
    0) (nap_ms "$delay"; kill -9 "$pid" 2>/dev/null) & ;;
    1) (nap_ms "$delay"; kill -TERM "$pid" 2>/dev/null; nap_ms "$after"; kill -9 "$pid" 2>/dev/null) & ;;
    *) (nap_ms "$delay"; kill -TERM "$pid" 2>/dev/null) & ;;
  esac
  BG_PIDS+=("$!")
}

# When the current sidecar has exited (or, with "stop", after a SIGTERM): stop its traffic, check
# it, and (without "stop") start the next one.
end_generation_if_over() { # [stop]
  local stop=${1:-}
  [[ -n $stop || -s $gen_rc ]] || return 0
  sidecar_load "$sc_name"
  [[ -z $stop ]] || kill -TERM "$SC_PID" 2>/dev/null || true
  sidecar_wait "$sc_name" 30 || fail "sidecar $gen did not exit"
  touch "$gen_stop"
  wait "$traffic_pid" 2>/dev/null || true
  case $SC_EXIT in
    137)
      sc_killed=$((sc_killed + 1))
      ((gen_mode != 3)) || sc_hooked=$((sc_hooked + 1))
      ;;
    0)
      sc_clean=$((sc_clean + 1))
      ((gen_mode != 1)) || sc_term_then_kill_exit0=$((sc_term_then_kill_exit0 + 1))
      local answered have
      answered=$(wc -l <"$gen_ok")
      have=$(merged_state | jq --argjson t "$gen_start" \
        '[.providers[] | select(.provider == "s1") | .methods.eth_blockNumber.samples[]? | select(.[0] >= $t)] | length')
      if ((have != answered)); then
        cat "$SC_LOG" >&2
        fail "sidecar $gen (mode $gen_mode) exited 0 after answering $answered requests; the state file has $have of its samples"
      fi
      sc_samples_checked=$((sc_samples_checked + answered))
      ;;
    *)
      cat "$SC_LOG" >&2
      fail "sidecar $gen (mode $gen_mode) exited $SC_EXIT"
      ;;
  esac
  ((gen_mode != 3 || SC_EXIT == 137)) || fail "sidecar $gen (mode 3) was not killed at its flush (exit $SC_EXIT)"
  if grep -qi 'warning' "$SC_LOG"; then
    cat "$SC_LOG" >&2
    fail "sidecar $gen warned"
  fi
  [[ -n $stop ]] || new_generation
}

# ---------------------------------------------------------------------------------------------------
# The rounds

window=300 # ms; a moving average of how long a call that finishes takes
started=0 finished=0 killed=0 torn_appends=0
started_of=() finished_of=() # per provider cJ, by J
for ((j = 1; j <= K; j++)); do started_of[j]=0 finished_of[j]=0; done
started_of[1]=1 finished_of[1]=1 # the sample S starts with
t=0 t_begin=0 t_end=0
now t_begin

new_generation
for r in $(seq "$ROUNDS"); do
  pids=() starts=() killers=() windows=""
  for ((j = 1; j <= K; j++)); do
    now "starts[j]"
    crash=""
    ((j != 1 || r % 5 != 0)) || crash=append
    RPCROUTE_TEST_STATE_CRASH=$crash "$RPCROUTE_BIN" call -p "$P" --state "$S" --provider "c$j" eth_blockNumber >"$WORK/out.$j" 2>"$WORK/err.$j" &
    pids[j]=$!
    if [[ -n $crash ]]; then
      torn_appends=$((torn_appends + 1))
    elif ((RANDOM % 2)); then
      rand_between delay 0 "$window"
      (nap_ms "$delay"; kill -9 "${pids[j]}" 2>/dev/null) &
      killers+=("$!")
    fi
  done
  for ((j = 1; j <= K; j++)); do
    status=0
    wait "${pids[j]}" 2>/dev/null || status=$?
    started=$((started + 1))
    started_of[j]=$((started_of[j] + 1))
    case $status in
      0)
        finished=$((finished + 1))
        finished_of[j]=$((finished_of[j] + 1))
        now t
        windows+="${windows:+,}{\"p\":\"c$j\",\"a\":${starts[j]},\"b\":$t}"
        window=$(((window * 7 + t - starts[j]) / 8))
        out=""
        read -r out <"$WORK/out.$j" || true
        if [[ $out != '"0x64"' || -s $WORK/err.$j ]]; then
          cat "$WORK/out.$j" "$WORK/err.$j" >&2
          fail "round $r: call c$j exited 0 but printed the above"
        fi
        ;;
      137) killed=$((killed + 1)) ;;
      *)
        cat "$WORK/err.$j" >&2
        fail "round $r: call c$j exited $status"
        ;;
    esac
  done
  ((${#killers[@]} == 0)) || wait "${killers[@]}" 2>/dev/null

  counts=""
  for ((j = 1; j <= K; j++)); do counts+="${counts:+,}{\"p\":\"c$j\",\"lo\":${finished_of[j]},\"hi\":${started_of[j]}}"; done
  jq -e '.version == 1' "$S" >/dev/null 2>&1 || { head -c 4000 "$S" >&2; fail "round $r: the snapshot is not a version-1 state"; }
  if ! merged_state >"$WORK/state.json" 2>"$WORK/state.err" || [[ -s $WORK/state.err ]] ||
    ! jq -e --argjson w "[$windows]" --argjson n "[$counts]" '
      def samples($p): [.providers[] | select(.provider == $p) | .methods.eth_blockNumber.samples[]?];
      .version == 1
      and ([$w[] as $x | samples($x.p) | any(.[0] >= $x.a and .[0] <= $x.b)] | all)
      and ([$n[] as $x | samples($x.p) | length | . >= $x.lo and . <= $x.hi] | all)' "$WORK/state.json" >/dev/null 2>&1; then
    cat "$WORK/state.err" >&2
    head -c 4000 "$WORK/state.json" >&2
    fail "round $r: the state fails the check (finished calls [$windows], sample bounds [$counts])"
  fi
  corrupt=("$S".corrupt-*)
  if [[ -e ${corrupt[0]} ]]; then
    ls -la "$(dirname "$S")" >&2
    fail "round $r: a state file was moved aside as unusable"
  fi
  end_generation_if_over
done
end_generation_if_over stop
now t_end

# Kills that landed between the temporary file's creation and its rename leave it behind.
torn_tmp=$(compgen -G "$S.tmp.*" | wc -l)
echo "rounds: $ROUNDS in $(((t_end - t_begin) / 1000)) s, $K concurrent calls each, kills spread over the ~${window} ms a call takes"
echo "calls: $started started, $finished exited 0 (each one's sample found), $killed killed by SIGKILL"
echo "kills inside a state write (temporary file left behind): $torn_tmp; calls killed mid-append for certain: $torn_appends"
echo "sidecars: $gen lives under traffic; $sc_killed ended by SIGKILL ($sc_hooked between a compaction's rename and the journal's removal), $sc_clean exited 0 ($sc_term_then_kill_exit0 of them before a SIGKILL sent 0-40 ms after SIGTERM); $sc_samples_checked samples of theirs checked"
# About K/2 kills a round are sent, about half of them before the call ends; ask for a quarter of
# the rounds, so only kills that stopped landing at all (not a slow machine) fail the test.
((killed - torn_appends >= ROUNDS / 4)) || fail "only $((killed - torn_appends)) calls were killed at random: the kills came too late"
((sc_killed >= 1 && sc_clean >= 1)) || fail "sidecar outcomes: $sc_killed killed, $sc_clean exited 0; want both"
((gen < 4 || sc_hooked >= 1)) || fail "no sidecar was killed between a compaction's rename and the journal's removal"
exit 0
