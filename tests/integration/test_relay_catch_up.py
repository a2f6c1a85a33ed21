#!/usr/bin/env python3
"""Integration: catch-up through a relay (docs/design-notes.md "Catch-up through a relay"), with
the real mcdist-feed (unsigned, heartbeat 2 s) and real mcdistd daemons on loopback multicast.

The hub multicasts channel "obs" to group G0, where relay "ra" is its only site; ra relays the
channel into G1 for sites "s1" and "s2" and relay "rb", which relays it into G2 for site "s3".
None of them but ra ever reaches the hub.

1. A first product reaches every daemon (each relay runs the session for its sites).
2. s1 and s3 are stopped while three products go out in three sessions, then started again
   with no new product: the heartbeat the relays pass on makes s1 report its three missed
   numbers to ra and s3 to rb; rb's report to ra carries s3's; ra's own gap report to the hub
   carries them all; the hub's catch-up is named to ra (ra holds the products and answers
   held); ra runs it for s1 and rb, from its destination tree, and rb for s3. Asserted: s1 and
   s3 hold the three products byte for byte; the hub's journal and log never name a site
   behind ra; ra's status counts the sites' gap reports, a report sent upstream for its sites
   and a catch-up run for them; s2 took no part in it.
3. ra and s2 are stopped while two more products go out, then both started again: ra misses
   the numbers itself, and so do both sites below it (s1 ran, but nothing reached it). One
   report of ra's brings the hub's catch-up, which now carries data (ra lacks the files), and ra
   relays it to s1 and s2 as it arrives. Asserted: ra, s1 and s2 hold both products byte for
   byte; again the hub never hears of s1 or s2.
4. The hub lists ra in `relays` (relay_timeout 30 s). ra is killed (SIGKILL) during a 10 MB
   product's session, once it checkpointed it, and started again 20 s later, past the 10 s the
   hub waits for an ordinary site: the hub still waits for it, ra resumes the session upstream
   and for its sites, every daemon holds the product, the hub's journal says `stored` at ra,
   and no catch-up was needed. The same one hop down: rb (listed in ra's channel `relays`) is
   killed during a 10 MB product and started 20 s later; ra's session for its sites waits for
   it, rb resumes the session for s3, and both hold the product.
5. ra is killed 0.8 s into a 6 MB product's session and stays down until the hub has failed it
   (silent 30 s) and ended the session; restarted, ra and every site below it hold the
   product, by the catch-up ra's next report brings.
Last, no daemon's sequence book reports a session missing: the relays' catch-ups carried the
hub's numbers to every site.

usage: test_relay_catch_up.py BUILD_DIR"""

import hashlib
import os
import random
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, ChannelSite, check, free_group, log,  # noqa: E402
                            loopback_multicast_works, relay_status, stop_all, wait_checkpoint)
from test_feed import Feed, delivered, drop, query, wait_until  # noqa: E402

UNSIGNED = "allow_unsigned = true"


def digest(data):
    return hashlib.sha256(data).hexdigest()


