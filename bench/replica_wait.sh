#!/usr/bin/env bash
# bench/replica_wait.sh — what REDIS_WAIT_REPLICAS=1 (WAIT for one replica on enqueue and acknowledgement) costs.
#
#   bench/replica_wait.sh                N=20000 no-op jobs, concurrency 10, RUNS=3
#   N=5000 RUNS=3 bench/replica_wait.sh
#
# Runs its own master and replica on loopback (no persistence; ports BENCH_MASTER_PORT=6440, BENCH_REPLICA_PORT=6441,
# the Sentinel tests' ports: do not run both at once) and measures, without and with the option:
# enqueue one job per round trip (ENQUEUE1 jobs), and the drain of N preloaded no-op jobs by one worker process.
# Every figure is the median of RUNS runs with min–max. A benchmark, not a test: it asserts nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-20000}"
ENQUEUE1="${ENQUEUE1:-5000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-10}"
MASTER_PORT="${BENCH_MASTER_PORT:-6440}"
REPLICA_PORT="${BENCH_REPLICA_PORT:-6441}"

. bench/lib.sh
release_workerctl

DIR="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$DIR"; }
trap cleanup EXIT
for port in "$MASTER_PORT" "$REPLICA_PORT"; do
  extra=()
  [ "$port" = "$REPLICA_PORT" ] && extra=(--replicaof 127.0.0.1 "$MASTER_PORT")
  redis-server --port "$port" --bind 127.0.0.1 --dir "$DIR" --save "" --appendonly no --dbfilename "dump-$port.rdb" \
    "${extra[@]}" >"$DIR/redis-$port.log" 2>&1 &
  PIDS+=($!)
done
export REDIS_URL="redis://127.0.0.1:$MASTER_PORT/0"
R() { redis-cli -p "$MASTER_PORT" "$@"; }
until [ "$(redis-cli -p "$REPLICA_PORT" info replication 2>/dev/null | grep -c 'master_link_status:up')" = 1 ]; do sleep 0.1; done

FIGURES="$(mktemp -d)"
trap 'cleanup; rm -rf "$FIGURES"' EXIT
echo "== machine: $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); master :$MASTER_PORT, replica :$REPLICA_PORT, no persistence"
echo "== N=$N, ENQUEUE1=$ENQUEUE1, RUNS=$RUNS, concurrency $CONCURRENCY, REDIS_WAIT_TIMEOUT_MS=500"
for run in $(seq 1 "$RUNS"); do
  for mode in off on; do
    echo "-- run $run of $RUNS, wait $mode"
    if [ $mode = on ]; then export REDIS_WAIT_REPLICAS=1 REDIS_WAIT_TIMEOUT_MS=500; else unset REDIS_WAIT_REPLICAS REDIS_WAIT_TIMEOUT_MS; fi
    R flushall >/dev/null
    record "enqueue1_$mode" "$("$BIN" enqueue Noop --count "$ENQUEUE1" --batch 1 | grep -oE '[0-9]+ jobs/s' | grep -oE '[0-9]+')"
    R flushall >/dev/null
    "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null
    clock_start "$N" ours
    "$BIN" worker --no-database --concurrency "$CONCURRENCY" 2>"$DIR/worker.log" &
    WPID=$!
    clock_read
    kill -TERM $WPID; wait $WPID || true
    if grep -q "Redis replica unreachable" "$DIR/worker.log"; then echo "   (some acknowledgements were not confirmed in time)"; fi
    record "drain_$mode" "$(echo "$N / $ELAPSED" | bc -l)"
  done
done
echo "== results (median of $RUNS runs, min–max)"
report enqueue1_off jobs/s "enqueue one job per round trip, no WAIT"
report enqueue1_on jobs/s "enqueue one job per round trip, WAIT 1"
report drain_off jobs/s "drain $N no-op jobs, no WAIT"
report drain_on jobs/s "drain $N no-op jobs, WAIT 1 after each settlement batch"
