#!/usr/bin/env python3
"""Replay cannot roll a product back (docs/security.md "Freshness"), with the real programs on
loopback: a host that holds no key records a complete signed session (every datagram on the
wire, the unicast key and register replies included), waits until the hub has delivered a newer
version of the same product, and replays what it recorded with the hub's address, answering the
site's key request and REGISTER with the recorded replies (only the reply port rewritten, as the
site reveals it in its own request). Asserted each time: the product keeps its newer content,
the site's action does not run again, and the site counts the session as refused (`replayed`
or `expired` in its status file's `dropped`), which shows the replay got as far as the
freshness check (signature verified, session key obtained).

1. replayed after the in-memory tombstone has expired (session_timeout 3 s);
2. replayed right after a restart of mcdistd (the replay cache is on disk);
3. replayed after the cache file was deleted while mcdistd was down (refused by its floor);
4. the same for a signed silent session (no key exchange: the multicast alone replayed).

Captures with an AF_PACKET socket on lo: needs root (CAP_NET_RAW); SKIPPED otherwise.

usage: test_replay.py BUILD_DIR"""

import os
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import (SKIP, Daemon, check, free_group, log,  # noqa: E402
                            loopback_multicast_works, parse_group, run_sender, sha256_file,
                            wait_for, write_random, stop_all)
from test_feed_signed import keygen  # noqa: E402

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET, PACKET_VNET_HDR = 263, 15
T_REGISTER_REQUEST, T_REGISTER_REPLY = 3, 4


