#!/usr/bin/env python3
"""Integration: the Wireshark dissector (tools/wireshark/mcdist.lua) against real traffic and
hand-built datagrams.

1. tshark captures on lo (capture filter on this test's ports) while mcdist-send delivers a
   small file set to two mcdistd over loopback multicast, one dropping 20 % of what it receives
   so that it NAKs. The capture is then dissected with the Lua script and must show: every
   datagram on the test's ports as mcdist with the session id of the sender's summary; the
   announce with exactly the paths and sizes sent; data datagrams (split out of GSO
   super-packets) covering every block of every file, as many as the summary says were sent;
   NAKs naming the lossy receiver with missing block ranges; complete and complete_ack for both
   receivers; session_end; and no expert info of severity warning or above (no malformed frame,
   no Lua error).
2. Version 2 (authenticated) datagrams of every type, built here per the wire-v2 note, and a
   set of malformed datagrams are written into a pcap; the trailer parts, the bodies before
   them and the expected expert info must decode.

usage: test_wireshark.py BUILD_DIR"""

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403

SRC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUA = os.path.join(SRC_DIR, "tools", "wireshark", "mcdist.lua")
BLOCK = 1400


def tshark_fields(cap, fields, display_filter=None, extra=()):
    """Dissects `cap` with the Lua script; returns one dict per frame: field -> list of values."""
    args = ["tshark", "-n", "-X", "lua_script:" + LUA, "-r", cap, "-T", "fields",
            "-E", "separator=/t", "-E", "aggregator=/s", "-E", "occurrence=a"] + list(extra)
    if display_filter:
        args += ["-Y", display_filter]
    for f in fields:
        args += ["-e", f]
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    check(p.returncode == 0, "tshark -r failed (%d): %s" % (p.returncode, err))
    check("Lua" not in err or "error" not in err.lower(), "tshark reported a Lua problem: " + err)
    rows = []
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        cols = line.split("\t")
        cols += [""] * (len(fields) - len(cols))
        rows.append({f: (c.split(" ") if c else []) for f, c in zip(fields, cols)})
    return rows


# --- capture ---------------------------------------------------------------------------------

