#!/usr/bin/env python3
"""Integration: mcdist-feed's [[wis2_input]] and MQTT over TLS.

The test makes a CA, a server certificate (127.0.0.1) and a client certificate with openssl,
starts a real mosquitto that takes MQTT over TLS only, with a client certificate and a user name
and password (no anonymous access), a local HTTPS server (Python's http.server over ssl, the
same CA) serving the products, a real mcdistd site and the real mcdist-feed with

- a [[wis2_input]] "gb" subscribed over mqtts:// (ca_file, client_cert, client_key, username,
  password_file) to a wildcard filter feeding channel "obs", downloads verified against the
  test CA;
- a [[wis2_input]] "unverified" to the same broker without ca_file: the system's CAs do not
  know the test CA, so it must never connect (libmosquitto logs the failed verification);
- a [wis2] publisher over mqtts:// announcing channel "obs"'s products on an origin/ topic.

1,000 notifications are published over TLS with mosquitto_pub: good ones (some served only
after a 503: retried; three whose download hangs until the test lets it go), then duplicates by
id (the same message again, as from a second Global Broker) and by data_id (a new id, the same
data_id and pubtime, as from a second Global Cache), ones with a wrong integrity value (the
product is served, its digest differs), ones pointing at missing data (HTTP 404), ones with an
integrity value that is not a digest, and ones that are not JSON.

Checks: while the three downloads hang, every other good product reaches the site (nothing
blocks on a download) and the feed's status port answers; then every good product is at the
site with its bytes, journaled once as a product, the WIS2 table says done; every bad one is
absent from spool, journal and site, failed or refused with its reason, and counted in /status
and /metrics with exactly the numbers sent; duplicates are counted by kind; retries are counted;
exactly one notification per product is published over mqtts by the [wis2] hook.

SKIPPED only if mosquitto, mosquitto-clients or openssl are missing or the broker cannot run here.

usage: test_feed_wis2_input.py BUILD_DIR [--count N]"""

import base64
import hashlib
import http.server
import json
import os
import random
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import SKIP, Daemon, check, free_group, log, loopback_multicast_works, stop_all  # noqa: E402
from status_common import free_tcp_port, get, metric_value  # noqa: E402
from test_feed import Feed, query, wait_until  # noqa: E402
from test_wis2 import find_mosquitto  # noqa: E402

IN_TOPIC = "cache/a/wis2/xx-centre/data/core/weather/surface-based-observations/synop"
IN_FILTER = "cache/a/wis2/+/data/core/#"
OUT_TOPIC = "origin/a/wis2/xx-hub/data/core/weather/surface-based-observations/synop"
DATA_PREFIX = "xx-centre/data/core/weather/surface-based-observations/synop/"
NAME_PREFIX = "wis2/"


