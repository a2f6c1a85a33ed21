#!/usr/bin/env python3
"""Benchmark: mcdist against UFTP 4.10 (Debian package uftp) on this machine, same run, same
rates, over loopback multicast to one receiver daemon each.

Work: one 1 GB file, and 1000 files of 10 kB. Rates: 500M, 1G, 2G and each program's maximum.
For every cell it prints wall time (process start to exit, start-up included), goodput (file
bytes x 8 / wall), passes, and sender + receiver CPU seconds, side by side, and the ratio.

NORM and UDPcast run beside them in the same rounds (tests/bench/peers.py says how each is
configured and why): NORM through tests/bench/norm (a libnorm file sender and receiver, built
with -DMCDIST_BENCH_PEERS=ON), UDPcast's udp-sender/udp-receiver (Debian udpcast; the 1 GB file
with --file, the 1000 files as a tar stream), each at the same rate (--max-bitrate; NORM's
NormSetTxRate), not at "max". --peers chooses them (default: those installed/built; "none").
Every program's delivery is verified by SHA-256 of every file against the source. CPU is
counted per process: the daemons' (mcdistd, uftpd) from /proc before and after the run, the
per-run processes' (NORM's, UDPcast's, the senders') from wait4; the tables give sender and
receiver CPU seconds per delivered GB beside goodput.

The data lives on tmpfs (/dev/shm) by default so the comparison measures the protocols, not the
disk; --dir puts it elsewhere. mcdistd still verifies SHA-256 and renames atomically (its sync
mode is "batch", range: free on tmpfs). UFTP receives straight into its destination.

Needs root (ip link set lo multicast on, which UFTP needs to see loopback as multicast-capable).

With --auth every cell also runs mcdist signed (mcdist-send --key, mcdistd --trust: Ed25519
announces, AES-256-GCM tags on every block; docs/security.md) and UFTP encrypted
(-Y aes256-gcm -h sha256, its ECDH key agreement), and the table shows them side by side.
With --encrypt (implies --auth) mcdist also runs encrypted (mcdist-send --encrypt --site-keys:
manifest sealed, every block AES-256-GCM-encrypted), the like of UFTP's -Y aes256-gcm.

With --disk DIR the same cells run twice, on tmpfs and with every tree (the data, mcdistd's
temp and destination, uftpd's destination) under DIR on a real disk (refused if DIR is on
tmpfs), with `sync` before every run so no run pays for the previous one's dirty pages, and a
last table puts them side by side: wall times, median of --repeat, and the ratio UFTP / mcdist.
mcdistd delivers durably (its --sync, default "batch": group commit); UFTP writes straight into
its destination and never syncs.

usage: uftp_compare.py [--build DIR] [--repeat N] [--rates 500M,1G,2G,max] [--only big|small]
                       [--auth] [--encrypt] [--disk DIR] [--mcdist-sync MODE]
                       [--peers norm,udpcast|none] [--norm-build DIR]
"""

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time

import peers

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

# What "max" means for each. UFTP's is -R -1 (unpaced, its fastest). mcdist's unpaced mode
# (--rate max) overruns its own receiver's socket buffer on this 2-core machine and repairs what
# was dropped: 1 GB took 5.6 s unpaced. Paced (medians of 3, 2026-11-22): 4G 2.14 s in one pass,
# 5G 2.04 s in two, 8G 1.3-6.0 s (the receiver falls behind in some runs and the repairs
# collapse the rate). Its maximum is the highest rate it sustains here in one pass: 4G.
DEFAULT_MAX = {"mcdist": "4G", "uftp": "-1"}


def ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0


