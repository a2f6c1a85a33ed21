#!/usr/bin/env python3
"""Benchmark: --rate auto (TFMCC, docs/design-notes.md "Rate auto") against
fixed rates, side by side in one run, on loopback: for each ceiling of --ceilings, mcdist-send
--rate auto --rate-max CEILING and mcdist-send --rate R for each fixed rate R of --fixed that is
at most the ceiling, one file of --bytes to one mcdistd. The rows of one repetition run one after
the other, so a loaded machine's noise falls on all of them; the table shows medians over
--repeat, and auto's goodput as a share of the best fixed rate's (the fixed row with the highest
median goodput at or below that ceiling) measured in the same run.

Goodput = file bytes x 8 / wall time of mcdist-send (process start to exit). Every run is
checked: the delivered file must have the source's SHA-256. Also shown per row: passes, the
repair datagrams, and for auto the rate at the end and the lowest after slow start (from the
summary JSON).

With --linkem RATE (e.g. 200M) it runs through tests/linkem instead: h0 sends to one mcdistd on
h1 whose downlink is a RATE bottleneck (drop-tail queue of --queue packets, --delay one way on
every direction), and compares --rate auto --rate-max CEILING (the first of --ceilings) with
fixed rates of 100 % and 95 % of RATE. Shown per row besides goodput: the bottleneck's queue
drops as a share of the packets that reached it (the loss the bottleneck caused). One emulator
per run, so each row's counters are its own. The emulator dates each frame by the time the
sender's kernel handed it over (--ingress-stamp tap, its default); --ingress-stamp tap,read runs
every row a second time with the frames dated when the emulator read them, as before that
existed: a held-up emulator then delivers a burst into the bottleneck's queue. --hold MS:EVERY
stops the emulator for MS ms every EVERY s of each mcdist run (from 3 s in, or from START s in
with MS:EVERY:START; 0 holds slow start up too), to make such hold-ups on purpose.

On loopback, --baseline BUILD adds an auto-baseline row after each auto row: BUILD's mcdist-send
(to this build's mcdistd) in the same rounds, a sender change measured side by side.
With --linkem and --baseline BUILD, one more auto row (auto-baseline) runs mcdist-send and
mcdistd of another build in the same rounds, right after the auto row, through the same
emulator: a change to rate auto measured side by side with what it changes. The table counts,
per auto row, the runs whose rate at the end was within 10 % of the bottleneck.

With --linkem and --tcp, one more auto row shares the bottleneck with a TCP flow (iperf3 from h0
to h1, cubic unless --tcp-congestion says otherwise, started 2 s before mcdist-send): it prints
mcdist's goodput and TCP's rate over the same interval beside the fair share (half the link).
With --tcp-reference CC, one more row puts a second TCP flow (iperf3 -C CC, started 2 s after
the --tcp-congestion flow, run for --tcp-seconds) where mcdist would be: how two TCP flows share
the same bottleneck, the yardstick for auto's share (e.g. reno beside cubic).
With --tcp-alone, one more row sends --bytes over TCP alone (iperf3 -n, --tcp-congestion) through
the same bottleneck: TCP's own start-up loss on this link (its repairs column counts TCP's
retransmits), the yardstick for auto's slow start.
With --history, the auto rows' sender runs on a pseudo-terminal so that it draws its progress
line, and the bench prints the sending rate of every 0.5 s and, after the first 5 s, how often
it was within 10 % of the bottleneck (the target: "settles within 10 %"). That rate counts
file bytes (1400 of every 1448-byte packet), the bottleneck whole IP packets: the check is
strict by 3.3 %.

--log-level LEVEL runs the auto rows' sender and (with --linkem) mcdistd at that log level
(debug: the sender logs every rate report, the receiver every loss event); every run's output is
kept in --dir as sender-MODE-RATE-RUN.log (on loopback the auto rows' only), and with --linkem
mcdistd's as mcdistd-MODE-RATE-RUN.log and the emulator's counters as linkem-MODE-RATE-RUN.json
(with two --ingress-stamp modes, MODE-RATE-STAMP-RUN). --no-fixed leaves the fixed rows out of
--linkem runs, to repeat the auto row many times.

With --uftp, UFTP 4.10 with its TFMCC congestion control (`uftp -C tfmcc:max=CEILING`, uftpd
receiving; on loopback one row per ceiling, through the emulator one for the first ceiling) runs
in the same rounds, and the tables give auto's goodput over UFTP's. A UFTP run that fails or
delivers a file that differs from the source counts as goodput 0.

With --norm, NORM with its congestion control (NORM-CC, RFC 5740 section 5.5: NormSetCongestionControl
with NormSetTxRateBounds(-1, CEILING); tests/bench/norm, built with -DMCDIST_BENCH_PEERS=ON) runs
in the same rounds, one row per ceiling on loopback and one for the first ceiling through the
emulator, and the tables give auto's goodput over NORM-CC's. UDPcast has no congestion control
(its rate governor is the fixed --max-bitrate; Debian ships no adaptive governor module), so it
has no auto row here: with --udpcast it runs unpaced (no --max-bitrate), held back only by its
slice acknowledgements, the way a user who does not know the path's rate would run it.

Every row shows CPU seconds per delivered GB of the sender and of the receiver (wait4 for the
per-run processes, /proc for the loopback daemons), beside goodput.

Needs root (`ip link set lo multicast on`; namespaces and TUN for --linkem) and a build
(deploy/build.sh).

usage: rate_auto_bench.py [--build DIR] [--dir DIR] [--bytes N] [--repeat N]
                          [--ceilings 2G,8G] [--fixed 1G,2G,4G,5G,8G]
                          [--linkem 200M [--delay 10ms] [--queue 100] [--tcp] [--history]
                           [--tcp-congestion cubic] [--tcp-reference reno [--tcp-seconds 30]]
                           [--tcp-alone]
                           [--no-fixed] [--ingress-stamp tap,read] [--hold 25:2[:0]]]
                          [--log-level debug]
                          [--uftp] [--norm] [--udpcast]
"""

