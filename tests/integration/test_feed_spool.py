#!/usr/bin/env python3
"""The hub's spool is a trust boundary (docs/security.md "Producers"): whoever may write a spool
directory attacks the real mcdist-feed (signed sessions, a real mcdistd site that trusts it) the
way a hostile producer would, and the test asserts on what reaches the site, the hub journal and
the feed's counters:

1. a product queued with the size and mtime of the hub's key, then a symbolic link to the key
   renamed over it in the batch window: refused ("a symbolic link"), the key's bytes reach no
   site; the same through a spool subdirectory swapped for a link to a directory elsewhere;
2. a hard link to the key dropped as a product: refused ("one of the hub's own files");
3. a FIFO renamed over a queued product: refused at once ("a FIFO"), the other channel's
   warning still delivered and mcdistctl answered while it is there; then the swap again with
   the feed killed (SIGKILL) before the batch starts: the restarted feed does not block on it
   and delivers the next warning;
4. a product whose name is not UTF-8 beside good ones in one batch: the good ones are
   delivered, the bad one is journaled failed (its name escaped), moved to the spool's
   .rejected directory, and mcdistctl history still reads the journal;
5. mcdist_feed_products_refused_total counts every refusal.

usage: test_feed_spool.py BUILD_DIR"""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, Daemon, check, free_group, log,  # noqa: E402
                            loopback_multicast_works, sha256_file, stop_all)
from status_common import free_tcp_port  # noqa: E402
from test_feed import Feed, control_request, delivered, drop, query, wait_until  # noqa: E402
from test_feed_signed import keygen  # noqa: E402


def product_state(journal, name):
    rows = query(journal, "SELECT state, reason FROM products WHERE name = ? "
                 "ORDER BY id DESC LIMIT 1", (name,))
    return rows[0] if rows else None


def wait_queued(journal, name, feed):
    wait_until(name + " queued in the journal",
               lambda: (product_state(journal, name) or ("",))[0] == "queued", 15, feed)


def wait_failed(journal, name, feed, reason):
    wait_until(name + " journaled failed",
               lambda: (product_state(journal, name) or ("",))[0] == "failed", 20, feed)
    state, error = product_state(journal, name)
    check(reason in error, "%s failed for '%s', expected '%s'" % (name, error, reason))
    log("%s refused: %s" % (name, error))


def contents(root):
    out = set()
    for dirpath, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out.add(fh.read())
    return out


