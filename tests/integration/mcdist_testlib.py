"""Helpers for the integration tests: run the real mcdist-send and mcdistd over loopback
multicast, build file sets, compare trees, craft datagrams by hand.

Only the Python standard library is used, so the tests run on a bare Debian 12."""

import hashlib
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77  # ctest SKIP_RETURN_CODE


def log(*args):
    print(*args, flush=True)


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def stop_all(base, feed=None, daemons=()):
    """Ends a test: kills the hub (`feed`, SIGKILL: nothing of its shutdown is under test
    here), stops each receiver daemon, and removes the scratch tree `base` unless
    MCDIST_KEEP is set in the environment (then its path is logged for a post-mortem)."""
    if feed is not None:
        feed.stop(signal.SIGKILL)
    for d in daemons:
        if d is not None:
            d.stop()
    if os.environ.get("MCDIST_KEEP"):
        log("kept " + base)
    else:
        shutil.rmtree(base, ignore_errors=True)


def free_group():
    """A multicast group and port unlikely to collide with a parallel test."""
    # The kernel's randomness: a seed of pid ^ time collides for two tests ctest starts in the
    # same millisecond (pids and times a few units apart XOR to the same value), and two feeds
    # then multicast each other's products to the other test's sites.
    r = random.SystemRandom()
    return "239.192.%d.%d:%d" % (r.randint(1, 250), r.randint(1, 250), r.randint(20000, 60000))


def loopback_multicast_works():
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        s.close()
        return True
    except OSError:
        return False


def keygen(bin_dir, path):
    """Makes a key pair at `path` with mcdist-keygen; returns the public key's text."""
    out = subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    return out.stdout.decode().strip()


def site_journal(d):
    """(relpath, sender_key) rows of a site's delivery journal (default TEMP/journal.db)."""
    path = os.path.join(d.temp, "journal.db")
    if not os.path.exists(path):
        return []
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=10)
    try:
        return db.execute("SELECT relpath, sender_key FROM deliveries ORDER BY relpath").fetchall()
    finally:
        db.close()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def cpu_seconds(pid):
    """User + system CPU seconds of a running process so far (/proc/PID/stat fields 14 and
    15), None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def tree_digests(root):
    """relative path -> sha256 of every regular file below root."""
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            out[os.path.relpath(p, root)] = sha256_file(p)
    return out


def write_random(path, size, rng):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, 1 << 20)
            f.write(rng.randbytes(n))
            left -= n


def make_ca(d, addresses=("127.0.0.1",)):
    """A test CA and a server certificate for `addresses` (IP subjectAltNames) signed by it,
    made with the openssl command in directory d. Returns (CA certificate, server certificate,
    server key) paths."""
    def run(args):
        subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    key, csr, crt = (os.path.join(d, "hub.tls.key"), os.path.join(d, "hub.csr"),
                     os.path.join(d, "hub.crt"))
    ext = os.path.join(d, "san.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n" % ",".join("IP:" + a for a in addresses))
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", ca_key, "-out", ca_crt, "-subj", "/CN=mcdist test CA", "-days", "2",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign"])
    run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", key, "-out", csr, "-subj", "/CN=" + addresses[0]])
    run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key,
         "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext])
    return ca_crt, crt, key


class Daemon:
    """One mcdistd process with its own dest/temp under `base`."""

    def __init__(self, bin_dir, base, rid, group, extra=(), prefix=(), interface="127.0.0.1"):
        self.id = rid
        self.dest = os.path.join(base, rid, "dest")
        self.temp = os.path.join(base, rid, "temp")
        self.status = os.path.join(base, rid, "status.json")
        self.log_path = os.path.join(base, rid, "mcdistd.log")
        os.makedirs(self.dest, exist_ok=True)
        os.makedirs(self.temp, exist_ok=True)
        self.args = list(prefix) + [os.path.join(bin_dir, "receiver", "mcdistd"), "--id", rid, "--group", group,
                     "--interface", interface, "--dest", self.dest, "--temp", self.temp,
                     "--status-file", self.status, "--status-interval", "1s"] + list(extra)
        # A channel must trust a sender or allow unsigned sessions by name: tests of unsigned
        # sessions ask for them (those that pass --trust keep the secure default).
        if "--trust" not in self.args:
            self.args.append("--allow-unsigned")
        self.proc = None
        self.start()

    def start(self):
        # The log is appended to across restarts: wait for this run's "listening on", not the
        # previous run's (which made a restarted daemon look ready before it had read its state).
        before = self.log_count("listening on")
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.logf, stderr=subprocess.STDOUT)
        self.wait_for_log("listening on", 10, after=before)

    def log_count(self, needle):
        """How often `needle` is in the log so far (0 before the first start)."""
        return self.log_text().count(needle) if os.path.exists(self.log_path) else 0

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_for_log(self, needle, timeout, after=0):
        """Waits until `needle` is in the log more than `after` times."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.log_text().count(needle) > after:
                return True
            if self.proc.poll() is not None:
                fail("mcdistd %s exited early (%s):\n%s" % (self.id, self.proc.returncode, self.log_text()))
            time.sleep(0.02)
        fail("mcdistd %s: no '%s' in its log within %s s:\n%s" % (self.id, needle, timeout, self.log_text()))

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode

    def read_status(self):
        try:
            with open(self.status) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None


