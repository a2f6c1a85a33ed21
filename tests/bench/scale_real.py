#!/usr/bin/env python3
"""Scale with real processes (issue 12 item 5): many receiver daemons at once, mcdist beside UFTP
4.10 with the same receivers, in the same run.

Part "loopback": N receiver daemons (default 100) on this machine, loopback multicast in a
network namespace of this run's own, each daemon dropping 1 % of what it receives
independently (mcdistd --drop-rate; uftpd through recv_drop.so, an LD_PRELOAD shim built from
recv_drop.c beside this script), one sender at --rate. UFTP runs here only with one receiver:
uftpd binds its port exclusively, so several need a namespace each (not built yet).

Part "geo": mcdist-linkem with one sender and 20 receivers, each behind a 700 ms RTT link with
1e-3 loss (both directions), the sender at --geo-rate.

Per program it prints: completion time (sender start to exit), passes, datagrams the sender sent
per source block (data, repairs and control: 1.00 is no repair at all), repair datagrams, control
datagrams the sender received (NAK, status, COMPLETE, REGISTER and UFTP's kinds) in all, per
second of the session and the most in any 100 ms, and how many receivers hold every file
verified. Control datagrams are counted outside the programs: on loopback by a capture of the
sender's reply port (tshark), through the emulator from its counters of packets delivered to the
sender's host.

Re-runnable with one command (root; deploy/install-deps.sh --bench for uftp and tshark):

    tests/bench/scale_real.py --build build
    tests/bench/scale_real.py --build build --parts geo --no-uftp

The data set (default 40 files of 1 MB, the issue's) and every program run live under --work
(tmpfs). Each part leaves nothing behind: daemons are stopped and namespaces removed.
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from linkem_run import Emulator, stop_proc

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
MCDIST_PORT = 47311  # mcdist-send --port: where receivers' control datagrams go
UFTP_PORT = 47312    # uftp -u: the UFTP server's source port, where its clients' replies go


def log(*a):
    print(*a, flush=True)


def rate_bps(rate):
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(rate[:-1]) * mult[rate[-1]] if rate[-1] in mult else float(rate)


def uftp_rate(rate):
    """uftp -R counts 1024 bit/s of whole IP packets, like mcdist's --rate (uftp_compare.py)."""
    return str(int(round(rate_bps(rate) / 1024)))


def make_dataset(root, files, size):
    src = os.path.join(root, "set")
    digests = os.path.join(root, "digests.json")
    if os.path.exists(digests):
        with open(digests) as f:
            return src, json.load(f)
    shutil.rmtree(src, ignore_errors=True)
    out = {}
    block = os.urandom(1 << 20)
    for i in range(files):
        rel = os.path.join("d%02d" % (i % 10), "f%04d.bin" % i)
        p = os.path.join(src, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        data = (hashlib.sha512(block[:64] + i.to_bytes(4, "big")).digest() * (size // 64 + 1))[:size]
        with open(p, "wb") as f:
            f.write(data)
        out[rel] = [size, hashlib.sha256(data).hexdigest()]
    with open(digests, "w") as f:
        json.dump(out, f)
    return src, out


def complete_receivers(dests, digests):
    """Receivers whose tree holds every file with the right size and SHA-256."""
    n = 0
    for d in dests:
        ok = True
        for rel, (size, dg) in digests.items():
            p = os.path.join(d, rel)
            try:
                if os.path.getsize(p) != size:
                    ok = False
                    break
                with open(p, "rb") as f:
                    if hashlib.sha256(f.read()).hexdigest() != dg:
                        ok = False
                        break
            except OSError:
                ok = False
                break
        n += ok
    return n


class Capture:
    """Counts UDP datagrams to one port inside a namespace (tshark), with their times."""

    def __init__(self, ns, port, path):
        self.path = path
        self.out = open(path, "w")
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, "tshark", "-i", "lo", "-n", "-l", "-q",
                                      "-f", "udp dst port %d" % port, "-T", "fields", "-e",
                                      "frame.time_epoch"],
                                     stdout=self.out, stderr=subprocess.DEVNULL)
        time.sleep(1.5)  # tshark takes a moment before it captures

    def stop(self):
        time.sleep(0.5)
        stop_proc(self.proc, signal.SIGINT)
        self.out.close()
        with open(self.path) as f:
            return [float(x) for x in f.read().split() if x]


def rates(times, t0, t1):
    """(count, per second over [t0, t1], most in one 100 ms bin)."""
    inside = [t for t in times if t0 - 1 <= t <= t1 + 1]
    if not inside:
        return 0, 0.0, 0
    bins = {}
    for t in inside:
        bins[int(t * 10)] = bins.get(int(t * 10), 0) + 1
    return len(inside), len(inside) / max(t1 - t0, 1e-3), max(bins.values())


class Namespace:
    def __init__(self, name):
        self.name = name
        subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "add", name], check=True)
        for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "lo", "multicast", "on"]):
            subprocess.run(["ip", "netns", "exec", name] + cmd, check=True)

    def cmd(self, args):
        return ["ip", "netns", "exec", self.name] + args

    def delete(self):
        subprocess.run(["ip", "netns", "del", self.name], stderr=subprocess.DEVNULL)


