#!/usr/bin/env bash
# The test suite: installs the dependencies, builds mcdist (RelWithDebInfo, -Werror) and runs
# the ctest tests there: unit, sim (deterministic simulation of 60 receivers), integration (the
# real programs over loopback multicast, the link emulator and redundant hubs in network
# namespaces), package. The core layers' unit tests (ctest label `core`: what parses the
# network's datagrams and holds the protocol) run under ASan+UBSan instead, in clang's fuzz tree
# (build-fuzz), whose instrumented libraries CI's fuzzing needs anyway; without clang they run
# in the plain tree. Tests that need root or namespaces say SKIPPED when they cannot run.
# Benchmarks (tests/bench) are not tests and do not run here.
#
# The whole suite under GCC's ASan+UBSan (every program, every integration test) is a second
# full build, over 20 minutes of compiling on 2 cores; it runs with MCDIST_SANITIZE=all, and
# before a change to the io layers lands.
#
# Environment: MCDIST_SANITIZE=all   the whole suite under ASan+UBSan as well (build-asan)
#              MCDIST_SANITIZE=none  no sanitizer run
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
step() { echo "== $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }
t0=$SECONDS
"$top/deploy/install-deps.sh"
step "install"
jobs=$(nproc)

sanitize=${MCDIST_SANITIZE:-core}
case "$sanitize" in all | core | none) ;;
  *) echo "run-tests.sh: MCDIST_SANITIZE=$sanitize: use all, core or none" >&2; exit 2 ;;
esac
have_clang=0
if command -v clang++-14 >/dev/null || command -v clang++ >/dev/null; then have_clang=1; fi
# The core layers' unit tests run in the sanitizer tree below when it can be built: the plain
# tree then leaves them out instead of compiling them twice.
skip_core=OFF
[ "$sanitize" = core ] && [ "$have_clang" = 1 ] && skip_core=ON

echo "== build (RelWithDebInfo)"
# Line tables only (-g1) instead of full debug information: the same code (GCC's -g never
# changes code generation), backtraces and perf still have file and line, and the build is
# about a quarter faster. Unity batches (MCDIST_UNITY): the Asio, Beast, spdlog and fmt
# templates compiled once per batch of sources, not once per source, a quarter less time. Both
# for CI's 30 minutes (docs/benchmarks.md "CI's time"); deploy/build.sh alone keeps CMake's
# -O2 -g and compiles each source alone.
"$top/deploy/build.sh" "$top/build" -DMCDIST_WERROR=ON -DMCDIST_UNITY=ON \
  -DMCDIST_SKIP_CORE_TESTS="$skip_core" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
step "build"
echo "== tests"
ctest --test-dir "$top/build" --output-on-failure -j "$jobs" --timeout 900
step "tests"

case "$sanitize" in
  all)
    echo "== build (ASan + UBSan)"
    # No -Werror here: GCC's flow warnings (-Wmaybe-uninitialized) give false positives in the
    # standard headers under -fsanitize (GCC manual, -fsanitize=address); the plain build above
    # already holds the code to -Werror.
    "$top/deploy/build.sh" "$top/build-asan" -DMCDIST_SANITIZE=ON -DMCDIST_UNITY=ON
    step "build (ASan + UBSan)"
    echo "== tests under ASan + UBSan"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir "$top/build-asan" --output-on-failure -j "$jobs" --timeout 1800
    step "tests under ASan + UBSan"
    ;;
  core)
    if [ "$have_clang" = 1 ]; then
      echo "== core tests under ASan + UBSan (clang, build-fuzz)"
      "$top/deploy/run-fuzz.sh" --core-tests
      step "core tests under ASan + UBSan"
    else
      echo "SKIPPED: core tests under ASan + UBSan: no clang++ here (they ran in the plain tree;" \
        "install-deps.sh installs clang)"
    fi
    ;;
  none) echo "SKIPPED: sanitizer runs (MCDIST_SANITIZE=none)" ;;
esac
echo "== all tests passed"
