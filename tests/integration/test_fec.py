#!/usr/bin/env python3
"""Integration: a session sent with parity (--fec-k, proactive --fec-overhead) to two real
mcdistd, one dropping 2 % of what it receives. mcdistd keeps the parity and decodes FEC blocks
(docs/design-notes.md "Parity repairs"): every file must arrive SHA-256 identical, the lossy
daemon's counters must show source blocks recovered from parity, and the sender must have sent
fewer repair datagrams than that daemon lost (without decoding, every lost block is repaired
one by one, so repairs are at least the blocks lost).

usage: test_fec.py BUILD_DIR"""

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
    base = tempfile.mkdtemp(prefix="mcdist-fec-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        rng = random.Random(12)
        src = os.path.join(base, "products")
        sizes = [0, 1, 1400, 10_000] * 10 + [300_000] * 10 + [2_000_000] * 2
        for i, size in enumerate(sizes):
            write_random(os.path.join(src, "d%d" % (i % 3), "p%03d.bin" % i), size, rng)
        want = {"products/" + p: h for p, h in tree_digests(src).items()}
        group = free_group()
        daemons = [Daemon(bin_dir, base, "clean", group),
                   Daemon(bin_dir, base, "lossy", group, ["--drop-rate", "0.02", "--drop-seed", "3"])]
        try:
            code, summary, out = run_sender(
                bin_dir, [src], group, [d.id for d in daemons], rate="200M",
                extra=["--fallback", "off", "--fec-k", "64", "--fec-depth", "4",
                       "--fec-overhead", "3%"])
            log(out)
            check(code == 0, "mcdist-send exited %d" % code)
            check(summary is not None, "no summary JSON written")
            by_id = {r["id"]: r for r in summary["receivers"]}
            for d in daemons:
                check(by_id[d.id]["state"] == "completed", "%s state %s" % (d.id, by_id[d.id]["state"]))
                got = tree_digests(d.dest)
                check(set(got) == set(want), "%s: file list differs" % d.id)
                bad = [p for p in want if got[p] != want[p]]
                check(not bad, "%s: SHA-256 differs for %s" % (d.id, bad[:5]))
        finally:
            for d in daemons:
                d.stop()
        # The status file is written once more at exit ("final status").
        st = daemons[1].read_status()
        check(st is not None, "lossy: no status file")
        par = st["parity"]
        log("lossy: dropped %d datagrams (--drop-rate); parity %s; sender: %d passes, %d repair "
            "datagrams" % (st["dropped_by_drop_rate"], par, summary["passes"],
                           summary["repair_datagrams"]))
        check(st["dropped_by_drop_rate"] > 0, "the lossy receiver dropped nothing")
        check(par["kept"] > 0, "the lossy receiver kept no parity")
        check(par["blocks_recovered"] > 0, "no block recovered from parity")
        check(par["fec_blocks_recovered"] > 0, "no FEC block decoded")
        check(par["decode_failures"] == 0, "decodes failed: %s" % par)
        # Each block recovered was lost: repairs below it show parity did the repairing.
        check(summary["repair_datagrams"] < par["blocks_recovered"],
              "%d repair datagrams for %d blocks recovered from parity"
              % (summary["repair_datagrams"], par["blocks_recovered"]))
        check(summary["repair_datagrams"] < st["dropped_by_drop_rate"],
              "%d repair datagrams for %d datagrams lost"
              % (summary["repair_datagrams"], st["dropped_by_drop_rate"]))
        log("PASS: %d files delivered identically; %d blocks recovered from parity, %d repair "
            "datagrams for %d datagrams lost" % (len(want), par["blocks_recovered"],
                                                 summary["repair_datagrams"],
                                                 st["dropped_by_drop_rate"]))
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
