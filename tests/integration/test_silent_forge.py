#!/usr/bin/env python3
"""Integration: a signed silent session (mcdist-send --key --silent-passes 2 with FEC) to a real
mcdistd that trusts the key, while a forger on the group multicasts forged data and parity blocks
with the session's id (docs/security.md "Block digests").

The forger joins the group, and for every data or parity datagram of the session it hears it
sends forged copies of the next few datagrams the sender will send (the next blocks of the same
file, the next parity indexes and FEC blocks, under the next sequence numbers), from the sender's
own address (the site checks the source host), in every form a site might take: version 3 with
no trailer (a block digest session's form) and version 2 with a 16-byte tag (the form an older
sender sends, which a silent site without the session key cannot check). On loopback a forged
copy reaches the site before the real datagram it imitates whenever the real one is not in the
same paced burst, so without per-block authentication the site takes forged blocks in the real
ones' places and files are lost (their SHA-256 fails).

Asserted: every file is delivered byte-identical (the site also drops 1 % of what it receives,
so parity repairs run while the forger is at work); the site counted the forged blocks under
bad_digest (a forged version-3 block whose sequence number has a signed digest) and no_digest
(the version-2 forms, which a block digest session never sends, and forgeries ahead of every
window it holds), and checked the real blocks against their digests (block_digests.
blocks_checked); no file is incomplete; the site sent no datagram; the sender's summary counts
the digest chunks it sent.

Run against a build without block digests, the same test fails: files are missing.

usage: test_silent_forge.py BUILD_DIR"""

import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403

T_PARITY = 12
#: Datagrams forged ahead of each real one the forger hears.
AHEAD = 4


class Forger(threading.Thread):
    """Listens on the group and forges the datagrams the sender is about to send."""

    def __init__(self, group):
        super().__init__(daemon=True)
        host, port = parse_group(group)
        self.dest = (host, port)
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.rx.bind((host, port))
        mreq = socket.inet_aton(host) + socket.inet_aton("127.0.0.1")
        self.rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.rx.settimeout(0.2)
        # The sender's host address (the site checks the source host, not the port).
        self.tx = multicast_socket()
        self.own_port = self.tx.getsockname()[1]
        self.rng = random.Random(99)
        self.stop_flag = threading.Event()
        self.heard = 0
        self.forged = {"data": 0, "parity": 0}
        self.session = None

    def forge(self, msg_type, session, seq, a, b):
        garbage = self.rng.randbytes(1400)
        for version, trailer in ((3, b""), (2, self.rng.randbytes(16))):
            d = header(msg_type, session, version=version) + struct.pack("!III", seq, a, b)
            self.tx.sendto(d + garbage + trailer, self.dest)

    def run(self):
        while not self.stop_flag.is_set():
            try:
                d, src = self.rx.recvfrom(65536)
            except socket.timeout:
                continue
            if src[1] == self.own_port or len(d) < 20 or d[3] not in (T_DATA, T_PARITY):
                continue
            self.heard += 1
            _, _, msg_type, session = struct.unpack("!HBBI", d[:8])
            seq, a, b = struct.unpack("!III", d[8:20])
            self.session = session
            for i in range(1, AHEAD + 1):
                if msg_type == T_DATA:
                    self.forge(T_DATA, session, seq + i, a, b + i)  # the file's next blocks
                    self.forged["data"] += 2
                else:
                    self.forge(T_PARITY, session, seq + i, a, b + i)  # the next parity index
                    self.forge(T_PARITY, session, seq + i, a + i, b)  # the next FEC blocks'
                    self.forged["parity"] += 4

    def stop(self):
        self.stop_flag.set()
        self.join(5)


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-silent-forge-",
                            dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        rng = random.Random(21)
        src = os.path.join(base, "products")
        sizes = [0, 1, 1400, 10_000] * 2 + [300_000] * 4 + [1_000_000] * 2
        for i, size in enumerate(sizes):
            write_random(os.path.join(src, "d%d" % (i % 3), "p%03d.bin" % i), size, rng)
        want = {"products/" + p: h for p, h in tree_digests(src).items()}
        key = os.path.join(base, "hub.key")
        subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), key],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
        group = free_group()
        site = Daemon(bin_dir, base, "site", group,
                      ["--trust", key + ".pub", "--drop-rate", "0.01", "--drop-seed", "4"])
        forger = Forger(group)
        forger.start()
        try:
            summary = send_silent(bin_dir, [src], group, key=key, rate="20M")
            wait_for("the session's end", lambda: sessions_over(site), 30, site)
        finally:
            forger.stop()
            site.stop()
        st = site.read_status()
        na = st.get("not_authenticated", {})
        log("forger: heard %d datagrams, forged %s; site: stored %d, incomplete %d, failed %d; "
            "not authenticated %s; block digests %s; dropped %s; sent %d datagrams"
            % (forger.heard, forger.forged, st["files_stored"], st["files_incomplete"],
               st["files_failed"], na, st.get("block_digests"), st.get("dropped"),
               st["datagrams_sent"]))
        check(forger.heard > 0 and forger.forged["data"] > 0 and forger.forged["parity"] > 0,
              "the forger forged nothing (heard %d)" % forger.heard)
        got = tree_digests(site.dest)
        bad = sorted(p for p in got if want.get(p) != got[p])
        check(not bad, "files that are not the source's: %s" % bad[:5])
        missing = sorted(set(want) - set(got))
        check(not missing, "%d of %d files missing (spoiled by forged blocks): %s"
              % (len(missing), len(want), missing[:5]))
        check(st["files_incomplete"] == 0 and st["files_failed"] == 0,
              "files incomplete %d, failed %d" % (st["files_incomplete"], st["files_failed"]))
        check(st["datagrams_sent"] == 0, "the site sent %d datagrams" % st["datagrams_sent"])
        check(na.get("bad_digest", 0) > 0, "no forged block counted as bad_digest: %s" % na)
        check(na.get("no_digest", 0) > 0, "no forged block counted as no_digest: %s" % na)
        check(st["block_digests"]["blocks_checked"] > 0, "no block was checked against a digest")
        check(st["parity"]["blocks_recovered"] > 0, "no block recovered from parity")
        bd = summary["block_digests"]
        check(bd["enabled"] and bd["chunks"] > 0 and bd["bytes"] > 0,
              "the sender sent no block digests: %s" % bd)
        log("PASS: %d files delivered identically past %d forged data and %d forged parity "
            "datagrams (bad_digest %d, no_digest %d); block digests were %.2f %% of the data"
            % (len(want), forger.forged["data"], forger.forged["parity"], na["bad_digest"],
               na["no_digest"], 100.0 * bd["bytes"] / max(1, summary["data_bytes"])))
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
