"""The benchmarks' other peers beside UFTP: NORM (RFC 5740, NRL's libnorm through this tree's
tests/bench/norm programs) and UDPcast (Debian's udpcast), how each is started, how its CPU
is counted, and how its delivery is verified (SHA-256 of every file).

NORM: mcdist-norm-send / mcdist-norm-recv (tests/bench/norm, built with -DMCDIST_BENCH_PEERS=ON:
`ninja -C BUILD mcdist-norm-send mcdist-norm-recv`). One NORM_OBJECT_FILE per file, NACK repair
with NORM's Reed-Solomon FEC (64 source + up to 16 parity segments of 1400 bytes per block,
parity on demand), completion by positive acknowledgement of a watermark on the last object
from every listed receiver. A fixed rate (NormSetTxRate), or NORM-CC with the rate as its
ceiling (rate_auto_bench.py). tests/bench/norm/norm_send.cpp says why each setting.

UDPcast: udp-sender / udp-receiver (Debian 12: 20120424) as their users run them for a bulk copy: one file
with --file, a set of files as a tar stream on standard input and output; --nokbd and
--min-receivers N so that it starts unattended once the N receivers have connected;
--max-bitrate, its rate governor (it counts "the raw bitrate, including packet headers");
--full-duplex, which its manual recommends on switched (full-duplex) networks and on high-latency
links, as every link here is; its default reliable mode (receivers acknowledge every slice,
the sender retransmits what they miss), not --async (one-way, FEC only, no guarantee of
delivery: a receiver that misses more than the FEC covers gives up). With a single receiver
udp-sender switches to unicast by itself; --nopointopoint keeps it on multicast, as every other
program here is (one receiver standing for many).

CPU: every per-run process (NORM's sender and receivers, udp-sender, udp-receiver) is reaped with
os.wait4, whose resource usage covers the process and the children it waited for (tar in a
pipeline, through the shell). Long-running daemons (mcdistd, uftpd) are sampled from
/proc/PID/stat before and after. "CPU s per GB" is those seconds over the verified bytes in GB
(1e9).
"""

import hashlib
import os
import shutil
import signal
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def norm_programs(build):
    """(sender, receiver) of the NORM peer in BUILD, or None if they are not built."""
    d = os.path.join(build, "tests", "bench", "norm")
    send, recv = os.path.join(d, "mcdist-norm-send"), os.path.join(d, "mcdist-norm-recv")
    if os.access(send, os.X_OK) and os.access(recv, os.X_OK):
        return send, recv
    return None


def udpcast_available():
    return bool(shutil.which("udp-sender") and shutil.which("udp-receiver"))


_UNSIGNED = {}


