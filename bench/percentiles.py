"""Reads seconds, one per line, and prints p50/p99 in milliseconds: `... | python3 bench/percentiles.py LABEL`."""
import sys

values = sorted(float(line) for line in sys.stdin if line.strip())
label = sys.argv[1] if len(sys.argv) > 1 else "latency"
if values:
    def pick(q):
        return values[min(len(values) - 1, int(q * len(values)))] * 1000
    print("%s p50 %.2f ms, p99 %.2f ms over %d jobs" % (label, pick(0.5), pick(0.99), len(values)))
else:
    print("%s: no samples" % label)
