#!/usr/bin/env python3
"""A hostile host for tests/integration/test_fallback_flood.py: opens COUNT TCP connections to
the unicast fallback listener at HOST:PORT and holds them without ever sending a byte, each
reopened at once whenever it is closed (reset, end of stream, refused), until SIGTERM or
SIGINT. The connections are spread round robin over the source addresses given (on loopback
any of 127.0.0.0/8), so the flood can come from one host or from many. While the listener is
not up yet (connection refused) a slot waits 5 ms before it tries again.

When it stops it prints one JSON line: attempts (connects begun), established (connects seen
to complete), closed_by_server (connections the server closed or reset, some before we saw them
up), refused (connects refused: no listener), most_open (most connections up at once), bytes
(what the server sent: its challenges), and by source the established counts.

Once `--ready-file` is given, the file is created as soon as COUNT connections were
established once (or at least once each slot), so a test can start its site into a flooded
listener.

usage: fallback_flood.py HOST:PORT [--connections 300] [--sources 127.0.0.2,127.0.0.3]
                         [--ready-file PATH]"""

import argparse
import errno
import json
import os
import selectors
import signal
import socket
import sys
import time

# Connect to a listener that is not up yet: wait this long before trying again, so the flood
# does not spin before the session starts (once it is up, closed connections reopen at once).
REFUSED_RETRY_S = 0.005


class slot:
    def __init__(self, index, source):
        self.index = index
        self.source = source
        self.sock = None
        self.connected = False
        self.retry_at = 0.0
        self.ever_connected = False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--sources", default="127.0.0.2")
    ap.add_argument("--ready-file")
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)
    target = (host, int(port))
    sources = a.sources.split(",")

    stop = [False]

    def on_signal(*_):
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    sel = selectors.DefaultSelector()
    slots = [slot(i, sources[i % len(sources)]) for i in range(a.connections)]
    stats = {"attempts": 0, "established": 0, "closed_by_server": 0, "refused": 0,
             "most_open": 0, "bytes": 0,
             "by_source": {s: 0 for s in sources}}
    open_now = [0]
    ready_written = [False]

    def drop(s, by_server):
        if s.sock is not None:
            try:
                sel.unregister(s.sock)
            except (KeyError, ValueError):
                pass
            s.sock.close()
            s.sock = None
        if s.connected:
            open_now[0] -= 1
            if by_server:
                stats["closed_by_server"] += 1
        s.connected = False

    def connect(s):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.bind((s.source, 0))
        except OSError:
            sock.close()
            s.retry_at = time.monotonic() + REFUSED_RETRY_S
            return
        stats["attempts"] += 1
        rc = sock.connect_ex(target)
        if rc not in (0, errno.EINPROGRESS):
            sock.close()
            stats["refused"] += 1
            s.retry_at = time.monotonic() + REFUSED_RETRY_S
            return
        s.sock = sock
        sel.register(sock, selectors.EVENT_WRITE, s)

    for s in slots:
        connect(s)
    buf = bytearray(4096)
    while not stop[0]:
        now = time.monotonic()
        for s in slots:
            if s.sock is None and now >= s.retry_at:
                connect(s)
        waiting = any(s.sock is None for s in slots)
        for key, ev in sel.select(REFUSED_RETRY_S if waiting else 0.1):
            s = key.data
            if not s.connected:
                err = s.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err == errno.ECONNREFUSED:
                    drop(s, False)
                    stats["refused"] += 1
                    s.retry_at = time.monotonic() + REFUSED_RETRY_S
                    continue
                if err:
                    # Accepted and reset by the server before we saw it up: closed by the
                    # server like any other, so reopened at once.
                    drop(s, False)
                    stats["closed_by_server"] += 1
                    connect(s)
                    continue
                s.connected = True
                s.ever_connected = True
                stats["established"] += 1
                stats["by_source"][s.source] += 1
                open_now[0] += 1
                stats["most_open"] = max(stats["most_open"], open_now[0])
                sel.modify(s.sock, selectors.EVENT_READ, s)
                continue
            # Readable: the server's challenge (read and ignored: we never answer), or its
            # close. Closed: reopen now.
            try:
                n = s.sock.recv_into(buf)
            except OSError:
                n = 0
            if n:
                stats["bytes"] += n
                continue
            drop(s, True)
            connect(s)
        if a.ready_file and not ready_written[0] and all(s.ever_connected for s in slots):
            ready_written[0] = True
            with open(a.ready_file, "w") as f:
                f.write("%d\n" % open_now[0])
    for s in slots:
        drop(s, False)
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
