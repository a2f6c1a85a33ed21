#!/usr/bin/env bash
# Installs everything mcdist needs to build, test and run its demo on Debian 12, with apt-get.
#   deploy/install-deps.sh          build, test and demo dependencies (clang-14 + libfuzzer-14-dev:
#                                   deploy/run-fuzz.sh; postgresql-15: the redundant hubs' tests,
#                                   which start a server of their own; libpq-dev is a build
#                                   dependency: mcdist-feed and mcdistctl link libpq)
#   deploy/install-deps.sh --demo   only what building the programs and running the demo need
#                                   (deploy/run-demo.sh: no test tools, browsers or fuzzers)
#   deploy/install-deps.sh --bench  also the peers and tools of tests/bench (uftp, libnorm-dev for
#                                   the NORM peer of tests/bench/norm, udpcast, iperf3, gnuplot,
#                                   rsync, perf for cpu_per_file.py --count)
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (apt-get needs it)" >&2
  exit 1
fi

# What the programs build with, and what the demo runs on.
packages=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev libprotobuf-dev protobuf-compiler libspdlog-dev libssl-dev
  libcli11-dev libtomlplusplus-dev libsodium-dev libusrsctp-dev libsctp-dev nlohmann-json3-dev
  libisal-dev libgf-complete-dev ccache
  libmosquitto-dev libsqlite3-dev libpq-dev libcurl4-openssl-dev libjemalloc-dev
  python3 iproute2 libeccodes-data
)
# What the tests, the package, lint and fuzzing add.
if [ "${1:-}" != "--demo" ]; then
  packages+=(
    git catch2
    chromium prometheus
    systemd help2man lintian
    tshark
    clang-14 libfuzzer-14-dev clang-format-14 clang-tidy-14
    mosquitto mosquitto-clients sqlite3 openssl
    postgresql-15 postgresql-client-15
  )
fi
if [ "${1:-}" = "--bench" ]; then
  packages+=(uftp libnorm-dev udpcast iperf3 gnuplot-nox rsync netcat-openbsd time linux-perf)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all ${#packages[@]} packages already installed"
  exit 0
fi
echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark (the Wireshark dissector's test): no setuid dumpcap, and no debconf question about it.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps.sh: done"
