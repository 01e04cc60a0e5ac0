#!/usr/bin/env bash
# bench/redis-cpu.sh — Redis CPU per job: how many jobs per second one Redis core can carry for a whole fleet
# (issue 38, goal 1). Ours next to Ruby Sidekiq 6.4.1 on the same Redis, the same settings, clocked the same way.
#
#   bench/redis-cpu.sh                                   N=100000, RUNS=3, PROCS="1 8", PERSISTENCES="no always"
#   BIN=/path/to/workerctl RUNS=1 SKIP_SIDEKIQ=1 bench/redis-cpu.sh     one build, ours only (an A/B half)
#
# For each persistence (Redis CONFIG SET for the whole phase, both sides alike; an AOF rewritten and settled before
# each measured phase) and each run:
#   ours drain           N no-op jobs preloaded (`workerctl enqueue --batch 1000`), then P worker processes
#                        (`worker --no-database --concurrency CONCURRENCY`, every default-on feature of the build:
#                        reliable fetch, acknowledgement, stats) drain them, for each P in PROCS;
#   ours enqueue+drain   P idle workers, then N jobs enqueued in batches of 1000 while they drain: the producers'
#                        writes are part of the cost;
#   sidekiq basic        2 processes x 5 threads, Sidekiq's BasicFetch (BRPOP; not reliable: a killed process loses
#                        its jobs) draining the same N preloaded jobs;
#   sidekiq reliable     the same with gitlab-sidekiq-fetcher's ReliableFetch (Debian's ruby-gitlab-sidekiq-fetcher:
#                        a working list per process, LREM on acknowledgement), ours' guarantee.
# The figure: Redis's own CPU (INFO cpu used_cpu_sys + used_cpu_user: main and background threads) from the phase's
# start to the last job acknowledged (bench/drain_clock.py, which polls Redis every millisecond; its own cost,
# measured alone for one second in each run and printed as "clock only", is subtracted for the drain's duration;
# the enqueue + drain phase has no clock: it waits on stat:processed), divided by N:
# µs of Redis CPU per job, and the ceiling it implies for one Redis core (1e6 / µs jobs/s). Also each drain's rate.
# With PIN=1 (default on machines with 2+ cores) Redis runs on the last CPU alone and every other process (workers,
# producers, clock, Ruby) on the others (taskset), as bench/postgres.sh pins PostgreSQL; undone at exit.
# Every figure is the median of RUNS runs with min–max. A benchmark, not a test: it asserts nothing.
# Uses Redis database DB (default 60) of the private instance (scripts/services).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-100000}"
RUNS="${RUNS:-3}"
PROCS="${PROCS:-1 8}"
CONCURRENCY="${CONCURRENCY:-10}"
PERSISTENCES="${PERSISTENCES:-no always}"
DB="${DB:-60}"
PIN="${PIN:-$([ "$(nproc)" -ge 2 ] && echo 1 || echo 0)}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/$DB"
R() { redis-cli -u "$REDIS_URL" "$@"; }

. bench/lib.sh
release_workerctl

SIDEKIQ=0
if [ "${SKIP_SIDEKIQ:-0}" != 1 ] && command -v sidekiq >/dev/null; then SIDEKIQ=1; fi

