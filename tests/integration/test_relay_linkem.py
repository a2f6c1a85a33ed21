#!/usr/bin/env python3
"""Integration: relays of a one-way session (mcdistd `relay_group`) over emulated long and
lossy links (tests/linkem), with real mcdist-send and mcdistd: a hub on a geostationary hop
to two regional relays, each re-multicasting the hub's signed silent session to four sites on a
short lossy local network.

Topology (mcdist-linkem, one namespace per host; a packet from hA to hB crosses hA.up, then
hB.down, and the emulator adds both delays):
  h0       hub, mcdist-send --key --silent-passes 3 --fec-k 64 --fec-overhead 5% --rate 20M
  h1, h2   relays: channel on the hub's group G0 (trusting the hub's key), relay_group R1 / R2
  h3-h6    sites behind h1, on R1 only; h7-h10 sites behind h2, on R2 only; silent = true,
           trusted_senders = the hub's public key only
Links chosen: h0:delay=345ms; h1,h2:delay=5ms with loss=1e-3 on h1.down and h2.down;
h3-h10: no delay, loss=1e-2 on their .down. So hub -> relay = 345 + 5 = 350 ms each way (700 ms
RTT) losing 1e-3 on the way down to the relay; relay -> site = 5 + 0 = 5 ms each way losing
1e-2 on the way down to the site (what the relay missed from the hub is lost to its sites too:
about 1.1 % at a site). Parity: 5 % in pass 1 and 5 % fresh in each of the two later passes
(k = 64: 4 parity per full FEC block per pass, at least 1 for a short one), 15 % in all
against ~1.1 % loss; a FEC block fails only past 10 losses in 74 datagrams.

Asserted: every file (~40, 1 kB .. 2 MB, <= 15 MB) at each of the eight sites and both relays
SHA-256 identical to the source; every site sent no datagram (status datagrams_sent == 0),
checked blocks against the hub's signed block digests (block_digests.blocks_checked > 0) and
refused none as bad (not_authenticated.bad_digest == 0); the sender received no control
datagram (summary control_received all 0); each relay's status counts exactly one session
relayed (relay[0].sessions == 1) and datagrams forwarded; each site's "session X from
ADDR:PORT" log line names its own relay's address (h1's or h2's; the port of the relay socket
its status shows), never the hub's. Timing figures are logged, not asserted.

Then the same topology with an unsigned two-way session (mcdist-send's defaults: FEC k = 200,
NAKs; an open group, so any site that heard the hub could register with it): the relays and
sites allow unsigned sessions and are not silent. Each relay runs the session for its four
sites (docs/design-notes.md "Relays"), which register, NAK and complete with it. Asserted: every
file at every site and relay; the hub's receivers are exactly h1 and h2, both completed; the
blocks the hub newly wanted are no more than the relays lacked (the emulator's count of what
h1.down and h2.down dropped, plus what reached the host but not the daemon or its storage), and
each relay's NAKs named at most twice that (a NAK repeated when the repair is late) and under a
tenth of what its sites lost; each relay counts the session run
for 4 sites, all completed; each site's session came from its relay's socket. The figures
(datagrams the hub received, what the sites lost, blocks asked for) are logged.

Last, the same two-way session signed (docs/security.md "Relays of signed sessions"): the hub
pins only h1 and h2 and lists them as relays, so it delegates the session to each relay's key;
the sites trust only the hub's key and are pinned nowhere. The same assertions, and besides:
each relay ran it as a signed session and each site bound its relay's key and journaled every
file with the hub's key as the signer.

Needs root (namespaces, TUN) and a build with mcdist-linkem (MCDIST_BUILD_LINKEM): prints
SKIPPED and exits 77 otherwise.

usage: test_relay_linkem.py BUILD_DIR"""

import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))
from mcdist_testlib import (SKIP, ChannelSite, check, keygen, log, relay_status,  # noqa: E402
                            run_sender, sessions_over, site_journal, tree_digests, wait_for,
                            write_random)

HUB, RELAYS, SITES = 0, (1, 2), tuple(range(3, 11))
BEHIND = {h: 1 if h <= 6 else 2 for h in SITES}  # site -> its relay
LINKS = ["h0:delay=345ms",
         "h1,h2:delay=5ms", "h1.down,h2.down:loss=1e-3",
         "h3-h10.down:loss=1e-2"]