class Child:
    """A long-running receiver process whose CPU time we sample."""

    def __init__(self, args, log):
        self.logf = open(log, "wb")
        self.proc = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        if self.proc.poll() is not None:
            sys.exit("receiver exited at start: %s (see %s)" % (" ".join(args), log))

    def cpu(self):
        return ticks(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.logf.close()


SYNC_EACH = False  # --sync-each: sync(2) before every run, outside the timed part


def sender_run(args):
    """Runs the sender, returns (code, wall, sender cpu, output)."""
    if SYNC_EACH:
        os.sync()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.returncode, wall, cpu, p.stdout.decode("utf-8", "replace")


def tree_sizes(root):
    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = os.path.getsize(p)
    return out


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                return h.hexdigest()
            h.update(b)


def uftp_rate(rate):
    """uftp -R is in units of 1024 bit/s ("Kbps": rate * 1024 / 8 bytes/s) and, like mcdist's
    --rate, counts whole IP packets (its datapacketsize adds the UDP and IP headers), so the same
    bit/s is -R rate / 1024."""
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    bps = float(rate[:-1]) * mult[rate[-1]] if rate[-1] in mult else float(rate)
    return str(int(round(bps / 1024)))


def uftp_passes(text):
    """The passes a uftp run made: the highest N of its "Starting pass N" lines (0: none)."""
    return max([int(l.split()[-1]) for l in text.splitlines() if l.startswith("Starting pass")] or [0])


def clear(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)


def need_programs(*paths):
    """Exits with a clear message unless every program in `paths` is built and executable."""
    for b in paths:
        if not os.access(b, os.X_OK):
            sys.exit("build mcdist first (deploy/build.sh): %s missing" % b)


def write_field(path, size):
    """Writes `size` bytes of incompressible content to `path` (a model field's stand-in),
    1 MiB at a time, no two MiB alike."""
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        left = size
        while left > 0:
            left -= f.write(chunk[:min(left, len(chunk))])
            chunk = hashlib.sha512(chunk[:64]).digest() * 16384  # vary content cheaply


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--dir", default="/dev/shm/mcdist-bench")
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell; the median is shown")
    ap.add_argument("--rates", default="500M,1G,2G,max")
    ap.add_argument("--mcdist-max", default=DEFAULT_MAX["mcdist"], help="mcdist --rate for 'max'")
    ap.add_argument("--uftp-max", default=DEFAULT_MAX["uftp"], help="uftp -R (Kbit/s) for 'max'")
    ap.add_argument("--only", choices=["big", "small"], default=None)
    ap.add_argument("--big-bytes", type=int, default=1_000_000_000)
    ap.add_argument("--auth", action="store_true",
                    help="also run mcdist signed and UFTP encrypted (aes256-gcm, sha256)")
    ap.add_argument("--encrypt", action="store_true",
                    help="also run mcdist encrypted (--encrypt); implies --auth")
    ap.add_argument("--disk", default=None, metavar="DIR",
                    help="run every cell on tmpfs and again under DIR (a real disk), side by side")
    ap.add_argument("--sync-each", action="store_true", help="sync(2) before every run")
    ap.add_argument("--mcdist-sync", default=None, metavar="MODE",
                    help="mcdistd --sync (batch, syncfs, fdatasync, range, uring, file, none)")
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)  # --disk's own runs
    ap.add_argument("--peers", default="norm,udpcast",
                    help="other peers in the same rounds: norm, udpcast (default both, where built "
                         "or installed), or none")
    ap.add_argument("--norm-build", default=None,
                    help="build tree holding tests/bench/norm (default: --build)")
    args = ap.parse_args()
    if args.encrypt:
        args.auth = True
    if args.disk:
        return disk_and_tmpfs(args)
    global SYNC_EACH
    SYNC_EACH = args.sync_each

    if os.geteuid() != 0:
        sys.exit("uftp_compare.py needs root (ip link set lo multicast on)")
    if not shutil.which("uftp"):
        sys.exit("uftp is not installed: deploy/install-deps.sh --bench")
    subprocess.run(["ip", "link", "set", "lo", "multicast", "on"], check=True)
    send = os.path.join(args.build, "sender", "mcdist-send")
    recv = os.path.join(args.build, "receiver", "mcdistd")
    need_programs(send, recv)
    wanted = [] if args.peers == "none" else args.peers.split(",")
    norm = peers.norm_programs(args.norm_build or args.build) if "norm" in wanted else None
    if "norm" in wanted and not norm:
        print("NORM peer not built: cmake -DMCDIST_BENCH_PEERS=ON, then ninja mcdist-norm-send "
              "mcdist-norm-recv (needs libnorm-dev); left out", flush=True)
    udpcast = "udpcast" in wanted and peers.udpcast_available()
    if "udpcast" in wanted and not udpcast:
        print("udpcast not installed (deploy/install-deps.sh --bench); left out", flush=True)

    base = args.dir
    clear(base)
    src_big = os.path.join(base, "src-big")
    src_small = os.path.join(base, "src-small")
    os.makedirs(src_big)
    write_field(os.path.join(src_big, "model_field.grib2"), args.big_bytes)
    for i in range(1000):
        d = os.path.join(src_small, "obs", "%02d" % (i % 20))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "bulletin_%04d.bufr" % i), "wb") as f:
            f.write(os.urandom(10_000))
    big_digest = digest(os.path.join(src_big, "model_field.grib2"))
    expected = {src_big: peers.tree_digests(src_big), src_small: peers.tree_digests(src_small)}

    md_dest, md_temp = os.path.join(base, "md-dest"), os.path.join(base, "md-temp")
    uf_dest = os.path.join(base, "uf-dest")
    for d in (md_dest, md_temp, uf_dest):
        clear(d)
    # Groups and ports of this run's own: two benches on one machine (several developers, or a
    # bench beside the integration tests) on fixed groups would receive each other's sessions.
    pick = random.Random(os.getpid() ^ int(time.time()))
    group = "239.192.%d.%d:%d" % (pick.randrange(1, 255), pick.randrange(1, 255), pick.randrange(20000, 40000))
    mcdistd = Child([recv, "--id", "bench", "--group", group, "--interface", "127.0.0.1",
                     "--dest", md_dest, "--temp", md_temp, "--status-interval", "1h", "--http", "off"]
                    + peers.allow_unsigned(recv)
                    + (["--sync", args.mcdist_sync] if args.mcdist_sync else []),
                    os.path.join(base, "mcdistd.log"))
    signed_group = "239.193.%d.%d:%d" % (pick.randrange(1, 255), pick.randrange(1, 255), pick.randrange(40000, 60000))
    hub_key = os.path.join(base, "hub.key")
    signed_dest, signed_temp = os.path.join(base, "md-signed-dest"), os.path.join(base, "md-signed-temp")
    signed_daemon = None
    site_key = os.path.join(base, "site.key")
    site_keys = os.path.join(base, "site-keys.txt")
    if args.auth:
        keygen = os.path.join(args.build, "tools", "keygen", "mcdist-keygen")
        subprocess.run([keygen, hub_key], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([keygen, site_key], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(site_keys, "w") as f:
            f.write("bench %s.pub\n" % site_key)
        for d in (signed_dest, signed_temp):
            clear(d)
        signed_daemon = Child([recv, "--id", "bench", "--group", signed_group, "--interface",
                               "127.0.0.1", "--dest", signed_dest, "--temp", signed_temp,
                               "--status-interval", "1h", "--http", "off", "--trust", hub_key + ".pub",
                               "--key", site_key],
                              os.path.join(base, "mcdistd-signed.log"))
    uftpd = Child(["uftpd", "-d", "-I", "127.0.0.1", "-M", "230.4.4.1", "-D", uf_dest, "-U",
                   "0x01020304", "-B", "104857600", "-q", "-x", "1"], os.path.join(base, "uftpd.log"))
    norm_group = "239.195.%d.%d:%d" % (pick.randrange(1, 255), pick.randrange(1, 255),
                                       2 * pick.randrange(10000, 20000))
    udp_portbase = 2 * pick.randrange(20000, 30000)
    udp_group = "239.196.%d.%d" % (pick.randrange(1, 255), pick.randrange(1, 255))

    cases = []
    if args.only in (None, "big"):
        cases.append(("1 GB file", src_big, args.big_bytes))
    if args.only in (None, "small"):
        cases.append(("1000 x 10 kB", src_small, 10_000_000))
    rates = args.rates.split(",")
    rows = []
    try:
        for label, src, nbytes in cases:
            for rate in rates:
                cell = {"mcdist": [], "uftp": [], "mcdist signed": [], "uftp encrypted": [],
                        "mcdist encrypted": [], "norm": [], "udpcast": []}
                for _ in range(args.repeat):
                    if args.encrypt:
                        clear(signed_dest)
                        mrate = args.mcdist_max if rate == "max" else rate
                        summary = os.path.join(base, "summary.json")
                        rcpu0 = signed_daemon.cpu()
                        code, wall, scpu, out = sender_run(
                            [send, "-q", "--group", signed_group, "--interface", "127.0.0.1", "--rate",
                             mrate, "--receivers", "bench", "--key", hub_key, "--site-keys", site_keys,
                             "--encrypt", "--summary-json", summary, src])
                        time.sleep(0.05)
                        rcpu = signed_daemon.cpu() - rcpu0
                        if code != 0:
                            sys.exit("encrypted mcdist-send failed (%d):\n%s" % (code, out))
                        with open(summary) as f:
                            passes = json.load(f)["passes"]
                        got = tree_sizes(os.path.join(signed_dest, os.path.basename(src)))
                        ok = sum(got.values()) == nbytes
                        if label.startswith("1 GB"):
                            ok = ok and digest(os.path.join(signed_dest, "src-big", "model_field.grib2")) == big_digest
                        cell["mcdist encrypted"].append((wall, passes, scpu + rcpu, ok))
                    if args.auth:
                        clear(signed_dest)
                        mrate = args.mcdist_max if rate == "max" else rate
                        summary = os.path.join(base, "summary.json")
                        rcpu0 = signed_daemon.cpu()
                        code, wall, scpu, out = sender_run(
                            [send, "-q", "--group", signed_group, "--interface", "127.0.0.1", "--rate",
                             mrate, "--receivers", "bench", "--key", hub_key, "--summary-json", summary, src])
                        time.sleep(0.05)
                        rcpu = signed_daemon.cpu() - rcpu0
                        if code != 0:
                            sys.exit("signed mcdist-send failed (%d):\n%s" % (code, out))
                        with open(summary) as f:
                            passes = json.load(f)["passes"]
                        got = tree_sizes(os.path.join(signed_dest, os.path.basename(src)))
                        cell["mcdist signed"].append((wall, passes, scpu + rcpu, sum(got.values()) == nbytes))
                        clear(uf_dest)
                        urate = args.uftp_max if rate == "max" else uftp_rate(rate)
                        rcpu0 = uftpd.cpu()
                        code, wall, scpu, out = sender_run(
                            ["uftp", "-I", "127.0.0.1", "-M", "230.4.4.1", "-P", "230.5.5.1", "-H",
                             "0x01020304", "-R", urate, "-Y", "aes256-gcm", "-h", "sha256", "-B",
                             "104857600", src])
                        time.sleep(0.05)
                        rcpu = uftpd.cpu() - rcpu0
                        upasses = uftp_passes(out)
                        got = tree_sizes(os.path.join(uf_dest, os.path.basename(src)))
                        cell["uftp encrypted"].append((wall, upasses, scpu + rcpu,
                                                       code == 0 and sum(got.values()) == nbytes))
                    # mcdist
                    clear(md_dest)
                    mrate = args.mcdist_max if rate == "max" else rate
                    summary = os.path.join(base, "summary.json")
                    rcpu0 = mcdistd.cpu()
                    code, wall, scpu, out = sender_run(
                        [send, "-q", "--group", group, "--interface", "127.0.0.1", "--rate", mrate,
                         "--receivers", "bench", "--summary-json", summary, src])
                    time.sleep(0.05)
                    rcpu = mcdistd.cpu() - rcpu0
                    if code != 0:
                        sys.exit("mcdist-send failed (%d):\n%s" % (code, out))
                    with open(summary) as f:
                        passes = json.load(f)["passes"]
                    ok = peers.verified_bytes(expected[src], md_dest) == nbytes
                    cell["mcdist"].append((wall, passes, scpu + rcpu, ok, scpu, rcpu))
                    # UFTP
                    clear(uf_dest)
                    urate = args.uftp_max if rate == "max" else uftp_rate(rate)
                    rcpu0 = uftpd.cpu()
                    code, wall, scpu, out = sender_run(
                        ["uftp", "-I", "127.0.0.1", "-M", "230.4.4.1", "-P", "230.5.5.1", "-H",
                         "0x01020304", "-R", urate, "-Y", "none", "-B", "104857600", src])
                    time.sleep(0.05)
                    rcpu = uftpd.cpu() - rcpu0
                    upasses = uftp_passes(out)
                    ok = code == 0 and peers.verified_bytes(expected[src], uf_dest) == nbytes
                    cell["uftp"].append((wall, upasses, scpu + rcpu, ok, scpu, rcpu))
                    if rate != "max" and norm:
                        cell["norm"].append(run_norm(norm, norm_group, src, expected[src], nbytes,
                                                     rate, os.path.join(base, "norm-dest"), base))
                    if rate != "max" and udpcast:
                        cell["udpcast"].append(run_udpcast(udp_group, udp_portbase, src,
                                                           expected[src], nbytes, rate,
                                                           os.path.join(base, "udp-dest"), base))
                rows.append((label, rate, mrate, urate, nbytes, cell))
                print_row(rows[-1], args.repeat)
    finally:
        md_rss = peak_rss_mib(mcdistd.proc.pid)
        mcdistd.stop()
        if signed_daemon:
            signed_daemon.stop()
        uftpd.stop()
    print()
    print_table(rows)
    if norm or udpcast:
        print()
        print_peer_table(rows)
    if args.auth:
        print()
        print_auth_table(rows)
    if args.encrypt:
        print()
        print_encrypt_table(rows)
    print()
    print("mcdistd peak resident set over the whole run: %.1f MiB" % md_rss)
    print("data on %s; %d run(s) per cell, median shown; wall time includes program start-up"
          % (base, args.repeat))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"work": r[0], "rate": r[1], "nbytes": r[4],
                        "mcdist": r[5]["mcdist"], "uftp": r[5]["uftp"]} for r in rows], f)
    shutil.rmtree(base, ignore_errors=True)


