#!/usr/bin/env python3
"""Integration: a real Prometheus server (Debian `prometheus`) scrapes mcdistd's /metrics every
second. Before any session it must read mcdist_receiver_files_stored_total = 0 for the channel;
after a real mcdist-send session of N files it must read N back through its query API
(/api/v1/query), with up = 1 and the bytes stored equal to the bytes sent. `promtool check
metrics` (shipped with prometheus) must find nothing to complain about in the exposition.

usage: test_prometheus.py BUILD_DIR"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from status_common import free_tcp_port, get, http_port, make_products  # noqa: E402

FILES = 7
SIZE = 20000


def query(prom_port, expr):
    """The instant vector of `expr` as a list of (labels, value)."""
    url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (prom_port, urllib.parse.quote(expr))
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            data = json.load(r)
    except (OSError, ValueError):
        return []
    if data.get("status") != "success":
        return []
    return [(e["metric"], float(e["value"][1])) for e in data["data"]["result"]]


def wait_value(prom_port, expr, want, timeout, prom):
    """Polls the query until it returns exactly one sample equal to `want`."""
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        check(prom.poll() is None, "prometheus exited (%s)" % prom.returncode)
        got = query(prom_port, expr)
        if len(got) == 1 and got[0][1] == want:
            return got[0][0]
        time.sleep(0.2)
    fail("prometheus: %s is %s, expected %s, within %s s" % (expr, got, want, timeout))


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    if not shutil.which("prometheus"):
        print("SKIPPED: prometheus is not installed (deploy/install-deps.sh installs it)")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-prom-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    daemon = None
    prom = None
    try:
        group = free_group()
        daemon = Daemon(bin_dir, base, "site-prom", group, ["--http", "127.0.0.1:0"])
        port = http_port(daemon)
        status, headers, body = get(port, "/metrics")
        check(status == 200, "/metrics answered %d" % status)
        check(headers.get("Content-Type") == "text/plain; version=0.0.4; charset=utf-8",
              "content type %r" % headers.get("Content-Type"))
        if shutil.which("promtool"):
            p = subprocess.run(["promtool", "check", "metrics"], input=body, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=20)
            check(p.returncode == 0 and not p.stdout.strip(),
                  "promtool check metrics: %s" % p.stdout.decode())
            log("promtool check metrics: clean")

        prom_port = free_tcp_port()
        cfg = os.path.join(base, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: mcdistd\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % port)
        plog = open(os.path.join(base, "prometheus.log"), "wb")
        prom = subprocess.Popen(["prometheus", "--config.file=" + cfg,
                                 "--storage.tsdb.path=" + os.path.join(base, "tsdb"),
                                 "--web.listen-address=127.0.0.1:%d" % prom_port, "--log.level=warn"],
                                stdout=plog, stderr=subprocess.STDOUT)
        ch = {"channel": group}
        labels = wait_value(prom_port, 'mcdist_receiver_files_stored_total{job="mcdistd"}', 0, 20, prom)
        check(labels.get("channel") == group, "channel label %r" % labels)
        wait_value(prom_port, 'up{job="mcdistd"}', 1, 5, prom)
        log("prometheus scrapes the daemon; files stored 0 before the session")

        rng = random.Random(5)
        src = os.path.join(base, "src")
        make_products(src, ["grib/field_%02d.grib2" % i for i in range(FILES)], rng, SIZE)
        code, summary, out = run_sender(bin_dir, [os.path.join(src, "grib")], group, [daemon.id],
                                        rate="100M", extra=["--fallback", "auto"])
        check(code == 0, "mcdist-send exited %d:\n%s" % (code, out))
        check(summary["receivers"][0]["files"] == FILES, "summary: %s" % summary["receivers"])

        labels = wait_value(prom_port, 'mcdist_receiver_files_stored_total{job="mcdistd"}', FILES, 20, prom)
        check(labels.get("channel") == ch["channel"], "channel label %r" % labels)
        wait_value(prom_port, 'mcdist_receiver_stored_bytes_total{job="mcdistd"}', FILES * SIZE, 10, prom)
        wait_value(prom_port, 'sum(mcdist_receiver_files_failed_total{job="mcdistd"})', 0, 5, prom)
        wait_value(prom_port, 'mcdist_receiver_sessions_completed_total{job="mcdistd"}', 1, 5, prom)
        # The default group commit (adaptive) made the files durable in at least one batch,
        # by one syncfs or by each file's own sync.
        got = query(prom_port, 'sum(mcdist_receiver_commit_batches_total{job="mcdistd"})')
        check(len(got) == 1 and 1 <= got[0][1] <= FILES, "commit batches %s" % got)
        got = query(prom_port, 'mcdist_receiver_last_product_timestamp_seconds{job="mcdistd"}')
        check(len(got) == 1 and abs(got[0][1] - time.time()) < 120, "last product time %s" % got)
        log("prometheus reads files stored %d, bytes %d" % (FILES, FILES * SIZE))
        check(daemon.alive(), "mcdistd died")
        check(daemon.stop() == 0, "mcdistd exit status %s" % daemon.proc.returncode)
        daemon = None
        log("PASS")
        return 0
    finally:
        if prom:
            prom.terminate()
            try:
                prom.wait(10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        if daemon:
            daemon.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
