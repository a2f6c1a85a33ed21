#!/usr/bin/env python3
"""Integration: networks as deployed. Multi-homed hosts and source-specific multicast (SSM),
over IPv4 and IPv6, between network namespaces (needs root; SKIPPED otherwise).

Two links, A and B, are Linux bridges in a switch namespace. The sender host s1 and the site
hosts r1 and r2 each have one interface on each link (ethA, ethB); the sender's default
routes point at link B. A second sender host, s2, sits on link A. Packet sockets on both
bridges count every UDP datagram to the test's groups, by source and destination.

  1. Interface choice, IPv4: r1 joins group G4 on ethA (by name), r2 on ethB (by address).
     A session sent with -i ethA reaches r1 and completes, while link B carries none of its
     datagrams and r2's channel socket reads none; then -i with s1's link-B address: r2
     completes, link A carries nothing, r1 reads nothing more. Each site also hears the other
     link on its second interface: only a join on the configured interface keeps it out.
  2. SSM, IPv4: r1's channel on 232.x is joined (s1's link-A address, group) through --source.
     s2 sends a session to the same group and port from another address: the datagrams are on
     link A (counted), but the channel's socket reads none (status channel_sockets: the kernel
     filters) and no file of it arrives. Then s1's session is delivered, and no datagram from
     another address ever reached the socket (off_source 0).
  3. IPv6, the same over ff3e::/32: r1's channel is source-specific from a TOML file
     (interface = "ethA", source = s1's link-A address), r2's any-source on ethB; -i ethA then
     -i ethB each reach only their link and their site; s2's session to r1's group never
     reaches r1's socket, s1's is delivered; then forced unicast sessions over TCP and over
     SCTP (--unicast --fallback tcp|sctp) from s1's link-A address to r1.
Sites register, and connect for the fallback, from their configured interface's address.
Every delivered file is compared by SHA-256 with its source.

usage: test_ssm.py BUILD_DIR
       test_ssm.py --count IFACE PORT...   (internal: the packet counter run in a namespace)"""

import json
import os
import random
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcdist_testlib import *  # noqa: E402,F403
from netns_lib import netns_exec, netns_skip_reason, sh  # noqa: E402

SUFFIX = "%d" % os.getpid()
SW, S1, S2, R1, R2 = ("mcssm-%s-%s" % (n, SUFFIX) for n in ("sw", "s1", "s2", "r1", "r2"))
# Addresses inside the test's own namespaces: host h on link L is 10.79.L.h and fd79:L::h.
V4 = {(S1, "A"): "10.79.1.1", (S1, "B"): "10.79.2.1", (S2, "A"): "10.79.1.9",
      (R1, "A"): "10.79.1.2", (R1, "B"): "10.79.2.2", (R2, "A"): "10.79.1.3",
      (R2, "B"): "10.79.2.3"}
V6 = {k: "fd79:%d::%s" % (1 if k[1] == "A" else 2, v.rsplit(".", 1)[1]) for k, v in V4.items()}
LINK_NUMBER = {"A": 1, "B": 2}


# --- the packet counter (runs inside the switch namespace) -----------------------------------

def count_main(iface, ports):
    """Counts UDP datagrams to `ports` seen on `iface` by "SRC>DST:PORT"; prints the counts as
    one JSON line for each line read on stdin, and "ready" once the socket is bound."""
    ports = set(int(p) for p in ports)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
    s.bind((iface, 0))
    counts = {}
    print("ready", flush=True)
    while True:
        r, _, _ = select.select([s, sys.stdin], [], [])
        if sys.stdin in r:
            if not sys.stdin.readline():
                return 0
            print(json.dumps(counts), flush=True)
        if s in r:
            frame = s.recv(65536)
            if len(frame) < 14:
                continue
            ethertype = struct.unpack("!H", frame[12:14])[0]
            key = None
            if ethertype == 0x0800 and len(frame) >= 14 + 20:
                ihl = (frame[14] & 0x0F) * 4
                if frame[14 + 9] == 17 and len(frame) >= 14 + ihl + 4:
                    dport = struct.unpack("!H", frame[14 + ihl + 2:14 + ihl + 4])[0]
                    key = (socket.inet_ntop(socket.AF_INET, frame[26:30]),
                           socket.inet_ntop(socket.AF_INET, frame[30:34]), dport)
            elif ethertype == 0x86DD and len(frame) >= 14 + 40 + 4 and frame[14 + 6] == 17:
                dport = struct.unpack("!H", frame[56:58])[0]
                key = (socket.inet_ntop(socket.AF_INET6, frame[22:38]),
                       socket.inet_ntop(socket.AF_INET6, frame[38:54]), dport)
            if key and key[2] in ports:
                k = "%s>%s:%d" % key
                counts[k] = counts.get(k, 0) + 1