FIGURES="$(mktemp -d)"
save_persistence
REDIS_PID="$(R info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')"
restore() {
  restore_persistence
  [ "$PIN" = 1 ] && taskset -a -cp "0-$(($(nproc) - 1))" "$REDIS_PID" >/dev/null 2>&1 || true
}
STARTED=()
stop_started() { for p in "${STARTED[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap 'stop_started; restore; rm -rf "$FIGURES"' EXIT

# Everything but Redis runs through $CLIENT (pinned off Redis's CPU when PIN=1).
CLIENT=()
if [ "$PIN" = 1 ]; then
  command -v taskset >/dev/null || { echo "PIN=1 needs taskset (util-linux)" >&2; exit 1; }
  taskset -a -cp "$(($(nproc) - 1))" "$REDIS_PID" >/dev/null
  CLIENT=(taskset -c "0-$(($(nproc) - 2))")
fi
clock_start_pinned() {  # as bench/lib.sh's clock_start, the clock pinned with the clients
  rm -f "$FIGURES/clock.ready"
  "${CLIENT[@]}" python3 bench/drain_clock.py "$REDIS_URL" "$1" "$2" "$FIGURES/clock.ready" >"$FIGURES/clock" &
  CLOCK_PID=$!
  until [ -e "$FIGURES/clock.ready" ]; do
    kill -0 "$CLOCK_PID" 2>/dev/null || { echo "the drain clock stopped before the drain began" >&2; exit 1; }
    sleep 0.01
  done
}
registered() { for _ in $(seq 1 600); do [ "$(R scard processes)" -ge "$1" ] && { sleep 0.5; return 0; }; sleep 0.05; done; echo "workers did not register" >&2; exit 1; }
preload() { R flushdb >/dev/null; "${CLIENT[@]}" "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null; aof_settled; }
per_job() { echo "($2 - $1) * 1000000 / $N" | bc -l; }  # per_job CPU_BEFORE CPU_AFTER -> µs per job
stop_workers() { for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done; for p in "$@"; do wait "$p" 2>/dev/null || true; done; }

start_ours() {  # start_ours P: sets PIDS
  PIDS=()
  for i in $(seq 1 "$1"); do
    "${CLIENT[@]}" "$BIN" worker --no-database --concurrency "$CONCURRENCY" 2>"/tmp/bench-redis-cpu-worker.$i.log" &
    PIDS+=($!); STARTED+=($!)
  done
}
start_sidekiq() {  # start_sidekiq basic|reliable: sets PIDS
  PIDS=()
  for i in 1 2; do
    BENCH_DONE=1 BENCH_RELIABLE=$([ "$1" = reliable ] && echo 1 || echo 0) \
      "${CLIENT[@]}" sidekiq -r ./bench/sidekiq_noop.rb -c 5 -q default >"/tmp/bench-redis-cpu-sidekiq.$i.log" 2>&1 &
    PIDS+=($!); STARTED+=($!)
  done
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== N=$N, RUNS=$RUNS, PROCS=$PROCS x concurrency $CONCURRENCY, persistences: $PERSISTENCES," \
     "Redis $([ "$PIN" = 1 ] && echo "pinned to CPU $(($(nproc) - 1)), clients on the others" || echo unpinned)," \
     "Sidekiq $([ $SIDEKIQ = 1 ] && ruby -rsidekiq -e 'print Sidekiq::VERSION' || echo skipped)"

for persistence in $PERSISTENCES; do
  use_persistence "$persistence"
  for run in $(seq 1 "$RUNS"); do
    echo "-- $persistence, run $run of $RUNS (load $(cut -d' ' -f1 /proc/loadavg))"
    # The clock's own polling, alone: the floor every figure below contains.
    preload
    cpu0=$(redis_cpu)
    clock_start_pinned "$N" ours
    sleep 1
    kill "$CLOCK_PID" 2>/dev/null || true; wait "$CLOCK_PID" 2>/dev/null || true
    CLOCK_CPU_PER_S=$(echo "$(redis_cpu) - $cpu0" | bc -l)
    record "${persistence}_clock_us_per_s" "$(echo "$CLOCK_CPU_PER_S * 1000000" | bc -l)"

    for procs in $PROCS; do
      preload
      cpu0=$(redis_cpu)
      clock_start_pinned "$N" ours
      start_ours "$procs"
      clock_read
      cpu1=$(redis_cpu)
      stop_workers "${PIDS[@]}"
      record "${persistence}_ours_${procs}_us" "$(per_job "$cpu0" "$(echo "$cpu1 - $CLOCK_CPU_PER_S * $ELAPSED" | bc -l)")"
      record "${persistence}_ours_${procs}_rate" "$(echo "$N / $ELAPSED" | bc -l)"
      echo "   ours, $procs process(es): drain $(printf %.2f "$(tail -1 "$FIGURES/${persistence}_ours_${procs}_us")") µs/job"

      R flushdb >/dev/null
      aof_settled
      start_ours "$procs"
      registered "$procs"
      cpu0=$(redis_cpu)
      "${CLIENT[@]}" "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null
      until [ "$(R get stat:processed)" = "$N" ]; do sleep 0.005; done
      cpu1=$(redis_cpu)
      stop_workers "${PIDS[@]}"
      record "${persistence}_ours_${procs}_enqueue_us" "$(per_job "$cpu0" "$cpu1")"
      echo "   ours, $procs process(es): enqueue + drain $(printf %.2f "$(per_job "$cpu0" "$cpu1")") µs/job"
    done

    if [ $SIDEKIQ = 1 ]; then
      for fetch in basic reliable; do
        preload
        cpu0=$(redis_cpu)
        clock_start_pinned "$N" sidekiq
        start_sidekiq "$fetch"
        clock_read
        cpu1=$(redis_cpu)
        stop_workers "${PIDS[@]}"
        record "${persistence}_sidekiq_${fetch}_us" "$(per_job "$cpu0" "$(echo "$cpu1 - $CLOCK_CPU_PER_S * $ELAPSED" | bc -l)")"
        record "${persistence}_sidekiq_${fetch}_rate" "$(echo "$N / $ELAPSED" | bc -l)"
      done
    fi
  done
done

ceiling() {  # ceiling NAME LABEL: the median µs/job and the jobs/s one Redis core carries at that cost
  [ -s "$FIGURES/$1" ] || return 0
  python3 - "$FIGURES/$1" "$2" <<'EOF'
import statistics, sys
v = [float(x) for x in open(sys.argv[1]) if x.strip()]
m = statistics.median(v)
print("%s: median %.2f µs of Redis CPU per job (min %.2f – max %.2f, %d runs) -> one Redis core: %s jobs/s"
      % (sys.argv[2], m, min(v), max(v), len(v), format(int(1e6 / m), ",") if m > 0 else "-"))
EOF
}
echo
echo "== Redis CPU per job (N=$N; the drain clock's own polling subtracted: see 'clock only')"
for persistence in $PERSISTENCES; do
  echo "-- persistence: $persistence"
  report "${persistence}_clock_us_per_s" "µs of Redis CPU per second" "clock only (1 ms polls)"
  for procs in $PROCS; do
    ceiling "${persistence}_ours_${procs}_us" "ours, $procs process(es) x $CONCURRENCY, drain"
    report "${persistence}_ours_${procs}_rate" jobs/s "   its drain rate"
    ceiling "${persistence}_ours_${procs}_enqueue_us" "ours, $procs process(es) x $CONCURRENCY, enqueue + drain"
  done
  if [ $SIDEKIQ = 1 ]; then
    for fetch in basic reliable; do
      ceiling "${persistence}_sidekiq_${fetch}_us" "sidekiq $fetch fetch, 2 x 5 threads, drain"
      report "${persistence}_sidekiq_${fetch}_rate" jobs/s "   its drain rate"
    done
  fi
done
