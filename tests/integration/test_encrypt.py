#!/usr/bin/env python3
"""Integration: encrypted sessions (mcdist-send --encrypt, docs/security.md
"Encrypted sessions").

An observer on the path, both a socket joined to the group (every multicast datagram) and, when
tshark can capture on lo, a capture of every datagram to or from the group port and the
sender's port (announces, data, markers, REGISTER, register_reply, NAK, COMPLETE ...), records
two sessions of the same file set, whose file name and file content hold marker strings:

1. encrypted (--key, --site-keys, --encrypt) to the pinned site-a, while site-c (trusts the hub
   but its key is not pinned) listens too: site-a gets every file byte-identical; site-c gets
   nothing and the sender counts its key requests as untrusted; neither marker appears in
   anything observed, although data datagrams were observed (the capture works); the Wireshark
   dissector shows the announces and data as encrypted;
2. the same set signed but not encrypted, to a fresh destination: both markers appear in what
   was observed (so step 1 can fail);
3. the unicast fallback (--unicast: site-a is moved to it at once, no data over multicast) over
   tcp and over sctp (SCTP in UDP), encrypted, then signed only, each pair under one tshark
   capture of the group port, the sender's port and the unicast port (TCP and UDP): site-a gets
   every file byte-identical over the fallback each time; the capture of the encrypted pair
   holds the transfers (more than twice the files' bytes) but neither marker; the capture of
   the signed-only pair holds both (the name in the announce, the content in the records), so
   the encrypted check can fail. Needs tshark (without it, delivery alone is checked).

Also: --encrypt without --site-keys is refused with a clear error.

usage: test_encrypt.py BUILD_DIR"""

import os
import random
import shutil
import socket
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from test_wireshark import Capture, tshark_fields  # noqa: E402

NAME_MARKER = b"QZXNAMEMARKERQZX"
BODY_MARKER = b"QZXBODYMARKERQZX"


class group_observer(threading.Thread):
    """A process joined to the group: keeps every datagram it hears."""

    def __init__(self, group):
        super().__init__(daemon=True)
        host, port = parse_group(group)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        self.sock.bind((host, port))
        mreq = socket.inet_aton(host) + socket.inet_aton("127.0.0.1")
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        self.sock.settimeout(0.2)
        self.data = []
        self.stop = False

    def run(self):
        while not self.stop:
            try:
                d, _ = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            self.data.append(d)

    def finish(self):
        self.stop = True
        self.join(5)
        self.sock.close()
        return self.data


def free_port():
    """A port free for both TCP and UDP on 127.0.0.1 (the fallback listens on both)."""
    for _ in range(50):
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.bind(("127.0.0.1", 0))
        port = t.getsockname()[1]
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            u.close()
            t.close()
    fail("no port free for both TCP and UDP")


def count_type(datagrams, t):
    return sum(1 for d in datagrams if len(d) >= 8 and d[:2] == b"MD" and d[3] == t)


