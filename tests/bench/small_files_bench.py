#!/usr/bin/env python3
"""Benchmark ("durable small files"): 1000 files of 10 kB at 1G, mcdist
against UFTP 4.10 in the same run, on a real disk and on tmpfs, whole run (process start to
exit), median of --repeat, with mcdist's phases taken from both programs' logs.

Per filesystem (the disk directory given by --disk, and /dev/shm) it makes the data set there,
starts one receiver per program with its temp and destination trees on that filesystem
(mcdistd with its default durable group commit, or --mcdist-sync; uftpd as uftp_compare.py
starts it, closed group, no syncs), then runs --repeat rounds. A round runs every program once
(the order rotates from round to round so none always goes first), each after clearing its
destination and, on the disk, `sync` (outside the timed part), so no run pays for the dirty
pages of another. One unmeasured warm-up run per program comes first (page cache, the sender's
digest xattrs, the receiver's first session).

A destination tree is moved aside before the next run into it and deleted at the end: on
ext4 without a journal (this machine's disk) the inode allocator skips inodes freed in the
last 5-10 s (fs/ext4/ialloc.c, recently_deleted()), one buffer lookup each, so 1000 files
created right after 1000 were deleted cost ~0.1-0.2 s of kernel CPU in the creating process
(measured with perf: 44 % of mcdistd's CPU in openat). --delete-between deletes each tree
just before the next run into it instead, as uftp_compare.py does.

--base-build adds a second mcdist build (e.g. main's) to every round, so a change is measured
beside what it changes, in the same conditions. --mcdist-sync takes a comma-separated list of
commit methods (mcdistd --sync); each build runs once per method in every round, each with its
own daemon, so methods are compared in the same conditions too.

mcdist's phases, from the sender's log (millisecond timestamps) and the daemon's:
  start-up     process start to the sender's "announcing" line (options, tree walk, digest
               xattrs or hashing, sockets)
  register     announce to the daemon's registration answered by the sender ("registered")
  pass 1       announce to "pass 1 done" (pass 1 starts at the announce in a closed group)
  tail         "pass 1 done" to the daemon's last "stored" line (last block to last rename:
               the receiver's verify, commit and renames still queued)
  complete     last "stored" to the sender's "completed after pass" (COMPLETE on its way)
  exit         "completed" to the sender's exit (END, summary, teardown)
Timestamps have a resolution of 1 ms; the phases of a run add up to its wall time.

Prints a table per filesystem (median wall, ratio UFTP / mcdist, all runs), the phase medians
per mcdist build, CPU seconds (sender + receiver) and `uptime` before and after.

Needs root (ip link set lo multicast on) and uftp (deploy/install-deps.sh --bench).

usage: small_files_bench.py --disk DIR [--build DIR] [--base-build DIR] [--repeat 5]
                            [--rate 1G] [--files 1000] [--size 10000] [--mcdist-sync M[,M..]]
                            [--only disk|tmpfs] [--keep] [--delete-between]
"""

import argparse
import datetime
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

import peers
from uftp_compare import Child, ticks

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) "
SENDER_LINES = {
    "announce": re.compile(STAMP + r".*: announcing \d+ files"),
    "registered": re.compile(STAMP + r".*: receiver '\S+' registered from"),
    "pass1_done": re.compile(STAMP + r".*: pass 1 done at"),
    "completed": re.compile(STAMP + r".*: receiver '\S+' completed after pass"),
}
STORED = re.compile(STAMP + r".*session (\S+): stored '")
SESSION = re.compile(r"session ([0-9a-f]{8}):")
PHASES = ["start-up", "register", "pass 1", "tail", "complete", "exit"]


def stamp(text):
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def fs_type(path):
    return subprocess.run(["stat", "-f", "-c", "%T", path], stdout=subprocess.PIPE,
                          check=True).stdout.decode().strip()


def make_set(root, files, size):
    """`files` files of `size` random bytes in 20 directories (uftp_compare.py's layout)."""
    for i in range(files):
        d = os.path.join(root, "obs", "%02d" % (i % 20))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "bulletin_%04d.bufr" % i), "wb") as f:
            f.write(os.urandom(size))


def tree_bytes(root):
    total = 0
    for d, _, names in os.walk(root):
        for n in names:
            total += os.path.getsize(os.path.join(d, n))
    return total


def clear(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)


class Daemon(Child):
    """A receiver process (uftp_compare.Child: start, CPU time, stop), its log and its
    destination tree."""

    def __init__(self, args, log, dest):
        super().__init__(args, log)
        self.dest = dest
        self.log = log

    def text(self):
        self.logf.flush()
        with open(self.log, errors="replace") as f:
            return f.read()


