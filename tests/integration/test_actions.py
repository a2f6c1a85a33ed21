#!/usr/bin/env python3
"""Integration: actions on receipt, the delivery journal and retention in mcdistd
(docs/actions.md). Real mcdist-send sessions to a real mcdistd configured by TOML; the journal
is a real SQLite file the test reads with Python's sqlite3.

- --check-config refuses a bad regular expression, a relative exec program, a missing exec
  program, an unknown placeholder and an unknown date field (exit 2, naming the action), and
  accepts the test's configuration (exit 0).
- One session of 5 products on channel "main": the exec action (a script that appends its argv
  and MCDIST_* environment as a JSON line) ran exactly once per matching product with the right
  path, capture groups, relpath, channel, session and SHA-256; the link action made a hard link
  (same inode) at the template path with capture groups and the UTC year; the copy action a
  separate file with the same bytes; every run is 'done' with attempt 1 in the journal, and
  every product is a delivery row with its SHA-256.
- A failing action (exit status 3, retries = 2) ran 3 times and is 'failed' with exit_status 3;
  /metrics counts it: mcdist_receiver_actions_total{action="bad",result="retry"} 2 and
  {result="failed"} 1.
- An action blocked on a fifo when mcdistd is SIGKILLed runs again after the restart (at least
  once), completes when the fifo is written, and the journal shows it 'done' with attempt 2;
- SIGTERM while an action runs: mcdistd waits for it (a grace), journals it done at attempt 1
  and exits 0, so it does not run again; the clean stop leaves every delivery confirmed;
  actions that were done do not run again.
- Crash between journal and rename, simulated by writing deliveries above the journal's
  confirmed mark, each with a 'pending' run, while the daemon is down: the one whose file is
  in dest with its size, mtime and SHA-256 is kept and its actions run; the one whose file is
  absent (or a fifo, which start-up opens without blocking) is deleted with its runs, which
  never run; the mark then covers every delivery.
  The same with intents, as a journal of schema 1 leaves them: the one in place becomes a
  delivery and its actions run; the other is dropped.
- Retention on channel "short" (max_age 1s): the delivered product is deleted, its empty
  directories pruned up to dest, its journal row marked 'deleted'; an old file the daemon did
  not deliver stays.

usage: test_actions.py BUILD_DIR"""

import json
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from status_common import get, http_port, make_products, metric_value  # noqa: E402

RECORD = r'''#!PYTHON
import json, os, sys
rec = {"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("MCDIST_")}}
with open(os.environ["LOGFILE"], "a") as f:
    f.write(json.dumps(rec) + "\n")
'''

FAIL = r'''#!PYTHON
import os, sys
with open(os.environ["FAILLOG"], "a") as f:
    f.write(os.environ["MCDIST_ATTEMPT"] + "\n")
print("failing on purpose for", os.environ["MCDIST_RELPATH"])
sys.exit(3)
'''

BLOCK = r'''#!PYTHON
import os, sys
log = os.environ["BLOCKLOG"]
with open(log, "a") as f:
    f.write("start %d\n" % os.getpid())
with open(os.environ["FIFO"]) as f:
    f.read()
with open(log, "a") as f:
    f.write("done %d\n" % os.getpid())
'''


def write_script(path, text):
    with open(path, "w") as f:
        f.write(text.replace("PYTHON", sys.executable))
    os.chmod(path, 0o755)


def runs(db, action=None):
    con = sqlite3.connect(db, timeout=5)
    try:
        q = ("SELECT r.action, r.state, r.attempt, r.exit_status, r.error, d.relpath "
             "FROM action_runs r JOIN deliveries d ON d.id = r.delivery_id")
        rows = con.execute(q).fetchall()
    finally:
        con.close()
    return [r for r in rows if action is None or r[0] == action]


