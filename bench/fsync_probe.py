"""One fsync's cost on the disk Redis writes its AOF to (issue 38 goal 3: with AOF `always` the pickup may sit one
sync above the floor — a worker not blocked on the queue when the push lands waits for Redis's next write and its
sync). Appends 4 kB and calls fdatasync, COUNT times (default 500), in DIRECTORY (Redis' `dir`), and prints the
seconds of each, one per line, for bench/percentiles.py. The file is removed afterwards.

    python3 bench/fsync_probe.py DIRECTORY [COUNT]
"""
import os
import sys
import time

directory = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 500
path = os.path.join(directory, "bench-fsync-probe.%d" % os.getpid())
block = b"x" * 4096
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
try:
    for _ in range(count):
        os.write(fd, block)
        started = time.perf_counter()
        os.fdatasync(fd)
        print("%.9f" % (time.perf_counter() - started))
finally:
    os.close(fd)
    os.unlink(path)
