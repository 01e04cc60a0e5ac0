"""The drain clock of bench/throughput.sh and bench/latency.sh, the same for both sides: one process, one Redis
connection, polling every millisecond (a redis-cli process per poll took several ms on a loaded machine, which at
100,000 jobs/s is a large part of a drain).

    python3 bench/drain_clock.py REDIS_URL TOTAL ours|sidekiq [READY_FILE]

Start it before the workers (bench/lib.sh `clock_start` does, and waits for READY_FILE, created once it polls): a
clock started after them can miss the start, or a whole small drain.

Starts when `queue:default` holds fewer than TOTAL jobs (the first job was taken: start-up is not counted), stops
when every job is acknowledged, and prints the seconds in between:
  ours     `queue:default` is empty and no `working:*` list is left (Redis deletes an empty list);
  sidekiq  `queue:default` is empty and the processes' completion counter `bench:done` (bench/sidekiq_noop.rb,
           BENCH_DONE=1) has reached TOTAL (BasicFetch has no in-flight list: a job is acknowledged when its
           perform returns).
"""
import socket
import sys
import time
import urllib.parse


class Redis:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb")
        db = (u.path or "/0").lstrip("/") or "0"
        self.call("SELECT", db)

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b"-"):
            if kind == b"-":
                raise RuntimeError(rest.decode())
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)


def main():
    url, total, side = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    r = Redis(url)

    def acknowledged():
        if r.call("LLEN", "queue:default") != 0:
            return False
        if side == "sidekiq":
            return int(r.call("GET", "bench:done") or 0) >= total
        cursor = "0"
        while True:
            cursor, keys = r.call("SCAN", cursor, "MATCH", "working:*", "COUNT", 1000)
            if keys:
                return False
            if cursor == "0":
                return True

    ready = sys.argv[4] if len(sys.argv) > 4 else None
    while r.call("LLEN", "queue:default") >= total:
        if ready:
            open(ready, "w").close()
            ready = None
        time.sleep(0.001)
    start = time.monotonic()
    while not acknowledged():
        time.sleep(0.001)
    print("%.6f" % (time.monotonic() - start))


main()
