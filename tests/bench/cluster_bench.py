#!/usr/bin/env python3
"""Redundant hubs' figures (docs/benchmarks.md "Redundant hubs"), on loopback:

  failover   10 kills (-9) of the active hub at random points of a stream of batches, with the
             default lease ([cluster] defaults: 6 s, renewed every 1 s, fenced 1 s early); per
             kill the failover time, from the last datagram on the channel's group before the
             kill (the dead hub's) to the first after it (the new active hub's), read by a
             multicast listener of this script; after all, every product at the site exactly
             once (destination tree and delivery journal) and duplicates 0.
  intake     products/s from spool to journaled: N small products renamed into the spool at
             once, the time until the journal holds all N, SQLite against PostgreSQL (a local
             server over TCP, fsync on, synchronous_commit on: the defaults).
  history    `mcdistctl history --site S --since 24h --limit 10000` latency over a journal of
             1,000,000 outcome rows (100 sites x 10,000 products), read-only from the journal,
             SQLite against PostgreSQL: median of 5.

usage: cluster_bench.py BUILD_DIR [--only failover,intake,history] [--kills N] [--keep]
Needs root (the server runs as postgres), postgresql-15, loopback multicast. Not a test."""

import argparse
import hashlib
import os
import random
import re
import shutil
import socket
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from mcdist_testlib import Daemon, free_group  # noqa: E402
from pg_cluster_lib import PgServer, free_port, pg_skip_reason  # noqa: E402


def hub_config(path, name, uri, spool, retained, sock, http, group, key, cluster=True,
               after="delete", receivers='["site-a"]'):
    with open(path, "w") as f:
        f.write("""
interface = "127.0.0.1"
%(keyline)s
rate = "200M"
journal = "%(uri)s"
retention = "1h"
retained = "%(retained)s"
control_socket = "%(sock)s"
http = "127.0.0.1:%(http)d"
%(cluster)s
[[channel]]
name = "obs"
group = "%(group)s"
spool = ["%(spool)s"]
batch_window = "200ms"
after = "%(after)s"
receivers = %(receivers)s
register_timeout = "5s"
""" % {"keyline": 'key = "%s"' % key if key else "", "uri": uri, "retained": retained,
       "sock": sock, "http": http, "group": group, "spool": spool, "after": after,
       "receivers": receivers,
       "cluster": '[cluster]\nhub = "%s"\n' % name if cluster else ""})


