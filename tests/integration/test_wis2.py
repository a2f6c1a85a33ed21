#!/usr/bin/env python3
"""Integration: WIS2 notifications from mcdistd. The test starts a real mosquitto broker on a
free loopback port and a real mosquitto_sub on '#', then mcdistd with a wis2 action on its
channel, then a real mcdist-send session of a few files. One WIS2 Notification Message (WMO WNM
1.0) per stored file must arrive on the configured topic: valid JSON with the required keys,
the right data_id (the raw path), canonical link href (the path percent-encoded: one file's
name has a space, '%', '#', '?' and non-ASCII letters) and length, and integrity value equal to
the base64 of the SHA-256 of the delivered file. The daemon's status JSON must count them as published. A
config with a bad wis2 topic must be refused by --check-config (exit 2, naming the setting).

The daemon reaches the broker through a TCP relay the test controls, down when the daemon
starts: the daemon must connect once it comes up. Later, with the relay down
(connections cut, port closed) a second session of 7 files is stored while the action's
max_queued is 6: the status must show the daemon disconnected, 6 queued and 1 dropped, and no
notification may reach the broker. With the relay back up the daemon must reconnect by itself
and deliver the 6 queued notifications.

SKIPPED only if mosquitto or mosquitto_sub is missing or the broker cannot run here.

usage: test_wis2.py BUILD_DIR"""

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
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from status_common import free_tcp_port, get, http_port, make_products, metric_value  # noqa: E402

TOPIC = "origin/a/wis2/xx-centre/data/core/weather/surface-based-observations/synop"
BASE_URL = "https://data.example.org/wis2/"
PREFIX = "xx-centre/data/core/weather/surface-based-observations/synop/"
NAMES = ["obs/a.bufr4", "obs/b.bufr4", "grib/c.grib2", "meta/d.json", "e.bin",
         "obs/x y%20#?Ünï.bufr4"]
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def find_mosquitto():
    for p in (shutil.which("mosquitto"), "/usr/sbin/mosquitto"):
        if p and os.access(p, os.X_OK):
            return p
    return None


