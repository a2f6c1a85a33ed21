#!/usr/bin/env python3
"""Integration: the unicast fallback's listener under a flood of silent connections.

A hostile helper opens 300 TCP connections (fallback_flood.py) or SCTP-over-UDP associations
(fallback_sctp_flood, usrsctp) to the sender's fallback listener, never says a word on them and
reopens each one as soon as the sender closes it, for the whole session; 10 s later a real site
(mcdistd, from 127.0.0.1) is started into the flooded listener, served over that transport from
the start (--unicast --fallback tcp|sctp). For each transport:
  - no flood: the site's time from its order, for comparison;
  - the 300 from one host (127.0.0.2): that host holds its 16 handshake slots and no more (the
    sender counts the rest as per_source_refused);
  - the 300 from 20 hosts (127.0.0.2 to .21, 15 each, under their share): together they fill
    the 256 slots, and every new connection takes the slot of the oldest one of the host
    holding the most (handshakes_evicted), the site's among them.
Each time the site must complete with every file's SHA-256 right, over a unicast path in the
sender's --summary-json, and under a flood the sender's fallback_refused counter for it must not
be 0. Before the per-source limit and eviction the flood held all 256 slots and the site failed
("did not connect for its unicast fallback after 10 orders"); over SCTP, before aborted
associations' sources left the UDP port's peer table at once, the flood's refused associations
filled it and the site's INITs were dropped (the same failure).

usage: test_fallback_flood.py BUILD_DIR"""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403

HERE = os.path.dirname(os.path.abspath(__file__))
FLOOD_CONNECTIONS = 300
# How long the flood runs before the site starts, s: long enough for the refused and evicted
# connections to pile up wherever the sender keeps anything of them (over SCTP its UDP port's
# peer table keeps each closed association's source a while).
FLOOD_HEAD_START_S = 10


def free_tcp_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def make_set(root, rng):
    sizes = [0, 1, 1400, 65_536, 65_537] + [10_000] * 40 + [1_000_000] * 2 + [5_000_000]
    for i, size in enumerate(sizes):
        write_random(os.path.join(root, "d%d" % (i % 3), "f%03d.bin" % i), size, rng)
    name = os.path.basename(root)
    return {name + "/" + p: h for p, h in tree_digests(root).items()}


def start_sender(bin_dir, src, group, rid, transport, port, summary, log_path):
    args = [os.path.join(bin_dir, "sender", "mcdist-send"), "--group", group, "--interface",
            "127.0.0.1", "--rate", "500M", "--summary-json", summary, "--no-progress",
            "--receivers", rid, "--unicast", "--fallback", transport, "--unicast-port",
            str(port), src]
    logf = open(log_path, "wb")
    return subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT), logf


def flood_command(bin_dir, transport, port, sources, ready):
    """The hostile helper: fallback_flood.py's TCP connections, or fallback_sctp_flood's
    associations (SCTP over UDP needs an SCTP stack to complete the handshake that takes a
    slot: usrsctp, in a program of its own)."""
    if transport == "tcp":
        return [sys.executable, os.path.join(HERE, "fallback_flood.py"), "127.0.0.1:%d" % port,
                "--connections", str(FLOOD_CONNECTIONS), "--sources", ",".join(sources),
                "--ready-file", ready]
    return [sctp_flood_program(bin_dir), "127.0.0.1:%d" % port, str(FLOOD_CONNECTIONS),
            ",".join(sources), ready]


def sctp_flood_program(bin_dir):
    return os.path.join(bin_dir, "tests", "common", "unicast", "fallback_sctp_flood")


