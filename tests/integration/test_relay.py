#!/usr/bin/env python3
"""Integration: relays of one-way sessions (mcdistd `relay_group`; docs/design-notes.md
"Relays") over loopback multicast, with real mcdist-send, mcdist-feed and mcdistd.

Part 1, nested relays of a signed silent session. mcdist-send --key --silent-passes 2 sends to
group G0. Relay "ra" (a two-way site of G0 trusting the hub key, made a relay by a
configuration reload) relays G0 into G1; relay "rb"
(silent, on G1, dropping 2 % as a lossy hop would) relays G1 into G2; site "s1" is on G1, site
"s2" (dropping 2 %) on G2. Both sites are silent and trust only the hub's key. Asserted: every
file at ra, rb, s1 and s2 SHA-256 identical to the source; s1 and s2 checked blocks against the
hub's signed block digests and refused none as bad; no site and no relay sent a datagram, and
the sender received none; each relay's status counts the session relayed and datagrams sent
on, as many as it read (the hub's repeated ENDs too); s1's log names ra's relay socket as the
session's source; a datagram sent to ra's relay socket is counted (site_datagrams) and dropped.
Then a two-way session (signed,
no silent passes) to G0: ra takes part and delivers it, and relays nothing of it (counted as a
session not relayed); s1 and s2 hold none of its files.

Part 2, heartbeats, a relay killed mid-session, catch-up. mcdist-feed sends signed silent
sessions (2 passes, heartbeat 2 s) on G3 and serves its products over HTTPS. Relay "rc"
(silent, catch_up_url = the hub) relays G3 into G4; sites "s3" and "s4" on G4 are silent with
catch_up_url = the hub. A first product reaches everyone through rc. rc is killed (SIGKILL)
while a 6 MB product is under way, and started again 1 s later; two more products follow.
Asserted: every product at s3 and s4, byte-identical, and no session number missing at either
(what the relay's outage cost them came by catch-up over HTTPS, which the relayed heartbeats
started); rc relayed heartbeats; no site sent a datagram.

usage: test_relay.py BUILD_DIR"""

import hashlib
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, ChannelSite, check, relay_status, sessions_over,
                            silent_feed_config, free_group, log,  # noqa: E402
                            loopback_multicast_works, make_ca, run_sender, sha256_file,
                            send_silent, stop_all, tree_digests, wait_for, write_random)
from test_feed import Feed, drop, wait_until  # noqa: E402


def Site(bin_dir, base, rid, channel, extra=(), top=""):
    """A site on loopback with one channel "products" (mcdist_testlib.ChannelSite)."""
    return ChannelSite(bin_dir, base, rid, channel, top=top, extra=extra)


