#!/usr/bin/env bats
# Crash-safe state (issue 6, DESIGN.md section 9; the journal of issue 17): `rpcroute call`
# processes and the sidecar are killed with SIGKILL at random moments while they write the state
# file or append to its journal; after every round the snapshot is valid JSON of the current
# version, and snapshot + journal (as `state show` reads them) hold every sample of every process
# that exited normally, once. Kills at each point of a write (mid-append, before and after a
# compaction's rename) are made certain with RPCROUTE_TEST_STATE_CRASH. 64 concurrent appenders and
# a compacting sidecar lose nothing and apply nothing twice. Damaged state files (corrupt,
# truncated, empty, wrong version, unreadable) are moved aside with a warning naming where they
# went, the command still succeeds, and a fresh valid file is written; a bad entry in a valid file
# is dropped, not the file; a folder at the state path is refused, never moved.
#
# Samples are counted per process: each concurrent caller of a round uses its own provider (--provider
# cJ, all pointing at the same fake upstream) and adds one eth_blockNumber sample whose timestamp
# lies between its start and its exit; a provider gets at most one sample per round, so after 100
# rounds it holds at most 101, under the cap of 128 per method (state.hpp kMaxSamplesPerMethod) —
# nothing is evicted, and a missing sample is a lost one. The sidecar's samples go to provider s1;
# one sidecar's life is a few seconds at about 7 requests a second, also under the cap.

# jq programs are single-quoted on purpose; each test runs in its own subshell.
# shellcheck disable=SC2016,SC2154,SC2030,SC2031,SC2153

load helpers
load sidecar_helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
}

setup() {
  e2e_setup
  S=$RPCROUTE_STATE
  start_fake f1 --height 100
}

teardown() {
  stop_all
  if [[ -n ${NOBODY_DIR:-} && -d $NOBODY_DIR ]]; then
    chmod -R u+rwx "$NOBODY_DIR" 2>/dev/null || true
    rm -rf "$NOBODY_DIR"
  fi
}

# A profile with providers ID... on f1 (the priority strategy; nothing else differs between them).
slot_profile() { # FILE ID...
  local file=$1 url id
  shift
  url=$(node_url f1)
  {
    printf 'name: crash\nchains:\n  local:\n    chain_id: 31337\n    block_time_ms: 1000\n    providers:\n'
    for id in "$@"; do printf '      - id: %s\n        url: %s\n' "$id" "$url"; done
    printf 'routing:\n  default_strategy: priority\n'
  } >"$file"
}

# ---------------------------------------------------------------------------------------------------
# kill -9

@test "100 rounds of kill -9 on concurrent rpcroute call processes and on a sidecar under traffic: the state file stays valid and keeps every finished process's samples" {
  local K=4 j slots=()
  for j in $(seq "$K"); do slots+=("c$j"); done
  slot_profile "$P" "${slots[@]}" s1
  # A first sample, so the file exists from round 1 on.
  rpcroute call -p "$P" --provider c1 eth_blockNumber >/dev/null
  jq -e '.version == 1' "$S" >/dev/null
  mkdir -p "$BATS_TEST_TMPDIR/rounds"
  # The rounds run as a plain script (see crash_rounds.bash for what each checks).
  run --separate-stderr env K="$K" ROUNDS="${CRASH_ROUNDS:-100}" P="$P" S="$S" WORK="$BATS_TEST_TMPDIR/rounds" \
    BATS_TEST_DIRNAME="$BATS_TEST_DIRNAME" BATS_TEST_TMPDIR="$BATS_TEST_TMPDIR" \
    timeout 600 bash "$BATS_TEST_DIRNAME/crash_rounds.bash"
  printf '# %s\n' "${lines[@]}" >&3
  assert_status 0
}

# ---------------------------------------------------------------------------------------------------
# Many writers

# Samples of provider ID's eth_blockNumber in the state (snapshot + journal) at or after T (ms).
samples_since() { # ID T
  rpcroute state show --json --state "$S" |
    jq --arg p "$1" --argjson t "$2" '[.providers[] | select(.provider == $p) | .methods.eth_blockNumber.samples[]? | select(.[0] >= $t)] | length'
}