G0 = "239.192.77.1:4711"
RELAY_GROUP = {1: "239.192.77.2:4711", 2: "239.192.77.3:4711"}


def Site(bin_dir, base, emu, h, channel, top="", extra=()):
    """mcdistd in host h's namespace (interface: the host's emulated address), one channel."""
    d = ChannelSite(bin_dir, base, "h%d" % h, channel, top=top, interface=emu.addr(h),
                    prefix=["ip", "netns", "exec", emu.ns(h)], extra=extra)
    d.host = h
    return d


def emulator(bin_dir, base, rng, stats_json):
    """The 11-host emulator of LINKS, seeded from `rng`, writing its counters to stats_json."""
    from linkem_run import Emulator
    return Emulator(os.path.join(bin_dir, "tests", "linkem", "mcdist-linkem"), base, LINKS,
                    hosts=11, seed=rng.randrange(1 << 30), stats_json=stats_json)


def start_daemons(daemons, bin_dir, base, emu, top, site_lines="", tops=None):
    """Starts the relays (on G0, each relaying into its group) and the sites (on their relay's
    group, with `site_lines` more channel lines) into `daemons`, by host, with the top-level
    lines `top` (or tops[host], when given)."""
    tops = tops or {}
    for h in RELAYS:
        daemons[h] = Site(bin_dir, base, emu, h, "group = \"%s\"\nrelay_group = \"%s\""
                          % (G0, RELAY_GROUP[h]), top=tops.get(h, top))
    for h in SITES:
        daemons[h] = Site(bin_dir, base, emu, h, "group = \"%s\"%s"
                          % (RELAY_GROUP[BEHIND[h]], site_lines), top=tops.get(h, top))


def all_delivered(daemons, want, t0):
    """Waits for the session's end at every daemon and checks its tree against `want`.
    @return (each daemon's status by host, seconds from t0 to the last end)"""
    for d in daemons.values():
        wait_for("%s: the session's end" % d.id, lambda d=d: sessions_over(d), 60, d)
    done = time.time() - t0
    for d in daemons.values():
        got = tree_digests(d.dest)
        check(got == want, "%s: delivered files differ from the source (%d of %d, %d bad)"
              % (d.id, len(got), len(want), len([p for p in got if want.get(p) != got[p]])))
    return {h: d.read_status() for h, d in daemons.items()}, done


