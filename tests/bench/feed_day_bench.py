#!/usr/bin/env python3
"""A compressed day of one hub and 20 sites through the link emulator: what `mcdist-feed` does
for every kind of site at once, with its default channel profile and, beside it, the profile
the hub started from (no parity, one session per channel).

Sites (mcdist-linkem, one namespace each; delays one-way, loss on both directions):
  h1-h10   terrestrial, 70 ms RTT, 1e-3 independent loss
  h11-h18  two-way satellite, 700 ms RTT, 1e-3 loss in Gilbert-Elliott bursts of mean 4
  h19-h20  one-way satellite, the same link, `silent = true` on every channel; a terrestrial
           path (a veth pair to a bridge in the hub's namespace, beside the emulator) reaches
           the hub's product server over HTTPS (`catch_up_url`, a test CA made with openssl)
h10 takes warnings and observations only, and is down from --outage-at until the day's
products have all been dropped (its channels are then idle): the time from its restart until
it holds every product it missed is the "back from an outage" figure (bound: the heartbeat,
10 s, plus 5 s); its warnings are left out of the warning latency.

The day (same schedule, seeded, for both profiles; --rate shared by the channels by priority):
  warnings  10 kB every 4 s (priority 10, 100 ms batch window)
  obs       bulletins of 2-50 kB, 8 per second on average (priority 5, 1 s window)
  fields    a --field-mb field at 10 s, and fields of 20 MB every 30 s (priority 1, 1 s window)
Products are dropped for --duration s; the run ends when every site holds every product of
its channels (or --drain s later). Signed sessions (the hub's Ed25519 key, pinned at every
site), closed groups of the two-way sites on each channel, retention 1 h.

Printed per profile: products delivered (files x sites, SHA-256 checked against what was
dropped), warning latency (spool to the site's delivery journal) per class of site with its
bound (1 s + RTT), the hub's repair datagrams against the largest loss of a single two-way
site (the emulator's count of datagrams it dropped towards that site), what the one-way sites
sent on the multicast path (the emulator's count of packets their hosts put on their links,
and the daemons' own count) and fetched over the terrestrial path, the outage figure, and the
CPU seconds the hub and the sites spent (/proc, read just before they stop; the sites share
the machine's cores with the emulator, so compare profiles of the same run).

Needs root (namespaces, TUN, veth), openssl, and a build with mcdist-feed, mcdistd,
mcdist-keygen and mcdist-linkem. Not a test: prints a table. About 8-10 minutes per profile
with the default 2 GB field at 50 Mbit/s, and 40 GB of disk under --work per profile (each
site writes the field; removed after each profile unless --keep).

usage: feed_day_bench.py --build BUILD [--rate 50M] [--duration 120] [--field-mb 2000]
                         [--profiles default,starting] [--work DIR] [--seed N] [--keep]
A profile is a name above or channel settings given to every channel, e.g.
--profiles default,"fec_k=2860".
"""

import argparse
import collections
import concurrent.futures
import json
import math
import os
import random
import shutil
import signal
import statistics
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from feed_latency import Producer, in_ns, pct  # noqa: E402
from linkem_run import Emulator, stop_proc  # noqa: E402
from mcdist_testlib import TomlDaemon, cpu_seconds, make_ca, sha256_file  # noqa: E402

TERRESTRIAL = list(range(1, 11))
SATELLITE = list(range(11, 19))
ONE_WAY = [19, 20]
OUTAGE_SITE = 10
SITES = TERRESTRIAL + SATELLITE + ONE_WAY
CLASS = {**{h: "70 ms" for h in TERRESTRIAL}, **{h: "700 ms" for h in SATELLITE},
         **{h: "one-way" for h in ONE_WAY}}
RTT = {"70 ms": 0.07, "700 ms": 0.7, "one-way": 0.7}
LINKS = (["h%d:delay=35ms,loss=1e-3" % h for h in TERRESTRIAL] +
         ["h%d:delay=350ms,loss=1e-3,burst=4" % h for h in SATELLITE + ONE_WAY])
GROUPS = {"warnings": "239.192.62.1:4711", "obs": "239.192.62.2:4711",
          "fields": "239.192.62.3:4711"}
HUB_TERRESTRIAL = "10.78.0.1"
PROFILES = {
    # What a channel gets without profile settings (sender/io/session_profile.hpp).
    "default": "",
    # The hub before its channel profiles: no parity, one session per channel.
    "starting": "fec_k = 0\nconcurrent_sessions = 1\n",
}


