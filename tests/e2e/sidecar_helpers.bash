# shellcheck shell=bash
# The variables set here are read by the suites that load this file.
# shellcheck disable=SC2034
# Sidecar helpers for crash_state.bats, hostile_http.bats and secrets.bats (load after helpers):
# start `rpcroute serve` in the background, know its port, its exit status and its log, stop it.
#
# The sidecar runs under a small wrapper shell that records its exit status in NAME.rc, so a test
# can learn it even when the sidecar was started in setup_file (another process, which `wait`
# cannot reap). NAME.pid holds the sidecar's own pid (signals go to it, not to the wrapper), so
# stop_all stops it with the nodes; NAME.port its port, so node_port/node_url work for it too.

# Starts `rpcroute serve --listen 127.0.0.1:0 --port-file … SERVE_ARGS…` as NAME and waits up to
# 15 s for its port. Sets SC_PID, SC_PORT, SC_URL, SC_LOG (stderr), SC_OUT (stdout), SC_RC_FILE.
sidecar_start() { # NAME SERVE_ARGS...
  local name=$1 dir deadline port_file
  shift
  dir=$(_proc_dir)
  port_file=$dir/$name.port
  rm -f "$port_file" "$dir/$name.rc" "$dir/$name.pid"
  SIDECAR_PID_FILE=$dir/$name.pid SIDECAR_RC_FILE=$dir/$name.rc \
    bash -c '"$@" & echo $! >"$SIDECAR_PID_FILE.tmp" && mv "$SIDECAR_PID_FILE.tmp" "$SIDECAR_PID_FILE"; wait $!; echo $? >"$SIDECAR_RC_FILE"' \
    sidecar "$RPCROUTE_BIN" serve --listen 127.0.0.1:0 --port-file "$port_file" "$@" \
    </dev/null >>"$dir/$name.stdout" 2>>"$dir/$name.log" 3>&- &
  deadline=$((SECONDS + 15))
  while ((SECONDS < deadline)); do
    if [[ -s $dir/$name.pid && -s $port_file ]] && grep -Eq '^[0-9]+$' "$port_file"; then
      sidecar_load "$name"
      return 0
    fi
    [[ -e $dir/$name.rc ]] && break
    nap 0.02
  done
  echo "sidecar_start $name: no port (exit status: $(cat "$dir/$name.rc" 2>/dev/null || echo none))" >&2
  cat "$dir/$name.log" >&2
  return 1
}

# Sets SC_PID, SC_PORT, SC_URL, SC_LOG, SC_OUT, SC_RC_FILE for the sidecar NAME (started in this
# test or in setup_file).
sidecar_load() { # NAME
  local dir f
  f=$(_node_file "$1" port) || return 1
  dir=$(dirname "$f")
  SC_PORT=$(<"$f")
  SC_PORT=${SC_PORT//[[:space:]]/}
  SC_URL=http://127.0.0.1:$SC_PORT
  SC_PID=$(cat "$dir/$1.pid" 2>/dev/null || true)
  SC_LOG=$dir/$1.log
  SC_OUT=$dir/$1.stdout
  SC_RC_FILE=$dir/$1.rc
}

# Waits up to LIMIT seconds (default 15) for the sidecar NAME to exit. Sets SC_EXIT (its exit status;
# 137 after SIGKILL); fails when it is still running.
sidecar_wait() { # NAME [LIMIT_S]
  local deadline
  sidecar_load "$1" || return 1
  deadline=$((SECONDS + ${2:-15}))
  while [[ ! -s $SC_RC_FILE ]] && ((SECONDS < deadline)); do nap 0.02; done
  if [[ ! -s $SC_RC_FILE ]]; then
    echo "sidecar $1 (pid $SC_PID) still running" >&2
    return 1
  fi
  SC_EXIT=$(<"$SC_RC_FILE")
  rm -f "$(dirname "$SC_RC_FILE")/$1.pid"
}

# SIGTERM, then wait up to LIMIT seconds (default 15) for the exit (SIGKILL and fail after that).
# Sets SC_EXIT.
sidecar_stop() { # NAME [LIMIT_S]
  sidecar_load "$1" || return 1
  [[ -n $SC_PID ]] && kill -TERM "$SC_PID" 2>/dev/null
  if ! sidecar_wait "$1" "${2:-15}"; then
    kill -9 "$SC_PID" 2>/dev/null || true
    return 1
  fi
}

# POST DATA (JSON text or @FILE) to the sidecar's PATH. Sets code (HTTP status, 000 when no answer)
# and body; the response headers go to SC_HDRS (default $BATS_TEST_TMPDIR/headers).
sidecar_post() { # PATH DATA [CURL ARGS...]
  local path=$1 data=$2 out
  shift 2
  SC_HDRS=${SC_HDRS:-$BATS_TEST_TMPDIR/headers}
  out=$BATS_TEST_TMPDIR/sidecar_body
  rm -f "$SC_HDRS" "$out"
  code=$(curl -s --max-time 30 -D "$SC_HDRS" -o "$out" -w '%{http_code}' -X POST \
    -H 'content-type: application/json' --data-binary "$data" "$@" "$SC_URL$path") || true
  body=$(cat "$out" 2>/dev/null || true)
}

# GET PATH from the sidecar. Sets code and body like sidecar_post.
sidecar_get() { # PATH [CURL ARGS...]
  local path=$1 out
  shift
  SC_HDRS=${SC_HDRS:-$BATS_TEST_TMPDIR/headers}
  out=$BATS_TEST_TMPDIR/sidecar_body
  rm -f "$SC_HDRS" "$out"
  code=$(curl -s --max-time 30 -D "$SC_HDRS" -o "$out" -w '%{http_code}' "$@" "$SC_URL$path") || true
  body=$(cat "$out" 2>/dev/null || true)
}