def timed(args, sync_first):
    """Runs a sender: (exit code, start, end, output, cpu seconds)."""
    if sync_first:
        os.sync()
    before = os.times()
    start = time.time()
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    end = time.time()
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system -
                                                           before.children_system)
    return p.returncode, start, end, p.stdout.decode("utf-8", "replace"), cpu


def mcdist_phases(out, daemon_text, start, end):
    """The phases of one mcdist run (seconds), or None when a line is missing."""
    t = {}
    for line in out.splitlines():
        for name, rx in SENDER_LINES.items():
            m = rx.match(line)
            if m and name not in t:
                t[name] = stamp(m.group(1))
    m = SESSION.search(out)
    if not m or len(t) != len(SENDER_LINES):
        return None
    session = m.group(1)
    last_stored = None
    for line in daemon_text.splitlines():
        s = STORED.match(line)
        if s and s.group(2) == session:
            last_stored = stamp(s.group(1))
    if last_stored is None:
        return None
    return {
        "start-up": t["announce"] - start,
        "register": t["registered"] - t["announce"],
        "pass 1": t["pass1_done"] - t["announce"],
        "tail": last_stored - t["pass1_done"],
        "complete": t["completed"] - last_stored,
        "exit": end - t["completed"],
    }


def uftp_rate(rate):
    """uftp -R counts 1024 bit/s (uftp_compare.py)."""
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    bps = float(rate[:-1]) * mult[rate[-1]] if rate[-1] in mult else float(rate)
    return str(int(round(bps / 1024)))


def run_place(args, place, base, builds, sync_first):
    """All rounds on one filesystem. @return {program: [run dicts]}"""
    clear(base)
    src = os.path.join(base, "src-small")
    make_set(src, args.files, args.size)
    trash = os.path.join(base, "trash")
    os.makedirs(trash)
    nbytes = args.files * args.size
    pick = random.Random(os.getpid() ^ int(time.time() * 1000))
    daemons = {}
    programs = []
    try:
        for name, build, sync in builds:
            group = "239.194.%d.%d:%d" % (pick.randrange(1, 255), pick.randrange(1, 255),
                                          pick.randrange(20000, 60000))
            dest, temp = os.path.join(base, name + "-dest"), os.path.join(base, name + "-temp")
            clear(dest)
            clear(temp)
            recv = os.path.join(build, "receiver", "mcdistd")
            daemons[name] = Daemon(
                [recv, "--id", "bench", "--group", group, "--interface", "127.0.0.1", "--dest",
                 dest, "--temp", temp, "--status-interval", "1h", "--http", "off"] +
                peers.allow_unsigned(recv) + (["--sync", sync] if sync else []),
                os.path.join(base, name + ".log"), dest)
            send = os.path.join(build, "sender", "mcdist-send")
            programs.append((name, [send, "--no-progress", "--group", group, "--interface",
                                    "127.0.0.1", "--rate", args.rate, "--receivers", "bench",
                                    src]))
        uf_dest = os.path.join(base, "uftp-dest")
        clear(uf_dest)
        daemons["uftp"] = Daemon(["uftpd", "-d", "-I", "127.0.0.1", "-M", "230.4.4.1", "-D",
                                  uf_dest, "-U", "0x01020304", "-B", "104857600", "-q", "-x",
                                  "1"], os.path.join(base, "uftpd.log"), uf_dest)
        programs.append(("uftp", ["uftp", "-I", "127.0.0.1", "-M", "230.4.4.1", "-P",
                                   "230.5.5.1", "-H", "0x01020304", "-R", uftp_rate(args.rate),
                                   "-Y", "none", "-B", "104857600", src]))
        runs = {name: [] for name, _ in programs}
        for rnd in range(args.repeat + 1):
            k = rnd % len(programs)
            for name, cmd in programs[k:] + programs[:k]:
                d = daemons[name]
                if args.delete_between:
                    clear(d.dest)
                else:
                    # Aside, deleted at the end: see --delete-between.
                    os.rename(d.dest, os.path.join(trash, "%s-%d" % (name, rnd)))
                    os.makedirs(d.dest)
                cpu0 = d.cpu()
                code, start, end, out, scpu = timed(cmd, sync_first)
                time.sleep(0.1)  # the receiver's last log lines
                rcpu = d.cpu() - cpu0
                got = tree_bytes(os.path.join(d.dest, "src-small"))
                ok = code == 0 and got == nbytes
                run = {"wall": end - start, "ok": ok, "cpu": scpu + rcpu}
                if name != "uftp":
                    run["phases"] = mcdist_phases(out, d.text(), start, end)
                if not ok:
                    print("  %s run %d: exit %d, %d of %d bytes delivered\n%s" %
                          (name, rnd, code, got, nbytes, out[-2000:]), flush=True)
                if rnd > 0:  # round 0 warms up
                    runs[name].append(run)
                print("  %-6s round %d %-5s %.3f s%s" % (place, rnd, name, run["wall"],
                                                         "" if ok else " FAILED"), flush=True)
        return runs
    finally:
        for d in daemons.values():
            d.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


