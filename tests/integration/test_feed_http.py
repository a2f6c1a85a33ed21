#!/usr/bin/env python3
"""Integration: mcdist-feed's status port, with a real mcdistd site.

The real hub daemon (http = "127.0.0.1:0") sends two channels' spool products to the real
mcdistd "site-a"; the "fields" channel is a closed group that also lists "site-ghost", which
never registers (it must show as missing, with a lag). Then:
- hostile HTTP (test_status_http's patterns): 431, 413, 400, 405, 404, HEAD without body, 100
  requests per keep-alive connection, /metrics answered while more idle connections than the
  limit are held; a bad `http` value exits 2, an explicit address in use exits 1 naming it;
- /metrics: mcdist_feed_products_sent_total per channel equals the products delivered,
  mcdist_feed_site_outcomes_total counts the ghost's failures, `promtool check metrics` is clean,
  and a real Prometheus server scraping the feed reads mcdist_feed_products_sent_total back
  through its query API;
- the page in a real headless Chromium: one row per channel with its sent count and queue,
  one row per site with its state (site-a completed, site-ghost missing with a lag), every
  product sent (one name with & < > escaped), the throughput chart with a bar.
With MCDIST_SCREENSHOT=FILE it writes a screenshot of the page (docs/feed-status-page.png).

usage: test_feed_http.py BUILD_DIR"""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import SKIP, Daemon, check, free_group, log, loopback_multicast_works  # noqa: E402
from status_common import free_tcp_port, get, http_port, metric_value  # noqa: E402
from test_feed import Feed, delivered, drop, wait_until  # noqa: E402
from test_prometheus import query as prom_query, wait_value  # noqa: E402
from test_status_http import exchange  # noqa: E402
from test_status_page import PageText, chromium  # noqa: E402

WARNINGS = ["w1.txt", "alerts/notes & <draft>.txt", "alerts/w3.txt"]
FIELDS = ["icon/t2m_006.grib2", "icon/t2m_012.grib2"]


def chromium_works(base):
    """None if headless Chromium renders a page here, else why not."""
    if not shutil.which("chromium"):
        return "chromium is not installed (deploy/install-deps.sh installs it)"
    probe = os.path.join(base, "probe.html")
    with open(probe, "w") as f:
        f.write("<html><body><p id=x>ok</p></body></html>")
    try:
        p = chromium(["--dump-dom", "file://" + probe], os.path.join(base, "profile0"))
    except subprocess.TimeoutExpired:
        return "headless chromium does not finish here"
    if b'id="x">ok' not in p.stdout:
        return "headless chromium cannot render here: %s" % p.stderr.decode()[-300:]
    return None


