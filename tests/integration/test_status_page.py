#!/usr/bin/env python3
"""Integration: the status page as a person sees it. mcdistd (with --http on a free port)
receives a real mcdist-send session of products on loopback multicast; a real headless
Chromium (Debian `chromium`) loads http://127.0.0.1:PORT/ and its rendered DOM must show the
receiver id, the count of files stored (in the summary and the channel row), every delivered
product's name (one with characters that must be escaped), a failed-nothing state and the
throughput chart with at least one bar. With MCDIST_SCREENSHOT=FILE it also writes a
screenshot of the page there (docs/status-page.png is made so).

usage: test_status_page.py BUILD_DIR"""

import os
import random
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from status_common import http_port, make_products  # noqa: E402

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class PageText(HTMLParser):
    """Text of elements by id, and the text of every `td.product` cell."""

    def __init__(self):
        super().__init__()
        self.by_id = {}
        self.products = []
        self.bars = 0
        self.stack = []  # (tag, id or None, is product cell)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "rect" and "bar" in (a.get("class") or "").split():
            self.bars += 1
        if tag in ("meta", "link", "br", "img", "input"):
            return
        cls = (a.get("class") or "").split()
        self.stack.append((tag, a.get("id"), tag == "td" and "product" in cls, []))

    def handle_endtag(self, tag):
        while self.stack:
            t, i, prod, text = self.stack.pop()
            s = "".join(text).strip()
            if i:
                self.by_id[i] = s
            if prod:
                self.products.append(s)
            if self.stack:
                self.stack[-1][3].append("".join(text))
            if t == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][3].append(data)


def chromium(args, profile, timeout=25):
    return subprocess.run(["chromium"] + CHROMIUM_FLAGS + ["--user-data-dir=" + profile] + args,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    if not shutil.which("chromium"):
        print("SKIPPED: chromium is not installed (deploy/install-deps.sh installs it)")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-page-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    daemon = None
    try:
        # Does this Chromium run at all here (no display, maybe no user namespaces)?
        probe = os.path.join(base, "probe.html")
        with open(probe, "w") as f:
            f.write("<html><body><p id=x>ok</p></body></html>")
        # Twice: a first start has hung past 25 s on a loaded CI machine (2 of ~20 CI runs)
        # and never when run alone (0.6-1.2 s); a second start with a fresh profile and a
        # longer wait tells a transient hang from a machine where Chromium cannot run.
        p = None
        for attempt, wait in enumerate((25, 60)):
            try:
                p = chromium(["--dump-dom", "file://" + probe],
                             os.path.join(base, "profile0-%d" % attempt), timeout=wait)
                break
            except subprocess.TimeoutExpired:
                log("headless chromium did not finish the probe in %d s (attempt %d)"
                    % (wait, attempt + 1))
        if p is None:
            print("SKIPPED: headless chromium does not finish here (twice, 25 s and 60 s)")
            return SKIP
        if b'id="x">ok' not in p.stdout:
            print("SKIPPED: headless chromium cannot render here: %s" % p.stderr.decode()[-500:])
            return SKIP

        rng = random.Random(11)
        src = os.path.join(base, "src")
        names = ["obs/SYNOP_EDZW_20261123_0600.bufr", "obs/TEMP_LFPW_20261123_0000.bufr",
                 "nwp/ICON_EU_t2m_006.grib2", "nwp/ICON_EU_t2m_012.grib2",
                 "sat/MSG4_IR108_1015.h5", "misc/notes & <draft>.txt"]
        make_products(src, names, rng)
        group = free_group()
        daemon = Daemon(bin_dir, base, "site-page", group, ["--http", "127.0.0.1:0"])
        port = http_port(daemon)
        code, summary, out = run_sender(bin_dir, [os.path.join(src, d) for d in ("obs", "nwp", "sat", "misc")],
                                        group, [daemon.id], rate="100M", extra=["--fallback", "auto"])
        check(code == 0, "mcdist-send exited %d:\n%s" % (code, out))
        check(summary["receivers"][0]["files"] == len(names), "summary: %s" % summary["receivers"])

        url = "http://127.0.0.1:%d/" % port
        p = chromium(["--dump-dom", url], os.path.join(base, "profile1"))
        dom = p.stdout.decode("utf-8", "replace")
        check(p.returncode == 0 and "<html" in dom,
              "chromium --dump-dom %s exited %d: %s" % (url, p.returncode, p.stderr.decode()[-800:]))
        page = PageText()
        page.feed(dom)
        log("page: id %r, files stored %r, channel row %r, products %s, %d bars" % (
            page.by_id.get("receiver-id"), page.by_id.get("files-stored"),
            page.by_id.get("channel-0-stored"), page.products, page.bars))
        check(page.by_id.get("receiver-id") == "site-page", "receiver id not shown")
        check(page.by_id.get("files-stored") == str(len(names)), "files stored: %r" % page.by_id.get("files-stored"))
        check(page.by_id.get("files-failed") == "0", "files failed: %r" % page.by_id.get("files-failed"))
        check(page.by_id.get("channel-0-stored") == str(len(names)),
              "channel row stored: %r" % page.by_id.get("channel-0-stored"))
        check(page.by_id.get("sessions-completed") == "1", "sessions completed: %r" % page.by_id.get("sessions-completed"))
        check(sorted(page.products) == sorted(names), "products shown %s, delivered %s" % (page.products, names))
        # The name with & < > reached the DOM as text, not as markup.
        check("misc/notes &amp; &lt;draft&gt;.txt" in dom, "the escaped product name is not in the DOM")
        check(page.bars >= 1, "the throughput chart has no bar")
        check("<svg" in dom and 'aria-label="bytes received per minute' in dom, "no throughput chart")
        # The one warning of this unsigned deployment is shown to the operator, nothing else.
        recent = page.by_id.get("recent-log", "")
        check("no trusted_senders" in recent and recent.count("warning") == 1 and "error" not in recent,
              "recent log should show exactly the trust warning: %r" % recent)

        shot = os.environ.get("MCDIST_SCREENSHOT")
        if shot:
            p = chromium(["--window-size=1100,1000", "--hide-scrollbars", "--screenshot=" + os.path.abspath(shot), url],
                         os.path.join(base, "profile2"))
            check(os.path.getsize(shot) > 10000, "screenshot not written")
            log("screenshot written to " + shot)
        check(daemon.alive(), "mcdistd died")
        check(daemon.stop() == 0, "mcdistd exit status %s" % daemon.proc.returncode)
        daemon = None
        log("PASS")
        return 0
    finally:
        if daemon:
            daemon.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