class Capture:
    """Every mcdist datagram on lo (UDP payloads starting with the magic 'MD'), once each. The
    sender writes data with UDP GSO, which loopback does not segment: the socket asks for the
    virtio-net header (PACKET_VNET_HDR), whose gso_size cuts such a packet into its datagrams."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.1)
        self.packets = []  # (src ip, src port, dst ip, dst port, payload)
        self.stop_flag = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_flag:
            try:
                frame, addr = self.sock.recvfrom(1 << 17)
            except socket.timeout:
                continue
            if addr[2] == PACKET_OUTGOING or len(frame) < 10 + 14 + 20 + 8:
                continue
            gso_type = frame[1]
            gso_size = struct.unpack("<H", frame[4:6])[0]
            ip = frame[10 + 14:]
            if ip[0] >> 4 != 4 or ip[9] != 17:
                continue
            ihl = (ip[0] & 0x0F) * 4
            sport, dport = struct.unpack("!HH", ip[ihl:ihl + 4])
            payload = ip[ihl + 8:]
            if payload[:2] != b"MD":
                continue
            step = gso_size if gso_type != 0 and gso_size > 0 else len(payload)
            for off in range(0, len(payload), step):
                self.packets.append((socket.inet_ntoa(ip[12:16]), sport,
                                     socket.inet_ntoa(ip[16:20]), dport,
                                     bytes(payload[off:off + step])))

    def stop(self):
        self.stop_flag = True
        self.thread.join()
        self.sock.close()
        return self.packets


def session_of(payload):
    return struct.unpack("!I", payload[4:8])[0]


def record(bin_dir, files, group, extra, receivers):
    """Runs one signed session while capturing: (session id, its datagrams)."""
    cap = Capture()
    code, summary, out = run_sender(bin_dir, files, group, receivers=receivers, extra=extra)
    time.sleep(0.3)
    packets = cap.stop()
    check(code == 0, "the recorded session failed (%d):\n%s" % (code, out))
    sid = summary["session_id"]
    sid = int(sid, 16) if isinstance(sid, str) else int(sid)
    mine = [p for p in packets if session_of(p[4]) == sid]
    check(mine, "nothing of session %08x was captured" % sid)
    return sid, mine


def replay(packets, group):
    """Replays a recorded session: the multicast datagrams to the group from the sender's
    address (a socket bound to the port the sender used), answering key requests and REGISTERs
    of the site with the recorded replies of the same type (sent to where the request came
    from: the site's current reply port). Returns how many requests were answered."""
    gaddr, gport = parse_group(group)
    sender_port = next(p[1] for p in packets if p[3] == gport)
    multicast = [p[4] for p in packets if p[3] == gport]
    replies = [p[4] for p in packets if p[1] == sender_port and p[3] != gport and
               p[4][3] == T_REGISTER_REPLY]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    s.bind(("127.0.0.1", sender_port))
    s.setblocking(False)
    answered = 0

    def serve_requests():
        nonlocal answered
        while True:
            try:
                data, addr = s.recvfrom(65536)
            except BlockingIOError:
                return
            if len(data) >= 8 and data[3] == T_REGISTER_REQUEST:
                # A key request or a REGISTER: the recorded answers, in order (key reply first).
                for r in replies:
                    s.sendto(r, addr)
                answered += 1

    for _ in range(3):  # the sender's own announce cycles repeat; so does the replay
        for i, d in enumerate(multicast):
            s.sendto(d, (gaddr, gport))
            if i % 20 == 0:
                serve_requests()
                time.sleep(0.002)
        deadline = time.time() + 0.5
        while time.time() < deadline:
            serve_requests()
            time.sleep(0.01)
    s.close()
    return answered


def refused_count(d):
    """Signed sessions the site refused for freshness, over all its runs (its log is appended
    across restarts; the status file's counters start again at each)."""
    return len(re.findall(r"session \w+ signed by \S+: refused: (this site took it already|"
                          r"stamped [-0-9.]+ s ago)", d.log_text()))


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)).close()
    except PermissionError:
        print("SKIPPED: capturing on lo needs root (CAP_NET_RAW)")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-replay-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    rng = random.Random(777)
    site = None
    try:
        hub = os.path.join(base, "hub.key")
        keygen(bin_dir, hub)
        site_pub = keygen(bin_dir, os.path.join(base, "site.key"))
        sites = os.path.join(base, "sites.txt")
        with open(sites, "w") as f:
            f.write("site-a %s\n" % site_pub)
        ran = os.path.join(base, "ran")
        action = os.path.join(base, "action.sh")
        with open(action, "w") as f:
            f.write("#!/bin/sh\necho \"$MCDIST_RELPATH $MCDIST_SHA256\" >> %s\n" % ran)
        os.chmod(action, 0o755)
        group = free_group()
        config = os.path.join(base, "site.toml")
        with open(config, "w") as f:
            f.write("""
trusted_senders = ["%s.pub"]
[[action]]
name = "ingest"
match = '^obs/'
exec = ["%s", "{relpath}"]
""" % (hub, action))
        site = Daemon(bin_dir, base, "site-a", group,
                      ["--config", config, "--key", os.path.join(base, "site.key"),
                       "--http", "off", "--session-timeout", "3s"])
        signed = ["--key", hub, "--site-keys", sites, "--register-timeout", "10s"]

        def send_version(name, version, extra):
            src = os.path.join(base, "v%d" % version, "obs")
            write_random(os.path.join(src, name), 50_000 + version, rng)
            return src, sha256_file(os.path.join(src, name))

        def runs():
            if not os.path.exists(ran):
                return 0
            with open(ran) as f:
                return len(f.read().splitlines())

        # The signed session v1, recorded; then v2 delivered.
        src1, d1 = send_version("x.bufr", 1, signed)
        sid1, rec1 = record(bin_dir, [src1], group, signed, ["site-a"])
        log("recorded session %08x: %d datagrams (%d to the site's reply port)" % (
            sid1, len(rec1), sum(1 for p in rec1 if p[4][3] == T_REGISTER_REPLY)))
        src2, d2 = send_version("x.bufr", 2, signed)
        code, _, out = run_sender(bin_dir, [src2], group, receivers=["site-a"], extra=signed)
        check(code == 0, "v2 failed:\n" + out)
        target = os.path.join(site.dest, "obs", "x.bufr")
        check(sha256_file(target) == d2, "v2 not delivered")
        wait_for("the action for v1 and v2", lambda: runs() == 2, 20, site)

        def attack(what, until_past_tombstone=False):
            before = refused_count(site)
            answered = replay(rec1, group)
            # The site remembers an ended session (its tombstone) for session_timeout after it
            # ended there, and it ends when the sender's END arrives or, on a loaded machine
            # without it, at the timeout: a replay that meets the tombstone is dropped as stale,
            # not refused, and is sent again until it comes after it.
            deadline = time.time() + 20
            while until_past_tombstone and time.time() < deadline:
                again = time.time() + 2
                while refused_count(site) <= before and time.time() < again:
                    time.sleep(0.05)
                if refused_count(site) > before:
                    break
                answered += replay(rec1, group)
            wait_for("the replay refused (%s)" % what, lambda: refused_count(site) > before, 20, site)
            time.sleep(1.0)  # anything the replay could still deliver
            check(sha256_file(target) == d2, "%s: the replay put v1 back" % what)
            check(runs() == 2, "%s: the action ran again (%d runs)" % (what, runs()))
            check(site.alive(), "%s: the site died" % what)
            log("%s: refused (%d requests answered with the recorded replies); x.bufr still v2"
                % (what, answered))
            return answered

        # 1. Past the tombstone (session_timeout 3 s: the engine forgot the session).
        attack("after the tombstone expired", until_past_tombstone=True)
        # 2. Right after a restart.
        site.stop()
        site.start()
        answered = attack("after a restart")
        check(answered > 0, "the site sent no key request to the replayed hub address: the "
              "replay did not reach the signed session's key exchange")
        # 3. The cache file lost while the daemon was down.
        site.stop()
        check("replayed" in ((site.read_status() or {}).get("dropped") or {}),
              "the status file does not count replayed sessions")
        os.unlink(os.path.join(site.temp, "replay"))
        site.start()
        attack("after the replay cache was deleted")

        # 4. A signed silent session: nothing but multicast to replay.
        silent = ["--key", hub, "--silent-passes", "2"]
        s1, sd1 = send_version("s.bufr", 1, silent)
        sid_s, rec_s = record(bin_dir, [s1], group, silent, None)
        starget = os.path.join(site.dest, "obs", "s.bufr")
        wait_for("silent v1 stored", lambda: os.path.exists(starget) and sha256_file(starget) == sd1,
                 20, site)
        s2, sd2 = send_version("s.bufr", 2, silent)
        code, _, out = run_sender(bin_dir, [s2], group, extra=silent)
        check(code == 0, "silent v2 failed:\n" + out)
        wait_for("silent v2 stored", lambda: sha256_file(starget) == sd2, 20, site)
        site.stop()
        site.start()
        before = refused_count(site)
        replay(rec_s, group)
        wait_for("the silent replay refused", lambda: refused_count(site) > before, 20, site)
        time.sleep(1.0)
        check(sha256_file(starget) == sd2, "the silent replay put v1 back")
        log("a signed silent session replayed after a restart: refused; s.bufr still v2")
        log("dropped: %s" % (site.read_status() or {}).get("dropped"))
        log("PASS: recorded signed sessions replayed later are refused, across restarts")
        return 0
    finally:
        stop_all(base, daemons=[site])


if __name__ == "__main__":
    sys.exit(main())
