#!/usr/bin/env python3
"""Silent sessions through the link emulator (docs/design-notes.md "Silent
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

With --signed the sessions are signed (mcdist-send --key, every mcdistd --trust): a silent
signed session then checks every block against signed block digests (docs/security.md "Block
digests"). With --before DIR every variant runs twice, side by side in the same run: first with
the build in DIR (e.g. main before a change), then with --build. Per run it also prints the bytes
authentication adds to the data on the wire (the GMAC tags of version-2 blocks, or the block
digest chunks, IP and UDP headers included, over the data and parity datagrams' wire bytes), the
sender's CPU time and the mean CPU time of a receiving mcdistd.

Re-runnable with one command (root, network namespaces named MCDIST_NETNS_PREFIX-..., default
"silent12"):

    tests/bench/silent_bench.py --build build
    tests/bench/silent_bench.py --build build --receivers 10 --variants 1:4%,2:2%
    tests/bench/silent_bench.py --build build --before ../main-build --signed --variants 2:2%,1:4%

Data set: --small files of 10 kB, --medium of 500 kB and --large of 5 MB (default 1000, 40, 2:
40 MB, 1042 files), written once under --work (tmpfs).
"""

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
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


def cpu_seconds(pid):
    """User + system CPU time of a running process, seconds (/proc/PID/stat fields 14 and 15)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_variant(args, src, digests, passes, overhead, build, label):
    n = args.receivers
    work = os.path.join(args.work, "run-%s-%d-%s" % (label, passes, overhead.rstrip("%")))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    linkem = os.path.join(args.build, "tests", "linkem", "mcdist-linkem")
    recv = os.path.join(build, "receiver", "mcdistd")
    send = os.path.join(build, "sender", "mcdist-send")
    trust = ["--trust", args.key + ".pub"] if args.signed else ["--allow-unsigned"]
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
                                os.path.join(d, "status.json"), "--sync", "none"] + trust,
            n, work, "r")
        time.sleep(2)  # the daemons join their group
        summary_path = os.path.join(work, "summary.json")
        # Passes 0: the peer, an ordinary session (registration, NAKs) of the same data, so the
        # receivers' counters are seen to count.
        mode = (["--silent-passes", str(passes)] if passes > 0 else
                ["--receivers", ",".join("h%d" % (i + 1) for i in range(n)), "--fallback", "off",
                 "--register-timeout", "30s"])
        cpu0 = children_cpu()
        t0, t1, finished, text = run_sender(
            ["ip", "netns", "exec", emu.ns(0), send, "-q", "--group", group, "--interface",
             emu.addr(0), "--rate", args.rate] + mode +
            (["--key", args.key] if args.signed else []) +
            ["--fec-k", str(args.fec_k), "--fec-depth", str(args.fec_depth), "--fec-overhead",
             overhead, "--summary-json", summary_path, src], args.cap)
        sender_cpu = children_cpu() - cpu0
        # Every daemon's session ends (END after the sender's linger, or the session timeout).
        deadline = time.time() + 90
        for _, _, d in daemons:
            while time.time() < deadline:
                st = read_json(os.path.join(d, "status.json"))
                if st and st["sessions_completed"] + st["sessions_failed"] >= 1:
                    break
                time.sleep(0.2)
        receiver_cpu = [cpu_seconds(p.pid) for p, _, _ in daemons]
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
    refused = {}
    for _, _, d in daemons:
        got += delivered(os.path.join(d, "dest"), digests)
        st = read_json(os.path.join(d, "status.json")) or {}
        incomplete += st.get("files_incomplete", 0)
        sent += st.get("datagrams_sent", 0)
        for k, v in st.get("not_authenticated", {}).items():
            refused[k] = refused.get(k, 0) + v
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)  # 20 copies of the set on tmpfs
    sources = s.get("source_datagrams", 0)
    parity = s.get("parity_datagrams", 0)
    if passes == 0:
        # An ordinary session also resends blocks NAKed by name: count them as overhead too.
        parity += s.get("repair_datagrams", 0) - (parity - s.get("proactive_parity", 0))
    # Authentication on the wire: the block digest chunks (IP and UDP headers included), or the
    # 16-byte GMAC tag of every version-2 data and parity datagram, over those datagrams' bytes.
    datagrams = s.get("data_datagrams", 0)
    data_bytes = s.get("data_bytes", s.get("bytes", 0) + parity_sent(s) * args.block_size)
    data_wire = data_bytes + datagrams * (20 + 28)
    bd = s.get("block_digests", {})
    if bd.get("enabled"):
        auth_bytes, auth_kind = bd.get("bytes", 0), "digests"
    elif s.get("signed"):
        auth_bytes, auth_kind = 16 * datagrams, "GMAC tags"
    else:
        auth_bytes, auth_kind = 0, "none"
    return {"label": label, "passes": passes, "overhead": overhead,
            "finished": finished and s.get("succeeded", False),
            "time": t1 - t0, "sources": sources, "parity": parity,
            "parity_share": parity / sources if sources else 0.0, "files": files * n,
            "delivered": got, "incomplete": incomplete, "daemons_sent": sent, "rx_link_packets": rx_up,
            "to_sender": to_sender, "sender_heard": s.get("silent_refused", 0),
            "auth_kind": auth_kind, "auth_share": auth_bytes / data_wire if data_wire else 0.0,
            "sender_cpu": sender_cpu, "receiver_cpu": sum(receiver_cpu) / max(1, len(receiver_cpu)),
            "refused": refused}


def parity_sent(s):
    return s.get("parity_datagrams", 0)


HEADER = ("| build | --silent-passes (0: ordinary session) | --fec-overhead | parity and repairs /"
          " sources | files delivered (files x receivers) | recorded incomplete | sent by the"
          " daemons (datagrams_sent) | packets the receivers' hosts sent (linkem) | packets"
          " delivered to the sender (linkem) | authentication / data on the wire | sender CPU |"
          " receiver CPU (mean) | sender run |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def fmt_row(r):
    return ("| %s | %d | %s | %.2f %% (%d / %d) | %.3f %% (%d / %d) | %d | %d | %d | %d |"
            " %.2f %% (%s) | %.2f s | %.2f s | %.1f s%s |") % (
        r["label"], r["passes"], r["overhead"], 100 * r["parity_share"], r["parity"], r["sources"],
        100.0 * r["delivered"] / max(r["files"], 1), r["delivered"], r["files"], r["incomplete"],
        r["daemons_sent"], r["rx_link_packets"], r["to_sender"], 100 * r["auth_share"],
        r["auth_kind"], r["sender_cpu"], r["receiver_cpu"], r["time"],
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
    ap.add_argument("--signed", action="store_true",
                    help="sign the sessions (mcdist-send --key, mcdistd --trust)")
    ap.add_argument("--before", help="a second build dir: each variant runs with it first, then "
                                     "with --build, side by side")
    ap.add_argument("--block-size", type=int, default=1400, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("silent_bench.py needs root (network namespaces)")
    os.environ.setdefault("MCDIST_NETNS_PREFIX", "silent12")
    os.makedirs(args.work, exist_ok=True)
    src, digests = make_dataset(args.work, [args.small, args.medium, args.large])
    if args.signed:
        args.key = os.path.join(args.work, "hub.key")
        if not os.path.exists(args.key):
            subprocess.run([os.path.join(args.build, "tools", "keygen", "mcdist-keygen"), args.key],
                           check=True, stdout=subprocess.DEVNULL)
    builds = ([("before", args.before)] if args.before else []) + [("after" if args.before else
                                                                   "build", args.build)]
    started = time.strftime("%Y-%m-%d %H:%M")
    rows = []
    log(HEADER)
    for v in args.variants.split(","):
        passes, overhead = v.split(":")
        for label, build in builds:
            r = run_variant(args, src, digests, int(passes), overhead, build, label)
            rows.append(r)
            log(fmt_row(r))
            if r["refused"]:
                log("  %s: not authenticated at the sites: %s" % (label, r["refused"]))
    print()
    print("Silent sessions, %s: %d receivers through mcdist-linkem, RTT %g ms, loss %g in bursts of "
          "mean %g, %s, --fec-k %d --fec-depth %d; %d files (%d x 10 kB, %d x 500 kB, %d x 5 MB)%s." % (
              started, args.receivers, args.rtt_ms, args.loss, args.burst, args.rate, args.fec_k,
              args.fec_depth, len(digests), args.small, args.medium, args.large,
              "; signed" if args.signed else ""))
    print(HEADER)
    for r in rows:
        print(fmt_row(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
