#!/usr/bin/env python3
"""Silent sessions through the link emulator (issue 12 item 3; docs/design-notes.md "Silent
sessions"): one sender and N receivers (default 20), each behind a link of 700 ms RTT with 1e-3
loss in Gilbert-Elliott bursts of mean 4 (mcdist-linkem 'delay=350ms,loss=1e-3,burst=4' on
both directions of every receiver), mcdist-send --silent-passes with --fec-k, the variants
given by --variants run one after the other in the same run.

Per variant it prints: the parity overhead (parity datagrams / source datagrams, from the
sender's summary), the share of file deliveries that arrived complete and SHA-256 identical
(files x receivers), the files the daemons recorded incomplete, and what the receivers sent:
the daemons' own count (status file datagrams_sent), the emulator's count of packets the
receivers' hosts put on their links ('up' packets_in) and of packets delivered to the sender's
host. A variant with 0 passes is the peer: an ordinary session (--receivers, NAKs, repairs) of
the same data with the same proactive parity, in the same run.

Re-runnable with one command (root, network namespaces named MCDIST_NETNS_PREFIX-..., default
"silent12"):

    tests/bench/silent_bench.py --build build
    tests/bench/silent_bench.py --build build --receivers 10 --variants 1:4%,2:2%

Data set: --small files of 10 kB, --medium of 500 kB and --large of 5 MB (default 1000, 40, 2:
40 MB, 1042 files), written once under --work (tmpfs).
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import time

from linkem_run import Emulator
from scale_real import run_sender, start_daemons, stop_daemons

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def log(*a):
    print(*a, flush=True)


def make_dataset(root, counts):
    """Files of 10 kB, 500 kB and 5 MB; returns (dir, {relpath: sha256 hex})."""
    src = os.path.join(root, "set")
    index = os.path.join(root, "digests.json")
    key = json.dumps(counts)
    if os.path.exists(index):
        with open(index) as f:
            saved = json.load(f)
        if saved.get("key") == key:
            return src, saved["digests"]
    shutil.rmtree(src, ignore_errors=True)
    out = {}
    seed = os.urandom(64)
    i = 0
    for size, n in zip((10_000, 500_000, 5_000_000), counts):
        for _ in range(n):
            rel = os.path.join("s%d" % size, "p%05d.bin" % i)
            data = (hashlib.sha512(seed + i.to_bytes(4, "big")).digest() * (size // 64 + 1))[:size]
            p = os.path.join(src, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
            out[rel] = hashlib.sha256(data).hexdigest()
            i += 1
    with open(index, "w") as f:
        json.dump({"key": key, "digests": out}, f)
    return src, out


def delivered(dest, digests):
    """Files of `digests` under dest/set with the right SHA-256."""
    n = 0
    for rel, dg in digests.items():
        try:
            with open(os.path.join(dest, "set", rel), "rb") as f:
                n += hashlib.sha256(f.read()).hexdigest() == dg
        except OSError:
            pass
    return n


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_variant(args, src, digests, passes, overhead):
    n = args.receivers
    work = os.path.join(args.work, "run-%d-%s" % (passes, overhead.rstrip("%")))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    linkem = os.path.join(args.build, "tests", "linkem", "mcdist-linkem")
    recv = os.path.join(args.build, "receiver", "mcdistd")
    send = os.path.join(args.build, "sender", "mcdist-send")
    spec = "h1-h%d:delay=%gms,loss=%g,burst=%g" % (n, args.rtt_ms / 2, args.loss, args.burst)
    stats = os.path.join(work, "linkem.json")
    emu = Emulator(linkem, work, [spec], hosts=n + 1, seed=args.seed, stats_json=stats)
    group = "239.192.90.1:4790"
    try:
        daemons = start_daemons(
            args, lambda i, d: ["ip", "netns", "exec", emu.ns(i + 1), recv, "--id", "h%d" % (i + 1),
                                "--group", group, "--interface", emu.addr(i + 1), "--dest",
                                os.path.join(d, "dest"), "--temp", os.path.join(d, "temp"),
                                "--http", "off", "--status-interval", "1s", "--status-file",
                                os.path.join(d, "status.json"), "--sync", "none"],
            n, work, "r")
        time.sleep(2)  # the daemons join their group
        summary_path = os.path.join(work, "summary.json")
        # Passes 0: the peer, an ordinary session (registration, NAKs) of the same data, so the
        # receivers' counters are seen to count.
        mode = (["--silent-passes", str(passes)] if passes > 0 else
                ["--receivers", ",".join("h%d" % (i + 1) for i in range(n)), "--fallback", "off",
                 "--register-timeout", "30s"])
        t0, t1, finished, text = run_sender(
            ["ip", "netns", "exec", emu.ns(0), send, "-q", "--group", group, "--interface",
             emu.addr(0), "--rate", args.rate] + mode +
            ["--fec-k", str(args.fec_k), "--fec-depth", str(args.fec_depth), "--fec-overhead",
             overhead, "--summary-json", summary_path, src], args.cap)
        # Every daemon's session ends (END after the sender's linger, or the session timeout).
        deadline = time.time() + 90
        for _, _, d in daemons:
            while time.time() < deadline:
                st = read_json(os.path.join(d, "status.json"))
                if st and st["sessions_completed"] + st["sessions_failed"] >= 1:
                    break
                time.sleep(0.2)
        stop_daemons(daemons)
    finally:
        emu.stop()
    s = read_json(summary_path) or {}
    with open(stats) as f:
        ls = json.load(f)
    hosts = {h["name"]: h for h in ls["hosts"]}
    rx_up = sum(hosts["h%d" % (i + 1)]["up"]["packets_in"] for i in range(n))
    to_sender = hosts["h0"]["down"]["delivered"]
    files = len(digests)
    got = incomplete = sent = 0
    for _, _, d in daemons:
        got += delivered(os.path.join(d, "dest"), digests)
        st = read_json(os.path.join(d, "status.json")) or {}
        incomplete += st.get("files_incomplete", 0)
        sent += st.get("datagrams_sent", 0)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)  # 20 copies of the set on tmpfs
    sources = s.get("source_datagrams", 0)
    parity = s.get("parity_datagrams", 0)
    if passes == 0:
        # An ordinary session also resends blocks NAKed by name: count them as overhead too.
        parity += s.get("repair_datagrams", 0) - (parity - s.get("proactive_parity", 0))
    return {"passes": passes, "overhead": overhead, "finished": finished and s.get("succeeded", False),
            "time": t1 - t0, "sources": sources, "parity": parity,
            "parity_share": parity / sources if sources else 0.0, "files": files * n,
            "delivered": got, "incomplete": incomplete, "daemons_sent": sent, "rx_link_packets": rx_up,
            "to_sender": to_sender, "sender_heard": s.get("silent_refused", 0)}


HEADER = ("| --silent-passes (0: ordinary session) | --fec-overhead | parity and repairs / sources |"
          " files delivered (files x receivers) | recorded incomplete | sent by the daemons"
          " (datagrams_sent) | packets the receivers' hosts sent (linkem) | packets delivered to"
          " the sender (linkem) | sender run |\n"
          "|---|---|---|---|---|---|---|---|---|")


def fmt_row(r):
    return "| %d | %s | %.2f %% (%d / %d) | %.3f %% (%d / %d) | %d | %d | %d | %d | %.1f s%s |" % (
        r["passes"], r["overhead"], 100 * r["parity_share"], r["parity"], r["sources"],
        100.0 * r["delivered"] / max(r["files"], 1), r["delivered"], r["files"], r["incomplete"],
        r["daemons_sent"], r["rx_link_packets"], r["to_sender"], r["time"],
        "" if r["finished"] else " (failed)")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--work", default="/dev/shm/mcdist-silent")
    ap.add_argument("--receivers", type=int, default=20)
    ap.add_argument("--rtt-ms", type=float, default=700)
    ap.add_argument("--loss", type=float, default=1e-3)
    ap.add_argument("--burst", type=float, default=4)
    ap.add_argument("--rate", default="100M")
    ap.add_argument("--fec-k", type=int, default=128)
    ap.add_argument("--fec-depth", type=int, default=8)
    ap.add_argument("--variants", default="0:4%,1:4%,2:2%",
                    help="comma-separated PASSES:OVERHEAD pairs, run one after the other")
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--medium", type=int, default=40)
    ap.add_argument("--large", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7, help="the emulator's loss seed")
    ap.add_argument("--cap", type=float, default=300, help="seconds one sender run may take")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--keep", action="store_true",
                    help="keep each variant's daemons' trees and logs under --work")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("silent_bench.py needs root (network namespaces)")
    os.environ.setdefault("MCDIST_NETNS_PREFIX", "silent12")
    os.makedirs(args.work, exist_ok=True)
    src, digests = make_dataset(args.work, [args.small, args.medium, args.large])
    started = time.strftime("%Y-%m-%d %H:%M")
    rows = []
    log(HEADER)
    for v in args.variants.split(","):
        passes, overhead = v.split(":")
        r = run_variant(args, src, digests, int(passes), overhead)
        rows.append(r)
        log(fmt_row(r))
    print()
    print("Silent sessions, %s: %d receivers through mcdist-linkem, RTT %g ms, loss %g in bursts of "
          "mean %g, %s, --fec-k %d --fec-depth %d; %d files (%d x 10 kB, %d x 500 kB, %d x 5 MB)." % (
              started, args.receivers, args.rtt_ms, args.loss, args.burst, args.rate, args.fec_k,
              args.fec_depth, len(digests), args.small, args.medium, args.large))
    print(HEADER)
    for r in rows:
        print(fmt_row(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