def run(args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def make_pki(d):
    """A test CA, a server certificate for 127.0.0.1 and a client certificate, ECDSA P-256."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run(["openssl", "req", "-x509"] + ec + ["-keyout", d + "/ca.key", "-out", d + "/ca.pem",
                                             "-days", "2", "-subj", "/CN=mcdist test CA"])
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                "extendedKeyUsage=serverAuth\n"),
                     ("client", "extendedKeyUsage=clientAuth\n")):
        with open(d + "/" + who + ".ext", "w") as f:
            f.write(ext)
        run(["openssl", "req"] + ec + ["-keyout", d + "/" + who + ".key", "-out", d + "/" + who + ".csr",
                                       "-subj", "/CN=mcdist test " + who])
        run(["openssl", "x509", "-req", "-in", d + "/" + who + ".csr", "-CA", d + "/ca.pem", "-CAkey",
             d + "/ca.key", "-CAcreateserial", "-days", "2", "-out", d + "/" + who + ".pem",
             "-extfile", d + "/" + who + ".ext"])


def start_tls_broker(broker_bin, base, pki, max_queued=10000):
    """A test PKI in `pki` (make_pki) and a mosquitto that takes MQTT over TLS only, on a free
    127.0.0.1 port, with a client certificate and the user "hub" (password in BASE/hub.password;
    no anonymous access). Returns (process, port, the mosquitto_pub/sub TLS arguments, the
    password file, None), or (process, port, args, file, why) when the broker exited at start
    (its log in `why`). Fails the test if it does not listen within 10 s."""
    os.makedirs(pki, exist_ok=True)
    make_pki(pki)
    pw_file = os.path.join(base, "hub.password")
    with open(pw_file, "w") as f:
        f.write("s3cret-hub\n")
    run(["mosquitto_passwd", "-b", "-c", os.path.join(base, "passwd"), "hub", "s3cret-hub"])
    port = free_tcp_port()
    conf = os.path.join(base, "mosquitto.conf")
    with open(conf, "w") as f:
        f.write("user root\nper_listener_settings false\nallow_anonymous false\n"
                "password_file %s/passwd\npersistence false\nmax_queued_messages %d\n"
                "listener %d 127.0.0.1\ncafile %s/ca.pem\ncertfile %s/server.pem\n"
                "keyfile %s/server.key\nrequire_certificate true\n"
                % (base, max_queued, port, pki, pki, pki))
    broker_log = os.path.join(base, "mosquitto.log")
    with open(broker_log, "wb") as bl:
        broker = subprocess.Popen([broker_bin, "-c", conf], stdout=bl, stderr=subprocess.STDOUT)
    tls_args = ["-h", "127.0.0.1", "-p", str(port), "--cafile", pki + "/ca.pem",
                "--cert", pki + "/client.pem", "--key", pki + "/client.key",
                "-u", "hub", "-P", "s3cret-hub"]
    deadline = time.time() + 10
    while True:
        if broker.poll() is not None:
            with open(broker_log, "rb") as f:
                return (broker, port, tls_args, pw_file,
                        "mosquitto cannot run here: " + f.read().decode("utf-8", "replace"))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return broker, port, tls_args, pw_file, None
        except OSError:
            check(time.time() < deadline, "mosquitto did not listen on port %d" % port)
            time.sleep(0.05)


class Products(http.server.ThreadingHTTPServer):
    """HTTPS server of the products: /data/NAME, /flaky/NAME (503 at the first request of each
    name, then the data), /hang/NAME (the data once `release` is set). Counts requests."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, pki, files):
        super().__init__(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki + "/server.pem", pki + "/server.key")
        self.socket = ctx.wrap_socket(self.socket, server_side=True)
        self.files = files
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.flaky_seen = set()
        self.hanging = 0
        self.requests = 0


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        s = self.server
        kind, _, name = self.path.lstrip("/").partition("/")
        with s.lock:
            s.requests += 1
        if kind == "flaky":
            with s.lock:
                first = name not in s.flaky_seen
                s.flaky_seen.add(name)
            if first:
                self.send_error(503)
                return
        if kind == "hang":
            with s.lock:
                s.hanging += 1
            s.release.wait()
        data = s.files.get(name)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/bufr")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def wnm(name, href, data, integrity_of=None, nid=None):
    digest = hashlib.sha512(data if integrity_of is None else integrity_of).digest()
    return {
        "id": nid or str(uuid.uuid4()),
        "conformsTo": ["http://wis.wmo.int/spec/wnm/1/conf/core"],
        "type": "Feature",
        "geometry": None,
        "properties": {
            "data_id": DATA_PREFIX + name,
            "pubtime": "2026-12-01T12:00:00Z",
            "datetime": "2026-12-01T12:00:00Z",
            "integrity": {"method": "sha512", "value": base64.b64encode(digest).decode()},
        },
        "links": [{"href": href, "rel": "canonical", "type": "application/bufr",
                   "length": len(data)}],
    }


class TlsSubscriber:
    """mosquitto_sub over TLS on `topic`; collects payloads on a reader thread."""

    def __init__(self, tls_args, topic):
        self.proc = subprocess.Popen(["mosquitto_sub"] + tls_args + ["-t", topic, "-q", "1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines = []
        self.lock = threading.Lock()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for raw in self.proc.stdout:
            with self.lock:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def messages(self):
        with self.lock:
            return list(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


def main():
    bin_dir = sys.argv[1]
    total = int(sys.argv[sys.argv.index("--count") + 1]) if "--count" in sys.argv else 1000
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    broker_bin = find_mosquitto()
    tools = ["mosquitto_sub", "mosquitto_pub", "mosquitto_passwd", "openssl"]
    if not broker_bin or not all(shutil.which(t) for t in tools):
        print("SKIPPED: mosquitto, mosquitto-clients or openssl are not installed "
              "(deploy/install-deps.sh)")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-wis2in-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(44)
    broker = server = feed = site = out_sub = None
    try:
        pki = os.path.join(base, "pki")
        broker, port, tls_args, pw_file, why = start_tls_broker(broker_bin, base, pki)
        if why:
            print("SKIPPED: " + why)
            return SKIP
        out_sub = TlsSubscriber(tls_args, "origin/#")

        # The products and the notifications.
        n_hang, n_flaky = 3, 5
        n_dup_id, n_dup_data = total // 10, total // 20
        n_bad_integrity, n_missing, n_bad_value, n_not_json = total // 16, total // 16, total // 80, total // 100
        n_good = total - (n_hang + n_flaky + n_dup_id + n_dup_data + n_bad_integrity + n_missing +
                          n_bad_value + n_not_json)
        check(n_good > 10, "--count too small")
        files = {}
        good, first, bad_integrity, missing = {}, [], [], []

        def product(name):
            files[name] = rng.randbytes(rng.randint(100, 20000))
            return files[name]

        server = Products(pki, files)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = "https://127.0.0.1:%d/" % server.server_address[1]
        for i in range(n_good + n_flaky + n_hang):
            kind = "data" if i < n_good else "flaky" if i < n_good + n_flaky else "hang"
            name = "%s/p%04d.bufr" % (kind, i)
            good[name] = product(name)
            first.append(wnm(name, url + kind + "/" + name, good[name]))
        for i in range(n_bad_integrity):
            name = "bad/i%04d.bufr" % i
            bad_integrity.append(name)
            data = product(name)
            first.append(wnm(name, url + "data/" + name, data, integrity_of=data + b"x"))
        for i in range(n_missing):
            name = "gone/m%04d.bufr" % i
            missing.append(name)
            first.append(wnm(name, url + "data/" + name, b"never served"))
        for i in range(n_bad_value):
            m = wnm("junk/v%04d.bufr" % i, url + "data/none", b"x")
            m["properties"]["integrity"]["value"] = "AAAA"
            first.append(m)
        rng.shuffle(first)
        goods = [m for m in first if m["properties"]["data_id"][len(DATA_PREFIX):] in good]
        dups = [dict(m) for m in rng.sample(goods, n_dup_id)]
        for m in rng.sample(goods, n_dup_data):
            d = json.loads(json.dumps(m))
            d["id"] = str(uuid.uuid4())
            dups.append(d)
        lines = [json.dumps(m, separators=(",", ":")) for m in first]
        lines += ["{\"id\": \"truncated-%d\", " % i for i in range(n_not_json)]
        lines += [json.dumps(m, separators=(",", ":")) for m in rng.sample(dups, len(dups))]
        check(len(lines) == total, "%d notifications made, %d meant" % (len(lines), total))

        spool = os.path.join(base, "spool", "obs")
        os.makedirs(spool)
        journal = os.path.join(base, "journal.db")
        group = free_group()
        broker_tls = ('ca_file = "%s/ca.pem"\nclient_cert = "%s/client.pem"\n'
                      'client_key = "%s/client.key"\nusername = "hub"\npassword_file = "%s"\n'
                      % (pki, pki, pki, pw_file))
        feed_conf = os.path.join(base, "feed.toml")
        with open(feed_conf, "w") as f:
            # Products are retained, so a session the site fails (a slow sanitizer build) is
            # caught up after the channel's heartbeat instead of lost.
            f.write('interface = "127.0.0.1"\nrate = "200M"\njournal = "%s"\nretention = "1h"\n'
                    'retained = "%s"\n'
                    'http = "127.0.0.1:0"\n'
                    '[wis2]\nbroker = "mqtts://127.0.0.1:%d"\n%stopic = "%s"\n'
                    'base_url = "https://hub.example.org/products/"\nchannels = ["obs"]\n'
                    '[[channel]]\nname = "obs"\ngroup = "%s"\nspool = ["%s"]\nbatch_window = "200ms"\n'
                    'register_window = "300ms"\nafter = "delete"\n'
                    '[[wis2_input]]\nname = "gb"\nbroker = "mqtts://127.0.0.1:%d"\n%s'
                    'client_id = "mcdist-test-hub"\ntopics = ["%s"]\nchannel = "obs"\n'
                    'download_ca_file = "%s/ca.pem"\nmax_bytes = "64K"\nretry_delay = "200ms"\n'
                    'retries = 3\nname_prefix = "%s"\n'
                    '[[wis2_input]]\nname = "unverified"\nbroker = "mqtts://127.0.0.1:%d"\n'
                    'client_cert = "%s/client.pem"\nclient_key = "%s/client.key"\n'
                    'topics = ["nothing/#"]\nchannel = "obs"\n'
                    % (journal, os.path.join(base, "retained"), port, broker_tls, OUT_TOPIC,
                       group, spool, port, broker_tls, IN_FILTER, pki, NAME_PREFIX, port, pki,
                       pki))
        check(subprocess.run([os.path.join(bin_dir, "feed", "mcdist-feed"), "--config", feed_conf,
                              "--check-config"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT).returncode == 0, "--check-config refused")
        site = Daemon(bin_dir, base, "site-w", group, extra=["--http", "off"])
        feed = Feed(bin_dir, base, feed_conf)
        feed.start()
        m = wait_until("the feed's status port", lambda: re.search(
            r"status page on http://127\.0\.0\.1:(\d+)/", feed.log_text()), 10, feed)
        http = int(m.group(1))

        def status():
            return json.loads(get(http, "/status")[2])

        def inputs():
            return {i["name"]: i for i in status().get("wis2_input", [])}

        wait_until("the input's broker connection over TLS",
                   lambda: inputs()["gb"]["connected"], 20, feed)
        wait_until("the publisher's broker connection over TLS",
                   lambda: status().get("wis2", {}).get("connected"), 20, feed)
        wait_until("libmosquitto's failed verification for the input without ca_file",
                   lambda: re.search(r"WIS2 input unverified: broker .*certificate verify failed",
                                     feed.log_text()), 20, feed)
        check(not inputs()["unverified"]["connected"], "connected without verifying the broker")
        log("inputs connected over TLS (client certificate, password file); an unverifiable "
            "broker refused")

        t_start = time.time()
        run(["mosquitto_pub"] + tls_args + ["-t", IN_TOPIC, "-q", "1", "-l"],
            input="\n".join(lines).encode() + b"\n", timeout=120)

        def at_site(name):
            p = os.path.join(site.dest, NAME_PREFIX + DATA_PREFIX + name)
            try:
                with open(p, "rb") as f:
                    return f.read() == good[name]
            except OSError:
                return False

        not_hung = [n for n in good if not n.startswith("hang/")]
        wait_until("%d products at the site while 3 downloads hang" % len(not_hung),
                   lambda: all(at_site(n) for n in not_hung), 240, feed, [site])
        t_ingested = time.time()
        wait_until("the 3 hanging downloads at the server", lambda: server.hanging == n_hang, 30, feed)
        wait_until("the feed to count %d delivered and 3 downloading" % len(not_hung),
                   lambda: (lambda s: s["downloading"] == n_hang and
                            s["delivered"] == len(not_hung))(inputs()["gb"]), 30, feed)
        check(not any(at_site(n) for n in good if n.startswith("hang/")),
              "a hanging product is at the site")
        log("%d products delivered while %d downloads hang; the status port answers"
            % (len(not_hung), n_hang))
        server.release.set()
        wait_until("the released products at the site", lambda: all(at_site(n) for n in good), 60,
                   feed, [site])

        want_refused = {"integrity": n_bad_integrity, "http_404": n_missing,
                        "bad_integrity": n_bad_value, "bad_json": n_not_json}
        wait_until("every notification taken, the refusals and duplicates counted",
                   lambda: (lambda s: s["received"] == total and s["refused"] == want_refused and
                            s["duplicates"] == {"id": n_dup_id, "data_id": n_dup_data})(inputs()["gb"]),
                   60, feed)
        s = inputs()["gb"]
        check(s["received"] == total, "received %s of %d" % (s["received"], total))
        check(s["delivered"] == len(good), "delivered %s, %d meant" % (s["delivered"], len(good)))
        check(s["accepted"] == len(good) + n_bad_integrity + n_missing, "accepted %s" % s["accepted"])
        check(s["duplicates"] == {"id": n_dup_id, "data_id": n_dup_data}, "duplicates %s" % s["duplicates"])
        check(s["retries"] == n_flaky, "retries %s, %d flaky" % (s["retries"], n_flaky))
        check(s["downloading"] == 0 and s["waiting"] == 0, "downloads left: %s" % s)
        log("refused with their reasons: %s; duplicates %s; %d retries"
            % (s["refused"], s["duplicates"], s["retries"]))

        # The journal: every good product once, no bad one; the WIS2 table's states.
        rows = query(journal, "SELECT name, count(*) FROM products WHERE channel = 'obs' GROUP BY name")
        names = {NAME_PREFIX + DATA_PREFIX + n for n in good}
        check({r[0] for r in rows} == names, "journaled names differ: %d vs %d" % (len(rows), len(names)))
        check(all(r[1] == 1 for r in rows), "a product journaled twice: %s" % [r for r in rows if r[1] != 1])
        states = dict(query(journal, "SELECT state, count(*) FROM wis2_notifications GROUP BY state"))
        check(states == {"done": len(good), "failed": n_bad_integrity + n_missing}, "states %s" % states)
        reasons = query(journal, "SELECT data_id, reason FROM wis2_notifications WHERE state = 'failed'")
        for data_id, reason in reasons:
            name = data_id[len(DATA_PREFIX):]
            want = "integrity:" if name in bad_integrity else "http_404:"
            check(reason.startswith(want) and (name in bad_integrity or name in missing),
                  "%s failed with %r" % (name, reason))
        for name in bad_integrity + missing:
            check(not os.path.exists(os.path.join(spool, NAME_PREFIX + DATA_PREFIX + name)),
                  "%s is in the spool" % name)
            check(not os.path.exists(os.path.join(site.dest, NAME_PREFIX + DATA_PREFIX + name)),
                  "%s reached the site" % name)
        site_files = []
        for root, _, fs in os.walk(site.dest):
            site_files += [os.path.relpath(os.path.join(root, f), site.dest) for f in fs]
        check(sorted(site_files) == sorted(names), "the site holds %d files, %d meant"
              % (len(site_files), len(names)))
        check(os.listdir(os.path.join(spool, ".wis2-gb")) == [], "temp files left in .wis2-gb")

        code, _, body = get(http, "/metrics")
        metrics = body.decode()
        check(code == 200, "/metrics: %s %s" % (code, metrics[-500:]))
        for reason, n in want_refused.items():
            v = metric_value(metrics, "mcdist_feed_wis2_input_refused_total",
                             {"input": "gb", "reason": reason})
            check(v == n, "refused_total{reason=%s} = %s, %d meant; /metrics:\n%s" % (
                reason, v, n, "\n".join(l for l in metrics.splitlines() if "wis2_input" in l)))
        check(metric_value(metrics, "mcdist_feed_wis2_input_products_total", {"input": "gb"}) ==
              len(good), "products_total")
        check(metric_value(metrics, "mcdist_feed_wis2_input_duplicates_total",
                           {"input": "gb", "key": "id"}) == n_dup_id, "duplicates_total{key=id}")
        check(metric_value(metrics, "mcdist_feed_wis2_input_broker_connected",
                           {"input": "unverified"}) == 0, "the unverified input connected")
        log("journal, spool, site and /metrics agree: %d products once each, %d refused"
            % (len(good), sum(want_refused.values())))

        # Publishing over mqtts: one notification per product of channel "obs".
        wait_until("%d notifications published over TLS" % len(good),
                   lambda: len(out_sub.messages()) >= len(good), 60, feed)
        wait_until("the publisher to count them",
                   lambda: status()["wis2"]["published"] == len(good), 20, feed)
        published = [json.loads(t)["properties"]["data_id"] for t in out_sub.messages()]
        want = sorted("xx-hub/data/core/weather/surface-based-observations/synop/" + n for n in names)
        check(sorted(published) == want, "published data_ids differ from the products")
        log("%d notifications published over mqtts, one per product" % len(published))
        log("ingest: %d notifications, %d products downloaded and at the site in %.1f s "
            "(not asserted)" % (total, len(not_hung), t_ingested - t_start))
        check(feed.stop() == 0, "mcdist-feed exit status %s" % feed.proc.returncode)
        feed = None
        log("PASS")
        return 0
    finally:
        if server:
            server.release.set()
            server.shutdown()
        if out_sub:
            out_sub.stop()
        if broker and broker.poll() is None:
            broker.terminate()
            broker.wait(5)
        stop_all(base, feed, [site])


if __name__ == "__main__":
    sys.exit(main())