def query(db, sql, args=()):
    con = sqlite3.connect(db, timeout=5)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def check_config(bin_dir, base, text, want_ok, needle=""):
    path = os.path.join(base, "check.toml")
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([os.path.join(bin_dir, "receiver", "mcdistd"), "--check-config", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
    out = p.stdout.decode()
    if want_ok:
        check(p.returncode == 0, "--check-config refused a valid config (%d): %s" % (p.returncode, out))
    else:
        check(p.returncode == 2, "--check-config accepted a bad config (%d): %s\n%s" % (p.returncode, out, text))
        check(needle in out, "--check-config message lacks '%s': %s" % (needle, out))
    return out


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    rng = random.Random(10)
    base = tempfile.mkdtemp(prefix="mcdist-actions-")
    daemon = None
    try:
        root = os.path.join(base, "site")
        d_main = os.path.join(root, "dest-main")
        d_short = os.path.join(root, "dest-short")
        temp = os.path.join(root, "temp")
        out = os.path.join(root, "out")
        for d in (d_main, d_short, temp, out):
            os.makedirs(d)
        journal = os.path.join(root, "journal.db")
        record, failer, blocker = (os.path.join(base, n) for n in ("record.py", "fail.py", "block.py"))
        write_script(record, RECORD)
        write_script(failer, FAIL)
        write_script(blocker, BLOCK)
        fifo = os.path.join(base, "fifo")
        os.mkfifo(fifo)
        env = dict(os.environ, LOGFILE=os.path.join(base, "record.log"),
                   FAILLOG=os.path.join(base, "fail.log"), BLOCKLOG=os.path.join(base, "block.log"),
                   FIFO=fifo)
        g_main, g_short = free_group(), free_group()
        while g_short.split(":")[0] == g_main.split(":")[0]:
            g_short = free_group()
        head = ('id = "site-act"\ninterface = "127.0.0.1"\ntemp = "%s"\nstatus_file = "%s"\n'
                'status_interval = "1s"\nhttp = "127.0.0.1:0"\njournal = "%s"\nsync = "none"\n'
                'allow_unsigned = true\n[retention]\ninterval = "200ms"\n'
                '[[channel]]\nname = "main"\ngroup = "%s"\ndest = "%s"\n'
                '[[channel]]\nname = "short"\ngroup = "%s"\ndest = "%s"\n'
                '[channel.retention]\nmax_age = "1s"\n'
                % (temp, os.path.join(root, "status.json"), journal, g_main, d_main, g_short, d_short))
        actions = (
            '[[action]]\nname = "ingest"\nchannel = "main"\nmatch = \'obs/(\\d+)/(\\w+)\\.bufr$\'\n'
            'exec = ["%s", "{path}", "{1}", "{2}", "{relpath}", "{channel}", "{session}", "{{x}}"]\n'
            '[[action]]\nname = "lnk"\nchannel = "*"\nmatch = \'^p1/obs/(\\d+)/(.*)$\'\n'
            'link = "%s/links/%%Y/{1}-{2}"\n'
            '[[action]]\nname = "cp"\nmatch = \'grib/(\\w+)\\.grib2$\'\n'
            'copy = "%s/copies/{1}/%%Y%%m%%d.grib2"\n'
            '[[action]]\nname = "bad"\nmatch = "^p1/bad/"\nexec = ["%s"]\nretries = 2\n'
            'retry_delay = "50ms"\n'
            '[[action]]\nname = "slow"\nmatch = "^p1/hold/"\nexec = ["%s", "{path}"]\n'
            'timeout = "60s"\n' % (record, out, out, failer, blocker))
        config = head + actions

        # --check-config: each broken action refused with its name; the real one accepted.
        check_config(bin_dir, base, config, True)
        for bad, needle in (
                ('[[action]]\nname = "x"\nmatch = "a(("\nexec = ["%s"]\n' % record, "match"),
                ('[[action]]\nname = "x"\nmatch = "a"\nexec = ["record.py"]\n', "absolute"),
                ('[[action]]\nname = "x"\nmatch = "a"\nexec = ["%s/none"]\n' % base, "not an executable"),
                ('[[action]]\nname = "x"\nmatch = "a"\nexec = ["%s", "{pth}"]\n' % record, "{pth}"),
                ('[[action]]\nname = "x"\nmatch = "a"\ncopy = "/x/%Q"\n', "%Q"),
                ('[[action]]\nname = "x"\nmatch = "a"\ncopy = "x/{0}"\n', "absolute"),
                ('[[action]]\nname = "x"\nchannel = "nope"\nmatch = "a"\ncopy = "/x/{0}"\n', "nope")):
            msg = check_config(bin_dir, base, head + bad, False, needle)
            check("'x'" in msg, "the message must name the action: " + msg)
        log("--check-config: 7 broken actions refused, the test's config accepted")

        daemon = ConfigDaemon(bin_dir, root, config, env, "site-act")
        port = http_port(daemon)

        # Session 1 on "main".
        src = os.path.join(base, "p1")
        names = ["obs/2026/a.bufr", "obs/2026/b.bufr", "grib/t2m.grib2", "bad/x.dat", "hold/h.dat"]
        make_products(src, names, rng, size=4000)
        code, _, text = run_sender(bin_dir, [src], g_main, [daemon.id], rate="100M",
                                   extra=["--fallback", "off"])
        check(code == 0, "mcdist-send exited %d:\n%s" % (code, text))
        rels = ["p1/" + n for n in names]
        for r in rels:
            check(os.path.isfile(os.path.join(d_main, r)), r + " not delivered")

        def settled():
            rs = runs(journal)
            st = {(a, rel): (s, att) for a, s, att, _, _, rel in rs}
            return (len(rs) == 7 and all(st.get((a, r)) == ("done", 1) for a, r in (
                ("ingest", rels[0]), ("ingest", rels[1]), ("lnk", rels[0]), ("lnk", rels[1]),
                ("cp", rels[2]))) and st.get(("bad", rels[3])) == ("failed", 3)
                and st.get(("slow", rels[4]), ("", 0))[0] == "running"
                and os.path.exists(env["BLOCKLOG"]))
        wait_for("the actions of session 1", settled, 20, daemon)
        log("journal: 7 runs: ingest x2, lnk x2, cp done at attempt 1; bad failed after 3; slow running")

        # exec: once per product, with its arguments and environment.
        with open(env["LOGFILE"]) as f:
            recs = [json.loads(line) for line in f]
        check(len(recs) == 2, "ingest ran %d times, not 2: %s" % (len(recs), recs))
        recs.sort(key=lambda r: r["argv"][0])
        for rec, rel, stem in zip(recs, rels[:2], ("a", "b")):
            path = os.path.join(d_main, rel)
            a = rec["argv"]
            check(a[:5] == [path, "2026", stem, rel, "main"], "ingest argv %s" % a)
            check(len(a[5]) == 8 and all(c in "0123456789abcdef" for c in a[5]), "session %s" % a[5])
            check(a[6] == "{x}", "{{x}} must expand to {x}: %s" % a[6])
            e = rec["env"]
            check(e.get("MCDIST_PATH") == path and e.get("MCDIST_CHANNEL") == "main"
                  and e.get("MCDIST_SESSION") == a[5] and e.get("MCDIST_SHA256") == sha256_file(path),
                  "ingest environment %s" % e)
        log("exec: ran once per product, argv and MCDIST_* right")

        year = time.strftime("%Y", time.gmtime())
        for rel, stem in zip(rels[:2], ("a", "b")):
            lk = os.path.join(out, "links", year, "2026-%s.bufr" % stem)
            check(os.path.isfile(lk), "link %s missing" % lk)
            check(os.stat(lk).st_ino == os.stat(os.path.join(d_main, rel)).st_ino,
                  "link %s is not a hard link of the product" % lk)
        cps = os.listdir(os.path.join(out, "copies", "t2m"))
        check(len(cps) == 1 and cps[0].startswith(year) and cps[0].endswith(".grib2"),
              "copy target %s" % cps)
        cp = os.path.join(out, "copies", "t2m", cps[0])
        check(sha256_file(cp) == sha256_file(os.path.join(d_main, rels[2])), "copy content differs")
        check(os.stat(cp).st_ino != os.stat(os.path.join(d_main, rels[2])).st_ino, "copy is a link")
        log("link: hard links at %s/links/%s/2026-{a,b}.bufr; copy: %s" % (out, year, cp))

        bad = runs(journal, "bad")[0]
        check(bad[3] == 3 and "exit status 3" in (bad[4] or ""), "bad run row %s" % (bad,))
        with open(env["FAILLOG"]) as f:
            check(f.read().split() == ["1", "2", "3"], "the failing action's attempts")
        _, _, body = get(port, "/metrics")
        m = body.decode()
        check(metric_value(m, "mcdist_receiver_actions_total", {"action": "bad", "result": "retry"}) == 2
              and metric_value(m, "mcdist_receiver_actions_total", {"action": "bad", "result": "failed"}) == 1
              and metric_value(m, "mcdist_receiver_actions_total", {"action": "ingest", "result": "done"}) == 2,
              "actions metrics:\n" + "\n".join(l for l in m.splitlines() if "actions" in l))
        check("exit status 3" in daemon.log_text() and "failing on purpose" in daemon.log_text(),
              "the failure and the child's output must be logged")
        dl = query(journal, "SELECT relpath, sha256, channel, size FROM deliveries WHERE channel = 'main'")
        check(sorted(dl) == sorted((r, sha256_file(os.path.join(d_main, r)), "main", 4000) for r in rels),
              "delivery rows %s" % dl)
        check(query(journal, "SELECT count(*) FROM deliveries WHERE sender_key IS NOT NULL") == [(0,)],
              "an unsigned session's deliveries must have no sender_key")
        log("bad: 3 attempts, failed with exit status 3, counted in /metrics; 5 delivery rows")

        # SIGKILL while 'slow' blocks on the fifo; after the restart it runs again.
        first_pid = int(open(env["BLOCKLOG"]).read().split()[1])
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(10)
        daemon.logf.close()
        os.kill(first_pid, signal.SIGKILL)  # the orphaned first attempt (its own process group)
        # A crash between a rename and its journaling leaves an intent: one whose file is in
        # place with its digest becomes a delivery (its actions run), one without is dropped.
        c_rel = "p1/obs/2027/c.bufr"
        c_path = os.path.join(d_main, c_rel)
        os.makedirs(os.path.dirname(c_path))
        with open(c_path, "wb") as f:
            f.write(rng.randbytes(2500))
        os.utime(c_path, ns=(1700000000123456789, 1700000000123456789))
        # Journaled before a rename the crash cut short: above the confirmed mark, with runs.
        d_rel = "p1/obs/2027/d.bufr"
        d_path = os.path.join(d_main, d_rel)
        with open(d_path, "wb") as f:
            f.write(rng.randbytes(1500))
        os.utime(d_path, ns=(1700000000123456789, 1700000000123456789))
        con = sqlite3.connect(journal, timeout=5)
        for rel, size, digest in ((c_rel, 2500, sha256_file(c_path)), ("p1/gone.dat", 10, "00" * 32)):
            con.execute("INSERT INTO intents(channel, dest, relpath, size, mtime_ns, sha256, "
                        "session, created_at) VALUES('main', ?, ?, ?, ?, ?, '0000abcd', ?)",
                        (d_main, rel, size, 1700000000123456789, digest, time.time()))
        # A fifo where a delivery should be: start-up must not block opening it.
        fifo_rel = "p1/obs/2027/fifo.bufr"
        os.mkfifo(os.path.join(d_main, fifo_rel))
        for rel, size, digest in ((d_rel, 1500, sha256_file(d_path)),
                                  ("p1/obs/2027/gone2.bufr", 10, "00" * 32), (fifo_rel, 10, "00" * 32)):
            cur = con.execute("INSERT INTO deliveries(channel, dest, relpath, path, size, mtime_ns, "
                              "sha256, session, delivered_at) VALUES('main', ?, ?, ?, ?, ?, ?, "
                              "'0000abce', ?)", (d_main, rel, os.path.join(d_main, rel), size,
                                                 1700000000123456789, digest, time.time()))
            for action in ("ingest", "lnk"):
                con.execute("INSERT INTO action_runs(delivery_id, action, state) "
                            "VALUES(?, ?, 'pending')", (cur.lastrowid, action))
        con.commit()
        con.close()
        check(query(journal, "SELECT count(*) FROM deliveries WHERE id > (SELECT confirmed_through "
                    "FROM journal_state)") != [(0,)], "the rows written are above the confirmed mark")
        daemon.start()
        wait_for("the blocked action to start again",
                 lambda: open(env["BLOCKLOG"]).read().count("start") == 2, 15, daemon)
        with open(fifo, "w") as f:
            f.write("go\n")
        wait_for("the blocked action to finish", lambda: runs(journal, "slow")[0][1] == "done", 15, daemon)
        slow = runs(journal, "slow")[0]
        check(slow[2] == 2, "slow must be done at attempt 2: %s" % (slow,))
        check(open(env["BLOCKLOG"]).read().count("done") == 1, "the second attempt completed")
        for rel in (c_rel, d_rel):
            wait_for("the recovered delivery's actions (%s)" % rel,
                     lambda: sorted((a, s) for a, s, _, _, _, r in runs(journal) if r == rel)
                     == [("ingest", "done"), ("lnk", "done")], 15, daemon)
        check(query(journal, "SELECT count(*) FROM intents") == [(0,)], "intents left over")
        for rel in ("p1/obs/2027/gone2.bufr", fifo_rel):
            check(not query(journal, "SELECT 1 FROM deliveries WHERE relpath = ?", (rel,)),
                  "a delivery above the mark whose file is not in place must be deleted: " + rel)
        check(query(journal, "SELECT count(*) FROM action_runs WHERE delivery_id NOT IN "
                    "(SELECT id FROM deliveries)") == [(0,)], "its runs must go with it")
        check(query(journal, "SELECT confirmed_through = (SELECT MAX(id) FROM deliveries) "
                    "FROM journal_state") == [(1,)], "the mark must cover every delivery after the start")
        check(query(journal, "SELECT size, sha256 FROM deliveries WHERE relpath = ?", (d_rel,))
              == [(1500, sha256_file(d_path))], "the delivery in place is kept")
        check(query(journal, "SELECT session, sha256 FROM deliveries WHERE relpath = ?", (c_rel,))
              == [("0000abcd", sha256_file(c_path))], "the recovered delivery row")
        check(not query(journal, "SELECT 1 FROM deliveries WHERE relpath = 'p1/gone.dat'"),
              "an intent whose file is not in place must be dropped")
        with open(env["LOGFILE"]) as f:
            lines = [json.loads(line) for line in f]
        check(len(lines) == 4 and sorted(tuple(x["argv"][:3]) for x in lines[2:])
              == [(c_path, "2027", "c"), (d_path, "2027", "d")],
              "ingest must run once more for each recovered product and for nothing else: %s" % lines)
        log("deliveries above the mark and intents after a crash: the ones in place kept (their "
            "actions ran), the others deleted with their runs")
        with open(env["FAILLOG"]) as f:
            check(len(f.readlines()) == 3, "the failed action ran again after the restart")
        log("SIGKILL during an action: it ran again after the restart, done at attempt 2; "
            "done and failed runs did not run again")

        # Retention on "short": the delivered product goes, a file we did not deliver stays.
        manual = os.path.join(d_short, "manual", "old.dat")
        os.makedirs(os.path.dirname(manual))
        with open(manual, "wb") as f:
            f.write(b"not delivered by mcdistd")
        os.utime(manual, (time.time() - 86400, time.time() - 86400))
        src2 = os.path.join(base, "p2")
        make_products(src2, ["deep/r/a.dat"], rng, size=3000)
        code, _, text = run_sender(bin_dir, [src2], g_short, [daemon.id], rate="100M",
                                   extra=["--fallback", "off"])
        check(code == 0, "mcdist-send exited %d:\n%s" % (code, text))
        wait_for("retention of p2/deep/r/a.dat",
                 lambda: query(journal, "SELECT removed_reason FROM deliveries WHERE channel = 'short'")
                 == [("deleted",)], 15, daemon)
        check(not os.path.exists(os.path.join(d_short, "p2")), "empty directories must be pruned")
        check(os.path.isdir(d_short), "the destination root must stay")
        check(os.path.isfile(manual), "retention deleted a file mcdistd did not deliver")
        for r in rels:
            check(os.path.isfile(os.path.join(d_main, r)), "retention touched channel main: " + r)
        log("retention: the delivered product deleted and its directories pruned; the other file kept")

        # SIGTERM while 'slow' blocks: the daemon waits for the running attempt (its grace),
        # journals it done, and exits 0; nothing is left to run again at the next start.
        src3 = os.path.join(base, "third", "p1")
        make_products(src3, ["hold/h2.dat"], rng, size=1000)
        code, _, text = run_sender(bin_dir, [src3], g_main, [daemon.id], rate="100M",
                                   extra=["--fallback", "off"])
        check(code == 0, "mcdist-send exited %d:\n%s" % (code, text))
        wait_for("the third blocked attempt to start",
                 lambda: open(env["BLOCKLOG"]).read().count("start") == 3, 15, daemon)
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.wait_for_log("running action attempt(s) to finish", 10)
        with open(fifo, "w") as f:
            f.write("go\n")
        check(daemon.proc.wait(15) == 0, "mcdistd did not exit cleanly on SIGTERM")
        daemon.logf.close()
        h2 = [r for r in runs(journal, "slow") if r[5] == "p1/hold/h2.dat"]
        check(len(h2) == 1 and h2[0][1] == "done" and h2[0][2] == 1,
              "the attempt running at SIGTERM must finish and be journaled done at attempt 1: %s"
              % h2)
        check(open(env["BLOCKLOG"]).read().count("done") == 2, "the attempt must have completed")
        check(query(journal, "SELECT confirmed_through = (SELECT MAX(id) FROM deliveries) "
                    "FROM journal_state") == [(1,)],
              "a clean stop must leave every delivery confirmed (nothing for the next start to check)")
        log("SIGTERM during an action: it finished within the grace, done at attempt 1, exit 0")
        log("PASS")
        return 0
    finally:
        if daemon and daemon.alive():
            daemon.stop(signal.SIGKILL)
        # Any blocked action left behind (a failure above): let it end.
        try:
            fd = os.open(os.path.join(base, "fifo"), os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