def run_norm(norm, group, src, expected, nbytes, rate, dest, base, timeout=600, cc_max=None):
    """One NORM transfer of src at a fixed rate (or NORM-CC up to cc_max) to one mcdist-norm-recv
    on loopback.
    @return (wall, watermark rounds, CPU s, verified, sender CPU s, receiver CPU s)"""
    send, recv = norm
    clear(dest)
    summary = os.path.join(base, "norm-summary.json")
    rlog = open(os.path.join(base, "norm-recv.log"), "wb")
    r = subprocess.Popen(peers.norm_recv_cmd(recv, group, "lo", 2, dest, len(expected),
                                             timeout=timeout), stdout=rlog, stderr=subprocess.STDOUT)
    time.sleep(0.3)
    if SYNC_EACH:
        os.sync()
    slog = open(os.path.join(base, "norm-send.log"), "wb")
    start = time.monotonic()
    s = subprocess.Popen(peers.norm_send_cmd(send, group, "lo", src, [2], rate=rate, cc_max=cc_max,
                                             grtt=0.001, summary=summary, timeout=timeout),
                         stdout=slog, stderr=subprocess.STDOUT)
    code, scpu, _ = peers.wait_rusage(s, timeout + 10)
    wall = time.monotonic() - start
    _, rcpu, _ = peers.wait_rusage(r, 15)
    rlog.close()
    slog.close()
    rounds = 0
    try:
        with open(summary) as f:
            rounds = json.load(f)["watermark_rounds"]
        os.unlink(summary)
    except (OSError, ValueError, KeyError):
        pass
    ok = code == 0 and peers.verified_bytes(expected, dest) == nbytes
    return (wall, rounds, scpu + rcpu, ok, scpu, rcpu)


