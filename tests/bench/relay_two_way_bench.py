#!/usr/bin/env python3
"""Two-way sessions through relays against the same sites joined to the hub directly, over the
link emulator (tests/linkem), with real mcdist-send and mcdistd: what the hub receives, what it
repairs, and when the last site is done.

Topology, links and file set those of tests/integration/test_relay_linkem.py (one namespace
per host; a packet from hA to hB crosses hA.up then hB.down):
  h0       hub: mcdist-send, an unsigned two-way session (its defaults: FEC k = 200, NAKs),
           open group, --rate (20M)
  h1, h2   relays on the hub's group G0, relay_group R1 / R2 (relayed mode only)
  h3-h10   sites: behind h1 (h3-h6) and h2 (h7-h10) on R1 / R2 (relayed), or on G0 (direct)
Links: h0:delay=345ms; h1,h2:delay=5ms, loss=1e-3 on h1.down and h2.down; h3-h10.down
loss=1e-2. Relayed: hub to relay 700 ms RTT at 1e-3, relay to site 10 ms RTT at 1e-2. Direct:
hub to site 690 ms RTT at 1e-2 (the relays are not started). Relayed, signed: the same as
relayed with the session signed by the hub, which pins and lists the two relays and so delegates
the session to each (docs/security.md "Relays of signed sessions"); the sites trust the hub's
key only. Direct, signed: the sites on G0 trusting the hub's key, which signs the session and
pins no site (what signing costs over the 690 ms hop without a relay). Nested, signed: as
relayed, signed, but h2 is a site of h1's group R1 (a relay behind a relay, 10 ms behind h1),
so h7-h10 are two relays down; h2 asks the hub for its delegation through h1.

Per run and mode, printed side by side: the control datagrams the hub received (its summary's
control_received: REGISTER, NAK, status, COMPLETE), the blocks NAKed at the hub, its repair
datagrams, the sender's time, and the time from the sender's start to the last site's session
end (polled from the status files every 50 ms); in relayed mode also the relays' data, parity
and control datagrams and the feedback their sites sent them. Every file is checked by SHA-256
at every site.

Not a test: exit 1 only when a file is missing or differs. Needs root (namespaces, TUN) and a
build with mcdist-linkem. About 60 s per seed.

usage: relay_two_way_bench.py [--build BUILD] [--seeds 1,2,3] [--rate 20M] [--work DIR]
                              [--modes "relayed, signed;nested, signed"]
"""

import argparse
import json
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from linkem_run import Emulator  # noqa: E402
from mcdist_testlib import relay_status, run_sender, sessions_over, tree_digests  # noqa: E402
# The topology and the file set of the integration test through the same emulator.
from test_relay_linkem import (BEHIND, G0, HUB, LINKS, RELAY_GROUP, RELAYS, SITES,  # noqa: E402
                               Site, make_set, signed_setup, start_daemons)

TOP = "allow_unsigned = true\nsession_timeout = \"10s\""


MODES = ("relayed", "relayed, signed", "nested, signed", "direct", "direct, signed")


def one(build, work, seed, mode, rate):
    nested = mode.startswith("nested")
    relayed = mode.startswith("relayed") or nested
    base = os.path.join(work, "%s-%d" % (mode.replace(", ", "-"), seed))
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    tops, _, sign = signed_setup(build, base) if mode.endswith("signed") else ({}, None, [])
    if mode == "direct, signed":
        sign = sign[:2]  # the hub's key only: an open group of sites it does not pin
    rng = random.Random(seed)
    src = os.path.join(base, "products")
    want, _ = make_set(src, rng)
    emu = Emulator(os.path.join(build, "tests", "linkem", "mcdist-linkem"), base, LINKS,
                   hosts=11, seed=rng.randrange(1 << 30))
    daemons = {}
    try:
        if nested:
            # h2 on h1's group: a relay behind a relay.
            for h in RELAYS:
                daemons[h] = Site(build, base, emu, h, "group = \"%s\"\nrelay_group = \"%s\""
                                  % (RELAY_GROUP[1] if h == 2 else G0, RELAY_GROUP[h]),
                                  top=tops.get(h, TOP))
            for h in SITES:
                daemons[h] = Site(build, base, emu, h, "group = \"%s\"" % RELAY_GROUP[BEHIND[h]],
                                  top=tops.get(h, TOP))
        elif relayed:
            start_daemons(daemons, build, base, emu, TOP, tops=tops)
        else:
            for h in SITES:
                daemons[h] = Site(build, base, emu, h, "group = \"%s\"" % G0,
                                  top=tops.get(h, TOP))
        time.sleep(0.5)
        t0 = time.time()
        code, summary, out = run_sender(build, [src], G0, rate=rate, timeout=180,
                                        interface=emu.addr(HUB),
                                        prefix=["ip", "netns", "exec", emu.ns(HUB)], extra=sign)
        took = time.time() - t0
        if code != 0 or not summary:
            sys.exit("mcdist-send failed (%d): %s" % (code, out[-2000:]))
        pending = set(SITES)
        last = None
        while pending and time.time() - t0 < 120:
            for h in list(pending):
                if sessions_over(daemons[h]):
                    pending.discard(h)
                    last = time.time() - t0
            time.sleep(0.05)
        bad = [d.id for h, d in daemons.items() if tree_digests(d.dest) != want]
        if pending or bad:
            sys.exit("seed %d %s: sites not done %s, files differ at %s"
                     % (seed, mode, sorted(pending), bad))
        res = {"control": summary["control_received"], "repairs": summary["repair_datagrams"],
               "took": took, "last": last}
        if relayed:
            t = {}
            for h in RELAYS:
                for k, v in relay_status(daemons[h])["two_way"].items():
                    t[k] = t.get(k, 0) + v
            res["relays"] = t
        return res
    finally:
        for d in daemons.values():
            d.stop()
        emu.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build",
                    default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "build"))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--rate", default="20M")
    ap.add_argument("--work", default="/tmp/mcdist-relay-two-way-bench")
    ap.add_argument("--modes", default=";".join(MODES),
                    help="the modes to run, separated by ';' (default: all of %s)" % (MODES,))
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(";") if m.strip()]
    for m in modes:
        if m not in MODES:
            sys.exit("relay_two_way_bench.py: unknown mode %r (modes: %s)" % (m, "; ".join(MODES)))
    if os.geteuid() != 0:
        sys.exit("relay_two_way_bench.py needs root (network namespaces and TUN devices)")
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for mode in modes:
            r = one(args.build, args.work, seed, mode, args.rate)
            rows.append((seed, mode, r))
            print(json.dumps({"seed": seed, "mode": mode, **r}), flush=True)
    print("\n| seed | mode | hub: control datagrams in | NAKed blocks | repairs | sender s | "
          "last site done s | relays: data / parity / control sent, sites' feedback |")
    print("|---|---|---|---|---|---|---|---|")
    for seed, mode, r in rows:
        c = r["control"]
        n = c["register"] + c["nak"] + c["status"] + c["complete"]
        t = r.get("relays")
        print("| %d | %s | %d | %d | %d | %.1f | %.1f | %s |"
              % (seed, mode, n, c["nak_blocks"], r["repairs"],
                 r["took"], r["last"],
                 "%d / %d / %d, %d" % (t["data"], t["parity"], t["control"], t["site_datagrams"])
                 if t else "-"))
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
