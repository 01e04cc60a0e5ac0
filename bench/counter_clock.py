#!/usr/bin/env python3
"""bench/counter_clock.py REDIS_URL TOTAL SLICE COMMAND... — when a Redis counter went through each slice.

Sends COMMAND (e.g. `GET stat:processed`, `LLEN queue:default`: anything answering an integer or nil) every
INTERVAL seconds (env, default 0.002) until its value reaches TOTAL, and prints one line per SLICE of it:

    slice 1: 0-100000 in 2.412 s: 41459/s

The first slice's clock starts at the first sample above the value at start (the first job done or moved), each
other slice's at the sample that closed the previous one; every rate is (values sampled) / (time between samples),
so the sampling step does not bias it. Then `first_wait=S` (seconds from start to the first change) and
`total=S` (start to TOTAL). One GET every 2 ms is nothing next to what it measures (tens of thousands of
commands a second) and reads a counter the workers keep anyway, so the clock does not slow the drain.
Plain sockets (no Python package needed); REDIS_URL is redis://host:port/db without a password.
"""
import os
import socket
import sys
import time
from urllib.parse import urlparse


def main():
    url, total, size, command = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    interval = float(os.environ.get("INTERVAL", "0.002"))
    limit = float(os.environ.get("TIMEOUT", "600"))
    parts = urlparse(url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379))
    reader = sock.makefile("rb")

    def call(*args):
        sock.sendall(b"".join([b"*%d\r\n" % len(args)] +
                              [b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args)]))
        line = reader.readline()
        kind, rest = line[:1], line[1:].strip()
        if kind == b"$":
            return None if int(rest) < 0 else reader.read(int(rest) + 2)[:-2].decode()
        if kind in (b"+", b":"):
            return rest.decode()
        raise RuntimeError("redis: %r" % line)

    database = (parts.path or "/0").strip("/") or "0"
    if database != "0":
        call("SELECT", database)

    def value():
        return int(call(*command) or 0)

    start = time.monotonic()
    initial = value()
    first = None          # (time, value) of the first change
    edge = None           # (time, value) that closed the previous slice
    slice_number = 1
    while True:
        now, current = time.monotonic(), value()
        if now - start > limit:
            sys.exit("counter_clock: %s still %d of %d after %.0f s" % (" ".join(command), current, total, limit))
        if first is None and current != initial:
            first = edge = (now, current)
        if first is not None:
            while slice_number * size <= current or (current >= total and edge[1] < total):
                top = min(slice_number * size, total)
                seconds = now - edge[0]
                rate = (current - edge[1]) / seconds if seconds > 0 else float("inf")
                print("slice %d: %d-%d in %.3f s: %.0f/s" % (slice_number, (slice_number - 1) * size, top, seconds, rate))
                edge = (now, current)
                slice_number += 1
                if top >= total:
                    break
        if current >= total:
            print("first_wait=%.3f" % (first[0] - start if first else 0))
            print("total=%.3f" % (now - start))
            return
        time.sleep(interval)


main()