def run_udpcast(mcast, portbase, src, expected, nbytes, rate, dest, base, timeout=600):
    """One UDPcast transfer of src (one file with --file, a set as a tar stream) to one
    udp-receiver on loopback. @return (wall, retransmitted packets, CPU s, verified, sender CPU
    s, receiver CPU s)"""
    clear(dest)
    send_args, what = peers.udpcast_send_cmd(src, "lo", portbase, mcast, rate, 1)
    rlog = open(os.path.join(base, "udp-receiver.log"), "wb")
    r = subprocess.Popen(peers.udpcast_recv_cmd(src, dest, "lo", portbase, what, mcast), stdout=rlog,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.3)
    if SYNC_EACH:
        os.sync()
    out_path = os.path.join(base, "udp-sender.log")
    slog = open(out_path, "wb")
    start = time.monotonic()
    s = subprocess.Popen(send_args, stdout=slog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                         if what == "file" else None, start_new_session=True)
    code, scpu, _ = peers.wait_rusage(s, timeout)
    wall = time.monotonic() - start
    _, rcpu, _ = peers.wait_rusage(r, 15)
    rlog.close()
    slog.close()
    with open(out_path, errors="replace") as f:
        rexmits = peers.udpcast_retransmits(f.read())
    ok = code == 0 and peers.verified_bytes(expected, dest) == nbytes
    return (wall, rexmits, scpu + rcpu, ok, scpu, rcpu)