def median(values):
    return statistics.median(values) if values else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--disk", required=True, help="a directory on a real disk (not tmpfs)")
    ap.add_argument("--tmpfs", default="/dev/shm", help="a directory on tmpfs")
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--base-build", default=None, help="a second build measured beside it")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rate", default="1G")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--mcdist-sync", default=None, metavar="M[,M..]",
                    help="mcdistd --sync; a list runs each method beside the others")
    ap.add_argument("--only", choices=["disk", "tmpfs"], default=None)
    ap.add_argument("--keep", action="store_true", help="keep the trees and logs")
    ap.add_argument("--delete-between", action="store_true",
                    help="delete each destination tree just before the next run into it "
                         "(uftp_compare.py's way) instead of moving it aside")
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("small_files_bench.py needs root (ip link set lo multicast on)")
    if not shutil.which("uftp"):
        sys.exit("uftp is not installed: deploy/install-deps.sh --bench")
    os.makedirs(args.disk, exist_ok=True)
    if fs_type(args.disk) == "tmpfs":
        sys.exit("--disk %s is on tmpfs; give a directory on a real disk" % args.disk)
    if fs_type(args.tmpfs) != "tmpfs":
        sys.exit("--tmpfs %s is not on tmpfs" % args.tmpfs)
    syncs = args.mcdist_sync.split(",") if args.mcdist_sync else [None]
    builds = []
    for tag, b in [("new", args.build)] + ([("base", args.base_build)] if args.base_build else []):
        for sync in syncs:
            builds.append((tag + ("-" + sync if sync and len(syncs) > 1 else ""), b, sync))
    for _, b, _ in builds:
        for p in ("sender/mcdist-send", "receiver/mcdistd"):
            if not os.access(os.path.join(b, p), os.X_OK):
                sys.exit("build mcdist first (deploy/build.sh): %s missing" % os.path.join(b, p))
    subprocess.run(["ip", "link", "set", "lo", "multicast", "on"], check=True)

    load_before = subprocess.run(["uptime"], stdout=subprocess.PIPE).stdout.decode().strip()
    places = []
    if args.only in (None, "disk"):
        places.append(("disk", os.path.join(args.disk, "mcdist-small-bench"), True))
    if args.only in (None, "tmpfs"):
        places.append(("tmpfs", os.path.join(args.tmpfs, "mcdist-small-bench"), False))
    results = {}
    for place, base, sync_first in places:
        print("== %s (%s): %s" % (place, fs_type(os.path.dirname(base)), base), flush=True)
        results[place] = run_place(args, place, base, builds, sync_first)
    load_after = subprocess.run(["uptime"], stdout=subprocess.PIPE).stdout.decode().strip()

    names = [n for n, _, _ in builds]
    print()
    print("| filesystem | program | wall (median) | UFTP / it | CPU s (median) | all runs |")
    print("|---|---|---|---|---|---|")
    for place, runs in results.items():
        uftp = median([r["wall"] for r in runs["uftp"]])
        for name in names + ["uftp"]:
            walls = [r["wall"] for r in runs[name]]
            bad = sum(1 for r in runs[name] if not r["ok"])
            label = "UFTP 4.10" if name == "uftp" else "mcdist" + (
                " (%s)" % name if name != "new" else "")
            print("| %s | %s | %.3f s%s | %.2fx | %.2f | %s |" % (
                place, label, median(walls), " (%d failed)" % bad if bad else "",
                uftp / median(walls), median([r["cpu"] for r in runs[name]]),
                " ".join("%.3f" % w for w in walls)))
    print()
    print("mcdist phases, median of the runs, ms:")
    print("| filesystem | build | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for place, runs in results.items():
        for name in names:
            ph = [r["phases"] for r in runs[name] if r.get("phases")]
            print("| %s | %s | " % (place, name) + " | ".join(
                "%.0f" % (median([p[k] for p in ph]) * 1e3) for k in PHASES) + " |")
    print()
    print("%d x %d bytes at %s, median of %d (after one warm-up run each); on the disk "
          "sync(2) before every run; mcdistd --sync %s; destination trees %s" %
          (args.files, args.size, args.rate, args.repeat, args.mcdist_sync or "(default)",
           "deleted before each run" if args.delete_between else "moved aside until the end"))
    print("load before: %s" % load_before)
    print("load after:  %s" % load_after)


if __name__ == "__main__":
    main()
