#!/usr/bin/env python3
"""Integration: budgets before trust and storage errors (7).

1. Hostile announces against a running mcdistd: two entries of 2^31 blocks (honest and lying
   totals), a 1400-byte announce full of such entries, 1,000,000-file counts, 64 sessions from
   one source, an announce sent to the unicast reply port. The daemon's RSS (VmRSS) must stay
   within a bound, each attack must be counted under its drop reason, and a real session from
   another source must still be delivered afterwards.
2. Temp directories: an orphan temp/<session> without state is swept at start-up; a symlink
   planted at temp/<session id> is refused, not followed, the file fails and the session still
   ends with COMPLETE.
3. A full filesystem (a 4 MiB tmpfs mounted here; needs root, else that part prints SKIPPED):
   the file that does not fit fails with "disk reserve", the other file is delivered, and the
   sender ends with exit code 1 (some receiver incomplete) and a summary naming the failure;
   then the filesystem turns read-only and a file fails with EROFS the same way; then, writable
   again, the set that does not fit goes over the unicast fallback (--unicast, TCP): the file
   fails the same way and the sender ends.

usage: test_budgets.py BUILD_DIR"""

import hashlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403

# RSS the hostile announces may add to an idle daemon. Without budgets one 47-byte announce
# added 970 MiB; with them the state they may hold is a few hundred KB per session.
RSS_GROWTH_BOUND_KB = 32 * 1024
T_REGISTER, T_REGISTER_REPLY, T_COMPLETE = 3, 4, 8


def vm_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    fail("no VmRSS for pid %d" % pid)


def wait_status(d, pred, timeout, what):
    deadline = time.time() + timeout
    status = None
    while time.time() < deadline:
        status = d.read_status()
        if status and pred(status):
            return status
        time.sleep(0.1)
    fail("%s: status never showed it within %s s: %s\n%s" % (what, timeout, status, d.log_text()))


