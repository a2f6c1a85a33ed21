#!/usr/bin/env python3
"""The EUMETSAT study's scenario matrix (Truksans, Znots, Barzdins, Table 1), run through
mcdist's own link emulator (tests/linkem), mcdist and UFTP 4.10 side by side, with a TCP
baseline (tar piped to nc) where it is cheap, and with --peers NORM (tests/bench/norm, libnorm)
and UDPcast (udp-sender/udp-receiver) as further columns (tests/bench/peers.py: how each is
configured and why).

Topology, as in the study: a sender h0, a receiver h1 on a clean link, a receiver h2 behind
the impaired link (one-way delay RTT/2 each way, random loss). mcdist and UFTP multicast to
both receivers; the TCP baseline sends to h2 only.

Per scenario and program it measures, at the impaired receiver h2: verified bytes (files whose
SHA-256 matches the source), the time they took (program start to the end of the transfer, or
the time cap), goodput = verified bytes x 8 / time, passes (or rounds), and whether the goodput
meets the 350 Mbit/s target. A program that does not finish within the cap is stopped; its
goodput is what it verified in that time, like the study's fixed-duration runs.

It prints a Markdown table, writes it with a JSON of every run to --out, and draws PNG plots of
h2's received link throughput over time for a few scenarios (gnuplot). A second table gives,
per scenario and program, the CPU seconds per delivered GB of the sender (over the bytes
verified at h2) and of each receiver (over the bytes verified there): the daemons (mcdistd,
uftpd) and per-run processes alike are started per scenario and reaped with wait4.

With --peers norm,udpcast: NORM at the same fixed rate (NormSetTxRate), its initial GRTT the
scenario's RTT, its buffers the bandwidth*delay product (twice, 4-64 MiB), both receivers in
its acking list; UDPcast at the same --max-bitrate, --full-duplex (its manual's advice for
high-latency links), --min-receivers 2, one file with --file and a set as a tar stream. Each
capped like UFTP. UDPcast cannot send a set of files without an archive stream: the tar
stream is how its users do it, and a cut stream verifies only the files it completed.

Modes: --quick (default) scales volumes so the 26 scenarios run in about 20 minutes;
--full uses the study's file sizes (2 GB files) with larger sets and longer caps.

Needs root (network namespaces, TUN), uftp/uftpd, nc, gnuplot (deploy/install-deps.sh --bench)
and a build of mcdist including tests/linkem (deploy/build.sh).
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import peers
from linkem_run import Emulator, stop_proc
from uftp_compare import uftp_passes

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
TARGET_MBPS = 350.0

# (number, category, RTT ms, loss), Table 1 of the study.
SCENARIOS = [
    (1, "10kB", 70, 0), (2, "10kB", 70, 1e-6), (3, "10kB", 70, 1e-3),
    (4, "10kB", 700, 0), (5, "10kB", 700, 1e-6), (6, "10kB", 700, 1e-3),
    (7, "5MB", 70, 0), (8, "5MB", 70, 1e-6), (9, "5MB", 70, 1e-3),
    (10, "5MB", 700, 0), (11, "5MB", 700, 1e-6), (12, "5MB", 700, 1e-3),
    (13, "2GB", 70, 0), (14, "2GB", 70, 1e-6), (15, "2GB", 70, 1e-3),
    (16, "2GB", 700, 0), (17, "2GB", 700, 1e-6), (18, "2GB", 700, 1e-3),
    (19, "mix", 70, 0), (20, "mix", 700, 0),
    (21, "mix", 70, 1e-6), (22, "mix", 70, 1e-3), (23, "mix", 700, 1e-6), (24, "mix", 700, 1e-3),
    (25, "2GB", 70, 1e-3), (26, "2GB", 700, 1e-3),
]

# What the study reported (best application, Mbit/s) where the paper gives a figure.
STUDY = {
    1: "rsync 440 (FTP ~0.16)", 13: "FTP 840, rsync 696, GridFTP 672", 16: "GridFTP 304",
    18: "FTP 0.4", 25: "UFTP 2.10: 360",
}

# File sets: category -> list of (count, size in bytes). Quick mode scales the 2 GB file down.
VOLUMES = {
    "quick": {
        "10kB": [(20000, 10_000)],
        "5MB": [(40, 5_000_000)],
        "2GB": [(1, 512_000_000)],
        "mix": [(2000, 10_000), (100, 500_000), (20, 5_000_000), (4, 50_000_000), (1, 512_000_000)],
    },
    "full": {
        "10kB": [(50000, 10_000)],
        "5MB": [(200, 5_000_000)],
        "2GB": [(1, 2_000_000_000)],
        "mix": [(5000, 10_000), (200, 500_000), (40, 5_000_000), (8, 50_000_000), (1, 2_000_000_000)],
    },
}
# Time caps per program run, seconds.
CAPS = {"quick": {"mcdist": 90, "uftp": 25, "tcp": 12, "norm": 25, "udpcast": 25},
        "full": {"mcdist": 600, "uftp": 300, "tcp": 120, "norm": 300, "udpcast": 300}}


def log(*a):
    print(*a, flush=True)


class Dataset:
    """A category's file set on tmpfs, with SHA-256 of every file."""

    def __init__(self, root, category, spec, rng):
        self.dir = os.path.join(root, "data", category)
        self.name = "set_" + category
        self.files = {}
        src = os.path.join(self.dir, self.name)
        if os.path.exists(os.path.join(self.dir, "digests.json")):
            with open(os.path.join(self.dir, "digests.json")) as f:
                self.files = json.load(f)
            return
        shutil.rmtree(self.dir, ignore_errors=True)
        n = 0
        for count, size in spec:
            for i in range(count):
                rel = os.path.join("s%d" % size, "d%03d" % (i % 100), "f%06d.bin" % n)
                path = os.path.join(src, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                h = hashlib.sha256()
                with open(path, "wb") as f:
                    left = size
                    block = rng.randbytes(min(size, 1 << 20)) if size else b""
                    while left > 0:
                        chunk = block[:min(left, len(block))]
                        f.write(chunk)
                        h.update(chunk)
                        left -= len(chunk)
                        block = hashlib.sha512(block[:64]).digest() * (len(block) // 64) if left else block
                self.files[os.path.join(self.name, rel)] = [size, h.hexdigest()]
                n += 1
        with open(os.path.join(self.dir, "digests.json"), "w") as f:
            json.dump(self.files, f)

    @property
    def path(self):
        return os.path.join(self.dir, self.name)

    @property
    def bytes(self):
        return sum(v[0] for v in self.files.values())

    def partial_bytes(self, dest):
        """Bytes written to files that are shorter than they should be (for TCP, whose in-order
        delivery makes them a correct prefix)."""
        n = 0
        for rel, (size, _) in self.files.items():
            try:
                got = os.path.getsize(os.path.join(dest, rel))
            except OSError:
                continue
            if got < size:
                n += got
        return n

    def verified_bytes(self, dest):
        """Bytes of files under dest whose size and SHA-256 match."""
        ok = 0
        for rel, (size, digest) in self.files.items():
            p = os.path.join(dest, rel)
            try:
                if os.path.getsize(p) != size:
                    continue
            except OSError:
                continue
            h = hashlib.sha256()
            with open(p, "rb") as f:
                while True:
                    b = f.read(1 << 22)
                    if not b:
                        break
                    h.update(b)
            if h.hexdigest() == digest:
                ok += size
        return ok


def in_ns(ns, args):
    return ["ip", "netns", "exec", ns] + args


class Sampler(threading.Thread):
    """Samples received bytes on h2's emulated interface, via /proc/<pid>/net/dev of a process
    living in h2's namespace, every 0.25 s."""

    def __init__(self, pid, ifname="mle0"):
        super().__init__(daemon=True)
        self.pid, self.ifname, self.samples, self.stop_flag = pid, ifname, [], False

    def read(self):
        try:
            with open("/proc/%d/net/dev" % self.pid) as f:
                for line in f:
                    if line.strip().startswith(self.ifname + ":"):
                        return int(line.split(":", 1)[1].split()[0])
        except OSError:
            return None
        return None

    def run(self):
        t0 = time.monotonic()
        while not self.stop_flag:
            v = self.read()
            if v is not None:
                self.samples.append((time.monotonic() - t0, v))
            time.sleep(0.25)


def wait_capped(p, cap, t0):
    """Waits for p at most cap seconds (SIGINT then); returns (elapsed since t0 or cap, exited 0)."""
    try:
        p.wait(cap)
        return time.monotonic() - t0, p.returncode == 0
    except subprocess.TimeoutExpired:
        stop_proc(p, signal.SIGINT)
        return cap, False


def drop_trees(daemons):
    """Remove the receivers' delivered and temporary trees once verified, keeping their logs: in
    --full mode a mix cell's four trees (two programs, two receivers) are 11 GB of tmpfs beside
    the 6 GB of source sets."""
    for _, _, d in daemons:
        for sub in ("dest", "temp"):
            shutil.rmtree(os.path.join(d, sub), ignore_errors=True)


def run_mcdist(args, emu, ds, work, cap, seed):
    group = "239.192.%d.%d:%d" % (seed % 200 + 1, seed % 250 + 1, 4711)
    recv, send = [os.path.join(args.build, "receiver", "mcdistd"), os.path.join(args.build, "sender", "mcdist-send")]
    daemons = []
    for h in (1, 2):
        d = os.path.join(work, "mcdist-h%d" % h)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        logf = open(os.path.join(d, "mcdistd.log"), "w")
        p = subprocess.Popen(in_ns(emu.ns(h), [recv, "--id", "h%d" % h, "--group", group, "--interface",
                                                emu.addr(h), "--dest", os.path.join(d, "dest"), "--temp",
                                                os.path.join(d, "temp")] + peers.allow_unsigned(recv)),
                             stdout=logf, stderr=subprocess.STDOUT)
        daemons.append((p, logf, d))
    time.sleep(0.5)
    sampler = Sampler(daemons[1][0].pid)
    sampler.start()
    summary = os.path.join(work, "mcdist-summary.json")
    if os.path.exists(summary):
        os.unlink(summary)
    # The sender's log stays in the work directory (its pass and repair lines, for when a cell
    # looks wrong); the last scenario's work directory is left for inspection.
    send_log = open(os.path.join(work, "mcdist-send.log"), "w")
    t0 = time.monotonic()
    p = subprocess.Popen(in_ns(emu.ns(0), [send, "--no-progress", "--group", group, "--interface", emu.addr(0),
                                           "--rate", args.rate, "--receivers", "h1,h2", "--register-timeout",
                                           "10s", "--summary-json", summary] + args.mcdist_args.split() +
                                          [ds.path]),
                         stdout=send_log, stderr=subprocess.STDOUT)
    elapsed, finished, scpu = wait_capped_cpu(p, cap, t0)
    send_log.close()
    sampler.stop_flag = True
    rcpu = stop_daemons(daemons)
    passes, h2_time = None, None
    try:
        with open(summary) as f:
            s = json.load(f)
        passes = s["passes"]
        for r in s["receivers"]:
            if r["id"] == "h2" and r["state"] == "completed" and r["path"] == "multicast":
                h2_time = r["completion_seconds"]
    except (OSError, ValueError, KeyError):
        pass
    verified = ds.verified_bytes(os.path.join(daemons[1][2], "dest"))
    verified_h1 = ds.verified_bytes(os.path.join(daemons[0][2], "dest"))
    drop_trees(daemons)
    return {"program": "mcdist", "finished": finished and verified == ds.bytes, "time": elapsed,
            "verified": verified, "passes": passes, "h2_completion": h2_time, "samples": sampler.samples,
            "cpu": {"sender": scpu, "h1": rcpu[0], "h2": rcpu[1]}, "verified_h1": verified_h1}


def run_uftp(args, emu, ds, work, cap, seed):
    daemons = []
    for h in (1, 2):
        d = os.path.join(work, "uftp-h%d" % h)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "dest"))
        logf = open(os.path.join(d, "uftpd.log"), "w")
        p = subprocess.Popen(in_ns(emu.ns(h), ["uftpd", "-d", "-I", "mle0", "-M", "230.4.4.1", "-D",
                                                os.path.join(d, "dest"), "-U", "0x%08x" % (h + 1),
                                                "-B", "104857600", "-q"]),
                             stdout=logf, stderr=subprocess.STDOUT)
        daemons.append((p, logf, d))
    time.sleep(0.5)
    sampler = Sampler(daemons[1][0].pid)
    sampler.start()
    out = open(os.path.join(work, "uftp.out"), "w")
    t0 = time.monotonic()
    # Fair tuning: closed group, the same rate in the same units (uftp -R counts 1024 bit/s of
    # IP packets, see uftp_compare.py), 100 MB socket buffers, no encryption.
    p = subprocess.Popen(in_ns(emu.ns(0), ["uftp", "-I", "mle0", "-M", "230.4.4.1", "-P", "230.5.5.1",
                                           "-H", "0x00000002,0x00000003", "-R", uftp_rate(args.rate), "-Y",
                                           "none", "-B", "104857600", ds.path]),
                         stdout=out, stderr=subprocess.STDOUT)
    elapsed, finished, scpu = wait_capped_cpu(p, cap, t0)
    sampler.stop_flag = True
    out.close()
    rcpu = stop_daemons(daemons)
    with open(os.path.join(work, "uftp.out"), errors="replace") as f:
        passes = uftp_passes(f.read())
    verified = ds.verified_bytes(os.path.join(daemons[1][2], "dest"))
    verified_h1 = ds.verified_bytes(os.path.join(daemons[0][2], "dest"))
    drop_trees(daemons)
    return {"program": "uftp", "finished": finished and verified == ds.bytes, "time": elapsed,
            "verified": verified, "passes": passes, "samples": sampler.samples,
            "cpu": {"sender": scpu, "h1": rcpu[0], "h2": rcpu[1]}, "verified_h1": verified_h1}


