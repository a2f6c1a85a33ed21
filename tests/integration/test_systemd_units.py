#!/usr/bin/env python3
"""Integration: the systemd files of deploy/systemd pass systemd's own checks.

- every unit (mcdistd.service, mcdistd@.service as instance mcdistd@site.service,
  mcdist-feed.service) passes
  `systemd-analyze verify` with no message at all (verify exits 0 on unknown keys and bad values,
  so any output fails the test); ExecStart= points at the build tree's program for the check,
  since the package is not installed here (tests/integration/test_package.py verifies the
  installed units as they are, man pages included);
- a unit with a misspelt setting does produce a message (the check can fail);
- sysusers.d creates the mcdist user and tmpfiles.d the directories, owned by it, in a scratch
  root (systemd-sysusers --root, systemd-tmpfiles --root);
- the sysctl.d limits cover the daemon's 32 MiB socket buffers;
- `systemd-analyze security --offline=yes` rates each unit's exposure at most 3.0 ("OK").

usage: test_systemd_units.py BUILD_DIR"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403

SRC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
UNITS = os.path.join(SRC, "deploy", "systemd")


def verify(path):
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", path], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    return p.returncode, p.stdout.decode("utf-8", "replace").strip()


def main():
    bin_dir = sys.argv[1]
    for tool in ("systemd-analyze", "systemd-sysusers", "systemd-tmpfiles"):
        if not shutil.which(tool):
            print("SKIPPED: %s is not installed (Debian package systemd)" % tool)
            return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-units-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        units = sorted(glob.glob(os.path.join(UNITS, "*.service")))
        names = [os.path.basename(u) for u in units]
        # Each unit and the program it runs.
        programs = {"mcdistd.service": "receiver/mcdistd", "mcdistd@.service": "receiver/mcdistd",
                    "mcdist-feed.service": "feed/mcdist-feed"}
        check(sorted(names) == sorted(programs), "units found: %s, expected %s" % (names, sorted(programs)))
        for u in units:
            name = os.path.basename(u).replace("@.", "@site.")
            with open(u) as f:
                text = f.read()
            prog = programs[os.path.basename(u)]
            installed = "/usr/bin/" + os.path.basename(prog)
            check(installed in text, "%s does not run %s" % (name, installed))
            for key in ("Type=notify", "WatchdogSec=", "ProtectSystem=strict", "NoNewPrivileges=yes",
                        "PrivateTmp=yes", "User=mcdist", "CapabilityBoundingSet=CAP_NET_ADMIN\n",
                        "AmbientCapabilities=CAP_NET_ADMIN\n", "ReadWritePaths="):
                check(key in text, "%s lacks %s" % (name, key.strip()))
            local = os.path.join(base, name)
            with open(local, "w") as f:
                f.write(text.replace(installed, os.path.join(os.path.abspath(bin_dir), prog)))
            rc, out = verify(local)
            log("systemd-analyze verify %s: exit %d%s" % (name, rc, (":\n" + out) if out else ", no messages"))
            check(rc == 0 and out == "", "systemd-analyze verify %s: exit %d: %s" % (name, rc, out))
            if "@" in name:
                check("/etc/mcdist/%i.toml" in text, "the template does not read /etc/mcdist/%i.toml")
            # systemd's own hardening score (0 best, 10 worst; 2.0 when written): stays "OK".
            p = subprocess.run(["systemd-analyze", "security", "--offline=yes", local],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", p.stdout.decode("utf-8", "replace"))
            check(m is not None, "systemd-analyze security printed no exposure level")
            log("systemd-analyze security %s: exposure %s" % (name, m.group(1)))
            check(float(m.group(1)) <= 3.0, "%s: exposure %s above 3.0" % (name, m.group(1)))

        # The check can fail: a misspelt value and an unknown key are reported.
        with open(os.path.join(base, "mcdistd.service")) as f:
            text = f.read()
        broken = os.path.join(base, "broken.service")
        with open(broken, "w") as f:
            f.write(text.replace("ProtectSystem=strict", "ProtectSystem=stric")
                    .replace("[Install]", "[Install]\nWantedByy=multi-user.target"))
        rc, out = verify(broken)
        check("stric" in out and "WantedByy" in out, "a broken unit passed verify: exit %d: %r" % (rc, out))

        # sysusers.d and tmpfiles.d in a scratch root.
        root = os.path.join(base, "root")
        os.makedirs(os.path.join(root, "etc"))
        with open(os.path.join(root, "etc", "passwd"), "w") as f:
            f.write("root:x:0:0:root:/root:/bin/bash\n")
        with open(os.path.join(root, "etc", "group"), "w") as f:
            f.write("root:x:0:\nadm:x:4:\n")
        p = subprocess.run(["systemd-sysusers", "--root=" + root, os.path.join(UNITS, "mcdist.sysusers")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        check(p.returncode == 0, "systemd-sysusers: %s" % p.stdout.decode())
        uid = gid = None
        with open(os.path.join(root, "etc", "passwd")) as f:
            for line in f:
                fields = line.rstrip("\n").split(":")
                if fields[0] == "mcdist":
                    uid, gid = int(fields[2]), int(fields[3])
                    check(fields[6] == "/usr/sbin/nologin", "mcdist's shell is %s" % fields[6])
        check(uid is not None and 0 < uid < 1000, "sysusers made no system user mcdist: %s" % uid)
        p = subprocess.run(["systemd-tmpfiles", "--root=" + root, "--create",
                            os.path.join(UNITS, "mcdist.tmpfiles")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode()
        check(p.returncode == 0 and out.strip() == "", "systemd-tmpfiles: exit %d: %s" % (p.returncode, out))
        with open(os.path.join(root, "etc", "group")) as f:
            check(any(line.startswith("mcdist-ops:") for line in f),
                  "sysusers made no group mcdist-ops (mcdist-feed's control socket)")
        for d in ("var/lib/mcdist", "var/spool/mcdist/in", "var/spool/mcdist/tmp", "var/log/mcdist",
                  "run/mcdist", "var/spool/mcdist-feed", "var/lib/mcdist-feed", "run/mcdist-feed"):
            st = os.stat(os.path.join(root, d))
            if os.geteuid() == 0:  # only root can chown
                check(st.st_uid == uid, "/%s is owned by uid %d, not mcdist (%d)" % (d, st.st_uid, uid))
            log("/%s: mode %o uid %d gid %d" % (d, st.st_mode & 0o7777, st.st_uid, st.st_gid))
        # Operators (mcdist-ops) read the hub journal with mcdistctl while mcdist-feed is down:
        # its directory is setgid mcdist-ops, so the journal the daemon makes is in that group.
        st = os.stat(os.path.join(root, "var/lib/mcdist-feed"))
        check(st.st_mode & 0o7777 == 0o2750, "/var/lib/mcdist-feed has mode %o, not 2750"
              % (st.st_mode & 0o7777))
        if os.geteuid() == 0:
            with open(os.path.join(root, "etc", "group")) as f:
                ops = [int(line.split(":")[2]) for line in f if line.startswith("mcdist-ops:")]
            check(st.st_gid == ops[0], "/var/lib/mcdist-feed's group is not mcdist-ops")
        # Every path the units may write is one tmpfiles.d creates.
        for u in units:
            with open(u) as f:
                for line in f:
                    if line.startswith("ReadWritePaths="):
                        for path in line.split("=", 1)[1].split():
                            check(os.path.isdir(os.path.join(root, path.lstrip("-/"))),
                                  "%s may write %s, which tmpfiles.d does not create" % (u, path))

        # sysctl.d: both limits, at least the daemon's socket buffer (daemon_config.hpp, 32 MiB).
        limits = {}
        with open(os.path.join(UNITS, "mcdist.sysctl")) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    k, v = (x.strip() for x in line.split("=", 1))
                    limits[k] = int(v)
        for k in ("net.core.rmem_max", "net.core.wmem_max"):
            check(limits.get(k, 0) >= 32 << 20, "%s = %s, below 32 MiB" % (k, limits.get(k)))
            check(os.path.exists("/proc/sys/" + k.replace(".", "/")), "no such sysctl %s" % k)
        log("PASS: units verify cleanly, sysusers/tmpfiles create the user and directories, sysctl limits %s" % limits)
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
