#!/usr/bin/env python3
"""Integration: mcdist-feed's [wis2] hook. The test starts a real mosquitto
broker on a free loopback port and a real mosquitto_sub on '#', then a real mcdistd site and
the real mcdist-feed with `[wis2]` limited to channel "obs" (channel "quiet" is not announced).
Products dropped in both spools are delivered; exactly one WIS2 Notification Message per "obs"
product arrives on the configured topic once its session ended: valid WNM 1.0 JSON, data_id =
prefix + product name (as it is), canonical link = base_url + name percent-encoded (one name
has a space, '%', '#', '?' and non-ASCII letters) with the file's length, integrity the
base64 SHA-256 of the product; none for "quiet"'s product. /status counts them published.

SKIPPED only if mosquitto or mosquitto_sub is missing or the broker cannot run here.

usage: test_feed_wis2.py BUILD_DIR"""

import base64
import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import SKIP, Daemon, check, free_group, log, loopback_multicast_works  # noqa: E402
from status_common import free_tcp_port, get  # noqa: E402
from test_feed import Feed, delivered, drop, wait_until  # noqa: E402
from test_wis2 import Subscriber, canonical_href, find_mosquitto  # noqa: E402

TOPIC = "origin/a/wis2/xx-hub/data/core/weather/surface-based-observations/synop"
PREFIX = "xx-hub/data/core/weather/surface-based-observations/synop/"
BASE_URL = "https://hub.example.org/products/"
OBS = ["synop/a.bufr", "synop/b.bufr", "temp/c.bufr", "temp/x y%20#?Ünï.bufr"]


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    broker_bin = find_mosquitto()
    if not broker_bin or not shutil.which("mosquitto_sub") or not shutil.which("mosquitto_pub"):
        print("SKIPPED: mosquitto / mosquitto-clients are not installed (deploy/install-deps.sh)")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-feedwis2-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(4)
    broker = sub = feed = site = None
    try:
        port = free_tcp_port()
        conf = os.path.join(base, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n" % port)
        broker_log = open(os.path.join(base, "mosquitto.log"), "wb")
        broker = subprocess.Popen([broker_bin, "-c", conf], stdout=broker_log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while True:
            if broker.poll() is not None:
                with open(os.path.join(base, "mosquitto.log"), "rb") as f:
                    print("SKIPPED: mosquitto cannot run here: " + f.read().decode("utf-8", "replace"))
                return SKIP
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                check(time.time() < deadline, "mosquitto did not listen on port %d" % port)
                time.sleep(0.05)
        sub = Subscriber(port)
        deadline = time.time() + 10
        while not sub.messages("probe/ready"):
            check(sub.proc.poll() is None, "mosquitto_sub exited: %s" % sub.lines)
            check(time.time() < deadline, "mosquitto_sub did not receive its probe")
            subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-t", "probe/ready",
                            "-m", "x"], timeout=5, check=True)
            time.sleep(0.1)

        s_obs = os.path.join(base, "spool", "obs")
        s_quiet = os.path.join(base, "spool", "quiet")
        g1, g2 = free_group(), free_group()
        while g2.split(":")[0] == g1.split(":")[0]:
            g2 = free_group()
        feed_conf = os.path.join(base, "feed.toml")
        with open(feed_conf, "w") as f:
            f.write('interface = "127.0.0.1"\nrate = "50M"\njournal = "%s"\nretention = "0s"\n'
                    'http = "127.0.0.1:0"\n'
                    '[wis2]\nbroker = "mqtt://127.0.0.1:%d"\ntopic = "%s"\nbase_url = "%s"\n'
                    'qos = 1\nchannels = ["obs"]\n'
                    '[[channel]]\nname = "obs"\ngroup = "%s"\nspool = ["%s"]\nbatch_window = "200ms"\n'
                    'register_window = "300ms"\nafter = "delete"\n'
                    '[[channel]]\nname = "quiet"\ngroup = "%s"\nspool = ["%s"]\nbatch_window = "50ms"\n'
                    'register_window = "300ms"\n'
                    % (os.path.join(base, "journal.db"), port, TOPIC, BASE_URL, g1, s_obs, g2, s_quiet))
        site = Daemon(bin_dir, base, "site-w", g1, extra=["--group", g2, "--http", "off"])
        feed = Feed(bin_dir, base, feed_conf)
        feed.start()
        wait_until("the feed's status port", lambda: re.search(
            r"status page on http://127\.0\.0\.1:(\d+)/", feed.log_text()), 10, feed)
        http = int(re.search(r"status page on http://127\.0\.0\.1:(\d+)/", feed.log_text()).group(1))
        wait_until("the feed's broker connection",
                   lambda: json.loads(get(http, "/status")[2]).get("wis2", {}).get("connected"), 15, feed)

        data = {}
        for n in OBS:
            data[n] = rng.randbytes(rng.randint(1000, 300000))
            drop(s_obs, n, data[n])
        quiet = rng.randbytes(2000)
        drop(s_quiet, "q.bin", quiet)
        for n in OBS:
            wait_until(n + " at the site", delivered([site], n, hashlib.sha256(data[n]).hexdigest()),
                       30, feed, [site])
        wait_until("q.bin at the site", delivered([site], "q.bin", hashlib.sha256(quiet).hexdigest()),
                   30, feed, [site])
        wait_until("%d notifications" % len(OBS), lambda: len(sub.messages(TOPIC)) >= len(OBS), 20, feed)
        wait_until("the feed to count them published",
                   lambda: json.loads(get(http, "/status")[2])["wis2"]["published"] == len(OBS), 10, feed)
        msgs = sub.messages(TOPIC)
        check(len(msgs) == len(OBS), "%d notifications for %d products" % (len(msgs), len(OBS)))
        seen = set()
        for text in msgs:
            m = json.loads(text)
            check(m["type"] == "Feature" and m["conformsTo"] == ["http://wis.wmo.int/spec/wnm/1/conf/core"],
                  "not a WNM core Feature: %s" % text)
            p = m["properties"]
            check(p["data_id"].startswith(PREFIX), "data_id %r" % p["data_id"])
            name = p["data_id"][len(PREFIX):]
            check(name in data, "data_id %r names no obs product" % p["data_id"])
            check(name not in seen, "two notifications for %s" % name)
            seen.add(name)
            want = base64.b64encode(hashlib.sha256(data[name]).digest()).decode()
            check(p["integrity"] == {"method": "sha256", "value": want},
                  "%s integrity %r, expected %s" % (name, p["integrity"], want))
            link = m["links"][0]
            check(link["rel"] == "canonical" and link["href"] == canonical_href(BASE_URL, name) and
                  link["length"] == len(data[name]), "%s link %r" % (name, link))
        check(not any("q.bin" in t for t in msgs), "the quiet channel's product was announced")
        check(all(t == TOPIC or t.startswith("probe/") for t, _ in sub.lines),
              "messages on other topics: %s" % [t for t, _ in sub.lines])
        log("one WNM per obs product with its SHA-256 and canonical link; none for 'quiet'")
        check(feed.stop() == 0, "mcdist-feed exit status %s" % feed.proc.returncode)
        feed = None
        log("PASS")
        return 0
    finally:
        if feed:
            feed.stop()
        if site:
            site.stop()
        if sub:
            sub.stop()
        if broker and broker.poll() is None:
            broker.terminate()
            broker.wait(5)


if __name__ == "__main__":
    sys.exit(main())
