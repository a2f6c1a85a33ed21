#!/usr/bin/env python3
"""Integration: one mcdist-send, three mcdistd over loopback multicast, two of the daemons
dropping 1 % and 10 % of what they receive (--drop-rate). A file set of 240 files in nested
directories: empty, 1-byte, 10 kB, 1 MB and 50 MB files. Every file must arrive SHA-256
identical at every receiver, the summary must say completed, and nothing may be left in the
temp directories or half-written in the destinations.

usage: test_distribution.py BUILD_DIR"""

import os
import random
import re
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
    base = tempfile.mkdtemp(prefix="mcdist-it-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        rng = random.Random(2026)
        src = os.path.join(base, "products")
        sizes = [0] * 40 + [1] * 40 + [10_000] * 118 + [1_000_000] * 40 + [50_000_000] * 2
        for i, size in enumerate(sizes):
            sub = os.path.join(src, "region%d" % (i % 4), "level%d" % (i % 3))
            write_random(os.path.join(sub, "product_%03d.bin" % i), size, rng)
        # Delivered under the directory's own name, as sent: products/region0/...
        want = {"products/" + p: h for p, h in tree_digests(src).items()}
        check(len(want) == 240, "expected 240 source files, got %d" % len(want))

        group = free_group()
        daemons = [Daemon(bin_dir, base, "clean", group),
                   Daemon(bin_dir, base, "lossy1", group, ["--drop-rate", "0.01", "--drop-seed", "7"]),
                   Daemon(bin_dir, base, "lossy10", group, ["--drop-rate", "0.1", "--drop-seed", "8"])]
        try:
            # Multicast repair is what this test is about: keep the 10 % receiver in the group
            # (the unicast fallback has its own test).
            code, summary, out = run_sender(bin_dir, [src], group, [d.id for d in daemons], rate="500M",
                                            extra=["--fallback", "off"])
            log(out)
            check(code == 0, "mcdist-send exited %d" % code)
            check(summary is not None, "no summary JSON written")
            check(summary["files"] == 240, "summary files %s" % summary["files"])
            check(summary["bytes"] == sum(sizes), "summary bytes %s" % summary["bytes"])
            check(summary["passes"] >= 2, "10 %% loss must need repair passes, got %s" % summary["passes"])
            for key in ("session_id", "wall_seconds", "goodput_bps"):
                check(key in summary, "summary lacks " + key)
            by_id = {r["id"]: r for r in summary["receivers"]}
            for d in daemons:
                r = by_id[d.id]
                check(r["state"] == "completed", "%s state %s" % (d.id, r["state"]))
                check(r["files"] == 240, "%s stored %s files" % (d.id, r["files"]))
                check(r["bytes"] == sum(sizes), "%s stored %s bytes" % (d.id, r["bytes"]))
                for key in ("naks", "rtt_ms"):
                    check(key in r, "receiver summary lacks " + key)
            check(by_id["lossy10"]["naks"] > 0, "the 10 % receiver sent no NAKs")
            for d in daemons:
                got = tree_digests(d.dest)
                check(set(got) == set(want), "%s: file list differs: missing %s, extra %s" % (
                    d.id, sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
                bad = [p for p in want if got[p] != want[p]]
                check(not bad, "%s: SHA-256 differs for %s" % (d.id, bad[:5]))
                for p in want:
                    s = os.stat(os.path.join(d.dest, p))
                    o = os.stat(os.path.join(base, p))
                    check(s.st_mtime_ns == o.st_mtime_ns, "%s: mtime of %s not kept" % (d.id, p))
                    check((s.st_mode & 0o777) == (o.st_mode & 0o777), "%s: mode of %s" % (d.id, p))
                check(d.wait_for_log("complete in", 5), "")
            # The daemons drop the session's temp state once it is closed. A site closes the
            # session when the sender acknowledges its COMPLETE or ends the session, or after
            # its last COMPLETE repeat: lossy10 drops 10 % of what reaches it, so it may still
            # be repeating COMPLETE after the sender has exited. Until then it keeps its last
            # checkpoint, and a stop keeps it for the restart.
            for d in daemons:
                # The site key mcdistd made at its first start, its delivery journal, its
                # channel table and its replay cache stay; nothing of the session does.
                keep = {os.path.join(d.temp, n) for n in ("site.key", "journal.db",
                                                          "journal.db-wal", "journal.db-shm",
                                                          "channels", "replay")}

                def session_dirs(d=d):
                    return [n for n in os.listdir(d.temp) if re.fullmatch(r"[0-9a-f]{8}", n)]
                wait_for("%s to close the session" % d.id, lambda: not session_dirs(), 60, d)
                d.stop()
                left = [os.path.join(r, f) for r, _, fs in os.walk(d.temp) for f in fs
                        if os.path.join(r, f) not in keep]
                check(not left, "%s: temp files left behind: %s" % (d.id, left[:5]))
                check(d.proc.returncode == 0, "%s exited %s" % (d.id, d.proc.returncode))
        finally:
            for d in daemons:
                d.stop()
        log("PASS: 240 files delivered identically to 3 receivers (0 %, 1 %, 10 % loss)")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