class Counter:
    """The packet counter on one bridge of the switch namespace."""

    def __init__(self, bridge, ports):
        self.proc = subprocess.Popen(netns_exec(SW) + [sys.executable, os.path.abspath(__file__),
                                                       "--count", bridge] + [str(p) for p in ports],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(self.proc.stdout.readline().strip() == "ready", "the counter on %s did not start" % bridge)

    def counts(self):
        time.sleep(0.2)  # the last frames of a session that just ended
        self.proc.stdin.write("dump\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def to_group(self, group, source=None):
        """Datagrams counted to group ADDR:PORT (from `source` only, when given)."""
        host, port = group.rsplit(":", 1)
        host = host.strip("[]")
        total = 0
        for k, n in self.counts().items():
            src, rest = k.split(">", 1)
            dst, p = rest.rsplit(":", 1)
            if socket.inet_pton(socket.AF_INET6 if ":" in dst else socket.AF_INET, dst) == \
                    socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host) and \
                    int(p) == int(port) and (source is None or src == source):
                total += n
        return total

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


# --- the namespaces --------------------------------------------------------------------------

def build_topology():
    for ns in (SW, S1, S2, R1, R2):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        # No duplicate address detection: addresses are usable at once, not tentative.
        for conf in ("all", "default"):
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w",
               "net.ipv6.conf.%s.accept_dad=0" % conf)
    for link in ("A", "B"):
        br = "br" + link
        sh("ip", "-n", SW, "link", "add", br, "type", "bridge")
        # No IGMP/MLD snooping: the bridge floods every group to every port (and to the
        # counters), as a plain switch; what reaches a socket is then the host's doing.
        sh("ip", "-n", SW, "link", "set", br, "type", "bridge", "mcast_snooping", "0")
        sh("ip", "-n", SW, "link", "set", br, "up")
    port = 0
    for (ns, link) in V4:
        port += 1
        peer = "p%d%s" % (port, link)
        sh("ip", "-n", ns, "link", "add", "eth" + link, "type", "veth", "peer", "name", peer,
           "netns", SW)
        sh("ip", "-n", SW, "link", "set", peer, "master", "br" + link)
        sh("ip", "-n", SW, "link", "set", peer, "up")
        sh("ip", "-n", ns, "link", "set", "eth" + link, "up")
        sh("ip", "-n", ns, "addr", "add", V4[(ns, link)] + "/24", "dev", "eth" + link)
        sh("ip", "-n", ns, "-6", "addr", "add", V6[(ns, link)] + "/64", "dev", "eth" + link, "nodad")
    # The sender's default routes lead to link B: without its interface set, a session would
    # follow them (a gateway address on the link is enough for the table).
    sh("ip", "-n", S1, "route", "add", "default", "via", "10.79.2.254", "dev", "ethB")
    sh("ip", "-n", S1, "-6", "route", "add", "default", "via", "fd79:2::fe", "dev", "ethB")


def teardown():
    for ns in (SW, S1, S2, R1, R2):
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def can_run():
    """None when namespaces, veth pairs and bridges can be made here, else why not."""
    return netns_skip_reason("mcssm-probe-" + SUFFIX)


# --- programs in the namespaces --------------------------------------------------------------

def make_set(root, rng):
    for i, size in enumerate((0, 1, 1400, 100_000, 700_000)):
        write_random(os.path.join(root, "f%d.bin" % i), size, rng)
    name = os.path.basename(root)
    return {name + "/" + p: h for p, h in tree_digests(root).items()}


def check_delivered(dest, want, who):
    got = tree_digests(dest)
    missing = sorted(set(want) - set(got))
    check(not missing, "%s: missing %s" % (who, missing[:5]))
    bad = [p for p in want if got[p] != want[p]]
    check(not bad, "%s: SHA-256 differs for %s" % (who, bad[:5]))


