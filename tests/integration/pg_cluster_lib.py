"""A throw-away PostgreSQL server and a TCP proxy that can cut one hub off it, for the tests and
benchmarks of redundant hubs (test_feed_cluster.py, tests/bench/cluster_bench.py).

PostgreSQL refuses to run as root: as root the server runs as the `postgres` user (runuser).
Debian's postgresql-15 keeps its programs in /usr/lib/postgresql/15/bin."""

import os
import pwd
import select
import shutil
import socket
import subprocess
import threading
import time

PG_BIN = "/usr/lib/postgresql/15/bin"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pg_skip_reason():
    """Why a PostgreSQL server cannot be started here, or None."""
    if not os.path.exists(os.path.join(PG_BIN, "initdb")):
        return "postgresql-15 is not installed (no %s/initdb)" % PG_BIN
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
    return None


class PgServer:
    """initdb + pg_ctl start in `base`/pg, on 127.0.0.1:port and a Unix socket there."""

    def __init__(self, base, fsync=True):
        self.dir = os.path.join(base, "pg")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.prefix = []
        if os.geteuid() == 0:
            os.chmod(base, 0o755)
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        data = os.path.join(self.dir, "data")
        subprocess.run(self.prefix + [os.path.join(PG_BIN, "initdb"), "-D", data, "-A", "trust",
                                      "-U", "mcdist", "-E", "UTF8", "--locale=C", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        opts = "-k %s -c listen_addresses=127.0.0.1 -p %d" % (self.dir, self.port)
        if not fsync:
            opts += " -c fsync=off -c synchronous_commit=off"
        subprocess.run(self.prefix + [os.path.join(PG_BIN, "pg_ctl"), "-D", data, "-w", "-l",
                                      os.path.join(self.dir, "server.log"), "-o", opts, "start"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.data = data
        self.psql(["-d", "postgres", "-c", "CREATE DATABASE mcdist"])

    def uri(self, port=None, db="mcdist"):
        return "postgresql://mcdist@127.0.0.1:%d/%s" % (port or self.port, db)

    def psql(self, args, capture=False):
        cmd = ["psql", "-X", "-q", "-h", self.dir, "-p", str(self.port), "-U", "mcdist"] + args
        r = subprocess.run(cmd, check=True, capture_output=True, text=True)
        return r.stdout if capture else None

    def query(self, sql):
        """Rows as lists of strings (psql's unaligned output)."""
        out = self.psql(["-d", "mcdist", "-A", "-t", "-F", "\t", "-c", sql], capture=True)
        return [line.split("\t") for line in out.splitlines() if line]

    def stop(self):
        subprocess.run(self.prefix + [os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-m",
                                      "immediate", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Proxy:
    """A TCP relay from 127.0.0.1:port to the server. freeze() stops relaying in both
    directions without closing anything (a partition: bytes wait, nothing answers, a new
    connection is accepted and hangs); thaw() relays again."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.running = threading.Event()
        self.running.set()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self):
        self.running.clear()

    def thaw(self):
        self.running.set()

    def close(self):
        self.stopped = True
        self.running.set()
        self.sock.close()

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(c,), daemon=True).start()

    def _relay(self, client):
        self.running.wait()
        try:
            server = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        pair = {client: server, server: client}
        try:
            while not self.stopped:
                self.running.wait()
                r, _, _ = select.select(list(pair), [], [], 0.1)
                for s in r:
                    if not self.running.is_set():
                        break
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            server.close()
