#!/usr/bin/env bash
# The tree's layout and lint checks, run by .ci/run after the tests:
#   1. clang-format-14 --dry-run -Werror on every tracked C++ file (.clang-format at the root);
#   2. clang-tidy-14 with the checks of .clang-tidy (warnings are errors) over the pure layers'
#      sources (the common core, sender/core, receiver/core, receiver/storage): the code the
#      protocol's correctness rests on, about 40 files, a few minutes on 2 cores.
#
#   deploy/run-lint.sh [BUILD_DIR]        BUILD_DIR holds compile_commands.json (default: build)
#   deploy/run-lint.sh --all [BUILD_DIR]  clang-tidy over every source of compile_commands.json
#   deploy/run-lint.sh --fix              rewrite the files with clang-format instead of checking
#
# Exit status: 0 clean, 1 a file is not formatted or clang-tidy found something, 2 usage/tools.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

all=0 fix=0
while [ $# -gt 0 ]; do
  case "$1" in
    --all) all=1; shift ;;
    --fix) fix=1; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-lint.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
build=${1:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac

fmt=$(command -v clang-format-14 || command -v clang-format || true)
tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [ -z "$fmt" ] || [ -z "$tidy" ]; then
  echo "run-lint.sh: clang-format-14 and clang-tidy-14 are needed (deploy/install-deps.sh installs them)" >&2
  exit 2
fi

mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc')
if [ "$fix" = 1 ]; then
  "$fmt" -i "${sources[@]}"
  echo "run-lint.sh: formatted ${#sources[@]} files"
  exit 0
fi

echo "== clang-format: ${#sources[@]} files"
if ! "$fmt" --dry-run -Werror "${sources[@]}"; then
  echo "run-lint.sh: files above are not formatted: deploy/run-lint.sh --fix rewrites them" >&2
  exit 1
fi

if [ ! -f "$build/compile_commands.json" ]; then
  echo "run-lint.sh: $build/compile_commands.json missing: build first (deploy/build.sh $build)" >&2
  exit 2
fi
# A unity tree (MCDIST_UNITY) compiles batches, so its compile_commands.json names no source
# file of ours: clang-tidy then reads the commands of a tree configured source by source in
# build-lint, which is configured, not built (only protoc's headers, which the pure layers
# include, are generated there).
if ! grep -q '"file": *"[^"]*/sender/core/[a-z_]*\.cpp"' "$build/compile_commands.json"; then
  lint_build="$top/build-lint"
  echo "== $build is a unity tree: the commands of $lint_build instead"
  cmake -S "$top" -B "$lint_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMCDIST_UNITY=OFF \
    >/dev/null
  ninja -C "$lint_build" proto/mcdist.pb.h proto/checkpoint.pb.h proto/unicast.pb.h >/dev/null
  build=$lint_build
fi
if [ "$all" = 1 ]; then
  mapfile -t tidy_files < <(python3 -c 'import json,sys; print("\n".join(sorted({e["file"] for e in json.load(open(sys.argv[1])) if "/build" not in e["file"]})))' "$build/compile_commands.json")
else
  # The pure layers: CMake targets mcdist_common_core, mcdist_sender_core, mcdist_receiver_core,
  # mcdist_receiver_storage (cmake/core_purity.cmake holds them to their includes).
  core_cpp=$(sed -n '/^add_library(mcdist_common_core/,/^)/p' common/CMakeLists.txt |
             grep -oE '[a-z_0-9]+\.cpp' | sed 's|^|common/|')
  mapfile -t tidy_files < <(printf '%s\n' $core_cpp sender/core/*.cpp receiver/core/*.cpp receiver/storage/*.cpp)
fi
echo "== clang-tidy: ${#tidy_files[@]} files, checks of .clang-tidy"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! printf '%s\n' "${tidy_files[@]}" |
     xargs -P "$(nproc)" -n 1 "$tidy" -p "$build" --quiet >"$log" 2>&1; then
  grep -E "(warning|error):" -A3 "$log" | grep -v "^[0-9]* warnings generated" >&2 || cat "$log" >&2
  echo "run-lint.sh: clang-tidy found the problems above" >&2
  exit 1
fi
echo "== lint clean"