import argparse
import json
import os
import pty
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

import peers
from linkem_run import Emulator, stop_proc
from uftp_compare import (Child, clear, digest, need_programs, run_norm, run_udpcast, sender_run,
                          uftp_passes, write_field)

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def log(*a):
    print(*a, flush=True)


def bps(rate):
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(rate[:-1]) * mult[rate[-1]] if rate[-1] in mult else float(rate)


def source_field(base, size):
    """Empties `base` and writes the file set: one model field of `size` bytes in base/src.
    Returns (the source directory, the field's digest)."""
    clear(base)
    src = os.path.join(base, "src")
    os.makedirs(src)
    src_file = os.path.join(src, "model_field.grib2")
    write_field(src_file, size)
    return src, digest(src_file)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--dir", default="/dev/shm/mcdist-rate-auto")
    ap.add_argument("--bytes", type=int, default=1_000_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ceilings", default="2G,8G")
    ap.add_argument("--fixed", default="1G,2G,4G,5G,8G")
    ap.add_argument("--linkem", default=None, help="bottleneck rate: run through tests/linkem")
    ap.add_argument("--delay", default="10ms", help="--linkem: one-way delay of every direction")
    ap.add_argument("--queue", default="100", help="--linkem: bottleneck queue, packets")
    ap.add_argument("--hold", default=None, metavar="MS:EVERY[:START]",
                    help="--linkem: stop the emulator (SIGSTOP) for MS milliseconds every EVERY "
                         "seconds of each mcdist run, from START seconds in (default 3; 0 "
                         "holds slow start up too), as this shared machine sometimes holds its "
                         "forwarding thread up, e.g. 25:2 or 12:0.1:0")
    ap.add_argument("--ingress-stamp", default="tap", metavar="MODE[,MODE]",
                    help="--linkem: mcdist-linkem --ingress-stamp; 'tap,read' runs every row "
                         "with each, side by side")
    ap.add_argument("--tcp", action="store_true",
                    help="--linkem: one more auto row that shares the bottleneck with a TCP "
                         "flow (iperf3 h0 to h1, started 2 s before); prints both rates")
    ap.add_argument("--history", action="store_true",
                    help="--linkem: run the auto rows' sender on a pseudo-terminal and print "
                         "its sending rate every 0.5 s (its progress line), and after 5 s how "
                         "often it was within 10 %% of the bottleneck")
    ap.add_argument("--tcp-congestion", default="cubic",
                    help="--tcp: the TCP flow's congestion control (iperf3 -C; TFMCC is to be "
                         "fair to loss-based TCP such as cubic or reno; bbr ignores loss)")
    ap.add_argument("--tcp-reference", default=None, metavar="CC",
                    help="--linkem: one more row in which a second TCP flow (iperf3 -C CC) "
                         "takes the place of mcdist beside the --tcp-congestion flow, for "
                         "--tcp-seconds: how two TCP flows share the same bottleneck")
    ap.add_argument("--tcp-alone", action="store_true",
                    help="--linkem: one more row in which a TCP flow of --tcp-congestion "
                         "(iperf3 -n BYTES) alone sends --bytes through the bottleneck: its "
                         "goodput and the bottleneck drops (TCP's own slow start on the same "
                         "link, the yardstick for auto's start-up loss)")
    ap.add_argument("--tcp-seconds", type=float, default=30,
                    help="--tcp-reference: how long the second TCP flow runs, s (default 30)")
    ap.add_argument("--no-fixed", action="store_true",
                    help="--linkem: leave out the fixed-rate rows (many auto runs quickly)")
    ap.add_argument("--log-level", default=None,
                    help="--log-level of the auto rows' mcdist-send and (--linkem) mcdistd, e.g. "
                         "debug; each run's output is kept in --dir")
    ap.add_argument("--baseline", default=None, metavar="BUILD",
                    help="one more auto row with mcdist-send and (--linkem) mcdistd of another "
                         "build (e.g. main before a change, deploy/build.sh /tmp/base), in the "
                         "same rounds (and the same emulator); on loopback after each auto row, "
                         "to this build's mcdistd")
    ap.add_argument("--uftp", action="store_true",
                    help="also UFTP 4.10 -C tfmcc (RFC 4654) with each ceiling as its max rate, "
                         "uftpd as the receiver, in the same rounds")
    ap.add_argument("--norm", action="store_true",
                    help="also NORM with NORM-CC, each ceiling as its max rate (tests/bench/norm)")
    ap.add_argument("--udpcast", action="store_true",
                    help="also UDPcast unpaced (it has no congestion control)")
    ap.add_argument("--norm-build", default=None,
                    help="build tree holding tests/bench/norm (default: --build)")
    args = ap.parse_args()
    args.norm_programs = None
    if args.norm:
        args.norm_programs = peers.norm_programs(args.norm_build or args.build)
        if not args.norm_programs:
            sys.exit("NORM peer not built: cmake -DMCDIST_BENCH_PEERS=ON, then ninja "
                     "mcdist-norm-send mcdist-norm-recv (needs libnorm-dev)")
    if args.udpcast and not peers.udpcast_available():
        sys.exit("udp-sender/udp-receiver missing: deploy/install-deps.sh --bench")
    if args.linkem:
        return linkem_main(args)
    if os.geteuid() != 0:
        sys.exit("rate_auto_bench.py needs root (ip link set lo multicast on)")
    subprocess.run(["ip", "link", "set", "lo", "multicast", "on"], check=True)
    send = os.path.join(args.build, "sender", "mcdist-send")
    recv = os.path.join(args.build, "receiver", "mcdistd")
    need_programs(send, recv)

    base = args.dir
    src, src_digest = source_field(base, args.bytes)
    dest, temp = os.path.join(base, "dest"), os.path.join(base, "temp")
    for d in (dest, temp):
        clear(d)
    group = "239.192.79.%d:%d" % (os.getpid() % 200 + 1, 4900 + os.getpid() % 1000)
    daemon = Child([recv, "--id", "bench", "--group", group, "--interface", "127.0.0.1", "--dest",
                    dest, "--temp", temp, "--status-interval", "1h", "--http", "off"] +
                   peers.allow_unsigned(recv),
                   os.path.join(base, "mcdistd.log"))

    ceilings = args.ceilings.split(",")
    fixed = [r for r in args.fixed.split(",") if any(bps(r) <= bps(c) for c in ceilings)]
    rows = [("fixed", r) for r in fixed]
    for c in ceilings:
        rows += [("auto", c)] + ([("auto-baseline", c)] if args.baseline else [])
    base_send = None
    if args.baseline:
        base_send = os.path.join(args.baseline, "sender", "mcdist-send")
        need_programs(base_send)
    uftpd = None
    if args.uftp:
        need_programs(shutil.which("uftp") or "uftp", shutil.which("uftpd") or "uftpd")
        rows += [("uftp", c) for c in ceilings]
        uf_dest = os.path.join(base, "uftp-dest")
        clear(uf_dest)
        uftpd = Child(["uftpd", "-d", "-I", "127.0.0.1", "-M", "230.4.4.1", "-D", uf_dest, "-U",
                       "0x01020304", "-B", "104857600", "-q", "-x", "1"],
                      os.path.join(base, "uftpd.log"))
    if args.norm:
        rows += [("norm-cc", c) for c in ceilings]
    if args.udpcast:
        rows += [("udpcast", "unpaced")]
    expected = peers.tree_digests(src)
    norm_group = "239.195.79.%d:%d" % (os.getpid() % 200 + 1, 2 * (3000 + os.getpid() % 1000))
    udp_group = "239.196.79.%d" % (os.getpid() % 200 + 1)
    udp_portbase = 2 * (4000 + os.getpid() % 1000)
    samples = {row: [] for row in rows}
    try:
        for rep in range(args.repeat):
            for mode, r in rows:
                if mode in ("norm-cc", "udpcast"):
                    if mode == "norm-cc":
                        wall, rounds, _, ok, scpu, rcpu = run_norm(
                            args.norm_programs, norm_group, src, expected, args.bytes, None,
                            os.path.join(base, "norm-dest"), base, cc_max=r)
                    else:
                        wall, rounds, _, ok, scpu, rcpu = run_udpcast(
                            udp_group, udp_portbase, src, expected, args.bytes, None,
                            os.path.join(base, "udp-dest"), base)
                    samples[(mode, r)].append({"goodput": args.bytes * 8 / wall if ok else 0,
                                               "wall": wall, "passes": rounds, "repairs": 0,
                                               "end": 0, "lowest": 0, "ok": ok, "scpu": scpu,
                                               "rcpu": rcpu})
                    log("run %d: %-7s %-4s %.3f s  %5.0f Mbit/s  %s" % (
                        rep + 1, mode, r, wall, args.bytes * 8 / wall / 1e6,
                        "ok" if ok else "WRONG OR MISSING FILE"))
                    continue
                if mode == "uftp":
                    clear(uf_dest)
                    rcpu0 = uftpd.cpu()
                    code, wall, scpu, out = sender_run(uftp_tfmcc("127.0.0.1", "0x01020304", r, src))
                    time.sleep(0.05)
                    rcpu = uftpd.cpu() - rcpu0
                    ok = uftp_ok(code, os.path.join(uf_dest, "src", "model_field.grib2"), src_digest)
                    samples[(mode, r)].append({"goodput": args.bytes * 8 / wall if ok else 0,
                                               "wall": wall, "passes": uftp_passes(out),
                                               "repairs": 0, "end": 0, "lowest": 0, "ok": ok,
                                               "scpu": scpu, "rcpu": rcpu})
                    log("run %d: uftp  %-4s %.3f s  %5.0f Mbit/s  %d pass(es)  %s" % (
                        rep + 1, r, wall, args.bytes * 8 / wall / 1e6, uftp_passes(out),
                        "ok" if ok else "WRONG OR MISSING FILE"))
                    continue
                clear(dest)
                summary = os.path.join(base, "summary.json")
                rate_args = ["--rate", r] if mode == "fixed" else ["--rate", "auto", "--rate-max", r]
                auto = mode.startswith("auto")
                log_args = ["--log-level", args.log_level] if args.log_level and auto else ["-q"]
                program = base_send if mode == "auto-baseline" else send
                rcpu0 = daemon.cpu()
                code, wall, scpu, out = sender_run(
                    [program, "--group", group, "--interface", "127.0.0.1", "--receivers",
                     "bench", "--summary-json", summary] + log_args + rate_args + [src])
                time.sleep(0.05)
                rcpu = daemon.cpu() - rcpu0
                if args.log_level and auto:
                    with open(os.path.join(base, "sender-%s-%s-%d.log" % (mode, r, rep + 1)),
                              "w") as f:
                        f.write(out)  # every auto run's, for when one looks wrong
                if code != 0:
                    sys.exit("mcdist-send failed (%d):\n%s" % (code, out))
                with open(summary) as f:
                    s = json.load(f)
                got = os.path.join(dest, "src", "model_field.grib2")
                ok = os.path.exists(got) and digest(got) == src_digest
                rate = s.get("rate", {})
                samples[(mode, r)].append({
                    "goodput": args.bytes * 8 / wall, "wall": wall, "passes": s["passes"],
                    "repairs": s["repair_datagrams"], "end": rate.get("bps", 0),
                    "lowest": rate.get("lowest_bps", 0), "ok": ok, "scpu": scpu, "rcpu": rcpu})
                log("run %d: %-5s %-4s %.3f s  %5.0f Mbit/s  %d pass(es)  %d repairs  end %.0f M  "
                    "lowest %.0f M  %s" % (rep + 1, mode, r, wall, args.bytes * 8 / wall / 1e6,
                                           s["passes"], s["repair_datagrams"],
                                           rate.get("bps", 0) / 1e6, rate.get("lowest_bps", 0) / 1e6,
                                           "ok" if ok else "WRONG OR MISSING FILE"))
    finally:
        daemon.stop()
        if uftpd:
            uftpd.stop()

    med = lambda row, k: statistics.median(x[k] for x in samples[row])
    log("")
    log("%d bytes, loopback, median of %d, load %.1f at the end" % (args.bytes, args.repeat,
                                                                    os.getloadavg()[0]))
    gbytes = args.bytes / 1e9
    log("| row | goodput Mbit/s | wall s | passes | repairs | end rate Mbit/s | lowest Mbit/s "
        "| sender CPU s/GB | receiver CPU s/GB | all ok |")
    log("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        log("| %s %s | %.0f | %.3f | %.0f | %s | %s | %s | %.2f | %.2f | %s |" % (
            row[0], row[1], med(row, "goodput") / 1e6, med(row, "wall"), med(row, "passes"),
            "%.0f" % med(row, "repairs") if row[0] not in ("uftp", "tcp+tcp", "norm-cc", "udpcast") else "-",
            "%.0f" % (med(row, "end") / 1e6) if row[0].startswith("auto") else "-",
            "%.0f" % (med(row, "lowest") / 1e6) if row[0].startswith("auto") else "-",
            med(row, "scpu") / gbytes, med(row, "rcpu") / gbytes,
            all(x["ok"] for x in samples[row])))
    log("(passes: NORM-CC's watermark rounds; for UDPcast its retransmitted packets)")
    log("")
    log("| ceiling | auto Mbit/s | best fixed at or below | its Mbit/s | auto / best |%s%s%s" % (
        " baseline auto Mbit/s | baseline / best |" if args.baseline else "",
        " UFTP -C tfmcc Mbit/s | auto / UFTP |" if args.uftp else "",
        " NORM-CC Mbit/s | auto / NORM-CC |" if args.norm else ""))
    log("|---|---|---|---|---|%s%s%s" % ("---|---|" if args.baseline else "",
                                      "---|---|" if args.uftp else "",
                                      "---|---|" if args.norm else ""))
    for c in ceilings:
        cands = [("fixed", r) for r in fixed if bps(r) <= bps(c)]
        best = max(cands, key=lambda row: med(row, "goodput")) if cands else None
        a = med(("auto", c), "goodput")
        b = med(best, "goodput") if best else 0
        share = lambda x: "%.2f" % (x / b) if b > 0 else "-"
        more = ""
        if args.baseline:
            ab = med(("auto-baseline", c), "goodput")
            more += " %.0f | %s |" % (ab / 1e6, share(ab))
        if args.uftp:
            u = med(("uftp", c), "goodput")
            more += " %.0f | %s |" % (u / 1e6, "%.2f" % (a / u) if u > 0 else "-")
        if args.norm:
            n = med(("norm-cc", c), "goodput")
            more += " %.0f | %s |" % (n / 1e6, "%.2f" % (a / n) if n > 0 else "-")
        log("| %s | %.0f | %s | %s | %s |%s" % (c, a / 1e6, best[1] if best else "-",
                                              "%.0f" % (b / 1e6) if best else "-", share(a), more))