def run_case(bin_dir, base, rng, name, sources, transport="tcp"):
    """One session to one site over `transport` from the start; `sources`: the flood's
    source addresses (empty: no flood). Returns (the site's completion and order times, s from
    the session's start; the summary's fallback_refused; the flood's stats; files)."""
    src = os.path.join(base, "src", name)
    want = make_set(src, rng)
    group = free_group()
    port = free_tcp_port()
    summary = os.path.join(base, name + "-summary.json")
    send_log = os.path.join(base, name + "-send.log")
    ready = os.path.join(base, name + "-flood-ready")
    flood_out = os.path.join(base, name + "-flood.out")
    flood = None
    d = None
    sender, sender_logf = None, None
    try:
        if sources:
            # To a file, not a pipe: a helper blocked on a full pipe would stop flooding.
            with open(flood_out, "wb") as f:
                flood = subprocess.Popen(flood_command(bin_dir, transport, port, sources, ready),
                                         stdout=f, stderr=subprocess.STDOUT)
        sender, sender_logf = start_sender(bin_dir, src, group, name, transport, port, summary,
                                           send_log)
        if flood:
            # The site comes into a listener the flood has filled: every flood connection
            # was established at least once (the sender registers nobody before the site).
            deadline = time.time() + 30
            while not os.path.exists(ready):
                check(time.time() < deadline, "the flood did not get its connections up")
                if flood.poll() is not None:
                    fail("the flood helper exited:\n" + read_text(flood_out))
                check(sender.poll() is None, "the sender exited early")
                time.sleep(0.02)
            time.sleep(FLOOD_HEAD_START_S)
        d = Daemon(bin_dir, base, name, group)
        try:
            code = sender.wait(180)
        except subprocess.TimeoutExpired:
            sender.kill()
            sender.wait()
            code = "timeout"
        sender_logf.close()
        out = read_text(send_log)
        stats = None
        if flood:
            flood.send_signal(signal.SIGTERM)
            flood.wait(30)
            fout = read_text(flood_out)
            lines = [l for l in fout.splitlines() if l.startswith("{")]
            check(lines, "the flood helper printed no stats:\n" + fout)
            stats = json.loads(lines[-1])
            flood = None
        check(code == 0, "%s: sender failed (%s):\n%s\n--- site:\n%s"
              % (name, code, out[-6000:], d.log_text()[-3000:]))
        with open(summary) as f:
            s = json.load(f)
        r = {x["id"]: x for x in s["receivers"]}[name]
        check(r["state"] == "completed", "%s: site %s: %s" % (name, r["state"], r.get("reason")))
        check(r["path"] == "unicast-" + transport,
              "%s: site's path %s, not unicast-%s" % (name, r["path"], transport))
        got = tree_digests(d.dest)
        missing = sorted(set(want) - set(got))
        check(not missing, "%s: missing %s" % (name, missing[:5]))
        bad = [p for p in want if got[p] != want[p]]
        check(not bad, "%s: SHA-256 differs for %s" % (name, bad[:5]))
        return (r["completion_seconds"], r["fallback"]["at_seconds"], s["fallback_refused"], stats,
                len(want))
    finally:
        if flood:
            flood.kill()
            flood.wait()
        if sender and sender.poll() is None:
            sender.kill()
            sender.wait()
        if sender_logf and not sender_logf.closed:
            sender_logf.close()
        if d:
            d.stop()


def flooded(bin_dir, base, rng, transport, name, sources, counter):
    """A flooded case: the site completes (run_case checks), and the sender's `counter` of
    fallback_refused is not zero. Returns the site's seconds from the order to completion."""
    seconds, order_s, refused, flood, _ = run_case(bin_dir, base, rng, name, sources, transport)
    log("%s: 300 silent %s from %d host%s: site completed %.2f s after its order; "
        "fallback_refused %s; flood %s" % (
            name, "connections" if transport == "tcp" else "associations", len(sources),
            "" if len(sources) == 1 else "s", seconds - order_s, refused,
            {k: v for k, v in flood.items() if k != "by_source"}))
    check(refused.get(counter, 0) > 0,
          "%s: the sender's fallback_refused.%s is 0: %s" % (name, counter, refused))
    check(flood["closed_by_server"] > 0, "%s: the sender closed none of the flood: %s"
          % (name, flood))
    return seconds - order_s


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-flood-")
    rng = random.Random(300)
    one_host = ["127.0.0.2"]
    # 15 each: under the per-source share of 16, 300 together over the total of 256.
    many_hosts = ["127.0.0.%d" % i for i in range(2, 22)]
    try:
        seconds, order_s, refused, _, files = run_case(bin_dir, base, rng, "tcp-calm", [])
        log("tcp-calm: no flood: the site completed %d files %.2f s after its order; "
            "fallback_refused %s" % (files, seconds - order_s, refused))
        flooded(bin_dir, base, rng, "tcp", "tcp-one-host", one_host, "per_source")
        flooded(bin_dir, base, rng, "tcp", "tcp-many-hosts", many_hosts, "evicted")
        if not os.path.exists(sctp_flood_program(bin_dir)):
            print("SKIPPED (in part): no %s to flood SCTP with; the TCP cases passed"
                  % sctp_flood_program(bin_dir))
            return SKIP
        seconds, order_s, _, _, _ = run_case(bin_dir, base, rng, "sctp-calm", [], "sctp")
        log("sctp-calm: no flood: the site completed %.2f s after its order" % (seconds - order_s))
        flooded(bin_dir, base, rng, "sctp", "sctp-one-host", one_host, "per_source")
        flooded(bin_dir, base, rng, "sctp", "sctp-many-hosts", many_hosts, "evicted")
        log("PASS: a site completes over TCP and over SCTP while 300 silent connections or "
            "associations flood the fallback listener from one host or from 20")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