class Listener:
    """Timestamps of every datagram on the group (joined on loopback)."""

    def __init__(self, group):
        addr, port = group.split(":")
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.s.bind((addr, int(port)))
        self.s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                          socket.inet_aton(addr) + socket.inet_aton("127.0.0.1"))
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.times = []
        self.lock = threading.Lock()
        self.stop = False
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        # The kernel's receive time (SO_TIMESTAMPNS), not this thread's: a thread that falls
        # behind would stamp the dead hub's last datagrams after the kill.
        self.s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.s.settimeout(0.2)
        while not self.stop:
            try:
                _, anc, _, src = self.s.recvmsg(65536, socket.CMSG_SPACE(16))
            except socket.timeout:
                continue
            t = time.time()
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", data[:16])
                    t = sec + nsec / 1e9
            with self.lock:
                self.times.append((t, src[1]))

    def around(self, t, ports_after=None):
        """The last datagram at or before t and the first after t (from one of ports_after
        when given): (time, time)."""
        with self.lock:
            before = [x for x, p in self.times if x <= t]
            after = [x for x, p in self.times if x > t and (ports_after is None or p in ports_after)]
        return (before[-1] if before else None), (after[0] if after else None)

    def ports(self):
        with self.lock:
            return {p for _, p in self.times}


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def failover(bin_dir, base, kills, base_keep=False):
    pg = PgServer(base)
    spool = os.path.join(base, "spool")
    os.makedirs(spool)
    retained = os.path.join(base, "retained")
    key = os.path.join(base, "hub.key")
    subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), key], check=True,
                   stdout=subprocess.DEVNULL)
    group = free_group()
    hubs = {}
    for name in ("hub-a", "hub-b"):
        cfg = os.path.join(base, name + ".toml")
        hub_config(cfg, name, pg.uri(), spool, retained, os.path.join(base, name + ".sock"),
                   free_port(), group, key)
        hubs[name] = [os.path.join(bin_dir, "feed", "mcdist-feed"), "--config", cfg], None
    site = Daemon(bin_dir, base, "site-a", group, ["--trust", key + ".pub", "--session-timeout",
                                                   "15s"])
    listener = Listener(group)
    procs = {}

    def start(name):
        logf = open(os.path.join(base, name + ".log"), "ab")
        procs[name] = subprocess.Popen(hubs[name][0], stdout=logf, stderr=subprocess.STDOUT)

    def holder():
        # The table exists once the first hub has migrated the database: None until then.
        try:
            rows = pg.query("SELECT holder FROM leases WHERE channel = 'obs' AND "
                            "expires_at > clock_timestamp()")
        except subprocess.CalledProcessError:
            return None
        return rows[0][0] if rows else None

    start("hub-a")
    while holder() != "hub-a":
        time.sleep(0.1)
    start("hub-b")
    rng = random.Random(7)
    products = {}
    stop = threading.Event()

    def producer():
        i = 0
        while not stop.is_set():
            data = rng.randbytes(rng.choice([20_000, 200_000, 2_000_000]))
            name = "p%05d.bin" % i
            tmp = os.path.join(spool, "." + name)
            with open(tmp, "wb") as f:
                f.write(data)
            products[name] = hashlib.sha256(data).hexdigest()
            os.rename(tmp, os.path.join(spool, name))
            i += 1
            time.sleep(rng.uniform(0.05, 0.4))
    threading.Thread(target=producer, daemon=True).start()
    kill_rng = random.Random(11)
    kills_done = []
    for k in range(kills):
        time.sleep(kill_rng.uniform(3, 8))
        victim = holder()
        while victim is None:
            time.sleep(0.1)
            victim = holder()
        procs[victim].send_signal(9)
        procs[victim].wait()
        t_kill = time.time()
        other = "hub-b" if victim == "hub-a" else "hub-a"
        while holder() != other:
            time.sleep(0.05)
        kills_done.append((victim, other, t_kill, time.time() - t_kill))
        print("kill %d of %s at %.3f; lease seen held by %s %.2f s later" % (
            k + 1, victim, t_kill, other, kills_done[-1][3]), flush=True)
        time.sleep(3)
        start(victim)
    stop.set()
    time.sleep(2)
    deadline = time.time() + 120
    while time.time() < deadline:
        done = all(os.path.exists(os.path.join(site.dest, n)) for n in products)
        open_sessions = int(pg.query("SELECT count(*) FROM sessions WHERE ended IS NULL")[0][0])
        if done and open_sessions == 0:
            break
        time.sleep(1)
    # Only the lease holder sends on the group (its sessions, and its channel heartbeat from
    # the moment it takes the lease); the standby and the site send nothing there, and the
    # killed hub has been reaped before t_kill. So the last datagram before a kill is the dead
    # hub's and the first after it the new active hub's. Checked here: every session sends from
    # a socket of its own and each hub logs its source port ("session S: multicast to G from
    # A:PORT"); a datagram from neither hub's session ports is a heartbeat.
    ports = {}
    for name in hubs:
        with open(os.path.join(base, name + ".log"), errors="replace") as f:
            ports[name] = {int(m) for m in re.findall(r"multicast to \S+ from [0-9.]+:(\d+)",
                                                      f.read())}
    heard = listener.ports()
    print("datagrams heard from %d source ports: %d of hub-a's sessions, %d of hub-b's, %d of "
          "neither (heartbeats)" % (
              len(heard), len(heard & ports["hub-a"]), len(heard & ports["hub-b"]),
              len(heard - ports["hub-a"] - ports["hub-b"])), flush=True)
    if base_keep:
        with open(os.path.join(base, "heard.tsv"), "w") as f:
            owner = {p: n for n in ports for p in ports[n]}
            for t, p in listener.times:
                f.write("%.6f\t%d\t%s\n" % (t, p, owner.get(p, "-")))
    results = []
    sessions_after = []
    for k, (victim, other, t_kill, lease_after) in enumerate(kills_done):
        last, first = listener.around(t_kill)
        _, first_session = listener.around(t_kill, ports[other] - ports[victim])
        results.append(first - last if last and first else None)
        sessions_after.append(first_session - t_kill if first_session else None)
        print("kill %d of %s: failover %s s (kill %.2f s after the last datagram; lease seen "
              "held by %s %.2f s after the kill; first datagram %s s after the kill, first of "
              "its sessions %s s)" % (
                  k + 1, victim, "%.2f" % results[-1] if results[-1] else "?",
                  t_kill - last if last else -1, other, lease_after,
                  "%.2f" % (first - t_kill) if first else "?",
                  "%.2f" % sessions_after[-1] if sessions_after[-1] else "?"), flush=True)
    delivered = sum(1 for n, d in products.items()
                    if os.path.exists(os.path.join(site.dest, n))
                    and hashlib.sha256(open(os.path.join(site.dest, n), "rb").read()).hexdigest() == d)
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(site.temp, "journal.db"), uri=True)
    journaled = dict(db.execute("SELECT relpath, count(*) FROM deliveries GROUP BY relpath"))
    db.close()
    dups = sum(1 for c in journaled.values() if c > 1)
    once = sum(1 for n in products if journaled.get(n) == 1)
    extra = sorted(set(os.listdir(site.dest)) - set(products))
    print("site: %d of %d products in the destination tree with their digest, %d journaled "
          "exactly once, %d journaled more than once, %d files not produced" % (
              delivered, len(products), once, dups, len(extra)), flush=True)
    for p in procs.values():
        p.terminate()
        p.wait()
    site.stop()
    listener.stop = True
    pg.stop()
    ok = [r for r in results if r is not None]
    print("failover over %d kills: median %.2f s, min %.2f, max %.2f; products %d of %d "
          "delivered (%.1f %%), duplicates %d" % (
              len(ok), statistics.median(ok), min(ok), max(ok), delivered, len(products),
              100.0 * delivered / max(1, len(products)), dups))


