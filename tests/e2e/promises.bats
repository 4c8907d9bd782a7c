#!/usr/bin/env bats
# Promises of the README and the man page that no test would have caught breaking (issue 23), one
# short case each through the real binary: --idle-timeout closes an idle keep-alive connection;
# SIGINT drains the sidecar like SIGTERM (the request in flight is answered, exit 0); --allow-origin
# lets a browser origin in and no other; $RPCROUTE_TOKEN is serve's and top's token. Each waits for events with a generous ceiling, never for a
# wall-clock bound.

# jq programs are single-quoted on purpose; $output comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers
load sidecar_helpers

BN='{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN
  command -v python3 >/dev/null || skip "python3 needed"
}

setup() {
  e2e_setup
  start_fake f1 --height 100
  write_profile "$P" f1
}

teardown() {
  stop_all
}

@test "--idle-timeout: a keep-alive connection left idle past it is closed by the sidecar" {
  # The default is 60 s: a connection still open after 30 s means the option was not applied.
  sidecar_start sc -p "$P" --no-state --no-probe --idle-timeout 1s
  run python3 - "$SC_PORT" "$BN" <<'EOF'
import socket, sys, time
port, body = int(sys.argv[1]), sys.argv[2].encode()
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
got = b""
while b'"result"' not in got:
    chunk = s.recv(65536)
    if not chunk:
        print("closed before the answer"); sys.exit(1)
    got += chunk
print("answered")
s.settimeout(30)
start = time.monotonic()
try:
    rest = s.recv(65536)
except socket.timeout:
    print("still open after 30 s"); sys.exit(1)
print("closed after %.1f s" % (time.monotonic() - start) if rest == b"" else "unexpected bytes")
sys.exit(0 if rest == b"" else 1)
EOF
  echo "$output" >&2
  [ "$status" -eq 0 ]
  [[ $output == *answered*"closed after"* ]]
}

@test "SIGINT: the sidecar answers the request in flight, then exits 0, like SIGTERM" {
  sidecar_start sc -p "$P" --no-state --no-probe
  fake_control f1 '{"hold":true}'
  local out=$BATS_TEST_TMPDIR/answer
  curl -s --max-time 60 -o "$out" -w '%{http_code}' -X POST -H 'content-type: application/json' \
    --data "$BN" "$SC_URL/" >"$out.code" 3>&- &
  local curl_pid=$!
  local deadline=$((SECONDS + 30))
  until [[ $(fake_stat f1 .held) == 1 ]]; do
    ((SECONDS < deadline)) || { echo "the call never reached the fake" >&2; false; }
    nap 0.05
  done
  kill -INT "$SC_PID"
  # Draining: no new connection is taken; the one in flight is still waited for.
  deadline=$((SECONDS + 30))
  until ! curl -s --max-time 2 -o /dev/null "$SC_URL/healthz"; do
    ((SECONDS < deadline)) || { echo "still accepting after SIGINT" >&2; false; }
    nap 0.05
  done
  kill -0 "$SC_PID" # still there for the request in flight
  fake_control f1 '{"hold":false}'
  wait "$curl_pid"
  assert_equal "$(cat "$out.code")" 200
  assert_json "$(cat "$out")" '.result == "0x64"'
  sidecar_wait sc 30
  assert_equal "$(cat "$SC_RC_FILE")" 0 "exit status after SIGINT"
}

@test "a storm of SIGTERM (a job kill sends one to the group too), and of SIGUSR1: the sidecar stops once, exit 0" {
  sidecar_start sc -p "$P" --no-state --no-probe
  local code
  code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/json' \
    --data "$BN" "$SC_URL/")
  assert_equal "$code" 200
  # A supervisor's SIGUSR1 (save the state) that lands while it stops must not end it either.
  signal_storm USR1 "$SC_PID" 3>&- &
  local usr1=$!
  signal_storm TERM "$SC_PID"
  wait "$usr1"
  sidecar_wait sc 30
  assert_equal "$SC_EXIT" 0 "exit status after a storm of SIGTERM and SIGUSR1"
  assert_equal "$(grep -c 'rpcroute: stopped' "$SC_LOG")" 1 "'stopped' lines"
}

@test "--allow-origin: the origin given is let in with its CORS header; another is refused" {
  sidecar_start sc -p "$P" --no-state --no-probe --allow-origin https://app.example
  sidecar_post / "$BN" -H 'Origin: https://app.example'
  assert_equal "$code" 200
  grep -qi '^access-control-allow-origin: https://app.example' "$SC_HDRS" || { cat "$SC_HDRS" >&2; false; }
  sidecar_post / "$BN" -H 'Origin: https://other.example'
  assert_equal "$code" 403
  # Without the option the same origin is refused.
  sidecar_stop sc
  sidecar_start sc2 -p "$P" --no-state --no-probe
  sidecar_post / "$BN" -H 'Origin: https://app.example'
  assert_equal "$code" 403
}

@test "\$RPCROUTE_TOKEN: serve requires it as the bearer token when --token is not given; top sends it" {
  RPCROUTE_TOKEN=env-T0k3n sidecar_start sc -p "$P" --no-state --no-probe
  sidecar_post / "$BN"
  assert_equal "$code" 401
  sidecar_post / "$BN" -H 'Authorization: Bearer wrong'
  assert_equal "$code" 401
  sidecar_post / "$BN" -H 'Authorization: Bearer env-T0k3n'
  assert_equal "$code" 200
  # top reads the same variable for its requests.
  RPCROUTE_TOKEN=env-T0k3n run rpcroute top --url "$SC_URL" --once
  [ "$status" -eq 0 ]
  [[ $output == *"f1 "* ]]
  RPCROUTE_TOKEN='' run rpcroute top --url "$SC_URL" --once
  [ "$status" -eq 3 ]
  [[ $output == *"bearer token"* ]]
}
