#!/usr/bin/env python3
"""What a relay hop (mcdistd `relay_group`) adds to a product's delivery, over loopback
multicast (127.0.0.1), with real mcdist-feed and mcdistd.

  hub   mcdist-feed, one channel on G0: signed (its Ed25519 key), silent_passes = 2, fec_k = 64
        with 5 % parity, heartbeat 2 s, batch_window 100 ms, a spool directory, --rate
  d0    site on G0 (silent)
  r1    relay on G0, relay_group G1
  d1    site on G1 (silent)
  r2    relay on G1, relay_group G2
  d2    site on G2 (silent)
Every site and relay trusts the hub's key only. --products products (sizes log-uniform
10 kB .. 2 MB, seeded) are dropped into the spool with Poisson arrivals at 60 % of --rate
(counting their bytes only: with the 1448-byte packets, the parity of both passes and the
block digests the channel is about 70 % busy). Per product, from each site's delivery journal
(temp/journal.db, deliveries.delivered_at; one host clock): hop 1 = t(d1) - t(d0), hop 2 =
t(d2) - t(d1). Every delivered product is checked by SHA-256 (on disk, and the journal's digest)
against what was dropped.

Printed: median and p99 of hop 1 and hop 2 (ms) and of spool-to-d0 for scale; each relay's
forward_delay_us p50/p99 from its status file (kernel arrival to the send call, over the
relay's last 4096 forwarded datagrams only, so the end of the run), datagrams and bytes
forwarded, send_failed; the CPU seconds of each relay process (/proc/PID/stat, read just before
it stops) per GB relayed, with site d0's per GB received beside them (a relay is a site too:
the difference is what relaying costs); products delivered at each site against those sent.
Everything shares the machine's cores (2 on the development machine), so the hop figures
include scheduling: compare runs on one machine.

Not a test: prints a table (exit 1 only when a product is missing or differs). About 40 s with
the defaults on 2 cores.

usage: relay_bench.py [--build BUILD] [--products 300] [--rate 50M] [--seed 1] [--work DIR]
                      [--keep]
"""

import argparse
import hashlib
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from feed_day_bench import deliveries  # noqa: E402
from feed_latency import parse_rate, pct  # noqa: E402
from mcdist_testlib import (ChannelSite, cpu_seconds, free_group,  # noqa: E402
                            loopback_multicast_works, sha256_file, silent_feed_config)
from test_feed import Feed, drop  # noqa: E402

LOAD = 0.6
MIN_SIZE, MAX_SIZE = 10_000, 2_000_000


def log(*a):
    print(*a, flush=True)


def Site(bin_dir, base, rid, channel, top=""):
    """mcdistd on loopback with one channel "obs" (mcdist_testlib.ChannelSite)."""
    return ChannelSite(bin_dir, base, rid, channel, top=top, name="obs")


def schedule(n, rate_bps, rng):
    """[(offset s, size bytes)]: log-uniform sizes, Poisson arrivals at LOAD x rate."""
    mean = (MAX_SIZE - MIN_SIZE) / math.log(MAX_SIZE / MIN_SIZE)
    per_s = LOAD * rate_bps / 8 / mean
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(per_s)
        size = int(math.exp(rng.uniform(math.log(MIN_SIZE), math.log(MAX_SIZE))))
        out.append((t, size))
    return out