def wait_capped_cpu(p, cap, t0):
    """wait_capped with the process's CPU (wait4): (elapsed or cap, exited 0, CPU seconds)."""
    code, cpu, capped = peers.wait_rusage(p, cap)
    if capped:
        return cap, False, cpu
    return time.monotonic() - t0, code == 0, cpu


def stop_daemons(daemons, gentle=False):
    """SIGTERM to each receiver still running, then reaps it: its CPU seconds (wait4), in order.
    gentle: first give each up to 5 s to exit by itself (NORM's and UDPcast's receivers exit
    once complete; a shell pipeline stopped early would lose its children's CPU)."""
    cpus = []
    for dp, logf, _ in daemons:
        if gentle:
            code, cpu, stopped = peers.wait_rusage(dp, 5, stop_sig=signal.SIGTERM)
            cpus.append(cpu)
            logf.close()
            continue
        # No poll() first: it would reap an exited receiver and lose its resource usage. A
        # pipeline's children die with the shell unreaped: their CPU is sampled first.
        sampled = peers.group_cpu(dp.pid) if peers.leads_group(dp) else 0.0
        peers.signal_proc(dp, signal.SIGTERM)
        cpus.append(max(sampled, peers.wait_rusage(dp, 10, stop_sig=signal.SIGTERM)[1]))
        logf.close()
    return cpus