@test "64 concurrent appenders and a compacting sidecar lose nothing and apply nothing twice; 64 round-robin advances" {
  local N=64 i ids=()
  for i in $(seq -w 1 "$N"); do ids+=("w$i"); done
  slot_profile "$P" "${ids[@]}" s1
  # Some history first on a few of them, so writers merge with existing content.
  for i in 01 02 03; do rpcroute call -p "$P" --provider "w$i" eth_blockNumber >/dev/null; done

  # A sidecar under traffic (each answer a sample on s1), told to flush (a full compaction of
  # snapshot + journal) every 50 ms while the writers append.
  sidecar_start sc -p "$P" --state "$S" --no-probe
  local stop=$BATS_TEST_TMPDIR/stop ok=$BATS_TEST_TMPDIR/sidecar.ok sc_t0 loops=() inode
  inode=$(stat -c %i "$S")
  sc_t0=$(now_ms)
  : >"$ok"
  (
    while [[ ! -e $stop ]]; do
      curl -s --max-time 10 -X POST -H 'content-type: application/json' \
        --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' \
        "$SC_URL/rpc/provider/s1/local" | grep -q '"result"' && echo ok >>"$ok"
    done
  ) &
  loops+=("$!")
  (while [[ ! -e $stop ]]; do kill -USR1 "$SC_PID" 2>/dev/null; sleep 0.05; done) &
  loops+=("$!")

  # 64 writers, each on its own provider.
  local pids=() starts=() failed=0
  for i in $(seq -w 1 "$N"); do
    starts+=("$(now_ms)")
    "$RPCROUTE_BIN" call -p "$P" --provider "w$i" eth_blockNumber >"$BATS_TEST_TMPDIR/out.$i" 2>"$BATS_TEST_TMPDIR/err.$i" &
    pids+=("$!")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { failed=$((failed + 1)); cat "$BATS_TEST_TMPDIR/err.$(printf %02d $((i + 1)))" >&2; }
  done
  local end
  end=$(now_ms)
  # The sidecar replaced the snapshot (a compaction) while the writers appended.
  [[ $(stat -c %i "$S") != "$inode" ]] || { echo "no compaction while the writers ran" >&2; false; }
  touch "$stop"
  wait "${loops[@]}" 2>/dev/null || true
  sidecar_stop sc
  assert_equal "$SC_EXIT" 0 "sidecar exit"
  assert_equal "$failed" 0 "failed writers"
  cat "$BATS_TEST_TMPDIR"/err.* >&2
  [[ -z $(cat "$BATS_TEST_TMPDIR"/err.*) ]] || { echo "writers warned" >&2; false; }
  echo "# sidecar: $(wc -l <"$ok") answers, $(grep -c 'state saved' "$SC_LOG") flushes on SIGUSR1 while the writers ran" >&3
  # The sidecar's samples: exactly one per answer.
  assert_equal "$(samples_since s1 "$sc_t0")" "$(wc -l <"$ok")" "sidecar samples vs answers"
  # Per writer: exactly one new sample on its provider, inside its run (two for the three with history).
  local report
  report=$(rpcroute state show --json --state "$S" | jq -c --argjson t0 "${starts[0]}" --argjson t1 "$end" '
    [.providers[] | select(.provider | startswith("w")) | {p: .provider,
      n: (.methods.eth_blockNumber.samples | length),
      new: ([.methods.eth_blockNumber.samples[] | select(.[0] >= $t0 and .[0] <= $t1)] | length)}]
    | sort_by(.p)')
  assert_json "$report" "length == $N"
  assert_json "$report" 'all(.new == 1)'
  assert_json "$report" 'all(if .p | IN("w01", "w02", "w03") then .n == 2 else .n == 1 end)'

  # 64 round-robin writers: the cursor advances by 64, and each provider has as many new samples as
  # writers that say (--json) they used it.
  local cursor_before
  cursor_before=$(rpcroute state show --json --state "$S" |
    jq '[.chains | to_entries[] | select(.key | startswith("profile/local#")) | .value.rr_cursor][0] // 0')
  pids=()
  local t_rr
  t_rr=$(now_ms)
  for i in $(seq -w 1 "$N"); do
    "$RPCROUTE_BIN" call -p "$P" --strategy round_robin --json eth_blockNumber >"$BATS_TEST_TMPDIR/rr.$i" 2>"$BATS_TEST_TMPDIR/rrerr.$i" &
    pids+=("$!")
  done
  failed=0
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed=$((failed + 1)); done
  assert_equal "$failed" 0 "failed round-robin writers"
  local used have state
  state=$(rpcroute state show --json --state "$S")
  used=$(cat "$BATS_TEST_TMPDIR"/rr.* | jq -s -c 'map(.meta.provider) | group_by(.) | map({key: .[0], value: length}) | from_entries')
  have=$(jq -c --argjson t "$t_rr" '[.providers[] | {key: .provider, value: ([.methods.eth_blockNumber.samples[]? | select(.[0] >= $t)] | length)}
    | select(.value > 0)] | from_entries' <<<"$state")
  assert_equal "$have" "$used" "new samples per provider vs providers the writers used"
  assert_equal "$(jq '[.chains | to_entries[] | select(.key | startswith("profile/local#")) | .value.rr_cursor][0]' <<<"$state")" $((cursor_before + N)) "round-robin cursor"
  jq -e '.version == 1' "$S" >/dev/null
  assert_equal "$(stat -c %a "$S.journal")" 600 "mode of the journal"
  local leftovers
  leftovers=$(find "$(dirname "$S")" -maxdepth 1 -name 'state.json?*' ! -name '*.lock' ! -name '*.journal' | wc -l)
  assert_equal "$leftovers" 0 "files left next to the state file"
}

# ---------------------------------------------------------------------------------------------------
# Kills at each point of a state write

# Total samples in the state (snapshot + journal), as every reader sees it.
total_samples() {
  rpcroute state show --json --state "$S" | jq '[.providers[]?.methods[]?.samples | length] | add // 0'
}

@test "kill -9 mid-append and on both sides of a compaction's rename: nothing torn, nothing applied twice" {
  slot_profile "$P" c1
  local i n
  for i in 1 2 3; do rpcroute call -p "$P" --provider c1 eth_blockNumber >/dev/null; done
  n=$(total_samples)
  assert_equal "$n" 3 "samples of three calls"

  # Mid-append: half a record written, then SIGKILL. The answer was out; the journal's tail is
  # torn. Readers ignore it, quietly; the next call cuts it and appends after the good records.
  local point
  for i in 1 2; do
    run --separate-stderr env RPCROUTE_TEST_STATE_CRASH=append "$RPCROUTE_BIN" call -p "$P" --provider c1 eth_blockNumber
    assert_status 137
    assert_equal "$output" '"0x64"' "answer of the call killed mid-append"
  done
  run --separate-stderr rpcroute state show --json --state "$S"
  assert_status 0
  assert_stderr_lines 0
  assert_equal "$(total_samples)" "$n" "samples after two kills mid-append"
  rpcroute call -p "$P" --provider c1 eth_blockNumber >/dev/null
  n=$((n + 1))
  assert_equal "$(total_samples)" "$n" "samples after the next call"

  # A compaction (bench rewrites the snapshot) killed before its rename: nothing of it counts, a
  # temporary file stays until the next compaction. Killed after the rename: all of it counts,
  # once, though the old journal was not removed.
  run --separate-stderr rpcroute bench -p "$P" --state "$S" --requests 2 --methods eth_blockNumber
  assert_status 0
  local per_bench=$(($(total_samples) - n))
  ((per_bench > 0)) || { echo "bench added no samples" >&2; false; }
  n=$((n + per_bench))
  rpcroute call -p "$P" --provider c1 eth_blockNumber >/dev/null
  n=$((n + 1))
  for point in compact-tmp compact-renamed; do
    run --separate-stderr env RPCROUTE_TEST_STATE_CRASH=$point "$RPCROUTE_BIN" bench -p "$P" --state "$S" --requests 2 --methods eth_blockNumber
    assert_status 137
    [[ $point == compact-tmp ]] || n=$((n + per_bench))
    run --separate-stderr rpcroute state show --json --state "$S"
    assert_status 0
    assert_stderr_lines 0
    assert_equal "$(total_samples)" "$n" "samples after a kill at $point"
    jq -e '.version == 1' "$S" >/dev/null
    # Calls after it append (restarting a stale journal) and count once each.
    for i in 1 2; do rpcroute call -p "$P" --provider c1 eth_blockNumber >/dev/null; done
    n=$((n + 2))
    assert_equal "$(total_samples)" "$n" "samples after two calls following the kill at $point"
  done
  [[ -e $S.journal ]] || { echo "no journal after the calls" >&2; false; }
  # A clean compaction takes it all, once, and removes the temporary file the kill left.
  run --separate-stderr rpcroute bench -p "$P" --state "$S" --requests 2 --methods eth_blockNumber
  assert_status 0
  n=$((n + per_bench))
  assert_equal "$(total_samples)" "$n" "samples after a clean compaction"
  assert_equal "$(jq '[.providers[]?.methods[]?.samples | length] | add' "$S")" "$n" "samples in the snapshot itself"
  [[ ! -e $S.journal ]] || { echo "the journal was not removed by the compaction" >&2; false; }
  if compgen -G "$S.tmp.*" >/dev/null || compgen -G "$S.corrupt-*" >/dev/null; then
    ls -la "$(dirname "$S")" >&2
    false
  fi
  assert_equal "$(stat -c %a "$S")" 600 "mode of the snapshot"
}

# ---------------------------------------------------------------------------------------------------
# Damaged state files (state.bats covers '{not json' and version 99 through call; these are the rest)

# Prepares $S in a folder of its own with the bytes of FILE (or leaves what the caller put there).
damage() { # FILE
  mkdir -p "$BATS_TEST_TMPDIR/st"
  export RPCROUTE_STATE=$BATS_TEST_TMPDIR/st/state.json
  S=$RPCROUTE_STATE
  rm -rf "$BATS_TEST_TMPDIR/st/"*
  [[ -z ${1:-} ]] || cp "$1" "$S"
}

# After a run on a damaged $S: exit 0, one warning line on stderr naming where the file went, and
# that path holds the original (same bytes as ORIGINAL, or a folder when ORIGINAL is "dir").
# Sets MOVED to that path.
assert_moved_aside() { # WHAT ORIGINAL
  local what=$1 original=$2
  assert_status 0 || { echo "($what)" >&2; return 1; }
  if [[ ${#stderr_lines[@]} != 1 || $stderr != *warning* || ! $stderr =~ moved\ it\ to\ ([^ ]+)\ and ]]; then
    echo "($what) expected one warning naming the moved file" >&2
    _dump_run
    return 1
  fi
  MOVED=${BASH_REMATCH[1]}
  [[ $MOVED == "$S".* ]] || { echo "($what) moved to $MOVED, not next to $S" >&2; return 1; }
  if [[ $original == dir ]]; then
    [[ -d $MOVED ]] || { echo "($what) $MOVED is not the folder that was in the way" >&2; ls -la "$(dirname "$S")" >&2; return 1; }
  else
    cmp -s "$original" "$MOVED" || { echo "($what) $MOVED does not hold the original bytes" >&2; ls -la "$(dirname "$S")" >&2; return 1; }
  fi
}

# $S is a fresh, valid state file of version 1, mode 0600, with N samples.
assert_fresh_state() { # WHAT N
  jq -e '.version == 1' "$S" >/dev/null 2>&1 || { echo "($1) no valid state file after the run" >&2; ls -la "$(dirname "$S")" >&2; return 1; }
  assert_equal "$(stat -c %a "$S")" 600 "($1) mode of the fresh state file"
  # The first call after the move writes a whole snapshot; later ones append to its journal (read
  # through `state show`, which runs as this user: the mode-000 case's folder is nobody's).
  local n
  if [[ -e $S.journal ]]; then n=$(total_samples); else n=$(jq '[.providers[]?.methods[]?.samples | length] | add // 0' "$S"); fi
  assert_equal "$n" "$2" "($1) samples in the fresh state"
}

@test "corrupt, truncated, empty, binary and wrong-version state files: moved aside with a warning naming where, call succeeds, fresh file" {
  slot_profile "$P" c1
  local cases=$BATS_TEST_TMPDIR/cases
  mkdir -p "$cases"
  # A real state file with some content, then damaged copies of it.
  local i
  for i in 1 2 3; do rpcroute call -p "$P" --provider c1 eth_blockNumber >/dev/null; done
  local size
  size=$(stat -c %s "$S")
  head -c $((size / 2)) "$S" >"$cases/truncated-half"
  local text
  text=$(<"$S") # without the final newline
  printf '%s' "${text%?}" >"$cases/truncated-last-brace"
  head -c 1 "$S" >"$cases/truncated-to-1-byte"
  : >"$cases/empty"
  printf '\n  \n' >"$cases/whitespace"
  head -c 4096 /dev/zero >"$cases/nul-bytes"
  head -c 4096 /dev/urandom >"$cases/random-bytes"
  { cat "$S"; printf 'garbage'; } >"$cases/trailing-garbage"
  printf '{"version": 1, "providers": [' >"$cases/unclosed"
  printf '{"version": 2, "providers": {}}' >"$cases/version-2"
  printf '{"version": 0, "providers": {}}' >"$cases/version-0"
  printf '{"version": -1}' >"$cases/version-negative"
  printf '{"version": "1", "providers": {}}' >"$cases/version-string"
  printf '{"version": null}' >"$cases/version-null"
  printf '{"providers": {}, "chains": {}}' >"$cases/no-version"
  printf '[]' >"$cases/array"
  printf 'null' >"$cases/null"
  printf '{"version": 1, "providers": []}' >"$cases/providers-array"
  local f name
  for f in "$cases"/*; do
    name=${f##*/}
    damage "$f"
    run --separate-stderr rpcroute call -p "$P" --provider c1 eth_blockNumber
    assert_moved_aside "$name" "$f"
    assert_equal "$output" '"0x64"' "($name) result"
    assert_fresh_state "$name" 1
    # Moved aside once: the next call is quiet and adds to the fresh file (checked for a few kinds).
    if [[ $name == @(empty|truncated-half|version-2|nul-bytes) ]]; then
      run --separate-stderr rpcroute call -p "$P" --provider c1 eth_blockNumber
      assert_status 0
      assert_stderr_lines 0
      assert_fresh_state "$name, second call" 2
    fi
    echo "# $name: moved to ${MOVED##*/}" >&3
  done
}

@test "a bad entry in a valid state file (not an object, a bad sample, bytes that are not UTF-8): dropped with a warning, the file kept" {
  slot_profile "$P" c1
  damage
  rpcroute call -p "$P" --provider c1 eth_blockNumber >/dev/null
  local cases=$BATS_TEST_TMPDIR/entry-cases ff=$'\xff' name f
  mkdir -p "$cases"
  jq -c '.providers.x = 42' "$S" >"$cases/provider-not-object"
  jq -c '.providers["a/b/c#1"] = {"methods": {"eth_blockNumber": {"samples": [["x"]]}}}' "$S" >"$cases/bad-sample"
  jq -c '.providers["a/b/c#1"] = {"methods": {"eth_getLogs": {"samples": [[1, 2, "success"]]}}}' "$S" |
    sed "s/eth_getLogs/eth_$ff/" >"$cases/not-utf8"
  for f in "$cases"/*; do
    name=${f##*/}
    cp "$f" "$S"
    rm -f "$S.journal" # the case stands for the whole state (its journal is the previous case's)
    run --separate-stderr rpcroute call -p "$P" --provider c1 eth_blockNumber
    assert_status 0
    assert_equal "$output" '"0x64"' "($name) result"
    assert_stderr_matches 'warning: .*dropped 1 unreadable entry'
    if compgen -G "$S.corrupt-*" >/dev/null; then echo "($name) moved aside" >&2; false; fi
    # The good entry's sample is kept, and the file is whole and clean again.
    jq -e '.version == 1' "$S" >/dev/null
    run --separate-stderr rpcroute call -p "$P" --provider c1 eth_blockNumber
    assert_stderr_lines 0
    assert_equal "$(rpcroute state show --json --state "$S" | jq '[.providers[] | select(.provider == "c1") | .methods.eth_blockNumber.samples | length] | add')" 3 \
      "($name) samples of c1"
  done
}

@test "a folder at the state path is refused (exit 2) and never moved" {
  slot_profile "$P" c1
  damage
  mkdir -p "$S/inside"
  run --separate-stderr rpcroute call -p "$P" --provider c1 eth_blockNumber
  assert_status 2
  assert_stderr_matches 'is a directory'
  [[ -d $S/inside ]] || { echo "the folder moved" >&2; ls -la "$(dirname "$S")" >&2; false; }
  if compgen -G "$S.corrupt-*" >/dev/null; then echo "the folder was renamed" >&2; false; fi
}

@test "unreadable state file (mode 000): moved aside with a warning, call succeeds, fresh file (as an unprivileged user)" {
  # Root reads a mode-000 file anyway, so as root the call runs as nobody (setpriv), with the state
  # folder and the profile in a folder nobody owns. As another user it runs as that user.
  slot_profile "$P" c1
  local as=() dir
  if ((EUID == 0)); then
    command -v setpriv >/dev/null || skip "root without setpriv: cannot make a file unreadable"
    id nobody >/dev/null 2>&1 || skip "no user 'nobody'"
    NOBODY_DIR=$(mktemp -d /tmp/rpcroute-e2e-nobody.XXXXXX)
    chmod 755 "$NOBODY_DIR"
    dir=$NOBODY_DIR
    as=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
  else
    dir=$BATS_TEST_TMPDIR/perm
  fi
  mkdir -p "$dir/st"
  cp "$P" "$dir/profile.yaml"
  S=$dir/st/state.json
  printf '{"version": 1, "providers": {}, "chains": {}, "filters": {}}' >"$S"
  cp "$S" "$BATS_TEST_TMPDIR/original"
  chmod 000 "$S"
  if ((EUID == 0)); then chown -R nobody "$dir"; fi
  # Unreadable for the user the call runs as.
  if "${as[@]}" cat "$S" >/dev/null 2>&1; then
    echo "the state file is still readable" >&2
    false
  fi
  run --separate-stderr timeout 60 "${as[@]}" env HOME="$dir" "$RPCROUTE_BIN" call -p "$dir/profile.yaml" \
    --state "$S" --provider c1 eth_blockNumber
  assert_moved_aside "mode 000" "$BATS_TEST_TMPDIR/original"
  assert_stderr_matches '[Pp]ermission denied'
  assert_equal "$output" '"0x64"' "result"
  assert_fresh_state "mode 000" 1
  assert_equal "$(stat -c %U "$S")" "$("${as[@]}" id -un)" "owner of the fresh state file"
}

@test "every command survives a damaged state file: probe, bench and serve write a fresh one; rank and state show start fresh" {
  slot_profile "$P" c1
  local bad=$BATS_TEST_TMPDIR/bad
  printf '{"version": 1, "providers": {' >"$bad"
  local cmd
  for cmd in "probe" "bench --requests 2 --methods eth_blockNumber" "rank --explain" "rank --json" "state show" "state show --json"; do
    damage "$bad"
    local args=()
    read -r -a args <<<"$cmd"
    [[ $cmd == state* ]] || args+=(-p "$P")
    run --separate-stderr rpcroute "${args[@]}"
    assert_moved_aside "$cmd" "$bad"
    case $cmd in
      probe | bench*) jq -e '.version == 1 and (.providers | length == 1)' "$S" >/dev/null || { echo "($cmd) no fresh state" >&2; false; } ;;
      # Readers start from a fresh state; whatever they leave must be valid.
      *) [[ ! -e $S ]] || jq -e '.version == 1' "$S" >/dev/null ;;
    esac
    [[ $cmd != *--json* ]] || jq -e . <<<"$output" >/dev/null
  done
  # The sidecar: warns at start, serves, and its flush writes a fresh file.
  damage "$bad"
  sidecar_start sc -p "$P" --state "$S" --no-probe
  local code
  code=$(curl -s --max-time 30 -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/json' \
    --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' "$SC_URL/rpc/local")
  assert_equal "$code" 200 "sidecar answer"
  sidecar_stop sc
  assert_equal "$SC_EXIT" 0 "sidecar exit"
  grep -Eq 'warning: .*moved it to ' "$SC_LOG" || { cat "$SC_LOG" >&2; false; }
  assert_fresh_state "serve" 1
}