def catch_up_status(d):
    return (relay_status(d) or {}).get("catch_up") or {}


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-relay-catch-up-",
                            dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(61)
    feed = None
    daemons = []
    try:
        spool = os.path.join(base, "spool")
        journal = os.path.join(base, "journal.db")
        g0, g1 = free_group(), free_group()
        config = os.path.join(base, "feed.toml")
        with open(config, "w") as f:
            f.write("""
interface = "127.0.0.1"
rate = "20M"
journal = "%(journal)s"
retention = "1h"
retained = "%(base)s/retained"
http = "off"
relays = ["ra"]
relay_timeout = "30s"

[[channel]]
name = "obs"
group = "%(g0)s"
spool = ["%(spool)s"]
batch_window = "100ms"
after = "delete"
heartbeat = "2s"
register_window = "1s"
""" % dict(journal=journal, base=base, g0=g0, spool=spool))
        g2 = free_group()
        # rb relays in turn: the sessions ra runs for its sites wait for it as the hub waits
        # for ra (60 s, not 10).
        ra = ChannelSite(bin_dir, base, "ra", "group = \"%s\"\nrelay_group = \"%s\"\nrelays = "
                         "[\"rb\"]" % (g0, g1), top=UNSIGNED)
        s1 = ChannelSite(bin_dir, base, "s1", "group = \"%s\"" % g1, top=UNSIGNED)
        s2 = ChannelSite(bin_dir, base, "s2", "group = \"%s\"" % g1, top=UNSIGNED)
        rb = ChannelSite(bin_dir, base, "rb", "group = \"%s\"\nrelay_group = \"%s\"" % (g1, g2),
                         top=UNSIGNED)
        s3 = ChannelSite(bin_dir, base, "s3", "group = \"%s\"" % g2, top=UNSIGNED)
        daemons += [ra, s1, s2, rb, s3]
        behind = ("s1", "s2", "rb", "s3")
        feed = Feed(bin_dir, base, config)
        feed.start()

        def product(name, size):
            data = rng.randbytes(size)
            drop(spool, name, data)
            time.sleep(0.3)  # past the batch window: one session, one number each
            return name, digest(data)

        def all_sent(prefix, n):
            return lambda: query(journal, "SELECT count(*) FROM products WHERE name LIKE ? AND "
                                 "state = 'sent'", (prefix + "%",))[0][0] == n

        def relay_idle(d):
            # The status file is written every second: a fresh one shows no session running.
            since = time.time()
            wait_until("%s: no session running for its sites" % d.id, lambda: os.path.getmtime(
                d.status) > since + 0.1 and (relay_status(d) or {}).get("two_way", {}).get(
                "sessions_active") == 0, 30, feed, daemons)

        def hub_names(site):
            return (query(journal, "SELECT count(*) FROM outcomes WHERE site = ?", (site,))[0][0]
                    or ("'%s'" % site) in feed.log_text() or ("site %s " % site) in
                    feed.log_text())

        # 1. Everyone gets the first product through the relay.
        name, h = product("first/p0.bufr", 50_000)
        wait_until("the first product everywhere", delivered(daemons, name, h), 40, feed,
                   daemons)

        # 2. s1 and s3 miss three sessions and are caught up through ra (and rb).
        s1.stop()
        s3.stop()
        missed = dict(product("down/o%d.bufr" % i, 30_000 + 1000 * i) for i in range(3))
        wait_until("the three products sent", all_sent("down/", 3), 40, feed, [ra, s2])
        wait_until("the three products at ra, s2 and rb",
                   lambda: all(delivered([ra, s2, rb], n, d)() for n, d in missed.items()), 40,
                   feed, [ra, s2, rb])
        # Once the relays' own sessions for their sites are over, nothing but a catch-up reaches
        # s1 and s3.
        relay_idle(ra)
        relay_idle(rb)
        sessions_at_s2 = (s2.read_status() or {}).get("sessions_completed", 0)
        s1.start()
        s3.start()
        t0 = time.time()
        wait_until("the three missed products at s1 and s3", lambda: all(
            delivered([s1, s3], n, d)() for n, d in missed.items()), 60, feed, daemons)
        took = time.time() - t0
        relay_idle(ra)
        c = catch_up_status(ra)
        log("s1 and s3 caught up through ra in %.1f s (heartbeat 2 s); ra: %s" % (took, c))
        check(c.get("gap_reports_taken", 0) >= 1, "ra took no gap report from s1: %s" % c)
        relay_idle(rb)
        check(catch_up_status(rb).get("gap_reports_taken", 0) >= 1,
              "rb took no gap report from s3: %s" % catch_up_status(rb))
        check(c.get("reports_sent", 0) >= 1, "ra sent no gap report for its sites: %s" % c)
        check(c.get("sessions", 0) >= 1, "ra ran no catch-up for its sites: %s" % c)
        check(c.get("gap_reports_refused", 1) == 0, "ra refused gap reports: %s" % c)
        check("that reported its sessions missing" in ra.log_text() and
              "that reported its sessions missing" in rb.log_text(),
              "the relays' catch-ups were not for the sites that reported gaps")
        text = feed.log_text()
        check("site ra reports" in text, "the hub took no gap report from ra")
        check(query(journal, "SELECT count(*) FROM sessions WHERE kind = 'catchup'")[0][0] >= 1,
              "the hub journaled no catch-up session")
        for site in behind:
            check(not hub_names(site), "the hub heard of %s, which is behind the relay" % site)
        check((s2.read_status() or {}).get("sessions_completed", 0) == sessions_at_s2,
              "s2 took part in s1's catch-up")

        # 3. The relay itself misses sessions, and so does a site behind it.
        ra.stop()
        s2.stop()
        missed2 = dict(product("gone/g%d.bufr" % i, 40_000 + 1000 * i) for i in range(2))
        wait_until("the two products sent", all_sent("gone/", 2), 60, feed, [s1])
        check(not any(delivered([s1], n, d)() for n, d in missed2.items()),
              "s1 got a product while its relay was down")
        ra.start()
        s2.start()
        t0 = time.time()
        wait_until("the two missed products at ra, s1 and s2", lambda: all(
            delivered(daemons, n, d)() for n, d in missed2.items()), 60, feed, daemons)
        log("ra and the sites behind it caught up in %.1f s" % (time.time() - t0))
        # ra lacked them: the hub's catch-up carried the data, and ra passed it on. A site
        # whose gap report reaches ra after ra's own went upstream is caught up in a second
        # catch-up for the subtree, in which ra holds the products already. The hub journals
        # outcomes when its session ends, after the files are in place at the sites: wait for it.
        def stored_at_ra():
            return query(journal, "SELECT count(DISTINCT p.name) FROM outcomes o JOIN products p "
                         "ON p.id = o.product WHERE p.name LIKE 'gone/%' AND o.site = 'ra' AND "
                         "o.outcome = 'stored'")[0][0]
        wait_until("the hub's outcome 'stored' at ra for the products it missed",
                   lambda: stored_at_ra() == len(missed2), 30, feed, daemons)
        outs = {o for (o,) in query(journal, "SELECT DISTINCT o.outcome FROM outcomes o JOIN "
                                    "products p ON p.id = o.product WHERE p.name LIKE 'gone/%' "
                                    "AND o.site = 'ra' AND o.outcome != 'missed'")}
        check(outs <= {"stored", "held"}, "ra's outcomes of its own catch-up: %s" % sorted(outs))
        for site in behind:
            check(not hub_names(site), "the hub heard of %s, which is behind the relay" % site)
        # 4. The relay is killed in the middle of a session, once it checkpointed it, and is
        # down for 20 s: the hub's session waits from the end of its pass 1, about 2 s after the
        # kill, so this is past the 10 s it waits for a silent site and within the 30 s it waits
        # for a relay. Restarted, it resumes the session upstream and for its sites; the hub
        # ends it with the relay complete, and no catch-up is needed.
        catch_ups = query(journal, "SELECT count(*) FROM sessions WHERE kind = 'catchup'")[0][0]
        mid_name, mid_digest = product("mid/field.grib2", 10_000_000)
        ra.wait_for_log("10000000 bytes announced", 20)
        wait_checkpoint(ra)
        ra.stop(signal.SIGKILL)
        time.sleep(20)  # the outage
        check(not all_sent("mid/", 1)(), "the hub ended the session while the relay was down")
        ra.start()
        wait_until("the product at every daemon after the relay's resume",
                   delivered(daemons, mid_name, mid_digest), 90, feed, daemons)
        wait_until("the hub's end of the session", all_sent("mid/", 1), 30, feed, daemons)
        outs = query(journal, "SELECT o.outcome FROM outcomes o JOIN products p ON p.id = "
                     "o.product WHERE p.name = ? AND o.site = 'ra'", (mid_name,))
        check(outs == [("stored",)], "the hub's outcome at ra after its resume: %s" % outs)
        check("resumed relaying" in ra.log_text(), "ra did not resume relaying the session")
        check(query(journal, "SELECT count(*) FROM sessions WHERE kind = 'catchup'")[0][0] ==
              catch_ups, "a catch-up was needed after the relay's resume")
        log("a relay down 20 s resumed its session; every site holds the 10 MB product")

        # The same one hop down: rb, a relay behind ra, is down 20 s during a product. ra lists
        # it in `relays`, so the session ra runs for its sites waits for it, and rb resumes it
        # for s3.
        rb_name, rb_digest = product("rb/field.grib2", 10_000_000)
        rb.wait_for_log("10000000 bytes announced", 20)
        wait_checkpoint(rb)
        rb.stop(signal.SIGKILL)
        # The outage: ra's session waits from the end of its pass 1 (about 2 s after the kill),
        # so 20 s is past its 10 s for an ordinary site, and within 60 s for a relay.
        time.sleep(20)
        rb.start()
        wait_until("the product at rb and s3 after rb's resume",
                   delivered([rb, s3], rb_name, rb_digest), 90, feed, daemons)
        check("resumed relaying" in rb.log_text(), "rb did not resume relaying the session")
        check("receiver 'rb' failed" not in ra.log_text(),
              "ra failed rb, a relay it lists, within 60 s")
        log("a relay behind a relay down 20 s resumed its session for its site")

        # 5. The relay is killed in the middle of a session and stays down longer than the hub
        # waits for it: the hub fails it and ends the session. Restarted, the relay and its
        # sites report the number at the next heartbeat and the catch-up brings the product.
        big_name, big_digest = product("big/field.grib2", 6_000_000)
        ra.wait_for_log("6000000 bytes announced", 20)
        time.sleep(0.8)
        ra.stop(signal.SIGKILL)
        wait_until("the hub's end of the session ra was killed in", all_sent("big/", 1), 60,
                   feed, [s1, s2])
        check(query(journal, "SELECT o.outcome FROM outcomes o JOIN products p ON p.id = "
                    "o.product WHERE p.name = ? AND o.site = 'ra'", (big_name,)) ==
              [("failed",)] or not delivered([ra], big_name, big_digest)(),
              "ra holds the product it was killed in")
        ra.start()
        t0 = time.time()
        wait_until("the product at every daemon after the relay's restart",
                   delivered(daemons, big_name, big_digest), 90, feed, daemons)
        log("every daemon holds the 6 MB product %.1f s after the relay's restart"
            % (time.time() - t0))

        # The relays' catch-ups carried the hub's numbers: every site stops reporting them.
        def nothing_missing(d):
            st = d.read_status() or {}
            seqs = st.get("sequences") or []
            return seqs and all(q["missing_sessions"] == 0 for q in seqs)
        for d in daemons:
            wait_until("%s: no session missing" % d.id, lambda d=d: nothing_missing(d), 10, feed,
                       daemons)
        log("PASS: catch-up through a relay")
        return 0
    finally:
        stop_all(base, feed, daemons)


if __name__ == "__main__":
    sys.exit(main())
