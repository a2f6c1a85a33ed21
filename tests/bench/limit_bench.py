#!/usr/bin/env python3
"""Benchmark: one 1 GB file at the machine's limit, side by side in one run:

- the UDP limit of loopback as iperf3 measures it (`iperf3 -u -b 0 -l 1400`: one sender and one
  receiver process, 1400-byte datagrams, unpaced; what arrives at the receiver counts),
- mcdist (`mcdist-send` to one `mcdistd`, loopback multicast) at each rate of --rates,
- UFTP 4.10 unpaced (`uftp -R -1`, its fastest; --no-uftp leaves it out),
- with the data on a real disk (--dir on ext4, ...): the sequential write rate of that
  filesystem (write 1 GB in 4 MiB writes, then fdatasync, timed as one), since the receiver's
  group commit makes the file durable before it renames it.

The rows of one repetition run one after the other, so a loaded machine's noise falls on all of
them; the table shows medians over --repeat and mcdist's goodput as a share of the UDP limit
measured in the same run. mcdist and UFTP: wall time from process start to exit, goodput = file
bytes x 8 / wall, CPU = sender + receiver user + system seconds of the run (also per GB);
iperf3: received payload bits / its run time, CPU from its own report. Every mcdist run is
checked: the delivered file must have the source's SHA-256.

On a machine shared with other work (compilers of other people), --boost runs the whole
benchmark in a session of its own whose scheduler autogroup gets nice -19, so its processes
take the CPU from the other sessions while it runs (every row alike; each run is seconds).
Without it, a machine at load 30 gives each process a fraction of a core and every row
measures the load.

Needs root (`ip link set lo multicast on`, as uftp_compare.py), iperf3 and uftp
(deploy/install-deps.sh --bench), a build (deploy/build.sh).

mcdist-send takes the file's SHA-256 from its user.mcdist.sha256 xattr once an earlier run
recorded it (a resend of the same file); --cold makes every run hash it again (--no-digest-cache),
as the first send of a new file does. --baseline DIR adds rows of a second build (e.g. main's),
run beside --build in every repetition, each with its own receiver daemon.

usage: limit_bench.py [--build DIR] [--baseline DIR] [--dir DIR] [--repeat N] [--rates 4G,5G]
                      [--no-uftp] [--iperf-seconds S] [--sync batch|file|none] [--cold] [--boost]
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

from uftp_compare import (Child, clear, digest, need_programs, sender_run, ticks, uftp_passes,
                          write_field)

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def log(*a):
    print(*a, flush=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iperf_udp(seconds):
    """One iperf3 UDP run over loopback. Returns (received bit/s, sent bit/s, CPU seconds of
    both processes over the run) from the client's JSON report."""
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        out = None
        for _ in range(50):  # the server needs a moment to listen
            time.sleep(0.1)
            p = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-u", "-b", "0",
                                "-l", "1400", "-t", str(seconds), "-J"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if p.returncode == 0:
                out = json.loads(p.stdout)
                break
        if out is None:
            sys.exit("iperf3 did not run")
        end = out["end"]
        cpu = end["cpu_utilization_percent"]
        cpu_s = (cpu["host_total"] + cpu["remote_total"]) / 100 * seconds
        return end["sum_received"]["bits_per_second"], end["sum_sent"]["bits_per_second"], cpu_s
    finally:
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def disk_write_rate(directory, nbytes):
    """Sequential write rate of the filesystem holding `directory`, bit/s: nbytes in 4 MiB
    writes, then fdatasync, timed together (what a receiver's durable commit of one big file
    costs at least). The test file is removed."""
    path = os.path.join(directory, "limit-bench-dd.tmp")
    block = os.urandom(4 << 20)
    os.sync()
    start = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, block[:min(left, len(block))])
        os.fdatasync(fd)
    finally:
        os.close(fd)
    elapsed = time.monotonic() - start
    os.unlink(path)
    return nbytes * 8 / elapsed


