#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan, docs/fuzzing.md) in
# build-fuzz and runs each for a bounded time from its committed seed corpus. Exits non-zero
# on the first crash, leak, UB report, timeout or out-of-memory; the input that did it is kept
# as build-fuzz/artifacts/TARGET-crash-... (rerun: build-fuzz/tests/fuzz/TARGET_fuzz FILE).
#
#   deploy/run-fuzz.sh [SECONDS_PER_TARGET]     default 60; 0 = no time bound (use RUNS)
#   deploy/run-fuzz.sh --core-tests   builds and runs, in the same tree, the unit tests of the
#                                     core layers (ctest label `core`) instead
#
# Environment:
#   MCDIST_FUZZ_RUNS=N        stop each target after N executions (libFuzzer -runs)
#   MCDIST_FUZZ_JOBS=N        targets run N at a time (default 1)
#   MCDIST_FUZZ_TARGETS="a b" only these (default: all eleven: wire receiver sender
#                             unicast_frame checkpoint sequences replay_cache catch_up_index
#                             config auth sctp_probe)
#   MCDIST_FUZZ_BUILD=DIR     build directory (default build-fuzz)
#   ASAN_OPTIONS              default quarantine_size_mb=16 (see below)
#   deploy/run-fuzz.sh --seeds  rewrites the generated seeds of tests/fuzz/corpus and exits
#
# Each target keeps what it learns in DIR/corpus/TARGET (not committed), so later runs start
# further; its log is DIR/logs/TARGET.log; one summary line per target is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=${MCDIST_FUZZ_BUILD:-$src/build-fuzz}
seconds=60
seeds_only=0
core_tests=0
case "${1:-}" in
  --seeds) seeds_only=1 ;;
  --core-tests) core_tests=1 ;;
  "") ;;
  *[!0-9]*) echo "usage: deploy/run-fuzz.sh [SECONDS_PER_TARGET] | --seeds | --core-tests" >&2; exit 2 ;;
  *) seconds=$1 ;;
esac
jobs=${MCDIST_FUZZ_JOBS:-1}
# shellcheck disable=SC2206  # word splitting of the list is the point
targets=(${MCDIST_FUZZ_TARGETS:-wire receiver sender unicast_frame checkpoint sequences replay_cache config auth sctp_probe catch_up_index})

cxx=$(command -v clang++ || command -v clang++-14 || true)
cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cxx" ] || [ -z "$cc" ]; then
  echo "run-fuzz.sh: clang not found (deploy/install-deps.sh installs clang-14 and libfuzzer-14-dev)" >&2
  exit 2
fi

# ccache's paths relative to the tree, so that clones in other directories share its cache.
export CCACHE_BASEDIR="$src"
# -g puts the working directory in the hash unless told not to (ccache manual, hash_dir).
export CCACHE_NOHASHDIR=1
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# The tests are configured here too (not built unless asked: the `fuzz` target needs none).
# Unity batches, as in the test command's other trees: the libraries compile in about two
# thirds of the time.
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
  -DMCDIST_FUZZ=ON -DMCDIST_UNITY=ON -DMCDIST_BUILD_TESTS=ON -DMCDIST_BUILD_LINKEM=OFF >/dev/null
if [ "$core_tests" = 1 ]; then
  echo "run-fuzz.sh: building the core layers' tests under ASan + UBSan in $build"
  if ! ninja -C "$build" core_tests > "$build/build-core-tests.log" 2>&1; then
    grep -E -A8 "FAILED|error" "$build/build-core-tests.log" | head -60 >&2
    echo "run-fuzz.sh: the core tests' build failed (whole log: $build/build-core-tests.log)" >&2
    exit 1
  fi
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    exec ctest --test-dir "$build" -L core --output-on-failure -j "$(nproc)" --timeout 900
fi
echo "run-fuzz.sh: building the fuzz targets in $build"
if ! ninja -C "$build" fuzz > "$build/build.log" 2>&1; then
  grep -E -A8 "FAILED|error" "$build/build.log" | head -60 >&2
  echo "run-fuzz.sh: the fuzz build failed (whole log: $build/build.log)" >&2
  exit 1
fi

if [ "$seeds_only" = 1 ]; then
  # Overwrites the generated seeds; inputs added by hand (crashes found, e.g. float_size.toml) stay.
  "$build/tests/fuzz/make_corpus" "$src/tests/fuzz/corpus"
  echo "run-fuzz.sh: seeds written to tests/fuzz/corpus; commit them"
  exit 0
fi

mkdir -p "$build/logs" "$build/artifacts"
# ASan's default 256 MiB quarantine of freed memory makes every input of the allocation-heavy
# targets fault in fresh pages: auth_fuzz ran 3.5x slower with it (27 s against 8 s for 15,000
# inputs). 16 MiB still holds each input's freed buffers long enough to catch a use after free
# within that input and the next ones.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=16}"
run_one() {
  local t=$1
  local work=$build/corpus/$t log=$build/logs/$t.log
  mkdir -p "$work"
  local args=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$build/artifacts/$t-")
  [ "$seconds" -gt 0 ] && args+=(-max_total_time="$seconds")
  [ -n "${MCDIST_FUZZ_RUNS:-}" ] && args+=(-runs="$MCDIST_FUZZ_RUNS")
  local rc=0
  # libFuzzer writes crash-* files to the working directory unless told: run it in the build.
  (cd "$build" && "$build/tests/fuzz/${t}_fuzz" "${args[@]}" "$work" "$src/tests/fuzz/corpus/$t") \
    >"$log" 2>&1 || rc=$?
  local runs rate
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    echo "run-fuzz.sh: $t FAILED (exit $rc) after ${runs:-?} executions; log $log:" >&2
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written|artifact' "$log" | head -20 >&2 || true
    return 1
  fi
  echo "run-fuzz.sh: $t: ${runs:-?} executions, ${rate:-?} exec/s, 0 crashes"
}

failed=0
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
if [ "$failed" -ne 0 ]; then
  echo "run-fuzz.sh: a target failed (inputs in $build/artifacts)" >&2
  exit 1
fi
echo "run-fuzz.sh: all ${#targets[@]} targets clean"
