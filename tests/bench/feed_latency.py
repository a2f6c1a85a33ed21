#!/usr/bin/env python3
"""Product latency of a hub: mcdist-feed against a loop of UFTP 4.10 sessions.

Latency is measured from the moment a product is complete in the hub's spool (renamed into
place by the producer) to the moment it is complete in a site's destination tree (mcdistd
renames atomically; uftpd receives into -T TEMP and moves the file at the end of its session,
the same guarantee). The harness polls both sites' destination trees every 10 ms, so a latency
is exact to about 10 ms.

Links (tests/linkem): h0 the hub; h1 a terrestrial site (35 ms each way: 70 ms RTT); h2 a
geostationary site (350 ms each way: 700 ms RTT, loss 1e-3 both ways).

Scenarios, each run once with each program, same emulator, same product stream (same seed):
  load50   products of 100 kB arriving at random (Poisson) at 50 % of the configured rate
  load90   the same at 90 % of the rate
  warning  a large model field (--field-mb, ~20 s at the rate) sent on the low-priority
           channel; 10 kB warnings dropped every 2 s while it is in flight
  warning2g  the issue's case: the same with a 2 GB field (--big-field-mb; ~5 min at 50 Mbit/s);
           warnings are dropped for --duration s while it is in flight and the run ends when
           they have all arrived (the field is not waited for: the table says whether it was
           still in flight when the last warning arrived)
mcdist-feed: channels warnings (priority 10, 100 ms batch window), obs (priority 5, 1 s) and
fields (priority 1, 1 s), closed group {h1, h2}, unsigned (UFTP runs with -Y none).
UFTP: what its users do without a feed daemon: every 1 s the loop takes what arrived in the
spool and runs one `uftp` session with it (closed group, -R at the same rate, -Y none);
sessions run one after the other, so a warning waits behind a field's session.

Needs root (namespaces, TUN), uftp/uftpd (deploy/install-deps.sh --bench) and a build with
mcdist-feed, mcdistd and mcdist-linkem. Not a test: prints a table.

usage: feed_latency.py --build BUILD [--rate 50M] [--duration 30] [--field-mb 100]
                       [--big-field-mb 2000] [--scenarios load50,load90,warning,warning2g]
                       [--programs mcdist,uftp]
"""

import argparse
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from linkem_run import Emulator, stop_proc  # noqa: E402

LINKS = ["h1:delay=35ms", "h2:delay=350ms,loss=0.001"]
SITES = (1, 2)
SITE_NAME = {1: "70 ms", 2: "700 ms"}


def parse_rate(text):
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * mult[text[-1]] if text[-1] in mult else float(text)


def in_ns(ns, args):
    return ["ip", "netns", "exec", ns] + args


class Watcher(threading.Thread):
    """Polls destination trees every 10 ms; records when each expected name is complete."""

    def __init__(self, dests, expected_size):
        super().__init__(daemon=True)
        self.dests = dests            # site -> dir
        self.size = expected_size     # name -> size (filled in as products are dropped)
        self.seen = {s: {} for s in dests}
        self.stop_flag = False

    def run(self):
        while not self.stop_flag:
            now = time.time()
            for s, d in self.dests.items():
                try:
                    names = os.listdir(d)
                except OSError:
                    continue
                seen = self.seen[s]
                for n in names:
                    if n in seen or n not in self.size:
                        continue
                    try:
                        if os.path.getsize(os.path.join(d, n)) == self.size[n]:
                            seen[n] = now
                    except OSError:
                        pass
            time.sleep(0.01)


