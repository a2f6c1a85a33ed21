#!/usr/bin/env python3
"""Redundant hubs: two real mcdist-feed sharing one real PostgreSQL journal (started here with
initdb and pg_ctl, as the postgres user when run as root), one shared spool and retained
directory and one shared key, feeding two real mcdistd sites on loopback multicast. Each hub
reaches the database through a TCP proxy of its own, so that one hub can be cut off it while it
still reaches the sites.

1. Hub A starts first and sends the channel; hub B is standby (status, /metrics, mcdistctl).
2. kill -9 of A mid-batch: B takes over when the lease lapses and sends the interrupted batch
   again under its own number; the sites hold what they had completed.
3. A restarted: standby, it takes nothing from B.
4. B cut from the database mid-batch (its proxy frozen) while it still reaches the sites: B
   stops sending before A is granted the lease (the two hubs' log lines in that order), says so
   in its log and status; A takes over and sends the batch again. B's path is restored: B stays
   standby.
5. B (the lost hub) restarted: standby; a last batch goes out through A.

After all of it: every product at both sites exactly once, in the destination tree and in the
site's delivery journal (a repeated session held, not delivered twice), the sites' sequence
numbers for the channel complete up to the journal's last number (no gap), `mcdistctl missing`
empty for both sites, and `mcdistctl status` against the standby hub shows both hubs and the
lease holder.

usage: test_feed_cluster.py BUILD_DIR"""

import datetime
import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, Daemon, check, fail, free_group, log,  # noqa: E402
                            loopback_multicast_works)
from pg_cluster_lib import PgServer, Proxy, free_port, pg_skip_reason  # noqa: E402

SITES = ["site-a", "site-b"]
CHANNEL = "obs"


class Hub:
    def __init__(self, bin_dir, base, name, config):
        self.name = name
        self.args = [os.path.join(bin_dir, "feed", "mcdist-feed"), "--config", config,
                     "--log-level", "debug"]
        self.log_path = os.path.join(base, name + ".log")
        self.proc = None

    def start(self):
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.logf, stderr=subprocess.STDOUT)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.logf.close()

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.logf.close()

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def log_time(self, needle, after=0.0):
        """Wall time of the first log line holding `needle` logged after `after`, or None."""
        for line in self.log_text().splitlines():
            if needle not in line:
                continue
            m = re.match(r"\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)", line)
            if not m:
                continue
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
            if t >= after:
                return t
        return None


