#!/usr/bin/env python3
"""Benchmark: how long a bulletin waits for the receiver's group commit, for each commit method
(mcdistd --sync), on a quiet disk and while another process writes 4 GB to the same filesystem.

For each method, one mcdistd receives into DIR (its temp and destination trees, on a real disk):
  quiet   --sessions sessions of --files files of 10 kB each, one after the other;
  writer  the same while `dd if=/dev/zero of=DIR/... bs=1M count=4096 conv=fsync` runs (it
          fills the page cache with 4 GB of dirty data, then waits for its fsync);
  whole   --whole-runs runs of one session of 1000 files of 10 kB, process start to exit of
          mcdist-send, `sync` before each (the uftp_compare.py cell, with this method).
A bulletin's latency is the time from the receiver's log line announcing its session to the
line saying it is stored (renamed into place, its directory fsynced, reported). Both come from
the daemon's own log (millisecond timestamps). The senders' files live on tmpfs so the only
disk writer besides dd is the receiver. Sessions that start after dd has finished count as
quiet, and the table says how many writer-phase bulletins were measured.

Prints one table: method x {quiet, with the writer} x {p50, p99}, and the whole-run median.
Needs root (ip link set lo multicast on).

usage: commit_latency.py --disk DIR [--build DIR] [--methods syncfs,fdatasync,range,uring]
                         [--sessions 10] [--files 100] [--rate 1G] [--writer-mib 4096]
                         [--whole-runs 5]
"""

import argparse
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) "
ANNOUNCED = re.compile(STAMP + r".*session (\S+) from .* files, .* bytes announced")
STORED = re.compile(STAMP + r".*session (\S+): stored '([^']*)'")


def stamp(text):
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def latencies(log_text, sessions):
    """Per stored file of the given sessions (by name as logged): seconds from announce."""
    announced = {}
    out = []
    for line in log_text.splitlines():
        m = ANNOUNCED.match(line)
        if m:
            announced.setdefault(m.group(2), stamp(m.group(1)))
            continue
        m = STORED.match(line)
        if m and m.group(2) in announced and (sessions is None or m.group(2) in sessions):
            out.append(stamp(m.group(1)) - announced[m.group(2)])
    return out


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def make_sets(base, count, files, size):
    sets = []
    for s in range(count):
        d = os.path.join(base, "set%03d" % s)
        for i in range(files):
            sub = os.path.join(d, "obs", "%02d" % (i % 20))
            os.makedirs(sub, exist_ok=True)
            with open(os.path.join(sub, "bulletin_%04d.bufr" % i), "wb") as f:
                f.write(os.urandom(size))
        sets.append(d)
    return sets