class Capture:
    """tshark writing a pcapng of lo, filtered to the given UDP ports. Live once a probe
    datagram sent to `probe_port` shows in the file; complete once a closing probe does
    (dumpcap writes packets in capture order)."""

    def __init__(self, path, ports, probe_port, log_path):
        self.path = path
        self.probe_port = probe_port
        filt = " or ".join("udp port %d" % p for p in list(ports) + [probe_port])
        self.logf = open(log_path, "wb")
        self.log_path = log_path
        self.proc = subprocess.Popen(["tshark", "-n", "-i", "lo", "-f", filt, "-w", path, "-q"],
                                     stdout=self.logf, stderr=subprocess.STDOUT)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_probe(self, marker, timeout):
        """Sends `marker` to the probe port until it appears in the capture file.
        @return None, or why not (tshark exited: its log)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return "tshark exited %d: %s" % (self.proc.returncode, self.log_text())
            self.sock.sendto(marker, ("127.0.0.1", self.probe_port))
            try:
                with open(self.path, "rb") as f:
                    if marker in f.read():
                        return None
            except OSError:
                pass
            time.sleep(0.05)
        return "probe not captured within %s s: %s" % (timeout, self.log_text())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        self.sock.close()


def live_session(bin_dir, base):
    tshark_log = os.path.join(base, "tshark.log")
    group = free_group()
    host, gport = parse_group(group)
    rng = random.Random(os.getpid())
    sport = gport + 1 if gport < 65000 else gport - 1
    probe_port = sport + 1
    cap_path = os.path.join(base, "live.pcapng")
    cap = Capture(cap_path, [gport, sport], probe_port, tshark_log)
    try:
        why = cap.wait_probe(b"mcdist-wireshark-test-start-%d" % os.getpid(), 15)
        if why:
            return "tshark cannot capture on lo: " + why
        src = os.path.join(base, "set")
        # Delivered as set/...: an empty file, sub-block, exact and uneven block multiples.
        sizes = {"set/empty.bin": 0, "set/one.bin": 1, "set/obs/exact.bin": 3 * BLOCK,
                 "set/obs/deep/uneven.bin": 200_000, "set/nwp/field.grib": 1_000_000}
        for rel, size in sizes.items():
            write_random(os.path.join(base, rel), size, rng)
        daemons = [Daemon(bin_dir, base, "clean", group),
                   Daemon(bin_dir, base, "lossy", group, ["--drop-rate", "0.2", "--drop-seed", "11"])]
        try:
            code, summary, out = run_sender(bin_dir, [src], group, [d.id for d in daemons],
                                            rate="200M", extra=["--fallback", "off", "--port", str(sport)],
                                            timeout=60)
            log(out)
            check(code == 0, "mcdist-send exited %d" % code)
            check(summary is not None, "no summary JSON")
            for r in summary["receivers"]:
                check(r["state"] == "completed", "%s: %s" % (r["id"], r["state"]))
        finally:
            for d in daemons:
                d.stop()
        why = cap.wait_probe(b"mcdist-wireshark-test-end-%d" % os.getpid(), 15)
        check(why is None, "closing probe: %s" % why)
    finally:
        cap.stop()

    fields = ["frame.number", "udp.srcport", "udp.dstport", "frame.protocols", "mcdist.type",
              "mcdist.session", "mcdist.version", "mcdist.file_entry.path", "mcdist.file_entry.size",
              "mcdist.announce.first_file", "mcdist.data.file", "mcdist.data.block",
              "mcdist.data.payload_length", "mcdist.nak.receiver_id", "mcdist.file_nak.file",
              "mcdist.file_nak.ranges_runs", "mcdist.complete.receiver_id",
              "mcdist.complete.files_stored", "mcdist.complete_ack.receiver_id",
              "mcdist.register_request.receiver_id", "mcdist.session_end.reason",
              "_ws.expert.severity", "_ws.expert.message"]
    rows = tshark_fields(cap_path, fields)
    ours = [r for r in rows if {int(p) for p in r["udp.srcport"] + r["udp.dstport"]} & {gport, sport}]
    check(ours, "nothing captured on ports %d/%d" % (gport, sport))
    not_mcdist = [r["frame.number"] for r in ours if ":mcdist" not in r["frame.protocols"][0]]
    check(not not_mcdist, "frames not dissected as mcdist: %s" % not_mcdist[:10])
    # Expert info: severity chat 0x200000, note 0x400000, warn 0x600000, error 0x800000.
    bad = [(r["frame.number"], r["_ws.expert.message"]) for r in ours
           if any(int(s, 0) >= 0x600000 for s in r["_ws.expert.severity"])]
    check(not bad, "frames with expert warnings/errors: %s" % bad[:5])
    session = "0x%08x" % summary["session_id"]
    sessions = {s for r in ours for s in r["mcdist.session"]}
    check(sessions == {session}, "session ids %s, summary says %s" % (sessions, session))

    def of_type(t):
        return [r for r in ours if str(t) in r["mcdist.type"]]

    # The announce: every path and size sent, at the file index it declares (a zero size is
    # absent on the wire and shown by the dissector as a default, so paths and sizes pair up).
    index_of, announced = {}, {}
    for r in of_type(T_ANNOUNCE):
        paths, sizes_ = r["mcdist.file_entry.path"], r["mcdist.file_entry.size"]
        check(len(paths) == len(sizes_), "frame %s: %d paths, %d sizes" % (
            r["frame.number"], len(paths), len(sizes_)))
        first = int(r["mcdist.announce.first_file"][0])
        for i, (p, n) in enumerate(zip(paths, sizes_)):
            index_of[p] = first + i
            announced[p] = int(n)
    check(announced == sizes, "announced %s, sent %s" % (announced, sizes))

    # Data: every block of every non-empty file, split out of GSO super-packets.
    want_blocks = {(index_of[p], b) for p, s in sizes.items() for b in range((s + BLOCK - 1) // BLOCK)}
    got_blocks, data_count, lens = set(), 0, {}
    for r in of_type(T_DATA):
        files, blocks = r["mcdist.data.file"], r["mcdist.data.block"]
        check(len(files) == len(blocks) == len(r["mcdist.data.payload_length"]),
              "frame %s: file/block/length counts differ" % r["frame.number"])
        for f, b, n in zip(files, blocks, r["mcdist.data.payload_length"]):
            got_blocks.add((int(f), int(b)))
            lens[(int(f), int(b))] = int(n)
            data_count += 1
    check(got_blocks == want_blocks, "data blocks: missing %s, unexpected %s" % (
        sorted(want_blocks - got_blocks)[:5], sorted(got_blocks - want_blocks)[:5]))
    for p, s in sizes.items():
        n = (s + BLOCK - 1) // BLOCK
        if n:
            check(lens[(index_of[p], n - 1)] == s - (n - 1) * BLOCK, "%s: last block length %d" % (
                p, lens[(index_of[p], n - 1)]))
    check(data_count == summary["data_datagrams"], "%d data datagrams dissected, the sender sent %d" % (
        data_count, summary["data_datagrams"]))
    check(summary["repair_datagrams"] > 0, "20 %% loss must need repairs")

    # NAK, complete, complete_ack with their receiver ids.
    naks = of_type(6)
    nak_ids = {i for r in naks for i in r["mcdist.nak.receiver_id"]}
    check("lossy" in nak_ids, "no NAK from the lossy receiver (ids %s)" % nak_ids)
    runs = [x for r in naks if "lossy" in r["mcdist.nak.receiver_id"] for x in r["mcdist.file_nak.ranges_runs"]]
    check(runs, "the lossy receiver's NAKs name no missing block ranges")
    by_id = {r["id"]: r for r in summary["receivers"]}
    check(len([r for r in naks if "lossy" in r["mcdist.nak.receiver_id"]]) >= by_id["lossy"]["naks"],
          "fewer NAK datagrams than the sender counted")
    regs = {i for r in of_type(3) for i in r["mcdist.register_request.receiver_id"]}
    check(regs == {"clean", "lossy"}, "register_request ids %s" % regs)
    completes = {i: r["mcdist.complete.files_stored"] for r in of_type(8) for i in r["mcdist.complete.receiver_id"]}
    check(set(completes) == {"clean", "lossy"}, "complete ids %s" % set(completes))
    for i, stored in completes.items():
        check(stored == [str(len(sizes))], "%s: complete says files_stored %s" % (i, stored))
    acks = {i for r in of_type(9) for i in r["mcdist.complete_ack.receiver_id"]}
    check(acks == {"clean", "lossy"}, "complete_ack ids %s" % acks)
    check(of_type(5), "no marker decoded")
    check(of_type(10), "no session_end decoded")
    log("live capture: %d frames, %d data datagrams in %d frames, %d NAKs (%s), %d announces" % (
        len(ours), data_count, len(of_type(T_DATA)), len(naks), ",".join(sorted(nak_ids)),
        len(of_type(T_ANNOUNCE))))
    return None


def main():
    bin_dir = sys.argv[1]
    if shutil.which("tshark") is None:
        print("SKIPPED: tshark is not installed (deploy/install-deps.sh installs it)")
        return SKIP
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-ws-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        why = live_session(bin_dir, base)
        if why:
            print("SKIPPED: " + why)
            return SKIP
        log("PASS")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
