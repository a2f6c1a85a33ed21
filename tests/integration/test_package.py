#!/usr/bin/env python3
"""Package test (label `package`): builds the .deb with deploy/build-deb.sh from the build tree,
installs it with `apt-get install ./mcdist_*.deb`, and checks the installed system:

- lintian reports no error on the package;
- the files are in place: /usr/bin/mcdistd and mcdist-send, man pages, the units (which pass
  `systemd-analyze verify` as installed, man page check included), /etc/mcdist/mcdistd.toml is
  a conffile; postinst made the mcdist user and its directories (sysusers.d, tmpfiles.d);
- the installed mcdistd --check-config refuses the shipped configuration (no id yet: exit 2)
  and accepts it with --id (exit 0);
- the installed /usr/bin/mcdist-send delivers a file set to the installed /usr/bin/mcdistd,
  run as user mcdist with the shipped configuration (group and interface moved to loopback),
  into /var/spool/mcdist/in: every delivered byte is compared by SHA-256;
- `apt-get purge` removes the binaries, the configuration and the daemon's state.

Needs root and apt-get; SKIPPED without them, or when a package mcdist is already installed
(the test will not replace an installation it did not make).

usage: test_package.py BUILD_DIR"""

import glob
import grp
import os
import pwd
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403

SRC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
APT = ["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=300", "--no-install-recommends"]


def run(args, **kw):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=kw.pop("timeout", 300),
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), **kw)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def installed():
    code, out = run(["dpkg-query", "-W", "-f=${Status}", "mcdist"])
    return code == 0 and "install ok installed" in out