def allow_unsigned(mcdistd):
    """["--allow-unsigned"] when this mcdistd knows the flag (main since the secure default: a
    channel must trust a sender or ask for unsigned sessions by name), else [] (an older
    baseline build)."""
    if mcdistd not in _UNSIGNED:
        try:
            out = subprocess.run([mcdistd, "--help"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = b""
        _UNSIGNED[mcdistd] = ["--allow-unsigned"] if b"--allow-unsigned" in out else []
    return _UNSIGNED[mcdistd]


def leads_group(p):
    try:
        return os.getpgid(p.pid) == p.pid
    except OSError:
        return False


def signal_proc(p, sig):
    """Sends sig to p, to its whole process group when p leads one (Popen(start_new_session=True):
    a shell pipeline such as udp-receiver | tar)."""
    try:
        if os.getpgid(p.pid) == p.pid:
            os.killpg(p.pid, sig)
        else:
            os.kill(p.pid, sig)
    except OSError:
        pass


def group_cpu(pgid):
    """CPU seconds so far of every live process in process group pgid (from /proc), children
    they reaped included (cutime, cstime)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                parts = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(parts[2]) == pgid:  # field 5, pgrp
            total += sum(int(x) for x in parts[11:15]) / tick
    return total


def wait_rusage(p, timeout=None, stop_sig=signal.SIGINT):
    """Waits for Popen p with os.wait4; past `timeout` seconds sends stop_sig, then SIGKILL 5 s
    later. @return (exit code, CPU seconds (user + system, with waited-for children), timed out)

    A process group (a shell pipeline) that has to be stopped loses the children the shell had
    not reaped yet: their CPU is sampled from /proc just before the signal, and the larger of
    the two figures is returned."""
    deadline = None if timeout is None else time.monotonic() + timeout
    signalled = killed = False
    sampled = 0.0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return p.returncode, max(ru.ru_utime + ru.ru_stime, sampled), signalled
        now = time.monotonic()
        if deadline is not None and now > deadline and not signalled:
            if leads_group(p):
                sampled = group_cpu(p.pid)
            signal_proc(p, stop_sig)
            signalled = True
            deadline = now + 5
        elif signalled and now > deadline and not killed:
            signal_proc(p, signal.SIGKILL)
            killed = True
        time.sleep(0.01)


def proc_cpu(pid):
    """CPU seconds of a live process so far (/proc/PID/stat utime + stime)."""
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                return h.hexdigest()
            h.update(b)


def tree_digests(root):
    """{path relative to root's parent: (size, SHA-256)} of every file under root (a directory
    or a single file)."""
    out = {}
    base = os.path.dirname(os.path.abspath(root))
    if os.path.isfile(root):
        out[os.path.basename(root)] = (os.path.getsize(root), file_digest(root))
        return out
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, base)] = (os.path.getsize(p), file_digest(p))
    return out


def verified_bytes(expected, dest):
    """Bytes of the files of `expected` (tree_digests of the source) found under dest with the
    source's size and SHA-256."""
    ok = 0
    for rel, (size, digest) in expected.items():
        p = os.path.join(dest, rel)
        try:
            if os.path.getsize(p) != size:
                continue
        except OSError:
            continue
        if file_digest(p) == digest:
            ok += size
    return ok


def gb(nbytes):
    return nbytes / 1e9


def per_gb(cpu, nbytes):
    """CPU seconds per delivered GB (None when nothing was delivered)."""
    return cpu / gb(nbytes) if nbytes > 0 else None


def fmt_per_gb(v):
    return "-" if v is None else "%.2f" % v


def rate_bps(rate):
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(rate[:-1]) * mult[rate[-1]] if rate[-1] in mult else float(rate)


# -- NORM --------------------------------------------------------------------------------------

def norm_buffer(rate, rtt_s):
    """NormStartSender/NormStartReceiver bufferSpace: the guide sizes it by the bandwidth*delay
    product; twice that (a repair round on top of the data in flight), 4 MiB at least, 64 MiB
    at most. libnorm allocates it at start (the receiver when a sender appears), which on this
    machine costs about 1.5 s for 64 MiB under load: no larger than the path needs."""
    need = 2 * rate_bps(rate) / 8 * rtt_s
    return "%dM" % max(4, min(64, int(need / (1 << 20)) + 1))


def norm_send_cmd(send, group, iface, src, receiver_ids, rate=None, cc_max=None, grtt=0.001,
                  buffer="4M", summary=None, timeout=600):
    """mcdist-norm-send's argv: a fixed `rate`, or NORM-CC up to `cc_max`."""
    args = [send, "-q", "--group", group, "--ack", ",".join(str(i) for i in receiver_ids),
            "--grtt", str(grtt), "--buffer", buffer, "--timeout", str(timeout)]
    if iface:
        args += ["--interface", iface]
    if cc_max:
        args += ["--cc", "--rate-max", cc_max]
    else:
        args += ["--rate", rate]
    if summary:
        args += ["--summary-json", summary]
    return args + [src]


def norm_recv_cmd(recv, group, iface, node_id, dest, files, buffer="4M", timeout=600):
    args = [recv, "--group", group, "--id", str(node_id), "--dest", dest, "--files", str(files),
            "--buffer", buffer, "--timeout", str(timeout)]
    if iface:
        args += ["--interface", iface]
    return args


# -- UDPcast -----------------------------------------------------------------------------------

def udpcast_rate(rate):
    """udp-sender --max-bitrate: "5m" is 5 Mbit/s; it counts whole packets with their headers,
    like mcdist's --rate."""
    return "%dk" % int(round(rate_bps(rate) / 1e3))


def udpcast_rdv(mcast):
    """The rendezvous group for a data group: 239.199.X.Y for 239.*.X.Y. udpcast's control
    messages go to the interface's broadcast address (or 224.0.0.1); the emulator's TUN links
    have no broadcast, and on them sender and receivers only found each other through a group
    of their own (--mcast-rdv-address, the manual's option for it)."""
    return "239.199." + ".".join(mcast.split(".")[2:])


def udpcast_send_cmd(src, iface, portbase, mcast, rate, receivers, slice_size=None):
    """udp-sender's argv: one file with --file (src a single-file directory sends that file), a
    set as `tar -c` piped in; rate None: unpaced (no --max-bitrate). slice_size: its
    --default-slice-size, the slice every duplex-mode transfer uses (udpcast's default 112 blocks;
    its manual's "tuning options" are about this, up to 1024): a sender waits for each slice's
    acknowledgements, so on a long round trip the default slice bounds it to about 112 x 1456
    bytes per RTT (70 ms: 18 Mbit/s). @return (argv, what) with what "file" or "tar"."""
    common = ["udp-sender", "--nokbd", "--interface", iface, "--portbase", str(portbase),
              "--mcast-data-address", mcast, "--mcast-rdv-address", udpcast_rdv(mcast),
              "--min-receivers", str(receivers), "--full-duplex",
              "--nopointopoint"] + (["--max-bitrate", udpcast_rate(rate)] if rate else []) + \
        (["--default-slice-size", str(slice_size)] if slice_size else [])
    files = [os.path.join(d, n) for d, _, ns in os.walk(src) for n in ns] if os.path.isdir(src) else [src]
    if len(files) == 1:
        return common + ["--file", files[0]], "file"
    pipeline = "tar -c -C %s %s | %s" % (q(os.path.dirname(os.path.abspath(src))),
                                         q(os.path.basename(src)), " ".join(q(a) for a in common))
    return ["sh", "-c", pipeline], "tar"


def udpcast_recv_cmd(src, dest, iface, portbase, what, mcast):
    """udp-receiver's argv, writing where the other programs do: DEST/<basename of src>/..."""
    common = ["udp-receiver", "--nokbd", "--interface", iface, "--portbase", str(portbase),
              "--mcast-rdv-address", udpcast_rdv(mcast)]
    if what == "file":
        files = [os.path.join(d, n) for d, _, ns in os.walk(src) for n in ns] if os.path.isdir(src) else [src]
        rel = os.path.relpath(files[0], os.path.dirname(os.path.abspath(src)))
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        return common + ["--file", out]
    return ["sh", "-c", "%s | tar -x -C %s" % (" ".join(q(a) for a in common), q(dest))]


def q(s):
    return "'" + s.replace("'", "'\\''") + "'"


def udpcast_retransmits(text):
    """udp-sender's last "re-xmits=N" figure (0 when none printed)."""
    best = 0
    for part in text.replace("\r", "\n").split("re-xmits=")[1:]:
        num = part.split()[0] if part.split() else "0"
        try:
            best = int(num)
        except ValueError:
            pass
    return best