def log(*a):
    print(*a, flush=True)


def channels_of(h):
    return ["warnings", "obs"] if h == OUTAGE_SITE else ["warnings", "obs", "fields"]


def run(args):
    subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def schedule(duration, field_mb, rng):
    """[(offset s, channel, size bytes, kind)], the same for every profile."""
    ev = [(10.0, "fields", field_mb * 1_000_000, "field")]
    t = 40.0
    while t < duration:
        ev.append((t, "fields", 20_000_000, "field20"))
        t += 30.0
    t = 5.0
    while t < duration:
        ev.append((t, "warnings", 10_000, "warn"))
        t += 4.0
    t = 0.0
    while True:
        t += rng.expovariate(8.0)
        if t >= duration:
            break
        ev.append((t, "obs", rng.randint(2_000, 50_000), "obs"))
    return sorted(ev)


def terrestrial_path(emu):
    """A bridge in the hub's namespace (HUB_TERRESTRIAL/24) and a veth pair from it to each
    one-way site (10.78.0.N+1): their catch-up path, outside the emulator."""
    ns0 = emu.ns(0)
    run(["ip", "-n", ns0, "link", "add", "tb0", "type", "bridge"])
    run(["ip", "-n", ns0, "addr", "add", HUB_TERRESTRIAL + "/24", "dev", "tb0"])
    run(["ip", "-n", ns0, "link", "set", "tb0", "up"])
    for h in ONE_WAY:
        run(["ip", "link", "add", "tv%d" % h, "netns", ns0, "type", "veth", "peer", "name",
             "tv0", "netns", emu.ns(h)])
        run(["ip", "-n", ns0, "link", "set", "tv%d" % h, "master", "tb0", "up"])
        run(["ip", "-n", emu.ns(h), "addr", "add", "10.78.0.%d/24" % (h + 1), "dev", "tv0"])
        run(["ip", "-n", emu.ns(h), "link", "set", "tv0", "up"])


def feed_config(work, emu, args, profile, spools, tls):
    listed = '["%s"]'
    two_way = [h for h in TERRESTRIAL + SATELLITE]
    text = """interface = "%s"
rate = "%s"
key = "%s/hub.key"
journal = "%s/journal.db"
retention = "1h"
retained = "%s/retained"
control_socket = "%s/control.sock"
http = "off"
products_http = "%s:9613"
products_tls_cert = "%s"
products_tls_key = "%s"
""" % (emu.addr(0), args.rate, work, work, work, work, HUB_TERRESTRIAL, tls[1], tls[2])
    for name, prio, window in (("warnings", 10, "100ms"), ("obs", 5, "1s"), ("fields", 1, "1s")):
        sites = [h for h in two_way if name in channels_of(h)]
        text += """
[[channel]]
name = "%s"
group = "%s"
spool = ["%s"]
priority = %d
batch_window = "%s"
after = "delete"
receivers = %s
%s""" % (name, GROUPS[name], spools[name], prio, window,
         listed % '", "'.join("h%d" % h for h in sites), profile_settings(profile))
    return text


def profile_settings(profile):
    """A named profile's channel settings, or the settings themselves: "fec_k=2860;fec_depth=4"
    (each channel gets them)."""
    if profile in PROFILES:
        return PROFILES[profile]
    if "=" not in profile:
        sys.exit("unknown profile %r: %s, or channel settings such as fec_k=2860;fec_depth=4"
                 % (profile, ", ".join(PROFILES)))
    return "".join("%s = %s\n" % tuple(kv.split("=", 1)) for kv in profile.split(";"))


def site_config(h, emu, hub_pub, ca):
    def config(d):
        text = """id = "h%d"
interface = "%s"
dest = "%s"
temp = "%s"
status_file = "%s"
status_interval = "1s"
http = "off"
sync = "none"
trusted_senders = ["%s"]
""" % (h, emu.addr(h), d.dest, d.temp, d.status, hub_pub)
        for name in channels_of(h):
            text += '[[channel]]\nname = "%s"\ngroup = "%s"\n' % (name, GROUPS[name])
            if h in ONE_WAY:
                text += ('silent = true\ncatch_up_url = "https://%s:9613/"\ncatch_up_ca = "%s"\n'
                         % (HUB_TERRESTRIAL, ca))
        return text
    return config