def main():
    build = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        print("SKIPPED: installing a package needs root")
        return SKIP
    for tool in ("apt-get", "dpkg-deb", "cpack", "help2man", "setpriv"):
        if not shutil.which(tool):
            print("SKIPPED: %s is not installed" % tool)
            return SKIP
    if installed():
        print("SKIPPED: a package mcdist is already installed on this machine; not replacing it")
        return SKIP
    if not loopback_multicast_works():
        print("SKIPPED: loopback multicast is not available here")
        return SKIP

    code, out = run([os.path.join(SRC, "deploy", "build-deb.sh"), build], timeout=600)
    check(code == 0, "build-deb.sh failed:\n" + out)
    deb = out.strip().splitlines()[-1]
    check(deb.endswith(".deb") and os.path.exists(deb), "no package: %s" % out)
    log("built %s (%d bytes)" % (os.path.basename(deb), os.path.getsize(deb)))

    if shutil.which("lintian"):
        code, out = run(["lintian", deb])
        errors = [l for l in out.splitlines() if l.startswith("E:")]
        log("lintian:\n" + (out.strip() or "(nothing)"))
        check(not errors, "lintian errors:\n" + "\n".join(errors))
    else:
        log("lintian is not installed: not run")

    base = tempfile.mkdtemp(prefix="mcdist-pkg-", dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    os.chmod(base, 0o755)
    daemon = None
    try:
        code, out = run(APT + ["install", "./" + os.path.basename(deb)], cwd=os.path.dirname(deb))
        check(code == 0 and installed(), "apt-get install failed:\n" + out)
        log("apt-get install ./%s: ok" % os.path.basename(deb))

        for f in ("/usr/bin/mcdistd", "/usr/bin/mcdist-send", "/usr/share/man/man8/mcdistd.8.gz",
                  "/usr/share/man/man1/mcdist-send.1.gz", "/usr/bin/mcdistctl",
                  "/usr/share/man/man1/mcdistctl.1.gz", "/usr/lib/systemd/system/mcdistd.service",
                  "/usr/lib/systemd/system/mcdistd@.service", "/usr/lib/sysusers.d/mcdist.conf",
                  "/usr/lib/tmpfiles.d/mcdist.conf", "/usr/lib/sysctl.d/60-mcdist.conf",
                  "/etc/mcdist/mcdistd.toml", "/usr/share/doc/mcdist/copyright"):
            check(os.path.exists(f), "the package did not install " + f)
        code, out = run(["dpkg-query", "-W", "-f=${Version}\n${Depends}", "mcdist"])
        version, depends = out.strip().split("\n", 1)
        for prog in ("mcdistd", "mcdist-send", "mcdistctl", "mcdist-feed", "mcdist-keygen"):
            code, got = run(["/usr/bin/" + prog, "--version"])
            check(code == 0 and got.strip() == "%s %s" % (prog, version.split("-")[0]),
                  "%s --version: exit %d, %r (package %s)" % (prog, code, got, version))
        # The control messages use protobuf's lite runtime (proto/mcdist.proto).
        check("libprotobuf-lite" in depends and "libprotobuf3" not in depends,
              "the package's dependencies: " + depends)
        log("--version of each program is the package's %s; depends on %s" % (
            version, ", ".join(d.strip().split(" ")[0] for d in depends.split(",") if "protobuf" in d)))
        code, out = run(["dpkg-query", "-W", "-f=${Conffiles}", "mcdist"])
        check("/etc/mcdist/mcdistd.toml" in out, "/etc/mcdist/mcdistd.toml is not a conffile: %r" % out)
        user = pwd.getpwnam("mcdist")
        check(user.pw_shell == "/usr/sbin/nologin", "mcdist's shell is " + user.pw_shell)
        for d in ("/var/lib/mcdist", "/var/spool/mcdist/in", "/var/spool/mcdist/tmp", "/var/log/mcdist",
                  "/run/mcdist"):
            check(os.path.isdir(d) and os.stat(d).st_uid == user.pw_uid, "postinst did not make %s for mcdist" % d)
        if shutil.which("systemd-analyze"):
            for unit in ("/usr/lib/systemd/system/mcdistd.service", "mcdistd@site.service"):
                if "@" in unit:  # an instance of the installed template, by path
                    unit = os.path.join(base, unit)
                    shutil.copy("/usr/lib/systemd/system/mcdistd@.service", unit)
                code, out = run(["systemd-analyze", "verify", unit])
                check(code == 0 and out.strip() == "", "systemd-analyze verify %s: %d %s" % (unit, code, out))
            log("installed units verify cleanly (man pages found)")

        # Secure by default: the shipped config trusts the hub key it names, which is not there
        # yet; the hub's key the package made is (root's, 0600, its public half 0644).
        code, out = run(["/usr/bin/mcdistd", "--check-config", "/etc/mcdist/mcdistd.toml", "--id", "pkgtest"])
        check(code == 2 and "hub.key.pub" in out,
              "the shipped config without the hub's key: exit %d: %s" % (code, out))
        st = os.stat("/etc/mcdist/feed.key")
        check(st.st_uid == 0 and st.st_mode & 0o777 == 0o600,
              "postinst's hub key: uid %d mode %o" % (st.st_uid, st.st_mode & 0o777))
        shutil.copy("/etc/mcdist/feed.key.pub", "/etc/mcdist/hub.key.pub")
        code, out = run(["/usr/bin/mcdistd", "--check-config", "/etc/mcdist/mcdistd.toml"])
        check(code == 2 and "id" in out, "the shipped config without id: exit %d: %s" % (code, out))
        code, out = run(["/usr/bin/mcdistd", "--check-config", "/etc/mcdist/mcdistd.toml", "--id", "pkgtest"])
        check(code == 0, "the shipped config with --id and the hub's key: exit %d: %s" % (code, out))

        # The installed programs against each other, the daemon as user mcdist. (--group replaces
        # the file's channels, and with them their destination: --dest gives it again.)
        group = free_group()
        rng = random.Random(11)
        src = os.path.join(base, "obs")
        sizes = [0, 1, 1400, 1401, 100_000, 3_000_000]
        for i, size in enumerate(sizes):
            write_random(os.path.join(src, "synop_%d.bufr" % i), size, rng)
        want = {"obs/" + p: h for p, h in tree_digests(src).items()}
        logpath = os.path.join(base, "mcdistd.out")
        logf = open(logpath, "wb")
        daemon = subprocess.Popen(
            ["setpriv", "--reuid=mcdist", "--regid=mcdist", "--init-groups", "/usr/bin/mcdistd",
             "--config", "/etc/mcdist/mcdistd.toml", "--id", "pkgtest", "--group", group,
             "--interface", "127.0.0.1", "--dest", "/var/spool/mcdist/in"], stdout=logf, stderr=subprocess.STDOUT)
        deadline = time.time() + 15
        while "listening on" not in open(logpath).read():
            check(daemon.poll() is None, "installed mcdistd exited:\n" + open(logpath).read())
            check(time.time() < deadline, "installed mcdistd did not start:\n" + open(logpath).read())
            time.sleep(0.02)
        # Signed with the packaged hub key, which the shipped config trusts.
        p = subprocess.run(["/usr/bin/mcdist-send", "--group", group, "--interface", "127.0.0.1",
                            "--rate", "200M", "--receivers", "pkgtest", "--no-progress",
                            "--key", "/etc/mcdist/feed.key", src],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode("utf-8", "replace")
        log(out)
        check(p.returncode == 0, "installed mcdist-send exited %d" % p.returncode)
        got = tree_digests("/var/spool/mcdist/in/obs")
        got = {"obs/" + k: v for k, v in got.items()}
        check(got == want, "delivered files differ: want %d files, got %d" % (len(want), len(got)))
        st = os.stat("/var/spool/mcdist/in/obs/synop_5.bufr")
        check(st.st_uid == user.pw_uid, "delivered file owned by uid %d, not mcdist" % st.st_uid)
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(30)
        check(code == 0, "installed mcdistd exited %d after SIGTERM" % code)
        log("installed mcdist-send -> installed mcdistd (user mcdist): %d files, %d bytes, SHA-256 identical"
            % (len(want), sum(sizes)))
    finally:
        if daemon and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        shutil.rmtree("/var/spool/mcdist/in/obs", ignore_errors=True)
        if os.path.exists("/etc/mcdist/hub.key.pub"):
            os.unlink("/etc/mcdist/hub.key.pub")
        shutil.rmtree(base, ignore_errors=True)
        code, out = run(APT + ["purge", "mcdist"])
    check(code == 0, "apt-get purge failed:\n" + out)
    check(not installed(), "mcdist still installed after purge")
    for f in ("/usr/bin/mcdistd", "/usr/bin/mcdist-send", "/etc/mcdist", "/etc/mcdist/feed.key",
              "/var/lib/mcdist",
              "/usr/lib/systemd/system/mcdistd.service", "/var/spool/mcdist"):
        check(not os.path.exists(f), "%s is left after purge" % f)
    log("apt-get purge mcdist: binaries, configuration, state and spool removed")
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
