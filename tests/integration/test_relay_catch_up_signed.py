#!/usr/bin/env python3
"""Integration: catch-up through a relay of a signed hub (docs/security.md "Relays of signed
sessions"), with the real mcdist-feed (signed, heartbeat 2 s) and real mcdistd daemons on
loopback multicast.

The hub signs channel "obs", pins only relays "ra" and "rb" (site_keys) and lists them as
relays, so it delegates each session to ra; ra relays the channel from G0 into G1 for sites "s1"
and "s2", which trust only the hub's key, are pinned nowhere and say they are behind ra
(`behind_relay = "ra"`). rb, a site of G1, relays into G2 for site "s3": a relay behind a relay,
delegated by the hub through ra; rb and s3 say they are behind ra too (the relay the hub names).

1. A first product reaches every daemon.
2. s1 and s3 are stopped while three products go out in three sessions, then started again
   with no new product: the hub's signed heartbeat, passed on by ra, makes s1 report its three
   missed
   numbers to ra (signed by s1's key, which ra does not check: a hint); ra's own gap report to
   the hub, signed by ra's pinned key, carries them; the hub's catch-up is named to ra, which
   holds the products; ra runs it for s1 under the hub's delegation, and s1, behind ra, takes
   a session named to ra. Asserted: s1 holds the three products byte for byte and journaled
   each with the hub's key as signer; the hub's journal never names s1 or s2; ra counts the
   gap report taken, a report sent upstream and a catch-up run; s2, behind ra too, wrote
   nothing again (it held the products). s3 reports to rb, rb to ra: s3 holds the three
   products journaled with the hub's key, rb ran the catch-up for it signed, and the hub's
   journal never names rb or s3.
3. The same with s1's `behind_relay` removed: the catch-up reaches ra and ra runs it, but s1
   does not take a session named to another site (its log says so), so it does not catch up.

usage: test_relay_catch_up_signed.py BUILD_DIR"""

import hashlib
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, ChannelSite, check, free_group, keygen, log,  # noqa: E402
                            loopback_multicast_works, relay_status, site_journal, stop_all)
from test_feed import Feed, delivered, drop, query, wait_until  # noqa: E402