def start_daemons(args, make_cmd, count, work, tag, env_of=None):
    procs = []
    for i in range(count):
        d = os.path.join(work, "%s-r%03d" % (tag, i))
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "dest"))
        os.makedirs(os.path.join(d, "temp"))
        logf = open(os.path.join(d, "log"), "w")
        env = dict(os.environ, **(env_of(i) if env_of else {}))
        procs.append((subprocess.Popen(make_cmd(i, d), stdout=logf, stderr=subprocess.STDOUT, env=env), logf, d))
    return procs


def stop_daemons(procs):
    for p, _, _ in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, logf, _ in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        logf.close()


def run_sender(cmd, cap):
    t0 = time.time()
    out = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        text, _ = out.communicate(timeout=cap)
        finished = out.returncode == 0
    except subprocess.TimeoutExpired:
        out.send_signal(signal.SIGINT)
        text, _ = out.communicate()
        finished = False
    return t0, time.time(), finished, text.decode("utf-8", "replace")


def uftp_passes(text):
    return max([int(l.split()[-1]) for l in text.splitlines() if l.startswith("Starting pass")] or [0])


def part_loopback(args, src, digests, nbytes, blocks):
    ns = Namespace("%s-lo" % args.ns_prefix)
    rows = []
    try:
        work = os.path.join(args.work, "lo")
        os.makedirs(work, exist_ok=True)
        recv = os.path.join(args.build, "receiver", "mcdistd")
        send = os.path.join(args.build, "sender", "mcdist-send")
        group = "239.192.88.1:4788"
        ids = ["site%03d" % i for i in range(args.receivers)]
        if "mcdist" in args.programs:
            # One run per FEC variant, side by side in this run (--fec).
            for variant in args.fec.split(","):
                rows += loopback_mcdist(args, ns, work, src, digests, blocks, ids, group, recv, send,
                                        variant)
        if "uftp" in args.programs:
            rows += loopback_uftp(args, ns, work, src, digests, blocks)
    finally:
        ns.delete()
    return rows


def fec_args(args, variant):
    """mcdist-send options of a --fec variant: "off" (no FEC), or a proactive overhead ("0", "3%")
    with --fec-k/--fec-depth."""
    if variant == "off":
        return []
    return ["--fec-k", str(args.fec_k), "--fec-depth", str(args.fec_depth), "--fec-overhead", variant]


