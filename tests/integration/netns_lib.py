"""Network namespaces for the integration tests that need real hosts on real links: running a
command inside one, and whether this machine can make them at all (root, iproute2, veth pairs
and bridges). Tests that need them say SKIPPED with the reason this gives."""

import os
import shutil
import subprocess


def sh(*args, check_rc=True):
    """Runs a command; its combined output as text. RuntimeError (with that output) when it
    fails and check_rc is set."""
    p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check_rc and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), p.stdout.decode(errors="replace").strip()))
    return p.stdout.decode(errors="replace")


def netns_exec(ns):
    """The argv prefix that runs a program in namespace `ns` (`ip netns exec` execs it in
    place, so the process started is the program itself and signals reach it)."""
    return ["ip", "netns", "exec", ns]


def netns_skip_reason(probe_name):
    """None when namespaces, veth pairs and bridges can be made here, else why not. The probe
    namespace `probe_name` is made and deleted."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if not shutil.which("ip"):
        return "needs iproute2's ip"
    try:
        sh("ip", "netns", "add", probe_name)
        sh("ip", "-n", probe_name, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", probe_name, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        sh("ip", "netns", "exec", probe_name, "sysctl", "-q", "-w",
           "net.ipv6.conf.all.accept_dad=0")
    except (RuntimeError, OSError) as e:
        return "cannot make network namespaces, veth pairs and bridges here (%s)" % e
    finally:
        subprocess.run(["ip", "netns", "del", probe_name], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return None