# Not regular files. With `--state /dev/null` (a natural way to say "no state") run as root, the
# second case would rename /dev/null itself; here a device node of our own stands in for it.

@test "a FIFO at the state path does not hang the command, and is left alone" {
  slot_profile "$P" c1
  damage
  mkfifo "$S"
  run --separate-stderr timeout 15 "$RPCROUTE_BIN" call -p "$P" --provider c1 eth_blockNumber
  assert_status 0
  assert_equal "$output" '"0x64"' "result"
  [[ -p $S ]] || { echo "the FIFO was replaced" >&2; ls -la "$(dirname "$S")" >&2; false; }
}

@test "a character device at the state path (like /dev/null) is neither renamed nor replaced" {
  ((EUID == 0)) || skip "mknod needs root"
  slot_profile "$P" c1
  damage
  mknod "$S" c 1 3 # the same device as /dev/null
  run --separate-stderr rpcroute call -p "$P" --provider c1 eth_blockNumber
  assert_status 0
  assert_equal "$output" '"0x64"' "result"
  [[ -c $S ]] || { echo "the device node was replaced:" >&2; ls -la "$(dirname "$S")" >&2; false; }
  if compgen -G "$S.corrupt-*" >/dev/null; then
    echo "the device node was renamed:" >&2
    ls -la "$(dirname "$S")" >&2
    false
  fi
}