def disk_and_tmpfs(args):
    """--disk: this script twice, on tmpfs and on the disk (with --sync-each), then both side
    by side."""
    fs_type = subprocess.run(["stat", "-f", "-c", "%T", args.disk if os.path.isdir(args.disk)
                              else os.path.dirname(os.path.abspath(args.disk))],
                             stdout=subprocess.PIPE, check=True).stdout.decode().strip()
    if fs_type == "tmpfs":
        sys.exit("--disk %s is on tmpfs; give a directory on a real disk" % args.disk)
    common = [sys.executable, os.path.abspath(__file__), "--build", args.build, "--repeat",
              str(args.repeat), "--rates", args.rates, "--mcdist-max", args.mcdist_max,
              "--uftp-max", args.uftp_max, "--big-bytes", str(args.big_bytes)]
    if args.only:
        common += ["--only", args.only]
    if args.mcdist_sync:
        common += ["--mcdist-sync", args.mcdist_sync]
    results = {}
    for place, d, extra in (("tmpfs", args.dir, []),
                            ("disk (%s)" % fs_type, os.path.join(args.disk, "mcdist-bench"),
                             ["--sync-each"])):
        out = os.path.join("/dev/shm", "uftp_compare.%d.json" % os.getpid())
        print("== %s: %s" % (place, d), flush=True)
        subprocess.run(common + ["--dir", d, "--json", out] + extra, check=True)
        with open(out) as f:
            results[place] = json.load(f)
        os.unlink(out)
    print()
    print("| work | rate | filesystem | mcdist wall | UFTP wall | UFTP / mcdist | mcdist passes |"
          " all runs mcdist | all runs UFTP |")
    print("|---|---|---|---|---|---|---|---|---|")
    for place, rows in results.items():
        for r in rows:
            m, u = median_cell(r["mcdist"]), median_cell(r["uftp"])
            runs = lambda c: " ".join("%.3f" % s[0] for s in c)
            print("| %s | %s | %s | %.3f s%s | %.3f s%s | %.2fx | %d | %s | %s |" % (
                r["work"], r["rate"], place, m[0], "" if m[3] else " (incomplete)", u[0],
                "" if u[3] else " (incomplete)", u[0] / m[0], m[1], runs(r["mcdist"]),
                runs(r["uftp"])))
    print("median of %d; on the disk sync(2) before every run; mcdistd --sync %s"
          % (args.repeat, args.mcdist_sync or "batch (default)"))


