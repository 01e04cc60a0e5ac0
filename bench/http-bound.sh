#!/usr/bin/env bash
# bench/http-bound.sh — HTTP-bound jobs: how many provider calls one worker process keeps in flight (issue 38,
# goal 2). The domain's jobs (Apple, Google, Nominatim, the Subscription Service) spend nearly all their time waiting
# on HTTP; this drains N `HttpProbe` jobs (Sources/BenchJobs/HttpProbeJob.swift: one GET each through the runtime's
# libcurl client) against bench/slow_http.c, an epoll server on 127.0.0.1 that answers every request DELAY_MS after
# it arrived and counts the requests it holds at once.
#
#   bench/http-bound.sh                         N=20000, CONCURRENCY=1000, DELAY_MS=100, RUNS=3
#   BIN=/path/to/workerctl RUNS=1 SKIP_SIDEKIQ=1 bench/http-bound.sh
#
# Prints, median (min–max) of RUNS: ours — drain rate (jobs/s; the goal is ≥ CONCURRENCY / DELAY × 0.8), the most
# requests in flight at once (counted by the server), the worker's peak RSS, its CPU per job, the longest and the
# p99 enqueue-to-start wait (exact samples, as bench/throughput.sh's pickup: no job starved), and the server's own
# CPU; Sidekiq 6.4.1 the same with SIDEKIQ_CONCURRENCY threads in one process (default 50: Sidekiq's wiki,
# "Advanced Options", advises against more than 50 threads per process), its job a Net::HTTP GET with a
# keep-alive connection per thread (bench/sidekiq_noop.rb, `HttpProbe`). Both sides drain the same preloaded jobs.
# Redis AOF as scripts/services sets it (always). A benchmark, not a test: it asserts nothing.
# Uses Redis database DB (default 60) of the private instance (scripts/services).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-20000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-1000}"
SIDEKIQ_CONCURRENCY="${SIDEKIQ_CONCURRENCY:-50}"
SIDEKIQ_N="${SIDEKIQ_N:-$((N / 10))}"
DELAY_MS="${DELAY_MS:-100}"
PORT="${PORT:-18181}"
DB="${DB:-60}"
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
chmod 755 "$FIGURES"
STARTED=()
stop_started() { for p in "${STARTED[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap 'stop_started; rm -rf "$FIGURES"' EXIT
cc -O2 -o "$FIGURES/slow_http" bench/slow_http.c
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

URL="http://127.0.0.1:$PORT/v1/probe"
start_server() {
  rm -f "$FIGURES/server.stats"
  "$FIGURES/slow_http" "$PORT" "$DELAY_MS" "$FIGURES/server.stats" 2>>"$FIGURES/server.err" &
  SERVER=$!; STARTED+=($SERVER)
  for _ in $(seq 1 100); do curl -s -o /dev/null "$URL" && return 0; sleep 0.05; done
  echo "bench/slow_http did not start" >&2; exit 1
}
# Stops the server and waits for it in this shell (not in a `$(…)` subshell, whose `wait` cannot wait for it: the
# figures were read while the server was still writing them — missing, or an earlier run's). A server that wrote none
# stops the benchmark with what it said.
stop_server() {
  kill -TERM "$SERVER"; wait "$SERVER" || true
  [ -s "$FIGURES/server.stats" ] || { echo "bench/slow_http wrote no figures:" >&2; cat "$FIGURES/server.err" >&2; exit 1; }
}
stat_of() { grep -oE "$1=[0-9.]+" | cut -d= -f2; }
samples_max() { cat "$1"/pickup.* | sort -g | tail -1; }

# drain SIDE COUNT: COUNT HttpProbe jobs preloaded, the side's worker started, clocked until all are acknowledged.
drain() {
  local side=$1 count=$2 samples="$FIGURES/samples-$1-$run" wpid cpu stats line
  mkdir -m 777 "$samples"
  R flushdb >/dev/null
  "$BIN" enqueue HttpProbe --args "[\"$URL\",\"$samples\"]" --count "$count" --batch 1000 >/dev/null
  start_server
  clock_start "$count" "$side"
  if [ "$side" = ours ]; then
    "$BIN" worker --no-database --bench-jobs --concurrency "$CONCURRENCY" 2>"$FIGURES/worker.log" &
  else
    BENCH_DONE=1 sidekiq -r ./bench/sidekiq_noop.rb -c "$SIDEKIQ_CONCURRENCY" -q default >"$FIGURES/worker.log" 2>&1 &
  fi
  wpid=$!; STARTED+=($wpid)
  clock_read
  cpu=$(process_cpu "$wpid")
  local rss
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$wpid/status")
  kill -TERM "$wpid"; wait "$wpid" || true
  stop_server
  stats=$(cat "$FIGURES/server.stats")
  record "${side}_rate" "$(echo "$count / $ELAPSED" | bc -l)"
  record "${side}_in_flight" "$(echo "$stats" | stat_of max_in_flight)"
  record "${side}_server_cpu_ms_per_1000" "$(echo "$(echo "$stats" | stat_of cpu_s) * 1000000 / $count" | bc -l)"
  record "${side}_connections" "$(echo "$stats" | stat_of connections)"
  record "${side}_rss_kb" "$rss"
  record "${side}_cpu_us" "$(echo "$cpu * 1000000 / $count" | bc -l)"
  record "${side}_wait_max_ms" "$(echo "$(samples_max "$samples") * 1000" | bc -l)"
  line=$(cat "$samples"/pickup.* | python3 bench/percentiles.py "$side: enqueue-to-start")
  record "${side}_wait_p99_ms" "$(echo "$line" | sed -nE 's/.* p99 ([0-9.]+) ms.*/\1/p')"
  echo "   $side: $(printf %.0f "$(tail -1 "$FIGURES/${side}_rate")") jobs/s, $(echo "$stats" | stat_of max_in_flight) in flight at most, RSS ${rss} kB; $line"
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== N=$N HttpProbe jobs, server delay ${DELAY_MS} ms, ours: concurrency $CONCURRENCY; Sidekiq: $SIDEKIQ_N jobs," \
     "$SIDEKIQ_CONCURRENCY threads, $([ $SIDEKIQ = 1 ] && ruby -rsidekiq -e 'print Sidekiq::VERSION' || echo skipped); RUNS=$RUNS"
for run in $(seq 1 "$RUNS"); do
  echo "-- run $run of $RUNS (load $(cut -d' ' -f1 /proc/loadavg))"
  drain ours "$N"
  [ $SIDEKIQ = 1 ] && drain sidekiq "$SIDEKIQ_N"
done

echo
echo "== HTTP-bound drain (goal: ≥ $(echo "$CONCURRENCY * 1000 / $DELAY_MS * 0.8" | bc) jobs/s, ≥ $CONCURRENCY in flight, RSS ≤ 100 MB)"
for side in ours sidekiq; do
  [ $side = sidekiq ] && [ $SIDEKIQ = 0 ] && continue
  report "${side}_rate" jobs/s "$side: drain rate"
  report "${side}_in_flight" requests "$side: most requests in flight at once (server's count)"
  report "${side}_connections" "" "$side: connections the server accepted (keep-alive: about the concurrency)"
  report "${side}_rss_kb" kB "$side: worker peak RSS"
  report "${side}_cpu_us" "µs" "$side: worker CPU per job"
  report "${side}_wait_p99_ms" ms "$side: enqueue-to-start p99"
  report "${side}_wait_max_ms" ms "$side: longest enqueue-to-start wait"
  report "${side}_server_cpu_ms_per_1000" "ms" "$side: the server's own CPU per 1,000 requests"
done
