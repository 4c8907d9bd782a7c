#!/usr/bin/env bats
# rpcroute bench: figures per method and provider, warm-up, outcome classes, recording into the
# state file, exit codes, table output. Fake upstreams for the faults, one anvil node for the
# default method mix.

# jq programs are single-quoted on purpose; $stderr comes from bats.
# shellcheck disable=SC2016,SC2154

load helpers

setup_file() {
  require_bins RPCROUTE_BIN FAKE_BIN ANVIL
}

setup() {
  e2e_setup
}

teardown() {
  stop_all
}

# The figures of provider ID for the first method of the bench JSON in $output.
figures_of() { # ID
  jq --arg p "$1" '.methods[0].providers[] | select(.provider == $p)' <<<"$output"
}

# Number of eth_blockNumber samples the state file holds for provider ID.
block_number_samples() { # ID
  state_json | jq --arg p "$1" '[.providers[] | select(.provider == $p) | .methods.eth_blockNumber.samples | length] | add // 0'
}

@test "two fakes: both measured, the delayed one has the larger p50, warm-up not counted" {
  start_fake fast
  start_fake slow --delay-ms 30
  write_profile "$P" fast slow
  run --separate-stderr rpcroute bench --profile "$P" --requests 10 --concurrency 2 --methods eth_blockNumber --json
  assert_status 0
  assert_jq '.chain == "local" and .chain_id == 31337 and .requests_per_method == 10 and .duration_s == null'
  assert_jq '.concurrency == 2 and .recorded == true'
  assert_jq '[.methods[].method] == ["eth_blockNumber"]'
  assert_jq '[.methods[0].providers[].provider] | sort == ["fast", "slow"]'
  assert_jq '[.methods[0].providers[] | .ok] == [10, 10]'
  assert_jq '[.methods[0].providers[] | .errors] == [{}, {}]'
  # Sorted by p50: the fast one first.
  assert_jq '.methods[0].providers[0].provider == "fast"'
  assert_json "$(figures_of slow)" '.p50_ms >= 25 and .min_ms >= 25 and .p50_ms <= .p90_ms and .p90_ms <= .p99_ms and .p99_ms <= .max_ms'
  assert_json "$(figures_of fast)" '.p50_ms < 25 and .requests_per_s > 0'
  assert_jq '[.warmup[] | select(.ok and .chain_id == 31337 and .latency_ms > 0)] | length == 2'
  # Warm-up: one cold eth_chainId, then eth_blockNumber (the head) and one more eth_chainId to
  # open the second connection; none of them counted among the 10.
  assert_json "$(fake_stats fast)" '.methods.eth_blockNumber == 11 and .methods.eth_chainId == 2'
  assert_equal "$(block_number_samples fast)" 10 "fast samples"
  assert_equal "$(block_number_samples slow)" 10 "slow samples"
  # Heights are learned as the router learns them.
  assert_json "$(state_entry fast)" '.height.block == 100'
}

@test "a long run records only what the state keeps; a provider of another chain sets no height" {
  start_fake f1 --height 100
  start_fake other --chain-id 1 --height 5000
  write_profile "$P" f1 other
  run --separate-stderr rpcroute bench --profile "$P" --requests 150 --concurrency 8 --methods eth_blockNumber --json
  assert_status 0
  assert_jq '[.methods[0].providers[].ok] == [150, 150]'
  assert_jq '.warmup[] | select(.provider == "other") | .chain_id == 1'
  assert_stderr_matches 'other answers chain id 1, but chain local has id 31337'
  # The state keeps the newest 128 samples of a method.
  assert_equal "$(block_number_samples f1)" 128 "f1 samples"
  assert_equal "$(block_number_samples other)" 128 "other samples"
  assert_json "$(state_json)" '[.chains[].high_water.block] == [100]'
  assert_json "$(state_entry other)" '.height.block == 0'
}

@test "--no-record measures without touching the state file" {
  start_fake f1
  start_fake f2
  write_profile "$P" f1 f2
  rpcroute bench --profile "$P" --requests 5 --methods eth_blockNumber,eth_gasPrice >/dev/null
  local before
  before=$(sample_count)
  assert_equal "$before" 20 "samples after the first bench"
  run --separate-stderr rpcroute bench --profile "$P" --requests 5 --methods eth_blockNumber,eth_gasPrice --no-record --json
  assert_status 0
  assert_jq '.recorded == false and ([.methods[].providers[].ok] == [5, 5, 5, 5])'
  assert_equal "$(sample_count)" "$before" "samples after --no-record"
  # --no-state records nothing either, and says so.
  run --separate-stderr rpcroute bench --profile "$P" --requests 5 --methods eth_blockNumber --no-state --json
  assert_status 0
  assert_jq '.recorded == false'
  assert_equal "$(sample_count)" "$before" "samples after --no-state"
}