class Producer:
    """Drops products into spools (write a dot-name, rename) and remembers when."""

    def __init__(self, spools, rng, staging=None):
        self.spools, self.rng = spools, rng
        self.staging = staging  # large products are written here before the clock starts
        self.staged = {}        # (channel, size, prefix) -> path written ahead
        self.dropped = {}   # name -> (channel, time complete in the spool)
        self.size = {}
        self.n = 0

    def stage(self, events):
        """Writes the products of 64 MiB and more ahead (a 2 GB field takes ~10 s to write),
        on the spools' file system, so that dropping them is a rename."""
        if not self.staging:
            return
        os.makedirs(self.staging, exist_ok=True)
        for _, channel, size, prefix in events:
            if size < (64 << 20):
                continue
            path = os.path.join(self.staging, "%s-%d" % (prefix, len(self.staged)))
            with open(path, "wb") as f:
                left = size
                while left:
                    n = min(left, 16 << 20)
                    f.write(os.urandom(n))
                    left -= n
            self.staged[(channel, size, prefix)] = path

    def drop(self, channel, size, prefix):
        self.n += 1
        name = "%s-%05d.bin" % (prefix, self.n)
        d = self.spools[channel]
        tmp = os.path.join(d, "." + name)
        ahead = self.staged.pop((channel, size, prefix), None)
        if ahead:
            os.rename(ahead, tmp)
        else:
            with open(tmp, "wb") as f:
                f.write(self.rng.randbytes(size) if size < (64 << 20) else os.urandom(size))
        self.size[name] = size
        os.rename(tmp, os.path.join(d, name))
        self.dropped[name] = (channel, time.time())
        return name


def schedule(scenario, rate_bps, duration, field_mb, rng, big_field_mb=2000):
    """[(offset seconds, channel, size, prefix)] for a scenario; the same for both programs."""
    events = []
    if scenario in ("load50", "load90"):
        share = 0.5 if scenario == "load50" else 0.9
        size = 100_000
        # IP+UDP+mcdist overhead ~4 %: products of `size` bytes at `share` of the rate.
        per_s = share * rate_bps / (size * 8 * 1.04)
        t = 0.0
        while True:
            t += rng.expovariate(per_s)
            if t >= duration:
                break
            events.append((t, "obs", size, "obs"))
    else:
        mb = big_field_mb if scenario == "warning2g" else field_mb
        events.append((0.0, "fields", mb * 1_000_000, "field"))
        t = 3.0
        while t < duration:
            events.append((t, "warnings", 10_000, "warn"))
            t += 2.0
    return events


def feed_config(work, emu, rate, spools, journal):
    return """
interface = "%s"
rate = "%s"
journal = "%s"
retention = "0s"
control_socket = "%s"

[[channel]]
name = "warnings"
group = "239.192.60.1:4711"
spool = ["%s"]
priority = 10
batch_window = "100ms"
after = "delete"
receivers = ["h1", "h2"]

[[channel]]
name = "obs"
group = "239.192.60.2:4711"
spool = ["%s"]
priority = 5
batch_window = "1s"
after = "delete"
receivers = ["h1", "h2"]

[[channel]]
name = "fields"
group = "239.192.60.3:4711"
spool = ["%s"]
priority = 1
batch_window = "1s"
after = "delete"
receivers = ["h1", "h2"]
""" % (emu.addr(0), rate, journal, os.path.join(work, "control.sock"), spools["warnings"],
       spools["obs"], spools["fields"])


def run_mcdist(args, emu, work, events):
    spools = {c: os.path.join(work, "spool", c) for c in ("warnings", "obs", "fields")}
    for p in spools.values():
        os.makedirs(p)
    cfg = os.path.join(work, "feed.toml")
    with open(cfg, "w") as f:
        f.write(feed_config(work, emu, args.rate, spools, os.path.join(work, "journal.db")))
    procs, dests = [], {}
    for h in SITES:
        d = os.path.join(work, "h%d" % h)
        dests[h] = os.path.join(d, "dest")
        os.makedirs(dests[h])
        os.makedirs(os.path.join(d, "temp"))
        logf = open(os.path.join(d, "mcdistd.log"), "w")
        procs.append((subprocess.Popen(in_ns(emu.ns(h), [
            os.path.join(args.build, "receiver", "mcdistd"), "--id", "h%d" % h,
            "--group", "239.192.60.1:4711", "--group", "239.192.60.2:4711",
            "--group", "239.192.60.3:4711", "--interface", emu.addr(h), "--dest", dests[h],
            "--temp", os.path.join(d, "temp"), "--http", "off", "--allow-unsigned"]),
            stdout=logf, stderr=subprocess.STDOUT), logf))
    time.sleep(1.0)
    flog = open(os.path.join(work, "feed.log"), "w")
    feed = subprocess.Popen(in_ns(emu.ns(0), [os.path.join(args.build, "feed", "mcdist-feed"),
                                              "--config", cfg]),
                            stdout=flog, stderr=subprocess.STDOUT)
    time.sleep(1.0)
    try:
        return drive(events, spools, dests, args, work)
    finally:
        stop_proc(feed)
        flog.close()
        for p, logf in procs:
            stop_proc(p)
            logf.close()


