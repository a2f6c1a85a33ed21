#!/usr/bin/env bash
# Configures and builds mcdist.
#   deploy/build.sh [BUILD_DIR] [extra cmake arguments...] [--target TARGET...]
# Without --target the whole tree is built; with it, only those ninja targets (and what they
# need).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
shift || true
cmake_args=()
targets=()
while [ $# -gt 0 ]; do
  if [ "$1" = --target ]; then
    shift
    targets=("$@")
    break
  fi
  cmake_args+=("$1")
  shift
done
# ccache, when the machine has it, with paths taken relative to the tree so that clones in
# other directories share its cache.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$top"
  # -g puts the working directory in the hash unless told not to (ccache manual, hash_dir):
  # without this a clone in another directory never hits.
  export CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  "${cmake_args[@]}" >/dev/null
ninja -C "$build" "${targets[@]}"
