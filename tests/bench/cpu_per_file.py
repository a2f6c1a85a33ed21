#!/usr/bin/env python3
"""CPU seconds per delivered file of two mcdist builds side by side: one scenario of the EUMETSAT
quick matrix (eumetsat_matrix.py, default scenario 3: 20,000 x 10 kB through the link emulator,
70 ms RTT, 1e-3 loss at h2, 800 Mbit/s), run with each build in turn, alternating, --runs times.

Per build it gives the median over the runs of the CPU seconds (user + system, wait4) per
delivered file of the sender (over the files verified at h2) and of each receiving daemon (over
the files verified at it), in microseconds, the median goodput at h2, and the ratio of the two
builds' medians. Alternating the builds within one run of the script is what makes the ratio
mean something on a shared machine: both see the same neighbours, one run after the other.

--count adds, after the timed runs, one run per build with h1's mcdistd and the sender under
`perf stat` (system calls, page faults, context switches per delivered file): where the CPU
goes, not how much (perf's own CPU is in those runs, so they are not in the medians).

Use: build the baseline in another tree (git worktree add ../base REV; deploy/build.sh
../base/build --target mcdistd mcdist-send mcdist-linkem), then
    tests/bench/cpu_per_file.py --baseline ../base/build [--build build] [--runs 5]
Needs root and what eumetsat_matrix.py needs (deploy/install-deps.sh --bench).
"""

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import types

import eumetsat_matrix as em
from linkem_run import Emulator

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


COUNTED = "page-faults,context-switches,raw_syscalls:sys_enter"

# perf stat as the parent of the program counted; SIGTERM (how the matrix stops a daemon) goes
# to the program, so perf writes its counts when the program exits.
PERF_WRAPPER = """#!/bin/bash
out="$1"; shift
perf stat -x, -e %s -o "$out" -- "$@" &
pp=$!
trap 'kill -TERM $(pgrep -P $pp) 2>/dev/null; wait $pp' TERM
wait $pp
""" % COUNTED


def counted_popen(work, outs):
    """A subprocess.Popen that starts h1's mcdistd and mcdist-send under perf stat, writing
    their counts to outs["h1"] and outs["sender"]."""
    wrapper = os.path.join(work, "perf-stat.sh")
    with open(wrapper, "w") as f:
        f.write(PERF_WRAPPER)
    os.chmod(wrapper, 0o755)
    real = subprocess.Popen

    def popen(cmd, *a, **k):
        if isinstance(cmd, list):
            for i, c in enumerate(cmd):
                who = ("h1" if c.endswith("/mcdistd") and "h1" in cmd else
                       "sender" if c.endswith("/mcdist-send") else None)
                if who:
                    cmd = cmd[:i] + [wrapper, outs[who]] + cmd[i:]
                    break
        return real(cmd, *a, **k)
    return popen


def read_counts(path):
    """{event: count} from a `perf stat -x,` file."""
    counts = {}
    with open(path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) > 2 and re.fullmatch(r"\d+", parts[0]):
                counts[parts[2]] = int(parts[0])
    return counts


