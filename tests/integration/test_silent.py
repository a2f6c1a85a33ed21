#!/usr/bin/env python3
"""Integration: a silent session (mcdist-send --silent-passes 2 with --fec-k and 5 % parity per
pass; docs/design-notes.md "Silent sessions") to three real mcdistd over loopback multicast:

- "clean", on an ordinary channel: the announce alone makes the session silent there;
- "quiet", clean, from a TOML config whose channel says silent = true (its log names the
  channel silent);
- "lossy", dropping 2 %, and "hopeless", dropping 15 %: more than two passes of 5 % parity
  repair, so it must record the files it could not complete.

Asserted: every file the clean, quiet and lossy sites hold is SHA-256 identical to the source
and none is missing; the hopeless site holds only identical files and records the rest
(files_incomplete, a log line naming the session); no daemon sent a single datagram
(datagrams_sent and naks_sent 0 in each status file) and the sender received none
(silent_refused and every control counter 0); the sender sent exactly 2 passes and exited 0.

Then a signed silent session (mcdist-send --key) to a site that trusts only that key and drops
2 %: it never gets the session key, checks every block and parity block against the signed block
digests sent ahead of it (docs/security.md "Block digests"; none refused), verifies each file
against the signed manifest, delivers every file identically and sends nothing (no key request
either). test_silent_forge.py adds a forger.

usage: test_silent.py BUILD_DIR"""

import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403


