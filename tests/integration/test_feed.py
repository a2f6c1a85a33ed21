#!/usr/bin/env python3
"""mcdist-feed end to end on loopback: the real hub daemon and two real mcdistd sites.

- products dropped into two channels' spools (one written before the feed starts) arrive
  byte-identical at both sites; dot-files and ignored globs are never sent;
- a file still open for writing is not sent until its writer closes it;
- after = "delete" removes the spool file only once the session ended (the spool file is there
  while its session runs), after = "move:DIR" moves it; sent products are retained;
- strict priority: a warning dropped while a large file of another channel is being sent has a
  session that starts after and ends before the large file's (ordering read from the journal);
- SIGKILL of the feed mid-batch, then restart: every product arrives, the journal shows each
  sent and the interrupted session aborted;
- SIGTERM: exit 0.

usage: test_feed.py BUILD_DIR"""

import hashlib
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, Daemon, check, fail, free_group, log,  # noqa: E402
                            loopback_multicast_works, sha256_file, write_random, stop_all)

SITES = ["site-a", "site-b"]


class Feed:
    def __init__(self, bin_dir, base, config):
        self.args = [os.path.join(bin_dir, "feed", "mcdist-feed"), "--config", config,
                     "--log-level", "debug"]
        self.log_path = os.path.join(base, "feed.log")
        self.proc = None

    def start(self):
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.logf, stderr=subprocess.STDOUT)

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.logf.close()
            return self.proc.returncode
        return None


def query(journal, sql, args=()):
    # Read-only, while the daemon writes (WAL): a reader never blocks it.
    db = sqlite3.connect("file:%s?mode=ro" % journal, uri=True, timeout=10)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def wait_until(what, pred, timeout, feed=None, daemons=()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        if feed is not None and feed.proc is not None and not feed.alive():
            fail("mcdist-feed exited (%s) while waiting for %s:\n%s" % (
                feed.proc.returncode, what, feed.log_text()[-6000:]))
        time.sleep(0.05)
    msg = "timed out waiting for %s" % what
    if feed is not None:
        msg += "\n--- feed log ---\n" + feed.log_text()[-8000:]
    for d in daemons:
        msg += "\n--- %s log ---\n%s" % (d.id, d.log_text()[-3000:])
    fail(msg)


def delivered(daemons, name, digest):
    def ok():
        for d in daemons:
            p = os.path.join(d.dest, name)
            if not os.path.exists(p) or sha256_file(p) != digest:
                return False
        return True
    return ok


def drop(spool, name, data):
    """Writes a product the atomic way: a dot-name, then a rename into place."""
    path = os.path.join(spool, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".part")
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)
    return path


def control_request(path, req):
    """One JSON request line on the feed's control socket, one JSON answer line back."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(path)
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return json.loads(buf)
    finally:
        s.close()


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-feed-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(1010)
    feed = None
    daemons = []
    try:
        warn_spool = os.path.join(base, "spool", "warnings")
        field_spool = os.path.join(base, "spool", "fields")
        moved = os.path.join(base, "done", "warnings")
        retained = os.path.join(base, "retained")
        journal = os.path.join(base, "journal.db")
        control = os.path.join(base, "control.sock")
        g_warn, g_field = free_group(), free_group()
        while g_field.split(":")[0] == g_warn.split(":")[0]:
            g_field = free_group()
        config = os.path.join(base, "feed.toml")
        with open(config, "w") as f:
            f.write("""
interface = "127.0.0.1"
rate = "60M"
journal = "%(journal)s"
retention = "1h"
retained = "%(retained)s"
control_socket = "%(control)s"

[[channel]]
name = "warnings"
group = "%(g_warn)s"
spool = ["%(warn_spool)s"]
priority = 10
batch_window = "100ms"
after = "move:%(moved)s"
receivers = ["site-a", "site-b"]
register_timeout = "2s"