class Subscriber:
    """mosquitto_sub -t '#' -v; collects (topic, payload) lines on a reader thread."""

    def __init__(self, port):
        self.proc = subprocess.Popen(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-t", "#",
                                      "-v", "-q", "1"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.lines = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            topic, _, payload = line.partition(" ")
            with self.lock:
                self.lines.append((topic, payload))

    def messages(self, topic):
        with self.lock:
            return [p for t, p in self.lines if t == topic]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


class Relay:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target that the test can take down (listener
    closed, connections cut) and bring back on the same port."""

    def __init__(self, target):
        self.target = target
        self.port = free_tcp_port()
        self.conns = []
        self.lock = threading.Lock()
        self.listener = None  # down until up()

    def up(self):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(8)
        self.listener = ls
        threading.Thread(target=self.accept, args=(ls,), daemon=True).start()

    def accept(self, ls):
        while True:
            try:
                a, _ = ls.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                a.close()
                continue
            b.settimeout(None)
            with self.lock:
                self.conns += [a, b]
            threading.Thread(target=self.pump, args=(a, b), daemon=True).start()
            threading.Thread(target=self.pump, args=(b, a), daemon=True).start()

    @staticmethod
    def pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def down(self):
        # shutdown wakes the accept() blocked on the listener (close alone does not, on Linux).
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


def wait_status(daemon, pred, what, timeout=15):
    """Polls the daemon's status file (rewritten every second) until pred(wis2 entry)."""
    deadline = time.time() + timeout
    w = None
    while time.time() < deadline:
        st = daemon.read_status()
        if st and st.get("wis2"):
            w = st["wis2"][0]
            if pred(w):
                return w
        time.sleep(0.1)
    fail("status wis2 never showed %s; last %s" % (what, w))


def canonical_href(base_url, path):
    """The href a WNM must carry: base_url as given, then the path percent-encoded (RFC 3986
    section 3.3: each segment keeps unreserved, sub-delims, ':' and '@'; UTF-8, upper-case
    hex), by Python's own encoder."""
    return base_url + urllib.parse.quote(path, safe="/!$&'()*+,;=:@")


def check_message(text, daemon, base, names):
    """Checks one WNM against the delivered file; returns its path in the set."""
    try:
        m = json.loads(text)
    except ValueError:
        fail("not JSON: %r" % text)
    for key in ("id", "conformsTo", "type", "geometry", "properties", "links"):
        check(key in m, "message lacks %s: %s" % (key, text))
    check(UUID4.match(m["id"]), "id %r is not a UUID v4" % m["id"])
    check(m["conformsTo"] == ["http://wis.wmo.int/spec/wnm/1/conf/core"], "conformsTo %r" % m["conformsTo"])
    check(m["type"] == "Feature" and m["geometry"] is None, "type/geometry: %s" % text)
    p = m["properties"]
    for key in ("data_id", "pubtime", "integrity", "datetime"):
        check(key in p, "properties lack %s: %s" % (key, text))
    check(RFC3339.match(p["pubtime"]), "pubtime %r" % p["pubtime"])
    check(RFC3339.match(p["datetime"]), "datetime %r" % p["datetime"])
    check(p["data_id"].startswith(PREFIX), "data_id %r" % p["data_id"])
    rel = p["data_id"][len(PREFIX):]
    check(rel in names, "data_id %r names no sent file" % p["data_id"])
    delivered = os.path.join(daemon.dest, rel)
    check(os.path.isfile(delivered), "%s was announced but is not in dest" % rel)
    with open(delivered, "rb") as f:
        data = f.read()
    with open(os.path.join(base, rel), "rb") as f:
        check(f.read() == data, "%s delivered differs from the source" % rel)
    want = base64.b64encode(hashlib.sha256(data).digest()).decode()
    check(p["integrity"] == {"method": "sha256", "value": want},
          "%s integrity %r, expected sha256 %s" % (rel, p["integrity"], want))
    check(len(m["links"]) == 1, "links: %s" % m["links"])
    link = m["links"][0]
    check(link.get("rel") == "canonical", "link rel %r" % link.get("rel"))
    check(link.get("href") == canonical_href(BASE_URL, rel),
          "href %r, expected %r" % (link.get("href"), canonical_href(BASE_URL, rel)))
    check(link.get("length") == len(data), "%s length %r, file has %d" % (rel, link.get("length"), len(data)))
    check(isinstance(link.get("type"), str) and "/" in link["type"], "link type %r" % link.get("type"))
    return rel, m


def send_products(bin_dir, base, dirname, names, rng, group, daemon):
    src = os.path.join(base, dirname)
    make_products(src, names, rng, size=5000)
    # Sizes differ per file so a length taken from the wrong file shows.
    for i, n in enumerate(names):
        with open(os.path.join(src, n), "ab") as f:
            f.write(rng.randbytes(i * 777))
    code, summary, out = run_sender(bin_dir, [src], group, [daemon.id], rate="100M",
                                    extra=["--fallback", "off"])
    check(code == 0, "mcdist-send exited %d:\n%s" % (code, out))
    return [dirname + "/" + n for n in names]


def check_config_refuses(bin_dir, base, group):
    bad = os.path.join(base, "bad.toml")
    with open(bad, "w") as f:
        f.write('id = "x"\ninterface = "127.0.0.1"\ndest = "%s"\ntemp = "%s"\n'
                'allow_unsigned = true\n[[channel]]\n'
                'group = "%s"\n[[channel.action]]\ntype = "wis2"\nbroker = "mqtt://127.0.0.1:1"\n'
                'topic = "weather/synop"\nbase_url = "https://x/"\n' % (base, base, group))
    p = subprocess.run([os.path.join(bin_dir, "receiver", "mcdistd"), "--check-config", bad],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
    out = p.stdout.decode()
    check(p.returncode == 2, "--check-config of a bad wis2 topic exited %d: %s" % (p.returncode, out))
    check("channel[0].action[0]" in out and "topic" in out and "origin/a/wis2/" in out,
          "the error must name the action and the topic rule: %s" % out)
    log("--check-config refuses a non-WIS2 topic: " + out.strip().splitlines()[-1])


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    broker_bin = find_mosquitto()
    if not broker_bin or not shutil.which("mosquitto_sub") or not shutil.which("mosquitto_pub"):
        print("SKIPPED: mosquitto / mosquitto-clients are not installed (deploy/install-deps.sh)")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-wis2-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    broker = sub = daemon = relay = None
    try:
        group = free_group()
        check_config_refuses(bin_dir, base, group)

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

        # The subscription is live once a probe published after it comes back.
        sub = Subscriber(port)
        deadline = time.time() + 10
        while not sub.messages("probe/ready"):
            check(sub.proc.poll() is None, "mosquitto_sub exited: %s" % sub.lines)
            check(time.time() < deadline, "mosquitto_sub did not receive its probe")
            subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-t", "probe/ready",
                            "-m", "x"], timeout=5, check=True)
            time.sleep(0.1)

        relay = Relay(port)
        action = ('type = "wis2"\nbroker = "mqtt://127.0.0.1:%d"\ntopic = "%s"\nbase_url = "%s"\n'
                  'qos = 1\nmax_queued = %d' % (relay.port, TOPIC, BASE_URL, len(NAMES)))
        # The broker is unreachable when mcdistd starts: it must keep trying and get there.
        daemon = TomlDaemon(bin_dir, base, "site-wis2", lambda d: (
            'id = "site-wis2"\ninterface = "127.0.0.1"\ndest = "%s"\ntemp = "%s"\n'
            'status_file = "%s"\nstatus_interval = "1s"\nhttp = "127.0.0.1:0"\n'
            'allow_unsigned = true\n[[channel]]\nname = "synop"\ngroup = "%s"\n'
            '[[channel.action]]\n%s\n' % (d.dest, d.temp, d.status, group, action)))
        daemon.wait_for_log("WIS2 (channel synop): lost the broker mqtt://127.0.0.1:%d" % relay.port, 10)
        relay.up()
        daemon.wait_for_log("WIS2 (channel synop): connected to mqtt://127.0.0.1:%d" % relay.port, 15)
        log("connected once the broker became reachable after start")

        rng = random.Random(1313)
        sent = send_products(bin_dir, base, "products", NAMES, rng, group, daemon)
        deadline = time.time() + 15
        while len(sub.messages(TOPIC)) < len(sent) and time.time() < deadline:
            time.sleep(0.05)
        msgs = sub.messages(TOPIC)
        check(len(msgs) == len(sent), "%d notifications on %s, expected %d: %s"
              % (len(msgs), TOPIC, len(sent), sub.lines))
        others = [t for t, _ in sub.lines if t not in (TOPIC, "probe/ready")]
        check(not others, "messages on unexpected topics: %s" % others)
        seen = {}
        for text in msgs:
            rel, m = check_message(text, daemon, base, sent)
            check(rel not in seen, "two notifications for %s" % rel)
            seen[rel] = m
        check(len({m["id"] for m in seen.values()}) == len(sent), "ids are not unique")
        check(seen["products/obs/a.bufr4"]["links"][0]["type"] == "application/bufr", "bufr media type")
        log("%d WIS2 notifications, one per stored file, all checked" % len(seen))
        w = wait_status(daemon, lambda w: w["published"] == len(sent), "published %d" % len(sent))
        check(w["failed"] == 0 and w["dropped"] == 0 and w["queued"] == 0 and w["connected"]
              and w["topic"] == TOPIC, "status wis2 %s" % w)
        log("status wis2: %s" % w)

        # Broker unreachable: 7 files stored, max_queued 6 -> 6 wait, 1 dropped.
        relay.down()
        wait_status(daemon, lambda w: not w["connected"], "the broker lost")
        later = send_products(bin_dir, base, "later", ["f%d.bufr4" % i for i in range(len(NAMES) + 1)], rng, group, daemon)
        for rel in later:
            check(os.path.isfile(os.path.join(daemon.dest, rel)), "%s not stored" % rel)
        w = wait_status(daemon, lambda w: w["dropped"] == 1 and w["queued"] == len(NAMES),
                        "1 dropped and %d queued while the broker is away" % len(NAMES))
        check(w["published"] == len(sent) and not w["connected"], "status wis2 while down %s" % w)
        check(len(sub.messages(TOPIC)) == len(sent), "a notification went through a closed relay")
        log("broker away: %s" % w)
        relay.up()
        deadline = time.time() + 20  # libmosquitto's back-off is at most 10 s
        while len(sub.messages(TOPIC)) < len(sent) + len(NAMES) and time.time() < deadline:
            time.sleep(0.05)
        msgs = sub.messages(TOPIC)
        check(len(msgs) == len(sent) + len(NAMES), "after reconnecting: %d notifications, expected %d"
              % (len(msgs), len(sent) + len(NAMES)))
        late = set()
        for text in msgs[len(sent):]:
            rel, _ = check_message(text, daemon, base, later)
            late.add(rel)
        check(len(late) == len(NAMES), "the queued notifications name %s" % late)
        w = wait_status(daemon, lambda w: w["published"] == len(sent) + len(NAMES) and w["connected"],
                        "the queue delivered after reconnecting")
        check(w["queued"] == 0 and w["dropped"] == 1 and w["failed"] == 0, "status wis2 %s" % w)
        log("reconnected and delivered the queue: %s" % w)
        status, _, body = get(http_port(daemon), "/metrics")
        check(status == 200, "/metrics answered %d" % status)
        text = body.decode()
        labels = {"channel": "synop", "topic": TOPIC}
        for outcome, want in (("published", len(sent) + len(NAMES)), ("dropped", 1), ("failed", 0)):
            got = metric_value(text, "mcdist_receiver_wis2_notifications_total",
                               dict(labels, outcome=outcome))
            check(got == want, "/metrics wis2 %s = %s, expected %s" % (outcome, got, want))
        check(metric_value(text, "mcdist_receiver_wis2_queued", labels) == 0, "/metrics wis2 queued")
        check(metric_value(text, "mcdist_receiver_wis2_broker_connected", labels) == 1,
              "/metrics wis2 connected")
        if shutil.which("promtool"):
            p = subprocess.run(["promtool", "check", "metrics"], input=body, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=20)
            check(p.returncode == 0 and not p.stdout.strip(), "promtool: %s" % p.stdout.decode())
        log("/metrics carries the wis2 counters")
        check(daemon.stop() == 0, "mcdistd exited %s" % daemon.proc.returncode)
        daemon = None
        log("PASS")
        return 0
    finally:
        if daemon:
            daemon.stop()
        if sub:
            sub.stop()
        if relay and relay.listener:
            relay.down()
        if broker and broker.poll() is None:
            broker.terminate()
            broker.wait(5)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