def run_uftp(args, emu, work, events):
    spool = os.path.join(work, "spool")
    os.makedirs(spool)
    spools = {c: spool for c in ("warnings", "obs", "fields")}
    procs, dests = [], {}
    for h in SITES:
        d = os.path.join(work, "uftp-h%d" % h)
        dests[h] = os.path.join(d, "dest")
        os.makedirs(dests[h])
        os.makedirs(os.path.join(d, "tmp"))
        logf = open(os.path.join(d, "uftpd.log"), "w")
        procs.append((subprocess.Popen(in_ns(emu.ns(h), [
            "uftpd", "-d", "-I", "mle0", "-M", "230.4.4.1", "-D", dests[h], "-T",
            os.path.join(d, "tmp"), "-U", "0x%08x" % (h + 1), "-B", "104857600", "-q"]),
            stdout=logf, stderr=subprocess.STDOUT), logf))
    time.sleep(1.0)
    stop = threading.Event()
    out = open(os.path.join(work, "uftp.out"), "w")
    rate_k = str(int(round(parse_rate(args.rate) / 1024)))

    def loop():
        # One uftp session per batch: what arrived in the last second, oldest first.
        while not stop.is_set():
            names = sorted(n for n in os.listdir(spool) if not n.startswith("."))
            if not names:
                time.sleep(0.05)
                continue
            paths = [os.path.join(spool, n) for n in names]
            current[0] = subprocess.Popen(in_ns(emu.ns(0), [
                "uftp", "-I", "mle0", "-M", "230.4.4.1", "-P", "230.5.5.1", "-H",
                "0x00000002,0x00000003", "-R", rate_k, "-Y", "none", "-B", "104857600"] + paths),
                stdout=out, stderr=subprocess.STDOUT)
            current[0].wait()
            if stop.is_set():
                return
            for p in paths:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            stop.wait(1.0)
    current = [None]
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        return drive(events, spools, dests, args, work)
    finally:
        stop.set()
        if current[0] is not None:
            stop_proc(current[0], signal.SIGINT)  # a session still running at the end
        t.join(60)
        out.close()
        for p, logf in procs:
            stop_proc(p)
            logf.close()


def drive(events, spools, dests, args, work):
    """Drops the scheduled products, waits for them at every site; returns latencies.
    With args.only_warnings (scenario warning2g) it waits for the warnings alone."""
    prod = Producer(spools, random.Random(7), os.path.join(work, "staging"))
    prod.stage(events)
    watcher = Watcher(dests, prod.size)
    watcher.start()
    t0 = time.time()
    for off, channel, size, prefix in events:
        delay = t0 + off - time.time()
        if delay > 0:
            time.sleep(delay)
        prod.drop(channel, size, prefix)
    deadline = time.time() + args.drain
    wanted = [n for n, (ch, _) in prod.dropped.items()
              if not getattr(args, "only_warnings", False) or ch == "warnings"]
    while time.time() < deadline:
        if all(all(n in watcher.seen[s] for n in wanted) for s in dests):
            break
        time.sleep(0.1)
    watcher.stop_flag = True
    watcher.join()
    lat = {}
    for s in dests:
        for name, (channel, at) in prod.dropped.items():
            got = watcher.seen[s].get(name)
            lat.setdefault((s, channel), []).append(None if got is None else got - at)
    return lat


def pct(values, q):
    """The q-quantile; a product that never arrived counts as infinitely late."""
    v = sorted(math.inf if x is None else x for x in values)
    if not v:
        return None
    return v[min(len(v) - 1, max(0, int(math.ceil(q * len(v))) - 1))]


