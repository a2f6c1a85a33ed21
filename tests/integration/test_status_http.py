#!/usr/bin/env python3
"""Integration: hostile clients against mcdistd's status HTTP server, while a real session is
delivered. The server must answer what it refuses with the right status (431 header too large,
413 body too large, 400 garbage, 405 POST, 404 unknown path), close a keep-alive connection
after 100 requests, keep serving /metrics while more idle connections than its limit (32) are
held open (the oldest idle one is evicted), survive connection floods and resets, and the
daemon must deliver every file of the session meanwhile and exit cleanly. Configuration: a bad
--http exits 2, an explicit address already in use exits 3 naming it, --http off serves nothing.

usage: test_status_http.py BUILD_DIR"""

import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from status_common import get, http_port, make_products, metric_value  # noqa: E402

FILES = 20


def exchange(port, data, timeout=5):
    """Sends raw bytes, returns everything read until the server closes (or timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-http-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    daemon = None
    held = []
    try:
        group = free_group()
        daemon = Daemon(bin_dir, base, "site-http", group, ["--http", "127.0.0.1:0"])
        port = http_port(daemon)

        mcdistd = os.path.join(bin_dir, "receiver", "mcdistd")
        common = ["--id", "other", "--group", free_group(), "--interface", "127.0.0.1",
                  "--dest", os.path.join(base, "o", "dest"), "--temp", os.path.join(base, "o", "temp"),
                  "--allow-unsigned"]
        p = subprocess.run([mcdistd] + common + ["--http", "nowhere:80"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=10)
        check(p.returncode == 2 and b"--http" in p.stdout, "bad --http: %d %r" % (p.returncode, p.stdout))
        p = subprocess.run([mcdistd] + common + ["--http", "127.0.0.1:%d" % port], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=10)
        check(p.returncode == 3 and b"cannot listen for HTTP on 127.0.0.1:%d" % port in p.stdout,
              "address in use: %d %r" % (p.returncode, p.stdout))
        other = Daemon(bin_dir, base, "other", free_group(), ["--http", "off"])
        check("status page on" not in other.log_text(), "--http off still serves")
        check(other.stop() == 0, "--http off daemon exit status")
        log("configuration: bad --http exits 2, address in use exits 3, off serves nothing")

        r = exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n")
        check(r.startswith(b"HTTP/1.1 431"), "oversized header answered %r" % r[:40])
        r = exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"b" * 5000)
        check(r.startswith(b"HTTP/1.1 413"), "oversized body answered %r" % r[:40])
        r = exchange(port, b"\x00\x01\x02 garbage \xff\r\n\r\n")
        check(r.startswith(b"HTTP/1.1 400"), "garbage answered %r" % r[:40])
        r = exchange(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
        check(r.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in r, "POST answered %r" % r[:80])
        r = exchange(port, b"GET /etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        check(r.startswith(b"HTTP/1.1 404"), "unknown path answered %r" % r[:40])
        r = exchange(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        check(r.startswith(b"HTTP/1.1 200") and r.endswith(b"\r\n\r\n"), "HEAD answered with a body: %r" % r[-40:])
        # 150 pipelined requests on one connection: 100 answered, then the server closes.
        r = exchange(port, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n" * 150, timeout=10)
        check(r.count(b"HTTP/1.1 404") == 100, "pipelined: %d answers" % r.count(b"HTTP/1.1 404"))
        log("refusals: 431, 413, 400, 405, 404, HEAD, 100 requests per connection")

        # Floods while a real session is delivered.
        rng = random.Random(3)
        src = os.path.join(base, "src")
        make_products(src, ["obs/bulletin_%03d.txt" % i for i in range(FILES)], rng, 50000)
        result = {}

        def send():
            result["r"] = run_sender(bin_dir, [os.path.join(src, "obs")], group, [daemon.id],
                                     rate="50M", extra=["--fallback", "auto"])

        t = threading.Thread(target=send)
        t.start()
        for _ in range(300):  # connect and reset at once
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.connect(("127.0.0.1", port))
            s.close()
        for _ in range(100):  # half a request, then reset
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHo")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        # More idle and trickling connections than the server's limit, held open.
        for i in range(40):
            s = socket.create_connection(("127.0.0.1", port))
            if i % 2:
                s.sendall(b"GET / HTTP/1.1\r\n")
            held.append(s)
        # The real client queues behind them (accept order): the server must evict to take it.
        t0 = time.time()
        status, _, body = get(port, "/metrics", timeout=5)
        check(status == 200, "/metrics with 40 idle connections held: %d" % status)
        log("/metrics answered in %.3f s with 40 idle connections held" % (time.time() - t0))
        t.join(120)
        check(not t.is_alive(), "mcdist-send did not finish")
        code, summary, out = result["r"]
        check(code == 0, "mcdist-send exited %d:\n%s" % (code, out))
        check(summary["receivers"][0]["files"] == FILES, "summary: %s" % summary["receivers"])
        for i in range(FILES):
            p = "obs/bulletin_%03d.txt" % i
            check(sha256_file(os.path.join(daemon.dest, p)) == sha256_file(os.path.join(src, p)), "%s differs" % p)
        status, _, body = get(port, "/metrics")
        stored = metric_value(body.decode(), "mcdist_receiver_files_stored_total", {"channel": group})
        check(stored == FILES, "files stored metric %s" % stored)
        for s in held:
            s.close()
        held = []
        check(daemon.alive(), "mcdistd died")
        check(daemon.stop() == 0, "mcdistd exit status %s" % daemon.proc.returncode)
        daemon = None
        log("PASS")
        return 0
    finally:
        for s in held:
            s.close()
        if daemon:
            daemon.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