def deliveries(d):
    """name -> (delivered_at unix s, sha256 hex) from a site's delivery journal (first row)."""
    path = os.path.join(d.temp, "journal.db")
    if not os.path.exists(path):
        return {}
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=10)
    try:
        rows = db.execute("SELECT relpath, delivered_at, sha256 FROM deliveries ORDER BY id")
        out = {}
        for name, at, digest in rows:
            out.setdefault(name, (at, digest))
        return out
    except sqlite3.OperationalError:  # the schema is not made yet
        return {}
    finally:
        db.close()


def run_profile(args, profile, events):
    work = tempfile.mkdtemp(prefix="feedday-%s-" % profile, dir=args.work)
    log("== profile %s (%s)" % (profile, work))
    stats = os.path.join(work, "linkem.json")
    emu = Emulator(os.path.join(args.build, "tests", "linkem", "mcdist-linkem"), work, LINKS,
                   hosts=len(SITES) + 1, seed=args.seed, stats_json=stats)
    daemons, feed, flog = {}, None, None
    result = {"profile": profile}
    try:
        terrestrial_path(emu)
        tls = make_ca(work, (HUB_TERRESTRIAL,))
        run([os.path.join(args.build, "tools", "keygen", "mcdist-keygen"),
             os.path.join(work, "hub.key")])
        with open(os.path.join(work, "hub.key.pub")) as f:
            hub_pub = f.read().strip()
        spools = {c: os.path.join(work, "spool", c) for c in GROUPS}
        for p in spools.values():
            os.makedirs(p)
        for h in SITES:
            daemons[h] = TomlDaemon(args.build, work, "h%d" % h, site_config(h, emu, hub_pub, tls[0]),
                                    prefix=in_ns(emu.ns(h), []))
        cfg = os.path.join(work, "feed.toml")
        with open(cfg, "w") as f:
            f.write(feed_config(work, emu, args, profile, spools, tls))
        flog = open(os.path.join(work, "feed.log"), "w")
        feed = subprocess.Popen(in_ns(emu.ns(0), [os.path.join(args.build, "feed", "mcdist-feed"),
                                                  "--config", cfg]),
                                stdout=flog, stderr=subprocess.STDOUT)
        time.sleep(1.0)
        if feed.poll() is not None:
            sys.exit("mcdist-feed exited at start; see %s/feed.log" % work)

        prod = Producer(spools, random.Random(args.seed), os.path.join(work, "staging"))
        prod.stage(events)
        # Staged products are hashed before the clock starts; the others as they are dropped
        # (at most 20 MB: tens of ms, before the feed's batch window has passed).
        staged = {k: sha256_file(p) for k, p in prod.staged.items()}
        digest = {}
        channel_of = {}
        t0 = time.time()
        outage_down = outage_up = None
        for off, channel, size, kind in events:
            if outage_down is None and off >= args.outage_at:
                daemons[OUTAGE_SITE].stop()
                outage_down = time.time()
                log("h%d stopped at %.1f s" % (OUTAGE_SITE, outage_down - t0))
            delay = t0 + off - time.time()
            if delay > 0:
                time.sleep(delay)
            ahead = staged.get((channel, size, kind)) if (channel, size, kind) in prod.staged else None
            name = prod.drop(channel, size, kind)
            channel_of[name] = channel
            digest[name] = ahead or sha256_file(os.path.join(spools[channel], name))
        # The channels h10 takes are idle from here (the last warning and bulletin were dropped;
        # give their sessions a few seconds to end).
        time.sleep(5.0)
        daemons[OUTAGE_SITE].start()
        outage_up = time.time()
        log("h%d restarted at %.1f s (%d products dropped)" % (OUTAGE_SITE, outage_up - t0,
                                                                 len(prod.dropped)))
        missed_by_outage = [n for n, (_, at) in prod.dropped.items()
                            if channel_of[n] in channels_of(OUTAGE_SITE) and at >= outage_down]

        def wanted(h):
            return [n for n in prod.dropped if channel_of[n] in channels_of(h)]

        deadline = time.time() + args.drain
        pending = set(SITES)
        outage_done = None
        while time.time() < deadline and pending:
            for h in sorted(pending):
                got = deliveries(daemons[h])
                if outage_done is None and h == OUTAGE_SITE and all(
                        n in got and got[n][0] >= outage_up for n in missed_by_outage):
                    outage_done = max(got[n][0] for n in missed_by_outage)
                if all(n in got for n in wanted(h)):
                    pending.discard(h)
            if feed.poll() is not None:
                log("mcdist-feed exited (%s)" % feed.returncode)
                break
            time.sleep(2.0)
        result["day_s"] = time.time() - t0
        result["late_sites"] = sorted(pending)

        # Status files before the daemons stop (their last rewrite); CPU before they exit.
        status = {h: daemons[h].read_status() or {} for h in SITES}
        result["cpu_hub"] = cpu_seconds(feed.pid)
        result["cpu_sites"] = {h: cpu_seconds(daemons[h].proc.pid) for h in SITES
                               if daemons[h].proc is not None}
        got = {h: deliveries(daemons[h]) for h in SITES}
    finally:
        if feed is not None:
            stop_proc(feed, wait=30)
        if flog:
            flog.close()
        for d in daemons.values():
            d.stop()
        emu.stop()

    # Every product at every site, its bytes checked: hashed here, except products of 64 MB
    # and more (40 GB of the field in all), which are hashed at one site of each class and
    # elsewhere checked by size and by the SHA-256 the site's daemon computed of the bytes it
    # wrote (its delivery journal).
    expected = 0
    good = 0
    bad = []
    jobs = []
    hashing_site = {}  # class -> its first site that takes fields
    for h in SITES:
        if "fields" in channels_of(h):
            hashing_site.setdefault(CLASS[h], h)

    def check(h, n):
        path = os.path.join(daemons[h].dest, n)
        if not os.path.exists(path):
            return None
        if prod.size[n] >= (64 << 20) and hashing_site[CLASS[h]] != h:
            return got[h].get(n, (0, None))[1] if os.path.getsize(path) == prod.size[n] else None
        return sha256_file(path)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for h in SITES:
            for n in (n for n in prod.dropped if channel_of[n] in channels_of(h)):
                expected += 1
                jobs.append((h, n, pool.submit(check, h, n)))
        for h, n, fut in jobs:
            if fut.result() == digest[n]:
                good += 1
            else:
                bad.append((h, n))
    result["delivered"] = (good, expected)
    result["bad"] = bad[:10]

    # Warning latency per class, and the products of the day per class.
    lat = collections.defaultdict(list)
    # The outage site's warnings are in the outage figure: those of its last sessions before the
    # stop count there too.
    for h in SITES:
        for n, (kind, at) in prod.dropped.items():
            if kind != "warn" or h == OUTAGE_SITE:
                continue
            row = got[h].get(n)
            lat[CLASS[h]].append(None if row is None else row[0] - at)
    result["warn"] = {c: (pct(v, 0.5), pct(v, 0.99), len(v)) for c, v in lat.items()}
    field = [n for n, (kind, _) in prod.dropped.items() if kind == "field"][0]
    last_warn = max(at for n, (kind, at) in prod.dropped.items() if kind == "warn")
    result["field_in_flight"] = all(got[h].get(field, (math.inf,))[0] > last_warn
                                    for h in SITES if "fields" in channels_of(h))
    result["field_s"] = {c: pct([got[h].get(field, (math.inf,))[0] - prod.dropped[field][1]
                                 for h in SITES if CLASS[h] == c and "fields" in channels_of(h)],
                                1.0) for c in RTT}

    # The hub's datagrams, from its session-end lines.
    first = repairs = late_key = proactive = 0
    with open(os.path.join(work, "feed.log")) as f:
        for line in f:
            # "... in 1.420 s, 16 data datagrams (8 repairs, 8 of them for sites keyed late, 0
            # proactive parity)"
            if " ended: " in line and "data datagrams" in line:
                part = line.split(" s, ", 1)[1]
                nums = [int(w.strip("(,")) for w in part.split() if w.strip("(,").isdigit()]
                first += nums[0] - nums[1] - nums[3]
                repairs += nums[1] - nums[2]
                late_key += nums[2]
                proactive += nums[3]
    with open(stats) as f:
        ls = json.load(f)
    hosts = {hh["name"]: hh for hh in ls["hosts"]}
    lost = {h: hosts["h%d" % h]["down"]["dropped_loss"] for h in SITES}
    result["datagrams"] = (first, repairs, late_key, proactive)
    result["max_loss"] = max((lost[h], h) for h in TERRESTRIAL + SATELLITE)
    result["sum_loss"] = sum(lost[h] for h in TERRESTRIAL + SATELLITE)
    result["one_way"] = {h: (hosts["h%d" % h]["up"]["packets_in"],
                             status[h].get("datagrams_sent"), status[h].get("catch_up") or {},
                             status[h].get("files_incomplete", 0)) for h in ONE_WAY}
    result["outage"] = None if outage_done is None else outage_done - outage_up
    result["outage_missed"] = len(missed_by_outage)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def fmt(x):
    if x is None:
        return "-"
    return "late" if math.isinf(x) else "%.2f s" % x


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--rate", default="50M")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of products")
    ap.add_argument("--field-mb", type=int, default=2000)
    ap.add_argument("--outage-at", type=float, default=30.0, help="when h10 stops (s)")
    ap.add_argument("--drain", type=float, default=900.0,
                    help="most seconds to wait for the last products after the day")
    ap.add_argument("--profiles", default="default,starting")
    ap.add_argument("--work", default="/var/tmp")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("feed_day_bench.py needs root (network namespaces, TUN, veth)")
    # SIGTERM ends the run through the finally clauses: daemons, hub and emulator stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    events = schedule(args.duration, args.field_mb, random.Random(args.seed))
    results = [run_profile(args, p, events) for p in args.profiles.split(",")]

    log("\nA compressed day: 1 hub, 20 sites (10 x 70 ms / 1e-3, 8 x 700 ms / 1e-3 bursts of 4,"
        " 2 one-way 700 ms with HTTPS catch-up), rate %s, %d products over %.0f s, a %d MB "
        "field at 10 s" % (args.rate, len(events), args.duration, args.field_mb))
    head = "| | " + " | ".join(r["profile"] for r in results) + " |"
    log(head)
    log("|---" * (len(results) + 1) + "|")

    def row(label, cell):
        log("| %s | %s |" % (label, " | ".join(cell(r) for r in results)))

    row("products at every site, SHA-256 checked (files x sites)",
        lambda r: "%d / %d" % r["delivered"])
    row("whole day, first drop to last product at the last site", lambda r: "%.0f s" % r["day_s"])
    for c in ("70 ms", "700 ms", "one-way"):
        row("warnings at %s sites: p50 / p99 (bound %s)" % (
            c, "%.2f s" % (1 + RTT[c]) if c != "one-way" else "none"),
            lambda r, c=c: "%s / %s (%d)" % (fmt(r["warn"][c][0]), fmt(r["warn"][c][1]),
                                             r["warn"][c][2]))
    row("warnings all sent while the field was in flight", lambda r: "yes" if r["field_in_flight"] else "no")
    for c in ("70 ms", "700 ms", "one-way"):
        row("the field complete at the last %s site" % c, lambda r, c=c: fmt(r["field_s"][c]))
    row("hub data datagrams: first sends / loss repairs / sent again for sites keyed late / "
        "proactive parity", lambda r: "%d / %d / %d / %d" % r["datagrams"])
    row("largest single two-way site's loss (emulator, datagrams to it)",
        lambda r: "%d (h%d)" % r["max_loss"])
    row("repairs / largest single site's loss (target <= 3)",
        lambda r: "%.2f" % (r["datagrams"][1] / max(1, r["max_loss"][0])))
    row("sum of the 18 two-way sites' losses", lambda r: "%d" % r["sum_loss"])
    for h in ONE_WAY:
        row("one-way h%d: packets its host sent into the emulator / datagrams it counted sent" % h,
            lambda r, h=h: "%s / %s" % r["one_way"][h][:2])
        row("one-way h%d: numbers caught up over HTTPS, products downloaded, bytes" % h,
            lambda r, h=h: "%s, %s, %s" % tuple(r["one_way"][h][2].get(k, "-") for k in (
                "numbers_caught_up", "downloads", "bytes")))
    row("h10 back from an outage on idle channels: restart to every missed product (bound 15 s)",
        lambda r: "%s (%d products)" % (fmt(r["outage"]), r["outage_missed"]))

    def site_cpu(r, c):
        v = [r["cpu_sites"][h] for h in SITES if CLASS[h] == c and h != OUTAGE_SITE and
             r["cpu_sites"].get(h) is not None]
        return "%.1f / %.1f" % (statistics.median(v), max(v)) if v else "-"
    row("CPU seconds (user + system): the hub", lambda r: "%.1f" % (r["cpu_hub"] or 0))
    for c in ("70 ms", "700 ms", "one-way"):
        row("CPU seconds at %s sites: median / most (h%d left out)" % (c, OUTAGE_SITE),
            lambda r, c=c: site_cpu(r, c))
    for r in results:
        if r["bad"] or r["late_sites"]:
            log("%s: missing or wrong (first 10): %s; sites not complete: %s"
                % (r["profile"], r["bad"], r["late_sites"]))


if __name__ == "__main__":
    main()