def loopback_mcdist(args, ns, work, src, digests, blocks, ids, group, recv, send, variant="off"):
    rows = []
    daemons = start_daemons(args, lambda i, d: ns.cmd([
        recv, "--id", ids[i], "--group", group, "--interface", "127.0.0.1", "--dest",
        os.path.join(d, "dest"), "--temp", os.path.join(d, "temp"), "--http", "off",
        "--status-interval", "1h", "--status-file", os.path.join(d, "status.json"),
        "--drop-rate", str(args.drop), "--drop-seed", str(i + 1),
        "--sync", "none"]), args.receivers, work, "md")
    time.sleep(2 + args.receivers / 50)
    cap = Capture(ns.name, MCDIST_PORT, os.path.join(work, "md-capture.txt"))
    summary = os.path.join(work, "summary.json")
    t0, t1, finished, text = run_sender(ns.cmd([
        send, "-q", "--group", group, "--interface", "127.0.0.1", "--port", str(MCDIST_PORT),
        "--rate", args.rate, "--receivers", ",".join(ids), "--fallback", "off",
        "--register-timeout", "30s", "--summary-json", summary] + fec_args(args, variant) + [src]),
        args.cap)
    times = cap.stop()
    stop_daemons(daemons)
    name = "mcdist" if variant == "off" else "mcdist, --fec-k %d, overhead %s" % (args.fec_k, variant)
    row = {"part": "loopback", "program": name, "receivers": args.receivers, "time": t1 - t0,
           "finished": finished, "complete": complete_receivers(
               [os.path.join(d, "dest", "set") for _, _, d in daemons], digests)}
    try:
        with open(summary) as f:
            s = json.load(f)
        row.update(passes=s["passes"], sent=s["data_datagrams"], repairs=s["repair_datagrams"],
                   proactive=s.get("proactive_parity", 0), parity=s.get("parity_datagrams", 0),
                   control_counted=sum(s["control_received"][k]
                                       for k in ("register", "nak", "status", "complete")),
                   naks=s["control_received"]["nak"])
    except (OSError, ValueError, KeyError):
        row.update(passes=None, sent=None, repairs=None)
    row["control"], row["control_per_s"], row["control_peak"] = rates(times, t0, t1)
    row["blocks"] = blocks
    # The daemons' parity counters (status file, written once more at exit).
    recovered = 0
    for _, _, d in daemons:
        try:
            with open(os.path.join(d, "status.json")) as f:
                recovered += json.load(f).get("parity", {}).get("blocks_recovered", 0)
        except (OSError, ValueError):
            pass
    row["blocks_recovered"] = recovered
    log("%s: %d blocks recovered from parity at the %d daemons" % (name, recovered, args.receivers))
    rows.append(row)
    log(fmt_row(row))
    return rows


def loopback_uftp(args, ns, work, src, digests, blocks):
    rows = []
    if args.receivers > 1:
        # uftpd binds its port without SO_REUSEADDR and uftp sends every client the same port
        # (-p), so one host holds one uftpd: a second one fails with "Address already in use"
        # (seen 2026-11-25: 1 of 100 completed). Many UFTP receivers need a namespace each
        # (veth pairs on a bridge), which this script does not build yet.
        log("SKIPPED: UFTP on loopback with %d receivers: uftpd cannot share a host's port; "
            "one namespace per receiver is not built yet" % args.receivers)
        return rows
    shim = build_shim(args)
    daemons = start_daemons(args, lambda i, d: ns.cmd([
        "uftpd", "-d", "-I", "127.0.0.1", "-M", "230.4.4.1", "-D", os.path.join(d, "dest"),
        "-U", "0x%08x" % (0x100 + i), "-B", "4194304", "-q", "-x", "1", "-T",
        os.path.join(d, "temp")]), args.receivers, work, "uf",
        env_of=lambda i: {"LD_PRELOAD": shim, "MCDIST_DROP_RATE": str(args.drop),
                          "MCDIST_DROP_SEED": str(i + 1)})
    time.sleep(2 + args.receivers / 50)
    cap = Capture(ns.name, UFTP_PORT, os.path.join(work, "uf-capture.txt"))
    t0, t1, finished, text = run_sender(ns.cmd([
        "uftp", "-I", "127.0.0.1", "-M", "230.4.4.1", "-P", "230.5.5.1", "-u", str(UFTP_PORT),
        "-H", ",".join("0x%08x" % (0x100 + i) for i in range(args.receivers)), "-R",
        uftp_rate(args.rate), "-Y", "none", "-B", "104857600", src]),
        args.cap)
    times = cap.stop()
    stop_daemons(daemons)
    with open(os.path.join(work, "uftp.out"), "w") as f:
        f.write(text)
    row = {"part": "loopback", "program": "UFTP 4.10", "receivers": args.receivers,
           "time": t1 - t0, "finished": finished, "passes": uftp_passes(text), "sent": None,
           "repairs": None, "blocks": blocks,
           "complete": complete_receivers([os.path.join(d, "dest", "set") for _, _, d in daemons],
                                          digests)}
    row["control"], row["control_per_s"], row["control_peak"] = rates(times, t0, t1)
    rows.append(row)
    log(fmt_row(row))
    return rows


def build_shim(args):
    out = os.path.join(args.work, "recv_drop.so")
    if not os.path.exists(out):
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", out, os.path.join(HERE, "recv_drop.c"), "-ldl"],
                       check=True)
    return out


