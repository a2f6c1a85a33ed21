#!/usr/bin/env python3
"""Scale with real processes: many receiver daemons at once, mcdist beside UFTP
4.10 with the same receivers, in the same run.

Part "loopback" (the name is older than its topology: all on this machine, no emulator): N
receivers (default 100), each in a network namespace of its own. The sender's namespace PREFIX-s
holds a Linux bridge br0 (10.88.0.1/16, multicast snooping off, so every multicast frame is
flooded to every port); each receiver namespace PREFIX-rNNN has an eth0 (10.88.x.y/16), one end
of a veth pair whose other end is a port of br0. mcdist (mcdistd --interface its eth0 address,
mcdist-send --interface 10.88.0.1) and then UFTP (uftpd -I its eth0 address, uftp -I 10.88.0.1)
run over these same namespaces, so they have literally the same receivers; a namespace each is
also what lets 100 uftpd run at all (each binds UDP port 1044, and uftp sends every client to
the same port). Each receiver drops 1 % of what it receives independently (mcdistd --drop-rate,
seed i+1; uftpd the same through recv_drop.so, an LD_PRELOAD shim built from recv_drop.c beside
this script). One sender at --rate, started once every daemon has joined the group (its
namespace's /proc/PID/net/igmp) and the capture runs. The namespaces are built with `ip -batch`
at the start of the part and removed at its end, also on an error, SIGINT or SIGTERM; namespaces
PREFIX-* left by a run that was killed are removed first (--ns-prefix, default mcdist-scale).

Part "geo": mcdist-linkem with one sender and 20 receivers, each behind a 700 ms RTT link with
1e-3 loss (both directions), the sender at --geo-rate.

Per program it prints: completion time (sender start to exit), passes, datagrams the sender sent
per source block (data, repairs and control: 1.00 is no repair at all), repair datagrams, control
datagrams the sender received (NAK, status, COMPLETE, REGISTER and UFTP's kinds) in all, per
second of the session and the most in any 100 ms, mcdist-send's own count of the control
datagrams it received (its summary's control_received; UFTP has none: "-"), and how many
receivers hold every file with the right size and SHA-256. Control datagrams are counted
outside the programs: in the loopback part by a tshark capture on br0 in the sender's namespace
of UDP datagrams to the sender's reply port (mcdist-send --port 47311, uftp -u 47312), running
before the sender starts and until a marker datagram sent after it exited has come through; in
the geo part from the emulator's counters of packets delivered to the sender's host.

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
from uftp_compare import uftp_passes

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
    """Counts UDP datagrams to one port on one interface inside a namespace (tshark), with their
    times. Returns once tshark reports "Capture started" (dumpcap has the interface open with the
    filter set; its earlier "Capturing on" comes before that, and a sender started on it lost its
    first REGISTERs to the count), so nothing the run sends is missed (under load tshark takes
    seconds to start: a fixed wait missed whole sessions). marker_from:
    (namespace, address) a datagram can reach the capture from (a receiver's), for stop()."""

    # Source port of stop()'s marker datagrams, left out of the count; above the ephemeral range
    # (32768-60999), so no daemon in the namespace holds it.
    MARKER_PORT = 61399

    def __init__(self, ns, iface, port, path, marker_from):
        self.path = path
        self.port = port
        self.marker_from = marker_from
        self.out = open(path, "w")
        self.err_path = path + ".stderr"
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, "tshark", "-i", iface, "-n", "-l", "-q",
                                      "-f", "udp dst port %d" % port, "-T", "fields", "-e",
                                      "frame.time_epoch", "-e", "udp.srcport"],
                                     stdout=self.out, stderr=self.err)
        deadline = time.time() + 60
        while "Capture started" not in self.stderr():
            if self.proc.poll() is not None or time.time() > deadline:
                stop_proc(self.proc, signal.SIGINT)
                sys.exit("tshark did not start capturing on %s in %s: %s" % (iface, ns, self.stderr()))
            time.sleep(0.05)

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def lines(self):
        with open(self.path) as f:
            return [l.split() for l in f if len(l.split()) == 2]

    def stop(self):
        """After the sender exited: sends a marker datagram to the captured port from a receiver's
        namespace, behind whatever the receivers sent before, and stops tshark once it has
        printed the marker, so every datagram that reached the capture before it is counted.
        (pcap hands packets over in blocks: under load the last ones, e.g. the COMPLETEs, were
        still in the kernel when a fixed 0.5 s wait ran out.) Resent each second, 30 s at most."""
        ns, to = self.marker_from
        send = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                "s.bind(('', %d)); s.sendto(b'scale_real.py: end of capture', ('%s', %d))" % (
                    self.MARKER_PORT, to, self.port))
        deadline = time.time() + 30
        seen = False
        while not seen and time.time() < deadline:
            subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", send], check=True)
            resend = time.time() + 1
            while not seen and time.time() < resend:
                seen = any(int(p) == self.MARKER_PORT for _, p in self.lines())
                time.sleep(0.05)
        if not seen:
            log("capture %s: the end marker did not show in 30 s; the last datagrams may be missing" %
                os.path.basename(self.path))
        stop_proc(self.proc, signal.SIGINT)
        self.out.close()
        self.err.close()
        # tshark's own summary on exit, e.g. "12 packets captured" and, if the kernel buffer
        # overflowed, "3 packets dropped": a capture that dropped counts too few.
        dropped = [l.strip() for l in self.stderr().splitlines() if "dropped" in l]
        if dropped:
            log("capture %s: %s" % (os.path.basename(self.path), "; ".join(dropped)))
        return [float(t) for t, p in self.lines() if int(p) != self.MARKER_PORT]


