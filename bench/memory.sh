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
# the same files and dropped by the kernel under pressure), then the largest mappings. Median (min–max) of RUNS
# runs. Figures and their reading: docs/memory.md. Uses Redis database 59 of the private instance.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-3}"
SETTLE="${SETTLE:-3}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/59"

. bench/lib.sh
release_workerctl
FIGURES="$(mktemp -d)"
trap 'rm -rf "$FIGURES"' EXIT

for run in $(seq 1 "$RUNS"); do
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
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
done

echo "== idle worker, $(basename "$BIN") ($(file -b "$BIN" | cut -d, -f1-2))"
report rss kB "resident (VmRSS)"
report anon kB "  anonymous (RssAnon)"
report file kB "  file-backed (RssFile)"
report threads "" "threads"
echo "largest mappings, last run (kB, file):"
sed 's/^/  /' "$FIGURES/mappings.$RUNS"