def fmt(x):
    if x is None:
        return "   -  "
    return "  late" if math.isinf(x) else ("%6.2f" % x)


def ratio(theirs, ours):
    if math.isinf(theirs) and not math.isinf(ours):
        return "inf"
    if math.isinf(ours):
        return "-"
    return "%.1fx" % (theirs / ours)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--rate", default="50M")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--field-mb", type=int, default=100)
    ap.add_argument("--big-field-mb", type=int, default=2000, help="the field of scenario warning2g")
    ap.add_argument("--drain", type=float, default=120.0, help="most seconds to wait after the last product")
    ap.add_argument("--scenarios", default="load50,load90,warning")
    ap.add_argument("--programs", default="mcdist,uftp")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("feed_latency.py needs root (network namespaces, TUN)")
    for tool in ("uftp", "uftpd"):
        if shutil.which(tool) is None and "uftp" in args.programs:
            sys.exit("%s not found: ./deploy/install-deps.sh --bench" % tool)
    linkem = os.path.join(args.build, "tests", "linkem", "mcdist-linkem")
    rate_bps = parse_rate(args.rate)
    rows = []
    for scenario in args.scenarios.split(","):
        events = schedule(scenario, rate_bps, args.duration, args.field_mb, random.Random(42),
                          args.big_field_mb)
        args.only_warnings = scenario == "warning2g"
        results = {}
        for program in args.programs.split(","):
            work = tempfile.mkdtemp(prefix="feedlat-%s-%s-" % (scenario, program))
            emu = Emulator(linkem, work, LINKS, hosts=3, seed=3)
            try:
                run = run_mcdist if program == "mcdist" else run_uftp
                results[program] = run(args, emu, work, events)
            finally:
                emu.stop()
            if not os.environ.get("FEEDLAT_KEEP"):
                shutil.rmtree(work, ignore_errors=True)
        channel = "warnings" if scenario.startswith("warning") else "obs"
        for s in SITES:
            row = [scenario, SITE_NAME[s], channel, len(events) if channel == "obs" else
                   sum(1 for e in events if e[1] == "warnings")]
            for program in args.programs.split(","):
                lat = results[program].get((s, channel), [])
                lost = sum(1 for x in lat if x is None)
                row += [pct(lat, 0.5), pct(lat, 0.99), lost]
            if scenario.startswith("warning"):
                first = results[args.programs.split(",")[0]]
                row.append([fmt(x) for x in first.get((s, "fields"), [])])
                # Was the field still in flight when the last warning arrived at this site?
                warn = [x for x in first.get((s, "warnings"), []) if x is not None]
                field = first.get((s, "fields"), [None])[0]
                print("%s %s: field latency %s; last warning latency %s; field in flight "
                      "throughout: %s" % (scenario, SITE_NAME[s], fmt(field),
                                          fmt(max(warn)) if warn else "-",
                                          "yes" if field is None or field > args.duration else "no"))
            rows.append(row)
    progs = args.programs.split(",")
    print("\nProduct latency, spool to site, seconds (rate %s, links %s)" % (args.rate, ", ".join(LINKS)))
    head = "| scenario | site | products | " + " | ".join(
        "%s p50 | %s p99 | %s late" % (p, p, p) for p in progs)
    if len(progs) == 2:
        head += " | p50 ratio | p99 ratio"
    print(head + " |")
    print("|" + "---|" * (head.count("|")))
    for r in rows:
        cells = [r[0], r[1], "%d %s" % (r[3], r[2])]
        for i in range(len(progs)):
            p50, p99, lost = r[4 + 3 * i: 7 + 3 * i]
            cells += [fmt(p50), fmt(p99), str(lost)]
        if len(progs) == 2 and r[4] and r[7] and r[5] and r[8]:
            cells += [ratio(r[7], r[4]), ratio(r[8], r[5])]
        print("| " + " | ".join(cells) + " |")
    print("\n'late': products not at the site within --drain s of the last drop (a quantile "
          "that falls on one prints 'late'). Ratio: UFTP's latency over mcdist's (higher: "
          "mcdist faster).")


if __name__ == "__main__":
    main()