def rates(times, t0, t1):
    """(count, per second over [t0, t1], most in one 100 ms bin)."""
    inside = [t for t in times if t0 - 1 <= t <= t1 + 1]
    if not inside:
        return 0, 0.0, 0
    bins = {}
    for t in inside:
        bins[int(t * 10)] = bins.get(int(t * 10), 0) + 1
    return len(inside), len(inside) / max(t1 - t0, 1e-3), max(bins.values())


def ip_batch(lines, ns=None, capture=False):
    """Runs iproute2 commands, one per line, in one `ip -batch` process (in namespace ns)."""
    r = subprocess.run(["ip"] + (["-n", ns] if ns else []) + ["-batch", "-"],
                       input="".join(l + "\n" for l in lines), text=True, check=not capture,
                       capture_output=capture)
    return r.stdout if capture else None


def remove_namespaces(names):
    """Stops what still runs in these namespaces (a run killed midway leaves its daemons there,
    and a namespace with a process in it outlives `ip netns del`), then deletes them."""
    if not names:
        return
    deadline = time.time() + 10
    sig = signal.SIGTERM
    while True:
        # `ip netns pids` lists the processes whose network namespace is that one (a zombie has none).
        pids = [int(p) for p in ip_batch(["netns pids " + n for n in names], capture=True).split()]
        if not pids:
            break
        if time.time() > deadline:
            sig = signal.SIGKILL
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    ip_batch(["netns del " + n for n in names])