def hostile(port):
    r = exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n")
    check(r.startswith(b"HTTP/1.1 431"), "oversized header answered %r" % r[:40])
    r = exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"b" * 5000)
    check(r.startswith(b"HTTP/1.1 413"), "oversized body answered %r" % r[:40])
    r = exchange(port, b"\x00\x01\x02 garbage \xff\r\n\r\n")
    check(r.startswith(b"HTTP/1.1 400"), "garbage answered %r" % r[:40])
    r = exchange(port, b"POST /status HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
    check(r.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in r, "POST answered %r" % r[:80])
    r = exchange(port, b"GET /../journal.db HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    check(r.startswith(b"HTTP/1.1 404"), "unknown path answered %r" % r[:40])
    r = exchange(port, b"HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    check(r.startswith(b"HTTP/1.1 200") and r.endswith(b"\r\n\r\n"), "HEAD answered with a body: %r" % r[-40:])
    r = exchange(port, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n" * 150, timeout=10)
    check(r.count(b"HTTP/1.1 404") == 100, "pipelined: %d answers" % r.count(b"HTTP/1.1 404"))
    held = []
    try:
        for i in range(40):  # more idle and trickling connections than the limit (32)
            s = socket.create_connection(("127.0.0.1", port))
            if i % 2:
                s.sendall(b"GET / HTTP/1.1\r\n")
            held.append(s)
        status, _, body = get(port, "/metrics", timeout=5)
        check(status == 200 and b"mcdist_feed_products_sent_total" in body,
              "/metrics with 40 idle connections held: %d" % status)
    finally:
        for s in held:
            s.close()
    log("hostile HTTP: 431, 413, 400, 405, 404, HEAD, 100 per connection, idle flood evicted")


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-feedhttp-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    feed = None
    site = None
    prom = None
    try:
        no_chromium = chromium_works(base)
        warn_spool = os.path.join(base, "spool", "warnings")
        field_spool = os.path.join(base, "spool", "fields")
        os.makedirs(warn_spool)
        os.makedirs(field_spool)
        retained = os.path.join(base, "retained")
        journal = os.path.join(base, "journal.db")
        g_warn, g_field = free_group(), free_group()
        while g_field.split(":")[0] == g_warn.split(":")[0]:
            g_field = free_group()

        v = dict(journal=journal, retained=retained, g_warn=g_warn, g_field=g_field,
                 warn_spool=warn_spool, field_spool=field_spool)

        def config(path, http):
            with open(path, "w") as f:
                f.write("""
interface = "127.0.0.1"
rate = "50M"
journal = "%(journal)s"
retention = "1h"
retained = "%(retained)s"
http = "%(http)s"

[[channel]]
name = "warnings"
group = "%(g_warn)s"
spool = ["%(warn_spool)s"]
priority = 10
batch_window = "100ms"
register_window = "500ms"
after = "delete"

[[channel]]
name = "fields"
group = "%(g_field)s"
spool = ["%(field_spool)s"]
priority = 1
batch_window = "100ms"
receivers = ["site-a", "site-ghost"]
register_timeout = "1s"
after = "delete"
""" % dict(v, http=http))
            return path

        feed_bin = os.path.join(bin_dir, "feed", "mcdist-feed")
        bad = config(os.path.join(base, "bad.toml"), "nowhere:80")
        p = subprocess.run([feed_bin, "--config", bad, "--check-config"], capture_output=True, timeout=10)
        check(p.returncode == 2 and b"'http'" in p.stderr, "bad http: %d %r" % (p.returncode, p.stderr))

        site = Daemon(bin_dir, base, "site-a", g_warn, ["--group", g_field, "--http", "off"])
        feed = Feed(bin_dir, base, config(os.path.join(base, "feed.toml"), "127.0.0.1:0"))
        feed.id = "mcdist-feed"
        feed.start()
        port = http_port(feed)

        # An explicit address in use: exit 1, naming it.
        busy = config(os.path.join(base, "busy.toml"), "127.0.0.1:%d" % port)
        p = subprocess.run([feed_bin, "--config", busy], capture_output=True, timeout=20)
        out = p.stdout + p.stderr
        check(p.returncode == 1 and b"127.0.0.1:%d" % port in out and b"http" in out,
              "address in use: %d %r" % (p.returncode, out[-400:]))
        log("configuration: bad http exits 2, explicit address in use exits 1")

        status, headers, body = get(port, "/metrics")
        check(status == 200 and headers.get("Content-Type") == "text/plain; version=0.0.4; charset=utf-8",
              "/metrics: %d %r" % (status, headers.get("Content-Type")))
        check(metric_value(body.decode(), "mcdist_feed_products_sent_total", {"channel": "warnings"}) == 0,
              "products sent before any product")

        prom_port = None
        if shutil.which("prometheus"):
            prom_port = free_tcp_port()
            pcfg = os.path.join(base, "prometheus.yml")
            with open(pcfg, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                        "scrape_configs:\n  - job_name: feed\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:%d']\n" % port)
            plog = open(os.path.join(base, "prometheus.log"), "wb")
            prom = subprocess.Popen(["prometheus", "--config.file=" + pcfg,
                                     "--storage.tsdb.path=" + os.path.join(base, "tsdb"),
                                     "--web.listen-address=127.0.0.1:%d" % prom_port, "--log.level=warn"],
                                    stdout=plog, stderr=subprocess.STDOUT)
        else:
            log("part skipped: prometheus is not installed (deploy/install-deps.sh installs it)")

        hostile(port)

        digests = {}
        for spool, names in ((warn_spool, WARNINGS), (field_spool, FIELDS)):
            for i, n in enumerate(names):
                data = (n.encode() + b"\n") * (200 + 300 * i)
                digests[n] = hashlib.sha256(data).hexdigest()
                drop(spool, n, data)
        for n, d in digests.items():
            wait_until(n + " at site-a", delivered([site], n, d), 20, feed, [site])

        def status_doc():
            s, _, b = get(port, "/status")
            check(s == 200, "/status answered %d" % s)
            return json.loads(b)

        def all_sent():
            doc = status_doc()
            sent = {c["name"]: c.get("products_sent") for c in doc["channels"]}
            return sent == {"warnings": len(WARNINGS), "fields": len(FIELDS)}
        wait_until("/status counting every product sent", all_sent, 20, feed, [site])
        doc = status_doc()
        sites = {s["site"]: s for s in doc["sites"]}
        check(sorted(sites) == ["site-a", "site-ghost"], "sites in /status: %s" % sorted(sites))
        a, ghost = sites["site-a"], sites["site-ghost"]
        check(a["state"] == "completed" and a["lag"]["missing_products"] == 0 and a["last_seen"],
              "site-a in /status: %s" % a)
        check(ghost["state"] == "missing" and ghost["lag"]["missing_products"] == len(FIELDS)
              and ghost["last_seen"] is None, "site-ghost in /status: %s" % ghost)
        check(a["outcomes"]["stored"] == len(WARNINGS) + len(FIELDS), "site-a outcomes %s" % a["outcomes"])
        check(a["rtt_seconds"] is not None and a["rtt_seconds"] >= 0, "site-a RTT %s" % a["rtt_seconds"])
        for c in doc["channels"]:
            check(c["waiting_products"] == 0 and c["running"] is None, "channel %s not idle" % c["name"])
        log("/status: every product sent, site-a completed, site-ghost missing %d products"
            % ghost["lag"]["missing_products"])

        status, _, body = get(port, "/metrics")
        text = body.decode()
        for ch, names in (("warnings", WARNINGS), ("fields", FIELDS)):
            got = metric_value(text, "mcdist_feed_products_sent_total", {"channel": ch})
            check(got == len(names), "products sent on %s: %s" % (ch, got))
            got = metric_value(text, "mcdist_feed_bytes_sent_total", {"channel": ch})
            want = sum(os.path.getsize(os.path.join(site.dest, n)) for n in names)
            check(got == want, "bytes sent on %s: %s, delivered %d" % (ch, got, want))
            check(metric_value(text, "mcdist_feed_products_queued", {"channel": ch}) == 0, "queued on " + ch)
        # A listed site that does not register is journaled 'failed' ("did not register").
        got = sum(metric_value(text, "mcdist_feed_site_outcomes_total", {"site": "site-ghost", "outcome": o})
                  for o in ("failed", "missed"))
        check(got == len(FIELDS), "site-ghost failed + missed outcomes: %s" % got)
        check(metric_value(text, "mcdist_sender_site_rtt_seconds", {"site": "site-a"}) is not None, "no RTT")
        check(metric_value(text, "mcdist_feed_sessions_total", {"channel": "fields", "kind": "batch"}) >= 1,
              "fields batch sessions")
        # Every block of the fields went out at least once, as a first send.
        first = metric_value(text, "mcdist_feed_data_datagrams_total", {"channel": "fields", "kind": "first"})
        check(first is not None and first >= sum(-(-os.path.getsize(os.path.join(site.dest, n)) // 1400)
                                                   for n in FIELDS),
              "fields first-send datagrams: %s" % first)
        check(metric_value(text, "mcdist_feed_data_datagrams_total", {"channel": "fields", "kind": "repair"})
              is not None, "no repair datagram count")
        if shutil.which("promtool"):
            p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=20)
            check(p.returncode == 0 and not (p.stdout + p.stderr).strip(),
                  "promtool check metrics: %s" % (p.stdout + p.stderr).decode())
            log("promtool check metrics: clean")
        if prom:
            labels = wait_value(prom_port, 'mcdist_feed_products_sent_total{job="feed",channel="warnings"}',
                                len(WARNINGS), 20, prom)
            check(labels.get("channel") == "warnings", "labels %s" % labels)
            wait_value(prom_port, 'sum(mcdist_feed_products_sent_total{job="feed"})',
                       len(WARNINGS) + len(FIELDS), 10, prom)
            got = prom_query(prom_port, 'mcdist_feed_site_lag_products{job="feed",site="site-ghost"}')
            check(len(got) == 1 and got[0][1] == len(FIELDS), "ghost lag in prometheus: %s" % got)
            log("prometheus reads mcdist_feed_products_sent_total back: %d + %d" % (len(WARNINGS), len(FIELDS)))

        if no_chromium:
            log("part skipped: " + no_chromium)
        else:
            url = "http://127.0.0.1:%d/" % port
            p = chromium(["--dump-dom", url], os.path.join(base, "profile1"))
            dom = p.stdout.decode("utf-8", "replace")
            check(p.returncode == 0 and "<html" in dom,
                  "chromium --dump-dom %s exited %d: %s" % (url, p.returncode, p.stderr.decode()[-800:]))
            page = PageText()
            page.feed(dom)
            ids = page.by_id
            log("page: channels sent %r/%r, sites %r %r, lag %r, products %s, %d bars" % (
                ids.get("channel-0-sent"), ids.get("channel-1-sent"), ids.get("site-0-state"),
                ids.get("site-1-state"), ids.get("site-1-lag"), page.products, page.bars))
            check('data-channel="warnings"' in dom and 'data-channel="fields"' in dom, "channel rows")
            check(ids.get("channel-0-sent") == str(len(WARNINGS)), "warnings row sent %r" % ids.get("channel-0-sent"))
            check(ids.get("channel-1-sent") == str(len(FIELDS)), "fields row sent %r" % ids.get("channel-1-sent"))
            check(ids.get("channel-0-queued") == "0" and ids.get("channel-0-running") == "idle",
                  "warnings row queue %r, session %r" % (ids.get("channel-0-queued"), ids.get("channel-0-running")))
            check(ids.get("products-sent") == str(len(WARNINGS) + len(FIELDS)), "products sent card")
            check('data-site="site-a"' in dom and 'data-site="site-ghost"' in dom, "site rows")
            check(ids.get("site-0-state") == "completed", "site-a state %r" % ids.get("site-0-state"))
            check(ids.get("site-0-lag") == "none", "site-a lag %r" % ids.get("site-0-lag"))
            check(ids.get("site-1-state") == "missing", "site-ghost state %r" % ids.get("site-1-state"))
            check((ids.get("site-1-lag") or "").startswith("%d missing" % len(FIELDS)),
                  "site-ghost lag %r" % ids.get("site-1-lag"))
            check(ids.get("sites-lagging") == "1", "sites lagging %r" % ids.get("sites-lagging"))
            check(sorted(page.products) == sorted(WARNINGS + FIELDS),
                  "products shown %s, sent %s" % (page.products, WARNINGS + FIELDS))
            check("alerts/notes &amp; &lt;draft&gt;.txt" in dom, "the escaped product name is not in the DOM")
            check(page.bars >= 1 and 'aria-label="bytes multicast per minute' in dom, "no throughput bar")
            shot = os.environ.get("MCDIST_SCREENSHOT")
            if shot:
                p = chromium(["--window-size=1100,1250", "--hide-scrollbars",
                              "--screenshot=" + os.path.abspath(shot), url], os.path.join(base, "profile2"))
                check(os.path.getsize(shot) > 10000, "screenshot not written")
                log("screenshot written to " + shot)
            log("page in chromium: channel rows, site rows with state and lag, products, chart")

        check(feed.alive(), "mcdist-feed died")
        check(feed.stop() == 0, "mcdist-feed exit status %s" % feed.proc.returncode)
        feed = None
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
        if feed is not None:
            feed.stop()
        if site is not None:
            site.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