@test "a provider answering 429 is reported as rate-limited, not as slow" {
  start_fake fast
  start_fake limited --mode status --status 429 --retry-after 60
  write_profile "$P" fast limited
  run --separate-stderr rpcroute bench --profile "$P" --requests 10 --concurrency 2 --methods eth_blockNumber --json
  assert_status 0
  assert_json "$(figures_of limited)" '.rate_limited == 10 and .ok == 0 and .errors == {"rate_limited": 10}'
  assert_json "$(figures_of limited)" '.p50_ms == null and .max_ms == null and .requests_per_s == 0'
  assert_json "$(figures_of limited)" '.messages | length >= 1 and (.[0] | test("429"))'
  assert_json "$(figures_of fast)" '.ok == 10 and .rate_limited == 0'
  assert_jq '.methods[0].providers[-1].provider == "limited"'
  # Recorded as live traffic would be: rate-limited samples and the rate-limit mark.
  local entry
  entry=$(state_entry limited)
  assert_json "$entry" '[.methods.eth_blockNumber.samples[][2]] | length == 10 and all(. == "rate_limited")'
  assert_json "$entry" '.rate_limited_until_ms > $now' --argjson now "$(now_ms)"
  assert_json "$entry" '.breaker.state == "closed"'
  # The table says it in words.
  run --separate-stderr rpcroute bench --profile "$P" --requests 4 --methods eth_blockNumber --no-record
  assert_status 0
  [[ $output == *"4 rate_limited"* ]] || { _dump_run; false; }
  [[ $output == *"limited: rate-limited 4 of 4"* ]] || { _dump_run; false; }
}

@test "a provider on a dead port: provider_failure, exit 0 because the other answered, no URL shown" {
  start_fake fast
  dead_port gone
  write_profile "$P" fast "gone,url=http://127.0.0.1:$(node_port gone)/v2/SECRETKEY123"
  run --separate-stderr rpcroute bench --profile "$P" --requests 6 --concurrency 2 --methods eth_blockNumber --json
  assert_status 0
  assert_json "$(figures_of gone)" '.ok == 0 and .errors == {"provider_failure": 6} and .rate_limited == 0'
  assert_json "$(figures_of gone)" '.p50_ms == null and (.messages | length) == 1'
  assert_json "$(figures_of fast)" '.ok == 6'
  assert_jq '.warmup[] | select(.provider == "gone") | .ok == false and (.message | length > 0)'
  refute_output_contains SECRETKEY123
  # Counted toward the breaker, as live traffic would: 6 failures open it.
  assert_json "$(state_entry gone)" '.breaker.state == "open"'
  run --separate-stderr rpcroute bench --profile "$P" --requests 3 --methods eth_blockNumber --no-record
  assert_status 0
  refute_output_contains SECRETKEY123
  [[ $output == *"gone: "*"×3"* ]] || { _dump_run; false; }
}

@test "--timeout bounds each request to a provider that hangs" {
  start_fake fast
  start_fake stuck --mode hang
  write_profile "$P" fast stuck
  run --separate-stderr rpcroute bench --profile "$P" --requests 2 --concurrency 2 --timeout 300ms --methods eth_blockNumber --json
  assert_status 0
  assert_json "$(figures_of stuck)" '.ok == 0 and .errors == {"provider_failure": 2} and .p50_ms == null'
  assert_jq '.warmup[] | select(.provider == "stuck") | .ok == false and .latency_ms >= 250 and .latency_ms < 2000'
  assert_json "$(state_entry stuck)" '[.methods.eth_blockNumber.samples[][2]] == ["timeout", "timeout"]'
}

@test "every provider dead: exit 3, the figures still printed" {
  dead_port d1
  dead_port d2
  write_profile "$P" d1 d2
  run --separate-stderr rpcroute bench --profile "$P" --requests 3 --methods eth_blockNumber,eth_gasPrice --json
  assert_status 3
  assert_stderr_matches 'no provider answered'
  assert_jq '[.methods[].providers[].errors.provider_failure] == [3, 3, 3, 3]'
}