def median_cell(samples):
    walls = sorted(samples, key=lambda s: s[0])
    return walls[len(walls) // 2]


def print_row(row, repeat):
    label, rate, mrate, urate, nbytes, cell = row
    m, u = median_cell(cell["mcdist"]), median_cell(cell["uftp"])
    more = ""
    for key in ("norm", "udpcast"):
        if cell.get(key):
            x = median_cell(cell[key])
            more += " | %s %.3f s %s" % (key, x[0], "ok" if x[3] else "INCOMPLETE")
    print("%-13s %-5s mcdist %.3f s %s | uftp %.3f s %s%s" % (
        label, rate, m[0], "ok" if m[3] else "INCOMPLETE", u[0], "ok" if u[3] else "INCOMPLETE",
        more), flush=True)


def print_table(rows):
    print("| work | rate | mcdist wall | UFTP wall | mcdist goodput | UFTP goodput | goodput ratio |"
          " mcdist passes | UFTP passes | mcdist CPU s | UFTP CPU s | mcdist CPU s/GB | UFTP CPU s/GB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, rate, mrate, urate, nbytes, cell in rows:
        m, u = median_cell(cell["mcdist"]), median_cell(cell["uftp"])
        mg = nbytes * 8 / m[0] / 1e6
        ug = nbytes * 8 / u[0] / 1e6
        rate_label = rate if rate != "max" else "max (mcdist %s, UFTP -R %s)" % (mrate, urate)
        print("| %s | %s | %.2f s%s | %.2f s%s | %.0f Mbit/s | %.0f Mbit/s | %.2fx | %d | %d | %.2f | %.2f |"
              " %s | %s |" % (
                  label, rate_label, m[0], "" if m[3] else " (incomplete)", u[0],
                  "" if u[3] else " (incomplete)", mg, ug, mg / ug if ug else 0, m[1], u[1], m[2], u[2],
                  peers.fmt_per_gb(peers.per_gb(m[2], nbytes)),
                  peers.fmt_per_gb(peers.per_gb(u[2], nbytes))))


PEER_NAMES = (("mcdist", "mcdist"), ("uftp", "UFTP 4.10"), ("norm", "NORM (libnorm 1.5.9)"),
              ("udpcast", "UDPcast 20120424"))


def print_peer_table(rows):
    """Every program of every cell: medians over the repetitions (each column its own median),
    goodput as a share of mcdist's, CPU seconds per delivered GB of the sender and the receiver."""
    print("| work | rate | program | wall | goodput | mcdist / program | repairs | sender CPU s/GB |"
          " receiver CPU s/GB | total CPU s/GB | verified (SHA-256) | walls of all runs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    med = statistics.median
    for label, rate, mrate, urate, nbytes, cell in rows:
        if rate == "max":
            continue
        mg = nbytes * 8 / med([x[0] for x in cell["mcdist"]]) / 1e6
        for key, name in PEER_NAMES:
            runs = cell.get(key) or []
            if not runs:
                continue
            wall = med([x[0] for x in runs])
            g = nbytes * 8 / wall / 1e6
            repairs = {"mcdist": "%d pass(es)", "uftp": "%d pass(es)", "norm": "%d ack round(s)",
                       "udpcast": "%d re-xmits"}[key] % med([x[1] for x in runs])
            print("| %s | %s | %s | %.2f s | %.0f Mbit/s | %s | %s | %.2f | %.2f | %.2f | %d of %d |"
                  " %s |" % (
                      label, rate, name, wall, g, "-" if key == "mcdist" else "%.2fx" % (mg / g),
                      repairs, med([x[4] for x in runs]) / peers.gb(nbytes),
                      med([x[5] for x in runs]) / peers.gb(nbytes),
                      med([x[2] for x in runs]) / peers.gb(nbytes), sum(1 for x in runs if x[3]),
                      len(runs), " ".join("%.2f" % x[0] for x in runs)))



def print_auth_table(rows):
    print("| work | rate | mcdist | mcdist signed | signed / plain | UFTP encrypted | signed mcdist / encrypted UFTP |")
    print("|---|---|---|---|---|---|---|")
    for label, rate, mrate, urate, nbytes, cell in rows:
        m = median_cell(cell["mcdist"])
        ms = median_cell(cell["mcdist signed"])
        ue = median_cell(cell["uftp encrypted"])
        g = lambda c: nbytes * 8 / c[0] / 1e6
        print("| %s | %s | %.0f Mbit/s | %.0f Mbit/s%s | %.2f | %.0f Mbit/s%s | %.2fx |" % (
            label, rate, g(m), g(ms), "" if ms[3] else " (incomplete)", g(ms) / g(m), g(ue),
            "" if ue[3] else " (incomplete)", g(ms) / g(ue)))


def print_encrypt_table(rows):
    print("| work | rate | mcdist | mcdist signed | mcdist encrypted | encrypted / plain |"
          " UFTP encrypted | encrypted mcdist / encrypted UFTP | CPU s plain / signed / encrypted / UFTP enc. |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, rate, mrate, urate, nbytes, cell in rows:
        m = median_cell(cell["mcdist"])
        ms = median_cell(cell["mcdist signed"])
        me = median_cell(cell["mcdist encrypted"])
        ue = median_cell(cell["uftp encrypted"])
        g = lambda c: nbytes * 8 / c[0] / 1e6
        inc = lambda c: "" if c[3] else " (incomplete)"
        print("| %s | %s | %.0f Mbit/s | %.0f Mbit/s%s | %.0f Mbit/s%s | %.2f | %.0f Mbit/s%s | %.2fx |"
              " %.2f / %.2f / %.2f / %.2f |" % (
                  label, rate, g(m), g(ms), inc(ms), g(me), inc(me), g(me) / g(m), g(ue), inc(ue),
                  g(me) / g(ue), m[2], ms[2], me[2], ue[2]))


if __name__ == "__main__":
    main()
