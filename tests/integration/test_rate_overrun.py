#!/usr/bin/env python3
"""Integration: --rate auto against a receiver that cannot keep up (docs/design-notes.md
"Receiver overrun"). One real mcdistd whose channel socket buffer is 128 KiB (socket_buffer in
its config file) takes a 30 MB file and small files from mcdist-send --rate auto --rate-max 20G:
slow start doubles until the receiver's socket is half full or drops datagrams, and the
receiver reports the overrun. Every file must arrive SHA-256 identical; the sender's summary
must count the receiver's overrun reports and show slow start ended (a lowest rate set); the
daemon's status file must count the reports it sent. No rate value is asserted: it comes from
timing.

usage: test_rate_overrun.py BUILD_DIR"""

import json
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
    base = tempfile.mkdtemp(prefix="mcdist-rate-overrun-",
                            dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        rng = random.Random(29)
        src = os.path.join(base, "products")
        write_random(os.path.join(src, "field.grib"), 30_000_000, rng)
        for i in range(20):
            write_random(os.path.join(src, "bulletins", "b%02d.txt" % i), 10_000, rng)
        want = {"products/" + p: h for p, h in tree_digests(src).items()}
        config = os.path.join(base, "small-buffer.toml")
        with open(config, "w") as f:
            f.write('socket_buffer = "128KiB"\n')
        group = free_group()
        daemon = Daemon(bin_dir, base, "slow", group, ["--config", config])
        try:
            code, summary, out = run_sender(bin_dir, [src], group, [daemon.id], rate="auto",
                                            extra=["--rate-max", "20G", "--fallback", "off"])
            log(out)
            check(code == 0, "mcdist-send exited %d" % code)
            check(summary is not None, "no summary JSON written")
            rate = summary["rate"]
            check(rate["mode"] == "auto", "rate mode %s" % rate["mode"])
            check(rate["overrun_reports"] >= 1,
                  "the sender heard no overrun report from a 128 KiB socket buffer")
            check("of receiver overrun" in out, "the summary line does not show the overruns")
            check(0 < rate["lowest_bps"] <= 20_000_000_000,
                  "slow start did not end (lowest %s)" % rate["lowest_bps"])
            by_id = {r["id"]: r for r in summary["receivers"]}
            check(by_id[daemon.id]["state"] == "completed", "state %s" % by_id[daemon.id]["state"])
            got = tree_digests(daemon.dest)
            check(set(got) == set(want), "file list differs")
            bad = [p for p in want if got[p] != want[p]]
            check(not bad, "SHA-256 differs for %s" % bad[:5])

            def status_reports():
                try:
                    with open(daemon.status) as f:
                        return json.load(f).get("overrun_reports", 0)
                except (OSError, ValueError):
                    return 0
            # The daemon sent at least what the sender heard (its status file is rewritten
            # every second).
            wait_for("the status file counting the %d overrun reports" % rate["overrun_reports"],
                     lambda: status_reports() >= rate["overrun_reports"], 10, daemon)
        finally:
            daemon.stop()
        log("PASS: %d files delivered identically; %d overrun reports" %
            (len(want), rate["overrun_reports"]))
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
