#!/usr/bin/env bash
# bench/memory.sh — what a worker process's resident memory is made of.
#
#   bench/memory.sh                      the release build (scripts/release-build), RUNS=3
#   BIN=/path/to/workerctl bench/memory.sh   another build (an A/B comparison: run both the same way)
#
# Starts an idle `workerctl worker --no-database --concurrency 10` (the throughput benchmark's worker), waits
# SETTLE seconds, and reads /proc/PID/status and /proc/PID/smaps: VmRSS, its anonymous part (heap, thread stacks,
# relocated data: what each extra process really costs) and its file-backed part (code and read-only data of the
# binary and shared libraries, mapped in 64 kB windows around each page touched; shared with every process using
# the same files and dropped by the kernel under pressure), then the largest mappings; then its peak (VmHWM) once it
# has drained DRAIN (default 100,000; 0: skip) no-op jobs. Each run starts with the page cache dropped when allowed
# (root), since the binary's resident pages depend on how its file sits in the cache. Median (min–max) of RUNS
# runs. Figures and their reading: docs/memory.md. Uses Redis database 59 of the private instance.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-3}"
SETTLE="${SETTLE:-3}"
DRAIN="${DRAIN:-100000}"
COLD=0
[ -w /proc/sys/vm/drop_caches ] && COLD=1 || echo "memory.sh: cannot drop the page cache (not root): runs start warm" >&2
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/59"
R() { redis-cli -u "$REDIS_URL" "$@"; }
R flushdb >/dev/null

. bench/lib.sh
release_workerctl
FIGURES="$(mktemp -d)"
trap 'rm -rf "$FIGURES"' EXIT

for run in $(seq 1 "$RUNS"); do
  # The binary's resident pages depend on how its file sits in the page cache (Linux maps a whole cached folio
  # around a fault, and folio sizes follow how the file was read or written): each run starts from an empty cache,
  # as after a reboot, where this is allowed (root); otherwise from whatever the cache holds, and the figure varies.
  [ "$COLD" = 1 ] && sync && echo 1 >/proc/sys/vm/drop_caches
  "$BIN" worker --no-database --concurrency 10 --queue memory-bench 2>/tmp/bench-memory-worker.log &
  pid=$!
  sleep "$SETTLE"
  kill -0 "$pid" 2>/dev/null || { echo "the worker exited; see /tmp/bench-memory-worker.log" >&2; exit 1; }
  status() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$pid/status"; }
  record rss "$(status VmRSS)"
  record anon "$(status RssAnon)"
  record file "$(status RssFile)"
  record threads "$(status Threads)"
  # Resident kB per mapped file (the binary, each shared library); "[anon]" for the rest.
  awk '/^[0-9a-f]+-[0-9a-f]+ / { name = ($6 == "" ? "[anon]" : $6) } /^Rss:/ { kb[name] += $2 }
       END { for (n in kb) print kb[n], n }' "/proc/$pid/smaps" | sort -rn | head -8 >"$FIGURES/mappings.$run"
  # Then the peak (VmHWM) while it drains DRAIN no-op jobs enqueued in batches of 1000 as fast as one client can.
  if [ "$DRAIN" -gt 0 ]; then
    "$BIN" enqueue Noop --queue memory-bench --count "$DRAIN" --batch 1000 >/dev/null
    until [ "$(R llen queue:memory-bench)" = 0 ] && [ -z "$(R --scan --pattern 'working:*' | head -1)" ]; do sleep 0.05; done
    record peak "$(status VmHWM)"
  fi
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
done

echo "== idle worker, $(basename "$BIN") ($(file -b "$BIN" | cut -d, -f1-2)), page cache $([ "$COLD" = 1 ] && echo "dropped before each run" || echo "as found")"
report rss kB "resident (VmRSS)"
report anon kB "  anonymous (RssAnon)"
report file kB "  file-backed (RssFile)"
report threads "" "threads"
[ "$DRAIN" -gt 0 ] && report peak kB "peak resident (VmHWM) after draining $DRAIN no-op jobs"
echo "largest mappings, last run (kB, file):"
sed 's/^/  /' "$FIGURES/mappings.$RUNS"