def on_tmpfs(path):
    out = subprocess.run(["stat", "-f", "-c", "%T", path], stdout=subprocess.PIPE, text=True)
    return out.stdout.strip() == "tmpfs"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--baseline", default=None, help="a second build, run beside --build")
    ap.add_argument("--cold", action="store_true",
                    help="mcdist-send --no-digest-cache: every run hashes the file")
    ap.add_argument("--dir", default="/dev/shm/mcdist-limit",
                    help="where the source file and the receivers' trees live (tmpfs by default)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rates", default="4G,5G", help="mcdist --rate values, one row each")
    ap.add_argument("--bytes", type=int, default=1_000_000_000)
    ap.add_argument("--iperf-seconds", type=float, default=2.0)
    ap.add_argument("--no-uftp", action="store_true")
    ap.add_argument("--sync", default=None, help="mcdistd --sync (default: its own, batch)")
    ap.add_argument("--boost", action="store_true",
                    help="run in a session of its own with autogroup nice -19 (shared machine)")
    args = ap.parse_args()
    if args.boost and os.environ.get("LIMIT_BENCH_BOOST") != "1":
        # A new session is a new autogroup; the exec'd script raises its priority.
        env = dict(os.environ, LIMIT_BENCH_BOOST="1")
        os.execvpe("setsid", ["setsid", "-w", sys.executable] + sys.argv, env)
    if os.environ.get("LIMIT_BENCH_BOOST") == "1":
        with open("/proc/self/autogroup", "w") as f:
            f.write("-19")

    if os.geteuid() != 0:
        sys.exit("limit_bench.py needs root (ip link set lo multicast on)")
    for tool in ["iperf3"] + ([] if args.no_uftp else ["uftp", "uftpd"]):
        if not shutil.which(tool):
            sys.exit("%s is not installed: deploy/install-deps.sh --bench" % tool)
    subprocess.run(["ip", "link", "set", "lo", "multicast", "on"], check=True)
    variants = [("", args.build)] + ([(" (baseline)", args.baseline)] if args.baseline else [])
    for _, build in variants:
        need_programs(os.path.join(build, "sender", "mcdist-send"), os.path.join(build, "receiver", "mcdistd"))

    base = args.dir
    clear(base)
    tmpfs = on_tmpfs(base)
    src = os.path.join(base, "src")
    os.makedirs(src)
    src_file = os.path.join(src, "model_field.grib2")
    write_field(src_file, args.bytes)
    src_digest = digest(src_file)

    uf_dest = os.path.join(base, "uf-dest")
    clear(uf_dest)
    # One receiver daemon per build, each on its own group and trees.
    mc = []
    for i, (suffix, build) in enumerate(variants):
        dest, temp = os.path.join(base, "md-dest%d" % i), os.path.join(base, "md-temp%d" % i)
        for d in (dest, temp):
            clear(d)
        group = "239.192.78.%d:%d" % (os.getpid() % 200 + 1, 4800 + os.getpid() % 1000 + i)
        daemon_args = [os.path.join(build, "receiver", "mcdistd"), "--id", "bench", "--group", group,
                       "--interface", "127.0.0.1", "--dest", dest, "--temp", temp,
                       "--status-interval", "1h", "--http", "off", "--allow-unsigned"]
        if args.sync:
            daemon_args += ["--sync", args.sync]
        mc.append({"suffix": suffix, "send": os.path.join(build, "sender", "mcdist-send"),
                   "group": group, "dest": dest,
                   "daemon": Child(daemon_args, os.path.join(base, "mcdistd%d.log" % i))})
    uftpd = None
    if not args.no_uftp:
        uftpd = Child(["uftpd", "-d", "-I", "127.0.0.1", "-M", "230.4.4.1", "-D", uf_dest, "-U",
                       "0x01020304", "-B", "104857600", "-q", "-x", "1"], os.path.join(base, "uftpd.log"))

    rates = args.rates.split(",")
    samples = {"iperf3": [], "disk": [], "uftp": []}
    names = ["mcdist " + r + v["suffix"] for r in rates for v in mc]
    for n in names:
        samples[n] = []
    loads = []
    try:
        for rep in range(args.repeat):
            loads.append(os.getloadavg()[0])
            rx, tx, cpu = iperf_udp(args.iperf_seconds)
            samples["iperf3"].append({"goodput": rx, "sent": tx, "cpu": cpu})
            log("run %d: iperf3 UDP received %.0f Mbit/s (sent %.0f), load %.1f" % (
                rep + 1, rx / 1e6, tx / 1e6, loads[-1]))
            if not tmpfs:
                w = disk_write_rate(base, args.bytes)
                samples["disk"].append({"goodput": w})
                log("run %d: disk sequential write %.0f Mbit/s" % (rep + 1, w / 1e6))
            for r, v in [(r, v) for r in rates for v in mc]:
                clear(v["dest"])
                if not tmpfs:
                    os.sync()
                summary = os.path.join(base, "summary.json")
                rcpu0 = v["daemon"].cpu()
                code, wall, scpu, out = sender_run(
                    [v["send"], "-q", "--group", v["group"], "--interface", "127.0.0.1", "--rate", r,
                     "--receivers", "bench", "--summary-json", summary]
                    + (["--no-digest-cache"] if args.cold else []) + [src])
                time.sleep(0.05)
                rcpu = v["daemon"].cpu() - rcpu0
                if code != 0:
                    sys.exit("mcdist-send failed (%d):\n%s" % (code, out))
                with open(summary) as f:
                    passes = json.load(f)["passes"]
                got = os.path.join(v["dest"], "src", "model_field.grib2")
                ok = os.path.exists(got) and digest(got) == src_digest
                samples["mcdist " + r + v["suffix"]].append({
                    "goodput": args.bytes * 8 / wall, "wall": wall, "passes": passes,
                    "cpu_send": scpu, "cpu_recv": rcpu, "ok": ok})
                log("run %d: mcdist %-5s%s %.3f s  %.0f Mbit/s  %d pass(es)  CPU %.2f + %.2f s  %s" % (
                    rep + 1, r, v["suffix"], wall, args.bytes * 8 / wall / 1e6, passes, scpu, rcpu,
                    "ok" if ok else "WRONG OR MISSING FILE"))
            if uftpd:
                clear(uf_dest)
                if not tmpfs:
                    os.sync()
                rcpu0 = uftpd.cpu()
                code, wall, scpu, out = sender_run(
                    ["uftp", "-I", "127.0.0.1", "-M", "230.4.4.1", "-P", "230.5.5.1", "-H",
                     "0x01020304", "-R", "-1", "-Y", "none", "-B", "104857600", src])
                time.sleep(0.05)
                rcpu = uftpd.cpu() - rcpu0
                upasses = uftp_passes(out)
                got = os.path.join(uf_dest, "src", "model_field.grib2")
                ok = code == 0 and os.path.exists(got) and os.path.getsize(got) == args.bytes
                samples["uftp"].append({"goodput": args.bytes * 8 / wall, "wall": wall,
                                        "passes": upasses, "cpu_send": scpu, "cpu_recv": rcpu,
                                        "ok": ok})
                log("run %d: uftp -R -1 %.3f s  %.0f Mbit/s  %d pass(es)  %s" % (
                    rep + 1, wall, args.bytes * 8 / wall / 1e6, upasses, "ok" if ok else "INCOMPLETE"))
    finally:
        for v in mc:
            v["daemon"].stop()
        if uftpd:
            uftpd.stop()

    med = lambda rows, k: statistics.median(r[k] for r in rows)
    limit = med(samples["iperf3"], "goodput")
    gb = args.bytes / 1e9
    print()
    print("1 GB at the machine's limit, data on %s (%s), %s; median of %d, load average %.1f-%.1f%s"
          % (base, "tmpfs" if tmpfs else "disk", time.strftime("%Y-%m-%d %H:%M"), args.repeat,
             min(loads), max(loads), "; autogroup nice -19 (--boost)" if args.boost else "")
          + ("; digests hashed in every run (--cold)" if args.cold else
             "; digest from the xattr after the first run"))
    print()
    print("| row | wall | goodput | share of the UDP limit | passes | CPU s (send + receive) | CPU s per GB |")
    print("|---|---|---|---|---|---|---|")
    it = samples["iperf3"]
    print("| UDP limit: iperf3 -u -b 0 -l 1400 (received; sent %.0f Mbit/s) | %.1f s | %.0f Mbit/s | 100 %% | - | %.2f | %.2f |" % (
        med(it, "sent") / 1e6, args.iperf_seconds, limit / 1e6, med(it, "cpu"),
        med(it, "cpu") / (limit * args.iperf_seconds / 8 / 1e9)))
    if samples["disk"]:
        w = med(samples["disk"], "goodput")
        print("| disk: sequential write + fdatasync, same filesystem | %.2f s | %.0f Mbit/s | %.0f %% | - | - | - |" % (
            args.bytes * 8 / w, w / 1e6, w / limit * 100))
    for name in names + (["uftp"] if uftpd else []):
        rows = samples[name]
        label = name if name != "uftp" else "UFTP 4.10 -R -1"
        if name.startswith("mcdist"):
            label = "mcdist --rate " + name[len("mcdist "):]
        bad = sum(1 for r in rows if not r["ok"])
        cpu = statistics.median(r["cpu_send"] + r["cpu_recv"] for r in rows)
        print("| %s%s | %.2f s | %.0f Mbit/s | %.0f %% | %s | %.2f (%.2f + %.2f) | %.2f |" % (
            label, " (%d of %d runs incomplete)" % (bad, len(rows)) if bad else "",
            med(rows, "wall"), med(rows, "goodput") / 1e6, med(rows, "goodput") / limit * 100,
            "-".join(sorted({str(r["passes"]) for r in rows})), cpu, med(rows, "cpu_send"),
            med(rows, "cpu_recv"), cpu / gb))
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