class TomlDaemon(Daemon):
    """One mcdistd configured by a TOML file only, laid out like Daemon under BASE/RID (dest/,
    temp/, status.json, mcdistd.log, and the file itself as mcdistd.toml). `config(d)` returns
    the file's text given the daemon (its dest, temp and status paths); `prefix` runs it
    elsewhere (`ip netns exec NS`); `extra` are command-line options after --config."""

    def __init__(self, bin_dir, base, rid, config, prefix=(), extra=()):
        self.id = rid
        root = os.path.join(base, rid)
        self.dest = os.path.join(root, "dest")
        self.temp = os.path.join(root, "temp")
        self.status = os.path.join(root, "status.json")
        self.log_path = os.path.join(root, "mcdistd.log")
        os.makedirs(self.dest, exist_ok=True)
        os.makedirs(self.temp, exist_ok=True)
        self.config = os.path.join(root, "mcdistd.toml")
        text = config(self)
        with open(self.config, "w") as f:
            f.write(text)
        self.args = list(prefix) + [os.path.join(bin_dir, "receiver", "mcdistd"), "--config",
                                    self.config] + list(extra)
        self.proc = None
        self.start()


class ChannelSite(TomlDaemon):
    """A TomlDaemon with the usual top-level settings (its interface, dest, temp, a 1 s status
    file, no HTTP, sync none), the TOML lines `top` after them, and one [[channel]] called
    `name` made of the TOML lines `channel`. reload() replaces the channel's lines (SIGHUP)."""

    def __init__(self, bin_dir, base, rid, channel, top="", interface="127.0.0.1", name="products",
                 prefix=(), extra=()):
        self.head = lambda d: ("id = \"%s\"\ninterface = \"%s\"\ndest = \"%s\"\ntemp = \"%s\"\n"
                               "status_file = \"%s\"\nstatus_interval = \"1s\"\nhttp = \"off\"\n"
                               "sync = \"none\"\n%s\n[[channel]]\nname = \"%s\"\n"
                               % (rid, interface, d.dest, d.temp, d.status, top, name))
        super().__init__(bin_dir, base, rid, lambda d: self.head(d) + channel + "\n", prefix, extra)

    def reload(self, channel, needle):
        """Writes the channel's new lines, sends SIGHUP and waits for one more `needle` in the
        log."""
        before = self.log_count(needle)
        with open(self.config + ".tmp", "w") as f:
            f.write(self.head(self) + channel + "\n")
        os.replace(self.config + ".tmp", self.config)
        self.proc.send_signal(signal.SIGHUP)
        self.wait_for_log(needle, 10, after=before)


def relay_status(d):
    """The first entry of d's status "relay" (its relayed channel), or None."""
    st = d.read_status() or {}
    return (st.get("relay") or [None])[0]


def sessions_over(d, n=1):
    """d's status once at least n sessions ended there (completed or failed), else None."""
    st = d.read_status()
    return st if st and st["sessions_completed"] + st["sessions_failed"] >= n else None


