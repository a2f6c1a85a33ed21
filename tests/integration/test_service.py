#!/usr/bin/env python3
"""Integration: mcdistd as a systemd service sees it, without systemd. The test plays the
service manager: it opens the AF_UNIX datagram socket named by $NOTIFY_SOCKET (sd_notify(3))
and starts mcdistd with it.

- With WATCHDOG_USEC (a path socket): READY=1 arrives, and when it does the daemon's channel
  socket is already bound to the group's port (read from /proc/net/udp by the socket inodes of
  /proc/PID/fd); WATCHDOG=1 pings follow; SIGHUP after the log file was moved away makes the
  daemon open a new file at the configured path (logrotate's way), which gets the next lines
  while the moved file gets none; SIGTERM brings STOPPING=1 and exit status 0.
- Without WATCHDOG_USEC (an abstract socket, '@name'): READY=1, a real mcdist-send session
  delivers a file, no WATCHDOG=1 is ever sent, SIGTERM brings STOPPING=1.
- --check-config: a valid file exits 0 and creates no directory; a missing id, a bad group, a
  temp directory under a regular file, and (where /dev/shm is another filesystem) a destination
  on another filesystem than temp each exit 2 naming the problem.

usage: test_service.py BUILD_DIR"""

import os
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403


class Manager:
    """The service manager's end of $NOTIFY_SOCKET."""

    def __init__(self, address):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.messages = []  # every assignment received, in order

    def wait_for(self, what, timeout, proc):
        """Reads datagrams until one has the line `what`; returns the lines seen meanwhile."""
        deadline = time.time() + timeout
        seen = []
        while time.time() < deadline:
            self.sock.settimeout(max(0.01, min(0.5, deadline - time.time())))
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                if proc.poll() is not None:
                    fail("mcdistd exited (%s) before sending %s" % (proc.returncode, what))
                continue
            lines = data.decode().split("\n")
            self.messages += lines
            seen += lines
            if what in lines:
                return seen
        fail("no %s from mcdistd within %s s; received %s" % (what, timeout, seen))

    def close(self):
        self.sock.close()