def uftp_tfmcc(interface, client, ceiling, src):
    """uftp's command line: UFTP 4.10's TFMCC congestion control (-C tfmcc, RFC 4654) with
    `ceiling` as its max rate in UFTP's Kbps (1024 bit/s, uftp_compare.uftp_rate), a closed group
    of one client, 100 MB socket buffers, no encryption (as uftp_compare.py and
    eumetsat_matrix.py)."""
    return ["uftp", "-I", interface, "-M", "230.4.4.1", "-P", "230.5.5.1", "-H", client, "-Y", "none",
            "-B", "104857600", "-C", "tfmcc:max=%d" % int(bps(ceiling) / 1024), src]


def uftp_ok(code, got, src_digest):
    """uftp exited 0 and uftpd's copy of the field (DEST/src/model_field.grib2) is the source's."""
    return code == 0 and os.path.exists(got) and digest(got) == src_digest


def find_down(stats, host):
    """The `down` counters of `host` in mcdist-linkem's --stats-json output."""
    if isinstance(stats, dict):
        if host in (stats.get("name"), stats.get("host")) and isinstance(stats.get("down"), dict):
            return stats["down"]
        if isinstance(stats.get(host), dict) and isinstance(stats[host].get("down"), dict):
            return stats[host]["down"]
        vals = stats.values()
    elif isinstance(stats, list):
        vals = stats
    else:
        return None
    for v in vals:
        r = find_down(v, host)
        if r is not None:
            return r
    return None


