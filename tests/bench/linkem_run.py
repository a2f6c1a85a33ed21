"""Starting and stopping mcdist's link emulator (tests/linkem) from the benchmark scripts."""

import os
import signal
import subprocess
import sys
import time


def stop_proc(p, sig=signal.SIGTERM, wait=10):
    """Sends sig to p if it still runs and waits for it; SIGKILL after `wait` seconds."""
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(wait)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Emulator:
    """mcdist-linkem with `hosts` hosts (h0 is the sender) and the given --link specs, e.g.
    "h2:delay=350ms,loss=0.001". Waits until the namespaces exist; env holds the variables of
    its --env-file (MLE_H<n>_NETNS, MLE_H<n>_ADDR). stats_json: where it writes its per-link
    counters on exit. The namespaces are named PREFIX-RUN-hN, PREFIX from the environment's
    MCDIST_NETNS_PREFIX (default "mle"), so runs of several people on one machine are told
    apart. extra: more mcdist-linkem options. Exits the script with a message if the emulator
    does not start in 20 s."""

    def __init__(self, binary, workdir, links, hosts=2, seed=1, stats_json=None, extra=()):
        self.env_file = os.path.join(workdir, "mle.env")
        if os.path.exists(self.env_file):
            os.unlink(self.env_file)
        args = [binary, "--hosts", str(hosts), "--env-file", self.env_file, "--seed", str(seed), "-q"]
        if os.environ.get("MCDIST_NETNS_PREFIX"):
            args += ["--netns-prefix", os.environ["MCDIST_NETNS_PREFIX"]]
        for link in links:
            args += ["--link", link]
        if stats_json:
            args += ["--stats-json", stats_json]
        args += list(extra)
        self.log = open(os.path.join(workdir, "linkem.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not os.path.exists(self.env_file):
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit("mcdist-linkem did not start; see " + self.log.name)
            time.sleep(0.05)
        with open(self.env_file) as f:
            self.env = dict(line.strip().split("=", 1) for line in f if "=" in line)

    def ns(self, h):
        """Network namespace of host h."""
        return self.env["MLE_H%d_NETNS" % h]

    def addr(self, h):
        """IPv4 address of host h."""
        return self.env["MLE_H%d_ADDR" % h]

    def stop(self):
        """SIGTERM (the emulator removes its namespaces and prints its counters), kill after 20 s."""
        stop_proc(self.proc, wait=20)
        self.log.close()
