#!/usr/bin/env python3
"""Integration: per-channel session numbers and gap reports (protocol part).

Real mcdist-send sessions on channel "obs" numbered with --channel-seq, real mcdistd sites:
  - "steady" is up for every session;
  - "downtime" is up for sessions 1 and 2, stopped (SIGTERM) while 3 and 4 are sent, and
    restarted before 5: its REGISTER in session 5 reports 3-4 missing and 2 as its last
    completed number, read back from TEMP/sequences after the restart;
  - "fresh" starts just before 5: a site new to the channel reports nothing missing.
The summary JSON of session 5 must show exactly that per site; the status file of "downtime"
shows the channel's last number and 2 missing sessions; a catch-up session (--catch-up 3-4,
--only downtime) clears them, so session 6 reports nothing missing for anyone.

usage: test_sequences.py BUILD_DIR"""

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403


def send(bin_dir, base, group, receivers, seq=None, catch_up=None, only=None):
    """One session of one small file on channel obs; returns the summary JSON."""
    tag = "seq%s" % seq if seq else "catchup"
    src = os.path.join(base, "src", tag)
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, "bulletin-%s.txt" % tag), "wb") as f:
        f.write(("observation bulletin of session %s\n" % tag).encode() * 50)
    extra = ["--channel", "obs", "--name", "hub", "--register-timeout", "10s"]
    if seq:
        extra += ["--channel-seq", str(seq)]
    if catch_up:
        extra += ["--catch-up", catch_up]
    if only:
        extra += ["--only", ",".join(only)]
        receivers = None
    code, summary, out = run_sender(bin_dir, [src], group, receivers, rate="100M", extra=extra,
                                    timeout=60)
    log(out)
    check(code == 0, "session %s: mcdist-send exited %d" % (tag, code))
    check(summary is not None, "session %s: no summary JSON" % tag)
    if seq:
        check(summary.get("channel") == "obs" and summary.get("channel_seq") == seq,
              "session %s: summary channel %s seq %s" % (tag, summary.get("channel"),
                                                        summary.get("channel_seq")))
    return {r["id"]: r for r in summary["receivers"]}


def wait_status(d, pred, timeout, what):
    deadline = time.time() + timeout
    status = None
    while time.time() < deadline:
        status = d.read_status()
        if status and pred(status):
            return status
        time.sleep(0.05)
    fail("%s: status never showed it within %s s: %s" % (what, timeout, status))


def obs_stream(status):
    rows = [q for q in status.get("sequences", []) if q["channel"] == "obs"]
    return rows[0] if len(rows) == 1 else None


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: no multicast on loopback")
        return SKIP
    started = time.time()
    base = tempfile.mkdtemp(prefix="mcdist-seq-")
    daemons = []
    try:
        group = free_group()
        steady = Daemon(bin_dir, base, "steady", group)
        downtime = Daemon(bin_dir, base, "downtime", group)
        daemons += [steady, downtime]

        for seq in (1, 2):
            by_id = send(bin_dir, base, group, ["steady", "downtime"], seq)
            for rid in ("steady", "downtime"):
                r = by_id[rid]
                check(r["state"] == "completed", "seq %d: %s %s" % (seq, rid, r["state"]))
                check(r["missing_seqs"] == [], "seq %d: %s missing %s" % (seq, rid, r["missing_seqs"]))
                check(r["last_seq"] == seq - 1, "seq %d: %s last_seq %s" % (seq, rid, r["last_seq"]))

        # The site goes down; 3 and 4 are sent without it.
        check(downtime.stop() == 0, "mcdistd downtime did not stop cleanly")
        with open(os.path.join(downtime.temp, "sequences")) as f:
            saved = f.read()
        check(saved.startswith("mcdist-sequences 1\nobs name:hub "), "TEMP/sequences: %r" % saved)
        for seq in (3, 4):
            by_id = send(bin_dir, base, group, ["steady"], seq)
            check(by_id["steady"]["state"] == "completed", "seq %d: steady incomplete" % seq)

        downtime.start()
        fresh = Daemon(bin_dir, base, "fresh", group)
        daemons.append(fresh)
        check("sequence state of 1 channel stream(s) loaded" in downtime.log_text(),
              "downtime did not load its sequence state:\n" + downtime.log_text()[-2000:])

        by_id = send(bin_dir, base, group, ["steady", "downtime", "fresh"], 5)
        for rid in ("steady", "downtime", "fresh"):
            check(by_id[rid]["state"] == "completed", "seq 5: %s %s" % (rid, by_id[rid]["state"]))
        check(by_id["downtime"]["missing_seqs"] == [[3, 4]],
              "seq 5: downtime missing_seqs %s, want [[3, 4]]" % by_id["downtime"]["missing_seqs"])
        check(by_id["downtime"]["last_seq"] == 2,
              "seq 5: downtime last_seq %s, want 2" % by_id["downtime"]["last_seq"])
        check(by_id["steady"]["missing_seqs"] == [] and by_id["steady"]["last_seq"] == 4,
              "seq 5: steady %s %s" % (by_id["steady"]["missing_seqs"], by_id["steady"]["last_seq"]))
        check(by_id["fresh"]["missing_seqs"] == [] and by_id["fresh"]["last_seq"] == 0,
              "seq 5: fresh %s %s" % (by_id["fresh"]["missing_seqs"], by_id["fresh"]["last_seq"]))
        check("never completed sessions 3-4" in downtime.log_text(),
              "downtime did not log its gap")

        st = wait_status(downtime, lambda s: (obs_stream(s) or {}).get("last_seq_completed") == 5,
                         10, "downtime after seq 5")
        q = obs_stream(st)
        check(q["last_seq_seen"] == 5 and q["missing_sessions"] == 2 and q["source"] == "name:hub",
              "downtime status after seq 5: %s" % q)
        st = wait_status(fresh, lambda s: (obs_stream(s) or {}).get("last_seq_completed") == 5,
                         10, "fresh after seq 5")
        check(obs_stream(st)["missing_sessions"] == 0, "fresh status: %s" % obs_stream(st))

        # Catch-up: 3 and 4 again for downtime only; it stops reporting them.
        by_id = send(bin_dir, base, group, None, None, catch_up="3-4", only=["downtime"])
        check(by_id["downtime"]["state"] == "completed", "catch-up: downtime %s" % by_id["downtime"])
        wait_status(downtime, lambda s: (obs_stream(s) or {}).get("missing_sessions") == 0, 10,
                    "downtime after the catch-up")
        by_id = send(bin_dir, base, group, ["steady", "downtime", "fresh"], 6)
        for rid in ("steady", "downtime", "fresh"):
            check(by_id[rid]["missing_seqs"] == [], "seq 6: %s missing %s" % (rid, by_id[rid]["missing_seqs"]))
        check(by_id["downtime"]["last_seq"] == 5, "seq 6: downtime last_seq %s" % by_id["downtime"]["last_seq"])

        for d in daemons:
            d.stop()
        log("PASS in %.1f s" % (time.time() - started))
        return 0
    finally:
        for d in daemons:
            d.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
