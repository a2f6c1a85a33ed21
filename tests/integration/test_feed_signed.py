#!/usr/bin/env python3
"""mcdist-feed's signed sessions end to end on loopback ("its sessions carry the sender
and site authentication of the trust issue"): the real hub daemon with `key` and `site_keys`,
three real mcdistd sites that pin the feed's key (--trust) and have keys of their own
(mcdist-keygen).

- site-a and site-b (their keys in site_keys) get every product byte-identical; the hub journal
  has them 'stored', and each site's delivery journal names the feed's key as sender_key;
- site-c (its key not in site_keys) is refused: no 'stored' outcome for it in the hub journal,
  the products absent from its tree;
- an unsigned mcdist-send to the same group writes nothing into any site's tree (neither a new
  name nor a different version of a delivered product).

usage: test_feed_signed.py BUILD_DIR"""

import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, Daemon, check, free_group, keygen, log,  # noqa: E402
                            loopback_multicast_works, run_sender, sha256_file, tree_digests,
                            site_journal, write_random, stop_all)
from test_feed import Feed, delivered, drop, query, wait_until  # noqa: E402


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-feedsig-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(1011)
    feed = None
    daemons = []
    try:
        hub_pub = keygen(bin_dir, os.path.join(base, "hub.key"))
        check(hub_pub.startswith("mcdist-ed25519:"), "keygen printed " + hub_pub)
        pubs = {s: keygen(bin_dir, os.path.join(base, s + ".key"))
                for s in ("site-a", "site-b", "site-c")}
        site_keys = os.path.join(base, "sites.txt")
        with open(site_keys, "w") as f:
            # site-c's key is not pinned at the hub.
            f.write("site-a %s\nsite-b %s\n" % (pubs["site-a"], pubs["site-b"]))

        spool = os.path.join(base, "spool", "obs")
        os.makedirs(spool)
        journal = os.path.join(base, "journal.db")
        group = free_group()
        config = os.path.join(base, "feed.toml")
        with open(config, "w") as f:
            f.write("""
interface = "127.0.0.1"
rate = "100M"
key = "%(key)s"
site_keys = "%(site_keys)s"
journal = "%(journal)s"
retention = "1h"
retained = "%(retained)s"
control_socket = "%(control)s"
http = "off"

[[channel]]
name = "obs"
group = "%(group)s"
spool = ["%(spool)s"]
priority = 5
batch_window = "200ms"
after = "delete"
register_window = "2s"
""" % {"key": os.path.join(base, "hub.key"), "site_keys": site_keys, "journal": journal,
       "retained": os.path.join(base, "retained"), "control": os.path.join(base, "control.sock"),
       "group": group, "spool": spool})

        for s in ("site-a", "site-b", "site-c"):
            daemons.append(Daemon(bin_dir, base, s, group,
                                  ["--trust", os.path.join(base, "hub.key.pub"),
                                   "--key", os.path.join(base, s + ".key"), "--http", "off",
                                   "--session-timeout", "5s"]))
        accepted, refused = daemons[:2], daemons[2]
        feed = Feed(bin_dir, base, config)
        feed.start()

        # 1. A batch of two products: signed session, the pinned sites store them.
        want = {}
        for name, size in (("a.bufr", 30_000), ("sub/b.grib2", 1_500_000)):
            data = rng.randbytes(size)
            want[name] = sha256_file(drop(spool, name, data))
        for name, digest in want.items():
            wait_until(name + " at site-a and site-b", delivered(accepted, name, digest), 30, feed,
                       daemons)
        wait_until("the batch's outcomes in the hub journal", lambda: query(
            journal, "SELECT count(*) FROM sessions WHERE ended IS NOT NULL")[0][0] >= 1, 30, feed)
        outs = query(journal, """SELECT p.name, o.site, o.outcome FROM outcomes o
            JOIN products p ON p.id = o.product ORDER BY p.name, o.site""")
        log("hub outcomes: %s" % outs)
        stored = sorted((n, s) for n, s, o in outs if o == "stored")
        check(stored == sorted((n, s) for n in want for s in ("site-a", "site-b")),
              "stored outcomes %s" % outs)
        check(not [r for r in outs if r[1] == "site-c" and r[2] == "stored"],
              "site-c (key not in site_keys) stored a product: %s" % outs)
        check(tree_digests(refused.dest) == {}, "site-c's tree: %s" % tree_digests(refused.dest))
        # site-c verified the announce (it trusts the feed) but the feed gave it no session key:
        # the session's datagrams are dropped there as 'no key'.
        wait_until("site-c's status counting the session's datagrams as 'no key'", lambda: (
            (refused.read_status() or {}).get("not_authenticated") or {}).get("no_key", 0) > 0, 10)
        signed = query(journal, "SELECT count(*) FROM sessions WHERE outcome IS NOT NULL")[0][0]
        check(signed >= 1, "no ended session in the hub journal")
        for d in accepted:
            wait_until("%s's delivery journal" % d.id, lambda d=d: len(site_journal(d)) == 2, 10)
            rows = site_journal(d)
            check(rows == sorted((n, hub_pub) for n in want),
                  "%s delivery journal (relpath, sender_key): %s, want the feed's key %s"
                  % (d.id, rows, hub_pub))
        check(site_journal(refused) == [], "site-c journaled deliveries: %s" % site_journal(refused))
        log("signed batch stored at site-a and site-b (sender_key = the feed's key); site-c "
            "refused")

        # 2. An unsigned mcdist-send to the same group: nothing lands in any tree.
        before = {d.id: tree_digests(d.dest) for d in daemons}
        evil = os.path.join(base, "evil")
        write_random(os.path.join(evil, "a.bufr"), 30_000, random.Random(666))
        write_random(os.path.join(evil, "intruder.bin"), 10_000, random.Random(667))
        code, summary, out = run_sender(
            bin_dir, [os.path.join(evil, "a.bufr"), os.path.join(evil, "intruder.bin")], group,
            extra=["--register-window", "1s"])
        check(code != 0, "an unsigned sender found receivers (exit %d):\n%s" % (code, out))
        check(not summary or summary.get("receivers") == [],
              "sites registered with an unsigned sender: %s" % (summary or {}).get("receivers"))
        for d in daemons:
            wait_until("%s's status counting the unsigned datagrams" % d.id, lambda d=d: (
                (d.read_status() or {}).get("not_authenticated") or {}).get("unsigned", 0) > 0, 10)
            check(tree_digests(d.dest) == before[d.id],
                  "%s's tree changed after the unsigned session: %s" % (d.id, tree_digests(d.dest)))
            check(d.alive(), "%s died" % d.id)
        log("an unsigned mcdist-send on the group reached no site")

        code = feed.stop()
        check(code == 0, "mcdist-feed exited %s on SIGTERM" % code)
        log("PASS: signed feed sessions reach the pinned sites only")
        return 0
    finally:
        stop_all(base, feed, daemons)


if __name__ == "__main__":
    sys.exit(main())