def ms(x):
    return "%8.2f" % (x * 1000) if x is not None and not math.isinf(x) else "       -"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="./build")
    ap.add_argument("--products", type=int, default=300)
    ap.add_argument("--rate", default="50M")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    bin_dir = os.path.abspath(args.build)
    for prog in ("feed/mcdist-feed", "receiver/mcdistd", "tools/keygen/mcdist-keygen"):
        if not os.path.exists(os.path.join(bin_dir, prog)):
            sys.exit("no %s in %s" % (prog, bin_dir))
    if not loopback_multicast_works():
        sys.exit("loopback multicast is not available here")
    rate_bps = parse_rate(args.rate)
    rng = random.Random(args.seed)
    events = schedule(args.products, rate_bps, rng)
    base = tempfile.mkdtemp(prefix="relay-bench-", dir=args.work)
    log("relay bench in %s: %d products, %.1f MB, over %.1f s of arrivals at %.0f %% of %s" % (
        base, len(events), sum(s for _, s in events) / 1e6, events[-1][0], LOAD * 100,
        args.rate))

    key = os.path.join(base, "hub.key")
    subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), key],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    trust = "trusted_senders = [\"%s.pub\"]\nsession_timeout = \"10s\"" % key
    spool = os.path.join(base, "spool")
    os.makedirs(os.path.join(spool, "obs"))
    g0, g1, g2 = free_group(), free_group(), free_group()
    config = os.path.join(base, "feed.toml")
    with open(config, "w") as f:
        f.write(silent_feed_config(base, key, g0, spool, args.rate, 64, "5%",
                                   journal=os.path.join(base, "feed-journal.db"),
                                   extra="control_socket = \"%s/control.sock\"\n" % base))

    daemons, feed = {}, None
    cpu = {}
    try:
        daemons["d0"] = Site(bin_dir, base, "d0", "group = \"%s\"\nsilent = true" % g0, trust)
        daemons["r1"] = Site(bin_dir, base, "r1", "group = \"%s\"\nsilent = true\n"
                             "relay_group = \"%s\"" % (g0, g1), trust)
        daemons["d1"] = Site(bin_dir, base, "d1", "group = \"%s\"\nsilent = true" % g1, trust)
        daemons["r2"] = Site(bin_dir, base, "r2", "group = \"%s\"\nsilent = true\n"
                             "relay_group = \"%s\"" % (g1, g2), trust)
        daemons["d2"] = Site(bin_dir, base, "d2", "group = \"%s\"\nsilent = true" % g2, trust)
        feed = Feed(bin_dir, base, config)
        feed.start()
        time.sleep(1.0)
        if not feed.alive():
            sys.exit("mcdist-feed exited:\n" + open(feed.log_path).read()[-3000:])

        dropped = {}  # relpath -> (time complete in the spool, sha256, size)
        t0 = time.time()
        for i, (at, size) in enumerate(events):
            data = rng.randbytes(size)
            delay = t0 + at - time.time()
            if delay > 0:
                time.sleep(delay)
            name = "obs/p%05d.bin" % i
            drop(spool, name, data)
            dropped[name] = (time.time(), hashlib.sha256(data).hexdigest(), size)
        log("dropped %d products in %.1f s" % (len(dropped), time.time() - t0))

        sites = ("d0", "d1", "d2")
        deadline = time.time() + 60
        while time.time() < deadline:
            got = {s: deliveries(daemons[s]) for s in sites}
            if all(len(set(dropped) & set(got[s])) == len(dropped) for s in sites):
                break
            if not feed.alive():
                break
            time.sleep(0.5)
        got = {s: deliveries(daemons[s]) for s in sites}
        # Let the relays see the last session's END and write a status after it.
        time.sleep(2.5)
        statuses = {rid: d.read_status() or {} for rid, d in daemons.items()}
        for rid, d in daemons.items():
            cpu[rid] = cpu_seconds(d.proc.pid)
    finally:
        if feed is not None and feed.proc is not None:
            feed.stop()
        for d in daemons.values():
            d.stop()

    # Correctness: every product at every site, identical on disk and in the journal.
    bad = []
    for s in ("d0", "d1", "d2"):
        for name, (_, digest, _) in dropped.items():
            row = got[s].get(name)
            path = os.path.join(daemons[s].dest, name)
            if row is None:
                bad.append("%s: %s not delivered" % (s, name))
            elif row[1] != digest or not os.path.exists(path) or sha256_file(path) != digest:
                bad.append("%s: %s differs from what was dropped" % (s, name))

    def hop(a, b):
        return [got[b][n][0] - got[a][n][0] for n in dropped if n in got[a] and n in got[b]]

    spool_d0 = [got["d0"][n][0] - dropped[n][0] for n in dropped if n in got["d0"]]
    rows = [("hop 1 (d1 - d0)", hop("d0", "d1")), ("hop 2 (d2 - d1)", hop("d1", "d2")),
            ("spool -> d0", spool_d0)]
    total_mb = sum(s for _, _, s in dropped.values()) / 1e6
    log("")
    log("relay hops over loopback: %d products, %.1f MB, rate %s, arrivals at %.0f %% of it, "
        "seed %d" % (len(dropped), total_mb, args.rate, LOAD * 100, args.seed))
    log("%-18s %8s %8s %8s %8s %8s" % ("per product", "median", "p99", "min", "max", "n"))
    for label, v in rows:
        if v:
            log("%-18s %s %s %s %s %8d" % (label, ms(pct(v, 0.5)), ms(pct(v, 0.99)), ms(min(v)),
                                           ms(max(v)), len(v)))
        else:
            log("%-18s %8s" % (label, "-"))
    log("(ms; a negative hop: the site behind the relay delivered first)")
    log("")
    log("%-6s %9s %9s %9s %10s %8s %9s %8s %9s" % (
        "relay", "fwd p50", "fwd p99", "samples", "forwarded", "GB", "send_fail", "CPU s",
        "CPU s/GB"))
    for rid in ("r1", "r2"):
        r = (statuses[rid].get("relay") or [{}])[0]
        fd = r.get("forward_delay_us", {})
        gb = r.get("forwarded_bytes", 0) / 1e9
        c = cpu.get(rid)
        log("%-6s %6d us %6d us %9d %10d %8.3f %9d %8.2f %9s" % (
            rid, fd.get("p50", 0), fd.get("p99", 0), fd.get("samples", 0), r.get("forwarded", 0),
            gb, r.get("send_failed", 0), c or 0, "%.1f" % (c / gb) if c and gb else "-"))
        log("       sessions %d, heartbeats %d, not relayed %d, site datagrams %d" % (
            r.get("sessions", 0), r.get("heartbeats", 0), r.get("not_relayed_sessions", 0),
            r.get("site_datagrams", 0)))
    # The site d0 received about what r1 relayed: its CPU per GB is the cost of a site.
    st0 = statuses["d0"]
    gb0 = (statuses["r1"].get("relay") or [{}])[0].get("forwarded_bytes", 0) / 1e9
    if cpu.get("d0") and gb0:
        log("site d0 (no relay): %.2f CPU s, %.1f per GB of the same datagrams" % (
            cpu["d0"], cpu["d0"] / gb0))
    log("")
    log("delivered (of %d sent): %s" % (len(dropped), ", ".join(
        "%s %d" % (s, len(set(dropped) & set(got[s]))) for s in ("d0", "d1", "d2"))))
    log("sessions completed: %s" % ", ".join(
        "%s %s" % (rid, statuses[rid].get("sessions_completed")) for rid in daemons))
    if st0.get("datagrams_sent") is not None:
        log("datagrams sent by sites and relays: %s" % ", ".join(
            "%s %s" % (rid, statuses[rid].get("datagrams_sent")) for rid in daemons))
    if bad:
        log("FAILED: %d products missing or different, e.g. %s" % (len(bad), bad[:5]))
    else:
        log("SHA-256 of every product at every site matches what was dropped")
    if args.keep:
        log("kept " + base)
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
