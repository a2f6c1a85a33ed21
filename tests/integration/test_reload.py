#!/usr/bin/env python3
"""Integration: mcdistd reloads its configuration at SIGHUP (README "Reloading the
configuration"). Real mcdist-send sessions to a real mcdistd configured by TOML.

- A session of 4 files (3 MB at 6 Mbit/s, several seconds) is under way on channel "a" when a
  SIGHUP brings a configuration that adds channel "b" and replaces action "one" by "two": the
  reload is logged (one summary line naming both changes) while the session is active, the
  session's files are all delivered with their SHA-256 and the sender reports the site
  complete; then a product sent to b's group lands in b's dest, and action "two" ran for it
  (action "one" did not); the delivery journal names channel a for the session's files and b
  for the new product.
- /status lists channels a and b; mcdist_receiver_config_reloads_total{result="success"} 1.
- An invalid file at SIGHUP (a TOML syntax error) is logged as not reloaded, the daemon keeps
  running, {result="failure"} is 1, and a product sent on "a" is still delivered.
- A reload that removes b: b is left once idle (logged), /status lists a only.
- `--check-config F --group G` keeps the settings of F's channel on G (its dest; before the
  fix it lost it and failed "has no destination"), and a --group the file does not define
  takes the file's top-level dest.

usage: test_reload.py BUILD_DIR"""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from status_common import get, http_port, make_products, metric_value  # noqa: E402

RECORD = r'''#!PYTHON
import json, os, sys
with open(os.environ["LOGFILE"], "a") as f:
    f.write(json.dumps({"action": os.environ["MCDIST_ACTION"], "relpath": os.environ["MCDIST_RELPATH"]}) + "\n")
'''