[[channel]]
name = "fields"
group = "%(g_field)s"
spool = ["%(field_spool)s"]
priority = 1
batch_window = "300ms"
after = "delete"
ignore = ["*.tmp"]
receivers = ["site-a", "site-b"]
""" % locals())
        # Products written before the feed starts, and files that must never be sent.
        os.makedirs(os.path.join(field_spool, "early"))
        pre = drop(field_spool, "early/pre.bin", rng.randbytes(200_000))
        pre_digest = sha256_file(pre)
        with open(os.path.join(field_spool, ".hidden"), "wb") as f:
            f.write(b"dot-files are never products")
        with open(os.path.join(field_spool, "scratch.tmp"), "wb") as f:
            f.write(b"ignored by the glob")

        check(subprocess.run([os.path.join(bin_dir, "feed", "mcdist-feed"), "--config", config,
                              "--check-config"], capture_output=True).returncode == 0,
              "--check-config refused a good configuration")

        daemons = [Daemon(bin_dir, base, s, g_warn, ["--group", g_field, "--session-timeout", "5s"])
                   for s in SITES]
        feed = Feed(bin_dir, base, config)
        feed.start()

        # 1. The product spooled before the start arrives at both sites.
        wait_until("early/pre.bin at both sites", delivered(daemons, "early/pre.bin", pre_digest),
                   20, feed, daemons)
        log("pre-existing spool product delivered")

        # 2. A file being written is not sent; a product dropped after it is.
        partial_path = os.path.join(warn_spool, "partial.txt")
        writer = open(partial_path, "wb")
        writer.write(b"first half;")
        writer.flush()
        w1 = drop(warn_spool, "w1.txt", b"warning one")
        wait_until("w1.txt at both sites", delivered(
            daemons, "w1.txt", hashlib.sha256(b"warning one").hexdigest()), 20, feed, daemons)
        wait_until("w1.txt moved out of the spool once its session ended",
                   lambda: not os.path.exists(w1) and os.path.exists(os.path.join(moved, "w1.txt")),
                   20, feed, daemons)
        rows = query(journal, "SELECT count(*) FROM products WHERE name = 'partial.txt'")
        check(rows[0][0] == 0, "partial.txt was queued while still open for writing")
        for d in daemons:
            check(not os.path.exists(os.path.join(d.dest, "partial.txt")),
                  "%s got partial.txt before its writer closed it" % d.id)
        writer.write(b"second half")
        writer.close()
        wait_until("partial.txt once closed", delivered(
            daemons, "partial.txt", hashlib.sha256(b"first half;second half").hexdigest()),
            20, feed, daemons)
        log("open file held back until closed; after = move works")

        # 3. Strict priority: a warning overtakes a large file of the lower-priority channel.
        big_data = rng.randbytes(64 << 20)
        big_digest = hashlib.sha256(big_data).hexdigest()
        big = drop(field_spool, "big.grib", big_data)
        del big_data

        def big_running():
            return query(journal, """SELECT count(*) FROM sessions s
                JOIN session_products sp ON sp.session = s.id JOIN products p ON p.id = sp.product
                WHERE p.name = 'big.grib' AND s.ended IS NULL""")[0][0] == 1
        wait_until("the session of big.grib", big_running, 20, feed, daemons)
        check(os.path.exists(big), "after = delete removed big.grib while its session runs")
        alert_data = b"SEVERE WEATHER " * 700
        drop(warn_spool, "alerts/alert.txt", alert_data)
        wait_until("alert.txt at both sites", delivered(
            daemons, "alerts/alert.txt", hashlib.sha256(alert_data).hexdigest()), 20, feed, daemons)
        wait_until("big.grib at both sites", delivered(daemons, "big.grib", big_digest), 40,
                   feed, daemons)

        def session_of(name):
            r = query(journal, """SELECT s.started, s.ended, s.outcome FROM sessions s
                JOIN session_products sp ON sp.session = s.id JOIN products p ON p.id = sp.product
                WHERE p.name = ? AND s.kind = 'batch' ORDER BY s.id DESC LIMIT 1""", (name,))
            return r[0] if r else None
        wait_until("big.grib's session to end", lambda: (session_of("big.grib") or (0, None))[1]
                   is not None, 20, feed, daemons)
        ws, we, wo = session_of("alerts/alert.txt")
        bs, be, bo = session_of("big.grib")
        check(ws > bs, "the warning's session did not start during the large file's")
        check(we < be, "the warning's session did not end before the large file's session "
                       "(strict priority)")
        check(wo == "complete" and bo == "complete", "outcomes %s / %s" % (wo, bo))
        wait_until("big.grib removed from the spool", lambda: not os.path.exists(big), 10, feed)
        kept = query(journal, "SELECT retained_path, state FROM products WHERE name = 'big.grib'")
        check(kept and kept[0][1] == "sent", "big.grib not 'sent' in the journal: %s" % kept)
        check(kept[0][0] and sha256_file(kept[0][0]) == big_digest, "big.grib not retained")
        outs = query(journal, """SELECT o.site, o.outcome FROM outcomes o JOIN products p
            ON p.id = o.product WHERE p.name = 'big.grib'""")
        check(sorted(outs) == [("site-a", "stored"), ("site-b", "stored")],
              "big.grib outcomes %s" % outs)
        log("warning overtook the large file; after = delete once sent; retained copy kept")

        # 3b. A sent product still in the spool (the feed stopped between journaling the
        # session's end and deleting the file): found again, it is deleted, not sent again.
        size, mtime_ns = query(journal, "SELECT size, mtime_ns FROM products "
                                        "WHERE name = 'big.grib'")[0]
        tmp = os.path.join(field_spool, ".big.grib.part")
        with open(tmp, "wb") as f:
            f.truncate(size)
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
        sessions_before = query(journal, "SELECT count(*) FROM sessions")[0][0]
        os.rename(tmp, big)
        wait_until("the sent big.grib found again to be deleted", lambda: not os.path.exists(big),
                   20, feed)
        check(query(journal, "SELECT count(*) FROM sessions")[0][0] == sessions_before,
              "a product already sent was sent again")
        check(query(journal, "SELECT count(*) FROM products WHERE name = 'big.grib'")[0][0] == 1,
              "a product already sent was queued again")
        log("a sent product left in the spool by a stop is deleted, not sent twice")

        # 4. Resend over the control socket: site-a lost w1.txt; only site-a takes part.
        os.unlink(os.path.join(daemons[0].dest, "w1.txt"))
        st = control_request(control, {"cmd": "status"})
        check(st.get("ok") and st.get("daemon") is True, "status over the control socket: %s" % st)
        names = sorted(c["name"] for c in st["feed"]["channels"])
        check(names == ["fields", "warnings"], "status channels %s" % names)
        ans = control_request(control, {"cmd": "resend", "site": "site-a", "product": "w1.txt"})
        check(ans.get("ok") and ans.get("products") == 1, "resend answer %s" % ans)
        wait_until("w1.txt resent to site-a", delivered(
            daemons[:1], "w1.txt", hashlib.sha256(b"warning one").hexdigest()), 20, feed, daemons)

        def resend_outcomes():
            return query(journal, """SELECT o.site, o.outcome FROM outcomes o
                JOIN products p ON p.id = o.product WHERE p.name = 'w1.txt' AND o.seq = 0""")
        wait_until("the resend session's end in the journal", lambda: query(
            journal, "SELECT count(*) FROM sessions WHERE kind = 'resend' AND ended IS NOT NULL"
        )[0][0] == 1, 20, feed)
        check(resend_outcomes() == [("site-a", "stored")],
              "resend outcomes (only site-a takes part): %s" % resend_outcomes())
        kinds = query(journal, "SELECT kind, outcome FROM sessions WHERE kind = 'resend'")
        check(kinds == [("resend", "complete")], "resend sessions %s" % kinds)
        log("resend over the control socket reached the one site that asked")

        # 5. SIGKILL mid-batch, restart: nothing lost.
        crash = {}
        staged = []
        for i in range(8):
            data = rng.randbytes(2 << 20)
            name = "crash/f%d.bin" % i
            crash[name] = hashlib.sha256(data).hexdigest()
            tmp = os.path.join(field_spool, "crash", ".f%d.part" % i)
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
            staged.append((tmp, os.path.join(field_spool, name)))
        for tmp, final in staged:  # all at once: one batch
            os.rename(tmp, final)

        def crash_sending():
            return query(journal, """SELECT count(*) FROM products
                WHERE name LIKE 'crash/%' AND state = 'sending'""")[0][0] > 0
        wait_until("the crash batch in flight", crash_sending, 20, feed, daemons)
        feed.proc.send_signal(signal.SIGKILL)
        feed.proc.wait()
        feed.logf.close()
        log("feed killed mid-batch; restarting")
        feed.start()
        for name, digest in crash.items():
            wait_until(name + " at both sites", delivered(daemons, name, digest), 30, feed, daemons)
        wait_until("the crash batch sent in the journal", lambda: query(journal, """SELECT count(*)
            FROM products WHERE name LIKE 'crash/%' AND state = 'sent'""")[0][0] == len(crash),
            20, feed, daemons)
        aborted = query(journal, "SELECT count(*) FROM sessions WHERE outcome = 'aborted'")[0][0]
        check(aborted >= 1, "the killed session is not recorded as aborted")
        dup = query(journal, "SELECT name, count(*) FROM products GROUP BY channel, name "
                             "HAVING count(*) > 1")
        check(not dup, "products queued twice: %s" % dup)
        log("SIGKILL mid-batch: every product arrived after the restart")

        # 6. Catch-up: site-b is down for one warning session; when it is back, its REGISTER in
        # the next session reports the gap and the feed sends it the missed product alone.
        daemons[1].stop()
        missed_data = b"issued while site-b was down"
        drop(warn_spool, "missed.txt", missed_data)
        wait_until("missed.txt's session to end", lambda: query(journal, """SELECT count(*)
            FROM sessions s JOIN session_products sp ON sp.session = s.id
            JOIN products p ON p.id = sp.product
            WHERE p.name = 'missed.txt' AND s.ended IS NOT NULL""")[0][0] == 1, 20, feed)
        check(query(journal, """SELECT o.outcome FROM outcomes o JOIN products p
            ON p.id = o.product WHERE p.name = 'missed.txt' AND o.site = 'site-b'""")
              == [("missed",)], "site-b's outcome for missed.txt is not 'missed'")
        daemons[1].start()
        drop(warn_spool, "after.txt", b"after site-b came back")
        wait_until("missed.txt caught up at site-b", delivered(
            daemons[1:], "missed.txt", hashlib.sha256(missed_data).hexdigest()), 30, feed,
            daemons)
        wait_until("the catch-up session's end", lambda: query(journal, """SELECT count(*)
            FROM sessions WHERE kind = 'catchup' AND outcome = 'complete'""")[0][0] >= 1, 20,
            feed)
        outs = query(journal, """SELECT o.outcome, o.seq FROM outcomes o JOIN products p
            ON p.id = o.product WHERE p.name = 'missed.txt' AND o.site = 'site-b'
            ORDER BY o.id""")
        check([o for o, _ in outs] == ["missed", "stored"] and outs[1][1] == 0,
              "site-b's outcomes for missed.txt: %s" % outs)
        log("catch-up: site-b got the product it missed while down")

        # 7. Never sent: dot-files and ignored globs.
        names = [r[0] for r in query(journal, "SELECT name FROM products")]
        check(".hidden" not in names and "scratch.tmp" not in names,
              "ignored files were queued: %s" % names)
        for d in daemons:
            for n in (".hidden", "scratch.tmp"):
                check(not os.path.exists(os.path.join(d.dest, n)), "%s got %s" % (d.id, n))
        failed = query(journal, "SELECT name, state FROM products WHERE state != 'sent'")
        check(not failed, "products not sent: %s" % failed)

        code = feed.stop()
        check(code == 0, "mcdist-feed exited %s on SIGTERM" % code)
        log("PASS: mcdist-feed delivered every product to both sites, in priority order, "
            "across a SIGKILL")
        return 0
    finally:
        stop_all(base, feed, daemons)


if __name__ == "__main__":
    sys.exit(main())