def socket_from(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    s.bind((addr, 0))
    return s



def control_port(d):
    for line in d.log_text().splitlines():
        if "listening on" in line and "control " in line:
            return int(line.split("control ")[1].split(",")[0].rsplit(":", 1)[1])
    fail("no control endpoint in the log")


def hostile_announces(bin_dir, base, group):
    host, port = parse_group(group)
    d = Daemon(bin_dir, base, "victim", group)
    try:
        before = vm_rss_kb(d.proc.pid)
        evil = socket_from("127.0.0.2")
        huge = (1 << 31) * 256  # 2^31 blocks of 256 bytes
        # Two entries of 2^31 blocks, honest total: refused at the announce.
        evil.sendto(announce(0xE0000001, [file_entry("a", huge), file_entry("b", huge)],
                             block_size=256), (host, port))
        # The same under a lying total: the session is cheap, each entry is refused.
        evil.sendto(announce(0xE0000002, [file_entry("a", huge), file_entry("b", huge)],
                             block_size=256, total_bytes=1000), (host, port))
        # About 1300 bytes of such entries.
        many = [file_entry("f%d" % i, huge) for i in range(45)]
        evil.sendto(announce(0xE0000003, many, block_size=256), (host, port))
        # 1,000,000-file counts, and 64 sessions from one source.
        for i in range(64):
            evil.sendto(announce(0xE1000000 + i, [file_entry("x", 1)], chunks=1000,
                                 file_count=1_000_000, grtt_us=3_600_000_000), (host, port))
        # An announce straight to the daemon's unicast reply port.
        evil.sendto(announce(0xE2000000, [file_entry("u", 10)]), ("127.0.0.1", control_port(d)))
        status = wait_status(d, lambda s: s.get("dropped", {}).get("too_many_sessions", 0) >= 48 and
                             s.get("dropped", {}).get("wrong_socket", 0) >= 1, 10, "hostile announces")
        dropped = status["dropped"]
        check(dropped.get("over_budget", 0) >= 2, "oversized announces not counted: %s" % dropped)
        check(status["sessions_active"] <= 17, "more than the per-source limit taken: %s" % status)
        check(status["session_memory_bytes"] < 4 << 20,
              "hostile sessions hold %d bytes of state" % status["session_memory_bytes"])
        after = vm_rss_kb(d.proc.pid)
        log("RSS before %d kB, after the hostile announces %d kB (bound: +%d kB); state charged "
            "%d bytes; dropped %s" % (before, after, RSS_GROWTH_BOUND_KB,
                                      status["session_memory_bytes"], dropped))
        check(d.alive(), "mcdistd died:\n" + d.log_text())
        check(after - before < RSS_GROWTH_BOUND_KB,
              "RSS grew by %d kB under hostile announces" % (after - before))
        # A real sender on another address is still served.
        src = os.path.join(base, "real")
        rng = random.Random(11)
        write_random(os.path.join(src, "r.bin"), 200_000, rng)
        code, summary, out = run_sender(bin_dir, [src], group, ["victim"], timeout=60)
        check(code == 0, "real session after the hostile announces failed (%d):\n%s\n%s"
              % (code, out, d.log_text()))
        check(sha256_file(os.path.join(d.dest, "real", "r.bin")) ==
              sha256_file(os.path.join(src, "r.bin")), "the real file differs")
        check(d.stop() == 0, "mcdistd did not exit cleanly")
        return before, after
    finally:
        d.stop()


def temp_dirs(bin_dir, base, group):
    host, port = parse_group(group)
    temp = os.path.join(base, "site", "temp")
    orphan = os.path.join(temp, "0000beef")
    os.makedirs(orphan)
    with open(os.path.join(orphan, "0.part"), "wb") as f:
        f.write(b"left over" * 1000)
    d = Daemon(bin_dir, base, "site", group)
    try:
        check(not os.path.exists(orphan), "orphan temp directory not swept at start-up")
        check("removed 1 temp directories" in d.log_text(), "no log line for the sweep")
        session = 0x0BADCAFE
        outside = os.path.join(base, "outside")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(temp, "%08x" % session))
        s = socket_from("127.0.0.3")
        good = b"content\n" * 100
        s.sendto(announce(session, [file_entry("f.txt", len(good), hashlib.sha256(good).digest())]),
                 (host, port))
        reg = recv_type(s, T_REGISTER, 5)
        check(reg is not None, "no REGISTER:\n" + d.log_text())
        s.sendto(header(T_REGISTER_REPLY, session) + pb_bytes(1, b"site") + pb_uint(2, 1), reg[1])
        s.sendto(header(T_DATA, session) + struct.pack("!III", 1, 0, 0) + good, (host, port))
        done = recv_type(s, T_COMPLETE, 5)
        check(done is not None, "no COMPLETE: the session did not end:\n" + d.log_text())
        check(b"symlink" in done[0], "COMPLETE does not report the refused temp directory")
        check(os.listdir(outside) == [], "something was written through the symlink: %s"
              % os.listdir(outside))
        check(not os.path.exists(os.path.join(d.dest, "f.txt")), "file delivered anyway")
        check("is a symlink or not a directory; refused" in d.log_text(), "no log line")
        check(d.alive(), "mcdistd died")
    finally:
        d.stop()


class StoreDaemon(Daemon):
    """A Daemon whose dest and temp are given (on a test filesystem) while its log, status and
    delivery journal stay under `base`, so the test filesystem holds no file open for writing between sessions
    and can be remounted read-only."""

    def __init__(self, bin_dir, base, rid, group, store):
        self.id = rid
        self.dest = os.path.join(store, "dest")
        self.temp = os.path.join(store, "temp")
        self.status = os.path.join(base, rid + "-status.json")
        self.log_path = os.path.join(base, rid + "-mcdistd.log")
        os.makedirs(self.dest, exist_ok=True)
        os.makedirs(self.temp, exist_ok=True)
        self.args = [os.path.join(bin_dir, "receiver", "mcdistd"), "--id", rid, "--group", group,
                     "--interface", "127.0.0.1", "--dest", self.dest, "--temp", self.temp,
                     "--status-file", self.status, "--status-interval", "1s", "--sync", "none",
                     "--journal", os.path.join(base, rid + "-journal.db"), "--allow-unsigned"]
        self.proc = None
        self.start()