@test "--providers restricts the bench; unknown ids, chains and empty method lists are usage errors" {
  start_fake f1
  start_fake f2
  start_fake f3
  write_profile "$P" f1 f2 f3
  run --separate-stderr rpcroute bench --profile "$P" --providers f1,f3 --requests 4 --methods eth_blockNumber --json
  assert_status 0
  assert_jq '[.methods[0].providers[].provider] | sort == ["f1", "f3"]'
  assert_jq '[.warmup[].provider] == ["f1", "f3"]'
  assert_equal "$(fake_requests f2)" 0 "requests to f2"

  run --separate-stderr rpcroute bench --profile "$P" --providers f1,nope
  assert_status 2
  assert_stderr_matches "unknown provider 'nope'"
  run --separate-stderr rpcroute bench --profile "$P" --chain mainnet
  assert_status 2
  assert_stderr_matches "unknown chain 'mainnet'"
  run --separate-stderr rpcroute bench --profile "$P" --methods ''
  assert_status 2
  assert_stderr_matches 'methods'
  run --separate-stderr rpcroute bench --profile "$P" --duration soon
  assert_status 2
  run --separate-stderr rpcroute bench --profile "$P" --concurrency 0
  assert_status 2
  assert_equal "$(fake_requests f2)" 0 "requests to f2 after the usage errors"
}

@test "the default method mix against a real anvil node: every method answered" {
  start_anvil a1
  write_profile "$P" a1
  run --separate-stderr rpcroute bench --profile "$P" --requests 3 --concurrency 2 --json
  assert_status 0
  assert_jq '[.methods[].method] == ["eth_blockNumber", "eth_chainId", "eth_getBlockByNumber", "eth_getBalance", "eth_getTransactionCount", "eth_getLogs", "eth_gasPrice"]'
  assert_jq 'all(.methods[].providers[]; .ok == 3 and .errors == {} and .p50_ms > 0)'
  assert_jq '.warmup[0].ok and .warmup[0].chain_id == 31337'
  # Recorded per method, as the router would.
  assert_json "$(state_entry a1)" '[.methods[] | .samples | length] == [3, 3, 3, 3, 3, 3, 3]'
}

@test "table output: a heading and table per method, every provider id, warm-up section" {
  start_fake alpha
  start_fake beta --delay-ms 5
  write_profile "$P" alpha beta
  run --separate-stderr rpcroute bench --profile "$P" --requests 4 --methods eth_blockNumber,eth_gasPrice
  assert_status 0
  [[ $output == *alpha* && $output == *beta* ]] || { _dump_run; false; }
  assert_equal "$(grep -c 'P50' <<<"$output")" 2 "table headers"
  assert_equal "$(grep -cE '^eth_(blockNumber|gasPrice) \(4 requests per provider' <<<"$output")" 2 "method headings"
  grep -Eq '^PROVIDER +OK +ERRORS +P50 +P90 +P99 +MIN +MAX +REQ/S$' <<<"$output" || { _dump_run; false; }
  grep -Eq '^alpha +4 +- ' <<<"$output" || { _dump_run; false; }
  grep -q '^warm-up (connect)' <<<"$output" || { _dump_run; false; }
  [[ $output != *$'\nerrors\n'* ]] || { _dump_run; false; }
  # No progress bar when stderr is not a terminal.
  assert_equal "$stderr" "" "stderr"
}

@test "--duration runs each method for that long, whatever --requests says" {
  start_fake f1
  write_profile "$P" f1
  local t0 t1
  t0=$(now_ms)
  run --separate-stderr rpcroute bench --profile "$P" --duration 0.5 --requests 1 --concurrency 2 --methods eth_blockNumber,eth_gasPrice --json
  t1=$(now_ms)
  assert_status 0
  assert_jq '.duration_s == 0.5 and .requests_per_method == null'
  assert_jq 'all(.methods[].providers[]; .ok > 1 and .requests == .ok)'
  (( t1 - t0 >= 1000 )) || { echo "two methods of 0.5 s took $((t1 - t0)) ms" >&2; false; }
}