def linkem_counts(stats_path):
    """(packets the sender's host h0 sent into the network, packets delivered to it)."""
    with open(stats_path) as f:
        s = json.load(f)
    h0 = [h for h in s["hosts"] if h["name"] == "h0"][0]
    return h0["up"]["packets_in"], h0["down"]["delivered"]


def part_geo(args, src, digests, nbytes, blocks):
    rows = []
    n = args.geo_receivers
    linkem = os.path.join(args.build, "tests", "linkem", "mcdist-linkem")
    work = os.path.join(args.work, "geo")
    os.makedirs(work, exist_ok=True)
    spec = "h1-h%d:delay=%gms,loss=%g" % (n, args.geo_rtt_ms / 2, args.geo_loss)
    programs = [p for p in ("mcdist", "uftp") if p in args.programs]
    for prog in programs:
        stats = os.path.join(work, "linkem-%s.json" % prog)
        emu = Emulator(linkem, work, [spec], hosts=n + 1, seed=7, stats_json=stats)
        try:
            if prog == "mcdist":
                recv = os.path.join(args.build, "receiver", "mcdistd")
                send = os.path.join(args.build, "sender", "mcdist-send")
                group = "239.192.89.1:4789"
                daemons = start_daemons(args, lambda i, d: ["ip", "netns", "exec", emu.ns(i + 1), recv, "--id",
                                                            "h%d" % (i + 1), "--group", group, "--interface",
                                                            emu.addr(i + 1), "--dest", os.path.join(d, "dest"),
                                                            "--temp", os.path.join(d, "temp"), "--http", "off",
                                                            "--status-interval", "1h", "--sync", "none"],
                                        n, work, "md")
                time.sleep(2)
                summary = os.path.join(work, "summary.json")
                t0, t1, finished, text = run_sender(["ip", "netns", "exec", emu.ns(0), send, "-q", "--group", group,
                                                     "--interface", emu.addr(0), "--rate", args.geo_rate,
                                                     "--receivers", ",".join("h%d" % (i + 1) for i in range(n)),
                                                     "--fallback", "off", "--register-timeout", "30s",
                                                     "--summary-json", summary, src], args.cap)
                stop_daemons(daemons)
                row = {"passes": None, "repairs": None}
                try:
                    with open(summary) as f:
                        s = json.load(f)
                    row.update(passes=s["passes"], repairs=s["repair_datagrams"])
                except (OSError, ValueError, KeyError):
                    pass
                name = "mcdist"
            else:
                daemons = start_daemons(args, lambda i, d: ["ip", "netns", "exec", emu.ns(i + 1), "uftpd", "-d",
                                                            "-I", "mle0", "-M", "230.4.4.1", "-D",
                                                            os.path.join(d, "dest"), "-U", "0x%08x" % (i + 2),
                                                            "-B", "104857600", "-q", "-x", "1", "-T",
                                                            os.path.join(d, "temp")], n, work, "uf")
                time.sleep(2)
                t0, t1, finished, text = run_sender(["ip", "netns", "exec", emu.ns(0), "uftp", "-I", "mle0", "-M",
                                                     "230.4.4.1", "-P", "230.5.5.1", "-H",
                                                     ",".join("0x%08x" % (i + 2) for i in range(n)), "-R",
                                                     uftp_rate(args.geo_rate), "-Y", "none", "-B", "104857600",
                                                     src], args.cap)
                stop_daemons(daemons)
                row = {"passes": uftp_passes(text), "repairs": None}
                name = "UFTP 4.10"
        finally:
            emu.stop()
        sent, control = linkem_counts(stats)
        elapsed = t1 - t0
        row.update(part="geo", program=name, receivers=n, time=elapsed, finished=finished, sent=sent,
                   blocks=blocks, control=control, control_per_s=control / max(elapsed, 1e-3), control_peak=None,
                   complete=complete_receivers([os.path.join(d, "dest", "set") for _, _, d in daemons], digests))
        rows.append(row)
        log(fmt_row(row))
    return rows


def fmt_row(r):
    return ("| %s | %s | %d | %.1f s%s | %s | %s | %s | %d | %.0f | %s | %d/%d |" % (
        r["part"], r["program"], r["receivers"], r["time"], "" if r["finished"] else " (cap)",
        r["passes"] if r["passes"] is not None else "-",
        "%.3f" % (r["sent"] / r["blocks"]) if r.get("sent") else "-",
        r["repairs"] if r.get("repairs") is not None else "-", r["control"], r["control_per_s"],
        r["control_peak"] if r.get("control_peak") is not None else "-", r["complete"], r["receivers"]))


