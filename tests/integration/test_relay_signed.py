#!/usr/bin/env python3
"""Integration: a relay runs a signed two-way session for the sites behind it under the hub's
delegation (docs/security.md "Relays of signed sessions"), over loopback multicast with real
mcdist-send and mcdistd.

mcdist-send signs the session with the hub key, pins only relays "ra" and "rb" (--site-keys)
and lists them as relays (--relays). ra (dropping 1 %) relays group G0 into G1, where sites s1
and s2 (dropping 3 % each) trust only the hub's key; the hub knows neither of their keys. Relay
"rb" is a site of G1 relaying into G2 for site s3: a relay behind a relay, which asks the hub for
its delegation through ra; relay "rc", a site of G2, relays into G3 for site s4 and asks through
rb and ra. Asserted: every file at ra, s1, s2, rb, s3, rc and s4 SHA-256 identical to the
source; the hub's only receiver is ra, and it logged the three delegations; ra ran the session
as a signed one, sent relay_hellos, passed the delegation requests of rb and rc up and the hub's
answers back, and its three sites completed; rb and rc ran it signed for s3 and s4 (and rb
passed rc's requests on); each site bound its relay's key, and
journaled every delivery with the hub's key as the signer; a relay_hello multicast into G1 by
another host than ra is refused by both sites and changes nothing. Then a larger set at
10 Mbit/s listing ra alone as a relay, during which ra is killed (SIGKILL) once s1 has written
2 MB of it and ra has a checkpoint of it, and started again a second later: ra asks the hub for
a new delegation, takes the session up again for its sites under a new key (it logs the
resume), both sites bind the new key and get every file; rb, not listed, is refused its
delegation, says so and s3 gets none of the set. Last, the same hub without --relays: ra gets
no delegation, does not relay the session (it says so in its log), and the sites get none of
its files.

usage: test_relay_signed.py BUILD_DIR"""

import os
import random
import glob
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, ChannelSite, check, free_group, keygen, log,  # noqa: E402
                            loopback_multicast_works, parse_group, pb_bytes, header,
                            relay_status, run_sender, sessions_over, stop_all, tree_digests,
                            site_journal, wait_for, write_random)

RELAY_HELLO = 18