def intake(bin_dir, base, n):
    pg = PgServer(base)
    out = {}
    for engine in ("sqlite", "postgresql"):
        d = os.path.join(base, engine)
        spool = os.path.join(d, "spool")
        os.makedirs(spool)
        uri = pg.uri() if engine == "postgresql" else os.path.join(d, "journal.db")
        cfg = os.path.join(d, "feed.toml")
        hub_config(cfg, "bench", uri, spool, os.path.join(d, "retained"),
                   os.path.join(d, "c.sock"), free_port(), free_group(), None,
                   cluster=False, after="keep", receivers="[]")
        # Written under dot-names first, renamed in one burst.
        stage = os.path.join(spool, ".stage")
        os.makedirs(stage)
        for i in range(n):
            with open(os.path.join(stage, "b%06d" % i), "wb") as f:
                f.write(b"x" * 1000)
        logf = open(os.path.join(d, "feed.log"), "ab")
        proc = subprocess.Popen([os.path.join(bin_dir, "feed", "mcdist-feed"), "--config", cfg],
                                stdout=logf, stderr=subprocess.STDOUT)
        time.sleep(2)

        # One psql session for the whole wait, not a psql process per poll: a process every
        # 50 ms would take CPU from the hub being measured on a small machine.
        reader = None
        if engine == "postgresql":
            reader = subprocess.Popen(["psql", "-X", "-q", "-A", "-t", "-h", pg.dir, "-p",
                                       str(pg.port), "-U", "mcdist", "-d", "mcdist"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        def count():
            if reader:
                reader.stdin.write("SELECT count(*) FROM products;\n")
                reader.stdin.flush()
                return int(reader.stdout.readline())
            db = sqlite3.connect("file:%s?mode=ro" % uri, uri=True, timeout=10)
            try:
                return db.execute("SELECT count(*) FROM products").fetchone()[0]
            except sqlite3.OperationalError:
                return 0
            finally:
                db.close()
        t0 = time.time()
        for i in range(n):
            os.rename(os.path.join(stage, "b%06d" % i), os.path.join(spool, "b%06d" % i))
        while count() < n:
            time.sleep(0.05)
        took = time.time() - t0
        if reader:
            reader.stdin.close()
            reader.wait()
        out[engine] = n / took
        print("intake %s: %d products in %.2f s: %.0f products/s" % (engine, n, took, n / took),
              flush=True)
        proc.terminate()
        proc.wait()
    pg.stop()
    return out


def history(bin_dir, base):
    pg = PgServer(base)
    now_ns = time.time_ns()
    sql_pg = """
INSERT INTO products(id, channel, name, spool_path, size, mtime_ns, state, seq, queued_at, sent_at)
  SELECT g, 'obs', 'obs/p' || g || '.bufr', '/spool/obs/p' || g || '.bufr', 1000, 1, 'sent',
         g / 100 + 1, %(t)d - (10000 - g) * 1000000000::bigint,
         %(t)d - (10000 - g) * 1000000000::bigint
  FROM generate_series(1, 10000) g;
INSERT INTO outcomes(product, site, outcome, reason, seq, at)
  SELECT p, 'site' || s, 'stored', '', p / 100 + 1, %(t)d - (10000 - p) * 1000000000::bigint
  FROM generate_series(1, 10000) p, generate_series(1, 100) s;
ANALYZE;
""" % {"t": now_ns}
    ctl = os.path.join(bin_dir, "tools", "mcdistctl", "mcdistctl")
    # Schemas made by the programs themselves (a feed started once on each journal).
    d = os.path.join(base, "h")
    os.makedirs(d)
    sqlite_path = os.path.join(d, "journal.db")
    for uri in (sqlite_path, pg.uri()):
        cfg = os.path.join(d, "feed.toml")
        hub_config(cfg, "bench", uri, os.path.join(d, "spool"), os.path.join(d, "retained"),
                   os.path.join(d, "c.sock"), free_port(), free_group(), None, cluster=False,
                   receivers="[]")
        p = subprocess.Popen([os.path.join(bin_dir, "feed", "mcdist-feed"), "--config", cfg],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)
        p.terminate()
        p.wait()
    pg.psql(["-d", "mcdist", "-c", sql_pg])
    db = sqlite3.connect(sqlite_path)
    db.execute("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 10000) "
               "INSERT INTO products(id, channel, name, spool_path, size, mtime_ns, state, seq, "
               "queued_at, sent_at) SELECT x, 'obs', 'obs/p' || x || '.bufr', '/spool/obs/p' || x "
               "|| '.bufr', 1000, 1, 'sent', x / 100 + 1, ?1 - (10000 - x) * 1000000000, "
               "?1 - (10000 - x) * 1000000000 FROM g", (now_ns,))
    db.execute("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 10000), "
               "s(y) AS (SELECT 1 UNION ALL SELECT y + 1 FROM s WHERE y < 100) "
               "INSERT INTO outcomes(product, site, outcome, reason, seq, at) SELECT x, 'site' || "
               "y, 'stored', '', x / 100 + 1, ?1 - (10000 - x) * 1000000000 FROM g, s", (now_ns,))
    db.commit()
    db.execute("ANALYZE")
    n_sqlite = db.execute("SELECT count(*) FROM outcomes").fetchone()[0]
    db.close()
    n_pg = int(pg.query("SELECT count(*) FROM outcomes")[0][0])
    print("history: %d outcome rows in SQLite, %d in PostgreSQL" % (n_sqlite, n_pg), flush=True)
    out = {}
    for engine, uri in (("sqlite", sqlite_path), ("postgresql", pg.uri())):
        times = []
        rows = 0
        for _ in range(5):
            t0 = time.time()
            r = subprocess.run([ctl, "--socket", os.path.join(d, "none.sock"), "--journal", uri,
                                "history", "--site", "site42", "--since", "24h", "--limit",
                                "10000", "--json"], capture_output=True, text=True)
            times.append(time.time() - t0)
            rows = r.stdout.count('"product_id"')
        out[engine] = statistics.median(times)
        print("history %s: %d rows of 1,000,000 outcomes, median %.3f s (%s)" % (
            engine, rows, out[engine], ", ".join("%.3f" % t for t in times)), flush=True)
    pg.stop()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--only", default="failover,intake,history")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--products", type=int, default=5000)
    ap.add_argument("--keep", action="store_true",
                    help="leave the working directories (logs, journals) and print their paths")
    a = ap.parse_args()
    reason = pg_skip_reason()
    if reason:
        print("cannot run: " + reason)
        return 1
    what = a.only.split(",")
    for w in what:
        base = tempfile.mkdtemp(prefix="mcdist-clbench-")
        try:
            if w == "failover":
                failover(a.build, base, a.kills, a.keep)
            elif w == "intake":
                intake(a.build, base, a.products)
            elif w == "history":
                history(a.build, base)
        finally:
            if a.keep:
                print("%s: kept %s" % (w, base), flush=True)
            else:
                shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
