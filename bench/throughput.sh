#!/usr/bin/env bash
# bench/throughput.sh — throughput and latency of the Swift worker, next to Ruby Sidekiq 6.4.1 on the same Redis.
#
#   bench/throughput.sh                 N=100000 no-op jobs, concurrency 10
#   N=20000 SKIP_SIDEKIQ=1 bench/throughput.sh
#
# Prints: enqueue rate (one at a time, and in batches of 1000), drain rate of N preloaded no-op jobs (ours: one process;
# Sidekiq: 2 processes x 5 threads), pickup latency p50/p99 at a steady 500 jobs/s, and worker peak RSS.
# A benchmark, not a test: it asserts nothing. Uses Redis database 60 of the private instance (scripts/services).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-100000}"
CONCURRENCY="${CONCURRENCY:-10}"
STEADY_RATE="${STEADY_RATE:-500}"
STEADY_SECONDS="${STEADY_SECONDS:-10}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/60"
R() { redis-cli -u "$REDIS_URL" "$@"; }

. bench/lib.sh
release_workerctl

# Seconds from the first job taken until queue:default is empty. Both systems are timed the same way: start-up
# (Ruby's takes seconds) is not counted, and neither is Sidekiq's 5 s counter flush; what is still running at the
# end is at most a few dozen jobs.
wait_for_drain() {
  local start now total=$1
  while [ "$(R llen queue:default)" -ge "$total" ]; do sleep 0.005; done
  start=$(date +%s.%N)
  while [ "$(R llen queue:default)" -gt 0 ]; do sleep 0.01; done
  now=$(date +%s.%N)
  echo "$now - $start" | bc -l
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
R flushdb >/dev/null
echo "== enqueue (Swift client)"
"$BIN" enqueue Noop --count 20000 --batch 1
"$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null
R flushdb >/dev/null
"$BIN" enqueue Noop --count "$N" --batch 1000

echo "== drain $N preloaded no-op jobs: workerctl worker --concurrency $CONCURRENCY (one process)"
"$BIN" worker --no-database --concurrency "$CONCURRENCY" 2>/tmp/bench-worker.log &
WPID=$!
ELAPSED=$(wait_for_drain "$N")
OURS=$(echo "$N / $ELAPSED" | bc -l)
printf "ours: %d jobs in %.2f s = %.0f jobs/s\n" "$N" "$ELAPSED" "$OURS"

echo "== pickup latency at a steady $STEADY_RATE jobs/s for $STEADY_SECONDS s (same worker)"
kill -TERM $WPID; wait $WPID || true
"$BIN" worker --no-database --concurrency "$CONCURRENCY" 2>/tmp/bench-worker.log &
WPID=$!
sleep 1
"$BIN" enqueue Noop --count $((STEADY_RATE * STEADY_SECONDS)) --rate "$STEADY_RATE"
sleep 1
kill -TERM $WPID; wait $WPID || true
grep '"stopped"\|stopped' /tmp/bench-worker.log | tail -1 | sed 's/^/ours: /'

if [ "${SKIP_SIDEKIQ:-0}" != 1 ] && command -v sidekiq >/dev/null; then
  echo "== drain $N preloaded no-op jobs: Ruby Sidekiq $(ruby -rsidekiq -e 'print Sidekiq::VERSION'), 2 processes x 5 threads"
  R flushdb >/dev/null
  "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null
  PIDS=()
  for _ in 1 2; do
    sidekiq -r ./bench/sidekiq_noop.rb -c 5 -q default >/tmp/bench-sidekiq.log 2>&1 &
    PIDS+=($!)
  done
  ELAPSED=$(wait_for_drain "$N")
  THEIRS=$(echo "$N / $ELAPSED" | bc -l)
  for p in "${PIDS[@]}"; do
    grep -m1 VmHWM /proc/$p/status | sed "s/^/sidekiq pid $p /" || true
    kill -TERM "$p"
  done
  wait || true
  printf "sidekiq: %d jobs in %.2f s = %.0f jobs/s\n" "$N" "$ELAPSED" "$THEIRS"
  printf "ratio ours/sidekiq: %.1f\n" "$(echo "$OURS / $THEIRS" | bc -l)"

  echo "== sidekiq pickup latency at a steady $STEADY_RATE jobs/s for $STEADY_SECONDS s (2 processes x 5 threads)"
  R flushdb >/dev/null
  PIDS=()
  for _ in 1 2; do
    BENCH_PICKUP=1 sidekiq -r ./bench/sidekiq_noop.rb -c 5 -q default >/tmp/bench-sidekiq.log 2>&1 &
    PIDS+=($!)
  done
  sleep 4   # Ruby boots
  "$BIN" enqueue Noop --count $((STEADY_RATE * STEADY_SECONDS)) --rate "$STEADY_RATE" >/dev/null
  sleep 2
  for p in "${PIDS[@]}"; do kill -TERM "$p"; done
  wait || true
  R lrange bench:pickup 0 -1 | python3 bench/percentiles.py "sidekiq: pickup"
fi
R flushdb >/dev/null