def recorded(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def channel_names(port):
    code, _, body = get(port, "/status")
    check(code == 200, "/status answered %d" % code)
    return [c["name"] for c in json.loads(body)["channels"]]


def check_group_override(bin_dir, base, g_a, g_x):
    """--check-config F --group G keeps F's channel on G; an unknown G takes F's dest."""
    d_a = os.path.join(base, "go", "dest-a")
    d_top = os.path.join(base, "go", "dest-top")
    temp = os.path.join(base, "go", "temp")
    for d in (d_a, d_top, temp):
        os.makedirs(d)
    mcdistd = os.path.join(bin_dir, "receiver", "mcdistd")
    f1 = os.path.join(base, "go", "f1.toml")
    with open(f1, "w") as f:
        f.write('id = "g"\ninterface = "127.0.0.1"\ntemp = "%s"\nallow_unsigned = true\n'
                '[[channel]]\nname = "a"\ngroup = "%s"\ndest = "%s"\n' % (temp, g_a, d_a))
    p = subprocess.run([mcdistd, "--check-config", f1, "--group", g_a], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10)
    check(p.returncode == 0, "--check-config F --group G (G is F's channel) refused: %s" %
          p.stdout.decode())
    f2 = os.path.join(base, "go", "f2.toml")
    with open(f2, "w") as f:
        f.write('id = "g"\ninterface = "127.0.0.1"\ntemp = "%s"\ndest = "%s"\n'
                'allow_unsigned = true\n[[channel]]\nname = "a"\ngroup = "%s"\ndest = "%s"\n' % (temp, d_top, g_a, d_a))
    p = subprocess.run([mcdistd, "--check-config", f2, "--group", g_x], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10)
    check(p.returncode == 0, "--check-config F --group G (G not in F, F has dest) refused: %s" %
          p.stdout.decode())
    log("--group over --config keeps the file's channel settings and top-level dest")


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    rng = random.Random(11)
    base = tempfile.mkdtemp(prefix="mcdist-reload-")
    daemon = None
    sender = None
    try:
        g_a = free_group()
        g_b = free_group()
        while g_b.split(":")[0] == g_a.split(":")[0]:
            g_b = free_group()
        check_group_override(bin_dir, base, g_a, g_b)

        root = os.path.join(base, "site")
        d_a, d_b, temp = (os.path.join(root, n) for n in ("dest-a", "dest-b", "temp"))
        for d in (d_a, temp):
            os.makedirs(d)
        record = os.path.join(base, "record.py")
        with open(record, "w") as f:
            f.write(RECORD.replace("PYTHON", sys.executable))
        os.chmod(record, 0o755)
        rec_log = os.path.join(base, "record.log")
        env = dict(os.environ, LOGFILE=rec_log)
        head = ('id = "site-rl"\ninterface = "127.0.0.1"\ntemp = "%s"\nstatus_file = "%s"\n'
                'status_interval = "1s"\nhttp = "127.0.0.1:0"\nsync = "none"\n'
                'allow_unsigned = true\n[[channel]]\nname = "a"\ngroup = "%s"\ndest = "%s"\n'
                % (temp, os.path.join(root, "status.json"), g_a, d_a))
        chan_b = '[[channel]]\nname = "b"\ngroup = "%s"\ndest = "%s"\n' % (g_b, d_b)
        act = '[[action]]\nname = "%s"\nmatch = "."\nexec = ["%s"]\n'
        daemon = ConfigDaemon(bin_dir, root, head + act % ("one", record), env, "site-rl")
        port = http_port(daemon)

        # A session under way on a: 4 files, 3 MB at 6 Mbit/s.
        src = os.path.join(base, "src1")
        make_products(src, ["big/f%d.bin" % i for i in range(4)], rng, size=750000)
        summary = os.path.join(base, "summary.json")
        sender = subprocess.Popen(
            [os.path.join(bin_dir, "sender", "mcdist-send"), "--group", g_a, "--interface",
             "127.0.0.1", "--rate", "6M", "--summary-json", summary, "--no-progress",
             "--receivers", daemon.id, src],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wait_for("the session to be active",
                 lambda: (daemon.read_status() or {}).get("sessions_active", 0) >= 1
                 and (daemon.read_status() or {}).get("data_bytes", 0) > 0, 20, daemon)
        text = daemon.reload(head + chan_b + act % ("two", record), "configuration reloaded")
        # The sender still runs and the session has not completed: the reload hit it under way.
        check(sender.poll() is None and ": complete in" not in text,
              "the session ended before the reload was applied: the test did not test a session "
              "under way:\n%s" % text)
        line = [l for l in text.splitlines() if "configuration reloaded" in l][-1]
        check("channel b added" in line and "actions replaced" in line,
              "the reload summary misses a change: %s" % line)
        out = sender.communicate(timeout=120)[0].decode("utf-8", "replace")
        check(sender.returncode == 0, "the sender failed (%d):\n%s" % (sender.returncode, out))
        want = tree_digests(src)
        check(tree_digests(os.path.join(d_a, "src1")) == want,
              "the session under way was not delivered whole")
        log("a session under way survived the reload: %d files delivered" % len(want))

        # The new channel receives; the new action runs for the next product.
        src2 = os.path.join(base, "src2")
        make_products(src2, ["new/p1.bin"], rng)
        code, _, out = run_sender(bin_dir, [src2], g_b, [daemon.id], rate="100M")
        check(code == 0, "sending on the new channel failed (%d):\n%s" % (code, out))
        check(tree_digests(os.path.join(d_b, "src2")) == tree_digests(src2),
              "channel b did not deliver its product")
        wait_for("action two on new/p1.bin",
                 lambda: any(r["action"] == "two" and r["relpath"].endswith("new/p1.bin")
                             for r in recorded(rec_log)), 10, daemon)
        check(not any(r["action"] == "one" and r["relpath"].endswith("new/p1.bin")
                      for r in recorded(rec_log)),
              "the removed action ran for a product delivered after the reload")
        # The journal names each delivery's channel, the one added by the reload included.
        con = sqlite3.connect(os.path.join(temp, "journal.db"), timeout=5)
        try:
            rows = con.execute("SELECT channel, relpath FROM deliveries").fetchall()
        finally:
            con.close()
        check(sorted(rows) == sorted([("a", "src1/big/f%d.bin" % i) for i in range(4)]
                                     + [("b", "src2/new/p1.bin")]),
              "journal deliveries: %s" % rows)
        check(sorted(channel_names(port)) == ["a", "b"], "/status channels: %s" % channel_names(port))
        _, _, body = get(port, "/metrics")
        ok = metric_value(body.decode(), "mcdist_receiver_config_reloads_total", {"result": "success"})
        check(ok == 1, "config_reloads_total{result=success} is %s" % ok)
        log("channel b added and receiving, action two ran, /status and /metrics show them")

        # An invalid file changes nothing.
        daemon.reload(head + chan_b + "[[channel]\nbroken", "configuration not reloaded")
        check(daemon.alive(), "mcdistd exited on an invalid configuration")
        src3 = os.path.join(base, "src3")
        make_products(src3, ["after/bad.bin"], rng)
        code, _, out = run_sender(bin_dir, [src3], g_a, [daemon.id], rate="100M")
        check(code == 0, "sending after an invalid reload failed (%d):\n%s" % (code, out))
        check(tree_digests(os.path.join(d_a, "src3")) == tree_digests(src3),
              "nothing delivered after an invalid reload")
        _, _, body = get(port, "/metrics")
        bad = metric_value(body.decode(), "mcdist_receiver_config_reloads_total", {"result": "failure"})
        check(bad == 1, "config_reloads_total{result=failure} is %s" % bad)
        check(sorted(channel_names(port)) == ["a", "b"], "an invalid reload changed the channels")
        log("an invalid configuration was refused; the daemon kept delivering")

        # Removing b: left once idle, gone from /status.
        daemon.reload(head + act % ("two", record), "left: no session under way")
        check(channel_names(port) == ["a"], "/status channels after removing b: %s" %
              channel_names(port))
        log("channel b removed and left")
        check(daemon.stop() == 0, "mcdistd did not exit 0 at SIGTERM")
        daemon = None
        # The channel table the next start maps saved sessions by: every index, b's kept.
        with open(os.path.join(temp, "channels")) as f:
            table = [l.split("\t")[:2] for l in f.read().splitlines()]
        check(table == [["0", "a"], ["1", "b"]], "TEMP/channels: %s" % table)
        log("PASS")
        return 0
    finally:
        if sender and sender.poll() is None:
            sender.kill()
        if daemon:
            daemon.stop()


if __name__ == "__main__":
    sys.exit(main())