def one_run(build, args, ds, num, rtt, loss, count=False):
    work = os.path.join(args.work, "run")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    spec = "h2:delay=%gms" % (rtt / 2) + (",loss=%g" % loss if loss > 0 else "")
    # The emulator of --build's tree, the same binary for both builds' runs; its CPU is not
    # counted.
    emu = Emulator(os.path.join(args.build, "tests", "linkem", "mcdist-linkem"), work, [spec],
                   hosts=3, seed=num + args.seed)
    outs = {w: os.path.join(args.work, "perf-%s.csv" % w) for w in ("h1", "sender")}
    saved = em.subprocess.Popen
    if count:
        em.subprocess.Popen = counted_popen(args.work, outs)
    try:
        run_args = types.SimpleNamespace(build=build, rate=args.rate, mcdist_args=args.mcdist_args)
        r = em.run_mcdist(run_args, emu, ds, work, em.CAPS["quick"]["mcdist"], num)
    finally:
        em.subprocess.Popen = saved
        emu.stop()
    per_file = ds.bytes / len(ds.files)  # every file of a category has the same size
    if count:
        files = {"h1": r["verified_h1"] / per_file, "sender": r["verified"] / per_file}
        return {w: {e: c / files[w] for e, c in read_counts(outs[w]).items()} if files[w] else {}
                for w in outs}

    def us_per_file(cpu, verified):
        return cpu / (verified / per_file) * 1e6 if verified else float("nan")

    return {"sender": us_per_file(r["cpu"]["sender"], r["verified"]),
            "h1": us_per_file(r["cpu"]["h1"], r["verified_h1"]),
            "h2": us_per_file(r["cpu"]["h2"], r["verified"]),
            "mbps": r["verified"] * 8 / r["time"] / 1e6, "complete": r["finished"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"), help="the build measured")
    ap.add_argument("--baseline", required=True, help="the build compared against")
    ap.add_argument("--scenario", type=int, default=3, help="quick-matrix scenario (default 3)")
    ap.add_argument("--runs", type=int, default=5, help="runs per build, alternating (default 5)")
    ap.add_argument("--rate", default="800M")
    ap.add_argument("--mcdist-args", default="", help="more mcdist-send options, for both builds")
    ap.add_argument("--seed", type=int, default=0, help="added to the scenario's emulator seed")
    ap.add_argument("--work", default="/dev/shm/mcdist-cpu")
    ap.add_argument("--count", action="store_true",
                    help="add one run per build under perf stat: system calls, page faults and "
                         "context switches per delivered file")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("cpu_per_file.py needs root (network namespaces and TUN devices)")
    for b in (args.build, args.baseline):
        for prog in ("receiver/mcdistd", "sender/mcdist-send"):
            if not os.access(os.path.join(b, prog), os.X_OK):
                sys.exit("missing %s: build first" % os.path.join(b, prog))
    num, cat, rtt, loss = next(s for s in em.SCENARIOS if s[0] == args.scenario)
    os.makedirs(args.work, exist_ok=True)
    ds = em.Dataset(args.work, cat, em.VOLUMES["quick"][cat], random.Random(2026))
    builds = [("baseline", args.baseline), ("this build", args.build)]
    runs = {name: [] for name, _ in builds}
    for i in range(args.runs):
        order = builds if i % 2 == 0 else builds[::-1]
        for name, b in order:
            r = one_run(b, args, ds, num, rtt, loss)
            runs[name].append(r)
            em.log("run %d %-10s sender %6.1f us/file  h1 %6.1f  h2 %6.1f  %5.0f Mbit/s%s" % (
                i + 1, name, r["sender"], r["h1"], r["h2"], r["mbps"], "" if r["complete"] else "  (incomplete)"))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("sender", "h1", "h2", "mbps")}
           for name, rs in runs.items()}
    print()
    print("Scenario %d (%s x %d, %d ms, loss %g, %s): CPU microseconds per delivered file, median of %d "
          "runs per build, alternating" % (num, cat, len(ds.files), rtt, loss, args.rate, args.runs))
    print()
    print("| build | sender us/file | h1 us/file | h2 us/file | goodput at h2 Mbit/s |")
    print("|---|---|---|---|---|")
    for name, b in builds:
        m = med[name]
        print("| %s (%s) | %.1f | %.1f | %.1f | %.0f |" % (name, b, m["sender"], m["h1"], m["h2"], m["mbps"]))
    a, b = med["this build"], med["baseline"]
    print("| this / baseline | %.2f | %.2f | %.2f | %.2f |" % (
        a["sender"] / b["sender"], a["h1"] / b["h1"], a["h2"] / b["h2"], a["mbps"] / b["mbps"]))
    if not all(r["complete"] for rs in runs.values() for r in rs):
        print("\nSome runs did not complete (see the log lines): their figures count the files verified.")
    if args.count:
        if not shutil.which("perf"):
            sys.exit("--count needs perf (Debian package linux-perf)")
        counts = {name: one_run(b, args, ds, num, rtt, loss, count=True) for name, b in builds}
        print()
        print("Per delivered file, one run per build under perf stat:")
        print()
        print("| build | process | system calls | page faults | context switches |")
        print("|---|---|---|---|---|")
        for name, _ in builds:
            for w in ("sender", "h1"):
                c = counts[name][w]
                print("| %s | %s | %.2f | %.3f | %.3f |" % (
                    name, w, c.get("raw_syscalls:sys_enter", float("nan")),
                    c.get("page-faults", float("nan")), c.get("context-switches", float("nan"))))


if __name__ == "__main__":
    main()