def full_filesystem(bin_dir, base, group):
    if os.geteuid() != 0:
        print("SKIPPED (full filesystem part): needs root to mount a tmpfs", flush=True)
        return False
    mnt = os.path.join(base, "small-fs")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "mcdist-test", mnt]).returncode != 0:
        print("SKIPPED (full filesystem part): cannot mount a tmpfs", flush=True)
        return False
    d = None
    try:
        d = StoreDaemon(bin_dir, base, "full", group, mnt)
        src = os.path.join(base, "src-full")
        rng = random.Random(3)
        write_random(os.path.join(src, "small.bin"), 100_000, rng)
        write_random(os.path.join(src, "big.bin"), 8_000_000, rng)
        t0 = time.time()
        code, summary, out = run_sender(bin_dir, [src], group, ["full"], timeout=60)
        log("full disk: sender exit %d after %.1f s" % (code, time.time() - t0))
        check(code == 1, "sender exit code %d, want 1 (a receiver incomplete):\n%s" % (code, out))
        check(summary is not None, "no summary:\n" + out)
        rx = summary["receivers"][0]
        reasons = [f["reason"] for f in rx["file_failures"]]
        check(rx["state"] == "failed" and len(reasons) == 1 and "disk reserve" in reasons[0],
              "summary does not report the file that did not fit: %s" % rx)
        check(sha256_file(os.path.join(d.dest, "src-full", "small.bin")) ==
              sha256_file(os.path.join(src, "small.bin")), "the small file was not delivered")
        check(not os.path.exists(os.path.join(d.dest, "src-full", "big.bin")), "big file exists")
        # Read-only: the next file fails at open with EROFS, the session still ends.
        check(subprocess.run(["mount", "-o", "remount,ro", mnt]).returncode == 0, "remount ro")
        src2 = os.path.join(base, "src-ro")
        write_random(os.path.join(src2, "later.bin"), 50_000, rng)
        code, summary, out = run_sender(bin_dir, [src2], group, ["full"], timeout=60)
        check(code == 1, "sender exit code %d on a read-only disk, want 1:\n%s" % (code, out))
        reasons = [f["reason"] for f in summary["receivers"][0]["file_failures"]]
        check(len(reasons) == 1 and "Read-only file system" in reasons[0],
              "summary does not report EROFS: %s" % summary["receivers"][0])
        check(d.alive(), "mcdistd died:\n" + d.log_text())
        subprocess.run(["mount", "-o", "remount,rw", mnt])
        # The same full disk behind the unicast fallback (the livelock: the fallback
        # fetched the same data again and again and the sender never ended): big.bin fails with
        # the reason in COMPLETE, small.bin is held, and the sender ends.
        t0 = time.time()
        code, summary, out = run_sender(bin_dir, [src], group, ["full"], timeout=60,
                                        extra=["--unicast", "--fallback", "tcp"])
        log("full disk over the unicast fallback: sender exit %d after %.1f s" % (code, time.time() - t0))
        check(code == 1, "sender exit code %d over the fallback, want 1:\n%s" % (code, out))
        rx = summary["receivers"][0]
        reasons = [f["reason"] for f in rx["file_failures"]]
        check(rx["path"] == "unicast-tcp" and len(reasons) == 1 and
              ("disk reserve" in reasons[0] or "quota" in reasons[0]),
              "summary does not report the file that did not fit over the fallback: %s" % rx)
        check(not os.path.exists(os.path.join(d.dest, "src-full", "big.bin")), "big file exists")
        check(d.alive(), "mcdistd died:\n" + d.log_text())
        return True
    finally:
        if d:
            d.stop()
        subprocess.run(["umount", "-l", mnt])


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-budgets-")
    try:
        before, after = hostile_announces(bin_dir, base, free_group())
        temp_dirs(bin_dir, base, free_group())
        full = full_filesystem(bin_dir, base, free_group())
        log("PASS: hostile announces held RSS %d -> %d kB; orphan swept; symlink refused; %s"
            % (before, after, "full and read-only disks failed one file each, sessions ended"
               if full else "full-disk part skipped"))
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
