"""Helpers of the status-port tests (test_status_page, test_prometheus, test_status_http):
find a daemon's HTTP port in its log, GET a path, build a small product set."""

import os
import re
import socket
import time
import urllib.request

from mcdist_testlib import check, fail


def http_port(daemon, timeout=5):
    """The port of the daemon's status server, from its 'status page on http://...' log line."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(r"status page on http://127\.0\.0\.1:(\d+)/", daemon.log_text())
        if m:
            return int(m.group(1))
        time.sleep(0.02)
    fail("%s: no 'status page on' line in its log:\n%s" % (daemon.id, daemon.log_text()))


def get(port, path, timeout=5):
    """(status, headers, body bytes) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def metric_value(text, name, labels=None):
    """The value of one sample in Prometheus text, or None."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if labels is None or all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def free_tcp_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_products(src, names, rng, size=3000):
    """Writes one file per name (relative path) under src, `size` random bytes each."""
    for n in names:
        p = os.path.join(src, n)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(rng.randbytes(size))
    check(len(names) == len(set(names)), "product names must differ")