def silent_feed_config(base, key, group, spool, rate, fec_k, fec_overhead, journal=None,
                       products=None, extra=""):
    """mcdist-feed's TOML on loopback with one signed channel "obs" of silent sessions (2
    passes, heartbeat 2 s, batch window 100 ms) fed from `spool`; `products` = (port, TLS
    certificate, TLS key) serves them over HTTPS (products_http); `extra`: more top-level
    lines."""
    journal = journal or os.path.join(base, "journal.db")
    served = ("products_http = \"127.0.0.1:%d\"\nproducts_tls_cert = \"%s\"\n"
              "products_tls_key = \"%s\"\n" % products) if products else ""
    return ("interface = \"127.0.0.1\"\nkey = \"%s\"\nrate = \"%s\"\njournal = \"%s\"\n"
            "retention = \"1h\"\nretained = \"%s/retained\"\nhttp = \"off\"\n%s%s\n"
            "[[channel]]\nname = \"obs\"\ngroup = \"%s\"\nspool = [\"%s\"]\n"
            "batch_window = \"100ms\"\nafter = \"delete\"\nsilent_passes = 2\nfec_k = %d\n"
            "fec_overhead = \"%s\"\nheartbeat = \"2s\"\n"
            % (key, rate, journal, base, served, extra, group, spool, fec_k, fec_overhead))


def wait_for(what, cond, timeout, daemon):
    """Polls cond() until it returns a true value (returned); fails if `daemon` exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        if daemon and not daemon.alive():
            fail("mcdistd exited while waiting for %s:\n%s" % (what, daemon.log_text()))
        time.sleep(0.05)
    fail("%s did not happen within %s s%s" % (what, timeout,
                                               (":\n" + daemon.log_text()) if daemon else ""))


class ConfigDaemon(Daemon):
    """mcdistd from a TOML file only (ROOT/mcdistd.toml, log and status file beside it)."""

    def __init__(self, bin_dir, root, config_text, env, rid="site-cfg"):
        self.id = rid
        self.log_path = os.path.join(root, "mcdistd.log")
        self.status = os.path.join(root, "status.json")
        self.config = os.path.join(root, "mcdistd.toml")
        self.write_config(config_text)
        self.args = [os.path.join(bin_dir, "receiver", "mcdistd"), "--config", self.config]
        self.env = env
        self.proc = None
        self.start()

    def write_config(self, text):
        """Replaces the config file atomically (a SIGHUP never reads half a file)."""
        tmp = self.config + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config)

    def start(self):
        before = self.log_count("listening on")
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.logf, stderr=subprocess.STDOUT,
                                     env=self.env)
        self.wait_for_log("listening on", 10, after=before)

    def reload(self, text, needle):
        """Writes the config, sends SIGHUP and waits for one more `needle` in the log."""
        before = self.log_text().count(needle)
        self.write_config(text)
        self.proc.send_signal(signal.SIGHUP)
        wait_for("'%s' after SIGHUP" % needle, lambda: self.log_text().count(needle) > before, 10,
                 self)
        return self.log_text()


def run_sender(bin_dir, paths, group, receivers=None, rate="500M", extra=(), timeout=300,
               interface="127.0.0.1", prefix=()):
    """Runs mcdist-send to completion (`prefix`: elsewhere, e.g. `ip netns exec NS`); returns
    (exit code, summary dict, output text)."""
    fd, summary = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    args = list(prefix) + [
        os.path.join(bin_dir, "sender", "mcdist-send"), "--group", group, "--interface",
        interface, "--rate", rate, "--summary-json", summary, "--no-progress"]
    if receivers:
        args += ["--receivers", ",".join(receivers)]
    args += list(extra) + list(paths)
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    out = p.stdout.decode("utf-8", "replace")
    data = None
    try:
        with open(summary) as f:
            data = json.load(f)
    except (OSError, ValueError):
        pass
    os.unlink(summary)
    return p.returncode, data, out


SILENT_FEC = ["--silent-passes", "2", "--fec-k", "64", "--fec-depth", "4", "--fec-overhead", "5%"]
"""mcdist-send options of the silent-session tests: 2 silent passes, 5 % parity on FEC blocks of
64 interleaved 4 deep."""


def send_silent(bin_dir, paths, group, key=None, rate="50M", what=""):
    """Sends `paths` as a silent session (SILENT_FEC; signed with `key` when given) and checks
    that mcdist-send exited 0, wrote its summary, signed the session when asked to, and that no
    datagram reached it. `what` prefixes the failure messages. Returns the summary dict."""
    extra = (["--key", key] if key else []) + SILENT_FEC
    code, summary, out = run_sender(bin_dir, paths, group, rate=rate, extra=extra)
    log(out)
    check(code == 0, "%smcdist-send exited %d" % (what, code))
    check(summary is not None, "%sno summary JSON written" % what)
    if key:
        check(summary["signed"], "%sthe session was not signed" % what)
    check(summary["silent_refused"] == 0,
          "%s%d datagrams reached the sender" % (what, summary["silent_refused"]))
    return summary


def wait_checkpoint(d, timeout=30):
    """Waits until mcdistd `d` saves a session checkpoint (temp/<session>/state) newer than the
    call: the event a kill-and-resume test needs, instead of a sleep that a slow (ASan, loaded)
    run can outlast."""
    since = time.time_ns()
    deadline = time.time() + timeout
    while time.time() < deadline:
        for name in os.listdir(d.temp) if os.path.isdir(d.temp) else []:
            try:
                if os.stat(os.path.join(d.temp, name, "state")).st_mtime_ns >= since:
                    return
            except OSError:
                pass
        time.sleep(0.02)
    fail("mcdistd %s saved no checkpoint within %s s:\n%s" % (d.id, timeout, d.log_text()))


def written_bytes(pid):
    """Bytes the process has written so far (/proc/PID/io wchar): temp files are preallocated,
    so their size says nothing about progress."""
    try:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def recv_type(sock, want_type, timeout):
    """Waits for a datagram of the given mcdist type; returns (bytes, addr) or None."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        sock.settimeout(max(0.01, deadline - time.time()))
        try:
            data, addr = sock.recvfrom(65536)
        except socket.timeout:
            return None
        if len(data) >= 8 and data[3] == want_type:
            return data, addr
    return None


