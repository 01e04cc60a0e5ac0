#!/usr/bin/env python3
"""bench/script_cost.py — Redis time per job of the fetch and settle scripts, as the worker sends them.

    python3 bench/script_cost.py [N] [BATCH]      default N=100000 jobs, BATCH=250 (the worker's fetch batch)
    SOURCES=/path/to/other/checkout python3 bench/script_cost.py     the scripts of another tree (an A/B comparison)

Reads the scripts' Lua text from Sources/Queue/Scripts/ (RuntimeScripts.swift, and BatchScripts.swift's shared
functions; an older tree's Sources/Queue/Scripts.swift too, for SOURCES=), so it
measures what is in the tree. For each of 3 runs: N no-op payloads are pushed onto `queue:default` of database 59 of
the private Redis (scripts/services: 127.0.0.1:$REDIS_PORT, default 6390; flushed first), fetched BATCH at a time
into an in-flight list by the fetch script, then acknowledged BATCH at a time by the settle script, as the worker
does. Redis's own `INFO commandstats` gives the microseconds spent in each script (the figure: Redis is the shared
resource of a fleet), reset before each phase; the wall rate is printed too. Prints the median (min–max) of the
3 runs and the persistence in force. A benchmark, not a test: it asserts only that every job moved.
"""
import os
import re
import socket
import statistics
import sys
import time

ROOT = os.environ.get("SOURCES", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 250
RUNS = 3


class Redis:
    """The smallest RESP2 client: one connection, one command at a time."""

    def __init__(self, port, db):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")
        self.call("SELECT", db)

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.file.read(size + 2)[:-2]
            return data
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self.read() for _ in range(size)]
        raise RuntimeError("bad reply %r" % line)


def lua(paths, pattern):
    """The Lua matched by `pattern` in the first of `paths` (newest layout first) that exists under ROOT."""
    path = next((p for p in paths if os.path.exists(os.path.join(ROOT, p))), paths[0])
    text = open(os.path.join(ROOT, path)).read()
    match = re.search(pattern, text, re.S)
    if not match:
        sys.exit("script_cost: cannot find the script in %s (has it moved?)" % path)
    return match.group(1)


RUNTIME = ["Sources/Queue/Scripts/RuntimeScripts.swift", "Sources/Queue/Scripts.swift"]
functions = lua(["Sources/Queue/Scripts/BatchScripts.swift", "Sources/Queue/Batches/BatchScripts.swift"], r'static let functions = """\n(.*?)\n\s*"""')
fetch = lua(RUNTIME, r'static let fetch = RedisScript\("""\n(.*?)\n\s*"""\)')
settle = functions + "\n" + lua(RUNTIME,
                                r'static let complete = RedisScript\(BatchScripts.functions \+ """\n(.*?)\n\s*"""\)')

r = Redis(int(os.environ.get("REDIS_PORT", "6390")), 59)
fetch_sha = r.call("SCRIPT", "LOAD", fetch).decode()
settle_sha = r.call("SCRIPT", "LOAD", settle).decode()
identity = "bench-host:1:scriptcost"
working = "working:queue:default:" + identity
persistence = "appendonly %s, appendfsync %s" % (r.call("CONFIG", "GET", "appendonly")[1].decode(),
                                                 r.call("CONFIG", "GET", "appendfsync")[1].decode())


def evalsha_usec():
    stats = r.call("INFO", "commandstats").decode()
    match = re.search(r"cmdstat_evalsha:calls=\d+,usec=(\d+)", stats)
    return int(match.group(1)) if match else 0


figures = {"fetch_usec": [], "settle_usec": [], "fetch_rate": [], "settle_rate": []}
for run in range(RUNS):
    r.call("FLUSHDB")
    template = '{"retry":true,"queue":"default","class":"Noop","args":[%d],"jid":"%024x","created_at":1764028800.0,"enqueued_at":1764028800.0}'
    for start in range(0, N, 1000):
        r.call("LPUSH", "queue:default", *[template % (i, i) for i in range(start, min(N, start + 1000))])
    r.call("CONFIG", "RESETSTAT")
    fetched = []
    began = time.perf_counter()
    while True:
        reply = r.call("EVALSHA", fetch_sha, 0, identity, BATCH, "default")
        if not reply:
            break
        for chunk in reply[1::2]:  # [queue, [jobs…], …]
            fetched.extend(chunk)
    figures["fetch_rate"].append(N / (time.perf_counter() - began))
    figures["fetch_usec"].append(evalsha_usec() / N)
    if len(fetched) != N:
        sys.exit("script_cost: fetched %d of %d" % (len(fetched), N))
    r.call("CONFIG", "RESETSTAT")
    now = time.time()
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    began = time.perf_counter()
    for start in range(0, N, BATCH):
        chunk = fetched[start:start + BATCH]
        # As ReliableQueue.settle sends plain acks: one group (the in-flight list, the count, the raw jobs).
        r.call("EVALSHA", settle_sha, 0, now, day, 10000, 15552000, 1, working, len(chunk), *chunk)
    figures["settle_rate"].append(N / (time.perf_counter() - began))
    figures["settle_usec"].append(evalsha_usec() / N)
    if r.call("LLEN", working) != 0 or int(r.call("GET", "stat:processed")) != N:
        sys.exit("script_cost: the settle script left jobs in flight or miscounted")


def line(name, unit, label):
    values = figures[name]
    fmt = (lambda v: "%.0f" % v) if max(values) >= 100 else (lambda v: "%.2f" % v)
    print("%s: median %s %s (min %s – max %s, %d runs)" % (label, fmt(statistics.median(values)), unit,
                                                          fmt(min(values)), fmt(max(values)), len(values)))


print("== redis %s; N=%d, batch %d" % (persistence, N, BATCH))
line("fetch_usec", "µs/job", "fetch script, Redis time")
line("settle_usec", "µs/job", "settle script (ack), Redis time")
line("fetch_rate", "jobs/s", "fetch, one client, wall")
line("settle_rate", "jobs/s", "settle, one client, wall")
