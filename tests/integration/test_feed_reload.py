#!/usr/bin/env python3
"""Integration: mcdist-feed reloads its configuration at SIGHUP, with a real mcdistd
site joined to both groups.

- A 3 MB product (at 8 Mbit/s, a few seconds) is being sent on channel "one" when a SIGHUP
  brings a configuration that adds channel "two" with a new spool: the reload is logged (one
  summary line) while that session runs, the session is not dropped (the product arrives at the
  site with its SHA-256, "1 of 1 sites complete"), and a product dropped in the new spool is
  delivered.
- /status lists channels one and two; mcdist_feed_config_reloads_total{result="success"} 1.
- An invalid file at SIGHUP is logged as not reloaded; the feed keeps running ({result=
  "failure"} 1).
- A reload that removes "two": a product dropped in its spool is not picked up (never queued,
  still in the spool) while one dropped in "one"'s spool afterwards is delivered; /status lists
  channel one only.

usage: test_feed_reload.py BUILD_DIR"""

import hashlib
import json
import os
import random
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import SKIP, Daemon, check, free_group, log, loopback_multicast_works  # noqa: E402
from status_common import get, metric_value  # noqa: E402
from test_feed import Feed, delivered, drop, wait_until  # noqa: E402
import re  # noqa: E402


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-feedreload-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(111)
    feed = None
    site = None
    try:
        s1 = os.path.join(base, "spool", "one")
        s2 = os.path.join(base, "spool", "two")
        os.makedirs(s1)
        g1, g2 = free_group(), free_group()
        while g2.split(":")[0] == g1.split(":")[0]:
            g2 = free_group()
        conf = os.path.join(base, "feed.toml")
        head = ('interface = "127.0.0.1"\nrate = "8M"\njournal = "%s"\nretention = "1h"\n'
                'retained = "%s"\nhttp = "127.0.0.1:0"\n'
                '[[channel]]\nname = "one"\ngroup = "%s"\nspool = ["%s"]\nbatch_window = "50ms"\n'
                'register_window = "300ms"\nafter = "delete"\n'
                % (os.path.join(base, "journal.db"), os.path.join(base, "retained"), g1, s1))
        two = ('[[channel]]\nname = "two"\ngroup = "%s"\nspool = ["%s"]\nbatch_window = "50ms"\n'
               'register_window = "300ms"\nafter = "delete"\n' % (g2, s2))

        def write(text):
            with open(conf + ".tmp", "w") as f:
                f.write(text)
            os.replace(conf + ".tmp", conf)

        def reload(text, needle):
            before = feed.log_text().count(needle)
            write(text)
            feed.proc.send_signal(signal.SIGHUP)
            wait_until("'%s' after SIGHUP" % needle,
                       lambda: feed.log_text().count(needle) > before, 10, feed)
            return feed.log_text()

        write(head)
        site = Daemon(bin_dir, base, "site-a", g1, extra=["--group", g2, "--http", "off"])
        feed = Feed(bin_dir, base, conf)
        feed.start()
        wait_until("the feed's status port", lambda: re.search(
            r"status page on http://127\.0\.0\.1:(\d+)/", feed.log_text()), 10, feed)
        port = int(re.search(r"status page on http://127\.0\.0\.1:(\d+)/", feed.log_text()).group(1))

        big = rng.randbytes(3 << 20)
        drop(s1, "big.bin", big)
        wait_until("the session of big.bin to start",
                   lambda: re.search(r"channel one: session \S+ \(batch", feed.log_text()), 20, feed)
        text = reload(head + two, "configuration reloaded")
        check("ended" not in text.split("configuration reloaded")[0].split("channel one: session")[-1],
              "the session ended before the reload: the test did not test a session under way")
        line = [l for l in text.splitlines() if "configuration reloaded" in l][-1]
        check("channel two added" in line, "the summary misses the new channel: %s" % line)
        wait_until("big.bin at the site", delivered([site], "big.bin", hashlib.sha256(big).hexdigest()),
                   60, feed, [site])
        wait_until("the session's end", lambda: "1 of 1 sites complete" in feed.log_text(), 30, feed)
        log("the session under way finished after the reload")

        p2 = rng.randbytes(5000)
        drop(s2, "n/p2.bin", p2)
        wait_until("p2 via the new channel", delivered([site], "n/p2.bin",
                                                        hashlib.sha256(p2).hexdigest()), 30, feed, [site])
        doc = json.loads(get(port, "/status")[2])
        check(sorted(c["name"] for c in doc["channels"]) == ["one", "two"], "/status channels: %s" %
              [c["name"] for c in doc["channels"]])
        m = get(port, "/metrics")[2].decode()
        check(metric_value(m, "mcdist_feed_config_reloads_total", {"result": "success"}) == 1,
              "reloads_total{success} is not 1")
        log("channel two added: its spool's product delivered, /status lists it")

        reload(head + two + "[[channel]\n", "configuration not reloaded")
        check(feed.alive(), "the feed exited on an invalid configuration")
        m = get(port, "/metrics")[2].decode()
        check(metric_value(m, "mcdist_feed_config_reloads_total", {"result": "failure"}) == 1,
              "reloads_total{failure} is not 1")
        log("an invalid configuration was refused; the feed runs on")

        reload(head, "channel two removed")
        p3 = rng.randbytes(4000)
        drop(s2, "n/p3.bin", p3)
        p4 = rng.randbytes(4000)
        drop(s1, "after.bin", p4)
        wait_until("after.bin on channel one", delivered([site], "after.bin",
                                                         hashlib.sha256(p4).hexdigest()), 30, feed, [site])
        check("queued n/p3.bin" not in feed.log_text(), "the removed channel's spool was still read")
        check(os.path.exists(os.path.join(s2, "n", "p3.bin")), "p3.bin left the removed spool")
        check(not os.path.exists(os.path.join(site.dest, "n", "p3.bin")), "p3.bin was sent")
        doc = json.loads(get(port, "/status")[2])
        check([c["name"] for c in doc["channels"]] == ["one"], "/status channels after removal: %s" %
              [c["name"] for c in doc["channels"]])
        log("channel two removed: its spool is no longer picked up")
        check(feed.stop() == 0, "mcdist-feed exit status %s" % feed.proc.returncode)
        feed = None
        log("PASS")
        return 0
    finally:
        if feed:
            feed.stop()
        if site:
            site.stop()


if __name__ == "__main__":
    sys.exit(main())
