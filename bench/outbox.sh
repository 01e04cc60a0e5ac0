#!/usr/bin/env bash
# bench/outbox.sh — transactional enqueue (docs/outbox.md): commit-to-run latency and relay throughput.
#
#   bench/outbox.sh                     RATE=1000 jobs/s for LOAD_SECONDS=10, N=20000 rows for the throughput, RUNS=3
#   RATE=2000 LOAD_SECONDS=5 RUNS=1 bench/outbox.sh
#   DURATION=3600 bench/outbox.sh       soak: retention under load (below)
#
# Soak (DURATION set, seconds): pgbench enqueues SOAK_JOB (Noop) at RATE jobs/s for DURATION seconds while one
# `workerctl worker --outbox-relay` relays and runs them with a short window (`--outbox-retention RETENTION`, default
# 600 s; `--ledger-retention` the same). Every REPORT_EVERY seconds (60) it prints the job_outbox rows inserted and
# deleted in that interval (pg_stat_user_tables n_tup_ins / n_tup_del), rows live and waiting; every SIZE_EVERY
# seconds (600) the table, index and job_ledger sizes. With retention keeping up, deleted/min matches inserted/min
# once the window has passed, and the sizes level off. Meant for >= 1 h at >= 1,000 jobs/s on a release build;
# any DURATION works (a short RETENTION and SIZE_EVERY show it in minutes).
#
# Latency: pgbench (PostgreSQL's own load generator: a service in another language) calls
# `SELECT workers_enqueue('ProbeInsert', …)`, one autocommitted transaction per job, at RATE jobs/s (Poisson
# arrivals, CLIENTS=4 connections), while one `workerctl worker --outbox-relay --bench-jobs` (concurrency 10) relays and runs
# them. Per job: probe_rows.inserted_at (the job's INSERT, run by the worker) minus job_outbox.created_at (the
# enqueue's INSERT, just before its COMMIT), both read from PostgreSQL's clock; p50/p99 over every job of the run.
# Throughput: N rows committed in one transaction with no relay running, then one `workerctl relay`
# (--outbox-batch 500) moves them: rate = rows after the first batch / time between the first and last batch's
# pushed_at. Every figure is the median of RUNS runs with min–max. Prints the Redis and PostgreSQL persistence.
# A benchmark, not a test: it asserts nothing. Uses Redis database 73 and PostgreSQL database outbox_bench of the
# private instances (scripts/services; REDIS_PORT / PG_PORT choose them).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RATE="${RATE:-1000}"
SECONDS_LOAD="${LOAD_SECONDS:-10}"
N="${N:-20000}"
RUNS="${RUNS:-3}"
CLIENTS="${CLIENTS:-4}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/73"
ADMIN_URL="$DATABASE_URL"
export DATABASE_URL="${DATABASE_URL%/*}/outbox_bench"
R() { redis-cli -u "$REDIS_URL" "$@"; }
Q() { psql "$DATABASE_URL" -qtAX -c "$1"; }
DURATION="${DURATION:-}"

. bench/lib.sh
release_workerctl
FIGURES="$(mktemp -d)"

psql "$ADMIN_URL" -qtAX -c "DROP DATABASE IF EXISTS outbox_bench WITH (FORCE)" -c "CREATE DATABASE outbox_bench" >/dev/null
"$BIN" migrate --bench-tables >/dev/null 2>&1

PGB="$(mktemp)"
echo "SELECT workers_enqueue('ProbeInsert', '[\"bench\"]');" >"$PGB"
WORKER_LOG="$(mktemp)"
cleanup() { [ -n "${WPID:-}" ] && kill -TERM "$WPID" 2>/dev/null; rm -f "$PGB" "$WORKER_LOG"; rm -rf "$FIGURES"; }
trap cleanup EXIT

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== redis persistence: appendonly $(R config get appendonly | tail -1), appendfsync $(R config get appendfsync | tail -1)"
echo "== postgresql persistence: fsync $(Q 'SHOW fsync'), synchronous_commit $(Q 'SHOW synchronous_commit'), wal_sync_method $(Q 'SHOW wal_sync_method')"
[ -n "$DURATION" ] || echo "== RATE=$RATE jobs/s for $SECONDS_LOAD s (pgbench, $CLIENTS clients), N=$N rows for the relay throughput, RUNS=$RUNS"

