#!/usr/bin/env python3
"""What block digests cost at Gbit/s (docs/security.md "Block digests"): a signed silent session
(mcdist-send --key --silent-passes 1 --fec-k 128 --fec-depth 8 --fec-overhead 2%) of --files
files of --size bytes to one mcdistd over loopback multicast (no loss), at each --rates, with
the build in --before and then with --build, side by side in the same run. Prints per run the
sender's wall time, the sender's and the receiver's CPU time (user + system), the files stored,
what the site refused, and the block digests the sender sent.

    tests/bench/block_digest_cost.py --build build --before ../main/build --rates 1G,2G

Needs root only for nothing; uses /dev/shm for the files."""

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from mcdist_testlib import (Daemon, cpu_seconds, free_group, run_sender, wait_for,  # noqa: E402
                            write_random)


def run(bin_dir, base, src, key, rate, tag):
    group = free_group()
    d = Daemon(bin_dir, base, tag, group, ["--trust", key + ".pub", "--sync", "none"])
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    code, summary, _ = run_sender(
        bin_dir, [src], group, rate=rate,
        extra=["--key", key, "--silent-passes", "1", "--fec-k", "128", "--fec-depth", "8",
               "--fec-overhead", "2%"])
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)

    def over():
        st = d.read_status()
        return st if st and st["sessions_completed"] + st["sessions_failed"] >= 1 else None

    wait_for("the session's end", over, 60, d)
    receiver_cpu = cpu_seconds(d.proc.pid)
    d.stop()
    st = d.read_status()
    na = {k: v for k, v in (st.get("not_authenticated") or {}).items() if v}
    bd = (summary or {}).get("block_digests") or {}
    return {"code": code, "wall": (summary or {}).get("wall_seconds", 0),
            "sender_cpu": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
            "receiver_cpu": receiver_cpu, "stored": st["files_stored"],
            "datagrams": (summary or {}).get("data_datagrams", 0), "refused": na,
            "digest_chunks": bd.get("chunks", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--before", required=True)
    ap.add_argument("--rates", default="1G")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--size", type=int, default=50_000_000)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="mcdist-digest-cost-", dir="/dev/shm")
    try:
        src = os.path.join(base, "set")
        rng = random.Random(3)
        for i in range(args.files):
            write_random(os.path.join(src, "f%d.bin" % i), args.size, rng)
        key = os.path.join(base, "hub.key")
        subprocess.run([os.path.join(args.build, "tools", "keygen", "mcdist-keygen"), key],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print("| rate | build | sender wall | sender CPU | receiver CPU | files stored | data and "
              "parity datagrams | digest chunks | refused at the site |")
        print("|---|---|---|---|---|---|---|---|---|")
        for rate in args.rates.split(","):
            for label, b in (("before", args.before), ("after", args.build)):
                r = run(b, base, src, key, rate, "%s-%s" % (label, rate))
                print("| %s | %s | %.2f s | %.2f s | %.2f s | %d / %d | %d | %d | %s |%s" % (
                    rate, label, r["wall"], r["sender_cpu"], r["receiver_cpu"], r["stored"],
                    args.files, r["datagrams"], r["digest_chunks"],
                    json.dumps(r["refused"]) if r["refused"] else "none",
                    "" if r["code"] == 0 else " (sender failed)"), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