def skip_reason(bin_dir):
    if os.geteuid() != 0:
        return "needs root (network namespaces and TUN devices)"
    if not os.path.exists(os.path.join(bin_dir, "tests", "linkem", "mcdist-linkem")):
        return "no link emulator in the build (MCDIST_BUILD_LINKEM)"
    if not shutil.which("ip"):
        return "no ip command (iproute2)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    probe = "mcdist-relay-probe-%d" % os.getpid()
    p = subprocess.run(["ip", "netns", "add", probe], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    if p.returncode != 0:
        return "cannot make a network namespace: %s" % p.stdout.decode("utf-8", "replace").strip()
    subprocess.run(["ip", "netns", "del", probe], stderr=subprocess.DEVNULL)
    return None


def make_set(src, rng):
    """~40 files, 1 kB .. 2 MB log-uniform, at most 15 MB in all; both ends included."""
    while True:
        sizes = [1000, 2_000_000] + [int(math.exp(rng.uniform(math.log(1000),
                                                              math.log(2_000_000))))
                                     for _ in range(38)]
        if sum(sizes) <= 15_000_000:
            break
    for i, size in enumerate(sizes):
        write_random(os.path.join(src, "d%d" % (i % 4), "p%03d.bin" % i), size, rng)
    name = os.path.basename(src)
    return {name + "/" + p: h for p, h in tree_digests(src).items()}, sum(sizes)


def send(bin_dir, emu, key, src):
    """mcdist-send from the hub's namespace to G0; returns (exit code, summary, output)."""
    return run_sender(bin_dir, [src], G0, rate="20M", timeout=120, interface=emu.addr(HUB),
                      prefix=["ip", "netns", "exec", emu.ns(HUB)],
                      extra=["--key", key, "--silent-passes", "3", "--fec-k", "64",
                             "--fec-overhead", "5%"])


def run(bin_dir, base, seed):
    rng = random.Random(seed)
    key = os.path.join(base, "hub.key")
    subprocess.run([os.path.join(bin_dir, "tools", "keygen", "mcdist-keygen"), key],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    trust = "trusted_senders = [\"%s.pub\"]\nsession_timeout = \"10s\"" % key
    src = os.path.join(base, "products")
    want, total = make_set(src, rng)
    stats_json = os.path.join(base, "linkem.json")
    emu = emulator(bin_dir, base, rng, stats_json)
    daemons = {}
    try:
        start_daemons(daemons, bin_dir, base, emu, trust, "\nsilent = true")
        for h in RELAYS:
            check("relaying its one-way sessions" in daemons[h].log_text(),
                  "%s: no relay log line" % daemons[h].id)
        # The joins cross the emulator's switch (IGMP snooping), 5 ms away for the relays.
        time.sleep(0.5)
        t0 = time.time()
        code, summary, out = send(bin_dir, emu, key, src)
        took = time.time() - t0
        log(out)
        check(code == 0, "mcdist-send exited %d" % code)
        check(summary and summary["signed"], "the session was not signed")
        check(all(v == 0 for v in summary["control_received"].values()),
              "the sender received control: %s" % summary["control_received"])
        statuses, done = all_delivered(daemons, want, t0)
        for h in SITES:
            st, rid = statuses[h], daemons[h].id
            check(st["sessions_completed"] == 1 and st["sessions_failed"] == 0,
                  "%s: sessions completed %d, failed %d" % (rid, st["sessions_completed"],
                                                           st["sessions_failed"]))
            check(st["datagrams_sent"] == 0, "%s sent %d datagrams" % (rid, st["datagrams_sent"]))
            check(st["block_digests"]["blocks_checked"] > 0,
                  "%s: no block checked against the hub's digests" % rid)
            check(st["not_authenticated"]["bad_digest"] == 0,
                  "%s: blocks refused as bad_digest: %s" % (rid, st["not_authenticated"]))
        relays = {}
        for h in RELAYS:
            r = relay_status(daemons[h])
            relays[h] = r
            log("%s: relay %s" % (daemons[h].id, r))
            check(r and r["sessions"] == 1 and r["forwarded"] > 0,
                  "%s: the session was not relayed: %s" % (daemons[h].id, r))
            check(r["source"].rsplit(":", 1)[0] == emu.addr(h),
                  "%s: relay source %s is not the host's address %s" % (daemons[h].id,
                                                                       r["source"], emu.addr(h)))
        for h in SITES:
            d, relay = daemons[h], BEHIND[h]
            sources = re.findall(r"session \S+ from (\S+):(\d+) ", d.log_text())
            check(sources, "%s: no 'session X from ADDR:PORT' line in its log" % d.id)
            for addr, port in sources:
                check(addr != emu.addr(HUB), "%s: a session from the hub %s:%s, not through "
                      "its relay" % (d.id, addr, port))
                check("%s:%s" % (addr, port) == relays[relay]["source"],
                      "%s: session from %s:%s, not its relay h%d's socket %s"
                      % (d.id, addr, port, relay, relays[relay]["source"]))
        for h in SITES:
            st = statuses[h]
            log("h%d (behind h%d): %d blocks recovered from parity, %d checked against the "
                "hub's digests" % (h, BEHIND[h], st["parity"]["blocks_recovered"],
                                   st["block_digests"]["blocks_checked"]))
        for h in RELAYS:
            d = relays[h]["forward_delay_us"]
            log("h%d forwarded %d datagrams (%d bytes), forward delay p50 %d us, p99 %d us "
                "(%d samples), send_failed %d" % (h, relays[h]["forwarded"],
                                                  relays[h]["forwarded_bytes"], d["p50"],
                                                  d["p99"], d["samples"],
                                                  relays[h]["send_failed"]))
        log("%d files, %d bytes: sender done in %.1f s, every site and relay done %.1f s after "
            "the sender started" % (len(want), total, took, done))
    finally:
        for d in daemons.values():
            d.stop()
        emu.stop()
    # The emulator's counters (written as it stops): what each host's down link lost, and
    # what each relay took in against what it sent on.
    try:
        with open(stats_json) as f:
            hosts = {x["name"]: x for x in json.load(f)["hosts"]}
    except (OSError, ValueError, KeyError):
        return
    log("emulator, lost on the way down: %s" % ", ".join(
        "%s %d of %d" % (n, x["down"]["dropped_loss"], x["down"]["packets_in"])
        for n, x in sorted(hosts.items()) if x["down"]["packets_in"]))
    for h in RELAYS:
        x = hosts.get("h%d" % h)
        if x:
            log("h%d: %d datagrams reached it from the hub, it put %d on its link" % (
                h, x["down"]["delivered"], x["up"]["packets_in"]))


def signed_setup(bin_dir, base):
    """Keys for a signed two-way run: the hub's, and one per relay and site. @return (mcdistd
    top-level lines per host, mcdist-send options: sign, pin the relays, list them)"""
    def make(name):
        path = os.path.join(base, name + ".key")
        return path, keygen(bin_dir, path)
    hub_key, hub_pub = make("hub")
    tops, pins = {}, []
    for h in RELAYS + SITES:
        path, pub = make("h%d" % h)
        tops[h] = "key_file = \"%s\"\ntrusted_senders = [\"%s\"]\nsession_timeout = \"10s\"" % (
            path, hub_pub)
        if h in RELAYS:
            pins.append("h%d %s" % (h, pub))
    with open(os.path.join(base, "pins.txt"), "w") as f:
        f.write("\n".join(pins) + "\n")
    return tops, hub_pub, ["--key", hub_key, "--site-keys", os.path.join(base, "pins.txt"),
                           "--relays", "h1,h2"]


def run_two_way(bin_dir, base, seed, signed=False):
    rng = random.Random(seed)
    top = "allow_unsigned = true\nsession_timeout = \"10s\""
    # Daemons of their own: trees without the earlier parts' files.
    base = os.path.join(base, "two-way-signed" if signed else "two-way")
    os.makedirs(base)
    tops, hub_pub, sign = signed_setup(bin_dir, base) if signed else ({}, None, [])
    src = os.path.join(base, "two-way")
    want, total = make_set(src, rng)
    stats_json = os.path.join(base, "linkem-two-way.json")
    emu = emulator(bin_dir, base, rng, stats_json)
    daemons = {}
    try:
        start_daemons(daemons, bin_dir, base, emu, top, tops=tops)
        time.sleep(0.5)
        t0 = time.time()
        code, summary, out = run_sender(bin_dir, [src], G0, rate="20M", timeout=120,
                                        interface=emu.addr(HUB),
                                        prefix=["ip", "netns", "exec", emu.ns(HUB)], extra=sign)
        took = time.time() - t0
        log(out)
        check(code == 0 and summary, "mcdist-send exited %d" % code)
        receivers = {r["id"]: r for r in summary["receivers"]}
        check(sorted(receivers) == ["h1", "h2"], "the hub's receivers: %s" % sorted(receivers))
        check(all(r["state"] == "completed" for r in receivers.values()),
              "a relay did not complete at the hub: %s" % receivers)
        relays = {}
        for h in RELAYS:
            relays[h] = wait_for(
                "h%d: its sites done" % h,
                lambda h=h: (lambda r: r if r and r["two_way"]["sessions"] == 1 and
                             r["two_way"]["sessions_active"] == 0 else None)(
                                 relay_status(daemons[h])), 60, daemons[h])
        statuses, done = all_delivered(daemons, want, t0)
        for h in RELAYS:
            t = relays[h]["two_way"]
            log("h%d: relay %s" % (h, t))
            check(t["sites_completed"] == 4 and t["sites_failed"] == 0 and t["unreadable"] == 0,
                  "h%d: the sites of its session: %s" % (h, t))
            if signed:
                check(t["signed_sessions"] == 1, "h%d: not run as a signed session: %s" % (h, t))
        if signed:
            check(summary["signed"], "the session was not signed")
            for h in SITES:
                st, d = statuses[h], daemons[h]
                check(st.get("relay_delegations", 0) >= 1,
                      "%s: bound no relay key: %s" % (d.id, st.get("relay_delegations")))
                signers = [k for _, k in site_journal(d)]
                check(len(signers) == len(want) and set(signers) == {hub_pub},
                      "%s: journal signers %s, not the hub's key for each of %d files"
                      % (d.id, sorted(set(signers)), len(want)))
        for h in SITES:
            d, relay = daemons[h], BEHIND[h]
            sources = re.findall(r"session \S+ from (\S+):(\d+) ", d.log_text())
            check(sources, "%s: no 'session X from ADDR:PORT' line in its log" % d.id)
            for addr, port in sources:
                check("%s:%s" % (addr, port) == relays[relay]["source"],
                      "%s: session from %s:%s, not its relay h%d's socket %s"
                      % (d.id, addr, port, relay, relays[relay]["source"]))
        site_naks = sum(statuses[h]["naks_sent"] for h in SITES if "naks_sent" in statuses[h])
        log("two-way: %d files, %d bytes: sender done in %.1f s, every site done %.1f s after "
            "it started; the hub received %s; the sites sent the relays %d NAKs"
            % (len(want), total, took, done, summary["control_received"], site_naks))
    finally:
        for d in daemons.values():
            d.stop()
        emu.stop()
    with open(stats_json) as f:
        hosts = {x["name"]: x for x in json.load(f)["hosts"]}
    total_lacked = 0
    for h in RELAYS:
        down = hosts["h%d" % h]["down"]
        # What the relay lacked: what its link dropped, and what reached its host but not the
        # daemon (a socket buffer overrun on a loaded machine): delivered to it, less what its
        # engine took (channel and control sockets) and what its sites sent its relay socket.
        # And blocks its storage could not take then (its buffer pool full on a loaded machine:
        # dropped and NAKed, as a loss).
        t = relays[h]["two_way"]
        read = statuses[h]["datagrams"] + relays[h]["site_datagrams"] + t["site_datagrams"]
        lacked = (down["dropped_loss"] + max(0, down["delivered"] - read) +
                  statuses[h]["dropped"].get("storage_full", 0))
        naked = receivers["h%d" % h]["blocks_naked"]
        site_lost = sum(hosts["h%d" % s]["down"]["dropped_loss"] for s in SITES
                        if BEHIND[s] == h)
        log("h%d: its link lost %d datagrams and %d more did not reach the daemon or its "
            "storage (dropped: %s); it asked the hub for %d blocks; its four sites' links lost %d"
            % (h, down["dropped_loss"], lacked - down["dropped_loss"], statuses[h]["dropped"],
               naked, site_lost))
        # A NAK repeated because the repair was late (a loaded machine) names a block twice;
        # what the sites below lost never reaches the hub.
        check(naked <= 2 * lacked + 4, "h%d asked the hub for %d blocks, it lacked %d"
              % (h, naked, lacked))
        check(10 * naked < site_lost, "h%d asked the hub for %d blocks; its sites lost only %d"
              % (h, naked, site_lost))
        total_lacked += lacked
    # Blocks the hub newly wanted: one per block some relay lacked, at most.
    fresh = summary["control_received"]["nak_new_blocks"]
    log("the hub newly wanted %d blocks; the relays lacked %d" % (fresh, total_lacked))
    check(fresh <= total_lacked, "the hub newly wanted %d blocks, the relays lacked %d"
          % (fresh, total_lacked))


def main():
    bin_dir = sys.argv[1]
    reason = skip_reason(bin_dir)
    if reason:
        print("SKIPPED: " + reason)
        return SKIP
    base = tempfile.mkdtemp(prefix="mcdist-relay-linkem-",
                            dir=os.environ.get("MCDIST_TEST_DIR", "/tmp"))
    try:
        run(bin_dir, base, int(os.environ.get("MCDIST_TEST_SEED", "17")))
        log("PASS: a signed one-way session through two relays 350 ms from the hub, to four "
            "sites each behind 1 % loss, checked against the hub's key at every site")
        run_two_way(bin_dir, base, int(os.environ.get("MCDIST_TEST_SEED", "17")) + 1)
        log("PASS: an unsigned two-way session run by each relay for its four sites, one NAK "
            "upstream per loss on the hub's link")
        run_two_way(bin_dir, base, int(os.environ.get("MCDIST_TEST_SEED", "17")) + 2, signed=True)
        log("PASS: the same session signed, each relay serving it under the hub's delegation, "
            "every site checking it against the hub's key")
        return 0
    finally:
        if os.environ.get("MCDIST_KEEP"):
            log("kept " + base)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