def signed_run(bin_dir, base, src, want):
    """A signed silent session to a trusting, lossy site: see the module's docstring."""
    key = os.path.join(base, "hub.key")
    subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), key],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    group = free_group()
    site = Daemon(bin_dir, base, "signed", group,
                  ["--trust", key + ".pub", "--drop-rate", "0.02", "--drop-seed", "7"])
    try:
        send_silent(bin_dir, [src], group, key=key, what="signed: ")
        wait_for("signed: the session's end", lambda: sessions_over(site), 30, site)
    finally:
        site.stop()
    st = site.read_status()
    log("signed: stored %d, incomplete %d; parity %s; not authenticated %s; sent %d datagrams"
        % (st["files_stored"], st["files_incomplete"], st["parity"], st.get("not_authenticated"),
           st["datagrams_sent"]))
    check(st["datagrams_sent"] == 0, "signed: the site sent %d datagrams" % st["datagrams_sent"])
    got = tree_digests(site.dest)
    check(got == want, "signed: delivered files differ from the source")
    check(st["parity"]["blocks_recovered"] > 0, "signed: no block recovered from parity")
    check(st["block_digests"]["blocks_checked"] > 0, "signed: no block checked against a digest")
    refused = st["not_authenticated"]
    check(refused["bad_digest"] == 0, "signed: real blocks refused as bad_digest: %s" % refused)


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-silent-",
                            dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        rng = random.Random(12)
        src = os.path.join(base, "products")
        sizes = [0, 1, 1400, 10_000] * 3 + [300_000] * 4 + [1_000_000]
        for i, size in enumerate(sizes):
            write_random(os.path.join(src, "d%d" % (i % 3), "p%03d.bin" % i), size, rng)
        want = {"products/" + p: h for p, h in tree_digests(src).items()}
        group = free_group()
        quiet_root = os.path.join(base, "quiet")
        os.makedirs(os.path.join(quiet_root, "dest"))
        os.makedirs(os.path.join(quiet_root, "temp"))
        config = ("id = \"quiet\"\ninterface = \"127.0.0.1\"\ndest = \"%s\"\ntemp = \"%s\"\n"
                  "status_file = \"%s\"\nstatus_interval = \"1s\"\nallow_unsigned = true\n"
                  "[[channel]]\nname = \"oneway\"\ngroup = \"%s\"\nsilent = true\n"
                  % (os.path.join(quiet_root, "dest"), os.path.join(quiet_root, "temp"),
                     os.path.join(quiet_root, "status.json"), group))
        daemons = []
        try:
            # Started inside the try: a daemon that fails to start stops the ones before it.
            daemons.append(Daemon(bin_dir, base, "clean", group))
            daemons.append(Daemon(bin_dir, base, "lossy", group,
                                  ["--drop-rate", "0.02", "--drop-seed", "3"]))
            daemons.append(Daemon(bin_dir, base, "hopeless", group,
                                  ["--drop-rate", "0.15", "--drop-seed", "5",
                                   "--session-timeout", "5s"]))
            quiet = ConfigDaemon(bin_dir, quiet_root, config, dict(os.environ), "quiet")
            quiet.dest = os.path.join(quiet_root, "dest")
            daemons.append(quiet)
            check("channel oneway: silent" in quiet.log_text(), "quiet: the channel is not silent")
            summary = send_silent(bin_dir, [src], group)
            check(summary["silent_passes"] == 2, "silent_passes %s" % summary["silent_passes"])
            check(summary["passes"] == 2, "the sender sent %d passes, not 2" % summary["passes"])
            check(summary["receivers"] == [], "a silent session lists receivers")
            check(all(v == 0 for v in summary["control_received"].values()),
                  "control received: %s" % summary["control_received"])
            check(summary["dropped"] == {}, "sender dropped %s" % summary["dropped"])
            parity = summary["parity_datagrams"]
            sources = summary["source_datagrams"]
            # Two passes of ceil(5 % of each FEC block's sources): 4 of 64, 1 of the 17-source
            # FEC blocks of the last group, so 10-13 % of the sources.
            check(0.10 * sources <= parity <= 0.13 * sources,
                  "%d parity datagrams for %d sources: not two passes of about 5 %%"
                  % (parity, sources))
            statuses = {}
            for d in daemons:
                statuses[d.id] = wait_for("%s: the session's end" % d.id,
                                          lambda d=d: sessions_over(d), 30, d)
        finally:
            for d in daemons:
                d.stop()
        for d in daemons:
            st = d.read_status()  # written once more at exit
            check(st is not None, "%s: no status file" % d.id)
            log("%s: stored %d, incomplete %d, failed %d; parity %s; dropped by --drop-rate %d; "
                "sent %d datagrams, %d NAKs, %d suppressed"
                % (d.id, st["files_stored"], st["files_incomplete"], st["files_failed"],
                   st["parity"], st["dropped_by_drop_rate"], st["datagrams_sent"],
                   st["naks_sent"], st["silent_suppressed"]))
            check(st["datagrams_sent"] == 0, "%s sent %d datagrams" % (d.id, st["datagrams_sent"]))
            check(st["naks_sent"] == 0, "%s sent %d NAKs" % (d.id, st["naks_sent"]))
            got = tree_digests(d.dest)
            bad = [p for p in got if want.get(p) != got[p]]
            check(not bad, "%s: files that are not the source's: %s" % (d.id, bad[:5]))
            if d.id == "hopeless":
                check(st["files_incomplete"] > 0, "hopeless: no file recorded incomplete")
                check(len(got) + st["files_incomplete"] == len(want),
                      "hopeless: %d delivered + %d incomplete != %d files"
                      % (len(got), st["files_incomplete"], len(want)))
                check("files incomplete" in d.log_text(), "hopeless: no incomplete-files log line")
            else:
                check(set(got) == set(want), "%s: missing %s" % (d.id, sorted(set(want) - set(got))[:5]))
                check(st["files_incomplete"] == 0, "%s: files incomplete" % d.id)
        signed_run(bin_dir, base, src, want)
        lossy = statuses["lossy"]
        check(lossy["dropped_by_drop_rate"] > 0, "the lossy receiver dropped nothing")
        check(lossy["parity"]["blocks_recovered"] > 0, "lossy: no block recovered from parity")
        log("PASS: %d files delivered identically at three silent sites; the hopeless site "
            "recorded %d incomplete; no site sent a datagram"
            % (len(want), statuses["hopeless"]["files_incomplete"]))
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
