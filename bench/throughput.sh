#!/usr/bin/env bash
# bench/throughput.sh — throughput and latency of the Swift worker, next to Ruby Sidekiq 6.4.1 on the same Redis.
#
#   bench/throughput.sh                 N=100000 no-op jobs, concurrency 10, RUNS=3
#   N=20000 RUNS=3 SKIP_SIDEKIQ=1 bench/throughput.sh
#
# Prints: the Redis persistence in use (appendonly / appendfsync: AOF `always` makes every write a disk sync, which
# costs Sidekiq's one write per job more than our batched scripts), enqueue rate (one at a time, and in batches of
# 1000), drain rate of N preloaded no-op jobs (ours: one process; Sidekiq: 2 processes x 5 threads), pickup latency
# p50/p99 at a steady 500 jobs/s, and worker peak RSS. Every figure is the median of RUNS runs with min–max.
# A benchmark, not a test: it asserts nothing. Uses Redis database 60 of the private instance (scripts/services).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-100000}"
RUNS="${RUNS:-3}"
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

SIDEKIQ=0
if [ "${SKIP_SIDEKIQ:-0}" != 1 ] && command -v sidekiq >/dev/null; then SIDEKIQ=1; fi

FIGURES="$(mktemp -d)"
trap 'rm -rf "$FIGURES"' EXIT

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== redis persistence: appendonly $(R config get appendonly | tail -1), appendfsync $(R config get appendfsync | tail -1)"
echo "== N=$N, RUNS=$RUNS, concurrency $CONCURRENCY, Sidekiq $([ $SIDEKIQ = 1 ] && ruby -rsidekiq -e 'print Sidekiq::VERSION' || echo skipped)"

for run in $(seq 1 "$RUNS"); do
  echo "-- run $run of $RUNS"
  R flushdb >/dev/null
  record enqueue1 "$("$BIN" enqueue Noop --count 20000 --batch 1 | grep -oE '[0-9]+ jobs/s' | grep -oE '[0-9]+')"
  R flushdb >/dev/null
  record enqueue1000 "$("$BIN" enqueue Noop --count "$N" --batch 1000 | grep -oE '[0-9]+ jobs/s' | grep -oE '[0-9]+')"
  R flushdb >/dev/null
  "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null

  "$BIN" worker --no-database --concurrency "$CONCURRENCY" 2>/tmp/bench-worker.log &
  WPID=$!
  ELAPSED=$(clock_drain "$N" ours_acknowledged)
  kill -TERM $WPID; wait $WPID || true
  OURS=$(echo "$N / $ELAPSED" | bc -l)
  record ours_drain "$OURS"
  record ours_rss_drain "$(grep stopped /tmp/bench-worker.log | tail -1 | field peak_rss_kb)"

  "$BIN" worker --no-database --concurrency "$CONCURRENCY" 2>/tmp/bench-worker.log &
  WPID=$!
  sleep 1
  "$BIN" enqueue Noop --count $((STEADY_RATE * STEADY_SECONDS)) --rate "$STEADY_RATE" >/dev/null
  sleep 1
  kill -TERM $WPID; wait $WPID || true
  STOPPED=$(grep stopped /tmp/bench-worker.log | tail -1)
  record ours_p50 "$(echo "$STOPPED" | field pickup_p50_ms)"
  record ours_p99 "$(echo "$STOPPED" | field pickup_p99_ms)"

  if [ $SIDEKIQ = 1 ]; then
    R flushdb >/dev/null
    "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null
    PIDS=()
    for _ in 1 2; do
      BENCH_DONE=1 sidekiq -r ./bench/sidekiq_noop.rb -c 5 -q default >/tmp/bench-sidekiq.log 2>&1 &
      PIDS+=($!)
    done
    ELAPSED=$(clock_drain "$N" sidekiq_acknowledged)
    THEIRS=$(echo "$N / $ELAPSED" | bc -l)
    RSS=0
    for p in "${PIDS[@]}"; do
      HWM=$(awk '/VmHWM/ {print $2}' /proc/"$p"/status)
      [ "$HWM" -gt "$RSS" ] && RSS=$HWM
      kill -TERM "$p"
    done
    wait "${PIDS[@]}" || true
    record sidekiq_drain "$THEIRS"
    record sidekiq_rss_drain "$RSS"
    record ratio "$(echo "$OURS / $THEIRS" | bc -l)"

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
    wait "${PIDS[@]}" || true
    LINE=$(R lrange bench:pickup 0 -1 | python3 bench/percentiles.py "sidekiq: pickup")
    record sidekiq_p50 "$(echo "$LINE" | sed -nE 's/.* p50 ([0-9.]+) ms.*/\1/p')"
    record sidekiq_p99 "$(echo "$LINE" | sed -nE 's/.* p99 ([0-9.]+) ms.*/\1/p')"
  fi
done
R flushdb >/dev/null

echo "== results (median of $RUNS runs, min–max); drain clocks stop when every job is acknowledged"
report enqueue1 jobs/s "enqueue one round trip each (20000 jobs)"
report enqueue1000 jobs/s "enqueue in batches of 1000 ($N jobs)"
report ours_drain jobs/s "ours: drain $N no-op jobs, one process, concurrency $CONCURRENCY"
report ours_p50 ms "ours: pickup p50 at $STEADY_RATE jobs/s (histogram bucket upper bound)"
report ours_p99 ms "ours: pickup p99 at $STEADY_RATE jobs/s (histogram bucket upper bound)"
report ours_rss_drain kB "ours: peak RSS of the draining worker"
if [ $SIDEKIQ = 1 ]; then
  report sidekiq_drain jobs/s "sidekiq: drain $N no-op jobs, 2 processes x 5 threads"
  report ratio "" "ratio ours/sidekiq (per run)"
  report sidekiq_p50 ms "sidekiq: pickup p50 at $STEADY_RATE jobs/s (exact samples)"
  report sidekiq_p99 ms "sidekiq: pickup p99 at $STEADY_RATE jobs/s (exact samples)"
  report sidekiq_rss_drain kB "sidekiq: peak RSS of the larger draining process"
fi
