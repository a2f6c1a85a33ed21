#!/usr/bin/env python3
"""How fast mcdist-feed ingests WIS2 notifications: a real mosquitto over TLS (client
certificate and password, a test CA made with openssl), a local HTTPS server of the products
(Python's http.server, the same CA), and the real mcdist-feed with one [[wis2_input]] feeding a
channel. N notifications of distinct products (1-20 kB, sha512 integrity) are published at once
with mosquitto_pub; the figure is N over the time from the first publish to the last product
queued in the hub's journal (each downloaded with libcurl, checked against its integrity value
and written to the spool first), medians of --runs runs, each with a fresh broker, server and
hub. The channel has no sites: its sessions end without registrations, which is the hub's
sending cost, not its ingest.

Needs mosquitto, mosquitto-clients and openssl (deploy/install-deps.sh) and a build with
mcdist-feed. Not a test: prints a table.

usage: wis2_ingest_bench.py --build BUILD [--count 2000] [--runs 3]
"""

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from mcdist_testlib import free_group  # noqa: E402
from test_feed import Feed  # noqa: E402
from test_feed_wis2_input import IN_FILTER, IN_TOPIC, Products, start_tls_broker, wnm  # noqa: E402
from test_wis2 import find_mosquitto  # noqa: E402


def run(args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def queued(journal):
    try:
        db = sqlite3.connect("file:%s?mode=ro" % journal, uri=True, timeout=5)
        try:
            return db.execute("SELECT count(*) FROM products").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def one_run(args, broker_bin, seed):
    base = tempfile.mkdtemp(prefix="wis2-ingest-")
    broker = server = feed = None
    rng = random.Random(seed)
    try:
        pki = os.path.join(base, "pki")
        broker, port, tls_args, pw_file, why = start_tls_broker(broker_bin, base, pki, 100000)
        if why:
            sys.exit(why)
        files = {}
        server = Products(pki, files)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = "https://127.0.0.1:%d/data/" % server.server_address[1]
        lines = []
        for i in range(args.count):
            name = "p%06d.bufr" % i
            files[name] = rng.randbytes(rng.randint(1_000, 20_000))
            lines.append(json.dumps(wnm(name, url + name, files[name]), separators=(",", ":")))
        spool = os.path.join(base, "spool")
        os.makedirs(spool)
        journal = os.path.join(base, "journal.db")
        feed_conf = os.path.join(base, "feed.toml")
        with open(feed_conf, "w") as f:
            f.write('interface = "127.0.0.1"\nrate = "500M"\njournal = "%s"\nhttp = "off"\nretention = "0s"\n'
                    '[[channel]]\nname = "obs"\ngroup = "%s"\nspool = ["%s"]\n'
                    'batch_window = "1s"\nregister_window = "100ms"\nafter = "delete"\n'
                    '[[wis2_input]]\nname = "gb"\nbroker = "mqtts://127.0.0.1:%d"\n'
                    'ca_file = "%s/ca.pem"\nclient_cert = "%s/client.pem"\n'
                    'client_key = "%s/client.key"\nusername = "hub"\npassword_file = "%s"\n'
                    'topics = ["%s"]\nchannel = "obs"\ndownload_ca_file = "%s/ca.pem"\n'
                    'max_bytes = "64K"\n'
                    % (journal, free_group(), spool, port, pki, pki, pki, pw_file, IN_FILTER,
                       pki))
        feed = Feed(args.build, base, feed_conf)
        feed.start()
        deadline = time.time() + 20
        while "WIS2 input gb: connected" not in feed.log_text():
            if time.time() > deadline or not feed.alive():
                sys.exit("the hub did not connect to the broker:\n" + feed.log_text()[-3000:])
            time.sleep(0.05)
        t0 = time.time()
        run(["mosquitto_pub"] + tls_args + ["-t", IN_TOPIC, "-q", "1", "-l"],
            input="\n".join(lines).encode() + b"\n", timeout=300)
        published = time.time() - t0
        deadline = time.time() + 600
        while queued(journal) < args.count:
            if time.time() > deadline or not feed.alive():
                sys.exit("only %d of %d products queued:\n%s"
                         % (queued(journal), args.count, feed.log_text()[-3000:]))
            time.sleep(0.02)
        took = time.time() - t0
        return took, published, server.requests
    finally:
        if feed is not None:
            feed.stop()
        if server is not None:
            server.shutdown()
        if broker is not None:
            broker.terminate()
            broker.wait(10)
        shutil.rmtree(base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    broker_bin = find_mosquitto()
    if not broker_bin or not all(shutil.which(t) for t in ("mosquitto_pub", "mosquitto_passwd",
                                                             "openssl")):
        sys.exit("mosquitto, mosquitto-clients or openssl missing: deploy/install-deps.sh")
    rows = []
    for i in range(args.runs):
        took, published, requests = one_run(args, broker_bin, 100 + i)
        rows.append(took)
        print("run %d: %d notifications published in %.2f s, all %d queued in the journal after "
              "%.2f s (%d downloads): %.0f notifications/s"
              % (i + 1, args.count, published, args.count, took, requests, args.count / took),
              flush=True)
    med = statistics.median(rows)
    print("\n| notifications | runs | median time to the journal | notifications/s (median) |")
    print("|---|---|---|---|")
    print("| %d | %d | %.2f s | %.0f |" % (args.count, args.runs, med, args.count / med))


if __name__ == "__main__":
    main()