HEADER = ("| part | program | receivers | completion | passes | datagrams sent per source block |"
          " repair datagrams | control datagrams at the sender | per second | most in 100 ms |"
          " receivers complete |\n|---|---|---|---|---|---|---|---|---|---|---|")


FEC_HEADER = ("| program | completion | passes | datagrams sent per source block | proactive parity |"
              " repair datagrams | NAK datagrams (sender's count) | control datagrams (sender's count) |"
              " blocks recovered from parity, all sites | receivers complete |\n"
              "|---|---|---|---|---|---|---|---|---|---|")


def fmt_fec_row(r):
    return "| %s | %.1f s%s | %d | %.3f | %d | %d | %d | %d | %d | %d/%d |" % (
        r["program"], r["time"], "" if r["finished"] else " (cap)", r["passes"], r["sent"] / r["blocks"],
        r["proactive"], r["repairs"], r["naks"], r["control_counted"], r["blocks_recovered"], r["complete"],
        r["receivers"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--work", default="/dev/shm/mcdist-scale")
    ap.add_argument("--parts", default="loopback,geo")
    ap.add_argument("--receivers", type=int, default=100, help="daemons in the loopback part")
    ap.add_argument("--rate", default="100M", help="loopback part: both senders' rate")
    ap.add_argument("--drop", type=float, default=0.01, help="loopback part: loss at each receiver")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--geo-receivers", type=int, default=20)
    ap.add_argument("--geo-rtt-ms", type=float, default=700)
    ap.add_argument("--geo-loss", type=float, default=1e-3)
    ap.add_argument("--geo-rate", default="100M")
    ap.add_argument("--fec", default="off",
                    help="loopback part, mcdist: comma-separated variants run one after the other, "
                         "'off' (no FEC) or a proactive overhead with --fec-k ('0', '3%%')")
    ap.add_argument("--fec-k", type=int, default=64)
    ap.add_argument("--fec-depth", type=int, default=4)
    ap.add_argument("--cap", type=float, default=180, help="seconds one sender run may take")
    ap.add_argument("--no-uftp", action="store_true", help="same as --programs mcdist")
    ap.add_argument("--programs", default="mcdist,uftp", help="which programs to run")
    ap.add_argument("--ns-prefix", default="mcdist-scale", help="network namespace names start with this")
    ap.add_argument("--json", help="also write every row here")
    args = ap.parse_args()
    args.programs = [p for p in args.programs.split(",") if not (args.no_uftp and p == "uftp")]
    if os.geteuid() != 0:
        sys.exit("scale_real.py needs root (network namespaces)")
    for tool in ["tshark"] + (["uftp", "uftpd", "cc"] if "uftp" in args.programs else []):
        if not shutil.which(tool):
            sys.exit("missing %s: deploy/install-deps.sh --bench" % tool)
    os.makedirs(args.work, exist_ok=True)
    src, digests = make_dataset(args.work, args.files, args.size)
    nbytes = args.files * args.size
    blocks = args.files * -(-args.size // 1400)
    rows = []
    parts = args.parts.split(",")
    started = time.strftime("%Y-%m-%d %H:%M")
    log(HEADER)
    if "loopback" in parts:
        rows += part_loopback(args, src, digests, nbytes, blocks)
    if "geo" in parts:
        rows += part_geo(args, src, digests, nbytes, blocks)
    print()
    print("Scale with real processes, %s; %d files x %d B (%d blocks of 1400 B); loopback: %d daemons, "
          "%s, %g drop at each; geo: %d receivers through mcdist-linkem, RTT %g ms, loss %g, %s." % (
              started, args.files, args.size, blocks, args.receivers, args.rate, args.drop, args.geo_receivers,
              args.geo_rtt_ms, args.geo_loss, args.geo_rate))
    print(HEADER)
    for r in rows:
        print(fmt_row(r))
    fec_rows = [r for r in rows if "blocks_recovered" in r and r.get("passes") is not None]
    if len(args.fec.split(",")) > 1 and fec_rows:
        print()
        print(FEC_HEADER)
        for r in fec_rows:
            print(fmt_fec_row(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
