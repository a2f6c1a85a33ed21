#!/usr/bin/env bash
# validate.sh - measure mcdist-linkem against its settings, the way the EUMETSAT
# multicast study validated its dummynet: RTT within 1 % of the set value, loss within
# the binomial 95 % confidence interval, Gilbert-Elliott burst length, rate limiter
# accuracy, and forwarding capacity with a sender and two receivers on this machine.
#
# Usage: validate.sh [MCDIST_LINKEM [MCDIST_LINKEM_TRAFFIC]]
#   Builds nothing. Without arguments the binaries are looked up in the usual build
#   directories (build*/tests/linkem/ under the repository, /tmp/linkem-standalone/).
#   Needs root, jq and awk; iperf3 is used for extra (informational) rows if present.
#   QUICK=1 shortens every measurement (for trying the script, not for the record).
#
# Prints a Markdown report on stdout (tests/linkem/VALIDATION.md is its saved output);
# exits 1 if any row FAILs.

set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

find_binary() {
  local name=$1 c
  for c in "$repo"/build-linkem/tests/linkem/"$name" "$repo"/build*/tests/linkem/"$name" \
           /tmp/linkem-standalone/build/linkem/"$name"; do
    if [[ -x $c ]]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

LINKEM=${1:-$(find_binary mcdist-linkem || true)}
TRAFFIC=${2:-$(find_binary mcdist-linkem-traffic || true)}
if [[ -z $LINKEM || ! -x $LINKEM ]]; then
  echo "validate.sh: mcdist-linkem not found; pass its path as first argument" >&2
  exit 2
fi
if [[ -z $TRAFFIC || ! -x $TRAFFIC ]]; then
  TRAFFIC="$(dirname "$LINKEM")/mcdist-linkem-traffic"
fi
[[ -x $TRAFFIC ]] || { echo "validate.sh: mcdist-linkem-traffic not found" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "validate.sh: needs root (network namespaces, TUN)" >&2; exit 2; }
command -v jq >/dev/null || { echo "validate.sh: needs jq" >&2; exit 2; }

QUICK=${QUICK:-0}
scale() { # scale N: N, or N/10 in QUICK mode
  if [[ $QUICK == 1 ]]; then echo $(($1 / 10)); else echo "$1"; fi
}
# Real-time priority for the RTT measurement programs, if chrt is available.
RT=""
command -v chrt >/dev/null && RT="chrt -f 20"
# Seconds of each throughput measurement.
SECS=20
[[ $QUICK == 1 ]] && SECS=5

T=$(mktemp -d /tmp/linkem-validate.XXXXXX)
run=0
cleanup() {
  rm -rf "$T"
  "$LINKEM" --cleanup --netns-prefix mle >/dev/null 2>&1 || true
}
trap cleanup EXIT

ROWS=()
NOTES=()
failures=0

# row QUANTITY SET MEASURED TOLERANCE VERDICT
row() {
  ROWS+=("| $1 | $2 | $3 | $4 | $5 |")
  [[ $5 == FAIL ]] && failures=$((failures + 1))
  return 0
}
note() { NOTES+=("$1"); }

# linkem ARGS... : one emulator run with a fresh run id; stats in $T/stats.json. On
# failure the run's output is kept in $KEEP and the caller records a FAIL row.
KEEP=/tmp/linkem-validate-failed
linkem() {
  run=$((run + 1))
  rm -f "$T"/*.json "$T"/*.txt
  if ! "$LINKEM" -q --run-id "val$$-$run" --seed 20240601 --stats-json "$T/stats.json" \
      --timeout 120s "$@" >"$T/out.txt" 2>"$T/err.txt"; then
    mkdir -p "$KEEP"
    cp "$T/out.txt" "$KEEP/run$run.out"
    cp "$T/err.txt" "$KEEP/run$run.err"
    echo "validate.sh: run $run failed, output kept in $KEEP/run$run.*" >&2
    return 1
  fi
}

# failed_run QUANTITY: records a FAIL row for an emulator run that did not complete.
failed_run() {
  row "$1" "-" "run failed: $(grep -m1 -E 'error|failed' "$T/err.txt" | tr '|' '/' | cut -c1-120)" "-" FAIL
}

j() { jq -r "$1" "$2"; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
verdict() { awk "BEGIN { exit !($1) }" && echo PASS || echo FAIL; }

# --- RTT -------------------------------------------------------------------------------
rtt_test() { # one-way delay per direction (ms), pings, interval
  local d=$1 count=$2 interval=$3 set
  set=$(calc "%g" "2 * $d")
  # The measuring programs run SCHED_FIFO (like the emulator's forwarding thread) so that
  # other load on the machine does not delay their timestamps.
  linkem --hosts 2 --link "h1:delay=${d}ms" --main h0 \
    --run "h1:$RT $TRAFFIC echo --port 7000" \
    --run "h0:$RT $TRAFFIC ping --to \$MLE_H1_ADDR:7000 --count $count --interval $interval --json $T/ping.json" ||
    { failed_run "RTT, h1 delay=${d}ms each way"; return 0; }
  local avg min p99 max n
  avg=$(j .rtt_avg_ms "$T/ping.json"); min=$(j .rtt_min_ms "$T/ping.json")
  p99=$(j .rtt_p99_ms "$T/ping.json"); max=$(j .rtt_max_ms "$T/ping.json")
  n=$(j .received "$T/ping.json")
  row "RTT, h1 delay=${d}ms each way (mean of $n UDP pings)" "$set ms" "$(calc "%.3f" "$avg") ms" \
    "±1 % (±$(calc "%.2f" "$set / 100") ms)" "$(verdict "($avg - $set) / $set <= 0.01 && ($avg - $set) / $set >= -0.01")"
  note "RTT ${set} ms (ping/echo under '${RT:-normal scheduling}'): min $(calc "%.3f" "$min"), median $(calc "%.3f" "$(j .rtt_median_ms "$T/ping.json")"), mean $(calc "%.3f" "$avg"), p99 $(calc "%.3f" "$p99"), max $(calc "%.3f" "$max") ms; emulator release lateness max $(j .switch.lateness_max_us "$T/stats.json") us, mean $(jq -r '(.switch.lateness_total_us / .switch.releases) | floor' "$T/stats.json") us."
}

# --- loss --------------------------------------------------------------------------------
loss_test() { # rate, datagrams
  local p=$1 n=$2
  linkem --hosts 2 --link "h1.down:loss=$p" \
    --run "h1:$TRAFFIC recv --gro --port 5000 --json $T/r.json" \
    --run "h0:$TRAFFIC send --to \$MLE_H1_ADDR:5000 --count $n --size 100 --gso 64 --rate 150Mbit --expect 1" ||
    { failed_run "Random loss, h1.down loss=$p"; return 0; }
  local lost total emu half
  lost=$(j .lost "$T/r.json"); total=$(j .total "$T/r.json")
  emu=$(j '.hosts[1].down.dropped_loss' "$T/stats.json")
  half=$(calc "%.3g" "1.96 * sqrt($p * (1 - $p) / $total)")
  row "Random loss, h1.down loss=$p ($total datagrams)" "$p" "$(calc "%.4g" "$lost / $total") ($lost lost)" \
    "95 % binomial CI ±$half" "$(verdict "($lost / $total - $p) <= $half && ($lost / $total - $p) >= -$half")"
  note "loss=$p: receiver counted $lost lost of $total; the emulator's h1.down dropped $emu (handshake and END datagrams cross the same link, so it may count a few more)."
}

ge_test() { # rate, mean burst, datagrams
  local p=$1 b=$2 n=$3
  linkem --hosts 2 --link "h1.down:loss=$p,burst=$b" \
    --run "h1:$TRAFFIC recv --gro --port 5000 --json $T/r.json" \
    --run "h0:$TRAFFIC send --to \$MLE_H1_ADDR:5000 --count $n --size 100 --gso 64 --rate 150Mbit --expect 1" ||
    { failed_run "Gilbert-Elliott loss=$p burst=$b"; return 0; }
  local lost total bursts mean r pp rho half_loss half_burst
  lost=$(j .lost "$T/r.json"); total=$(j .total "$T/r.json")
  bursts=$(j .loss_bursts "$T/r.json"); mean=$(j .mean_burst "$T/r.json")
  r=$(calc "%.10g" "1 / $b"); pp=$(calc "%.10g" "$r * $p / (1 - $p)")
  rho=$(calc "%.10g" "1 - $pp - $r")
  # Markov-correlated losses: binomial variance times (1 + rho) / (1 - rho).
  half_loss=$(calc "%.3g" "1.96 * sqrt($p * (1 - $p) / $total * (1 + $rho) / (1 - $rho))")
  # Burst lengths are geometric with mean 1/r and s.d. sqrt(1-r)/r.
  half_burst=$(calc "%.3g" "1.96 * sqrt(1 - $r) / $r / sqrt($bursts)")
  row "Gilbert-Elliott mean burst, loss=$p burst=$b ($bursts bursts)" "$b packets" \
    "$(calc "%.3f" "$mean") packets" "95 % CI ±$half_burst" "$(verdict "($mean - $b) <= $half_burst && ($mean - $b) >= -$half_burst")"
  row "Gilbert-Elliott loss rate, loss=$p burst=$b ($total datagrams)" "$p" \
    "$(calc "%.4g" "$lost / $total")" "95 % CI ±$half_loss (correlated)" \
    "$(verdict "($lost / $total - $p) <= $half_loss && ($lost / $total - $p) >= -$half_loss")"
  note "Gilbert-Elliott $p/$b: max burst $(j .max_burst "$T/r.json") packets."
}

# --- rate limiter ------------------------------------------------------------------------
rate_test() { # set rate (Mbit/s), offered (Mbit/s), seconds
  local set=$1 offered=$2 secs=$3
  linkem --hosts 2 --link "h1.down:rate=${set}Mbit,queue=100" \
    --run "h1:$TRAFFIC recv --port 5000 --json $T/r.json" \
    --run "h0:$TRAFFIC send --to \$MLE_H1_ADDR:5000 --duration ${secs}s --size 1400 --gso 10 --rate ${offered}Mbit --expect 1" ||
    { failed_run "Rate limit, h1.down rate=${set}Mbit"; return 0; }
  # Wire rate: UDP payload + 28 bytes of IP/UDP header per datagram.
  local bytes recvd secs_m wire qd
  bytes=$(j .bytes "$T/r.json"); recvd=$(j .received "$T/r.json"); secs_m=$(j .seconds "$T/r.json")
  wire=$(calc "%.6g" "($bytes + 28 * $recvd) * 8 / $secs_m / 1e6")
  qd=$(j '.hosts[1].down.dropped_queue' "$T/stats.json")
  row "Rate limit, h1.down rate=${set}Mbit offered ${offered} Mbit/s" "$set Mbit/s (IP)" \
    "$(calc "%.2f" "$wire") Mbit/s" "±1 %" "$(verdict "($wire - $set) / $set <= 0.01 && ($wire - $set) / $set >= -0.01")"
  note "rate ${set} Mbit/s: $qd queue drops (drop-tail, 100 packets)."
}

# --- forwarding capacity ---------------------------------------------------------------------
capacity_test() { # label, extra link args, offered Mbit/s, seconds, required Mbit/s
  local label=$1 links=$2 offered=$3 secs=$4 need=$5
  local recv="$TRAFFIC recv --group 239.77.0.1 --port 5000"
  # shellcheck disable=SC2086
  linkem --hosts 3 $links \
    --run "h1:$recv --json $T/r1.json; nstat -az UdpRcvbufErrors > $T/n1.txt" \
    --run "h2:$recv --json $T/r2.json; nstat -az UdpRcvbufErrors > $T/n2.txt" \
    --run "h0:$TRAFFIC send --to 239.77.0.1:5000 --duration ${secs}s --size 1400 --gso 45 --rate ${offered}Mbit --expect 2 --hello-timeout 20s --json $T/s.json" ||
    { failed_run "Capacity, $label at $offered Mbit/s"; return 0; }
  local sent_s f1 f2 fwd_worst emu_drop tx r1 r2 l1 l2 worst lossmax mem sock1 sock2
  sent_s=$(j .seconds "$T/s.json")
  # Payload rate the emulator wrote into each receiver's TUN device.
  f1=$(jq -r --arg s "$sent_s" '(.hosts[1].down.bytes_delivered - 28 * .hosts[1].down.delivered) * 8 / ($s | tonumber) / 1e6' "$T/stats.json")
  f2=$(jq -r --arg s "$sent_s" '(.hosts[2].down.bytes_delivered - 28 * .hosts[2].down.delivered) * 8 / ($s | tonumber) / 1e6' "$T/stats.json")
  fwd_worst=$(awk "BEGIN { print ($f1 < $f2) ? $f1 : $f2 }")
  emu_drop=$(jq -r '[.hosts[] | .up.dropped_loss + .up.dropped_queue + .up.dropped_other + .down.dropped_loss + .down.dropped_queue + .down.dropped_other] | add' "$T/stats.json")
  tx=$(jq -r '[.hosts[].tun_tx_dropped // 0] | add' "$T/stats.json")
  row "Capacity, $label: 1400-byte UDP multicast h0 -> h1+h2 (GSO sender) at $offered Mbit/s, forwarded by the emulator" \
    ">= $need Mbit/s to each receiver" "$(calc "%.1f" "$f1") / $(calc "%.1f" "$f2") Mbit/s, $emu_drop dropped by emulator, $tx by TUN queues" \
    "no drops" "$(verdict "$fwd_worst >= $need && $emu_drop == 0 && $tx == 0")"

  r1=$(calc "%.1f" "$(j .rate_bps "$T/r1.json") / 1e6"); r2=$(calc "%.1f" "$(j .rate_bps "$T/r2.json") / 1e6")
  l1=$(j .lost "$T/r1.json"); l2=$(j .lost "$T/r2.json")
  worst=$(awk "BEGIN { print ($r1 < $r2) ? $r1 : $r2 }")
  lossmax=$(awk "BEGIN { a = $l1 / $(j .total "$T/r1.json"); b = $l2 / $(j .total "$T/r2.json"); print (a > b) ? a : b }")
  sock1=$(awk '/UdpRcvbufErrors/ { print $2 }' "$T/n1.txt"); sock2=$(awk '/UdpRcvbufErrors/ { print $2 }' "$T/n2.txt")
  row "Capacity, $label at $offered Mbit/s, received by the receiver programs (end to end)" \
    ">= $need Mbit/s per receiver" "$r1 / $r2 Mbit/s, loss $(calc "%.2g" "$lossmax")" \
    "loss <= 1e-4" "$(verdict "$worst >= $need && $lossmax <= 1e-4")"
  mem=$(calc "%.1f" "$(j .memory.peak_in_use_bytes "$T/stats.json") / 1e6")
  note "capacity $label at $offered Mbit/s: receivers got $r1 and $r2 Mbit/s (payload), lost $l1 / $l2, of which their own socket buffers dropped $sock1 / $sock2 (UdpRcvbufErrors: receiver process short of CPU); emulator peak packet memory $mem MB; one-way delay h1 min/avg/max $(j .delay_min_ms "$T/r1.json")/$(j .delay_avg_ms "$T/r1.json")/$(j .delay_max_ms "$T/r1.json") ms; emulator release lateness mean $(jq -r '(.switch.lateness_total_us / .switch.releases) | floor' "$T/stats.json") us, max $(j .switch.lateness_max_us "$T/stats.json") us."
}

# iperf3 client command that retries while the server in the other namespace is not yet
# listening (a refused connection is the event we wait on; at most ~5 s).
iperf_client() { # args...
  echo "for i in \$(seq 50); do iperf3 -c \$MLE_H1_ADDR --connect-timeout 2000 $* && break; sleep 0.1; done"
}

iperf_udp_test() { # offered
  local offered=$1
  linkem --hosts 2 --main h0 --main h1 \
    --run "h1:iperf3 -s -1 > /dev/null; nstat -az UdpRcvbufErrors UdpInDatagrams > $T/nstat.txt" \
    --run "h0:$(iperf_client -u -b "$offered" -l 1400 -t 5 --json ">" "$T/iperf.json")" ||
    { failed_run "iperf3 -u -b $offered -l 1400 unicast h0 -> h1"; return 0; }
  if ! jq -e '.end.sum.packets' "$T/iperf.json" >/dev/null 2>&1; then
    row "iperf3 -u -b $offered -l 1400 unicast h0 -> h1" "-" \
      "iperf3 failed: $(jq -r '.error // "no result"' "$T/iperf.json" 2>/dev/null | cut -c1-100)" "-" FAIL
    return 0
  fi
  local sent delivered fwd_rate rcvbuf_err tx_drop ipkts ilost
  sent=$(jq -r '.hosts[0].up.packets_in' "$T/stats.json")
  delivered=$(jq -r '.hosts[1].down.delivered' "$T/stats.json")
  # Forwarded payload rate over the iperf3 test time (5 s).
  fwd_rate=$(jq -r '.end.sum.seconds as $s | (.end.sum.packets - 0) as $p | $s' "$T/iperf.json")
  fwd_rate=$(calc "%.0f" "$delivered * 1400 * 8 / $fwd_rate / 1e6")
  ipkts=$(jq -r '.end.sum.packets' "$T/iperf.json"); ilost=$(jq -r '.end.sum.lost_packets' "$T/iperf.json")
  rcvbuf_err=$(awk '/UdpRcvbufErrors/ { print $2 }' "$T/nstat.txt" 2>/dev/null || echo "?")
  tx_drop=$(jq -r '.hosts[0].tun_tx_dropped // 0' "$T/stats.json")
  row "iperf3 -u -b $offered -l 1400 unicast h0 -> h1 (no GSO: one datagram per syscall; informational)" \
    "-" "emulator forwarded $delivered of $sent datagrams read (~$fwd_rate Mbit/s); $tx_drop dropped in h0's TUN queue before the emulator read them" \
    "-" "$(verdict "$delivered == $sent")"
  note "iperf3 UDP $offered: iperf3 sent $ipkts datagrams and reports $ilost lost: $tx_drop overflowed h0's TUN transmit queue (the emulator reading one datagram per read() could not keep up), $rcvbuf_err overflowed h1's socket buffer (UdpRcvbufErrors: iperf3 reads one datagram per recvmsg), the emulator itself dropped none."
}

iperf_tcp_test() { # links label
  local links=$1 label=$2
  # shellcheck disable=SC2086
  linkem --hosts 2 $links --main h0 \
    --run "h1:iperf3 -s -1 > /dev/null" \
    --run "h0:$(iperf_client -t 5 --json ">" "$T/iperf.json")" ||
    { failed_run "iperf3 TCP h0 -> h1, $label"; return 0; }
  if ! jq -e '.end.sum_received.bits_per_second' "$T/iperf.json" >/dev/null 2>&1; then
    row "iperf3 TCP h0 -> h1, $label" "-" \
      "iperf3 failed: $(jq -r '.error // "no result"' "$T/iperf.json" 2>/dev/null | cut -c1-100)" "-" FAIL
    return 0
  fi
  local bps retr
  bps=$(jq -r '.end.sum_received.bits_per_second / 1e6' "$T/iperf.json" 2>/dev/null || echo 0)
  retr=$(jq -r '.end.sum_sent.retransmits' "$T/iperf.json" 2>/dev/null || echo "?")
  row "iperf3 TCP h0 -> h1, $label (TSO/GSO frames through the emulator)" "-" \
    "$(calc "%.0f" "$bps") Mbit/s, $retr retransmits" "-" "$(verdict "$bps > 0")"
}

# --- run -------------------------------------------------------------------------------------
started=$(date -u +"%Y-%m-%d %H:%M:%S UTC")
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

rtt_test 35 "$(scale 1000)" 10ms
rtt_test 350 "$(scale 300)" 20ms
loss_test 1e-2 "$(scale 1000000)"
loss_test 1e-3 "$(scale 2000000)"
ge_test 1e-2 5 "$(scale 2000000)"
rate_test 100 150 "$SECS"
capacity_test "no impairment" "" 1200 "$SECS" 1000
capacity_test "no impairment" "" 2000 "$SECS" 1000
capacity_test "700 ms one-way delay" "--link h1.down:delay=700ms --link h2.down:delay=700ms" 500 "$SECS" 400
capacity_test "700 ms one-way delay" "--link h1.down:delay=700ms --link h2.down:delay=700ms" 1000 "$SECS" 400
if command -v iperf3 >/dev/null; then
  iperf_udp_test 1G
  iperf_udp_test 2G
  iperf_tcp_test "" "no impairment"
  iperf_tcp_test "--link h1:delay=35ms" "70 ms RTT"
fi

cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "# mcdist-linkem validation"
echo
echo "Run: $started, $(uname -sr), $(nproc) CPUs ($cpu), QUICK=$QUICK."
echo "Load average (1/5/15 min) at start: $load_start; at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "(the machine is shared: other jobs running during the measurements show up here)."
echo "Binary: \`$LINKEM\`."
echo "Produced by \`tests/linkem/validate.sh\`; every row is one emulator run (sender and"
echo "receivers are processes in the emulated hosts on the same machine)."
echo
echo "| quantity | set | measured | tolerance | result |"
echo "|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "Notes:"
echo
for n in "${NOTES[@]}"; do
  echo "- $n"
done
echo
if [[ $failures -eq 0 ]]; then
  echo "All rows PASS."
else
  echo "$failures row(s) FAIL."
fi
[[ $failures -eq 0 ]]
