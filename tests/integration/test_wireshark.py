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

T_PARITY = 12

SRC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUA = os.path.join(SRC_DIR, "tools", "wireshark", "mcdist.lua")
BLOCK = 1400


def tshark_fields(cap, fields, display_filter=None, extra=()):
    """Dissects `cap` with the Lua script; returns one dict per frame: field -> list of values.
    Heuristics go first (docs/wireshark.md): the tests' ports are random, and on one that
    Wireshark gives another protocol (52 of 20000-60000: quake3, dnp3, eobi...) the mcdist
    heuristic was never tried and no frame was mcdist (integration_encrypt failed once so)."""
    args = ["tshark", "-n", "-o", "udp.try_heuristic_first:TRUE", "-X", "lua_script:" + LUA,
            "-r", cap, "-T", "fields",
            "-E", "separator=/t", "-E", "aggregator=|", "-E", "occurrence=a"] + list(extra)
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
        rows.append({f: (c.split("|") if c else []) for f, c in zip(fields, cols)})
    return rows


# --- capture ---------------------------------------------------------------------------------

class Capture:
    """tshark writing a pcapng of lo, filtered to the given UDP ports. Live once a probe
    datagram sent to `probe_port` shows in the file; complete once a closing probe does
    (dumpcap writes packets in capture order)."""

    def __init__(self, path, ports, probe_port, log_path, tcp_ports=()):
        self.path = path
        self.probe_port = probe_port
        filt = " or ".join(["udp port %d" % p for p in list(ports) + [probe_port]] +
                           ["tcp port %d" % p for p in tcp_ports])
        self.logf = open(log_path, "wb")
        self.log_path = log_path
        # -B: a 32 MiB kernel buffer, so a loaded machine drops nothing of the ~2 MB session.
        self.proc = subprocess.Popen(["tshark", "-n", "-i", "lo", "-B", "32", "-f", filt, "-w", path, "-q"],
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
            # Without parity, so the lossy site's NAKs name block ranges (FEC sessions NAK a
            # count per FEC block; parity datagrams are dissected in the hand-made grind below).
            code, summary, out = run_sender(bin_dir, [src], group, [d.id for d in daemons],
                                            rate="200M", extra=["--fallback", "off", "--port",
                                                                str(sport), "--fec-k", "0"],
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
              "mcdist.data.payload_length", "mcdist.data.path", "mcdist.nak.receiver_id", "mcdist.file_nak.file",
              "mcdist.file_nak.missing_blocks", "mcdist.complete.receiver_id",
              "mcdist.complete.files_stored", "mcdist.complete_ack.receiver_id",
              "mcdist.register_request.receiver_id", "mcdist.register_reply.receiver_id",
              "mcdist.register_reply.accepted", "mcdist.session_end.reason",
              "mcdist.parity.fec_block",
              "_ws.expert.severity", "_ws.expert.message"]
    # The receivers' ephemeral ports may be registered to other protocols: heuristics first.
    rows = tshark_fields(cap_path, fields, extra=["-o", "udp.try_heuristic_first:TRUE"])
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
    # The dissector names each block's file from the announce (data follows it on the wire).
    path_of = {i: p for p, i in index_of.items()}
    got_blocks, data_count, lens = set(), 0, {}
    for r in of_type(T_DATA):
        files, blocks = r["mcdist.data.file"], r["mcdist.data.block"]
        check(len(files) == len(blocks) == len(r["mcdist.data.payload_length"]) == len(r["mcdist.data.path"]),
              "frame %s: file/block/length/path counts differ" % r["frame.number"])
        for f, b, n, p in zip(files, blocks, r["mcdist.data.payload_length"], r["mcdist.data.path"]):
            check(path_of.get(int(f)) == p, "frame %s: file %s shown as %s" % (r["frame.number"], f, p))
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
    # Parity (mcdist-send sends parity repairs by default), split out of GSO super-packets too:
    # with the data blocks, every data-path datagram the sender counts.
    parity_count = sum(len(r["mcdist.parity.fec_block"]) for r in of_type(T_PARITY))
    check(parity_count == summary["parity_datagrams"], "%d parity datagrams dissected, the "
          "sender sent %d" % (parity_count, summary["parity_datagrams"]))
    check(data_count + parity_count == summary["data_datagrams"], "%d data and parity datagrams "
          "dissected, the sender sent %d" % (data_count + parity_count, summary["data_datagrams"]))
    check(summary["repair_datagrams"] > 0, "20 %% loss must need repairs")

    # NAK, complete, complete_ack with their receiver ids.
    naks = of_type(6)
    nak_ids = {i for r in naks for i in r["mcdist.nak.receiver_id"]}
    check("lossy" in nak_ids, "no NAK from the lossy receiver (ids %s)" % nak_ids)
    runs = [x for r in naks if "lossy" in r["mcdist.nak.receiver_id"] for x in r["mcdist.file_nak.missing_blocks"]]
    check(runs, "the lossy receiver's NAKs name no missing block ranges")
    by_id = {r["id"]: r for r in summary["receivers"]}
    check(len([r for r in naks if "lossy" in r["mcdist.nak.receiver_id"]]) >= by_id["lossy"]["naks"],
          "fewer NAK datagrams than the sender counted")
    regs = {i for r in of_type(3) for i in r["mcdist.register_request.receiver_id"]}
    check(regs == {"clean", "lossy"}, "register_request ids %s" % regs)
    replies = {i: r["mcdist.register_reply.accepted"] for r in of_type(4)
               for i in r["mcdist.register_reply.receiver_id"]}
    check(replies == {"clean": ["1"], "lossy": ["1"]}, "register_reply: %s" % replies)
    completes = {i: r["mcdist.complete.files_stored"] for r in of_type(8) for i in r["mcdist.complete.receiver_id"]}
    check(set(completes) == {"clean", "lossy"}, "complete ids %s" % set(completes))
    for i, stored in completes.items():
        check(stored == [str(len(sizes))], "%s: complete says files_stored %s" % (i, stored))
    acks = {i for r in of_type(9) for i in r["mcdist.complete_ack.receiver_id"]}
    check(acks == {"clean", "lossy"}, "complete_ack ids %s" % acks)
    check(of_type(5), "no marker decoded")
    ends = [x for r in of_type(10) for x in r["mcdist.session_end.reason"]]
    check(ends and set(ends) == {"0"}, "session_end reasons %s (DONE expected)" % ends)
    log("live capture: %d frames, %d data datagrams in %d frames, %d NAKs (%s), %d announces" % (
        len(ours), data_count, len(of_type(T_DATA)), len(naks), ",".join(sorted(nak_ids)),
        len(of_type(T_ANNOUNCE))))
    return None


# --- hand-built datagrams ----------------------------------------------------------------------

def write_pcap(path, datagrams):
    """Writes (src port, dst port, dst address, payload) tuples as Ethernet/IPv4/UDP frames of a
    classic pcap file (LINKTYPE_ETHERNET)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, (sport, dport, dst, payload) in enumerate(datagrams):
            udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i, 0, 64, 17, 0,
                             socket.inet_aton("127.0.0.1"), socket.inet_aton(dst))
            csum = sum(struct.unpack("!10H", ip))
            csum = (csum & 0xFFFF) + (csum >> 16)
            csum = (csum & 0xFFFF) + (csum >> 16)
            ip = ip[:10] + struct.pack("!H", ~csum & 0xFFFF) + ip[12:]
            frame = b"\x01\x00\x5e\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + ip + udp
            f.write(struct.pack("<IIII", 1700000000 + i, 0, len(frame), len(frame)) + frame)


def packed(field, values):
    body = b"".join(varint(v) for v in values)
    return pb_bytes(field, body)


def part(byte, n):
    return bytes([byte]) * n


def v2_datagrams(session):
    """(name, datagram, expected {field: [values]}) for every type, version 2, per the wire-v2
    note: the version 1 datagram followed by the type's trailer."""
    h = lambda t: header(t, session, version=2)  # noqa: E731
    rid = pb_bytes(1, "site-a")
    out = []
    tag16 = bytes(range(16))
    out.append(("data", h(1) + struct.pack("!III", 77, 3, 5) + part(0xEE, 100) + tag16,
                {"mcdist.data.seq": ["77"], "mcdist.data.file": ["3"], "mcdist.data.block": ["5"],
                 "mcdist.data.payload_length": ["100"], "mcdist.auth.gcm_tag": [tag16.hex()]}))
    body = announce(session, [file_entry("v2/a.bin", 12345)], first_file=0)[8:]
    # Leaf 2 of an announce tree of 5 (docs/security.md "Announce trees"): a path of 3 hashes.
    path = part(0x12, 32) + part(0x13, 32) + part(0x14, 32)
    out.append(("announce", h(2) + body + part(0x11, 32) + path + part(0x22, 64) +
                struct.pack("!HH", 2, 5),
                {"mcdist.file_entry.path": ["v2/a.bin"], "mcdist.file_entry.size": ["12345"],
                 "mcdist.auth.session_public_key": [part(0x11, 32).hex()],
                 "mcdist.auth.path_hash": [part(b, 32).hex() for b in (0x12, 0x13, 0x14)],
                 "mcdist.auth.signature": [part(0x22, 64).hex()],
                 "mcdist.auth.leaf_index": ["2"], "mcdist.auth.leaf_count": ["5"]}))
    # A sequenced REGISTER: last completed session 2, sessions 3-4 and 7 never completed.
    missing = pb_bytes(8, pb_uint(1, 3) + pb_uint(2, 4)) + pb_bytes(8, pb_uint(1, 7) + pb_uint(2, 7))
    out.append(("register_request", h(3) + rid + pb_uint(2, 99) + packed(4, [2, 3, 1, 1]) +
                pb_uint(7, 2) + missing + part(0x33, 32) + part(0x44, 32),
                {"mcdist.register_request.receiver_id": ["site-a"],
                 "mcdist.register_request.held_files": ["2", "3", "1", "1"],
                 "mcdist.register_request.held_file_runs": ["2-4,6"],
                 "mcdist.register_request.last_seq": ["2"],
                 "mcdist.seq_range.first": ["3", "7"], "mcdist.seq_range.last": ["4", "7"],
                 "mcdist.auth.site_public_key": [part(0x33, 32).hex()],
                 "mcdist.auth.hmac": [part(0x44, 32).hex()]}))
    out.append(("register_reply", h(4) + rid + pb_uint(2, 1) + part(0x55, 24) + part(0x66, 32) +
                part(0x77, 16),
                {"mcdist.register_reply.receiver_id": ["site-a"],
                 "mcdist.auth.nonce": [part(0x55, 24).hex()],
                 "mcdist.auth.encrypted_session_key": [part(0x66, 32).hex()],
                 "mcdist.auth.aead_tag": [part(0x77, 16).hex()]}))
    out.append(("marker", h(5) + pb_uint(1, 4) + pb_uint(2, 9) + pb_uint(4, 1) +
                struct.pack("!Q", 0x0102030405060708) + part(0x88, 16),
                {"mcdist.marker.pass": ["4"], "mcdist.marker.file": ["9"],
                 "mcdist.auth.counter": [str(0x0102030405060708)],
                 "mcdist.auth.gcm_tag": [part(0x88, 16).hex()]}))
    fnak = pb_uint(1, 1) + packed(2, [0, 2, 5, 1])
    out.append(("nak", h(6) + rid + pb_uint(2, 2) + pb_bytes(6, fnak) + packed(7, [4, 6]) +
                part(0x99, 32),
                {"mcdist.nak.receiver_id": ["site-a"], "mcdist.file_nak.file": ["1"],
                 "mcdist.file_nak.missing_blocks": ["0-1,7"], "mcdist.nak.digests_wanted": ["4", "6"],
                 "mcdist.auth.hmac": [part(0x99, 32).hex()]}))
    out.append(("digest_list", h(7) + pb_bytes(1, pb_uint(1, 4) + pb_bytes(2, part(0xAB, 32))) +
                part(0xAA, 64),
                {"mcdist.held_digest.file": ["4"], "mcdist.held_digest.sha256": [part(0xAB, 32).hex()],
                 "mcdist.auth.signature": [part(0xAA, 64).hex()]}))
    out.append(("complete", h(8) + rid + pb_uint(4, 2) + pb_uint(5, 5000) +
                pb_bytes(7, pb_uint(1, 1) + pb_bytes(2, "disk full")) + part(0xBB, 32),
                {"mcdist.complete.receiver_id": ["site-a"], "mcdist.complete.files_stored": ["2"],
                 "mcdist.file_failure.reason": ["disk full"], "mcdist.auth.hmac": [part(0xBB, 32).hex()]}))
    out.append(("complete_ack", h(9) + rid + part(0xCC, 32),
                {"mcdist.complete_ack.receiver_id": ["site-a"], "mcdist.auth.hmac": [part(0xCC, 32).hex()]}))
    out.append(("session_end", h(10) + pb_uint(1, 1) + pb_bytes(2, "operator") + part(0xDD, 64),
                {"mcdist.session_end.reason": ["1"], "mcdist.session_end.detail": ["operator"],
                 "mcdist.auth.signature": [part(0xDD, 64).hex()]}))
    out.append(("fallback", h(11) + rid + pb_uint(2, 2) + pb_bytes(3, socket.inet_aton("10.1.2.3")) +
                pb_uint(4, 5000) + pb_bytes(8, bytes(range(0x11, 0x21))) +
                part(0xEF, 32),
                {"mcdist.fallback.transport": ["2"], "mcdist.fallback.address.ipv4": ["10.1.2.3"],
                 "mcdist.fallback.port": ["5000"], "mcdist.fallback.token": [bytes(range(0x11, 0x21)).hex()],
                 "mcdist.auth.hmac": [part(0xEF, 32).hex()]}))
    # The Info column of each, as the dissector writes it.
    infos = ["data [%08x] seq=77 file=3 block=5 len=100",
             "announce [%08x] chunk 0/1, files 0-0 of 1",
             "register_request [%08x] id=site-a last_seq=2 missing_ranges=2",
             "register_reply [%08x] id=site-a accepted",
             "marker [%08x] pass=4 file=9 block=0 seq=0 pass_end",
             "nak [%08x] id=site-a pass=2 seen_seq=0 files=1",
             "digest_list [%08x] 1 digests",
             "complete [%08x] id=site-a stored=2 bytes=5000 held=0 failed=1",
             "complete_ack [%08x] id=site-a",
             "session_end [%08x] ABORTED: operator",
             "fallback [%08x] id=site-a TCP port 5000"]
    for (_, _, expect), info in zip(out, infos):
        expect["_ws.col.Info"] = [(info % session) + " [auth]"]
    # A relay's hello (docs/security.md "Relays of signed sessions"): its id and key, the hub's
    # delegation as the trailer; a relay's key request carrying its key; and a relay behind a
    # relay asking the hub through it (for_origin).
    out.append(("relay_hello", h(18) + pb_bytes(1, "relay-a") + pb_bytes(2, part(0x5A, 32)) +
                part(0xD1, 64),
                {"mcdist.relay_hello.relay_id": ["relay-a"],
                 "mcdist.relay_hello.relay_public": [part(0x5A, 32).hex()],
                 "mcdist.auth.signature": [part(0xD1, 64).hex()]}))
    out.append(("relay key request", h(3) + pb_bytes(1, "relay-a") + pb_uint(9, 1) +
                pb_bytes(10, part(0x5B, 32)) + part(0x33, 32) + part(0x44, 32),
                {"mcdist.register_request.key_request": ["1"],
                 "mcdist.register_request.relay_public": [part(0x5B, 32).hex()],
                 "mcdist.auth.hmac": [part(0x44, 32).hex()]}))
    out.append(("nested relay key request", h(3) + pb_bytes(1, "relay-b") + pb_uint(9, 1) +
                pb_bytes(10, part(0x5C, 32)) + pb_uint(11, 1) + part(0x33, 32) + part(0x44, 32),
                {"mcdist.register_request.for_origin": ["1"],
                 "mcdist.register_request.relay_public": [part(0x5C, 32).hex()]}))
    # Version 3 (docs/security.md "Block digests"): a data block without a trailer, and leaf 1
    # of a window's tree of 2 chunks (a path of 1 hash), window 100+70, digests 64..69.
    v3 = lambda t: header(t, session, version=3)  # noqa: E731
    out.append(("v3 data", v3(1) + struct.pack("!III", 78, 3, 6) + part(0xEE, 100),
                {"mcdist.data.seq": ["78"], "mcdist.data.block": ["6"],
                 "mcdist.data.payload_length": ["100"],
                 "_ws.col.Info": ["data [%08x] seq=78 file=3 block=6 len=100" % session]}))
    digests = [part(0x70 + i, 16) for i in range(6)]
    out.append(("v3 block_digests", v3(15) + struct.pack("!IHH", 100, 70, 64) + b"".join(digests) +
                part(0x13, 32) + part(0x22, 64) + struct.pack("!HH", 1, 2),
                {"mcdist.block_digests.first_seq": ["100"], "mcdist.block_digests.count": ["70"],
                 "mcdist.block_digests.offset": ["64"],
                 "mcdist.block_digests.digest": [d.hex() for d in digests],
                 "mcdist.auth.path_hash": [part(0x13, 32).hex()],
                 "mcdist.auth.signature": [part(0x22, 64).hex()],
                 "mcdist.auth.leaf_index": ["1"], "mcdist.auth.leaf_count": ["2"],
                 "_ws.col.Info": ["block_digests [%08x] window=100+70 digests=64..69 [auth]"
                                  % session]}))
    return out


def malformed_datagrams(session):
    """(name, datagram, dst port, expert field that must be raised). Port 4711 is the
    dissector's default port, where it also decodes what its heuristic would refuse."""
    return [
        ("v2 nak shorter than its trailer", header(6, session, version=2) + pb_bytes(1, "x") + part(0, 10),
         None, "mcdist.auth.short"),
        ("v2 announce with leaf count 0", header(2, session, version=2) + part(0, 120) +
         struct.pack("!HH", 0, 0), None, "mcdist.auth.short"),
        ("v1 data without a data header", header(1, session) + b"\0\0\0\1", None, "mcdist.truncated"),
        ("announce with a length past the end", header(2, session) + varint(4 << 3 | 2) + varint(200) + b"abc",
         None, "mcdist.pb.malformed"),
        ("nak with a truncated varint", header(6, session) + pb_bytes(1, "a") + b"\x10\xff", None,
         "mcdist.pb.malformed"),
        ("marker pass as a length-delimited field", header(5, session) + pb_bytes(1, "xx"), None,
         "mcdist.pb.wire_type"),
        ("complete with wire type 3", header(8, session) + varint(4 << 3 | 3), None, "mcdist.pb.malformed"),
        ("complete_ack with an unknown field", header(9, session) + pb_bytes(1, "a") + pb_uint(15, 1), None,
         "mcdist.pb.unknown"),
        ("file_entry with a 5-byte sha256", header(2, session) + pb_bytes(4, pb_bytes(1, "p") + pb_bytes(5, "12345")),
         None, "mcdist.bad_value"),
        ("NAK range of count 0", header(6, session) + pb_bytes(1, "a") +
         pb_bytes(6, pb_uint(1, 0) + packed(2, [3, 0])), None, "mcdist.bad_value"),
        ("bad receiver id", header(9, session) + pb_bytes(1, "no spaces please"), None, "mcdist.bad_value"),
        ("bad magic on the mcdist port", b"XX\x01\x02" + struct.pack("!I", session), 4711, "mcdist.bad_magic"),
        ("an announce in version 3 on the mcdist port", header(2, session, version=3), 4711,
         "mcdist.bad_version"),
        ("version 4 on the mcdist port", header(1, session, version=4), 4711, "mcdist.bad_version"),
        ("block digests in version 2 on the mcdist port", header(15, session, version=2) + bytes(100),
         4711, "mcdist.bad_version"),
        # 12 is parity and 14 repair_advert; 13 is unassigned.
        ("type 13 on the mcdist port", header(13, session), 4711, "mcdist.unknown_type"),
        ("parity without its header on the mcdist port", header(12, session), 4711, "mcdist.truncated"),
        ("7 bytes on the mcdist port", header(2, session)[:7], 4711, "mcdist.truncated"),
        ("oversized on the mcdist port", header(1, session) + bytes(9000), 4711, "mcdist.oversized"),
    ]


def hand_built(base):
    session = 0x5EC0A7E5
    port = 45000 + os.getpid() % 1000
    good = v2_datagrams(session)
    bad = malformed_datagrams(session)
    pcap = os.path.join(base, "hand.pcap")
    write_pcap(pcap, [(40000, port, "239.192.1.1", d) for _, d, _ in good] +
               [(40000, p or port, "127.0.0.1", d) for _, d, p, _ in bad])
    want_fields = sorted({f for _, _, e in good for f in e})
    experts = sorted({e for _, _, _, e in bad})
    fields = ["frame.number", "frame.protocols", "mcdist.version", "mcdist.type", "mcdist.session",
              "_ws.expert.severity", "_ws.expert.message"] + want_fields + experts
    rows = tshark_fields(pcap, fields)
    check(len(rows) == len(good) + len(bad), "%d frames dissected, %d written" % (len(rows), len(good) + len(bad)))
    for (name, d, expect), r in zip(good, rows[:len(good)]):
        check(":mcdist" in r["frame.protocols"][0], "v2 %s: not dissected as mcdist" % name)
        check(r["mcdist.version"] == [str(d[2])], "v2 %s: version %s" % (name, r["mcdist.version"]))
        check(r["mcdist.session"] == ["0x%08x" % session], "v2 %s: session %s" % (name, r["mcdist.session"]))
        check(not r["_ws.expert.severity"] or all(int(s, 0) < 0x600000 for s in r["_ws.expert.severity"]),
              "v2 %s: expert info %s" % (name, r["_ws.expert.message"]))
        for f, v in expect.items():
            got = [x.replace(":", "") if f.startswith("mcdist.auth.") or f.endswith("sha256") else x
                   for x in r[f]]
            check(got == v, "v2 %s: %s is %s, expected %s" % (name, f, got, v))
    for (name, _, _, expert_field), r in zip(bad, rows[len(good):]):
        raised = [e for e in experts if r[e]]
        check(expert_field in raised, "%s: expert %s not raised (raised %s: %s)" % (
            name, expert_field, raised, r["_ws.expert.message"]))
        check("Lua Error" not in " ".join(r["_ws.expert.message"]), "%s: %s" % (name, r["_ws.expert.message"]))
    log("hand-built: %d version 2 and 3 datagrams decoded with their trailers, %d malformed ones "
        "flagged" % (
        len(good), len(bad)))

    # Every truncation of every hand-built datagram, in version 1 and 2, and one bit flipped
    # per byte, to the dissector's port: each dissects as mcdist, none raises a Lua error.
    grind = []
    for _, d, _ in good:
        for v1 in (False, True):
            full = d[:2] + b"\x01" + d[3:] if v1 else d
            grind += [full[:n] for n in range(1, len(full))]
            grind += [full[:i] + bytes([full[i] ^ (1 << (i % 8))]) + full[i + 1:] for i in range(8, len(full))]
    pcap = os.path.join(base, "grind.pcap")
    write_pcap(pcap, [(40000, 4711, "127.0.0.1", d) for d in grind])
    rows = tshark_fields(pcap, ["frame.number", "frame.protocols", "_ws.expert.message"])
    check(len(rows) == len(grind), "%d frames dissected, %d written" % (len(rows), len(grind)))
    lua_errors = [(r["frame.number"], r["_ws.expert.message"]) for r in rows
                  if "Lua Error" in " ".join(r["_ws.expert.message"])]
    check(not lua_errors, "Lua errors: %s" % lua_errors[:3])
    not_ours = [r["frame.number"] for r in rows if ":mcdist" not in r["frame.protocols"][0]]
    check(not not_ours, "frames not dissected as mcdist: %s" % not_ours[:5])
    log("grind: %d truncated or bit-flipped datagrams dissected without a Lua error" % len(grind))


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
        hand_built(base)
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