def metric(port, name, channel):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith('%s{channel="%s"}' % (name, channel)):
            return float(line.split()[-1])
    return None


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-spool-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(4040)
    feed = None
    site = None
    try:
        key = os.path.join(base, "hub.key")
        keygen(bin_dir, key)
        site_pub = keygen(bin_dir, os.path.join(base, "site.key"))
        with open(os.path.join(base, "sites.txt"), "w") as f:
            f.write("site-a %s\n" % site_pub)
        with open(key, "rb") as f:
            key_bytes = f.read()
        obs = os.path.join(base, "spool", "obs")
        warn = os.path.join(base, "spool", "warn")
        os.makedirs(obs)
        os.makedirs(warn)
        journal = os.path.join(base, "journal.db")
        control = os.path.join(base, "control.sock")
        port = free_tcp_port()
        g_obs, g_warn = free_group(), free_group()
        config = os.path.join(base, "feed.toml")
        with open(config, "w") as f:
            f.write("""
interface = "127.0.0.1"
rate = "100M"
key = "%(key)s"
site_keys = "%(sites)s"
journal = "%(journal)s"
retention = "1h"
retained = "%(retained)s"
control_socket = "%(control)s"
http = "127.0.0.1:%(port)d"

[[channel]]
name = "warnings"
group = "%(g_warn)s"
spool = ["%(warn)s"]
priority = 10
batch_window = "100ms"
after = "delete"
register_window = "1s"

[[channel]]
name = "obs"
group = "%(g_obs)s"
spool = ["%(obs)s"]
priority = 1
batch_window = "3s"
after = "delete"
register_window = "1s"
""" % {"key": key, "sites": os.path.join(base, "sites.txt"), "journal": journal,
       "retained": os.path.join(base, "retained"), "control": control, "port": port,
       "g_warn": g_warn, "g_obs": g_obs, "warn": warn, "obs": obs})
        site = Daemon(bin_dir, base, "site-a", g_obs,
                      ["--trust", key + ".pub", "--key", os.path.join(base, "site.key"),
                       "--http", "off", "--session-timeout", "5s", "--group", g_warn])
        feed = Feed(bin_dir, base, config)
        feed.start()
        wait_until("the feed's control socket", lambda: os.path.exists(control), 15, feed)
        st = os.stat(key)

        # 1. The key's size and mtime, queued; a link to the key renamed over it in the window.
        x = drop(obs, "x.bufr", b"k" * st.st_size)
        os.utime(x, ns=(st.st_atime_ns, st.st_mtime_ns))
        good1 = rng.randbytes(20_000)
        drop(obs, "good1.bufr", good1)
        os.makedirs(os.path.join(obs, "sub"))
        y = drop(obs, "sub/y.bufr", b"k" * st.st_size)
        os.utime(y, ns=(st.st_atime_ns, st.st_mtime_ns))
        wait_queued(journal, "x.bufr", feed)
        wait_queued(journal, "sub/y.bufr", feed)
        os.symlink(key, os.path.join(obs, ".x.link"))
        os.rename(os.path.join(obs, ".x.link"), x)
        elsewhere = os.path.join(base, "elsewhere")
        os.makedirs(elsewhere)
        shutil.copy2(key, os.path.join(elsewhere, "y.bufr"))
        shutil.rmtree(os.path.join(obs, "sub"))
        os.symlink(elsewhere, os.path.join(obs, "sub"))
        # 2. A hard link to the key (same file system: the test's directory), renamed in (a
        # link's creation alone is no event the watcher takes).
        os.link(key, os.path.join(obs, ".k"))
        os.rename(os.path.join(obs, ".k"), os.path.join(obs, "k.bufr"))
        wait_until("good1.bufr at the site",
                   delivered([site], "good1.bufr", hashlib.sha256(good1).hexdigest()), 30, feed,
                   [site])
        wait_failed(journal, "x.bufr", feed, "symbolic link")
        wait_failed(journal, "sub/y.bufr", feed, "symbolic link")
        wait_failed(journal, "k.bufr", feed, "hub's own files")
        check(key_bytes not in contents(site.dest), "the hub's key reached the site")
        check(key_bytes not in contents(os.path.join(base, "retained")),
              "the hub's key was retained for catch-up")
        os.unlink(os.path.join(obs, "sub"))
        log("links to the hub's key refused; the batch's good product delivered")

        # 3. A FIFO renamed over a queued product: refused without blocking the io thread.
        f = drop(obs, "fifo.bufr", rng.randbytes(1000))
        wait_queued(journal, "fifo.bufr", feed)
        os.mkfifo(os.path.join(obs, ".fifo"))
        os.rename(os.path.join(obs, ".fifo"), f)
        w1 = rng.randbytes(500)
        drop(warn, "W0001.cap", w1)
        wait_until("the warning at the site",
                   delivered([site], "W0001.cap", hashlib.sha256(w1).hexdigest()), 20, feed,
                   [site])
        wait_failed(journal, "fifo.bufr", feed, "FIFO")
        answer = control_request(control, {"cmd": "status"})
        check(answer.get("ok") is True, "mcdistctl status while a FIFO sits in the spool: %s" % answer)
        os.unlink(f)
        # The same with the feed killed before the batch starts: the restart must not block.
        f2 = drop(obs, "fifo2.bufr", rng.randbytes(1000))
        wait_queued(journal, "fifo2.bufr", feed)
        os.mkfifo(os.path.join(obs, ".fifo2"))
        os.rename(os.path.join(obs, ".fifo2"), f2)
        feed.stop(signal.SIGKILL)
        feed.start()
        w2 = rng.randbytes(700)
        drop(warn, "W0002.cap", w2)
        wait_until("a warning after the restart",
                   delivered([site], "W0002.cap", hashlib.sha256(w2).hexdigest()), 30, feed,
                   [site])
        wait_failed(journal, "fifo2.bufr", feed, "FIFO")
        answer = control_request(control, {"cmd": "status"})
        check(answer.get("ok") is True, "mcdistctl status after the restart: %s" % answer)
        os.unlink(f2)
        log("FIFOs refused at once, before and after a SIGKILL restart; warnings flowed")

        # 4. A name that is not UTF-8 in one batch with good products.
        good2 = rng.randbytes(3000)
        good3 = rng.randbytes(4000)
        drop(obs, "good2.bufr", good2)
        bad = os.path.join(os.fsencode(obs), b"bad\xff.bufr")
        with open(bad, "wb") as fh:
            fh.write(b"bad name")
        drop(obs, "good3.bufr", good3)
        for name, data in (("good2.bufr", good2), ("good3.bufr", good3)):
            wait_until(name + " at the site",
                       delivered([site], name, hashlib.sha256(data).hexdigest()), 30, feed, [site])
        wait_failed(journal, "bad\\xff.bufr", feed, "UTF-8")
        check(os.path.exists(os.path.join(os.fsencode(obs), b".rejected", b"bad\xff.bufr")),
              "the bad name was not moved to .rejected")
        check(not os.path.exists(bad), "the bad name is still in the spool")
        ctl = os.path.join(bin_dir, "tools", "mcdistctl", "mcdistctl")

        def history():
            p = subprocess.run([ctl, "--socket", control, "--journal", journal, "--json",
                                "history", "--site", "site-a", "--since", "1h"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
            check(p.returncode == 0, "mcdistctl history: %d %s" % (p.returncode, p.stderr.decode()))
            return json.loads(p.stdout)

        wait_until("good3.bufr in mcdistctl history",
                   lambda: "good3.bufr" in json.dumps(history()), 20, feed)
        log("a name that is not UTF-8 refused alone, moved aside; its batch delivered")

        # 5. Every refusal counted.
        refused = metric(port, "mcdist_feed_products_refused_total", "obs")
        log("mcdist_feed_products_refused_total{channel=\"obs\"} = %s (since the restart)" % refused)
        check(refused is not None and refused >= 2, "refusals counted: %s" % refused)
        check(site.alive(), "the site died")
        code = feed.stop()
        check(code == 0, "mcdist-feed exited %s on SIGTERM" % code)
        log("PASS: hostile spool files refused, nothing of the hub's leaked, nothing blocked")
        return 0
    finally:
        stop_all(base, feed, [site])


if __name__ == "__main__":
    sys.exit(main())
