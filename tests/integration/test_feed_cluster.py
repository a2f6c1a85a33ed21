#!/usr/bin/env python3
"""Redundant hubs: two real mcdist-feed sharing one real PostgreSQL journal (started here with
initdb and pg_ctl, as the postgres user when run as root), one shared spool and retained
directory and one shared key, feeding two real mcdistd sites. Every host is a network namespace
of its own: the hubs and the sites on a LAN bridge (the sessions' multicast, the sites' NAKs and
registrations), the hubs and the database server on a second bridge. Cutting a hub from the
database detaches its port from that bridge: its packets to the server vanish, as when an uplink
fails, while its LAN still reaches the sites.

1. Hub A starts first and sends the channel; hub B is standby (status, /metrics, mcdistctl).
2. kill -9 of A mid-batch: B takes over when the lease lapses and sends the interrupted batch
   again under its own number; the sites hold what they had completed.
3. A restarted: standby, it takes nothing from B.
4. B cut from the database mid-batch while it still reaches the sites: B stops sending before A
   is granted the lease (the two hubs' log lines in that order), says so in its log and status;
   A takes over and sends the batch again. B's link is restored: B stays standby.
5. B (the lost hub) restarted: standby; a last batch goes out through A.

After all of it: every product at both sites exactly once, in the destination tree and in the
site's delivery journal (a repeated session held, not delivered twice), the sites' action run
once per product, the sites' sequence numbers for the channel complete up to the journal's last
number (no gap), `mcdistctl missing` empty for both sites, and `mcdistctl status` against the
standby hub shows both hubs and the lease holder. Needs root (namespaces); says SKIPPED with the
reason when it cannot run.

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
from mcdist_testlib import SKIP, TomlDaemon, check, fail, free_group, log  # noqa: E402
from netns_lib import netns_exec, netns_skip_reason, sh  # noqa: E402
from pg_cluster_lib import PgServer, pg_skip_reason  # noqa: E402

SITES = ["site-a", "site-b"]
HUBS = ["hub-a", "hub-b"]
CHANNEL = "obs"
SUFFIX = "%d" % os.getpid()
SW = "mccl-sw-" + SUFFIX
DB = "mccl-db-" + SUFFIX
NS = {h: "mccl-%s-%s" % (h, SUFFIX) for h in HUBS + SITES}
# Host h on the LAN is 10.78.1.h, on the database link 10.78.2.h. The test itself (the root
# namespace) is on the LAN too, to read the hubs' status pages.
LAN = {"hub-a": 1, "hub-b": 2, "site-a": 11, "site-b": 12}
DB_LINK = {"hub-a": 1, "hub-b": 2}
DB_ADDR = "10.78.2.100"
ROOT_ADDR = "10.78.1.254"
ROOT_LINK = "mccl" + SUFFIX[-8:]


def lan(host):
    return "10.78.1.%d" % LAN[host]


def build_topology():
    """The switch namespace with bridges brL (LAN) and brD (database link), one namespace per
    hub, site and the database server, each with a veth pair into the switch."""
    for ns in [SW, DB] + list(NS.values()):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    for br in ("brL", "brD"):
        sh("ip", "-n", SW, "link", "add", br, "type", "bridge")
        # No IGMP snooping: the bridge floods each group to every port, as a plain switch.
        sh("ip", "-n", SW, "link", "set", br, "type", "bridge", "mcast_snooping", "0")
        sh("ip", "-n", SW, "link", "set", br, "up")

    def plug(ns, dev, port, br, addr):
        sh("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", port, "netns", SW)
        sh("ip", "-n", SW, "link", "set", port, "master", br)
        sh("ip", "-n", SW, "link", "set", port, "up")
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", dev)

    for host, n in LAN.items():
        plug(NS[host], "ethL", "pL%d" % n, "brL", lan(host))
    for host, n in DB_LINK.items():
        plug(NS[host], "ethD", "pD%d" % n, "brD", "10.78.2.%d" % n)
    plug(DB, "ethD", "pD100", "brD", DB_ADDR)
    sh("ip", "link", "add", ROOT_LINK, "type", "veth", "peer", "name", "pL254", "netns", SW)
    sh("ip", "-n", SW, "link", "set", "pL254", "master", "brL")
    sh("ip", "-n", SW, "link", "set", "pL254", "up")
    sh("ip", "link", "set", ROOT_LINK, "up")
    sh("ip", "addr", "add", ROOT_ADDR + "/24", "dev", ROOT_LINK)


def teardown():
    subprocess.run(["ip", "link", "del", ROOT_LINK], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    for ns in [SW, DB] + list(NS.values()):
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def cut_from_database(host):
    """Detaches the host's port from the database bridge: what it sends there is dropped, nothing
    answers, its connections stay open (no reset, no carrier change)."""
    sh("ip", "-n", SW, "link", "set", "pD%d" % DB_LINK[host], "nomaster")


def restore_database_link(host):
    sh("ip", "-n", SW, "link", "set", "pD%d" % DB_LINK[host], "master", "brD")


class Hub:
    def __init__(self, bin_dir, base, name, config):
        self.name = name
        self.args = netns_exec(NS[name]) + [os.path.join(bin_dir, "feed", "mcdist-feed"),
                                            "--config", config,
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


SITE_CONFIG = """id = "%(id)s"
interface = "ethL"
temp = "%(temp)s"
journal = "%(temp)s/journal.db"
status_file = "%(status)s"
status_interval = "1s"
session_timeout = "10s"
trusted_senders = ["%(key)s"]

