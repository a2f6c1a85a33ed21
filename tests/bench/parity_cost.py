#!/usr/bin/env python3
"""Benchmark: what parity costs when nothing is lost (docs/design-notes.md "Parity by default").

mcdist-send to one mcdistd over loopback multicast, no loss, the same work with each parity
profile given (--profiles), runs interleaved (profile A, B, A, B, ...) so that the machine's
load falls on all alike. Prints per cell the median wall time (process start to exit), goodput,
passes, sender and receiver CPU seconds, and each profile's ratio to the first.

The other side of the choice, the repairs parity saves when sites lose datagrams, is
scale_real.py --fec (30 real daemons at 1 % loss).

usage: parity_cost.py [--build DIR] [--repeat N] [--profiles "fec_k=0;fec_k=200,fec_depth=8"]
                      [--only big|small] [--dir DIR]
"""

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from uftp_compare import Child, clear, digest, need_programs, sender_run, write_field  # noqa: E402

CELLS = {"big": ("1 GB", "2G"), "small": ("1000 x 10 kB", "1G")}


def profile_args(text):
    """"fec_k=200,fec_depth=8" -> ["--fec-k", "200", "--fec-depth", "8"]."""
    out = []
    for kv in filter(None, text.split(",")):
        k, v = kv.split("=")
        out += ["--" + k.replace("_", "-"), v]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--dir", default="/dev/shm/mcdist-parity-cost")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profiles", default="fec_k=0;fec_k=200,fec_depth=8")
    ap.add_argument("--only", choices=["big", "small"], default=None)
    ap.add_argument("--big-bytes", type=int, default=1_000_000_000)
    args = ap.parse_args()
    send = os.path.join(args.build, "sender", "mcdist-send")
    recv = os.path.join(args.build, "receiver", "mcdistd")
    need_programs(send, recv)
    profiles = args.profiles.split(";")
    clear(args.dir)
    src = {"big": os.path.join(args.dir, "src-big"), "small": os.path.join(args.dir, "src-small")}
    os.makedirs(src["big"])
    write_field(os.path.join(src["big"], "field.grib2"), args.big_bytes)
    os.makedirs(os.path.join(src["small"], "obs"))
    for i in range(1000):
        with open(os.path.join(src["small"], "obs", "b%04d.bufr" % i), "wb") as f:
            f.write(os.urandom(10_000))
    dest, temp = os.path.join(args.dir, "dest"), os.path.join(args.dir, "temp")
    results = {}
    for cell in ([args.only] if args.only else ["big", "small"]):
        work, rate = CELLS[cell]
        want_bytes = sum(os.path.getsize(os.path.join(d, f))
                         for d, _, fs in os.walk(src[cell]) for f in fs)
        for run in range(args.repeat):
            for prof in profiles:
                clear(dest)
                clear(temp)
                group = "239.192.99.%d:4799" % (run % 200 + 1)
                daemon = Child([recv, "--id", "bench", "--group", group, "--interface", "127.0.0.1",
                                "--dest", dest, "--temp", temp, "--http", "off", "--sync", "none",
                                "--allow-unsigned", "--status-interval", "1h"],
                               os.path.join(args.dir, "mcdistd.log"))
                cpu0 = daemon.cpu()
                code, wall, scpu, out = sender_run(
                    [send, "--group", group, "--interface", "127.0.0.1", "--rate", rate,
                     "--receivers", "bench", "--no-progress", "--summary-json",
                     os.path.join(args.dir, "summary.json")] + profile_args(prof) + [src[cell]])
                rcpu = daemon.cpu() - cpu0
                daemon.stop()
                if code != 0:
                    sys.exit("mcdist-send exited %d (%s, %s):\n%s" % (code, cell, prof, out))
                with open(os.path.join(args.dir, "summary.json")) as f:
                    passes = json.load(f)["passes"]
                got = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(dest) for f in fs)
                if got != want_bytes:
                    sys.exit("%s, %s: %d bytes delivered, %d sent" % (cell, prof, got, want_bytes))
                results.setdefault((cell, prof), []).append((wall, passes, scpu, rcpu))
    print("| work | rate | profile | wall s (median of %d) | goodput Mbit/s | passes | sender CPU s "
          "| receiver CPU s | wall / first profile's |" % args.repeat)
    print("|---|---|---|---|---|---|---|---|---|")
    for cell in ([args.only] if args.only else ["big", "small"]):
        work, rate = CELLS[cell]
        nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src[cell]) for f in fs)
        base = None
        for prof in profiles:
            rows = results[(cell, prof)]
            wall = statistics.median(r[0] for r in rows)
            base = base or wall
            print("| %s | %s | %s | %.3f | %.0f | %s | %.2f | %.2f | %.3f |" % (
                work, rate, prof, wall, nbytes * 8 / wall / 1e6,
                "/".join(str(r[1]) for r in rows), statistics.median(r[2] for r in rows),
                statistics.median(r[3] for r in rows), wall / base))
    clear(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