def refused(d):
    st = d.read_status() or {}
    return sum((st.get("not_authenticated") or {}).values())


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-relaysig-",
                            dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    daemons, others = [], []
    try:
        rng = random.Random(53)
        hub_key = os.path.join(base, "hub.key")
        hub_pub = keygen(bin_dir, hub_key)
        pubs = {s: keygen(bin_dir, os.path.join(base, s + ".key"))
                for s in ("ra", "s1", "s2", "rb", "s3", "rc", "s4")}
        pins = os.path.join(base, "pins.txt")
        with open(pins, "w") as f:
            # The hub knows its relays, not the sites behind them.
            f.write("".join("%s %s\n" % (r, pubs[r]) for r in ("ra", "rb", "rc")))
        src = os.path.join(base, "products")
        sizes = [0, 1, 1400, 10_000] * 3 + [300_000] * 4 + [2_000_000]
        for i, size in enumerate(sizes):
            write_random(os.path.join(src, "d%d" % (i % 3), "p%03d.bin" % i), size, rng)
        want = {"products/" + p: h for p, h in tree_digests(src).items()}
        g0, g1 = free_group(), free_group()

        def top(rid):
            return 'key_file = "%s"\ntrusted_senders = ["%s"]' % (
                os.path.join(base, rid + ".key"), hub_pub)
        ra = ChannelSite(bin_dir, base, "ra", 'group = "%s"\nrelay_group = "%s"' % (g0, g1),
                         top=top("ra"), extra=["--drop-rate", "0.01", "--drop-seed", "3"])
        daemons.append(ra)
        s1 = ChannelSite(bin_dir, base, "s1", 'group = "%s"' % g1, top=top("s1"),
                         extra=["--drop-rate", "0.03", "--drop-seed", "5"])
        s2 = ChannelSite(bin_dir, base, "s2", 'group = "%s"' % g1, top=top("s2"),
                         extra=["--drop-rate", "0.03", "--drop-seed", "7"])
        daemons += [s1, s2]
        g2 = free_group()
        rb = ChannelSite(bin_dir, base, "rb", 'group = "%s"\nrelay_group = "%s"' % (g1, g2),
                         top=top("rb"))
        s3 = ChannelSite(bin_dir, base, "s3", 'group = "%s"' % g2, top=top("s3"))
        g3 = free_group()
        relay_c = ChannelSite(bin_dir, base, "rc", 'group = "%s"\nrelay_group = "%s"' % (g2, g3),
                         top=top("rc"))
        s4 = ChannelSite(bin_dir, base, "s4", 'group = "%s"' % g3, top=top("s4"))
        others += [rb, s3, relay_c, s4]

        # A host that is not ra multicasts a relay_hello for the session into G1 (a copy of a
        # relay's, or its own): the sites take a relay key only from the session's source.
        session = 0x5e551075
        forged_body = pb_bytes(1, b"ra") + pb_bytes(2, bytes(range(32)))
        forged = header(RELAY_HELLO, session, version=2) + forged_body + bytes(64)
        forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        forger.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        forger.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)

        extra = ["--key", hub_key, "--site-keys", pins, "--relays", "ra,rb,rc",
                 "--session-id", "%08x" % session]
        stop_forging = threading.Event()

        def forge():
            while not stop_forging.wait(0.2):
                forger.sendto(forged, parse_group(g1))
        t = threading.Thread(target=forge)
        t.start()
        try:
            rc, summary, out = run_sender(bin_dir, [src], g0, rate="50M", extra=extra)
        finally:
            stop_forging.set()
            t.join()
        check(rc == 0 and summary, "mcdist-send failed (%d): %s" % (rc, out[-2000:]))
        check(summary.get("signed"), "the session was not signed")
        ids = [r["id"] for r in summary["receivers"]]
        check(ids == ["ra"], "the hub's receivers are %s, not ra alone" % ids)
        check(all("delegated to relay " + x in out for x in ("ra", "rb", "rc")),
              "mcdist-send did not log the three delegations:\n" + out)
        r = wait_for("ra: the relayed session done",
                     lambda: (lambda s: s if s and s["two_way"]["sessions"] == 1
                              and s["two_way"]["sessions_active"] == 0 else None)(relay_status(ra)),
                     60, ra)
        for d in daemons:
            wait_for("%s: the session's end" % d.id, lambda d=d: sessions_over(d), 30, d)
            got = tree_digests(d.dest)
            check(got == want, "%s: delivered files differ from the source (%d of %d, %d bad)"
                  % (d.id, len(got), len(want), len([p for p in got if want.get(p) != got[p]])))
        log("ra: relay %s" % r)
        t = r["two_way"]
        check(t["signed_sessions"] == 1, "ra: not run as a signed session: %s" % t)
        check(t["sites_completed"] == 3 and t["sites_failed"] == 0,
              "ra: sites of the relayed session: %s" % t)
        # rb is one of ra's sites, and a relay delegated by the hub through ra; rc, behind rb,
        # through rb and ra.
        check(t["origin_requests"] >= 2 and t["origin_replies"] >= 2,
              "ra: did not pass the delegation requests of rb and rc and their answers: %s" % t)
        for relay, site in ((rb, s3), (relay_c, s4)):
            rs = wait_for("%s: the relayed session done" % relay.id,
                          lambda relay=relay: (lambda s: s if s and s["two_way"]["sessions"] == 1
                                               and s["two_way"]["sessions_active"] == 0
                                               else None)(relay_status(relay)), 60, relay)
            for d in (relay, site):
                wait_for("%s: the session's end" % d.id, lambda d=d: sessions_over(d), 30, d)
                check(tree_digests(d.dest) == want,
                      "%s: delivered files differ from the source" % d.id)
            log("%s: relay %s" % (relay.id, rs))
            # rb's sites are s3 and rc.
            check(rs["two_way"]["signed_sessions"] == 1 and
                  rs["two_way"]["sites_completed"] == (2 if relay is rb else 1),
                  "%s: not run signed for %s: %s" % (relay.id, site.id, rs["two_way"]))
            check(rs["not_relayed_sessions"] == 0, "%s: relay counters: %s" % (relay.id, rs))
            check((relay.read_status() or {}).get("relay_delegations", 0) >= 2,
                  "%s: bound its relay's key and got a delegation: %s"
                  % (relay.id, (relay.read_status() or {}).get("relay_delegations")))
            signers = [k for _, k in site_journal(site)]
            check(len(signers) == len(want) and set(signers) == {hub_pub},
                  "%s: journal signers %s, not the hub's key for every file"
                  % (site.id, sorted(set(signers))))
            if relay is rb:
                check(rs["two_way"]["origin_requests"] >= 1 and rs["two_way"]["origin_replies"] >= 1,
                      "rb: did not pass rc's delegation request and its answer: %s" % rs)
        check(t["hellos"] > 0, "ra: sent no relay_hello: %s" % t)
        check(r["not_relayed_sessions"] == 0, "ra: relay counters: %s" % r)
        check((ra.read_status() or {}).get("relay_delegations", 0) >= 1,
              "ra: delegations received: %s" % (ra.read_status() or {}).get("relay_delegations"))
        for d in (s1, s2):
            st = d.read_status() or {}
            # Once for the session; a site that completed forgets the session's keys and may
            # bind again on a hello that comes before the relay's END.
            check(st.get("relay_delegations", 0) >= 1,
                  "%s: relay keys bound: %s" % (d.id, st.get("relay_delegations")))
            check(st["dropped_by_drop_rate"] > 0, "%s dropped nothing" % d.id)
            check(refused(d) > 0, "%s: the forged hellos were not refused: %s"
                  % (d.id, st.get("not_authenticated")))
            signers = [k for _, k in site_journal(d)]
            check(len(signers) == len(want) and set(signers) == {hub_pub},
                  "%s: journal signers %s, not the hub's key for every file"
                  % (d.id, sorted(set(signers))))
        check(t["data"] + t["parity"] > sum((s + 1399) // 1400 for s in sizes),
              "ra: no repairs for its sites: %s" % t)

        # Killed in the middle of a signed session, started again: ra gets a new delegation and
        # takes the session up again for its sites under a new key.
        big = os.path.join(base, "big")
        for i in range(20):
            write_random(os.path.join(big, "b%02d.bin" % i), 400_000, rng)
        want_big = {"big/" + p: h for p, h in tree_digests(big).items()}
        written = s1.read_status()["bytes_written"]
        bound = {d.id: d.read_status()["relay_delegations"] for d in (s1, s2)}
        sent = {}

        def send_big():
            sent["rc"], sent["summary"], sent["out"] = run_sender(
                bin_dir, [big], g0, receivers=["ra"], rate="10M", timeout=180,
                extra=["--key", hub_key, "--site-keys", pins, "--relays", "ra"])
        hub = threading.Thread(target=send_big)
        hub.start()
        wait_for("s1: 2 MB of the set written",
                 lambda: (s1.read_status() or {}).get("bytes_written", 0) > written + 2_000_000,
                 60, s1)
        wait_for("ra: a checkpoint of the session",
                 lambda: glob.glob(os.path.join(ra.temp, "*", "state")), 30, ra)
        ra.stop(signal.SIGKILL)
        time.sleep(1)  # the outage: the hub and the sites go on without ra for a second
        ra.start()
        hub.join(200)
        check(sent.get("rc") == 0, "mcdist-send (the set ra was killed in) failed: %s"
              % sent.get("out", "")[-2000:])
        check("resumed relaying" in ra.log_text(), "ra: no 'resumed relaying' in its log")
        # rb, not listed this time: refused its delegation, it relays nothing of the set.
        wait_for("rb: the set given up as not delegated",
                 lambda: (relay_status(rb) or {}).get("not_relayed_sessions") == 1, 60, rb)
        check("did not delegate it" in rb.log_text(), "rb: no log line on the undelegated set")
        check(not any(p.startswith("big/") for p in tree_digests(s3.dest)),
              "s3, behind rb, got files of a set the hub did not delegate to rb")
        for d in (s1, s2):
            wait_for("%s: every file of the set" % d.id,
                     lambda d=d: all(tree_digests(d.dest).get(p) == h for p, h in want_big.items()),
                     90, d)
            now_bound = (d.read_status() or {}).get("relay_delegations", 0)
            check(now_bound > bound[d.id], "%s: did not bind ra's new key (%d, before %d)"
                  % (d.id, now_bound, bound[d.id]))

        # The same hub without --relays: no delegation, not relayed, nothing behind ra.
        src2 = os.path.join(base, "second")
        write_random(os.path.join(src2, "x.bin"), 50_000, rng)
        before = {d.id: len(tree_digests(d.dest)) for d in (s1, s2)}
        rc, summary, out = run_sender(bin_dir, [src2], g0, rate="50M",
                                      extra=["--key", hub_key, "--site-keys", pins])
        check(rc == 0 and summary, "mcdist-send (no relays) failed (%d): %s" % (rc, out[-2000:]))
        wait_for("ra: the undelegated session given up",
                 lambda: (relay_status(ra) or {}).get("not_relayed_sessions") == 1, 30, ra)
        check("the hub did not delegate" in ra.log_text() or "did not delegate" in ra.log_text(),
              "ra: no log line on the session it did not relay")
        check(os.path.exists(os.path.join(ra.dest, "second", "x.bin")),
              "ra did not store the undelegated session's file itself")
        for d in (s1, s2):
            check(len(tree_digests(d.dest)) == before[d.id],
                  "%s got a file of a session the hub did not delegate" % d.id)
        log("PASS")
        return 0
    finally:
        stop_all(base, daemons=daemons + others)


if __name__ == "__main__":
    sys.exit(main())