def http_json(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
        body = r.read().decode()
    return json.loads(body) if path == "/status" else body


def role(port):
    try:
        st = http_json(port, "/status")
    except Exception:  # noqa: BLE001 - not up yet
        return None
    for c in st.get("channels", []):
        if c.get("name") == CHANNEL:
            return c.get("role")
    return None


def wait_until(what, pred, timeout, hubs=(), sites=()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    msg = "timed out waiting for %s" % what
    for h in hubs:
        msg += "\n--- %s log ---\n%s" % (h.name, h.log_text()[-6000:])
    for d in sites:
        msg += "\n--- %s log ---\n%s" % (d.id, d.log_text()[-3000:])
    fail(msg)


def drop(spool, name, data):
    path = os.path.join(spool, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".part")
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    reason = pg_skip_reason()
    if reason:
        print("SKIPPED: " + reason)
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-cluster-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(4242)
    pg = None
    proxies = {}
    hubs = {}
    sites = []
    started = time.time()
    try:
        pg = PgServer(base)
        spool = os.path.join(base, "spool")
        retained = os.path.join(base, "retained")
        os.makedirs(spool)
        key = os.path.join(base, "hub.key")
        subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), key],
                       check=True, stdout=subprocess.DEVNULL)
        group = free_group()
        ports = {}
        for name in ("hub-a", "hub-b"):
            proxies[name] = Proxy(pg.port)
            ports[name] = free_port()
            config = os.path.join(base, name + ".toml")
            with open(config, "w") as f:
                f.write("""
interface = "127.0.0.1"
key = "%(key)s"
rate = "40M"
journal = "%(uri)s"
retention = "1h"
retained = "%(retained)s"
control_socket = "%(sock)s"
http = "127.0.0.1:%(http)d"

[cluster]
hub = "%(name)s"
lease = "4s"
renew = "500ms"
margin = "1s"

[[channel]]
name = "%(channel)s"
group = "%(group)s"
spool = ["%(spool)s"]
batch_window = "300ms"
after = "delete"
receivers = ["site-a", "site-b"]
register_timeout = "5s"
heartbeat = "2s"
""" % {"key": key, "uri": pg.uri(proxies[name].port), "retained": retained,
                    "sock": os.path.join(base, name + ".sock"), "http": ports[name], "name": name,
                    "channel": CHANNEL, "group": group, "spool": spool})
            hubs[name] = Hub(bin_dir, base, name, config)
        sites = [Daemon(bin_dir, base, s, group,
                        ["--trust", key + ".pub", "--session-timeout", "10s"]) for s in SITES]
        a, b = hubs["hub-a"], hubs["hub-b"]
        everything = {}

        def batch(tag, count, size):
            names = {}
            for i in range(count):
                data = rng.randbytes(size)
                n = "%s/p%02d.bin" % (tag, i)
                names[n] = hashlib.sha256(data).hexdigest()
                drop(spool, n, data)
            everything.update(names)
            return names

        def at_sites(names):
            def ok():
                for d in sites:
                    for n, digest in names.items():
                        p = os.path.join(d.dest, n)
                        if not os.path.exists(p):
                            return False
                        with open(p, "rb") as f:
                            if hashlib.sha256(f.read()).hexdigest() != digest:
                                return False
                return True
            return ok

        def sending(tag):
            rows = pg.query("SELECT count(*) FROM products WHERE name LIKE '%s/%%' AND "
                            "state = 'sending'" % tag)
            return int(rows[0][0]) > 0

        # 1. A first: active; B standby.
        a.start()
        wait_until("hub-a active", lambda: role(ports["hub-a"]) == "active", 20, [a])
        b.start()
        wait_until("hub-b standby", lambda: role(ports["hub-b"]) == "standby", 20, [b])
        metrics = http_json(ports["hub-b"], "/metrics")
        check('mcdist_feed_channel_active{channel="obs"} 0' in metrics,
              "hub-b's /metrics does not show obs standby")
        first = batch("first", 3, 100_000)
        wait_until("the first batch at both sites", at_sites(first), 30, [a, b], sites)
        log("hub-a sends, hub-b is standby; first batch delivered")

        # 2. kill -9 of A mid-batch.
        kill_batch = batch("kill", 8, 2_000_000)
        wait_until("the kill batch in flight", lambda: sending("kill"), 20, [a])
        time.sleep(1.0)
        a.kill9()
        killed_at = time.time()
        log("hub-a killed mid-batch")
        wait_until("hub-b active", lambda: role(ports["hub-b"]) == "active", 20, [b])
        took_over = b.log_time("sends it now", after=killed_at - 1)
        check(took_over is not None, "hub-b did not log its takeover")
        log("hub-b took over %.1f s after the kill" % (took_over - killed_at))
        wait_until("the kill batch at both sites", at_sites(kill_batch), 40, [b], sites)
        check("sent again" in b.log_text(), "hub-b did not send the interrupted batch again")

        # 3. A restarted: standby.
        a.start()
        wait_until("hub-a standby", lambda: role(ports["hub-a"]) == "standby", 20, [a])
        log("hub-a restarted as standby")

        # 4. B cut from the database mid-batch.
        cut_batch = batch("cut", 8, 2_000_000)
        wait_until("the cut batch in flight", lambda: sending("cut"), 20, [b])
        time.sleep(0.5)
        proxies["hub-b"].freeze()
        cut_at = time.time()
        log("hub-b cut from the database")
        wait_until("hub-b standby", lambda: role(ports["hub-b"]) == "standby", 20, [b])
        wait_until("hub-a active", lambda: role(ports["hub-a"]) == "active", 20, [a])
        stopped = b.log_time("stops sending it", after=cut_at - 1)
        taken = a.log_time("sends it now", after=cut_at - 1)
        check(stopped is not None and taken is not None,
              "missing log lines: hub-b stop %s, hub-a takeover %s" % (stopped, taken))
        check(stopped < taken, "hub-a took the channel (%.3f) before hub-b stopped (%.3f)" % (
            taken, stopped))
        st = http_json(ports["hub-b"], "/status")
        ch = [c for c in st["channels"] if c["name"] == CHANNEL][0]
        check(ch["lost_reason"] != "", "hub-b's status gives no reason for standby")
        log("hub-b stopped %.2f s before hub-a took over (%s)" % (taken - stopped,
                                                                 ch["lost_reason"][:80]))
        wait_until("the cut batch at both sites", at_sites(cut_batch), 40, [a], sites)
        proxies["hub-b"].thaw()
        time.sleep(2)
        check(role(ports["hub-b"]) == "standby", "hub-b took the channel back after the thaw")

        # 5. The lost hub restarted.
        b.kill9()
        b.start()
        wait_until("hub-b standby again", lambda: role(ports["hub-b"]) == "standby", 20, [b])
        last = batch("last", 4, 50_000)
        wait_until("the last batch at both sites", at_sites(last), 30, [a, b], sites)
        log("hub-b restarted as standby; last batch delivered through hub-a")

        # Every product exactly once at every site, no gap, nothing missing.
        last_seq = int(pg.query("SELECT last_seq FROM channels WHERE channel = 'obs'")[0][0])
        wait_until("the journal to record every session's end", lambda: int(pg.query(
            "SELECT count(*) FROM sessions WHERE ended IS NULL")[0][0]) == 0, 20, [a, b])
        for d in sites:
            db = sqlite3.connect("file:%s?mode=ro" % os.path.join(d.temp, "journal.db"), uri=True)
            rows = db.execute("SELECT relpath, count(*) FROM deliveries GROUP BY relpath").fetchall()
            db.close()
            counts = dict(rows)
            check(set(counts) == set(everything),
                  "%s's delivery journal: %d paths, expected %d" % (d.id, len(counts),
                                                                   len(everything)))
            twice = {p: n for p, n in counts.items() if n != 1}
            check(not twice, "%s delivered twice: %s" % (d.id, twice))

            def no_gap(d=d):
                with open(d.status) as f:
                    seqs = [q for q in json.load(f).get("sequences", [])
                            if q["channel"] == CHANNEL]
                return (len(seqs) == 1 and seqs[0]["missing_sessions"] == 0
                        and seqs[0]["last_seq_completed"] == last_seq)
            wait_until("%s's sequence numbers complete up to %d" % (d.id, last_seq), no_gap, 10,
                       (), [d])
        ctl = os.path.join(bin_dir, "tools", "mcdistctl", "mcdistctl")
        for s in SITES:
            r = subprocess.run([ctl, "--socket", os.path.join(base, "hub-a.sock"), "missing",
                                "--site", s, "--since", "1h", "--json"],
                               capture_output=True, text=True)
            check(r.returncode == 0 and json.loads(r.stdout)["rows"] == [],
                  "mcdistctl missing --site %s: %s %s" % (s, r.stdout[:500], r.stderr[:500]))
        # Offline, straight from the shared journal.
        r = subprocess.run([ctl, "--socket", os.path.join(base, "none.sock"), "--journal",
                            pg.uri(), "missing", "--site", "site-a", "--since", "1h", "--json"],
                           capture_output=True, text=True)
        check(r.returncode == 0 and json.loads(r.stdout)["rows"] == [],
              "mcdistctl on the journal URI: %s %s" % (r.stdout[:500], r.stderr[:500]))
        r = subprocess.run([ctl, "--socket", os.path.join(base, "hub-b.sock"), "status", "--json"],
                           capture_output=True, text=True)
        st = json.loads(r.stdout)
        hub_names = sorted(h["hub"] for h in st["cluster"]["hubs"])
        holder = [lz["holder"] for lz in st["cluster"]["leases"] if lz["channel"] == CHANNEL]
        check(hub_names == ["hub-a", "hub-b"] and holder == ["hub-a"],
              "mcdistctl status at the standby: hubs %s, holder %s" % (hub_names, holder))
        r = subprocess.run([ctl, "--socket", os.path.join(base, "hub-b.sock"), "status"],
                           capture_output=True, text=True)
        check("hub-a" in r.stdout and "standby" in r.stdout, "mcdistctl status table:\n" + r.stdout)
        log("%d products at both sites exactly once, sequence numbers 1-%d without a gap, "
            "nothing missing (%.0f s)" % (len(everything), last_seq, time.time() - started))
        print("PASS")
        return 0
    finally:
        for h in hubs.values():
            if h.proc is not None:
                h.stop()
        for d in sites:
            d.stop()
        for p in proxies.values():
            p.close()
        if pg is not None:
            pg.stop()
        if os.environ.get("MCDIST_KEEP") is None:
            subprocess.run(["rm", "-rf", base])


if __name__ == "__main__":
    sys.exit(main())
