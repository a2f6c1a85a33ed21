#!/usr/bin/env python3
"""Integration: signed sessions (docs/security.md). A receiver that trusts the hub's
key gets the hub's products; then every forgery of the issue is tried against it and against a
sender, from this host (so with the real sender's own source address, 127.0.0.1):

- a sender with another key (mcdist-send --key evil.key) sends obs/x.bufr with other content,
  mode 0777: the delivered file keeps its bytes, mode and mtime;
- hand-made unsigned announces and blocks, on the group and straight to the daemon's control
  port, and a version-2 announce with a made-up signature: nothing is written, each is counted;
- a forged site: REGISTER and COMPLETE in the name of a pinned but absent site, and a NAK for
  every block in the name of the real site: the absent site is not reported completed, the NAK
  causes no repair, the refusals are counted in the sender's summary.

Last, the site's daemon is killed (SIGKILL) in the middle of a signed session and restarted: it
resumes with the session's saved keys and completes.

usage: test_auth.py BUILD_DIR"""

import os
import random
import sqlite3
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from status_common import get, http_port  # noqa: E402

T_REGISTER, T_NAK, T_COMPLETE = 3, 6, 8


def keygen(bin_dir, path):
    out = subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    check(os.stat(path).st_mode & 0o777 == 0o600, "key file %s is not 0600" % path)
    return out.stdout.decode().strip()



def status_counter(d, key):
    st = d.read_status() or {}
    return (st.get("not_authenticated") or {}).get(key, 0)