def observe(bin_dir, base, tag, group, sport, src, receivers, extra, use_tshark):
    """Runs one session under observation; returns (code, summary, output, group datagrams,
    capture bytes or None, capture path)."""
    _, gport = parse_group(group)
    cap = None
    cap_path = os.path.join(base, tag + ".pcapng")
    if use_tshark:
        cap = Capture(cap_path, [gport, sport], sport + 1, os.path.join(base, tag + "-tshark.log"))
        why = cap.wait_probe(b"mcdist-encrypt-test-%s-%d" % (tag.encode(), os.getpid()), 15)
        if why:
            cap.stop()
            log("no tshark capture (%s); the group observer alone" % why)
            cap = None
    obs = group_observer(group)
    obs.start()
    try:
        code, summary, out = run_sender(bin_dir, [src], group, receivers, rate="200M",
                                        extra=["--port", str(sport)] + extra, timeout=120)
    finally:
        datagrams = obs.finish()
        captured = None
        if cap:
            cap.wait_probe(b"mcdist-encrypt-test-end-%s-%d" % (tag.encode(), os.getpid()), 15)
            cap.stop()
            with open(cap_path, "rb") as f:
                captured = f.read()
    return code, summary, out, datagrams, captured, cap_path


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    use_tshark = shutil.which("tshark") is not None
    base = tempfile.mkdtemp(prefix="mcdist-encrypt-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    daemons = []
    try:
        keygen(bin_dir, os.path.join(base, "hub.key"))
        site_a_pub = keygen(bin_dir, os.path.join(base, "site-a.key"))
        keygen(bin_dir, os.path.join(base, "site-c.key"))
        sites = os.path.join(base, "sites.txt")
        with open(sites, "w") as f:
            f.write("site-a %s\n" % site_a_pub)
        hub = ["--key", os.path.join(base, "hub.key")]

        rng = random.Random(88)
        src = os.path.join(base, "products")
        named = os.path.join(src, "obs", "T_%s.bufr" % NAME_MARKER.decode())
        write_random(named, 30_000, rng)
        body = os.path.join(src, "nwp", "field.grib2")
        os.makedirs(os.path.dirname(body), exist_ok=True)
        with open(body, "wb") as f:
            # The marker repeated over more than a block: whole copies in several blocks.
            f.write(rng.randbytes(100_000) + BODY_MARKER * 300 + rng.randbytes(400_000))
        want = {"products/" + p: h for p, h in tree_digests(src).items()}

        # Refused: no unpinned site.
        code, _, out = run_sender(bin_dir, [src], free_group(), ["site-a"], extra=hub + ["--encrypt"])
        check(code == 2 and "--encrypt needs --key" in out and "--site-keys" in out,
              "--encrypt without --site-keys: exit %d\n%s" % (code, out))

        group = free_group()
        _, gport = parse_group(group)
        sport = gport + 2 if gport < 65000 else gport - 3
        trust = ["--trust", os.path.join(base, "hub.key.pub")]
        a = Daemon(bin_dir, base, "site-a", group, trust + ["--key", os.path.join(base, "site-a.key")])
        daemons.append(a)
        c = Daemon(bin_dir, base, "site-c", group, trust + ["--key", os.path.join(base, "site-c.key")])
        daemons.append(c)

        # 1. Encrypted.
        code, summary, out, grp, cap, cap_path = observe(
            bin_dir, base, "encrypted", group, sport, src, ["site-a"],
            hub + ["--site-keys", sites, "--encrypt"], use_tshark)
        log(out)
        check(code == 0, "encrypted session: mcdist-send exited %d" % code)
        check(summary["encrypted"] is True and summary["signed"] is True,
              "summary: encrypted %s signed %s" % (summary.get("encrypted"), summary.get("signed")))
        got = tree_digests(a.dest)
        check(got == want, "encrypted session: site-a has %s, want %s" % (got, want))
        check(tree_digests(c.dest) == {}, "site-c (key not pinned) got %s" % tree_digests(c.dest))
        check(summary["refused_unauthenticated"]["untrusted_site"] > 0,
              "the sender did not refuse site-c's key requests: %s" % summary["refused_unauthenticated"])
        check("site-c" not in [r["id"] for r in summary["receivers"]], "site-c registered")
        data_seen = count_type(grp, T_DATA)
        check(data_seen >= 500_000 // 1400, "the group observer saw only %d data datagrams" % data_seen)
        check(count_type(grp, T_ANNOUNCE) > 0, "the group observer saw no announce")
        everything = b"".join(grp)
        for m in (NAME_MARKER, BODY_MARKER):
            check(m not in everything, "%s seen on the group in an encrypted session" % m)
        if cap is not None:
            check(cap.count(b"MD\x02\x01") >= data_seen // 2,
                  "the capture holds too few data datagrams to mean anything")
            for m in (NAME_MARKER, BODY_MARKER):
                check(m not in cap, "%s in the tshark capture of an encrypted session" % m)
            rows = tshark_fields(cap_path, ["mcdist.type", "mcdist.encrypted"], "mcdist")
            # One frame may hold many datagrams (GSO): count the datagrams shown as encrypted.
            shown = sum(len(r["mcdist.encrypted"]) for r in rows)
            check(shown >= data_seen // 2,
                  "the dissector shows %d datagrams of %d frames as encrypted" % (shown, len(rows)))

        # 2. The same set signed only, to a fresh destination: the markers are on the wire.
        shutil.rmtree(a.dest)
        os.makedirs(a.dest)
        code, summary, out, grp, cap, _ = observe(
            bin_dir, base, "plain", group, sport, src, ["site-a"], hub + ["--site-keys", sites], use_tshark)
        log(out)
        check(code == 0, "signed session: mcdist-send exited %d" % code)
        check(summary["encrypted"] is False, "summary says encrypted")
        check(tree_digests(a.dest) == want, "signed session: site-a has %s" % tree_digests(a.dest))
        everything = b"".join(grp)
        for m in (NAME_MARKER, BODY_MARKER):
            check(m in everything, "%s not seen on the group in a session that is not encrypted" % m)
            if cap is not None:
                check(m in cap, "%s not in the capture of a session that is not encrypted" % m)
        for d in daemons:
            check(d.alive(), "mcdistd %s died" % d.id)

        # 3. The unicast fallback, encrypted and then signed only, each over tcp and sctp under
        # one capture (tshark's start and stop cost seconds).
        uport = free_port()
        fallback_captured = 0
        files_bytes = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(src) for f in fs)
        for encrypted in (True, False):
            tag = "fallback-" + ("encrypted" if encrypted else "signed")
            cap = None
            cap_path = os.path.join(base, tag + ".pcapng")
            if use_tshark:
                cap = Capture(cap_path, [gport, sport, uport], sport + 1,
                              os.path.join(base, tag + "-tshark.log"), tcp_ports=[uport])
                why = cap.wait_probe(b"mcdist-encrypt-test-%s-%d" % (tag.encode(), os.getpid()), 15)
                if why:
                    cap.stop()
                    log("no tshark capture (%s); delivery alone is checked" % why)
                    cap = None
            try:
                for transport in ("tcp", "sctp"):
                    what = "%s over %s" % (tag, transport)
                    shutil.rmtree(a.dest)
                    os.makedirs(a.dest)
                    code, summary, out = run_sender(
                        bin_dir, [src], group, ["site-a"], rate="200M", timeout=120,
                        extra=["--port", str(sport)] + hub +
                        ["--site-keys", sites, "--unicast", "--fallback", transport,
                         "--unicast-port", str(uport)] + (["--encrypt"] if encrypted else []))
                    log(out)
                    check(code == 0, "%s: mcdist-send exited %d\n%s" % (what, code, a.log_text()))
                    check(summary["encrypted"] is encrypted,
                          "%s: summary says encrypted %s" % (what, summary["encrypted"]))
                    r = summary["receivers"][0]
                    check(r["state"] == "completed" and r["path"] == "unicast-" + transport,
                          "%s: site-a did not complete over the fallback: %s" % (what, r))
                    got = tree_digests(a.dest)
                    check(got == want, "%s: site-a has %s, want %s" % (what, got, want))
            finally:
                captured = None
                if cap:
                    cap.wait_probe(b"mcdist-encrypt-test-end-%s-%d" % (tag.encode(), os.getpid()), 15)
                    cap.stop()
                    with open(cap_path, "rb") as f:
                        captured = f.read()
            if captured is None:
                continue
            fallback_captured += 1
            if encrypted:
                # The capture must hold the transfers themselves: more bytes than the files
                # twice (once per transport).
                check(len(captured) > 2 * files_bytes,
                      "%s: the capture holds only %d bytes" % (tag, len(captured)))
                for m in (NAME_MARKER, BODY_MARKER):
                    check(m not in captured, "%s: %s in the capture of an encrypted fallback" % (tag, m))
            else:
                for m in (NAME_MARKER, BODY_MARKER):
                    check(m in captured, "%s: %s not in the capture of the fallbacks that are not "
                          "encrypted" % (tag, m))
        for d in daemons:
            check(d.alive(), "mcdistd %s died" % d.id)

        log("PASS: encrypted session delivered byte-identical to the pinned site, nothing to the "
            "unpinned one, no marker in %d group datagrams%s; the markers were on the wire "
            "without --encrypt; the encrypted fallback over tcp and sctp delivered byte-identical "
            "with no marker in the capture (%d captures, the signed-only one with both markers)"
            % (len(grp), " or the tshark capture" if cap is not None else "", fallback_captured))
        return 0
    finally:
        for d in daemons:
            d.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