def signers(d, names):
    """The signers a site's delivery journal names for the files `names`."""
    return {k for p, k in site_journal(d) if p in names}


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-relay-catch-up-signed-",
                            dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(67)
    feed = None
    daemons = []
    try:
        hub_pub = keygen(bin_dir, os.path.join(base, "hub.key"))
        pubs = {s: keygen(bin_dir, os.path.join(base, s + ".key"))
                for s in ("ra", "s1", "s2", "rb", "s3")}
        pins = os.path.join(base, "pins.txt")
        with open(pins, "w") as f:
            f.write("ra %s\nrb %s\n" % (pubs["ra"], pubs["rb"]))
        spool = os.path.join(base, "spool")
        journal = os.path.join(base, "journal.db")
        g0, g1, g2 = free_group(), free_group(), free_group()
        config = os.path.join(base, "feed.toml")
        with open(config, "w") as f:
            f.write("""
interface = "127.0.0.1"
rate = "20M"
key = "%(base)s/hub.key"
site_keys = "%(pins)s"
journal = "%(journal)s"
retention = "1h"
retained = "%(base)s/retained"
http = "off"
relays = ["ra", "rb"]

[[channel]]
name = "obs"
group = "%(g0)s"
spool = ["%(spool)s"]
batch_window = "100ms"
after = "delete"
heartbeat = "2s"
register_window = "1s"
""" % dict(journal=journal, base=base, g0=g0, spool=spool, pins=pins))

        def top(rid):
            return 'key_file = "%s"\ntrusted_senders = ["%s"]' % (
                os.path.join(base, rid + ".key"), hub_pub)
        ra = ChannelSite(bin_dir, base, "ra", 'group = "%s"\nrelay_group = "%s"' % (g0, g1),
                         top=top("ra"))
        behind = 'group = "%s"\nbehind_relay = "ra"' % g1
        s1 = ChannelSite(bin_dir, base, "s1", behind, top=top("s1"))
        s2 = ChannelSite(bin_dir, base, "s2", behind, top=top("s2"))
        rb = ChannelSite(bin_dir, base, "rb", 'group = "%s"\nrelay_group = "%s"\n'
                         'behind_relay = "ra"' % (g1, g2), top=top("rb"))
        s3 = ChannelSite(bin_dir, base, "s3", 'group = "%s"\nbehind_relay = "ra"' % g2,
                         top=top("s3"))
        daemons += [ra, s1, s2, rb, s3]
        feed = Feed(bin_dir, base, config)
        feed.start()

        def product(name, size):
            data = rng.randbytes(size)
            drop(spool, name, data)
            time.sleep(0.3)  # past the batch window: one session, one number each
            return name, hashlib.sha256(data).hexdigest()

        def all_sent(prefix, n):
            return lambda: query(journal, "SELECT count(*) FROM products WHERE name LIKE ? AND "
                                 "state = 'sent'", (prefix + "%",))[0][0] == n

        def relay_idle(relay=ra):
            since = time.time()
            wait_until("%s: no session running for its sites" % relay.id, lambda: os.path.getmtime(
                relay.status) > since + 0.1 and (relay_status(relay) or {}).get(
                "two_way", {}).get("sessions_active") == 0, 30, feed, daemons)

        def catch_up(relay=ra):
            return (relay_status(relay) or {}).get("catch_up") or {}

        # 1. Everyone gets the first product through the relay, signed.
        name, h = product("first/p0.bufr", 50_000)
        wait_until("the first product everywhere", delivered(daemons, name, h), 40, feed,
                   daemons)
        for relay in (ra, rb):
            check((relay_status(relay) or {}).get("two_way", {}).get("signed_sessions", 0) >= 1,
                  "%s did not run the first session signed: %s" % (relay.id, relay_status(relay)))

        def miss_and_return(prefix, n, channel=None, also=()):
            s1.stop()
            for d in also:
                d.stop()
            if channel:
                with open(s1.config, "w") as f:
                    f.write(s1.head(s1) + channel + "\n")
            missed = dict(product("%s/o%d.bufr" % (prefix, i), 30_000 + 1000 * i)
                          for i in range(n))
            wait_until("the products sent", all_sent(prefix + "/", n), 40, feed, [ra, s2])
            wait_until("the products at ra, s2 and rb",
                       lambda: all(delivered([ra, s2, rb], k, v)() for k, v in missed.items()),
                       40, feed, [ra, s2, rb])
            relay_idle()
            relay_idle(rb)
            s1.start()
            for d in also:
                d.start()
            return missed

        # 2. s1 misses three sessions and is caught up through ra.
        taken = catch_up().get("gap_reports_taken", 0)
        missed = miss_and_return("down", 3, also=[s3])
        t0 = time.time()
        wait_until("the three missed products at s1 and s3",
                   lambda: all(delivered([s1, s3], k, v)() for k, v in missed.items()), 60, feed,
                   daemons)
        log("s1 and s3 caught up through ra (and rb) in %.1f s (heartbeat 2 s)"
            % (time.time() - t0))
        relay_idle()
        c = catch_up()
        log("ra: %s" % c)
        check(c.get("gap_reports_taken", 0) > taken, "ra took no gap report from s1: %s" % c)
        check(c.get("reports_sent", 0) >= 1, "ra sent no gap report for its sites: %s" % c)
        check(c.get("sessions", 0) >= 1, "ra ran no catch-up for its sites: %s" % c)
        check("site ra reports" in feed.log_text(), "the hub took no gap report from ra")
        for site in ("s1", "s2", "rb", "s3"):
            check(query(journal, "SELECT count(*) FROM outcomes WHERE site = ?", (site,))[0][0]
                  == 0, "the hub's journal names %s" % site)
        for d in (s1, s3):
            check(signers(d, list(missed)) == {hub_pub},
                  "%s: the caught-up files' signer is not the hub's key: %s"
                  % (d.id, signers(d, list(missed))))
        relay_idle(rb)
        c = catch_up(rb)
        log("rb: %s" % c)
        check(c.get("gap_reports_taken", 0) >= 1 and c.get("reports_sent", 0) >= 1 and
              c.get("sessions", 0) >= 1, "rb did not catch s3 up: %s" % c)
        two_way = (relay_status(ra) or {}).get("two_way", {})
        check(two_way.get("origin_requests", 0) >= 1 and two_way.get("origin_replies", 0) >= 1,
              "ra passed no delegation request of rb's: %s" % two_way)
        # s2 is behind ra too, so it may take the session named to ra; it holds the products,
        # so nothing is written there again.
        # (Its journal, not its status file's byte count: that file is written once a second and
        # may predate the last live delivery.)
        again = [p for p, _ in site_journal(s2) if p in missed]
        check(sorted(again) == sorted(missed),
              "s2 received the catch-up's products again: deliveries %s" % sorted(again))

        # 3. Without behind_relay, s1 does not take a session named to ra.
        sessions_before = catch_up().get("sessions", 0)
        missed2 = miss_and_return("later", 1, channel='group = "%s"' % g1)
        wait_until("ra: a second catch-up run for its sites",
                   lambda: catch_up().get("sessions", 0) > sessions_before and
                   "a resend for other receivers" in s1.log_text(), 60, feed, daemons)
        check(not any(delivered([s1], k, v)() for k, v in missed2.items()),
              "s1 took a session named to ra without behind_relay")
        log("PASS")
        return 0
    finally:
        stop_all(base, feed, daemons)


if __name__ == "__main__":
    sys.exit(main())