def run_norm(args, emu, ds, work, cap, seed, rtt_ms):
    """NORM to h1 and h2 (node ids 2 and 3) at args.rate, from h0 (node id 1)."""
    send, recv = args.norm
    group = "239.197.%d.%d:%d" % (seed % 200 + 1, seed % 250 + 1, 6200 + 2 * (seed % 100))
    rtt = max(rtt_ms / 1000.0, 0.001)
    buffer = peers.norm_buffer(args.rate, rtt)
    daemons = []
    for h in (1, 2):
        d = os.path.join(work, "norm-h%d" % h)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "dest"))
        logf = open(os.path.join(d, "norm-recv.log"), "w")
        p = subprocess.Popen(in_ns(emu.ns(h), peers.norm_recv_cmd(
            recv, group, "mle0", h + 1, os.path.join(d, "dest"), len(ds.files), buffer=buffer,
            timeout=cap + 30)), stdout=logf, stderr=subprocess.STDOUT)
        daemons.append((p, logf, d))
    time.sleep(0.5)
    sampler = Sampler(daemons[1][0].pid)
    sampler.start()
    summary = os.path.join(work, "norm-summary.json")
    out = open(os.path.join(work, "norm-send.log"), "w")
    t0 = time.monotonic()
    p = subprocess.Popen(in_ns(emu.ns(0), peers.norm_send_cmd(
        send, group, "mle0", ds.path, [2, 3], rate=args.rate, grtt=rtt, buffer=buffer,
        summary=summary, timeout=cap + 30)), stdout=out, stderr=subprocess.STDOUT)
    elapsed, finished, scpu = wait_capped_cpu(p, cap, t0)
    sampler.stop_flag = True
    out.close()
    rcpu = stop_daemons(daemons, gentle=finished)
    rounds = None
    try:
        with open(summary) as f:
            rounds = json.load(f)["watermark_rounds"]
    except (OSError, ValueError, KeyError):
        pass
    verified = ds.verified_bytes(os.path.join(daemons[1][2], "dest"))
    verified_h1 = ds.verified_bytes(os.path.join(daemons[0][2], "dest"))
    drop_trees(daemons)
    return {"program": "norm", "finished": finished and verified == ds.bytes, "time": elapsed,
            "verified": verified, "passes": rounds, "samples": sampler.samples,
            "cpu": {"sender": scpu, "h1": rcpu[0], "h2": rcpu[1]}, "verified_h1": verified_h1}