# --- hand-made datagrams: the mcdist header and a minimal protobuf encoder ---------------------

MAGIC = 0x4D44
VERSION = 1
T_DATA, T_ANNOUNCE = 1, 2


def header(msg_type, session, version=VERSION, magic=MAGIC):
    return struct.pack("!HBBI", magic, version, msg_type, session)


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_uint(field, v):
    return varint(field << 3 | 0) + varint(v)


def pb_bytes(field, b):
    if isinstance(b, str):
        b = b.encode("utf-8", "surrogateescape")
    return varint(field << 3 | 2) + varint(len(b)) + b


def file_entry(path, size, digest=b"", mode=0o644, mtime_ns=1700000000000000000):
    return (pb_bytes(1, path) + pb_uint(2, size) + pb_uint(3, mtime_ns) + pb_uint(4, mode) +
            (pb_bytes(5, digest) if digest else b""))


def read_varint(b, i):
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def entry_size(e):
    """The size field (2) of an encoded file_entry."""
    i = 0
    while i < len(e):
        key, i = read_varint(e, i)
        if key & 7 == 0:
            v, i = read_varint(e, i)
            if key >> 3 == 2:
                return v
        else:
            n, i = read_varint(e, i)
            i += n
    return 0


def announce(session, entries, first_file=0, chunk=0, chunks=1, file_count=None, block_size=1400,
             total_bytes=None, grtt_us=1000):
    """An announce chunk; total_bytes (the manifest's sum of file sizes, which receivers hold
    entries to) defaults to the sum of these entries' sizes."""
    file_count = len(entries) if file_count is None else file_count
    if total_bytes is None:
        total_bytes = sum(entry_size(e) for e in entries)
    params = (pb_uint(1, block_size) + pb_uint(2, 1000000) + pb_uint(3, 10) + pb_uint(4, file_count) +
              pb_uint(5, total_bytes) + pb_uint(6, chunks) + pb_uint(8, grtt_us))
    body = pb_bytes(1, params) + pb_uint(2, chunk) + pb_uint(3, first_file)
    for e in entries:
        body += pb_bytes(4, e)
    body += pb_uint(5, int(time.monotonic() * 1e6))
    return header(T_ANNOUNCE, session) + body


def multicast_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    s.bind(("127.0.0.1", 0))
    return s


def parse_group(group):
    host, port = group.rsplit(":", 1)
    return host, int(port)