def bound_udp_ports(pid):
    """Local ports of the UDP sockets process pid holds open."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[9] in inodes:
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def start(bin_dir, base, rid, group, env_extra, extra=()):
    d = os.path.join(base, rid)
    os.makedirs(os.path.join(d, "dest"), exist_ok=True)
    env = dict(os.environ)
    for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        env.pop(k, None)
    env.update(env_extra)
    args = [os.path.join(bin_dir, "receiver", "mcdistd"), "--id", rid, "--group", group,
            "--interface", "127.0.0.1", "--dest", os.path.join(d, "dest"), "--temp",
            os.path.join(d, "temp"), "--allow-unsigned"] + list(extra)
    out = open(os.path.join(d, "stderr.log"), "wb")
    return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT), d


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def stop_and_expect_stopping(proc, mgr):
    proc.send_signal(signal.SIGTERM)
    mgr.wait_for("STOPPING=1", 20, proc)
    try:
        code = proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("mcdistd did not exit after SIGTERM")
    check(code == 0, "mcdistd exited %d after SIGTERM" % code)


def with_watchdog(bin_dir, base):
    group = free_group()
    mgr = Manager(os.path.join(base, "notify.sock"))
    logfile = os.path.join(base, "wd", "log", "mcdistd.log")
    proc, d = start(bin_dir, base, "wd", group,
                    {"NOTIFY_SOCKET": os.path.join(base, "notify.sock"), "WATCHDOG_USEC": "200000"},
                    ["--log-file", logfile])
    try:
        mgr.wait_for("READY=1", 15, proc)
        ports = bound_udp_ports(proc.pid)
        port = parse_group(group)[1]
        check(port in ports, "READY=1 came before the channel socket was bound to %d (bound: %s)" % (port, ports))
        check(len(ports) >= 2, "READY=1 came before the control socket was bound (bound: %s)" % ports)
        status = [m for m in mgr.messages if m.startswith("STATUS=")]
        check(status, "READY=1 without a STATUS= line: %s" % mgr.messages)
        log("READY=1 (%s) with UDP ports %s bound" % (status[0], sorted(ports)))
        for i in range(3):
            mgr.wait_for("WATCHDOG=1", 10, proc)
        log("3 WATCHDOG=1 pings received (WATCHDOG_USEC=200000)")

        # logrotate: move the file away, SIGHUP, the daemon opens a new file at the path.
        check("listening on" in read(logfile), "the log file lacks the start line")
        os.rename(logfile, logfile + ".1")
        proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline and not (os.path.exists(logfile) and "log file reopened" in read(logfile)):
            check(proc.poll() is None, "mcdistd exited on SIGHUP")
            time.sleep(0.02)
        check(os.path.exists(logfile) and "log file reopened" in read(logfile),
              "no new log file with 'log file reopened' after SIGHUP")
        mgr.wait_for("WATCHDOG=1", 10, proc)  # still serving after SIGHUP
        stop_and_expect_stopping(proc, mgr)
        check("shutting down" in read(logfile), "the reopened log file lacks the shutdown line")
        old = read(logfile + ".1")
        check("listening on" in old and "shutting down" not in old and "reopened" not in old,
              "lines went to the moved log file after SIGHUP:\n" + old)
        pings = mgr.messages.count("WATCHDOG=1")
        check(mgr.messages.index("READY=1") < mgr.messages.index("WATCHDOG=1"),
              "WATCHDOG=1 before READY=1: %s" % mgr.messages)
        check("STOPPING=1" in mgr.messages[-2:], "STOPPING=1 is not the last message: %s" % mgr.messages[-3:])
        log("SIGHUP reopened the log file; SIGTERM: STOPPING=1, exit 0 (%d pings in all)" % pings)
    finally:
        if proc.poll() is None:
            proc.kill()
        mgr.close()


def without_watchdog(bin_dir, base):
    group = free_group()
    name = "@mcdist-test-%d" % os.getpid()
    mgr = Manager("\0" + name[1:])
    proc, d = start(bin_dir, base, "nowd", group, {"NOTIFY_SOCKET": name})
    try:
        mgr.wait_for("READY=1", 15, proc)
        src = os.path.join(base, "src")
        os.makedirs(src)
        with open(os.path.join(src, "bulletin.txt"), "wb") as f:
            f.write(b"SAEW31 EDZW 230900\n" * 1000)
        code, summary, out = run_sender(bin_dir, [os.path.join(src, "bulletin.txt")], group, ["nowd"])
        check(code == 0, "mcdist-send exited %d:\n%s" % (code, out))
        got = os.path.join(d, "dest", "bulletin.txt")
        check(os.path.exists(got) and sha256_file(got) == sha256_file(os.path.join(src, "bulletin.txt")),
              "the file did not arrive intact")
        stop_and_expect_stopping(proc, mgr)
        check("WATCHDOG=1" not in mgr.messages, "WATCHDOG=1 sent without WATCHDOG_USEC: %s" % mgr.messages)
        log("abstract socket: READY=1, a session delivered, no pings, STOPPING=1 on SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
        mgr.close()


def check_config(bin_dir, base):
    mcdistd = os.path.join(bin_dir, "receiver", "mcdistd")
    root = os.path.join(base, "cc")
    os.makedirs(root)

    def write(name, text):
        p = os.path.join(root, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def run(path, *extra):
        p = subprocess.run([mcdistd, "--check-config", path] + list(extra), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        return p.returncode, p.stdout.decode() + p.stderr.decode()

    body = ('interface = "127.0.0.1"\ndest = "%s/spool/in"\ntemp = "%s/spool/tmp"\n'
            'allow_unsigned = true\n'
            '[[channel]]\nname = "products"\ngroup = "239.192.0.1:4711"\n') % (root, root)
    # Secure by default: a channel that trusts no sender is refused, and the check says why.
    code, out = run(write("open.toml", 'id = "site-a"\n' + body.replace("allow_unsigned = true\n", "")))
    check(code == 2 and "trusts no sender" in out and "allow_unsigned" in out,
          "a channel trusting no sender: exit %d: %s" % (code, out))
    good = write("good.toml", 'id = "site-a"\n' + body)
    code, out = run(good)
    check(code == 0 and "valid" in out, "valid config: exit %d: %s" % (code, out))
    check(not os.path.exists(os.path.join(root, "spool")), "--check-config created directories")
    code, out = run(write("noid.toml", body))
    check(code == 2 and "id" in out, "missing id: exit %d: %s" % (code, out))
    code, out = run(good, "--id", "site-b")
    check(code == 0 and "site-b" in out, "--id over the file: exit %d: %s" % (code, out))
    code, out = run(write("badgroup.toml", 'id = "a"\n' + body.replace("239.192.0.1:4711", "10.0.0.1:4711")))
    check(code == 2 and "10.0.0.1:4711" in out, "unicast group: exit %d: %s" % (code, out))
    write("afile", "x")
    code, out = run(good, "--temp", os.path.join(root, "afile", "tmp"))
    check(code == 2 and "not a directory" in out, "temp under a file: exit %d: %s" % (code, out))
    code, out = run(write("syntax.toml", 'id = "a"\n[[channel]\n'))
    check(code == 2 and "line" in out, "syntax error: exit %d: %s" % (code, out))
    if os.path.isdir("/dev/shm") and os.stat("/dev/shm").st_dev != os.stat(root).st_dev:
        code, out = run(good, "--dest", "/dev/shm/mcdist-never-created")
        check(code == 2 and "filesystem" in out, "dest on another filesystem: exit %d: %s" % (code, out))
        check(not os.path.exists("/dev/shm/mcdist-never-created"), "--check-config created the dest")
    log("--check-config: valid 0, invalid 2 with the reason, nothing created")


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-svc-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        check_config(bin_dir, base)
        with_watchdog(bin_dir, base)
        without_watchdog(bin_dir, base)
        log("PASS")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