[[channel]]
name = "%(channel)s"
group = "%(group)s"
dest = "%(dest)s"

[[action]]
name = "record"
match = "."
exec = ["/bin/sh", "-c", "echo \\"$1\\" >> %(log)s", "record", "{relpath}"]
"""


def start_site(bin_dir, base, rid, group, trusted_key):
    """mcdistd in the site's namespace from a TOML file: the channel, the hubs' key, and an exec
    action that appends each delivered product's relative path to the daemon's `action_log`."""
    action_log = os.path.join(base, rid + "-actions.log")
    open(action_log, "w").close()
    d = TomlDaemon(bin_dir, base, rid, lambda d: SITE_CONFIG % {
        "id": rid, "temp": d.temp, "status": d.status, "key": trusted_key, "channel": CHANNEL,
        "group": group, "dest": d.dest, "log": action_log}, prefix=netns_exec(NS[rid]))
    d.action_log = action_log
    return d


def http_json(hub, path):
    with urllib.request.urlopen("http://%s:8080%s" % (lan(hub), path), timeout=5) as r:
        body = r.read().decode()
    return json.loads(body) if path == "/status" else body


def role(hub):
    try:
        st = http_json(hub, "/status")
    except Exception:  # noqa: BLE001 - not up yet
        return None
    for c in st.get("channels", []):
        if c.get("name") == CHANNEL:
            return c.get("role")
    return None


def database_state(hub):
    """The hub's view of the shared journal ("ok" while its lease rounds reach it), or None."""
    try:
        return http_json(hub, "/status").get("cluster", {}).get("database")
    except Exception:  # noqa: BLE001 - not answering
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
    reason = netns_skip_reason("mccl-probe-" + SUFFIX) or pg_skip_reason()
    if reason:
        print("SKIPPED: " + reason)
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-cluster-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(4242)
    pg = None
    hubs = {}
    sites = []
    started = time.time()
    try:
        build_topology()
        pg = PgServer(base, listen=DB_ADDR, netns=netns_exec(DB))
        spool = os.path.join(base, "spool")
        retained = os.path.join(base, "retained")
        os.makedirs(spool)
        key = os.path.join(base, "hub.key")
        subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), key],
                       check=True, stdout=subprocess.DEVNULL)
        group = free_group()
        for name in HUBS:
            config = os.path.join(base, name + ".toml")
            with open(config, "w") as f:
                f.write("""
interface = "%(lan)s"
key = "%(key)s"
rate = "40M"
journal = "%(uri)s"
retention = "1h"
retained = "%(retained)s"
control_socket = "%(sock)s"
http = "%(lan)s:8080"

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
""" % {"key": key, "uri": pg.uri(), "retained": retained,
                    "sock": os.path.join(base, name + ".sock"), "lan": lan(name), "name": name,
                    "channel": CHANNEL, "group": group, "spool": spool})
            hubs[name] = Hub(bin_dir, base, name, config)
        sites = [start_site(bin_dir, base, s, group, key + ".pub") for s in SITES]
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
        wait_until("hub-a active", lambda: role("hub-a") == "active", 20, [a])
        b.start()
        wait_until("hub-b standby", lambda: role("hub-b") == "standby", 20, [b])
        metrics = http_json("hub-b", "/metrics")
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
        wait_until("hub-b active", lambda: role("hub-b") == "active", 20, [b])
        took_over = b.log_time("sends it now", after=killed_at - 1)
        check(took_over is not None, "hub-b did not log its takeover")
        log("hub-b took over %.1f s after the kill" % (took_over - killed_at))
        wait_until("the kill batch at both sites", at_sites(kill_batch), 40, [b], sites)
        check("sent again" in b.log_text(), "hub-b did not send the interrupted batch again")

        # 3. A restarted: standby.
        a.start()
        wait_until("hub-a standby", lambda: role("hub-a") == "standby", 20, [a])
        log("hub-a restarted as standby")

        # 4. B cut from the database mid-batch.
        cut_batch = batch("cut", 8, 2_000_000)
        wait_until("the cut batch in flight", lambda: sending("cut"), 20, [b])
        time.sleep(0.5)
        cut_from_database("hub-b")
        cut_at = time.time()
        log("hub-b cut from the database")
        wait_until("hub-b standby", lambda: role("hub-b") == "standby", 20, [b])
        wait_until("hub-a active", lambda: role("hub-a") == "active", 20, [a])
        stopped = b.log_time("stops sending it", after=cut_at - 1)
        taken = a.log_time("sends it now", after=cut_at - 1)
        check(stopped is not None and taken is not None,
              "missing log lines: hub-b stop %s, hub-a takeover %s" % (stopped, taken))
        check(stopped < taken, "hub-a took the channel (%.3f) before hub-b stopped (%.3f)" % (
            taken, stopped))
        st = http_json("hub-b", "/status")
        ch = [c for c in st["channels"] if c["name"] == CHANNEL][0]
        check(ch["lost_reason"] != "", "hub-b's status gives no reason for standby")
        log("hub-b stopped %.2f s before hub-a took over (%s)" % (taken - stopped,
                                                                 ch["lost_reason"][:80]))
        wait_until("the cut batch at both sites", at_sites(cut_batch), 40, [a], sites)
        restore_database_link("hub-b")
        wait_until("hub-b back on the database",
                   lambda: database_state("hub-b") == "ok", 40, [b])
        check(role("hub-b") == "standby", "hub-b took the channel back with its link restored")

        # 5. The lost hub restarted.
        b.kill9()
        b.start()
        wait_until("hub-b standby again", lambda: role("hub-b") == "standby", 20, [b])
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

            def actions_ran(d=d):
                with open(d.action_log) as f:
                    return f.read().split()
            wait_until("%s's action for every product" % d.id,
                       lambda: len(actions_ran()) >= len(everything), 20, (), [d])
            ran = actions_ran()
            twice = {p: ran.count(p) for p in everything if ran.count(p) != 1}
            check(not twice and len(ran) == len(everything),
                  "%s's action ran %d times for %d products; not once: %s" % (
                      d.id, len(ran), len(everything), twice))

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
        # Offline, straight from the shared journal, from a hub's host (the database link).
        offline = [ctl, "--socket", os.path.join(base, "none.sock"), "--journal", pg.uri(),
                   "missing", "--site", "site-a", "--since", "1h", "--json"]
        r = subprocess.run(netns_exec(NS["hub-a"]) + offline, capture_output=True, text=True)
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
        log("%d products at both sites exactly once (and their action), sequence numbers 1-%d "
            "without a gap, nothing missing (%.0f s)" % (len(everything), last_seq,
                                                        time.time() - started))
        print("PASS")
        return 0
    finally:
        for h in hubs.values():
            if h.proc is not None:
                h.stop()
        for d in sites:
            d.stop()
        if pg is not None:
            pg.stop()
        teardown()
        if os.environ.get("MCDIST_KEEP") is None:
            subprocess.run(["rm", "-rf", base])


if __name__ == "__main__":
    sys.exit(main())
