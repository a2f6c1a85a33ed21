#!/usr/bin/env python3
"""Integration: a running mcdistd is sent garbage and a hostile manifest (path escapes,
absolute paths, control characters, over-long names, a name that is not UTF-8). It must count
and drop the garbage, refuse each bad path with a log line naming the session and the path,
never write outside its destination and temp directories, deliver the one good file of the
hostile session, and go on serving a real session afterwards.

usage: test_hostile.py BUILD_DIR"""

import hashlib
import os
import random
import shutil
import socket
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403

HOSTILE_PATHS = [
    "../escape.txt",
    "/tmp/mcdist-absolute-escape",
    "a//b",
    "dir/./x",
    "ok/../../escape2",
    "ctl\x01name",
    "nul\x00name",
    "x" * 300,
    "/".join(["d"] * 70),
    "..",
    b"bad\xff-not-utf8.txt",
]



def main():
    bin_dir = sys.argv[1]
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-hostile-")
    group = free_group()
    host, port = parse_group(group)
    d = Daemon(bin_dir, base, "victim", group)
    try:
        s = multicast_socket()
        rng = random.Random(5)
        # 1. Garbage of every shape.
        garbage = [b"", b"M", b"MD\x01", header(2, 1)[:7]]
        garbage += [rng.randbytes(rng.randint(0, 2000)) for _ in range(300)]
        garbage += [header(T_DATA, 0xDEAD, magic=0x1234) + b"x" * 20,
                    header(T_DATA, 0xDEAD, version=9) + b"x" * 20,
                    header(77, 0xDEAD) + b"x" * 20,
                    header(T_DATA, 0xBEEF) + struct.pack("!III", 1, 0, 0) + b"y" * 1400,
                    header(T_DATA, 0xBEEF) + b"\x00" * 5,
                    header(T_ANNOUNCE, 0xBEEF) + rng.randbytes(200),
                    header(T_ANNOUNCE, 0xBEEF) + b"\x0a\xff\xff\xff\xff\x0f",
                    b"MD\x01\x02" + b"\x00" * 9000]
        for t in range(3, 11):
            garbage.append(header(t, 0xBEEF) + rng.randbytes(50))
        # Announces that lie about sizes.
        garbage.append(announce(0x5151, [file_entry("a", 10)], file_count=2_000_000_000))
        garbage.append(announce(0x5252, [file_entry("a", 10)], block_size=0))
        garbage.append(announce(0x5353, [file_entry("a", 10)], first_file=5, file_count=2))
        for g in garbage:
            s.sendto(g, (host, port))
        time.sleep(0.3)
        check(d.alive(), "mcdistd died on garbage:\n" + d.log_text())

        # 2. A hostile session: bad paths around one good file.
        session = 0x0BADF00D
        good = b"good content\n" * 100
        entries = [file_entry(p, 5) for p in HOSTILE_PATHS]
        entries.append(file_entry("fine.txt", len(good), hashlib.sha256(good).digest()))
        s.sendto(announce(session, entries), (host, port))
        reg = recv_type(s, 3, 5)
        check(reg is not None, "no REGISTER for the hostile session:\n" + d.log_text())
        rid = b"victim"
        reply = header(4, session) + pb_bytes(1, rid) + pb_uint(2, 1)
        s.sendto(reply, reg[1])
        # Data for the refused files is dropped; for the good file, stored.
        for i in range(len(HOSTILE_PATHS)):
            s.sendto(header(T_DATA, session) + struct.pack("!III", 1, i, 0) + b"PWNED", (host, port))
        # The same block from another host (127.0.0.2) is not trusted.
        other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        other.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        other.bind(("127.0.0.2", 0))
        fine = len(HOSTILE_PATHS)
        other.sendto(header(T_DATA, session) + struct.pack("!III", 2, fine, 0) + b"X" * len(good),
                     (host, port))
        time.sleep(0.1)
        s.sendto(header(T_DATA, session) + struct.pack("!III", 3, fine, 0) + good, (host, port))
        done = recv_type(s, 8, 5)
        check(done is not None, "no COMPLETE for the hostile session:\n" + d.log_text())
        text = d.log_text()
        for p in HOSTILE_PATHS:
            raw = p if isinstance(p, bytes) else p.encode("utf-8")
            shown = raw.decode("ascii", "replace")
            printable = "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else "\\x%02x" % b
                                for b in raw)[:300]
            found = any(("refused file" in line and "0badf00d" in line and printable in line)
                        for line in text.splitlines())
            check(found, "no refusal line naming session 0badf00d and path %r" % shown)
        with open(os.path.join(d.dest, "fine.txt"), "rb") as f:
            check(f.read() == good, "the good file of the hostile session was not delivered intact")

        # 3. Nothing escaped: the only files under base are the daemon's own.
        allowed_roots = (d.dest, d.temp)
        for root, _, files in os.walk(base):
            for name in files:
                p = os.path.join(root, name)
                if p in (d.status, d.log_path, d.status + ".tmp"):
                    continue
                check(p.startswith(allowed_roots), "file written outside dest/temp: " + p)
        check(not os.path.exists("/tmp/mcdist-absolute-escape"), "absolute path escaped")

        # 4. It keeps serving: a real session completes.
        src = os.path.join(base, "after")
        write_random(os.path.join(src, "x", "after.bin"), 300_000, rng)
        code, summary, out = run_sender(bin_dir, [src], group, ["victim"])
        check(code == 0, "real session after the attack failed (%d):\n%s" % (code, out))
        check(sha256_file(os.path.join(d.dest, "after", "x", "after.bin")) ==
              sha256_file(os.path.join(src, "x", "after.bin")), "file after the attack differs")

        # 5. The garbage was counted, by reason.
        deadline = time.time() + 5
        status = None
        while time.time() < deadline:
            status = d.read_status()
            if status and status.get("dropped", {}).get("bad_magic"):
                break
            time.sleep(0.2)
        check(status is not None, "no status file")
        dropped = status["dropped"]
        log("dropped by reason:", dropped)
        for reason in ("truncated", "bad_magic", "bad_version", "unknown_type", "oversized",
                       "bad_protobuf", "unknown_session", "invalid_field", "wrong_source"):
            check(dropped.get(reason, 0) > 0, "no datagram counted as %s: %s" % (reason, dropped))
        check(status["files_refused"] >= len(HOSTILE_PATHS), "refusals not counted")
        check(d.alive(), "mcdistd is not running")
        check(d.stop() == 0, "mcdistd did not exit cleanly")
        log("PASS: garbage counted and dropped, %d hostile paths refused, daemon kept serving"
            % len(HOSTILE_PATHS))
        return 0
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
