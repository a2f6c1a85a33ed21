#!/usr/bin/env bash
# Builds the Debian package mcdist_VERSION-1_ARCH.deb with CPack (cmake/packaging.cmake).
#   deploy/build-deb.sh [BUILD_DIR]     default BUILD_DIR: build-deb (a Release-like build without
#                                       tests); an existing build directory is reused as it is
#   deploy/build-deb.sh --lintian [BUILD_DIR]   also runs lintian on the package
# Prints the package's path on its last line. Needs help2man for the man pages (install-deps.sh).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
lint=0
if [ "${1:-}" = "--lintian" ]; then lint=1; shift; fi
build=${1:-$top/build-deb}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMCDIST_BUILD_TESTS=OFF \
    -DMCDIST_BUILD_LINKEM=OFF >/dev/null
fi
ninja -C "$build" mcdistd mcdist-send mcdist_man mcdist_changelog >/dev/null
rm -f "$build"/mcdist_*.deb
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls "$build"/mcdist_*.deb)
if [ "$lint" = 1 ]; then
  lintian --info "$deb" || true
fi
echo "$deb"