def run_udpcast(args, emu, ds, work, cap, seed):
    """UDPcast (udp-sender on h0, udp-receiver on h1 and h2) at args.rate, reliable mode."""
    portbase = 9200 + 2 * (seed % 100)
    mcast = "239.198.%d.%d" % (seed % 200 + 1, seed % 250 + 1)
    # Slices of 1024 blocks (its maximum): with udpcast's default of 112, a 70 ms round trip held
    # it to 13-16 Mbit/s (one slice per RTT), and 30 MB at 70 ms took 17 s against 5 s with 1024.
    send_args, what = peers.udpcast_send_cmd(ds.path, "mle0", portbase, mcast, args.rate, 2,
                                             slice_size=args.udpcast_slice)
    daemons = []
    for h in (1, 2):
        d = os.path.join(work, "udpcast-h%d" % h)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "dest"))
        logf = open(os.path.join(d, "udp-receiver.log"), "w")
        p = subprocess.Popen(in_ns(emu.ns(h), peers.udpcast_recv_cmd(
            ds.path, os.path.join(d, "dest"), "mle0", portbase, what, mcast)),
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        daemons.append((p, logf, d))
    time.sleep(0.5)
    sampler = Sampler(daemons[1][0].pid)
    sampler.start()
    out_path = os.path.join(work, "udp-sender.log")
    out = open(out_path, "w")
    t0 = time.monotonic()
    p = subprocess.Popen(in_ns(emu.ns(0), send_args), stdout=out, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL if what == "file" else None, start_new_session=True)
    elapsed, finished, scpu = wait_capped_cpu(p, cap, t0)
    sampler.stop_flag = True
    out.close()
    rcpu = stop_daemons(daemons, gentle=finished)
    with open(out_path, errors="replace") as f:
        rexmits = peers.udpcast_retransmits(f.read())
    verified = ds.verified_bytes(os.path.join(daemons[1][2], "dest"))
    verified_h1 = ds.verified_bytes(os.path.join(daemons[0][2], "dest"))
    # udp-receiver writes in order (slice after slice): a file cut by the cap is a correct
    # prefix, counted and marked like TCP's.
    partial = ds.partial_bytes(os.path.join(daemons[1][2], "dest")) if not finished else 0
    verified_h1 += ds.partial_bytes(os.path.join(daemons[0][2], "dest")) if not finished else 0
    drop_trees(daemons)
    return {"program": "udpcast", "finished": finished and verified == ds.bytes, "time": elapsed,
            "verified": verified + partial, "partial": partial, "passes": rexmits,
            "samples": sampler.samples,
            "cpu": {"sender": scpu, "h1": rcpu[0], "h2": rcpu[1]}, "verified_h1": verified_h1}


def run_tcp(args, emu, ds, work, cap, seed):
    d = os.path.join(work, "tcp-h2")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    port = 20000 + seed % 10000
    sink = subprocess.Popen(in_ns(emu.ns(2), ["sh", "-c", "nc -l -p %d | tar -x -C %s" % (port, d)]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    sampler = Sampler(sink.pid)
    sampler.start()
    t0 = time.monotonic()
    src = subprocess.Popen(in_ns(emu.ns(0), ["sh", "-c", "tar -c -C %s %s | nc -N %s %d" % (
        os.path.dirname(ds.path), os.path.basename(ds.path), emu.addr(2), port)]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sink.wait(cap)
        elapsed = time.monotonic() - t0
        finished = sink.returncode == 0
    except subprocess.TimeoutExpired:
        elapsed = cap
        finished = False
    sampler.stop_flag = True
    stop_proc(src, signal.SIGKILL)
    stop_proc(sink, signal.SIGKILL)
    subprocess.run(in_ns(emu.ns(2), ["pkill", "-f", "nc -l -p %d" % port]), stderr=subprocess.DEVNULL)
    verified = ds.verified_bytes(d)
    # A file cut by the cap is a correct prefix (TCP delivers in order): counted, and marked.
    partial = ds.partial_bytes(d) if not finished else 0
    return {"program": "tcp", "finished": finished and verified == ds.bytes, "time": elapsed,
            "verified": verified + partial, "partial": partial, "passes": None, "samples": sampler.samples}


def uftp_rate(rate):
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    bps = float(rate[:-1]) * mult[rate[-1]] if rate[-1] in mult else float(rate)
    return str(int(round(bps / 1024)))


def mbps(r):
    return r["verified"] * 8 / r["time"] / 1e6 if r and r["time"] > 0 else 0.0


def cell(r):
    if r is None:
        return "-"
    s = "%.0f" % mbps(r) if mbps(r) >= 10 else "%.2f" % mbps(r)
    if not r["finished"]:
        what = "received in order" if r.get("partial") else "verified"
        s += " (cap %ds, %s %s)" % (r["time"], fmt_bytes(r["verified"]), what)
    return s


def fmt_bytes(n):
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return "%.0f %s" % (n, unit)
        n /= 1000
    return "%.1f TB" % n


def plot(results, out_dir, numbers):
    if not shutil.which("gnuplot"):
        log("gnuplot not installed: no plots")
        return []
    made = []
    for num in numbers:
        runs = [r for r in results if r["scenario"] == num]
        if not runs:
            continue
        series = []
        for r in runs:
            for prog in ("mcdist", "uftp", "tcp", "norm", "udpcast"):
                res = r.get(prog)
                if not res or len(res["samples"]) < 2:
                    continue
                dat = os.path.join(out_dir, "s%02d_%s.dat" % (num, prog))
                with open(dat, "w") as f:
                    prev = res["samples"][0]
                    for t, v in res["samples"][1:]:
                        if t > prev[0]:
                            f.write("%.2f %.2f\n" % (t, (v - prev[1]) * 8 / (t - prev[0]) / 1e6))
                        prev = (t, v)
                series.append((dat, prog))
        if not series:
            continue
        sc = [s for s in SCENARIOS if s[0] == num][0]
        png = os.path.join(out_dir, "scenario%02d.png" % num)
        title = "Scenario %d: %s files, RTT %d ms, loss %g - received at h2" % (num, sc[1], sc[2], sc[3])
        cmds = ['set terminal pngcairo size 900,450', 'set output "%s"' % png, 'set title "%s"' % title,
                'set xlabel "seconds"', 'set ylabel "Mbit/s (link, 0.25 s bins)"', 'set grid', 'set key top right',
                'set yrange [0:*]',
                "plot " + ", ".join('"%s" using 1:2 with steps lw 2 title "%s"' % (d, p) for d, p in series)
                + ', %g with lines dt 2 lc rgb "red" title "350 Mbit/s target"' % TARGET_MBPS]
        subprocess.run(["gnuplot", "-e", "; ".join(cmds)], check=False)
        if os.path.exists(png):
            made.append(png)
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="scaled-down volumes (default)")
    mode.add_argument("--full", action="store_true", help="the study's sizes, longer caps")
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--work", default="/dev/shm/mcdist-matrix")
    ap.add_argument("--out", default=os.path.join(TOP, "build", "matrix"))
    ap.add_argument("--rate", default="800M", help="multicast rate for mcdist and UFTP (same bit/s)")
    ap.add_argument("--scenarios", default="1-26", help="e.g. 1-6,13,25")
    ap.add_argument("--mcdist-args", default="",
                    help="more mcdist-send options, e.g. \"--fec-k 200 --fec-overhead 2%%\"")
    ap.add_argument("--no-tcp", action="store_true")
    ap.add_argument("--no-uftp", action="store_true")
    ap.add_argument("--peers", default="none",
                    help="further columns: norm, udpcast, or norm,udpcast (tests/bench/peers.py)")
    ap.add_argument("--norm-build", default=None,
                    help="build tree holding tests/bench/norm (default: --build)")
    ap.add_argument("--udpcast-slice", type=int, default=1024,
                    help="udp-sender --default-slice-size (blocks; 0: udpcast's default, 112)")
    ap.add_argument("--plots", default="3,6,18,24,26", help="scenarios to plot")
    ap.add_argument("--seed", type=int, default=0,
                    help="added to each scenario's number to seed the emulator's loss: another value "
                         "draws other losses (a cell's result can hinge on which datagrams are lost, "
                         "e.g. one repair early in a 512 MB file)")
    args = ap.parse_args()
    m = "full" if args.full else "quick"
    if os.geteuid() != 0:
        sys.exit("eumetsat_matrix.py needs root (network namespaces and TUN devices)")
    linkem = os.path.join(args.build, "tests", "linkem", "mcdist-linkem")
    for b in (linkem, os.path.join(args.build, "sender", "mcdist-send")):
        if not os.access(b, os.X_OK):
            sys.exit("missing %s: build first (deploy/build.sh)" % b)
    for tool in ("uftp", "uftpd", "nc", "tar"):
        if not shutil.which(tool):
            sys.exit("missing %s: deploy/install-deps.sh --bench" % tool)
    wanted_peers = [] if args.peers == "none" else args.peers.split(",")
    args.norm = None
    if "norm" in wanted_peers:
        args.norm = peers.norm_programs(args.norm_build or args.build)
        if not args.norm:
            sys.exit("NORM peer not built: cmake -DMCDIST_BENCH_PEERS=ON, then ninja "
                     "mcdist-norm-send mcdist-norm-recv (needs libnorm-dev)")
    args.udpcast = "udpcast" in wanted_peers
    if args.udpcast and not peers.udpcast_available():
        sys.exit("missing udp-sender/udp-receiver: deploy/install-deps.sh --bench")
    wanted = set()
    for part in args.scenarios.split(","):
        a, _, b = part.partition("-")
        wanted.update(range(int(a), int(b or a) + 1))
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(2026)
    datasets = {}
    results = []
    t_start = time.monotonic()
    for num, cat, rtt, loss in SCENARIOS:
        if num not in wanted:
            continue
        if cat not in datasets:
            log("preparing %s data set ..." % cat)
            datasets[cat] = Dataset(args.work, cat, VOLUMES[m][cat], rng)
        ds = datasets[cat]
        work = os.path.join(args.work, "run")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        spec = "h2:delay=%gms" % (rtt / 2) + (",loss=%g" % loss if loss > 0 else "")
        emu = Emulator(linkem, work, [spec], hosts=3, seed=num + args.seed,
                       stats_json=os.path.join(work, "linkem-stats.json"))
        row = {"scenario": num, "category": cat, "rtt_ms": rtt, "loss": loss, "bytes": ds.bytes,
               "files": len(ds.files)}
        try:
            row["mcdist"] = run_mcdist(args, emu, ds, work, CAPS[m]["mcdist"], num)
            if not args.no_uftp:
                row["uftp"] = run_uftp(args, emu, ds, work, CAPS[m]["uftp"], num)
            if args.norm:
                row["norm"] = run_norm(args, emu, ds, work, CAPS[m]["norm"], num, rtt)
            if args.udpcast:
                row["udpcast"] = run_udpcast(args, emu, ds, work, CAPS[m]["udpcast"], num)
            if not args.no_tcp:
                row["tcp"] = run_tcp(args, emu, ds, work, CAPS[m]["tcp"], num)
        finally:
            emu.stop()
        results.append(row)
        log("scenario %2d %-4s RTT %3d ms loss %-6g: mcdist %s | UFTP %s | TCP %s%s" % (
            num, cat, rtt, loss, cell(row["mcdist"]), cell(row.get("uftp")), cell(row.get("tcp")),
            "".join(" | %s %s" % (k, cell(row.get(k))) for k in ("norm", "udpcast") if k in row)))
    total = time.monotonic() - t_start
    lines = ["| # | files | RTT | loss | volume | mcdist Mbit/s | mcdist time | passes | target | UFTP 4.10 Mbit/s |"
             " UFTP time | UFTP passes | mcdist / UFTP | tar+nc (TCP) Mbit/s | study (best app, Mbit/s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        md, uf, tc = r["mcdist"], r.get("uftp"), r.get("tcp")
        ratio = "%.1fx" % (mbps(md) / mbps(uf)) if uf and mbps(uf) > 0 else ("inf" if uf else "-")
        lines.append("| %d | %s x %d | %d ms | %g | %s | %s | %.1f s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["scenario"], r["category"], r["files"], r["rtt_ms"], r["loss"], fmt_bytes(r["bytes"]), cell(md),
            md["time"], md["passes"], "yes" if mbps(md) >= TARGET_MBPS else "no", cell(uf),
            "%.1f s" % uf["time"] if uf else "-", uf["passes"] if uf else "-", ratio, cell(tc),
            STUDY.get(r["scenario"], "none reached 350")))
    if args.norm or args.udpcast:
        lines += ["", "Further peers at the same rate (goodput at h2, Mbit/s; the ratio is mcdist's over the peer's):", "",
                  "| # | files | RTT | loss | mcdist | NORM | NORM ack rounds | mcdist / NORM | UDPcast |"
                  " UDPcast re-xmits | mcdist / UDPcast |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in results:
            md = r["mcdist"]
            cols = []
            for k in ("norm", "udpcast"):
                x = r.get(k)
                ratio = ("%.1fx" % (mbps(md) / mbps(x)) if mbps(x) > 0 else "inf") if x else "-"
                cols += [cell(x), "-" if not x or x["passes"] is None else str(x["passes"]), ratio]
            lines.append("| %d | %s x %d | %d ms | %g | %s | %s |" % (
                r["scenario"], r["category"], r["files"], r["rtt_ms"], r["loss"], cell(md), " | ".join(cols)))
    lines += ["", "CPU seconds per delivered GB (sender: over the bytes verified at h2; h1, h2: over the bytes "
              "verified at each):", "",
              "| # | files | RTT | loss | program | Mbit/s at h2 | sender CPU s/GB | h1 CPU s/GB | h2 CPU s/GB |"
              " CPU s (sender + h1 + h2) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for k, name in (("mcdist", "mcdist"), ("uftp", "UFTP 4.10"), ("norm", "NORM"), ("udpcast", "UDPcast")):
            x = r.get(k)
            if not x or "cpu" not in x:
                continue
            c = x["cpu"]
            lines.append("| %d | %s x %d | %d ms | %g | %s | %s | %s | %s | %s | %.2f |" % (
                r["scenario"], r["category"], r["files"], r["rtt_ms"], r["loss"], name, cell(x),
                peers.fmt_per_gb(peers.per_gb(c["sender"], x["verified"])),
                peers.fmt_per_gb(peers.per_gb(c["h1"], x.get("verified_h1", 0))),
                peers.fmt_per_gb(peers.per_gb(c["h2"], x["verified"])), c["sender"] + c["h1"] + c["h2"]))
    table = "\n".join(lines)
    header = ("EUMETSAT matrix, %s mode, rate %s for every program, on %s; %.1f min in all.\n"
              "Goodput = verified bytes at the impaired receiver h2 x 8 / time; time = program start to "
              "end, or the cap (%s: mcdist %ds, UFTP %ds, TCP %ds).\n" % (
                  m, args.rate, time.strftime("%Y-%m-%d %H:%M"), total / 60, m, CAPS[m]["mcdist"],
                  CAPS[m]["uftp"], CAPS[m]["tcp"]))
    print()
    print(header)
    print(table)
    with open(os.path.join(args.out, "matrix.md"), "w") as f:
        f.write(header + "\n" + table + "\n")
    for r in results:
        for prog in ("mcdist", "uftp", "tcp", "norm", "udpcast"):
            if r.get(prog):
                r[prog]["samples"] = r[prog]["samples"][:4000]
    pngs = plot(results, args.out, [int(x) for x in args.plots.split(",") if x])
    with open(os.path.join(args.out, "matrix.json"), "w") as f:
        json.dump(results, f)
    print()
    print("written: %s, %s%s" % (os.path.join(args.out, "matrix.md"), os.path.join(args.out, "matrix.json"),
                                 "".join(", " + p for p in pngs)))


if __name__ == "__main__":
    main()
