#!/usr/bin/env bash
# The demo: installs the dependencies, builds mcdist, and distributes real meteorological
# products over loopback multicast from one mcdist-send to three mcdistd receivers:
#   - the GRIB 1/2 and BUFR 3/4 samples shipped by Debian's libeccodes-data,
#   - a few larger generated model fields (multi-message GRIB2 files of 5-50 MB),
# then prints the sender's summary and checks every delivered file's SHA-256.
# One receiver drops 2 % of what it receives (mcdistd --drop-rate), so repair passes show.
# The session is signed (docs/security.md): the hub's key and each site's key are made with
# mcdist-keygen, the sites trust only the hub's key, and the hub pins the sites' keys.
#
# Environment: MCDIST_DEMO_DIR (default /tmp/mcdist-demo), MCDIST_DEMO_RATE (default 500M).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
# Only what the demo builds and runs on (the tests install and build the rest).
"$top/deploy/install-deps.sh" --demo
# Only the three programs the demo runs, in a tree of their own without the tests, compiled as
# the test command compiles them: unity batches (MCDIST_UNITY: the Asio, Beast, CLI11, spdlog
# and fmt templates compiled once per batch of sources, not once per source) and -O2 with line
# tables only (-g1: the same code as -g, backtraces keep file and line). With an empty compiler
# cache about 3.5 minutes of compiler CPU time instead of 10 (docs/benchmarks.md "The demo's
# first run"), so about 2 minutes on 2 idle cores; the build's own output goes to a log.
bin="$top/build-demo"
mkdir -p "$bin"
echo "run-demo.sh: building mcdistd, mcdist-send and mcdist-keygen in $bin (the first time about 2 minutes on 2 idle cores, seconds afterwards; log: $bin/demo-build.log)"
if ! "$top/deploy/build.sh" "$bin" -DMCDIST_BUILD_TESTS=OFF -DMCDIST_BUILD_LINKEM=OFF \
    -DMCDIST_UNITY=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    --target mcdistd mcdist-send mcdist-keygen > "$bin/demo-build.log" 2>&1; then
  tail -n 30 "$bin/demo-build.log" >&2
  echo "run-demo.sh: the build failed (whole log: $bin/demo-build.log)" >&2
  exit 1
fi

demo=${MCDIST_DEMO_DIR:-/tmp/mcdist-demo}
rate=${MCDIST_DEMO_RATE:-500M}
group="239.192.0.1:4711"
rm -rf "$demo"
mkdir -p "$demo/products"

# 1. Products: eccodes samples, named as products are.
samples=/usr/share/eccodes/samples
for f in "$samples"/*.tmpl "$samples"/../ifs_samples/*/*.tmpl; do
  name=$(basename "$f" .tmpl)
  case "$name" in
    BUFR*) dir=obs/bufr; ext=bufr ;;
    *grib1*|GRIB1) dir=nwp/grib1; ext=grib ;;
    *) dir=nwp/grib2; ext=grib2 ;;
  esac
  sub=$(basename "$(dirname "$f")")
  [ "$sub" = samples ] || name="${sub}_${name}"
  mkdir -p "$demo/products/$dir"
  cp "$f" "$demo/products/$dir/${name}.${ext}"
done
# 2. Larger generated model fields: concatenated GRIB2 messages, as forecast files are.
mkdir -p "$demo/products/nwp/fields"
msg="$samples/gg_sfc_grib2.tmpl"
for spec in t2m_000:5 t2m_006:5 u10_000:20 v10_000:20 msl_012:50; do
  name=${spec%%:*}; mb=${spec##*:}
  out="$demo/products/nwp/fields/ICON_GLOBAL_${name}.grib2"
  count=$(( mb * 1000000 / $(stat -c %s "$msg") ))
  for _ in $(seq "$count"); do cat "$msg"; done > "$out"
done
files=$(find "$demo/products" -type f | wc -l)
bytes=$(du -sb "$demo/products" | cut -f1)
echo "demo: $files products, $bytes bytes in $demo/products"

# 3. Keys: the hub's, and one per site, pinned at the hub.
mkdir -p "$demo/keys"
"$bin/tools/keygen/mcdist-keygen" "$demo/keys/hub.key" >/dev/null 2>&1
: > "$demo/keys/sites.txt"
for site in dwd knmi metno; do
  mkdir -p "$demo/$site"
  echo "$site $("$bin/tools/keygen/mcdist-keygen" "$demo/$site/site.key" 2>/dev/null)" >> "$demo/keys/sites.txt"
done
echo "demo: hub key $(cat "$demo/keys/hub.key.pub"); site keys pinned in $demo/keys/sites.txt"

# 4. Three receiver daemons on loopback, trusting only the hub's key.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
for site in dwd knmi metno; do
  extra=()
  [ "$site" = metno ] && extra=(--drop-rate 0.02 --drop-seed 42)
  mkdir -p "$demo/$site"
  "$bin/receiver/mcdistd" --id "$site" --group "$group" --interface 127.0.0.1 \
      --dest "$demo/$site/in" --temp "$demo/$site/tmp" --log-file "$demo/$site/mcdistd.log" \
      --trust "$demo/keys/hub.key.pub" --key "$demo/$site/site.key" \
      "${extra[@]}" 2>/dev/null &
  pids+=($!)
done
for site in dwd knmi metno; do
  for _ in $(seq 100); do grep -q listening "$demo/$site/mcdistd.log" 2>/dev/null && break; sleep 0.05; done
done

# 5. One signed session to the closed group.
echo "demo: mcdist-send --rate $rate --key hub.key --receivers dwd,knmi,metno (metno drops 2 % on purpose)"
status=0
"$bin/sender/mcdist-send" --interface 127.0.0.1 --group "$group" --rate "$rate" \
    --key "$demo/keys/hub.key" --site-keys "$demo/keys/sites.txt" \
    --receivers dwd,knmi,metno --summary-json "$demo/summary.json" "$demo/products" || status=$?

# 6. Check what arrived.
(cd "$demo/products/.." && find products -type f -exec sha256sum {} + | sort -k2) > "$demo/sent.sha256"
for site in dwd knmi metno; do
  if (cd "$demo/$site/in" && sha256sum --quiet -c "$demo/sent.sha256" >/dev/null 2>&1); then
    echo "demo: $site holds all $files products, SHA-256 verified, in $demo/$site/in/products"
  else
    echo "demo: $site is missing or has wrong files" >&2
    status=1
  fi
done
echo "demo: receiver logs in $demo/<site>/mcdistd.log, summary in $demo/summary.json"
exit $status
