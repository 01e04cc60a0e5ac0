#!/usr/bin/env bash
# bench/middleware-allocs.sh — heap allocations per job of two workerctl builds, e.g. before and after the job-run
# middleware chain (issue 35: an empty chain must add no allocation per job).
#
#   BIN_A=/path/to/old/workerctl BIN_B=.build-release/.../workerctl bench/middleware-allocs.sh
#   N=10000 RUNS=3 CONCURRENCY=10 DB=61 (defaults)
#
# For each binary, RUNS times: a worker (`worker --no-database --concurrency CONCURRENCY`, as bench/throughput.sh
# drains) starts on an empty queue under bench/malloc-count (LD_PRELOAD, built here with cc); once it has registered
# and idled IDLE seconds, its allocation counter is read, N `Noop` jobs are enqueued (by a separate, uncounted
# process, in batches of 1000) and drained; when `stat:processed` reaches N the counter is read again. Prints
# allocations per job = (after - before) / N, median (min–max) of the runs, and the worker's idle allocations per
# second (heartbeat, polls: included in the per-job figure for the drain's duration, normally far below one per job).
# Figures from debug builds check the script, they are not the result: compare release builds (scripts/release-build).
# Uses Redis database DB of the private instance (scripts/services). A benchmark, not a test: it asserts nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
: "${BIN_A:?BIN_A: the first workerctl to measure}" "${BIN_B:?BIN_B: the second workerctl to measure}"
N="${N:-10000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-10}"
IDLE="${IDLE:-2}"
DB="${DB:-61}"
for bin in "$BIN_A" "$BIN_B"; do [ -x "$bin" ] || { echo "$bin is not an executable" >&2; exit 1; }; done
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/$DB"
R() { redis-cli -u "$REDIS_URL" "$@"; }

FIGURES="$(mktemp -d)"
. bench/lib.sh
STARTED=()
stop_started() { for p in "${STARTED[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap 'stop_started; rm -rf "$FIGURES"' EXIT

LIB="$FIGURES/libmalloccount.so"
cc -O2 -shared -fPIC -o "$LIB" bench/malloc-count/malloc_count.c
counted() { od -An -t u8 -N8 "$1" | tr -d ' '; }
registered() { for _ in $(seq 1 600); do [ "$(R scard processes)" -ge 1 ] && return 0; sleep 0.05; done; echo "the worker did not register" >&2; exit 1; }

echo "== machine: $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); N=$N, RUNS=$RUNS, concurrency $CONCURRENCY"
echo "== A: $BIN_A"
echo "== B: $BIN_B"
for run in $(seq 1 "$RUNS"); do
  for side in A B; do
    bin=$BIN_A; [ $side = B ] && bin=$BIN_B
    R flushdb >/dev/null
    file="$FIGURES/count-$side-$run"
    rm -f "$file"
    MALLOC_COUNT_FILE="$file" LD_PRELOAD="$LIB" "$bin" worker --no-database --concurrency "$CONCURRENCY" \
      2>"$FIGURES/worker-$side.log" &
    WPID=$!; STARTED+=($WPID)
    registered
    sleep 1
    idle_start=$(counted "$file")
    sleep "$IDLE"
    before=$(counted "$file")
    "$bin" enqueue Noop --count "$N" --batch 1000 >/dev/null
    for _ in $(seq 1 12000); do [ "$(R get stat:processed)" = "$N" ] && break; sleep 0.01; done
    [ "$(R get stat:processed)" = "$N" ] || { echo "$side: the worker did not run $N jobs" >&2; exit 1; }
    after=$(counted "$file")
    kill -TERM $WPID; wait $WPID || true
    record "per_job_$side" "$(echo "($after - $before) / $N" | bc -l)"
    record "idle_$side" "$(echo "($before - $idle_start) / $IDLE" | bc -l)"
    printf -- "-- run %s %s: %.2f allocations per job\n" "$run" "$side" "$(echo "($after - $before) / $N" | bc -l)"
  done
done
R flushdb >/dev/null
# Two decimals for the per-job figures (bench/lib.sh's `report` rounds values over 100 to integers).
per_job() {
  python3 - "$FIGURES/per_job_$1" "$1" "$N" <<'PY'
import statistics, sys
values = [float(v) for v in open(sys.argv[1]) if v.strip()]
print("%s: allocations per job (%s no-op jobs): median %.2f (min %.2f – max %.2f, %d runs)" % (
    sys.argv[2], sys.argv[3], statistics.median(values), min(values), max(values), len(values)))
PY
}
echo "== results: median of $RUNS runs (min–max)"
per_job A
per_job B
report idle_A allocs/s "A: idle allocations per second"
report idle_B allocs/s "B: idle allocations per second"