@test "table output: the errors section lists each message once per provider, with its methods" {
  start_fake up
  dead_port gone
  write_profile "$P" up gone
  run --separate-stderr rpcroute bench --profile "$P" --requests 2 --methods eth_blockNumber,eth_gasPrice --no-record
  assert_status 0
  grep -Eq '^gone +0 +2 provider_failure ' <<<"$output" || { _dump_run; false; }
  [[ $output == *$'\nerrors\n'* ]] || { _dump_run; false; }
  # The same refusal on both methods: one line, counted over both, "every method".
  assert_equal "$(grep -c '^  gone: ' <<<"$output")" 1 "error lines of gone"
  grep -Eq '^  gone: .* ×4 \(every method\)$' <<<"$output" || { _dump_run; false; }
  [[ $output != *"  up: "* ]] || { _dump_run; false; }
}

@test "--call and --calls-file: each call measured with its own params, one method with several" {
  start_fake f1
  write_profile "$P" f1
  local dead=0x000000000000000000000000000000000000dEaD beef=0x000000000000000000000000000000000000bEEF
  printf '[{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["%s","latest"]},{"jsonrpc":"2.0","id":2,"method":"eth_gasPrice"}]' \
    "$dead" >"$BATS_TEST_TMPDIR/calls.json"
  run --separate-stderr rpcroute bench --profile "$P" --requests 3 --concurrency 1 --json --no-record \
    --call "eth_getBalance:[\"$beef\",\"latest\"]" --calls-file "$BATS_TEST_TMPDIR/calls.json"
  assert_status 0
  assert_jq '[.methods[] | [.method, .params]] == [["eth_getBalance", [$b, "latest"]], ["eth_getBalance", [$d, "latest"]], ["eth_gasPrice", []]]' --arg d "$dead" --arg b "$beef"
  assert_jq 'all(.methods[].providers[]; .ok == 3 and .mostly_errors == false and .p50_ms > 0)'
  assert_json "$(fake_stats f1)" '.methods.eth_getBalance == 6 and .methods.eth_gasPrice == 3'
  # The table names the params given.
  run --separate-stderr rpcroute bench --profile "$P" --requests 1 --no-record --call "eth_getBalance:[\"$beef\",\"latest\"]"
  assert_status 0
  [[ $output == *"eth_getBalance [\"$beef\",\"latest\"] (1 requests per provider"* ]] || { _dump_run; false; }
  # Bad params, a missing file, a call without a method: usage errors, nothing sent.
  local before
  before=$(fake_requests f1)
  run --separate-stderr rpcroute bench --profile "$P" --call 'eth_call:[{"to":'
  assert_status 2
  assert_stderr_matches "bad --call 'eth_call:\[\{\"to\":': the params are not JSON"
  run --separate-stderr rpcroute bench --profile "$P" --calls-file "$BATS_TEST_TMPDIR/none.json"
  assert_status 2
  assert_stderr_matches "cannot read --calls-file"
  echo '[{"jsonrpc":"2.0","id":1}]' >"$BATS_TEST_TMPDIR/bad.json"
  run --separate-stderr rpcroute bench --profile "$P" --calls-file "$BATS_TEST_TMPDIR/bad.json"
  assert_status 2
  assert_stderr_matches "bad.json: call 1: "
  assert_equal "$(fake_requests f1)" "$before" "requests after the usage errors"
}

@test "a method answered mostly with errors: said loudly in the table and the JSON, never latency, no samples recorded" {
  start_fake f1
  write_profile "$P" f1
  # The fake knows no eth_nothing: every answer is a -32601 error, quickly.
  run --separate-stderr rpcroute bench --profile "$P" --requests 4 --concurrency 1 --methods eth_blockNumber,eth_nothing
  assert_status 0
  grep -Eq '^f1 +0 +4 [a-z_]+ !! +- +- +- +- +- ' <<<"$output" || { _dump_run; false; }
  grep -Eq '^  !! MOSTLY ERRORS: f1 answered 4 of 4 with an error \(.*eth_nothing.*\): no latency measured or recorded; give params: --call .eth_nothing:\[\.\.\.\]. or --calls-file$' <<<"$output" || { _dump_run; false; }
  # eth_blockNumber was measured and recorded; the errors left no latency sample behind.
  grep -Eq '^f1 +4 +- ' <<<"$output" || { _dump_run; false; }
  assert_equal "$(state_json | jq -c '[.providers[] | select(.provider == "f1") | .methods | keys[]]')" '["eth_blockNumber"]' "methods sampled"
  run --separate-stderr rpcroute bench --profile "$P" --requests 4 --concurrency 1 --methods eth_nothing --json --no-record
  assert_status 0
  assert_jq '.methods[0].providers[0] | .mostly_errors and .ok == 0 and .p50_ms == null and .requests_per_s == 0'
}
