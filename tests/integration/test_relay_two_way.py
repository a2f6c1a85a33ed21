#!/usr/bin/env python3
"""Integration: a relay runs an unsigned two-way session for the sites behind it (mcdistd
`relay_group`; docs/design-notes.md "Relays") over loopback multicast, with real mcdist-send and
mcdistd.

mcdist-send sends an unsigned session to group G0 as an open group (any site that hears it may
register). Relay "ra" (dropping 1 % of what it reads, as a lossy hub link would) is a site of G0
that relays the channel into G1; sites "s1" and "s2" (dropping 3 % each) are on G1 only, and so
is relay "rb", which relays G1 into G2 for site "s3" (dropping 3 %): a relay of a relay.
Asserted: every file at ra, rb, s1, s2 and s3 SHA-256 identical to the source; the hub's only
receiver is ra (the sites registered with the relay, never with the hub); rb ran the session for
s3, which completed; the hub newly wanted no more blocks than ra dropped, and ra's NAKs named at
most twice that; the sites sent the relay datagrams for the session and the relay sent more data
and parity datagrams than the session has blocks (their repairs); the relay's status counts the
session run for 3 sites (s1, s2, rb) that completed, and s1's log names ra's relay socket as the
session's source. Then the same files again to the closed group {ra} (a resend the relay already
holds): the hub skips most of it, and the sites still get every file, read back from ra's
destination tree. Last, a larger set to {ra} at 10 Mbit/s, during which ra is killed (SIGKILL)
once s1 has written 2 MB of it and ra has a checkpoint of it, and started again a second later:
ra logs that it took the session up again for its sites, and s1, s2, rb and s3 get every file of
it.

usage: test_relay_two_way.py BUILD_DIR"""

import glob
import os
import random
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, ChannelSite, check, free_group, log,  # noqa: E402
                            loopback_multicast_works, relay_status, run_sender, sessions_over,
                            stop_all, tree_digests, wait_for, write_random)

UNSIGNED = "allow_unsigned = true"
BLOCK = 1400