def wait_status(d, pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = d.read_status()
        if st and pred(st):
            return st
        time.sleep(0.05)
    fail("mcdistd %s: %s not seen in its status within %s s:\n%s" % (d.id, what, timeout, d.log_text()))


class forged_site(threading.Thread):
    """Waits for the first announce on the group, then speaks for sites it is not."""

    def __init__(self, group):
        super().__init__(daemon=True)
        host, port = parse_group(group)
        self.listen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listen.bind((host, port))
        mreq = socket.inet_aton(host) + socket.inet_aton("127.0.0.1")
        self.listen.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        self.listen.settimeout(0.2)
        self.out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.out.bind(("127.0.0.1", 0))
        self.sent = 0
        self.stop = False

    def run(self):
        sender = None
        session = None
        while not self.stop and sender is None:
            try:
                data, addr = self.listen.recvfrom(65536)
            except socket.timeout:
                continue
            if len(data) >= 8 and data[3] == T_ANNOUNCE:
                session = struct.unpack("!I", data[4:8])[0]
                sender = addr
        if sender is None:
            return
        absent = pb_bytes(1, "site-b")
        nak = (pb_bytes(1, "site-a") + pb_uint(2, 1) +
               pb_bytes(6, pb_uint(1, 0) + pb_bytes(2, varint(0) + varint(100000))))
        complete = absent + pb_uint(4, 2) + pb_uint(5, 2_000_000)
        while not self.stop:
            for d in (header(T_REGISTER, session) + absent,
                      header(T_REGISTER, session, version=2) + absent + os.urandom(64),
                      header(T_COMPLETE, session) + complete,
                      header(T_COMPLETE, session, version=2) + complete + os.urandom(32),
                      header(T_NAK, session) + nak,
                      header(T_NAK, session, version=2) + nak + os.urandom(32)):
                self.out.sendto(d, sender)
                self.sent += 1
            time.sleep(0.02)


def announce_path_length(index, count):
    """Hashes in an announce's authentication path (common/announce_tree.hpp, RFC 9162)."""
    if not 1 <= count <= 64 or index >= count:
        return None
    n = 0
    while count > 1:
        k = 1
        while k * 2 < count:
            k *= 2
        if index < k:
            count = k
        else:
            index, count = index - k, count - k
        n += 1
    return n


class copied_root_forger(threading.Thread):
    """Waits for a signed announce on the group, then sends announces of the same session with
    its own manifest behind that announce's whole trailer (session key, path, the root's real
    signature, leaf index and count): what an outsider can do with a real announce tree."""

    def __init__(self, group):
        super().__init__(daemon=True)
        self.host, self.port = parse_group(group)
        self.listen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listen.bind((self.host, self.port))
        mreq = socket.inet_aton(self.host) + socket.inet_aton("127.0.0.1")
        self.listen.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        self.listen.settimeout(0.2)
        self.out = multicast_socket()
        self.sent = 0
        self.stop = False

    def run(self):
        # Each forged announce copies the trailer of the latest real one, 150 ms after it: its
        # root is then one the site verified (a root is remembered while its session is), and
        # the site's 100 ms without checks after a verified announce of a session whose
        # manifest it holds (auth::announce_repeat_interval) is over.
        self.listen.settimeout(0.01)
        entry = file_entry("obs/y.bufr", 6, mode=0o777, mtime_ns=4102444800 * 10**9)
        forged, due = None, None
        while not self.stop:
            try:
                real, _ = self.listen.recvfrom(65536)
                if len(real) >= 108 and real[2] == 2 and real[3] == T_ANNOUNCE:
                    session = struct.unpack("!I", real[4:8])[0]
                    index, count = struct.unpack("!HH", real[-4:])
                    k = announce_path_length(index, count)
                    check(k is not None, "a real announce's trailer has no valid index and count")
                    trailer = real[len(real) - (100 + 32 * k):]
                    body = announce(session, [entry])
                    forged = body[:2] + b"\x02" + body[3:] + trailer
                    due = time.monotonic() + 0.15
            except socket.timeout:
                pass
            if forged is not None and time.monotonic() >= due:
                self.out.sendto(forged, (self.host, self.port))
                self.sent += 1
                forged = None


def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-auth-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    daemons = []
    try:
        hub_pub = keygen(bin_dir, os.path.join(base, "hub.key"))
        keygen(bin_dir, os.path.join(base, "evil.key"))
        site_a_pub = keygen(bin_dir, os.path.join(base, "site-a.key"))
        site_b_pub = keygen(bin_dir, os.path.join(base, "site-b.key"))
        check(hub_pub.startswith("mcdist-ed25519:"), "keygen printed " + hub_pub)
        sites = os.path.join(base, "sites.txt")
        with open(sites, "w") as f:
            f.write("# pinned site keys\nsite-a %s\nsite-b %s\n" % (site_a_pub, site_b_pub))

        rng = random.Random(8)
        src = os.path.join(base, "obs")
        write_random(os.path.join(src, "x.bufr"), 20_000, rng)
        write_random(os.path.join(src, "model.grib2"), 2_000_000, rng)
        want = {"obs/" + p: h for p, h in tree_digests(src).items()}

        group = free_group()
        host, port = parse_group(group)
        # A daemon without trusted senders warns that anyone can write its products.
        open_site = Daemon(bin_dir, base, "open-site", group)
        open_site.wait_for_log("no trusted_senders", 5)
        open_site.stop()

        d = Daemon(bin_dir, base, "site-a", group,
                   ["--trust", os.path.join(base, "hub.key.pub"), "--key", os.path.join(base, "site-a.key"),
                    "--http", "127.0.0.1:0", "--journal", os.path.join(base, "site-a.db")])
        daemons.append(d)
        check("no trusted_senders" not in d.log_text(), "a daemon that trusts a key warns:\n" + d.log_text())
        check(site_a_pub in d.log_text(), "mcdistd does not log its site key")

        # 1. The hub's signed session is delivered.
        code, summary, out = run_sender(bin_dir, [src], group, ["site-a"],
                                        extra=["--key", os.path.join(base, "hub.key"), "--site-keys", sites])
        log(out)
        check(code == 0, "signed session: mcdist-send exited %d" % code)
        check(summary["signed"] is True, "summary does not say signed")
        got = tree_digests(d.dest)
        check(got == want, "signed session: delivered %s" % sorted(got))
        target = os.path.join(d.dest, "obs", "x.bufr")
        before = os.stat(target)
        # The site's delivery journal names the pinned key that verified the session.
        # (Journaled just after the rename: wait for both rows.)
        def journaled():
            con = sqlite3.connect("file:%s?mode=ro" % os.path.join(base, "site-a.db"), uri=True, timeout=5)
            try:
                return con.execute("SELECT relpath, sender_key FROM deliveries ORDER BY relpath").fetchall()
            finally:
                con.close()
        deadline = time.time() + 10
        keys = journaled()
        while len(keys) < 2 and time.time() < deadline:
            time.sleep(0.05)
            keys = journaled()
        check(keys == [("obs/model.grib2", hub_pub), ("obs/x.bufr", hub_pub)],
              "delivery journal sender_key: %s (want %s)" % (keys, hub_pub))

        # 2. Another key sends obs/x.bufr with other content, mode 0777.
        evil_src = os.path.join(base, "evil", "obs")
        write_random(os.path.join(evil_src, "x.bufr"), 20_000, random.Random(666))
        os.chmod(os.path.join(evil_src, "x.bufr"), 0o777)
        bad_sig = status_counter(d, "bad_signature")
        code, summary, out = run_sender(bin_dir, [evil_src], group,
                                        extra=["--key", os.path.join(base, "evil.key"),
                                               "--register-window", "1s"])
        check(code == 1, "a sender nobody trusts must find no receiver; exit %d\n%s" % (code, out))
        check(summary["receivers"] == [], "someone registered with the evil sender: %s" % summary["receivers"])
        wait_status(d, lambda st: st["not_authenticated"]["bad_signature"] > bad_sig, 5,
                    "a bad_signature count for the evil sender's announces")

        # 3. Hand-made forgeries: unsigned announce and blocks, on the group and to the control
        # port, and a version-2 announce whose signature is made up.
        control = None
        for line in d.log_text().splitlines():
            if "listening on" in line and "control 127.0.0.1:" in line:
                control = int(line.split("control 127.0.0.1:")[1].split(",")[0].split(" ")[0])
        check(control, "no control port in the daemon's log")
        s = multicast_socket()
        payload = b"FORGED" * 200
        entry = file_entry("obs/x.bufr", len(payload), mode=0o777, mtime_ns=4102444800 * 10**9)
        unsigned0 = status_counter(d, "unsigned")
        bad_sig = status_counter(d, "bad_signature")
        for session in (0xF0F0F001, 0xF0F0F002):
            ann = announce(session, [entry])
            blocks = header(T_DATA, session) + struct.pack("!III", 1, 0, 0) + payload
            for _ in range(5):
                s.sendto(ann, (host, port))
                s.sendto(ann, ("127.0.0.1", control))
                s.sendto(blocks, (host, port))
                s.sendto(blocks, ("127.0.0.1", control))
        signed_looking = announce(0xF0F0F003, [entry])
        # Trailer of a one-announce tree (common/auth.hpp): key, signature, leaf 0 of 1.
        signed_looking = (signed_looking[:2] + b"\x02" + signed_looking[3:] + os.urandom(96) +
                          b"\x00\x00\x00\x01")
        for _ in range(3):
            s.sendto(signed_looking, (host, port))
        wait_status(d, lambda st: st["not_authenticated"]["unsigned"] >= unsigned0 + 20 and
                    st["not_authenticated"]["bad_signature"] >= bad_sig + 3, 5,
                    "the unsigned and made-up forgeries counted")
        after = os.stat(target)
        check(sha256_file(target) == want["obs/x.bufr"], "obs/x.bufr was replaced")
        check((after.st_mode, after.st_mtime_ns, after.st_ino) == (before.st_mode, before.st_mtime_ns, before.st_ino),
              "obs/x.bufr changed: mode %o mtime %d" % (after.st_mode, after.st_mtime_ns))
        check(tree_digests(d.dest) == want, "the destination changed: %s" % sorted(tree_digests(d.dest)))
        check(d.alive(), "mcdistd died")
        code, _, body = get(http_port(d), "/metrics")
        metrics = body.decode()
        for reason in ("unsigned", "bad_signature"):
            line = [l for l in metrics.splitlines()
                    if l.startswith('mcdist_receiver_datagrams_unauthenticated_total{reason="%s"}' % reason)]
            check(code == 200 and line and float(line[0].split()[-1]) > 0,
                  "/metrics does not count %s refusals: %s" % (reason, line))

        # 4. A forged site: site-b (pinned, absent) registers and completes, site-a NAKs all.
        attacker = forged_site(group)
        attacker.start()
        copier = copied_root_forger(group)
        copier.start()
        bad_path0 = status_counter(d, "bad_path")
        src2 = os.path.join(base, "round2", "obs")
        write_random(os.path.join(src2, "y.bufr"), 300_000, rng)
        code, summary, out = run_sender(bin_dir, [src2], group, ["site-a", "site-b"],
                                        extra=["--key", os.path.join(base, "hub.key"), "--site-keys", sites,
                                               "--register-timeout", "5s", "--fallback", "off"])
        attacker.stop = True
        attacker.join(5)
        copier.stop = True
        copier.join(5)
        log(out)
        check(copier.sent > 0, "the copied-root forger never saw a signed announce")
        # The forged announces with a real root's signature are refused by their paths (the
        # delivery of obs/y.bufr below is unaffected).
        wait_status(d, lambda st: st["not_authenticated"]["bad_path"] > bad_path0, 5,
                    "a bad_path count for announces with a copied root signature")
        check(attacker.sent > 0, "the forged site never saw an announce")
        by_id = {r["id"]: r for r in summary["receivers"]}
        check(by_id["site-a"]["state"] == "completed", "site-a: %s" % by_id["site-a"])
        check(by_id["site-b"]["state"] != "completed", "the absent site-b was reported completed")
        check(code == 1, "with site-b absent mcdist-send must exit 1, not %d" % code)
        check(summary["repair_datagrams"] == 0,
              "forged NAKs caused %d repair datagrams" % summary["repair_datagrams"])
        refused = summary["refused_unauthenticated"]
        check(refused["unsigned"] > 0 and refused["untrusted_site"] + refused["no_key"] > 0,
              "the sender did not count the forged site's datagrams: %s" % refused)
        check(sha256_file(os.path.join(d.dest, "obs", "y.bufr")) ==
              sha256_file(os.path.join(src2, "y.bufr")), "obs/y.bufr not delivered intact")
        check(d.alive(), "mcdistd died")

        # 5. Killed mid-session, the daemon resumes the signed session with its saved keys.
        src3 = os.path.join(base, "round3", "fields")
        write_random(os.path.join(src3, "big.grib2"), 12_000_000, rng)
        d.stop()
        d = Daemon(bin_dir, base, "site-a", group,
                   ["--trust", os.path.join(base, "hub.key.pub"), "--key", os.path.join(base, "site-a.key"),
                    "--checkpoint-interval", "200ms"])
        daemons[0] = d
        fd, summary_path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        sender = subprocess.Popen(
            [os.path.join(bin_dir, "sender", "mcdist-send"), "--group", group, "--interface", "127.0.0.1",
             "--rate", "40M", "--receivers", "site-a", "--key", os.path.join(base, "hub.key"),
             "--fallback", "off", "--summary-json", summary_path, "--no-progress", src3],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while written_bytes(d.proc.pid) < 3_000_000:
            check(time.time() < deadline and sender.poll() is None, "the signed transfer did not start:\n" + d.log_text())
            time.sleep(0.05)
        wait_checkpoint(d)  # a checkpoint after the first bytes
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        d.logf.close()
        d.start()
        check(d.wait_for_log("resumed from checkpoint", 10), "")
        out3, _ = sender.communicate(timeout=120)
        log(out3.decode("utf-8", "replace"))
        check(sender.returncode == 0, "the resumed signed session did not complete (%d):\n%s" % (
            sender.returncode, d.log_text()))
        check(sha256_file(os.path.join(d.dest, "fields", "big.grib2")) ==
              sha256_file(os.path.join(src3, "big.grib2")), "fields/big.grib2 not delivered intact after the restart")
        check("saved keys are unusable" not in d.log_text(), "the saved keys were not usable")
        os.unlink(summary_path)

        log("PASS: signed sessions delivered; forged senders (other key, unsigned, made-up signature) "
            "wrote nothing; announces with a copied root signature were refused by their paths; a "
            "forged site was neither completed nor repaired for; %d forged site datagrams "
            "refused; a killed daemon resumed a signed session" % attacker.sent)
        return 0
    finally:
        for dd in daemons:
            dd.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