if [ -n "$DURATION" ]; then
  RETENTION="${RETENTION:-600}"
  REPORT_EVERY="${REPORT_EVERY:-60}"
  SIZE_EVERY="${SIZE_EVERY:-600}"
  SOAK_JOB="${SOAK_JOB:-Noop}"
  echo "SELECT workers_enqueue('$SOAK_JOB', '[\"soak\"]');" >"$PGB"
  echo "== soak: $SOAK_JOB at RATE=$RATE jobs/s for DURATION=$DURATION s ($CLIENTS clients), --outbox-retention $RETENTION s;" \
       "report every $REPORT_EVERY s, sizes every $SIZE_EVERY s"
  R flushdb >/dev/null
  Q "TRUNCATE job_outbox, probe_rows, job_ledger"
  "$BIN" worker --bench-jobs --concurrency 10 --outbox-relay --lost-job-interval 0 --outbox-retention "$RETENTION" \
    --ledger-retention "$RETENTION" 2>"$WORKER_LOG" &
  WPID=$!
  until grep -q "outbox relay started" "$WORKER_LOG" && grep -q "worker started" "$WORKER_LOG"; do sleep 0.05; done
  PGB_OUT="$(mktemp)"
  pgbench -n -f "$PGB" -R "$RATE" -T "$DURATION" -c "$CLIENTS" -j 2 "$DATABASE_URL" >"$PGB_OUT" 2>&1 &
  PGBPID=$!
  stats() { Q "SELECT n_tup_ins, n_tup_del, n_live_tup FROM pg_stat_user_tables WHERE relname = 'job_outbox'"; }
  sizes() {
    Q "SELECT 'sizes: job_outbox table ' || pg_size_pretty(pg_table_size('job_outbox')) || ', indexes ' ||
              pg_size_pretty(pg_indexes_size('job_outbox')) || '; job_ledger ' || pg_size_pretty(pg_total_relation_size('job_ledger'))"
  }
  START=$(date +%s)
  IFS='|' read -r INS0 DEL0 _ <<<"$(stats)"
  NEXT_SIZE=0
  printf '%8s %12s %12s %10s %9s\n' "minute" "inserted" "deleted" "live" "waiting"
  while kill -0 "$PGBPID" 2>/dev/null; do
    ELAPSED_S=$(( $(date +%s) - START ))
    if [ "$ELAPSED_S" -ge "$NEXT_SIZE" ]; then echo "   t=${ELAPSED_S}s $(sizes)"; NEXT_SIZE=$((NEXT_SIZE + SIZE_EVERY)); fi
    sleep "$REPORT_EVERY" & wait $! || true
    IFS='|' read -r INS DEL LIVE <<<"$(stats)"
    WAITING=$(Q "SELECT count(*) FROM (SELECT 1 FROM job_outbox WHERE pushed_at IS NULL LIMIT 1000000) t")
    printf '%8s %12s %12s %10s %9s\n' "$(( ($(date +%s) - START) / 60 ))" "$((INS - INS0))" "$((DEL - DEL0))" "$LIVE" "$WAITING"
    INS0=$INS; DEL0=$DEL
  done
  wait "$PGBPID" || true
  echo "   pgbench: $(sed -nE 's/^(tps = [0-9.]+).*/\1 jobs\/s/p' "$PGB_OUT" | head -1), $(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1 jobs/p' "$PGB_OUT")"
  echo "   t=$(( $(date +%s) - START ))s $(sizes)"
  grep -c '"outbox: retention pass"\|outbox: retention pass' "$WORKER_LOG" | sed 's/^/   retention passes that deleted rows: /'
  kill -TERM "$WPID"; wait "$WPID" || true; WPID=""
  rm -f "$PGB_OUT"
  R flushdb >/dev/null
  exit 0
fi

for run in $(seq 1 "$RUNS"); do
  echo "-- run $run of $RUNS"
  R flushdb >/dev/null
  Q "TRUNCATE job_outbox, probe_rows, job_ledger"
  "$BIN" worker --bench-jobs --concurrency 10 --outbox-relay --lost-job-interval 0 2>"$WORKER_LOG" &
  WPID=$!
  until grep -q "outbox relay started" "$WORKER_LOG" && grep -q "worker started" "$WORKER_LOG"; do sleep 0.05; done
  TPS=$(pgbench -n -f "$PGB" -R "$RATE" -T "$SECONDS_LOAD" -c "$CLIENTS" -j 2 "$DATABASE_URL" 2>/dev/null | sed -nE 's/^tps = ([0-9.]+).*/\1/p')
  TOTAL=$(Q "SELECT count(*) FROM job_outbox")
  until [ "$(Q 'SELECT count(*) FROM probe_rows')" -ge "$TOTAL" ]; do sleep 0.1; done
  kill -TERM "$WPID"; wait "$WPID" || true; WPID=""
  LINE=$(Q "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2) || ' ' ||
                   round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2) || ' ' || count(*)
            FROM (SELECT extract(epoch FROM p.inserted_at - o.created_at) * 1000 AS ms
                  FROM job_outbox o JOIN probe_rows p USING (jid)) t")
  read -r P50 P99 JOBS <<<"$LINE"
  echo "   $JOBS jobs at $TPS jobs/s offered: commit-to-run p50 $P50 ms, p99 $P99 ms"
  record rate "$TPS"
  record p50 "$P50"
  record p99 "$P99"

  R flushdb >/dev/null
  Q "TRUNCATE job_outbox, probe_rows, job_ledger"
  Q "SELECT count(workers_enqueue('Noop')) FROM generate_series(1, $N)" >/dev/null
  "$BIN" relay --outbox-batch 500 --lost-job-interval 0 2>/dev/null &
  RPID=$!
  until [ "$(Q 'SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL')" -eq 0 ]; do sleep 0.05; done
  kill -TERM "$RPID"; wait "$RPID" || true
  THROUGHPUT=$(Q "SELECT round(($N - 500) / extract(epoch FROM max(pushed_at) - min(pushed_at))) FROM job_outbox")
  echo "   relay: $N rows, $(R llen queue:default) in Redis, $THROUGHPUT rows/s"
  record relay "$THROUGHPUT"
done
R flushdb >/dev/null

echo "== results (median of $RUNS runs, min–max)"
report rate jobs/s "enqueue rate offered by pgbench (one transaction per job)"
report p50 ms "commit-to-run p50 (enqueue INSERT -> the job's INSERT, PostgreSQL clock)"
report p99 ms "commit-to-run p99"
report relay rows/s "relay throughput, one relay, batches of 500, $N rows"
