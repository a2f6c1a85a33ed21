#!/usr/bin/env python3
"""Integration: a one-way site catches up over HTTPS what it missed (README "Catch-up over
HTTP(S)", docs/design-notes.md "Catch-up over HTTP").

A real mcdist-feed with a signed channel of silent sessions (silent_passes = 2, heartbeat 2 s)
serves its retained products over HTTPS (products_http with a certificate of a test CA made
here with openssl). Two silent sites (silent = true) trust the hub's key:

- "oneway" has catch_up_url = the hub's product server and catch_up_ca = the test CA;
- "victim" has catch_up_url = a man in the middle: a Python HTTPS server with a certificate of
  the same CA that answers every index request with a well-formed index for the right channel,
  number and nonce, signed (openssl pkeyutl, Ed25519) by a key of its own;
- "tampered" has catch_up_url = a proxy with a certificate of the same CA that forwards every
  request to the hub, but alters one byte of the signed body of the first index it passes and
  one byte of the first product it passes.

All three take the first batch from the multicast, are stopped while four batches and a newer
version of one product go out, and are started again; no product is dropped after that.
Asserted:

- every product "oneway" missed arrives byte-identical, its delivery journal row names the
  hub's key as sender_key, the exec action ran exactly once for it, its status shows
  datagrams_sent == 0 and, per channel stream, missing_sessions back to 0; the catch-up time
  after the restart is printed;
- "victim" refuses every index (catch_up.refused.untrusted_key >= 2, the reason in its log),
  stores none of the missed products, never asks the man in the middle for a product, and
  still counts the numbers missing;
- "tampered" refuses the altered index (catch_up.refused.bad_signature == 1) and the altered
  product (catch_up.refused.sha256_mismatch == 1), never stores the altered bytes, and holds
  every missed product byte-identical once the proxy passes them unchanged;
- the product server answers /data/NAME with the newest version, HEAD with Content-Length, 404
  for an unknown number, and refuses a plain-HTTP client.

usage: test_catch_up_http.py BUILD_DIR"""

import hashlib
import http.client
import http.server
import os
import random
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, ConfigDaemon, check, free_group, log,  # noqa: E402
                            loopback_multicast_works, make_ca, pb_bytes, pb_uint, read_varint,
                            sha256_file, silent_feed_config, stop_all)
from test_feed import Feed, drop, query, wait_until  # noqa: E402


def run(args, **kw):
    subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Forger:
    """Ed25519 signatures by a key of the man in the middle, with the openssl command."""

    def __init__(self, d):
        self.key = os.path.join(d, "mitm.ed25519.pem")
        run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", self.key])
        der = subprocess.run(["openssl", "pkey", "-in", self.key, "-pubout", "-outform", "DER"],
                             check=True, stdout=subprocess.PIPE).stdout
        self.public = der[-32:]
        self.dir = d

    def sign(self, message):
        msg = os.path.join(self.dir, "msg.bin")
        with open(msg, "wb") as f:
            f.write(message)
        return subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", self.key, "-rawin",
                               "-in", msg], check=True, stdout=subprocess.PIPE).stdout