def send(bin_dir, ns, src, group, interface, receivers, extra=(), want_rc=0):
    """Runs mcdist-send in `ns`; returns (summary, output)."""
    fd, summary_path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    args = netns_exec(ns) + [os.path.join(bin_dir, "sender", "mcdist-send"), "--group", group,
                             "--interface", interface, "--rate", "200M", "--summary-json",
                             summary_path, "--no-progress", "--receivers", ",".join(receivers)]
    if "--register-timeout" not in extra:
        args += ["--register-timeout", "10s"]  # a site that hears nothing fails in 10 s, not 30
    p = subprocess.run(args + list(extra) + [src], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode("utf-8", "replace")
    check(p.returncode == want_rc, "mcdist-send -i %s in %s: exit %d, want %d:\n%s" % (
        interface, ns, p.returncode, want_rc, out))
    try:
        with open(summary_path) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        summary = None
    os.unlink(summary_path)
    return summary, out


def completed(summary, rid, path="multicast"):
    r = {x["id"]: x for x in summary["receivers"]}.get(rid)
    check(r and r["state"] == "completed" and r["path"] == path,
          "%s did not complete over %s: %s" % (rid, path, r))


def fresh_status(*daemons):
    """Each daemon's status as written after this call (status_interval is 1 s)."""
    since = time.time()
    out = []
    for d in daemons:
        deadline = time.time() + 10
        while True:
            try:
                if os.stat(d.status).st_mtime > since:
                    s = d.read_status()
                    if s:
                        out.append(s)
                        break
            except OSError:
                pass
            check(time.time() < deadline, "%s wrote no status:\n%s" % (d.id, d.log_text()))
            check(d.alive(), "%s exited:\n%s" % (d.id, d.log_text()))
            time.sleep(0.05)
    return out


def socket_reads(status, group):
    """(datagrams, off_source) read by the daemon's channel socket of `group`."""
    for c in status.get("channel_sockets", []):
        if c["group"] == group:
            return c["datagrams"], c["off_source"]
    fail("no channel_sockets entry for %s in %s" % (group, status))


def group_of(family, rng):
    port = rng.randint(20000, 60000)
    if family == 6:
        return "[ff3e::4d43:%x]:%d" % (rng.randint(1, 0xffff), port)
    return "239.79.%d.%d:%d" % (rng.randint(1, 250), rng.randint(1, 250), port)


# --- the cases -------------------------------------------------------------------------------

def interface_rounds(bin_dir, base, rng, family, group, r1, r2, counters, interface_b):
    """-i naming link A (ethA) then link B (`interface_b`) in turn: only the site on that
    link completes, only that link carries the session, the other site's socket reads nothing
    of it."""
    addr = V6 if family == 6 else V4
    rounds = (("ethA", "A", r1, r2), (interface_b, "B", r2, r1))
    for interface, link, site, other in rounds:
        src = os.path.join(base, "src", "v%d%s" % (family, link))
        want = make_set(src, rng)
        other_before = socket_reads(fresh_status(other)[0], group)[0]
        other_link = counters["B" if link == "A" else "A"]
        here_before = counters[link].to_group(group, addr[(S1, link)])
        elsewhere_before = other_link.to_group(group)
        t0 = time.time()
        summary, out = send(bin_dir, S1, src, group, interface, [site.id])
        took = time.time() - t0
        completed(summary, site.id)
        check_delivered(site.dest, want, site.id)
        # The site replies from its configured interface's address.
        site_addr = addr[(R1 if site is r1 else R2, link)]
        check(("registered from %s:" % (("[%s]" if family == 6 else "%s") % site_addr)) in out,
              "%s did not register from %s:\n%s" % (site.id, site_addr, out))
        here = counters[link].to_group(group, addr[(S1, link)]) - here_before
        elsewhere = other_link.to_group(group) - elsewhere_before
        check(here > 0, "link %s carried no datagram of the session sent with -i %s" % (link,
                                                                                       interface))
        check(elsewhere == 0, "-i %s: the other link carried %d datagrams of the session:\n%s" % (
            interface, elsewhere, out))
        other_after = socket_reads(fresh_status(other)[0], group)[0]
        check(other_after == other_before,
              "%s (joined on the other link) read %d datagrams of a session sent with -i %s" % (
                  other.id, other_after - other_before, interface))
        log("IPv%d -i %s: %s completed in %.1f s; link %s carried %d datagrams, the other link "
            "none, %s read none" % (family, interface, site.id, took, link, here, other.id))


def ssm_case(bin_dir, base, rng, counters, group, site, family):
    """A second sender on the same link, group and port: the SSM channel never reads it."""
    addr = V6 if family == 6 else V4
    intruder = os.path.join(base, "src", "intruder%d" % family)
    make_set(intruder, rng)
    before = socket_reads(fresh_status(site)[0], group)
    seen_before = counters["A"].to_group(group, addr[(S2, "A")])
    # A closed group naming the site: s2 announces until --register-timeout, which the site
    # never answers (it never reads the announces), and gives up.
    _, out = send(bin_dir, S2, intruder, group, "ethA", [site.id],
                  ["--register-timeout", "1500ms"], want_rc=1)
    seen = counters["A"].to_group(group, addr[(S2, "A")]) - seen_before
    check(seen > 0, "s2's session put no datagram on link A:\n" + out)
    after = socket_reads(fresh_status(site)[0], group)
    check(after == before, "the SSM channel's socket read %s datagrams of s2's session "
          "(datagrams, off source: %s -> %s)" % (after[0] - before[0], before, after))
    check(not any(p.startswith("intruder") for p in tree_digests(site.dest)),
          "a file of s2's session was delivered")
    src = os.path.join(base, "src", "ssm%d" % family)
    want = make_set(src, rng)
    summary, _ = send(bin_dir, S1, src, group, "ethA", [site.id])
    completed(summary, site.id)
    check_delivered(site.dest, want, site.id)
    final = socket_reads(fresh_status(site)[0], group)
    check(final[0] > after[0] and final[1] == 0,
          "the configured source's datagrams: %s, off source %s" % (final[0] - after[0], final[1]))
    log("IPv%d SSM: s2 put %d datagrams on link A, the channel's socket read none of them and "
        "stored nothing of s2; s1's session delivered (%d datagrams read, 0 off source)" % (
            family, seen, final[0] - after[0]))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--count":
        return count_main(sys.argv[2], sys.argv[3:])
    bin_dir = sys.argv[1]
    why = can_run()
    if why:
        print("SKIPPED: " + why)
        return SKIP
    started = time.time()
    base = tempfile.mkdtemp(prefix="mcdist-ssm-")
    rng = random.Random(3678)
    g4, g6 = group_of(4, rng), group_of(6, rng)
    s4 = "232.79.%d.%d:%d" % (rng.randint(1, 250), rng.randint(1, 250), rng.randint(20000, 60000))
    ports = [int(g.rsplit(":", 1)[1]) for g in (g4, g6, s4)]
    daemons, counters = [], {}
    try:
        teardown()
        build_topology()
        counters = {link: Counter("br" + link, ports) for link in ("A", "B")}
        quiet = ["--http", "off"]

        # 1. IPv4: r1 joins on ethA by name, r2 on ethB by address.
        r1 = Daemon(bin_dir, base, "r1", g4, quiet, prefix=netns_exec(R1), interface="ethA")
        r2 = Daemon(bin_dir, base, "r2", g4, quiet, prefix=netns_exec(R2),
                    interface=V4[(R2, "B")])
        daemons += [r1, r2]
        check("interface ethA (10.79.1.2, index" in r1.log_text(),
              "r1 does not say it joins on ethA:\n" + r1.log_text())
        interface_rounds(bin_dir, base, rng, 4, g4, r1, r2, counters, V4[(S1, "B")])

        # 2. IPv4 SSM through --source.
        r1ssm = Daemon(bin_dir, base, "r1ssm", s4, quiet + ["--source", V4[(S1, "A")]],
                       prefix=netns_exec(R1), interface="ethA")
        daemons.append(r1ssm)
        ssm_case(bin_dir, base, rng, counters, s4, r1ssm, 4)

        # 3. IPv6: r1 source-specific from its TOML file, r2 any-source on ethB.
        r1v6 = TomlDaemon(bin_dir, base, "r1v6", lambda d: (
            'id = "r1v6"\ndest = "%s"\ntemp = "%s"\nstatus_file = "%s"\nstatus_interval = "1s"\n'
            'http = "off"\nallow_unsigned = true\ninterface = "ethA"\n[[channel]]\nname = "v6"\n'
            'group = "%s"\nsource = "%s"\n' % (d.dest, d.temp, d.status, g6, V6[(S1, "A")])),
            prefix=netns_exec(R1))
        daemons.append(r1v6)
        r2v6 = Daemon(bin_dir, base, "r2v6", g6, quiet, prefix=netns_exec(R2), interface="ethB")
        daemons.append(r2v6)
        check("joined without a source" in r2v6.log_text(),
              "r2v6 does not warn of its any-source join in the SSM range:\n" + r2v6.log_text())
        interface_rounds(bin_dir, base, rng, 6, g6, r1v6, r2v6, counters, "ethB")
        ssm_case(bin_dir, base, rng, counters, g6, r1v6, 6)
        for transport in ("tcp", "sctp"):
            src = os.path.join(base, "src", "v6" + transport)
            want = make_set(src, rng)
            summary, out = send(bin_dir, S1, src, g6, "ethA", [r1v6.id],
                                ["--unicast", "--fallback", transport])
            completed(summary, r1v6.id, "unicast-" + transport)
            check(summary["data_datagrams"] == 0, "forced unicast sent multicast data")
            check_delivered(r1v6.dest, want, r1v6.id)
            check("connected from [%s]:" % V6[(R1, "A")] in out,
                  "r1v6 did not connect from its ethA address:\n" + out)
            log("IPv6 unicast over %s from [%s] to r1v6: %d files delivered" % (
                transport, V6[(S1, "A")], len(want)))
        log("PASS: sessions leave and sites join on the configured interface (IPv4 and IPv6, "
            "by name and by address), SSM channels take only their source, IPv6 unicast "
            "fallback over TCP and SCTP; %.1f s" % (time.time() - started))
        return 0
    finally:
        for d in daemons:
            d.stop()
        for c in counters.values():
            c.stop()
        teardown()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