class Daemon:
    def __init__(self, recv, root, method, group, log):
        self.dest = os.path.join(root, "dest")
        self.temp = os.path.join(root, "temp")
        for d in (self.dest, self.temp):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        self.log = log
        self.logf = open(log, "wb")
        self.proc = subprocess.Popen(
            [recv, "--id", "bench", "--group", group, "--interface", "127.0.0.1", "--dest",
             self.dest, "--temp", self.temp, "--status-interval", "1h", "--http", "off",
             "--sync", method, "--allow-unsigned"],
            stdout=self.logf, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        if self.proc.poll() is not None:
            sys.exit("mcdistd exited at start (see %s)" % log)

    def text(self):
        self.logf.flush()
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.logf.close()


def send(send_bin, group, rate, src, timeout=600):
    start = time.monotonic()
    p = subprocess.run([send_bin, "-q", "--group", group, "--interface", "127.0.0.1", "--rate", rate,
                        "--receivers", "bench", "--no-digest-cache", src],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.exit("mcdist-send failed (%d):\n%s" % (p.returncode, p.stdout.decode(errors="replace")))
    m = re.search(r"session ([0-9a-f]{8})", p.stdout.decode(errors="replace"))
    return wall, (m.group(1) if m else None)


def session_names(log_text, before):
    """Names of the sessions announced in the log after its first `before` characters."""
    return {m.group(2) for m in (ANNOUNCED.match(l) for l in log_text[before:].splitlines()) if m}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--disk", required=True, help="a directory on the real disk under test")
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--methods", default="syncfs,fdatasync,range,uring")
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--rate", default="1G")
    ap.add_argument("--writer-mib", type=int, default=4096)
    ap.add_argument("--whole-runs", type=int, default=5)
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("commit_latency.py needs root (ip link set lo multicast on)")
    fs_type = subprocess.run(["stat", "-f", "-c", "%T", args.disk], stdout=subprocess.PIPE,
                             check=True).stdout.decode().strip()
    if fs_type == "tmpfs":
        sys.exit("--disk %s is on tmpfs; the point is a real disk" % args.disk)
    subprocess.run(["ip", "link", "set", "lo", "multicast", "on"], check=True)
    send_bin = os.path.join(args.build, "sender", "mcdist-send")
    recv = os.path.join(args.build, "receiver", "mcdistd")
    for b in (send_bin, recv):
        if not os.access(b, os.X_OK):
            sys.exit("build mcdist first (deploy/build.sh): %s missing" % b)

    src = "/dev/shm/mcdist-commit-src"
    shutil.rmtree(src, ignore_errors=True)
    # Fresh sets for each phase, so nothing is already held and nothing is deleted between
    # sessions (deletes are journal traffic of their own).
    quiet_sets = make_sets(os.path.join(src, "quiet"), args.sessions, args.files, 10_000)
    writer_sets = make_sets(os.path.join(src, "writer"), args.sessions, args.files, 10_000)
    whole = make_sets(os.path.join(src, "whole"), 1, 1000, 10_000)[0]
    root = os.path.join(args.disk, "mcdist-commit")
    os.makedirs(root, exist_ok=True)
    writer_file = os.path.join(args.disk, "mcdist-commit-writer.bin")
    group = "239.192.77.9:4799"
    rows = []
    try:
        for method in args.methods.split(","):
            os.sync()
            d = Daemon(recv, os.path.join(root, method), method, group,
                       os.path.join(root, "mcdistd-%s.log" % method))
            try:
                # quiet
                mark = len(d.text())
                for s in quiet_sets:
                    send(send_bin, group, args.rate, s)
                text = d.text()
                quiet = latencies(text, session_names(text, mark))
                # with the writer
                os.sync()
                mark = len(d.text())
                writer = subprocess.Popen(["dd", "if=/dev/zero", "of=" + writer_file, "bs=1M",
                                           "count=%d" % args.writer_mib, "conv=fsync"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(2)  # the page cache fills with its dirty data
                during, after = set(), set()
                for s in writer_sets:
                    running = writer.poll() is None
                    before = len(d.text())
                    send(send_bin, group, args.rate, s)
                    text = d.text()
                    names = session_names(text, before)
                    (during if running and writer.poll() is None else after).update(names)
                writer_running_at_end = writer.poll() is None
                writer.wait()
                text = d.text()
                loaded = latencies(text, during)
                quiet += latencies(text, after)
                os.unlink(writer_file)
                os.sync()
                # whole runs of 1000 x 10 kB
                walls = []
                for _ in range(args.whole_runs):
                    shutil.rmtree(d.dest, ignore_errors=True)
                    os.sync()
                    wall, _ = send(send_bin, group, args.rate, whole)
                    walls.append(wall)
            finally:
                d.stop()
                if os.path.exists(writer_file):
                    os.unlink(writer_file)
            row = (method, len(quiet), pct(quiet, 50), pct(quiet, 99), len(loaded),
                   pct(loaded, 50), pct(loaded, 99), statistics.median(walls), walls,
                   writer_running_at_end)
            rows.append(row)
            print("%-10s quiet n=%d p50 %.1f ms p99 %.1f ms | writer n=%d p50 %.1f ms p99 %.1f ms "
                  "| 1000 x 10 kB %.3f s" % (method, row[1], row[2] * 1e3, row[3] * 1e3, row[4],
                                            row[5] * 1e3, row[6] * 1e3, row[7]), flush=True)
    finally:
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    print()
    print("| method | quiet p50 | quiet p99 | with 4 GB writer p50 | with 4 GB writer p99 |"
          " bulletins (quiet / writer) | 1000 x 10 kB whole run (median) | runs |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %d / %d | %.3f s | %s |" % (
            r[0], r[2] * 1e3, r[3] * 1e3, r[5] * 1e3, r[6] * 1e3, r[1], r[4], r[7],
            " ".join("%.3f" % w for w in r[8])))
    print("latency: daemon log, announce received to file stored; %d sessions of %d x 10 kB at %s "
          "per phase; writer: dd of %d MiB with conv=fsync to the same filesystem (%s, %s)"
          % (args.sessions, args.files, args.rate, args.writer_mib, args.disk, fs_type))


if __name__ == "__main__":
    main()