def mitm_server(port, crt, key, forger, payload, channel):
    """An HTTPS server that answers every index with one signed by `forger`."""
    seen = {"index": 0, "products": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            path, _, query_s = self.path.partition("?")
            if path.startswith("/catch-up/"):
                seen["index"] += 1
                seq = int(path.rsplit("/", 1)[1])
                nonce = bytes.fromhex(query_s.split("=", 1)[1])
                product = (pb_bytes(1, b"obs/evil.bufr") + pb_uint(2, len(payload)) +
                           pb_uint(3, time.time_ns()) + pb_uint(4, 0o644) +
                           pb_bytes(5, hashlib.sha256(payload).digest()) +
                           pb_bytes(6, b"products/1/obs/evil.bufr"))
                body = (pb_bytes(1, channel.encode()) + pb_uint(2, seq) + pb_bytes(3, nonce) +
                        pb_uint(4, int(time.time() * 1000)) + pb_bytes(5, product))
                sig = forger.sign(b"mcdist v2 catch-up index" + body)
                out = pb_bytes(1, body) + pb_bytes(2, forger.public) + pb_bytes(3, sig)
            elif path.startswith("/products/"):
                seen["products"] += 1
                out = payload
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, seen


def tamper_proxy(port, crt, key, upstream, ca):
    """An HTTPS server that forwards each GET to `upstream` (the hub) and alters one byte of the
    signed body of the first index and of the first product it passes; later answers pass
    unchanged."""
    seen = {"index": 0, "products": 0}
    lock = threading.Lock()
    up_ctx = ssl.create_default_context(cafile=ca)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            try:
                with urllib.request.urlopen(upstream + self.path.lstrip("/"), context=up_ctx,
                                            timeout=30) as r:
                    status, out = r.status, r.read()
            except urllib.error.HTTPError as e:
                status, out = e.code, e.read()
            with lock:
                if status == 200 and self.path.startswith("/catch-up/"):
                    seen["index"] += 1
                    if seen["index"] == 1:
                        # signed_catch_up_index: field 1 (body) first; a byte in its middle.
                        check(out[0] == 0x0A, "the hub's index does not start with its body")
                        length, at = read_varint(out, 1)
                        flip = at + length // 2
                        out = out[:flip] + bytes([out[flip] ^ 0x01]) + out[flip + 1:]
                elif status == 200 and self.path.startswith("/products/"):
                    seen["products"] += 1
                    if seen["products"] == 1 and out:
                        out = out[:-1] + bytes([out[-1] ^ 0x01])
            self.send_response(status)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, seen


def site_config(rid, root, group, hub_pub, url, ca, ingest):
    return ("id = \"%(rid)s\"\ninterface = \"127.0.0.1\"\ndest = \"%(root)s/dest\"\n"
            "temp = \"%(root)s/temp\"\nstatus_file = \"%(root)s/status.json\"\n"
            "status_interval = \"1s\"\nhttp = \"off\"\nsync = \"none\"\n"
            "trusted_senders = [\"%(hub_pub)s\"]\n"
            "[[channel]]\nname = \"obs\"\ngroup = \"%(group)s\"\nsilent = true\n"
            "catch_up_url = \"%(url)s\"\ncatch_up_ca = \"%(ca)s\"\n"
            "[[action]]\nname = \"ingest\"\nmatch = '^obs/'\n"
            "exec = [\"%(ingest)s\", \"{relpath}\", \"%(rid)s\"]\n"
            % locals())


def missing_sessions(d):
    st = d.read_status() or {}
    return sum(s.get("missing_sessions", 0) for s in st.get("sequences", []))


def refused(d, reason):
    """catch_up.refused[reason] in the site's status file (0 when absent)."""
    st = d.read_status() or {}
    return ((st.get("catch_up") or {}).get("refused") or {}).get(reason, 0)


def holds(d, products):
    """True when d's destination holds every product of {name: sha256 hex}."""
    return all(os.path.exists(os.path.join(d.dest, n)) and
               sha256_file(os.path.join(d.dest, n)) == h for n, h in products.items())


def check_journal(root, missed, older, hub_pub, rid):
    """Exactly one delivery row per missed product, of its newest version, signed by the hub;
    no row of the older version `older` (name, sha256)."""
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(root, "temp", "journal.db"), uri=True)
    rows = db.execute("SELECT relpath, sha256, sender_key FROM deliveries").fetchall()
    db.close()
    for name, h in missed.items():
        mine = [r for r in rows if r[0] == name and r[1] == h]
        check(len(mine) == 1, "%s: %s: %d journal rows of its newest version"
              % (rid, name, len(mine)))
        check(mine[0][2] == hub_pub, "%s: %s: sender_key %r, not the hub's key"
              % (rid, name, mine[0][2]))
    check(not any((r[0], r[1]) == older for r in rows),
          "%s: the older version of %s was delivered" % (rid, older[0]))


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-catchup-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(77)
    feed = None
    sites = []
    servers = []
    try:
        ca, crt, tls_key = make_ca(base)
        hub_key = os.path.join(base, "hub.key")
        run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), hub_key])
        with open(hub_key + ".pub") as f:
            hub_pub = f.read().strip()
        spool = os.path.join(base, "spool")
        os.makedirs(os.path.join(spool, "obs"))
        journal = os.path.join(base, "journal.db")
        group = free_group()
        port, mitm_port, proxy_port = free_port(), free_port(), free_port()
        hub_url = "https://127.0.0.1:%d/" % port
        config = os.path.join(base, "feed.toml")
        with open(config, "w") as f:
            f.write(silent_feed_config(base, hub_key, group, spool, "100M", 32, "10%",
                                       journal=journal, products=(port, crt, tls_key)))
        ingest = os.path.join(base, "ingest.sh")
        with open(ingest, "w") as f:
            f.write("#!/bin/sh\necho \"$1\" >> \"$(dirname \"$0\")/ingest.$2\"\n")
        os.chmod(ingest, 0o755)
        forger = Forger(base)
        mitm, mitm_seen = mitm_server(mitm_port, crt, tls_key, forger, b"evil bytes\n", "obs")
        servers.append(mitm)
        proxy, proxy_seen = tamper_proxy(proxy_port, crt, tls_key, hub_url, ca)
        servers.append(proxy)
        roots = {}
        for rid, url in (("oneway", hub_url),
                         ("victim", "https://127.0.0.1:%d/" % mitm_port),
                         ("tampered", "https://127.0.0.1:%d/" % proxy_port)):
            root = os.path.join(base, rid)
            os.makedirs(os.path.join(root, "dest"))
            os.makedirs(os.path.join(root, "temp"))
            roots[rid] = root
            d = ConfigDaemon(bin_dir, root, site_config(rid, root, group, hub_pub, url, ca, ingest),
                             dict(os.environ), rid)
            d.dest = os.path.join(root, "dest")
            sites.append(d)
        oneway, victim, tampered = sites
        feed = Feed(bin_dir, base, config)
        feed.start()
        wait_until("the product server", lambda: "products on https://" in feed.log_text(), 15,
                   feed)

        # Every site hears the channel: its first batch by multicast (the stream starts there).
        first = rng.randbytes(5000)
        drop(spool, "obs/first.bufr", first)
        for d in sites:
            wait_until("%s: the first product" % d.id, lambda d=d: os.path.exists(
                os.path.join(d.dest, "obs/first.bufr")), 30, feed, sites)
        for d in sites:
            d.stop()

        # Four batches while the sites are down, then a newer version of one of them in a
        # fifth: only its newest version may arrive.
        missed = {}
        for i in range(4):
            data = rng.randbytes(30_000 + 7000 * i)
            name = "obs/m%d.bufr" % i
            missed[name] = hashlib.sha256(data).hexdigest()
            drop(spool, name, data)
            wait_until("batch %d sent" % i, lambda name=name: query(
                journal, "SELECT count(*) FROM products WHERE name = ? AND state = 'sent'",
                (name,))[0][0] == 1, 30, feed)
        older = ("obs/m0.bufr", missed["obs/m0.bufr"])
        v2 = rng.randbytes(12_345)
        drop(spool, "obs/m0.bufr", v2)
        missed["obs/m0.bufr"] = hashlib.sha256(v2).hexdigest()
        wait_until("the new version sent", lambda: query(
            journal, "SELECT count(*) FROM products WHERE name = 'obs/m0.bufr' AND state = 'sent'")
            [0][0] == 2, 30, feed)

        # Back, with no new product: the heartbeats name the numbers they missed.
        for d in sites:
            d.start()
        t0 = time.time()
        wait_until("every missed product at the one-way site", lambda: holds(oneway, missed), 40,
                   feed, sites)
        took = time.time() - t0
        wait_until("no number missing at the one-way site", lambda: (
            (oneway.read_status() or {}).get("sequences") and missing_sessions(oneway) == 0),
            20, feed, sites)
        log("one-way site caught up %d products of 5 missed sessions over HTTPS in %.1f s after "
            "its restart (heartbeat 2 s)" % (len(missed), took))
        # Behind the tampering proxy: a refused index (retried after 2 s), a refused product
        # (retried after 4 s), then the hub's answers unchanged.
        wait_until("every missed product behind the tampering proxy",
                   lambda: holds(tampered, missed), 60, feed, sites)
        wait_until("no number missing behind the tampering proxy", lambda: (
            (tampered.read_status() or {}).get("sequences") and missing_sessions(tampered) == 0),
            20, feed, sites)
        wait_until("the victim refused two indexes", lambda: refused(victim, "untrusted_key") >= 2,
                   20, feed, sites)

        # The product server by hand: /data/NAME, HEAD, 404, no plain HTTP.
        ctx = ssl.create_default_context(cafile=ca)
        with urllib.request.urlopen(hub_url + "data/obs/m0.bufr", context=ctx, timeout=10) as r:
            check(r.read() == v2, "/data/obs/m0.bufr is not the newest version")
        req = urllib.request.Request(hub_url + "data/obs/m1.bufr", method="HEAD")
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            check(int(r.headers["Content-Length"]) == 37_000, "HEAD: Content-Length %s"
                  % r.headers["Content-Length"])
            check(r.read() == b"", "HEAD carried a body")
        try:
            urllib.request.urlopen(hub_url + "catch-up/obs/999?nonce=00", context=ctx, timeout=10)
            check(False, "an unknown number was answered")
        except urllib.error.HTTPError as e:
            check(e.code == 404, "unknown number: HTTP %d" % e.code)
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/data/obs/m1.bufr" % port, timeout=5)
            check(False, "the product server answered plain HTTP")
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
            pass
        check(feed.alive(), "mcdist-feed died")
        for d in sites:
            d.stop()

        # The one-way site: journal, actions, no transmission, nothing missing.
        st = oneway.read_status()
        log("oneway: catch_up %s; datagrams_sent %d; sequences %s"
            % (st.get("catch_up"), st["datagrams_sent"], st.get("sequences")))
        check(st["datagrams_sent"] == 0, "the one-way site sent %d datagrams"
              % st["datagrams_sent"])
        check(missing_sessions(oneway) == 0, "the one-way site still misses numbers")
        check(not (st.get("catch_up") or {}).get("refused"),
              "the one-way site refused %s" % st["catch_up"].get("refused"))
        check_journal(roots["oneway"], missed, older, hub_pub, "oneway")
        with open(os.path.join(base, "ingest.oneway")) as f:
            ran = f.read().split()
        for name in missed:
            check(ran.count(name) == 1, "the action ran %d times for %s" % (ran.count(name), name))

        # Behind the tampering proxy: each alteration refused once, with its reason, and every
        # product delivered once, as the hub signed it.
        tst = tampered.read_status()
        log("tampered: catch_up %s; the proxy passed %s" % (tst.get("catch_up"), proxy_seen))
        check(refused(tampered, "bad_signature") == 1,
              "bad_signature refusals: %d" % refused(tampered, "bad_signature"))
        check(refused(tampered, "sha256_mismatch") == 1,
              "sha256_mismatch refusals: %d" % refused(tampered, "sha256_mismatch"))
        check(tst["datagrams_sent"] == 0, "the site behind the proxy sent datagrams")
        check_journal(roots["tampered"], missed, older, hub_pub, "tampered")

        # The victim: refused, nothing stored, nothing downloaded from the man in the middle.
        vst = victim.read_status()
        log("victim: catch_up %s; man in the middle saw %s" % (vst.get("catch_up"), mitm_seen))
        check("untrusted_key" in victim.log_text(), "the victim's log does not name the reason")
        check(mitm_seen["index"] >= 2 and mitm_seen["products"] == 0,
              "the man in the middle saw %s" % mitm_seen)
        for name in list(missed) + ["obs/evil.bufr"]:
            check(not os.path.exists(os.path.join(victim.dest, name)),
                  "the victim stored %s" % name)
        check(missing_sessions(victim) > 0, "the victim counts nothing missing")
        check(vst["datagrams_sent"] == 0, "the victim sent datagrams")
    finally:
        for srv in servers:
            srv.shutdown()
        stop_all(base, feed, sites)
    log("PASS: catch-up over HTTPS of a one-way site; a forged index, an altered index and an "
        "altered product refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