def part1(bin_dir, base):
    key = os.path.join(base, "hub.key")
    subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), key],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    trust = "trusted_senders = [\"%s.pub\"]" % key
    rng = random.Random(31)
    src = os.path.join(base, "products")
    sizes = [0, 1, 1400, 10_000] * 3 + [300_000] * 4 + [2_000_000]
    for i, size in enumerate(sizes):
        write_random(os.path.join(src, "d%d" % (i % 3), "p%03d.bin" % i), size, rng)
    want = {"products/" + p: h for p, h in tree_digests(src).items()}
    g0, g1, g2 = free_group(), free_group(), free_group()
    daemons = []
    try:
        # ra starts as a plain site; a reload (SIGHUP) makes it a relay.
        ra = Site(bin_dir, base, "ra", "group = \"%s\"" % g0, top=trust)
        daemons.append(ra)
        check(relay_status(ra) is None, "ra relays before it is told to")
        ra.reload("group = \"%s\"\nrelay_group = \"%s\"" % (g0, g1), "relaying its one-way sessions")
        rb = Site(bin_dir, base, "rb", "group = \"%s\"\nsilent = true\nrelay_group = \"%s\""
                  % (g1, g2), ["--drop-rate", "0.02", "--drop-seed", "3"], top=trust)
        daemons.append(rb)
        s1 = Site(bin_dir, base, "s1", "group = \"%s\"\nsilent = true" % g1, top=trust)
        daemons.append(s1)
        s2 = Site(bin_dir, base, "s2", "group = \"%s\"\nsilent = true" % g2,
                  ["--drop-rate", "0.02", "--drop-seed", "5"], top=trust)
        daemons.append(s2)
        for d in (ra, rb):
            check("relaying its one-way sessions" in d.log_text(), "%s: no relay log line" % d.id)
        summary = send_silent(bin_dir, [src], g0, key=key)
        check(all(v == 0 for v in summary["control_received"].values()),
              "the sender received control: %s" % summary["control_received"])
        for d in daemons:
            wait_for("%s: the session's end" % d.id, lambda d=d: sessions_over(d), 30, d)
        for d in daemons:
            got = tree_digests(d.dest)
            check(got == want, "%s: delivered files differ from the source (%d of %d, %d bad)"
                  % (d.id, len(got), len(want), len([p for p in got if want.get(p) != got[p]])))
        # The relays hold the session until its END, so a status after it shows the whole.
        statuses = {d.id: d.read_status() for d in daemons}
        for rid, st in statuses.items():
            check(st["datagrams_sent"] == 0, "%s sent %d datagrams" % (rid, st["datagrams_sent"]))
        for rid in ("s1", "s2"):
            st = statuses[rid]
            check(st["block_digests"]["blocks_checked"] > 0,
                  "%s: no block checked against the hub's digests" % rid)
            check(st["not_authenticated"]["bad_digest"] == 0,
                  "%s: blocks refused as bad_digest: %s" % (rid, st["not_authenticated"]))
        check(statuses["s2"]["parity"]["blocks_recovered"] > 0,
              "s2: no block recovered from parity (behind two lossy hops)")
        for d in (ra, rb):
            r = relay_status(d)
            log("%s: relay %s" % (d.id, r))
            check(r and r["sessions"] == 1 and r["forwarded"] > 100,
                  "%s: the session was not relayed: %s" % (d.id, r))
            check(r["not_relayed_sessions"] == 0 and r["site_datagrams"] == 0,
                  "%s: relay counters: %s" % (d.id, r))
        # Every datagram a relay read of the session went on, the hub's three ENDs included
        # (the session closes at the relay at the first; the repeats go on as copies of it).
        for d in (ra, rb):
            st = statuses[d.id]
            live = [c for c in st["channel_sockets"] if not c["retired"]]
            read = live[0]["datagrams"] - st["dropped_by_drop_rate"]
            check(relay_status(d)["forwarded"] == read,
                  "%s: relayed %d of the %d datagrams it read" % (d.id, relay_status(d)["forwarded"],
                                                                  read))
        ra_source = relay_status(ra)["source"]
        check("from %s" % ra_source in s1.log_text(),
              "s1: its session's source is not ra's relay socket %s" % ra_source)

        # A datagram to the relay socket (what a site that is not silent would send it): read,
        # counted, dropped.
        host, port = ra_source.rsplit(":", 1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.sendto(b"\x4d\x44\x02\x0c" + b"\0" * 40, (host, int(port)))
        wait_for("ra: the site's datagram counted",
                 lambda: (relay_status(ra) or {}).get("site_datagrams") == 1, 10, ra)

        # A two-way session: ra takes part, nothing of it is relayed.
        two = os.path.join(base, "twoway")
        write_random(os.path.join(two, "t.bin"), 50_000, rng)
        code, summary, out = run_sender(bin_dir, [two], g0, rate="50M", receivers=["ra"],
                                        extra=["--key", key])
        check(code == 0, "two-way: mcdist-send exited %d:\n%s" % (code, out))
        check(os.path.exists(os.path.join(ra.dest, "twoway", "t.bin")),
              "two-way: ra did not deliver the file")
        wait_for("ra: the two-way session counted", lambda: (relay_status(ra) or {}).get(
            "not_relayed_sessions") == 1, 10, ra)
        for d in (rb, s1, s2):
            check(not os.path.exists(os.path.join(d.dest, "twoway")),
                  "two-way: %s received a two-way session through the relay" % d.id)
        check("not relayed into" in ra.log_text(), "ra: no log line for the unrelayed session")
        log("part 1: %d files through two nested relays, checked against the hub's key at "
            "every site; a two-way session not relayed" % len(want))
    finally:
        for d in daemons:
            d.stop()


def missing_sessions(d):
    st = d.read_status() or {}
    return sum(s.get("missing_sessions", 0) for s in st.get("sequences", []))


def part2(bin_dir, base):
    ca, crt, tls_key = make_ca(base)
    hub_key = os.path.join(base, "hub2.key")
    subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), hub_key],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    trust = "trusted_senders = [\"%s.pub\"]" % hub_key
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = "https://127.0.0.1:%d/" % port
    spool = os.path.join(base, "spool")
    os.makedirs(os.path.join(spool, "obs"))
    g3, g4 = free_group(), free_group()
    config = os.path.join(base, "feed.toml")
    with open(config, "w") as f:
        f.write(silent_feed_config(base, hub_key, g3, spool, "20M", 32, "10%",
                                   products=(port, crt, tls_key)))
    oneway = "silent = true\ncatch_up_url = \"%s\"\ncatch_up_ca = \"%s\"" % (url, ca)
    feed = None
    sites = []
    try:
        rc = Site(bin_dir, base, "rc", "group = \"%s\"\nrelay_group = \"%s\"\n%s" % (g3, g4, oneway),
                  top=trust + "\nsession_timeout = \"10s\"")
        sites.append(rc)
        for rid in ("s3", "s4"):
            sites.append(Site(bin_dir, base, rid, "group = \"%s\"\n%s" % (g4, oneway),
                              top=trust + "\nsession_timeout = \"10s\""))
        feed = Feed(bin_dir, base, config)
        feed.start()
        wait_until("the product server", lambda: "products on https://" in feed.log_text(), 15,
                   feed)
        rng = random.Random(5)
        products = {}

        def put(name, size):
            data = rng.randbytes(size)
            products[name] = hashlib.sha256(data).hexdigest()
            drop(spool, name, data)

        def holds(d, names):
            return all(os.path.exists(os.path.join(d.dest, n)) and
                       sha256_file(os.path.join(d.dest, n)) == products[n] for n in names)

        put("obs/first.bufr", 5000)
        for d in sites:
            wait_until("%s: the first product" % d.id, lambda d=d: holds(d, ["obs/first.bufr"]),
                       30, feed, sites)
        # A 6 MB product takes about 2.5 s at 20 Mbit/s: the relay dies in its middle.
        put("obs/field.grib", 6_000_000)
        wait_until("rc receiving the field", lambda: (rc.read_status() or {}).get(
            "bytes_written", 0) > 1_500_000, 30, feed, sites)
        rc.stop(signal.SIGKILL)
        time.sleep(1)
        rc.start()
        put("obs/after1.bufr", 20_000)
        put("obs/after2.bufr", 40_000)
        t0 = time.time()
        for d in sites:
            wait_until("%s: every product" % d.id, lambda d=d: holds(d, list(products)), 90,
                       feed, sites)
        took = time.time() - t0
        for d in sites:
            wait_until("%s: no session number missing" % d.id, lambda d=d: (
                (d.read_status() or {}).get("sequences") and missing_sessions(d) == 0), 30,
                feed, sites)
        for d in sites[1:]:
            st = d.read_status()
            check(st["datagrams_sent"] == 0, "%s sent %d datagrams" % (d.id, st["datagrams_sent"]))
        r = relay_status(rc)
        log("rc after its restart: relay %s" % r)
        check(r["heartbeats"] > 0, "rc relayed no heartbeat after its restart")
        fetched = [(d.id, (d.read_status().get("catch_up") or {})) for d in sites[1:]]
        log("part 2: every product at both sites behind a relay killed mid-session, %.1f s "
            "after its restart; catch-up: %s" % (took, fetched))
    finally:
        stop_all(os.path.join(base, "none"), feed, sites)


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-relay-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        part1(bin_dir, base)
        part2(bin_dir, base)
        log("PASS")
        return 0
    finally:
        stop_all(base)


if __name__ == "__main__":
    sys.exit(main())