def blocks_of(sizes):
    return sum((s + BLOCK - 1) // BLOCK for s in sizes)


def two_way_done(ra, n):
    r = relay_status(ra) or {}
    t = r.get("two_way") or {}
    return r if t.get("sessions") == n and t.get("sessions_active") == 0 else None


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-relay2-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    daemons = []
    try:
        rng = random.Random(47)
        src = os.path.join(base, "products")
        sizes = [0, 1, 1400, 10_000] * 3 + [300_000] * 4 + [2_000_000]
        for i, size in enumerate(sizes):
            write_random(os.path.join(src, "d%d" % (i % 3), "p%03d.bin" % i), size, rng)
        want = {"products/" + p: h for p, h in tree_digests(src).items()}
        g0, g1 = free_group(), free_group()
        ra = ChannelSite(bin_dir, base, "ra", "group = \"%s\"\nrelay_group = \"%s\"" % (g0, g1),
                         top=UNSIGNED, extra=["--drop-rate", "0.01", "--drop-seed", "3"])
        daemons.append(ra)
        s1 = ChannelSite(bin_dir, base, "s1", "group = \"%s\"" % g1, top=UNSIGNED,
                         extra=["--drop-rate", "0.03", "--drop-seed", "5"])
        daemons.append(s1)
        s2 = ChannelSite(bin_dir, base, "s2", "group = \"%s\"" % g1, top=UNSIGNED,
                         extra=["--drop-rate", "0.03", "--drop-seed", "7"])
        daemons.append(s2)
        g2 = free_group()
        rb = ChannelSite(bin_dir, base, "rb", "group = \"%s\"\nrelay_group = \"%s\"" % (g1, g2),
                         top=UNSIGNED)
        daemons.append(rb)
        s3 = ChannelSite(bin_dir, base, "s3", "group = \"%s\"" % g2, top=UNSIGNED,
                         extra=["--drop-rate", "0.03", "--drop-seed", "9"])
        daemons.append(s3)
        check("two-way sessions and heartbeats" in ra.log_text(), "ra: no relay log line")

        rc, summary, out = run_sender(bin_dir, [src], g0, rate="50M")
        check(rc == 0 and summary, "mcdist-send failed (%d): %s" % (rc, out[-2000:]))
        ids = [r["id"] for r in summary["receivers"]]
        check(ids == ["ra"], "the hub's receivers are %s, not ra alone" % ids)
        check(summary["receivers"][0]["state"] == "completed",
              "ra did not complete: %s" % summary["receivers"][0])
        r = wait_for("ra: the relayed session done", lambda: two_way_done(ra, 1), 60, ra)
        rb_status = wait_for("rb: the relayed session done", lambda: two_way_done(rb, 1), 60, rb)
        check(rb_status["two_way"]["sites_completed"] == 1,
              "rb: sites of the relayed session: %s" % rb_status["two_way"])
        for d in daemons:
            wait_for("%s: the session's end" % d.id, lambda d=d: sessions_over(d), 30, d)
            got = tree_digests(d.dest)
            check(got == want, "%s: delivered files differ from the source (%d of %d, %d bad)"
                  % (d.id, len(got), len(want), len([p for p in got if want.get(p) != got[p]])))
        log("ra: relay %s" % r)
        t = r["two_way"]
        check(t["sites_completed"] == 3 and t["sites_failed"] == 0,
              "ra: sites of the relayed session: %s" % t)
        check(t["unreadable"] == 0, "ra: blocks it could not read: %s" % t)
        check(r["not_relayed_sessions"] == 0 and r["site_datagrams"] == 0,
              "ra: relay counters: %s" % r)
        statuses = {d.id: d.read_status() for d in daemons}
        # The sites lost 3 % each and asked the relay; the relay sent the session's blocks once
        # and their repairs (parity, by default) on top.
        for sid in ("s1", "s2", "s3"):
            check(statuses[sid]["dropped_by_drop_rate"] > 0, "%s dropped nothing" % sid)
        check(t["site_datagrams"] > 0, "ra: no datagram from its sites: %s" % t)
        check(t["data"] + t["parity"] > blocks_of(sizes),
              "ra: %d data and %d parity datagrams for %d blocks: no repair for its sites"
              % (t["data"], t["parity"], blocks_of(sizes)))
        # One NAK upstream per loss on the hub's link, none for the sites' losses.
        naked = summary["receivers"][0]["blocks_naked"]
        dropped = statuses["ra"]["dropped_by_drop_rate"]
        log("hub: ra NAKed %d blocks; ra dropped %d datagrams; the sites dropped %d and %d"
            % (naked, dropped, statuses["s1"]["dropped_by_drop_rate"],
               statuses["s2"]["dropped_by_drop_rate"]))
        # Blocks the hub newly wanted: one per block ra lacked, at most (a block still missing
        # at the hub's next pass is named again, as by any site: named, not newly wanted).
        fresh = summary["control_received"]["nak_new_blocks"]
        check(fresh <= dropped, "the hub newly wanted %d blocks, ra dropped only %d"
              % (fresh, dropped))
        check(naked <= 2 * dropped + 4,
              "ra NAKed %d blocks upstream but dropped only %d" % (naked, dropped))
        ra_source = r["source"]
        check("from %s" % ra_source in s1.log_text(),
              "s1: its session's source is not ra's relay socket %s" % ra_source)

        # The same files again: ra holds them, the hub skips them for it; the relay serves its
        # sites from its destination tree.
        for d in (s1, s2, s3):
            for p in want:
                os.unlink(os.path.join(d.dest, p))
        rc, summary, out = run_sender(bin_dir, [src], g0, receivers=["ra"], rate="50M")
        check(rc == 0 and summary, "mcdist-send (resend) failed (%d): %s" % (rc, out[-2000:]))
        # Pass 1 starts before ra's registration says it holds the files (eager start): what
        # went out before is all the hub sends.
        check(summary["data_datagrams"] < blocks_of(sizes) // 2,
              "the hub sent %d data datagrams to a relay holding every file"
              % summary["data_datagrams"])
        r = wait_for("ra: the second relayed session done", lambda: two_way_done(ra, 2), 60, ra)
        wait_for("rb: the second relayed session done", lambda: two_way_done(rb, 2), 60, rb)
        for d in (s1, s2, s3):
            wait_for("%s: the second session's end" % d.id, lambda d=d: sessions_over(d, 2), 30, d)
            got = tree_digests(d.dest)
            check(got == want, "%s: resent files differ from the source (%d of %d)"
                  % (d.id, len(got), len(want)))
        log("ra: relay %s" % r)
        check(r["two_way"]["from_dest"] > 0, "ra: nothing read back from its tree: %s" % r)
        check(r["two_way"]["sites_completed"] == 6, "ra: sites completed: %s" % r["two_way"])

        # Killed in the middle of a session, started again: the relay takes the session up
        # again for its sites (numbered past its run before), which complete it.
        big = os.path.join(base, "big")
        for i in range(20):
            write_random(os.path.join(big, "b%02d.bin" % i), 400_000, rng)
        want_big = {"big/" + p: h for p, h in tree_digests(big).items()}
        written = s1.read_status()["bytes_written"]
        sent = {}

        def send_big():
            sent["rc"], sent["summary"], sent["out"] = run_sender(
                bin_dir, [big], g0, receivers=["ra"], rate="10M", timeout=180)
        hub = threading.Thread(target=send_big)
        hub.start()
        wait_for("s1: 2 MB of the set written",
                 lambda: (s1.read_status() or {}).get("bytes_written", 0) > written + 2_000_000,
                 60, s1)
        # Upstream, ra resumes from its checkpoint of the session (every 2 s): without one it
        # would be a new site that missed the announce.
        wait_for("ra: a checkpoint of the session",
                 lambda: glob.glob(os.path.join(ra.temp, "*", "state")), 30, ra)
        ra.stop(signal.SIGKILL)
        time.sleep(1)  # the outage: the hub and the sites go on without ra for a second
        ra.start()
        hub.join(200)
        check(sent.get("rc") == 0, "mcdist-send (the set ra was killed in) failed: %s"
              % sent.get("out", "")[-2000:])
        check("resumed relaying" in ra.log_text(), "ra: no 'resumed relaying' in its log")
        for d in (s1, s2, rb, s3):
            wait_for("%s: every file of the set" % d.id,
                     lambda d=d: all(tree_digests(d.dest).get(p) == h for p, h in want_big.items()),
                     90, d)
        log("PASS")
        return 0
    finally:
        stop_all(base, daemons=daemons)


if __name__ == "__main__":
    sys.exit(main())
