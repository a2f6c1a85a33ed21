"""A throw-away PostgreSQL server for the tests and benchmarks of redundant hubs
(test_feed_cluster.py, tests/bench/cluster_bench.py).

PostgreSQL refuses to run as root: as root the server runs as the `postgres` user (runuser).
Debian's postgresql-15 keeps its programs in /usr/lib/postgresql/15/bin."""

import os
import pwd
import socket
import subprocess

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
    """initdb + pg_ctl start in `base`/pg, listening on `listen`:port and on a Unix socket
    there (which psql uses from any network namespace). `netns`: the argv prefix that starts
    the server inside a network namespace (netns_lib.netns_exec), so that hubs reach it over a
    link of the test's that can be cut."""

    def __init__(self, base, fsync=True, listen="127.0.0.1", netns=()):
        self.dir = os.path.join(base, "pg")
        os.makedirs(self.dir, exist_ok=True)
        self.listen = listen
        self.port = free_port() if listen == "127.0.0.1" else 5432
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
        if listen != "127.0.0.1":
            # initdb's trust covers loopback only; this server is reachable from nothing but
            # the test's own namespaces.
            with open(os.path.join(data, "pg_hba.conf"), "a") as f:
                f.write("host all all 0.0.0.0/0 trust\n")
        opts = "-k %s -c listen_addresses=%s -p %d" % (self.dir, listen, self.port)
        if not fsync:
            opts += " -c fsync=off -c synchronous_commit=off"
        start = [os.path.join(PG_BIN, "pg_ctl"), "-D", data, "-w", "-l",
                 os.path.join(self.dir, "server.log"), "-o", opts, "start"]
        subprocess.run(list(netns) + self.prefix + start, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        self.data = data
        self.psql(["-d", "postgres", "-c", "CREATE DATABASE mcdist"])

    def uri(self, port=None, db="mcdist"):
        return "postgresql://mcdist@%s:%d/%s" % (self.listen, port or self.port, db)

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
