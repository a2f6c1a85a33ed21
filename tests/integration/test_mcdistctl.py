#!/usr/bin/env python3
"""mcdistctl against a control socket and against a journal alone.

A journal of known rows is written by mcdist_control_testd (tests/feed/control_testd.cpp, the
rows listed there), which then serves it on a Unix socket through feed/control_server, as
mcdist-feed does. mcdistctl's status, history, missing and resend are checked in table and JSON
form; then the server is stopped and the same commands run on the journal read-only: the same
rows, a note on stderr, resend refused. Also: with 8 idle connections held open (the server's
limit) `mcdistctl status` is still answered, the oldest idle connection closed for it;
--config supplies the socket and journal, a socket path that is a plain file, a journal that is
not one.

Usage: test_mcdistctl.py BUILD_DIR
"""

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import SKIP, check, fail, log  # noqa: E402

# feed/control_server.hpp control_limits::max_connections, as mcdist-feed runs it.
MAX_CONNECTIONS = 8


def main():
    build = os.path.abspath(sys.argv[1])
    ctl = os.path.join(build, "tools/mcdistctl/mcdistctl")
    testd = os.path.join(build, "tests/mcdist_control_testd")
    for b in (ctl, testd):
        if not os.path.exists(b):
            print("SKIPPED: %s not built" % b)
            return SKIP
    tmp = tempfile.mkdtemp(prefix="mcdistctl-")
    journal = os.path.join(tmp, "journal.db")
    sock = os.path.join(tmp, "control.sock")
    subprocess.run([testd, "populate", journal], check=True, timeout=30)

    def run(*args, want_rc=0, config=None):
        base = [ctl, "--config", config] if config else [ctl, "--socket", sock, "--journal", journal]
        p = subprocess.run(base + list(args), capture_output=True, text=True, timeout=30)
        check(p.returncode == want_rc, "mcdistctl %s: rc %d, want %d\nstdout: %s\nstderr: %s"
              % (" ".join(args), p.returncode, want_rc, p.stdout, p.stderr))
        return p

    def rows_json(*args):
        p = run(*args, "--json")
        j = json.loads(p.stdout)
        check(j["ok"] is True, "answer not ok: %s" % p.stdout)
        return j, p.stderr

    def table_rows(out):
        """Lines of the first table, split at the header's column starts."""
        lines = out.splitlines()
        header = lines[0]
        starts = [0] + [i for i in range(1, len(header))
                        if header[i] != " " and header[i - 1] == " " and header[i - 2] == " "]
        return header, starts, lines[1:]

    server = subprocess.Popen([testd, "serve", journal, sock], stdout=subprocess.PIPE, text=True)
    try:
        check(server.stdout.readline().strip() == "READY", "test server did not start")
        check((os.stat(sock).st_mode & 0o777) == 0o660, "socket mode is not 0660")

        # --- with the daemon ---
        st, err = rows_json("status")
        check(st["source"] == "daemon" and st["daemon"] is True, "status source: %s" % st)
        check(err == "", "stderr with the daemon up: %r" % err)
        ch = {c["channel"]: c for c in st["channels"]}
        check(ch["obs"]["last_seq"] == 2 and ch["obs"]["queued"] == 2 and ch["obs"]["sent"] == 3,
              "obs channel: %s" % ch["obs"])
        check(ch["nwp"]["sent"] == 2 and ch["nwp"]["last_seq"] == 1, "nwp channel: %s" % ch["nwp"])
        check([(s["site"], s["channel"]) for s in st["sites"]] ==
              [("dwd", "nwp"), ("dwd", "obs"), ("knmi", "obs")], "sites: %s" % st["sites"])
        out = run("status").stdout
        check(out.startswith("mcdist-feed: running\n"), "status table head: %s" % out)
        check("rate_bps: 100000000" in out, "daemon's extra key missing: %s" % out)

        # Idle connections up to the limit (a stuck script, a forgotten socat) do not lock the
        # operator out: the one idle longest makes room.
        idle = []
        try:
            for _ in range(MAX_CONNECTIONS):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sock)
                idle.append(s)
                time.sleep(0.05)  # accepted in this order
            started = time.monotonic()
            st, _ = rows_json("status")
            check(st["source"] == "daemon", "status with %d idle connections: %s"
                  % (MAX_CONNECTIONS, st))
            ready, _, _ = select.select([idle[0]], [], [], 5)
            check(ready and idle[0].recv(1) == b"", "the oldest idle connection was not closed")
            # The others stay (unless the 5 s a silent connection is given ran out meanwhile).
            if time.monotonic() - started < 4:
                ready, _, _ = select.select(idle[1:], [], [], 0)
                check(not ready, "other idle connections closed too: %d" % len(ready))
        finally:
            for s in idle:
                s.close()

        h, _ = rows_json("history", "--site", "dwd", "--since", "6h")
        got = [(r["name"], r["outcome"], r["reason"]) for r in h["rows"]]
        want = [("nwp/u10.grib2", "failed", "disk full"), ("nwp/t2m.grib2", "stored", ""),
                ("obs/b.bufr", "held", ""), ("obs/a.bufr", "stored", "")]
        check(got == want, "history dwd 6h: %s" % got)
        for k in ("product_id", "channel", "name", "size", "seq", "site", "outcome", "reason",
                  "at", "at_ns"):
            check(k in h["rows"][0], "history row lacks %s" % k)
        h, _ = rows_json("history", "--site", "dwd", "--since", "6h", "--product", "*.grib2")
        check([r["name"] for r in h["rows"]] == ["nwp/u10.grib2", "nwp/t2m.grib2"], "glob: %s" % h)
        h, _ = rows_json("history", "--site", "dwd", "--since", "90m")
        check([r["name"] for r in h["rows"]] == ["nwp/u10.grib2", "nwp/t2m.grib2"], "since: %s" % h)
        h, _ = rows_json("history", "--site", "knmi", "--since", "6h", "--channel", "nwp")
        check(h["rows"] == [], "knmi on nwp: %s" % h)
        h, _ = rows_json("history", "--site", "dwd", "--since", "6h", "--limit", "1")
        check(len(h["rows"]) == 1 and h["truncated"] is True, "limit: %s" % h)

        out = run("history", "--site", "dwd", "--since", "6h").stdout
        header, starts, lines = table_rows(out)
        check(header.split() == ["AT", "(UTC)", "CHANNEL", "SEQ", "OUTCOME", "SIZE", "PRODUCT",
                                 "REASON"], "history header: %r" % header)
        check(len(lines) == 5 and lines[-1].startswith("4 outcomes for dwd"), "rows: %s" % out)
        for line in lines[:4]:
            # Left-aligned columns start where their header starts.
            check(line[starts[1] - 1] == " " and line[starts[1]] != " ", "misaligned: %r" % line)
        check("nwp/u10.grib2" in lines[0] and "disk full" in lines[0] and "5.00 MiB" in lines[0],
              "first row: %r" % lines[0])

        m, _ = rows_json("missing", "--site", "dwd", "--since", "24h")
        check([(r["name"], r["last_outcome"], r["reason"]) for r in m["rows"]] ==
              [("nwp/u10.grib2", "failed", "disk full")], "missing dwd 24h: %s" % m["rows"])
        m, _ = rows_json("missing", "--site", "dwd", "--since", "48h")
        check([r["name"] for r in m["rows"]] == ["nwp/u10.grib2", "old.bufr"],
              "missing dwd 48h: %s" % m["rows"])
        m, _ = rows_json("missing", "--site", "knmi", "--since", "24h")
        check([(r["name"], r["last_outcome"]) for r in m["rows"]] == [("obs/b.bufr", "missed")],
              "missing knmi: %s" % m["rows"])
        out = run("missing", "--site", "knmi", "--since", "24h").stdout
        check("obs/b.bufr" in out and "seq gap 2-2" in out and
              "1 product missing at knmi" in out, "missing table: %s" % out)
        out = run("missing", "--site", "dwd", "--since", "30m").stdout
        check(out.startswith("nothing missing for dwd"), "nothing missing: %s" % out)

        r, _ = rows_json("resend", "--site", "dwd", "--product", "nwp/*", "--unicast")
        check(r["products"] == 2 and r["bytes"] == 8 << 20 and r["unicast"] is True,
              "resend glob: %s" % r)
        r, _ = rows_json("resend", "--site", "knmi", "--seq", "2", "--channel", "obs")
        check(r["products"] == 2, "resend seq: %s" % r)
        out = run("resend", "--site", "dwd", "--since", "3h").stdout
        check(out == "resend to dwd: 4 products (8.01 MiB) over multicast, session 0000beef\n",
              "resend table: %r" % out)
        # Usage errors never reach the daemon.
        run("resend", "--site", "dwd", want_rc=2)
        run("resend", "--site", "dwd", "--since", "1h", "--seq", "1-2", want_rc=2)
        run("resend", "--site", "dwd", "--seq", "5-2", want_rc=2)
        run("history", "--site", "dwd", "--since", "yesterday", want_rc=2)

        # --config names the socket and the journal.
        cfg = os.path.join(tmp, "feed.toml")
        with open(cfg, "w") as f:
            f.write('journal = "%s"\ncontrol_socket = "%s"\n[[channel]]\nname = "obs"\n'
                    % (journal, sock))
        p = run("--json", "status", config=cfg)
        check(json.loads(p.stdout)["source"] == "daemon", "--config socket: %s" % p.stdout)
        daemon_answers = {
            "history": rows_json("history", "--site", "dwd", "--since", "48h")[0]["rows"],
            "missing": rows_json("missing", "--site", "dwd", "--since", "48h")[0]["rows"],
        }
    finally:
        server.send_signal(signal.SIGTERM)
        rc = server.wait(timeout=10)
    check(rc == 0, "test server exit status %d" % rc)
    check(not os.path.exists(sock), "socket file left after stop")

    # --- without the daemon: the journal, read-only ---
    h, err = rows_json("history", "--site", "dwd", "--since", "48h")
    check(h["source"] == "journal", "offline source: %s" % h)
    check("answering from the journal" in err and journal in err, "offline note: %r" % err)
    check(h["rows"] == daemon_answers["history"], "offline history differs from the daemon's")
    m, _ = rows_json("missing", "--site", "dwd", "--since", "48h")
    check(m["rows"] == daemon_answers["missing"], "offline missing differs from the daemon's")
    st, _ = rows_json("status")
    check(st["daemon"] is False and len(st["channels"]) == 2, "offline status: %s" % st)
    out = run("status").stdout
    check(out.startswith("mcdist-feed: not running (from the journal)\n"), "status: %s" % out)
    p = run("history", "--site", "dwd", "--since", "6h")
    check("nwp/u10.grib2" in p.stdout and "answering from the journal" in p.stderr,
          "offline table: %s / %s" % (p.stdout, p.stderr))
    p = run("resend", "--site", "dwd", "--since", "1h", want_rc=1)
    check("resend needs the running mcdist-feed" in p.stderr, "offline resend: %s" % p.stderr)
    check(os.listdir(tmp).count("journal.db") == 1, "journal gone?")
    # The offline path did not write: no schema change, no new rows.
    p = run("--json", "status", config=cfg)
    check(json.loads(p.stdout)["source"] == "journal", "--config journal: %s" % p.stdout)

    # An operator who may read the journal but not write its directory (the daemon, down, has
    # removed the WAL index): the journal is read as an immutable file.
    if os.geteuid() == 0 and shutil.which("setpriv"):
        ro = os.path.join(tmp, "ro")
        os.makedirs(ro)
        os.chmod(tmp, 0o755)
        os.chmod(ro, 0o755)
        shutil.copy(journal, os.path.join(ro, "journal.db"))
        wal = journal + "-wal"
        check(not os.path.exists(wal) or os.path.getsize(wal) == 0,
              "the stopped server left a WAL to checkpoint")
        p = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", ctl,
                            "--socket", os.path.join(ro, "none.sock"), "--journal",
                            os.path.join(ro, "journal.db"), "--json", "missing", "--site", "dwd",
                            "--since", "48h"], capture_output=True, text=True, timeout=30)
        check(p.returncode == 0, "read-only directory: %s" % p.stderr)
        check(json.loads(p.stdout)["rows"] == daemon_answers["missing"],
              "read-only directory: other rows: %s" % p.stdout)
        check(os.listdir(ro) == ["journal.db"], "the reader wrote beside the journal: %s"
              % os.listdir(ro))
    else:
        log("not root or no setpriv: read-only directory case not run")

    # A socket path that is a plain file: unreachable, the journal answers.
    plain = os.path.join(tmp, "plain")
    open(plain, "w").close()
    p = subprocess.run([ctl, "--socket", plain, "--journal", journal, "--json", "status"],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and json.loads(p.stdout)["source"] == "journal",
          "plain-file socket: %s %s" % (p.stdout, p.stderr))
    # A journal that is not one: a clear error, rc 1.
    p = subprocess.run([ctl, "--socket", plain, "--journal", plain, "status"],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 1 and "cannot read the journal" in p.stderr,
          "bad journal: %s" % p.stderr)
    log("PASS: mcdistctl status/history/missing/resend via the socket and from the journal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
