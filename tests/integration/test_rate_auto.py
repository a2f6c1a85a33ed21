#!/usr/bin/env python3
"""Integration: --rate auto --rate-max 200M (TFMCC, docs/design-notes.md "Rate auto") to one
real mcdistd that drops 2 % of what it receives. Every file must arrive SHA-256 identical, and
the summary must show the rate mode, its ceiling, and that slow start ended on the receiver's
loss report (a lowest rate set, never above the ceiling). No rate value is asserted: it comes
from timing.

usage: test_rate_auto.py BUILD_DIR"""

import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-rate-auto-",
                            dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        rng = random.Random(13)
        src = os.path.join(base, "products")
        # About 3 MB: enough datagrams (~2,000) for the 2 % drop to end slow start with a loss
        # report, few enough that a loaded machine, where TFMCC's rate rightly falls with the
        # inflated RTT (down to its 64 kbit/s floor), still finishes well inside the timeout.
        sizes = [0, 1, 1400, 10_000] * 10 + [300_000] * 2 + [1_000_000] * 2
        for i, size in enumerate(sizes):
            write_random(os.path.join(src, "d%d" % (i % 3), "p%03d.bin" % i), size, rng)
        want = {"products/" + p: h for p, h in tree_digests(src).items()}
        group = free_group()
        daemon = Daemon(bin_dir, base, "lossy", group, ["--drop-rate", "0.02", "--drop-seed", "5"])
        try:
            code, summary, out = run_sender(bin_dir, [src], group, [daemon.id], rate="auto",
                                            extra=["--rate-max", "200M", "--fallback", "off"],
                                            timeout=600)
            log(out)
            check(code == 0, "mcdist-send exited %d" % code)
            check(summary is not None, "no summary JSON written")
            check("rate auto (max 200 Mbit/s)" in out, "the summary does not show the rate mode")
            rate = summary["rate"]
            check(rate["mode"] == "auto", "rate mode %s" % rate["mode"])
            check(rate["max_bps"] == 200_000_000, "ceiling %s" % rate["max_bps"])
            check(0 < rate["lowest_bps"] <= 200_000_000,
                  "slow start did not end on a loss report (lowest %s)" % rate["lowest_bps"])
            check(0 < rate["bps"] <= 200_000_000, "rate %s outside (0, ceiling]" % rate["bps"])
            by_id = {r["id"]: r for r in summary["receivers"]}
            check(by_id[daemon.id]["state"] == "completed", "state %s" % by_id[daemon.id]["state"])
            got = tree_digests(daemon.dest)
            check(set(got) == set(want), "file list differs")
            bad = [p for p in want if got[p] != want[p]]
            check(not bad, "SHA-256 differs for %s" % bad[:5])
        finally:
            daemon.stop()
        log("PASS: %d files delivered identically with --rate auto" % len(want))
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
