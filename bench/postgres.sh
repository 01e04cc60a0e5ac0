#!/usr/bin/env bash
# bench/postgres.sh — jobs that each do one small PostgreSQL transaction through the ledger (ProbeInsert: ledger row
# + one insert), next to pgbench running the same SQL on the same server (the practical ceiling), one
# transaction per pgbench run. Our jobs run twice: one COMMIT per job (--commit-batch 1) and with group
# commit (ProbeInsert sets JobOptions.groupCommit: up to 50 jobs, each in its own savepoint, per COMMIT).
# Prints jobs/s, pgbench's transactions/s and both ratios. A benchmark: it asserts nothing.
#
#   bench/postgres.sh                     N=20000 jobs, concurrency 10
#   N=5000 CONCURRENCY=4 bench/postgres.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-20000}"
CONCURRENCY="${CONCURRENCY:-10}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/59"
ADMIN_URL="$DATABASE_URL"
export DATABASE_URL="${DATABASE_URL%/*}/pgbench_jobs"
. bench/lib.sh
release_workerctl
R() { redis-cli -u "$REDIS_URL" "$@"; }

psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS pgbench_jobs" -c "CREATE DATABASE pgbench_jobs" >/dev/null
"$BIN" migrate --bench-tables >/dev/null 2>&1   # + probe_rows, the bench table ProbeInsert writes
R flushdb >/dev/null

processed() { local v; v=$(R get stat:processed); echo "${v:-0}"; }
# drain LABEL EXTRA-WORKER-FLAGS...: enqueue N ProbeInsert jobs, drain them with one worker, print jobs/s.
drain() {
  local label="$1"; shift
  R flushdb >/dev/null
  psql "$DATABASE_URL" -qc "TRUNCATE job_ledger, probe_rows" >/dev/null
  echo "== $N ProbeInsert jobs drained by one workerctl worker --concurrency $CONCURRENCY (pool $CONCURRENCY connections) $*"
  "$BIN" enqueue ProbeInsert --args '["bench"]' --count "$N" --batch 1000 >/dev/null
  local start end wpid
  start=$(date +%s.%N)
  "$BIN" worker --bench-jobs --concurrency "$CONCURRENCY" "$@" 2>/tmp/bench-pg-worker.log &
  wpid=$!
  while [ "$(processed)" -lt "$N" ]; do sleep 0.02; done
  end=$(date +%s.%N)
  kill -TERM $wpid; wait $wpid || true
  local rows
  rows=$(psql "$DATABASE_URL" -tAc "SELECT count(*) FROM probe_rows")
  JOBS=$(echo "$N / ($end - $start)" | bc -l)
  printf "%s: %d jobs in %.2f s = %.0f jobs/s (rows written: %d)\n" "$label" "$N" "$(echo "$end - $start" | bc -l)" "$JOBS" "$rows"
}
drain "one COMMIT per job" --commit-batch 1
PER_JOB=$JOBS
drain "group commit (default: up to 50 jobs per COMMIT)"
GROUPED=$JOBS

echo "== pgbench: the same transaction, $CONCURRENCY clients, $N transactions"
cat > /tmp/ledger-insert.sql <<'SQL'
\set n random(1, 1000000000)
BEGIN;
INSERT INTO job_ledger (jid, job_class, queue, started_at, finished_at) VALUES ('pgb' || :client_id || '-' || :n, 'ProbeInsert', 'default', clock_timestamp(), clock_timestamp()) ON CONFLICT (jid) DO NOTHING;
INSERT INTO probe_rows (jid, note) VALUES ('pgb' || :client_id || '-' || :n, 'bench');
COMMIT;
SQL
PGBENCH=$(ls /usr/lib/postgresql/*/bin/pgbench | head -1)
OUT=$("$PGBENCH" -n -f /tmp/ledger-insert.sql -c "$CONCURRENCY" -j 2 -t $((N / CONCURRENCY)) "$DATABASE_URL" 2>&1)
TPS=$(echo "$OUT" | grep -oE 'tps = [0-9.]+' | head -1 | cut -d' ' -f3)
echo "$OUT" | grep -E "tps|latency average"
printf "ratio jobs/pgbench, one COMMIT per job: %.2f\n" "$(echo "$PER_JOB / $TPS" | bc -l)"
printf "ratio jobs/pgbench, group commit:      %.2f\n" "$(echo "$GROUPED / $TPS" | bc -l)"
psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS pgbench_jobs" >/dev/null
R flushdb >/dev/null