def linkem_main(args):
    if os.geteuid() != 0:
        sys.exit("rate_auto_bench.py --linkem needs root (namespaces, TUN)")
    linkem = os.path.join(args.build, "tests", "linkem", "mcdist-linkem")
    send = os.path.join(args.build, "sender", "mcdist-send")
    recv = os.path.join(args.build, "receiver", "mcdistd")
    need_programs(linkem, send, recv)
    programs = {"": (send, recv)}
    if args.baseline:
        programs["baseline"] = (os.path.join(args.baseline, "sender", "mcdist-send"),
                                os.path.join(args.baseline, "receiver", "mcdistd"))
        need_programs(*programs["baseline"])
    os.environ.setdefault("MCDIST_NETNS_PREFIX", "rate13")
    base = args.dir
    src, src_digest = source_field(base, args.bytes)
    bottleneck = bps(args.linkem)
    ceiling = args.ceilings.split(",")[0]
    rows = ([] if args.no_fixed else
            [("fixed", args.linkem), ("fixed", "%dM" % int(bottleneck * 0.95 / 1e6))]) + \
        [("auto", ceiling)] + ([("auto-baseline", ceiling)] if args.baseline else [])
    if args.uftp:
        need_programs(shutil.which("uftp") or "uftp", shutil.which("uftpd") or "uftpd")
        rows.append(("uftp", ceiling))
    if args.norm:
        rows.append(("norm-cc", ceiling))
    if args.udpcast:
        rows.append(("udpcast", "unpaced"))
    expected = peers.tree_digests(src)
    if args.tcp:
        need_programs(shutil.which("iperf3") or "iperf3")
        rows.append(("auto+tcp", ceiling))
    if args.tcp_reference:
        need_programs(shutil.which("iperf3") or "iperf3")
        rows.append(("tcp+tcp", args.tcp_reference))
    if args.tcp_alone:
        need_programs(shutil.which("iperf3") or "iperf3")
        rows.append(("tcp", args.tcp_congestion))
    links = ["all:delay=%s" % args.delay, "h1.down:rate=%s,queue=%s" % (
        args.linkem.replace("M", "Mbit").replace("G", "Gbit"), args.queue)]
    stamps = args.ingress_stamp.split(",")
    if any(st not in ("tap", "read") for st in stamps):
        sys.exit("--ingress-stamp takes tap, read or both")
    if len(stamps) > 1:
        # One row per ingress stamping, the rows of a repetition one after the other.
        rows = [(mode, r, st) for mode, r in rows for st in stamps]
    samples = {row: [] for row in rows}
    for rep in range(args.repeat):
        for row in rows:
            mode, r = row[0], row[1]
            stamp = row[2] if len(row) > 2 else stamps[0]
            work = os.path.join(base, "run")
            clear(work)
            stats_json = os.path.join(work, "linkem-stats.json")
            emu = Emulator(linkem, work, links, hosts=2, seed=rep + 1, stats_json=stats_json,
                           extra=["--ingress-stamp", stamp])
            if mode == "tcp+tcp":
                # The reference: a TCP flow of congestion control r where mcdist would be.
                first = TcpFlow(emu, work, args.tcp_congestion)
                time.sleep(2)
                second = TcpFlow(emu, work, r, port=5292, name="iperf3-second.json")
                t_start = time.time()
                time.sleep(args.tcp_seconds)
                t_end = time.time()
                second_bps = second.rate_between(t_start, t_end)
                first_bps = first.rate_between(t_start, t_end)
                emu.stop()
                with open(stats_json) as f:
                    down = find_down(json.load(f), "h1") or {}
                drops, pin = down.get("dropped_queue", 0), down.get("packets_in", 0) or 1
                samples[row].append({
                    "goodput": second_bps, "wall": t_end - t_start, "passes": 0, "repairs": 0,
                    "end": 0, "lowest": 0, "drop": drops / pin, "ok": second_bps > 0,
                    "tcp": first_bps})
                log("run %d: tcp %s beside tcp %s  %.1f s  %5.1f Mbit/s beside %5.1f Mbit/s  "
                    "bottleneck drops %.2f %%" % (rep + 1, r, args.tcp_congestion, t_end - t_start,
                                                  second_bps / 1e6, first_bps / 1e6,
                                                  100 * drops / pin))
                continue
            if mode == "tcp":
                # TCP alone with the same bytes: its own start-up loss on this link.
                server = subprocess.Popen(["ip", "netns", "exec", emu.ns(1), "iperf3", "-s", "-1",
                                           "-p", "5293"], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
                time.sleep(0.3)
                try:
                    code, wall, _, out = sender_run(["ip", "netns", "exec", emu.ns(0), "iperf3",
                                                     "-c", emu.addr(1), "-p", "5293", "-n",
                                                     str(args.bytes), "-C", r, "-J"])
                finally:
                    stop_proc(server)
                    emu.stop()
                with open(stats_json) as f:
                    down = find_down(json.load(f), "h1") or {}
                drops, pin = down.get("dropped_queue", 0), down.get("packets_in", 0) or 1
                try:
                    retr = json.loads(out)["end"]["sum_sent"].get("retransmits", 0)
                except (ValueError, KeyError):
                    retr = -1
                ok = code == 0 and retr >= 0
                samples[row].append({
                    "goodput": args.bytes * 8 / wall if ok else 0, "wall": wall, "passes": 0,
                    "repairs": retr, "end": 0, "lowest": 0, "drop": drops / pin, "ok": ok})
                log("run %d: tcp %s alone  %.3f s  %5.1f Mbit/s  %d retransmits  bottleneck drops "
                    "%.2f %%  %s" % (rep + 1, r, wall, args.bytes * 8 / wall / 1e6, retr,
                                     100 * drops / pin, "ok" if ok else "IPERF3 FAILED"))
                continue
            if mode == "uftp":
                uf_dest = os.path.join(work, "uftp-dest")
                os.makedirs(uf_dest)
                logf = open(os.path.join(work, "uftpd.log"), "w")
                daemon = subprocess.Popen(["ip", "netns", "exec", emu.ns(1), "uftpd", "-d", "-I",
                                           "mle0", "-M", "230.4.4.1", "-D", uf_dest, "-U",
                                           "0x00000002", "-B", "104857600", "-q"],
                                          stdout=logf, stderr=subprocess.STDOUT)
                time.sleep(0.5)
                try:
                    code, wall, scpu, out = sender_run(["ip", "netns", "exec", emu.ns(0)] +
                                                       uftp_tfmcc("mle0", "0x00000002", r, src))
                finally:
                    rcpu = stop_reaped(daemon)
                    logf.close()
                    emu.stop()
                with open(stats_json) as f:
                    down = find_down(json.load(f), "h1") or {}
                ok = uftp_ok(code, os.path.join(uf_dest, "src", "model_field.grib2"), src_digest)
                drops, pin = down.get("dropped_queue", 0), down.get("packets_in", 0) or 1
                samples[row].append({
                    "goodput": args.bytes * 8 / wall if ok else 0, "wall": wall,
                    "passes": uftp_passes(out), "repairs": 0, "end": 0, "lowest": 0,
                    "drop": drops / pin, "ok": ok, "scpu": scpu, "rcpu": rcpu})
                log("run %d: uftp  %-5s %.3f s  %5.1f Mbit/s  %d pass(es)  bottleneck drops %.2f %%  "
                    "%s" % (rep + 1, r, wall, args.bytes * 8 / wall / 1e6, uftp_passes(out),
                            100 * drops / pin, "ok" if ok else "WRONG OR MISSING FILE"))
                continue
            if mode in ("norm-cc", "udpcast"):
                pdest = os.path.join(work, mode + "-dest")
                os.makedirs(pdest)
                logf = open(os.path.join(work, mode + "-recv.log"), "w")
                if mode == "norm-cc":
                    nsend, nrecv = args.norm_programs
                    group = "239.195.80.%d:%d" % (os.getpid() % 200 + 1, 2 * (3100 + os.getpid() % 1000))
                    # GRTT: the path's RTT (both directions' delay); buffers its BDP at the ceiling.
                    rtt = 2 * float(args.delay.rstrip("ms")) / 1000
                    buf = peers.norm_buffer(r, max(rtt, 0.001))
                    recv_args = peers.norm_recv_cmd(nrecv, group, "mle0", 2, pdest, 1, buffer=buf)
                    send_args = peers.norm_send_cmd(nsend, group, "mle0", src, [2], cc_max=r,
                                                    grtt=max(rtt, 0.001), buffer=buf)
                    what = "norm"
                else:
                    portbase = 2 * (4100 + os.getpid() % 1000)
                    mcast = "239.196.80.%d" % (os.getpid() % 200 + 1)
                    send_args, what = peers.udpcast_send_cmd(src, "mle0", portbase, mcast, None, 1)
                    recv_args = peers.udpcast_recv_cmd(src, pdest, "mle0", portbase, what, mcast)
                daemon = subprocess.Popen(["ip", "netns", "exec", emu.ns(1)] + recv_args,
                                          stdout=logf, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
                time.sleep(0.5)
                try:
                    start = time.monotonic()
                    sp = subprocess.Popen(["ip", "netns", "exec", emu.ns(0)] + send_args,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)
                    out = sp.stdout.read().decode("utf-8", "replace")
                    code, scpu, _ = peers.wait_rusage(sp, 600)
                    wall = time.monotonic() - start
                finally:
                    rcpu = stop_reaped(daemon, gentle=True)
                    logf.close()
                    emu.stop()
                with open(stats_json) as f:
                    down = find_down(json.load(f), "h1") or {}
                ok = code == 0 and peers.verified_bytes(expected, pdest) == args.bytes
                drops, pin = down.get("dropped_queue", 0), down.get("packets_in", 0) or 1
                samples[row].append({
                    "goodput": args.bytes * 8 / wall if ok else 0, "wall": wall,
                    "passes": 0, "repairs": 0, "end": 0, "lowest": 0,
                    "drop": drops / pin, "ok": ok, "scpu": scpu, "rcpu": rcpu})
                log("run %d: %-7s %-5s %.3f s  %5.1f Mbit/s  bottleneck drops %.2f %%  %s" % (
                    rep + 1, mode, r, wall, args.bytes * 8 / wall / 1e6, 100 * drops / pin,
                    "ok" if ok else "WRONG OR MISSING FILE"))
                continue
            send, recv = programs["baseline" if mode == "auto-baseline" else ""]
            dest, temp = os.path.join(work, "dest"), os.path.join(work, "temp")
            group = "239.192.80.%d:%d" % (os.getpid() % 200 + 1, 5000 + os.getpid() % 1000)
            logf = open(os.path.join(work, "mcdistd.log"), "w")
            log_args = ["--log-level", args.log_level] if args.log_level and mode != "fixed" else []
            daemon = subprocess.Popen(["ip", "netns", "exec", emu.ns(1), recv, "--id", "bench",
                                       "--group", group, "--interface", emu.addr(1), "--dest", dest,
                                       "--temp", temp, "--status-interval", "1h", "--http", "off"] +
                                      peers.allow_unsigned(recv) + log_args,
                                      stdout=logf, stderr=subprocess.STDOUT)
            time.sleep(0.5)
            summary = os.path.join(work, "summary.json")
            rate_args = ["--rate", r] if mode == "fixed" else ["--rate", "auto", "--rate-max", r]
            tcp = None
            if mode == "auto+tcp":
                # A TCP flow (iperf3, --tcp-congestion) through the same
                # bottleneck, started first so it holds its share when mcdist comes.
                tcp = TcpFlow(emu, work, args.tcp_congestion)
                time.sleep(2)
            t_start = t_end = time.time()
            holder = EmulatorHolds(emu, args.hold) if args.hold else None
            try:
                cmd = (["ip", "netns", "exec", emu.ns(0), send] +
                       ([] if args.history and mode != "fixed" else ["--no-progress"]) +
                       ["--group", group, "--interface", emu.addr(0), "--receivers", "bench",
                        "--fallback", "off", "--summary-json", summary] + rate_args +
                       log_args + [src])
                scpu = float("nan")  # unknown on the pseudo-terminal path
                if args.history and mode != "fixed":
                    code, wall, out, history = sender_run_history(cmd)
                else:
                    code, wall, scpu, out = sender_run(cmd)
                    history = []
                t_end = time.time()
            finally:
                holds = holder.stop() if holder else 0
                tcp_bps = tcp.rate_between(t_start, t_end) if tcp else 0
                rcpu = stop_reaped(daemon)
                logf.close()
                emu.stop()
            tag = "%s-%s%s-%d" % (mode, r, "-" + stamp if len(stamps) > 1 else "", rep + 1)
            with open(os.path.join(base, "sender-%s.log" % tag), "w") as f:
                f.write(out)  # every run's, for when a row looks wrong
            shutil.copyfile(os.path.join(work, "mcdistd.log"),
                            os.path.join(base, "mcdistd-%s.log" % tag))
            if code != 0:
                sys.exit("mcdist-send failed (%d):\n%s" % (code, out))
            with open(summary) as f:
                s = json.load(f)
            with open(stats_json) as f:
                stats = json.load(f)
            down = find_down(stats, "h1") or {}
            # The emulator's own timing error (a release later than due): when it is held up, what
            # arrives meanwhile reaches its queue at once, and the queue may drop what the link
            # would have carried.
            late_ms = stats.get("switch", {}).get("lateness_max_us", 0) / 1e3
            # With --ingress-stamp tap, how long a frame of the sender's waited on its device
            # before the emulator read it (the hold-up the tap's dates bridge).
            h0 = next((h for h in stats.get("hosts", []) if h.get("name") == "h0"), {})
            waited = h0.get("ingress", {}).get("max_wait_us")
            shutil.copyfile(stats_json,
                            os.path.join(base, "linkem-%s.json" % tag))
            got = os.path.join(dest, "src", "model_field.grib2")
            ok = os.path.exists(got) and digest(got) == src_digest
            rate = s.get("rate", {})
            drops = down.get("dropped_queue", 0)
            pin = down.get("packets_in", 0) or 1
            samples[row].append({
                "goodput": args.bytes * 8 / wall, "wall": wall, "passes": s["passes"],
                "repairs": s["repair_datagrams"], "end": rate.get("bps", 0),
                "lowest": rate.get("lowest_bps", 0), "drop": drops / pin, "ok": ok,
                "tcp": tcp_bps, "scpu": scpu, "rcpu": rcpu})
            log("run %d: %-5s %-5s %s%.3f s  %5.1f Mbit/s  %d pass(es)  %d repairs  bottleneck "
                "drops %.2f %%  end %.0f M  lowest %.0f M  emulator late %.1f ms at most%s  %s%s" % (
                    rep + 1, mode, r, stamp + "-dated  " if len(stamps) > 1 else "", wall,
                    args.bytes * 8 / wall / 1e6, s["passes"],
                    s["repair_datagrams"], 100 * drops / pin, rate.get("bps", 0) / 1e6,
                    rate.get("lowest_bps", 0) / 1e6, late_ms,
                    ("" if waited is None else ", frames waited %.1f ms at most" % (waited / 1e3)) +
                    (", %d holds of %s ms" % (holds, args.hold.split(":")[0]) if holder else ""),
                    "ok" if ok else "WRONG OR MISSING FILE",
                    "  TCP meanwhile %.1f Mbit/s" % (tcp_bps / 1e6) if tcp else ""))
            if history:
                log_history(history, bottleneck, mode)
    med = lambda row, k: statistics.median(x[k] for x in samples[row])
    log("")
    log("%d bytes through a %s bottleneck (queue %s packets, %s one way per direction), median "
        "of %d" % (args.bytes, args.linkem, args.queue, args.delay, args.repeat))
    log("| row | goodput Mbit/s | share of the bottleneck | wall s | passes | repairs | "
        "bottleneck drops | end rate Mbit/s | lowest Mbit/s | runs ending within 10 % | "
        "sender CPU s/GB | receiver CPU s/GB | all ok |")
    log("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cpu_gb = lambda row, k: ("%.2f" % (statistics.median(x.get(k, 0) for x in samples[row]) /
                                       (args.bytes / 1e9))
                             if all(k in x for x in samples[row]) else "-")
    for row in rows:
        held = ("%d of %d" % (sum(x["end"] >= 0.9 * bottleneck for x in samples[row]),
                              len(samples[row])) if row[0].startswith("auto") else "-")
        log("| %s %s%s | %.1f | %.2f | %.2f | %.0f | %s | %.2f %% | %s | %s | %s | %s | %s | %s |" % (
            row[0], row[1], " " + row[2] + "-dated" if len(row) > 2 else "",
            med(row, "goodput") / 1e6, med(row, "goodput") / bottleneck,
            med(row, "wall"), med(row, "passes"),
            "%.0f" % med(row, "repairs") if row[0] not in ("uftp", "tcp+tcp", "norm-cc", "udpcast") else "-",
            100 * med(row, "drop"),
            "%.0f" % (med(row, "end") / 1e6) if row[0].startswith("auto") else "-",
            "%.0f" % (med(row, "lowest") / 1e6) if row[0].startswith("auto") else "-",
            held, cpu_gb(row, "scpu"), cpu_gb(row, "rcpu"), all(x["ok"] for x in samples[row])))
    for row, what in ((("auto+tcp", ceiling), "mcdist auto"),
                      (("tcp+tcp", args.tcp_reference), "TCP %s" % args.tcp_reference)):
        if row not in samples or len(stamps) != 1:
            continue
        log("")
        log("Sharing with TCP (iperf3, %s, started 2 s before): the bottleneck's fair share is "
            "%.1f Mbit/s each" % (args.tcp_congestion, bottleneck / 2e6))
        log("| run | %s Mbit/s | TCP %s meanwhile Mbit/s | ratio |" % (what, args.tcp_congestion))
        log("|---|---|---|---|")
        for i, x in enumerate(samples[row]):
            log("| %d | %.1f | %.1f | %.2f |" % (i + 1, x["goodput"] / 1e6, x["tcp"] / 1e6,
                                                 x["goodput"] / x["tcp"] if x["tcp"] else 0))


def stop_reaped(p, gentle=False):
    """Stops a receiver (SIGTERM, or with gentle first up to 5 s for it to exit by itself, as the
    NORM and UDPcast receivers do once complete) and reaps it with wait4: its CPU seconds."""
    if gentle:
        return peers.wait_rusage(p, 5, stop_sig=signal.SIGTERM)[1]
    peers.signal_proc(p, signal.SIGTERM)
    return peers.wait_rusage(p, 10, stop_sig=signal.SIGTERM)[1]


PROGRESS_RATE = re.compile(r"\)\s+([0-9.]+) (k|M|G)bit/s\s+receivers")


def sender_run_history(cmd):
    """Runs mcdist-send with its progress line on a pseudo-terminal (it draws one only on a
    terminal, every 0.5 s) and records the sending rate each line shows.
    @return (exit code, wall seconds, stdout text followed by the terminal's lines other than
    the progress line (the log), [(seconds since start, bit/s)])"""
    master, slave = pty.openpty()
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    history = []
    logged = []
    buf = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the sender closed the terminal
            break
        if not chunk:
            break
        now = time.monotonic() - start
        buf += chunk
        *lines, buf = re.split(rb"[\r\n]", buf)
        for line in lines:
            text = line.decode("utf-8", "replace").replace("\x1b[K", "")
            m = PROGRESS_RATE.search(text)
            if m:
                history.append((now, float(m.group(1)) * {"k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]))
            elif text.strip():
                logged.append(text)
    os.close(master)
    out = p.stdout.read().decode("utf-8", "replace") + "".join(l + "\n" for l in logged)
    p.wait()
    return p.returncode, time.monotonic() - start, out, history


def log_history(history, bottleneck, mode):
    """Prints the sending rate every 0.5 s and, after the first 5 s (start-up and slow start),
    how much of the time it was within 10 % of the bottleneck."""
    log("  sending rate every 0.5 s, Mbit/s: " + " ".join("%.0f" % (b / 1e6) for _, b in history))
    steady = [b for t, b in history if t >= 5]
    if steady and mode in ("auto", "auto-baseline"):
        within = sum(1 for b in steady if abs(b - bottleneck) <= 0.1 * bottleneck)
        log("  after 5 s: median %.1f Mbit/s, min %.1f, max %.1f; within 10 %% of %.0f Mbit/s "
            "in %d of %d samples" % (statistics.median(steady) / 1e6, min(steady) / 1e6,
                                     max(steady) / 1e6, bottleneck / 1e6, within, len(steady)))


class EmulatorHolds:
    """Stops the emulator (SIGSTOP, then SIGCONT) for MS milliseconds every EVERY seconds,
    "MS:EVERY[:START]", from START seconds (default 3) after it is made until stop(): the
    hold-ups its forwarding thread sometimes suffers on this machine, made on purpose."""

    def __init__(self, emu, spec):
        parts = spec.split(":")
        ms, every = parts[0], parts[1]
        self.start = float(parts[2]) if len(parts) > 2 else 3.0
        self.hold, self.every = float(ms) / 1e3, float(every)
        self.pid = emu.proc.pid
        self.done = threading.Event()
        self.count = 0
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        if self.done.wait(self.start):
            return
        while True:
            os.kill(self.pid, signal.SIGSTOP)
            time.sleep(self.hold)
            os.kill(self.pid, signal.SIGCONT)
            self.count += 1
            if self.done.wait(self.every):
                return

    def stop(self):
        """Ends the holds. @return how many there were."""
        self.done.set()
        self.thread.join()
        return self.count


class TcpFlow:
    """iperf3 from h0 to h1 with TCP congestion control `congestion` until rate_between() stops
    it (SIGINT: iperf3 still writes its JSON report), with half-second intervals."""

    def __init__(self, emu, work, congestion, port=5291, name="iperf3.json"):
        self.json = os.path.join(work, name)
        self.server = subprocess.Popen(["ip", "netns", "exec", emu.ns(1), "iperf3", "-s", "-1",
                                        "-p", str(port)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        self.out = open(self.json, "w")
        self.started = time.time()  # iperf3's own start stamp is in whole seconds
        self.client = subprocess.Popen(["ip", "netns", "exec", emu.ns(0), "iperf3", "-c",
                                        emu.addr(1), "-p", str(port), "-t", "3600", "-i", "0.5",
                                        "-C", congestion, "-J"], stdout=self.out, stderr=subprocess.DEVNULL)

    def rate_between(self, t0, t1):
        """TCP's received bit/s over [t0, t1] (wall clock), from the intervals overlapping it;
        stops the flow first."""
        stop_proc(self.client, sig=signal.SIGINT)
        stop_proc(self.server)
        self.out.close()
        with open(self.json) as f:
            text = f.read()
        try:
            rep = json.loads(text)
        except ValueError:
            return 0
        start = self.started
        bits = 0.0
        for iv in rep.get("intervals", []):
            a, b = start + iv["sum"]["start"], start + iv["sum"]["end"]
            overlap = max(0.0, min(b, t1) - max(a, t0))
            if b > a:
                bits += iv["sum"]["bits_per_second"] * overlap
        return bits / (t1 - t0) if t1 > t0 else 0


if __name__ == "__main__":
    main()