def namespaces_of(prefix):
    """Network namespaces named PREFIX-..., this script's (and those of a run that was killed)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [l.split()[0] for l in out.splitlines() if l.split() and l.split()[0].startswith(prefix + "-")]


class BridgeNet:
    """The loopback part's network, the same for mcdist and UFTP: a namespace PREFIX-s for the
    sender holding a Linux bridge br0 (10.88.0.1/16, multicast snooping off, so it floods every
    multicast frame to every port: no querier needed), and per receiver i a namespace PREFIX-rNNN
    whose eth0 (10.88.x.y/16) is one end of a veth pair, the other end (vNNN) a port of br0. A
    receiver's replies cross its veth and the bridge to 10.88.0.1, so a capture on br0 sees every
    control datagram the sender gets. Built with a few `ip -batch` runs (100 receivers in well
    under a second); delete() removes it all. Leftovers of an earlier run with the same prefix
    are removed first."""

    BRIDGE = "br0"
    SENDER_ADDR = "10.88.0.1"
    IF = "eth0"

    def __init__(self, prefix, receivers):
        if receivers > 999:
            sys.exit("at most 999 receivers (namespace and veth names, 10.88.0.0/16)")
        self.prefix = prefix
        self.sender = prefix + "-s"
        self.receivers = ["%s-r%03d" % (prefix, i) for i in range(receivers)]
        self.addrs = ["10.88.%d.%d" % (1 + i // 250, 1 + i % 250) for i in range(receivers)]
        old = namespaces_of(prefix)
        if old:
            log("removing %d network namespaces %s-* left by an earlier run" % (len(old), prefix))
            remove_namespaces(old)
        t = time.time()
        try:
            ip_batch(["netns add " + n for n in [self.sender] + self.receivers])
            lines = ["link set lo up",
                     "link add %s type bridge mcast_snooping 0" % self.BRIDGE,
                     "addr add %s/16 dev %s" % (self.SENDER_ADDR, self.BRIDGE),
                     "link set %s multicast on" % self.BRIDGE,
                     "link set %s up" % self.BRIDGE]
            for i, ns in enumerate(self.receivers):
                port = "v%03d" % i
                lines += ["link add %s type veth peer name %s netns %s" % (port, self.IF, ns),
                          "link set %s master %s" % (port, self.BRIDGE),
                          "link set %s up" % port]
            ip_batch(lines, self.sender)
            # A batch runs in one namespace: one `ip -n` per receiver (a few ms each).
            for ns, addr in zip(self.receivers, self.addrs):
                ip_batch(["link set lo up", "addr add %s/16 dev %s" % (addr, self.IF),
                          "link set %s multicast on" % self.IF, "link set %s up" % self.IF], ns)
        except BaseException:
            self.delete()
            raise
        log("network: %s with bridge %s (%s), %d receiver namespaces on veth pairs, built in %.2f s" % (
            self.sender, self.BRIDGE, self.SENDER_ADDR, receivers, time.time() - t))

    def sender_cmd(self, args):
        return ["ip", "netns", "exec", self.sender] + args

    def receiver_cmd(self, i, args):
        return ["ip", "netns", "exec", self.receivers[i]] + args

    def delete(self):
        remove_namespaces([n for n in [self.sender] + self.receivers if n in namespaces_of(self.prefix)])


def group_hex(addr):
    """A group address as /proc/net/igmp prints it (the address's bytes as a host-order word)."""
    return "%08X" % int.from_bytes(bytes(int(x) for x in addr.split(".")), sys.byteorder)


def wait_joined(daemons, group, iface, what, timeout=60):
    """Waits until every daemon's network namespace has joined group on iface (/proc/PID/net/igmp;
    the daemon is the process `ip netns exec` became), i.e. it can receive the session. Exits the
    script if a daemon dies or the timeout passes."""
    want = group_hex(group)
    deadline = time.time() + timeout
    for p, logf, d in daemons:
        while True:
            try:
                with open("/proc/%d/net/igmp" % p.pid) as f:
                    dev = None
                    joined = False
                    for line in f:
                        fields = line.split()
                        if line[:1].isdigit():
                            dev = fields[1]
                        elif fields and dev == iface and fields[0] == want:
                            joined = True
                if joined:
                    break
            except OSError:
                pass
            if p.poll() is not None or time.time() > deadline:
                logf.flush()
                stop_daemons(daemons)
                sys.exit("%s in %s did not join %s on %s; see %s" % (what, d, group, iface,
                                                                    os.path.join(d, "log")))
            time.sleep(0.05)


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


def part_loopback(args, src, digests, nbytes, blocks):
    rows = []
    net = BridgeNet(args.ns_prefix, args.receivers)
    try:
        work = os.path.join(args.work, "bridge")
        os.makedirs(work, exist_ok=True)
        recv = os.path.join(args.build, "receiver", "mcdistd")
        send = os.path.join(args.build, "sender", "mcdist-send")
        group = "239.192.88.1:4788"
        ids = ["site%03d" % i for i in range(args.receivers)]
        if "mcdist" in args.programs:
            # One run per FEC variant, side by side in this run (--fec).
            for variant in args.fec.split(","):
                rows += loopback_mcdist(args, net, work, src, digests, blocks, ids, group, recv, send,
                                        variant)
        if "uftp" in args.programs:
            rows += loopback_uftp(args, net, work, src, digests, blocks)
    finally:
        net.delete()
    return rows


def fec_args(args, variant):
    """mcdist-send options of a --fec variant: "off" (no FEC), or a proactive overhead ("0", "3%")
    with --fec-k/--fec-depth."""
    if variant == "off":
        return ["--fec-k", "0"]  # explicitly: mcdist-send sends parity by default
    return ["--fec-k", str(args.fec_k), "--fec-depth", str(args.fec_depth), "--fec-overhead", variant]


def loopback_mcdist(args, net, work, src, digests, blocks, ids, group, recv, send, variant="off"):
    rows = []
    daemons = start_daemons(args, lambda i, d: net.receiver_cmd(i, [
        recv, "--id", ids[i], "--group", group, "--interface", net.addrs[i], "--dest",
        os.path.join(d, "dest"), "--temp", os.path.join(d, "temp"), "--http", "off",
        "--status-interval", "1h", "--status-file", os.path.join(d, "status.json"),
        "--drop-rate", str(args.drop), "--drop-seed", str(i + 1),
        "--sync", "none", "--allow-unsigned"]), args.receivers, work, "md")
    wait_joined(daemons, group.split(":")[0], net.IF, "mcdistd")
    cap = Capture(net.sender, net.BRIDGE, MCDIST_PORT, os.path.join(work, "md-capture.txt"),
                  (net.receivers[0], net.SENDER_ADDR))
    summary = os.path.join(work, "summary.json")
    if os.path.exists(summary):
        os.unlink(summary)
    t0, t1, finished, text = run_sender(net.sender_cmd([
        send, "-q", "--group", group, "--interface", net.SENDER_ADDR, "--port", str(MCDIST_PORT),
        "--rate", args.rate, "--receivers", ",".join(ids), "--fallback", "off",
        "--register-timeout", "30s", "--summary-json", summary] + fec_args(args, variant) + [src]),
        args.cap)
    times = cap.stop()
    stop_daemons(daemons)
    with open(os.path.join(work, "mcdist-send.out"), "w") as f:
        f.write(text)
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


def loopback_uftp(args, net, work, src, digests, blocks):
    """UFTP 4.10 over the same namespaces: one uftpd per receiver namespace (each binds UDP port
    1044 in its own namespace, which one host cannot give 100 uftpd), uftp in the sender's."""
    rows = []
    shim = build_shim(args)
    daemons = start_daemons(args, lambda i, d: net.receiver_cmd(i, [
        "uftpd", "-d", "-I", net.addrs[i], "-M", "230.4.4.1", "-D", os.path.join(d, "dest"),
        "-U", "0x%08x" % (0x100 + i), "-B", "4194304", "-q", "-x", "1", "-T",
        os.path.join(d, "temp")]), args.receivers, work, "uf",
        env_of=lambda i: {"LD_PRELOAD": shim, "MCDIST_DROP_RATE": str(args.drop),
                          "MCDIST_DROP_SEED": str(i + 1)})
    wait_joined(daemons, "230.4.4.1", net.IF, "uftpd")
    cap = Capture(net.sender, net.BRIDGE, UFTP_PORT, os.path.join(work, "uf-capture.txt"),
                  (net.receivers[0], net.SENDER_ADDR))
    t0, t1, finished, text = run_sender(net.sender_cmd([
        "uftp", "-I", net.SENDER_ADDR, "-M", "230.4.4.1", "-P", "230.5.5.1", "-u", str(UFTP_PORT),
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
                                                            "--status-interval", "1h", "--sync", "none", "--allow-unsigned"],
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
                    row.update(passes=s["passes"], repairs=s["repair_datagrams"],
                               control_counted=sum(s["control_received"][k]
                                                   for k in ("register", "nak", "status", "complete")))
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
                with open(os.path.join(work, "uftp.out"), "w") as f:
                    f.write(text)
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
    return ("| %s | %s | %d | %.1f s%s | %s | %s | %s | %d | %.0f | %s | %s | %d/%d |" % (
        r["part"], r["program"], r["receivers"], r["time"], "" if r["finished"] else " (cap)",
        r["passes"] if r["passes"] is not None else "-",
        "%.3f" % (r["sent"] / r["blocks"]) if r.get("sent") else "-",
        r["repairs"] if r.get("repairs") is not None else "-", r["control"], r["control_per_s"],
        r["control_peak"] if r.get("control_peak") is not None else "-",
        r["control_counted"] if r.get("control_counted") is not None else "-", r["complete"], r["receivers"]))


# "control datagrams at the sender" and its rates are counted outside the programs (loopback: tshark
# on the sender namespace's bridge, UDP to the sender's reply port; geo: the emulator's packets
# delivered to the sender's host); "sender's own count" is mcdist-send's control_received
# (REGISTER + NAK + status + COMPLETE), a cross-check UFTP has no counterpart of.
HEADER = ("| part | program | receivers | completion | passes | datagrams sent per source block |"
          " repair datagrams | control datagrams at the sender | per second | most in 100 ms |"
          " sender's own count | receivers complete |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


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
    ap.add_argument("--receivers", type=int, default=100,
                    help="loopback part: receiver namespaces on the bridge, one mcdistd (then one uftpd) each")
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
    ap.add_argument("--ns-prefix", default="mcdist-scale",
                    help="loopback part: namespaces PREFIX-s (sender, bridge) and PREFIX-rNNN (receivers); "
                         "any PREFIX-* already there (an earlier run killed midway) is removed at the start")
    ap.add_argument("--json", help="also write every row here")
    args = ap.parse_args()
    args.programs = [p for p in args.programs.split(",") if not (args.no_uftp and p == "uftp")]
    # SIGTERM (and SIGINT, also where a shell started this in the background with it ignored)
    # unwinds like an error, so the parts' finally blocks stop the daemons and remove the namespaces.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: sys.exit("scale_real.py: signal %d, cleaning up" % signum))
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
    print("Scale with real processes, %s; %d files x %d B (%d blocks of 1400 B); loopback: %d receiver "
          "namespaces on one bridge (veth pairs), %s, %g drop at each; geo: %d receivers through mcdist-linkem, "
          "RTT %g ms, loss %g, %s." % (
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
