#!/usr/bin/env bash
# bench/postgres.sh — jobs that each write to PostgreSQL through the ledger (ProbeInsert: one job_ledger row + one
# probe_rows row per job), next to pgbench writing the same rows with the same SQL on the same server.
#
#   bench/postgres.sh                     N=20000 jobs, concurrency 10, RUNS=3
#   N=5000 CONCURRENCY=4 RUNS=1 bench/postgres.sh
#
# Six ways to write N jobs' rows, each run RUNS times, alternating, every figure the median with min–max:
#   ours, one COMMIT per job     workerctl worker --commit-batch 1: BEGIN, ledger row, probe row, COMMIT per job
#   ours, group commit           the default: up to 50 jobs per COMMIT; their 50 ledger rows in one statement sent
#                                with BEGIN, then each job's row written with `connection.write` (deferred: sent
#                                with the COMMIT, in one pipeline), statements prepared per session, no savepoint
#                                (a group whose job fails is rolled back and run again with a savepoint per job)
#   pgbench, 1 job per COMMIT    BEGIN; ledger row; probe row; COMMIT — one transaction per job (simple protocol)
#   pgbench, 50 jobs per COMMIT  BEGIN; 50 x (ledger row; probe row); COMMIT — the same batching, one round trip per
#                                statement (simple protocol), no queue, Redis or job runtime
#   pgbench, 50 per COMMIT,      the same 102 statements in one pipeline (\startpipeline … \endpipeline, pgbench >= 14)
#     pipelined                  with prepared statements (-M prepared): one round trip per transaction, the least
#                                client and protocol work per row pgbench can do — "the best pgbench can do" here
# Ours: the clock runs from the worker's start (its start-up counts against it) until every job is acknowledged
# in Redis (queue empty, no in-flight list) and the rows are counted: jobs succeeded = probe rows whose jid is in
# the ledger, rows written = probe_rows rows; a run whose rows are not exactly N (one per job, none doubled) or that
# left jobs in retry/dead is reported as failed and stops the script. pgbench: its transactions/s (connection time
# excluded, which favours it) times the jobs per transaction, and the rows it wrote are counted the same way.
# Pool size = concurrency = pgbench clients. A benchmark: it asserts nothing beyond the row counts.
# CPU per job of every way: PostgreSQL's (all its processes), Redis's and the client's (the worker, or pgbench), so
# the figures say where the time goes on a machine where all three share the cores.
# N: at ~30,000 jobs/s the default 20,000 is 0.7 s, of which the worker's start-up (~50 ms) is part of ours; a run
# with N=100000 (both sides get the same N) gave the same ratios within the noise (docs/benchmarks.md), so the default stays.
# PIN_POSTGRES=1: PostgreSQL (all its processes) on CPU 0; Redis, the worker, pgbench and the drain clock on the
# other CPUs (taskset), as when the database has a machine of its own; both sides pinned alike; undone at exit.
# Uses Redis database DB (default 59) of the private instance and a scratch database pgbench_jobs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-20000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-10}"
PER_COMMIT=50
DB="${DB:-59}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/$DB"
ADMIN_URL="$DATABASE_URL"
export DATABASE_URL="${DATABASE_URL%/*}/pgbench_jobs"
. bench/lib.sh
release_workerctl
R() { redis-cli -u "$REDIS_URL" "$@"; }
P() { psql "$DATABASE_URL" -tAc "$1"; }
FIGURES="$(mktemp -d)"
# The clients' CPUs: all of them, or (PIN_POSTGRES=1) all but CPU 0, which PostgreSQL then has to itself.
CLIENT=()
pin_postgres() {  # pin_postgres CPUS-FOR-POSTGRES CPUS-FOR-REDIS: sets the affinity of every server process
  local pid
  for pid in "$POSTMASTER" $(pgrep -P "$POSTMASTER"); do taskset -a -cp "$1" "$pid" >/dev/null 2>&1 || true; done
  taskset -a -cp "$2" "$REDIS_PID" >/dev/null
}
cleanup() {
  rm -rf "$FIGURES"
  if [ "${PIN_POSTGRES:-0}" = 1 ] && [ -n "${POSTMASTER:-}" ]; then pin_postgres "0-$(($(nproc) - 1))" "0-$(($(nproc) - 1))"; fi
}
trap cleanup EXIT

psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS pgbench_jobs" -c "CREATE DATABASE pgbench_jobs" >/dev/null
"$BIN" migrate --bench-tables >/dev/null 2>&1   # + probe_rows, the bench table ProbeInsert writes
R flushdb >/dev/null
PGBENCH=$(ls /usr/lib/postgresql/*/bin/pgbench | sort -V | tail -1)
PGBENCH_MAJOR=$("$PGBENCH" --version | grep -oE '[0-9]+' | head -1)   # pipelines need pgbench >= 14
[ "$PGBENCH_MAJOR" -ge 14 ] || echo "== $PGBENCH is older than 14: no pipelined pgbench row" >&2

# CPU per job, to say where the time goes (both sides the same way; seconds of CPU from /proc, 10 ms ticks, and
# Redis's INFO; redis_cpu and process_cpu come from bench/lib.sh): PostgreSQL = every server process (the
# postmaster's own time, its reaped children's — backends of a finished client — and its live children's, so
# pgbench's backends that exit with it are counted); Redis = its main thread and background threads (pgbench does
# not use it); client = the worker process, or the pgbench process.
TICK=$(getconf CLK_TCK)
POSTMASTER=$(head -1 "$(P 'SHOW data_directory')/postmaster.pid")
postgres_cpu() {  # seconds of CPU used so far by the PostgreSQL server, all its processes
  local ticks child
  ticks=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$POSTMASTER/stat")
  for child in $(pgrep -P "$POSTMASTER"); do
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$child/stat" 2>/dev/null || echo 0)))
  done
  echo "$ticks / $TICK" | bc -l
}
# record_cpu NAME PG0 PG1 REDIS0 REDIS1 CLIENT: records NAME_pg_us, NAME_redis_us, NAME_client_us (µs per job).
record_cpu() {
  record "$1_pg_us" "$(echo "($3 - $2) * 1000000 / $N" | bc -l)"
  record "$1_redis_us" "$(echo "($5 - $4) * 1000000 / $N" | bc -l)"
  record "$1_client_us" "$(echo "$6 * 1000000 / $N" | bc -l)"
  printf "   %s CPU per job: PostgreSQL %.1f µs, Redis %.1f µs, client %.1f µs\n" "$1" \
    "$(tail -1 "$FIGURES/$1_pg_us")" "$(tail -1 "$FIGURES/$1_redis_us")" "$(tail -1 "$FIGURES/$1_client_us")"
}
REDIS_PID=$(R info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
if [ "${PIN_POSTGRES:-0}" = 1 ]; then
  [ "$(nproc)" -ge 2 ] || { echo "PIN_POSTGRES=1 needs at least 2 CPUs" >&2; exit 1; }
  command -v taskset >/dev/null || { echo "PIN_POSTGRES=1 needs taskset (util-linux)" >&2; exit 1; }
  pin_postgres 0 "1-$(($(nproc) - 1))"
  CLIENT=(taskset -c "1-$(($(nproc) - 1))")
fi
# Waits until the server has reaped the backends of a client that just left (their time then counts in the
# postmaster's), at most 2 s.
settle_backends() {
  local i
  for i in $(seq 1 40); do
    [ "$(P "SELECT count(*) FROM pg_stat_activity WHERE datname = 'pgbench_jobs' AND pid <> pg_backend_pid()")" = 0 ] && break
    sleep 0.05
  done
  sleep 0.1
}

# Rows check after a run: N probe rows, N distinct jids, each in the ledger. Prints "rows succeeded".
count_rows() { P "SELECT count(*), count(DISTINCT p.jid) FILTER (WHERE l.jid IS NOT NULL) FROM probe_rows p LEFT JOIN job_ledger l ON l.jid = p.jid" | tr '|' ' '; }

# ours NAME FLAGS...: drain N ProbeInsert jobs with one worker; records NAME (jobs succeeded per second).
ours() {
  local name="$1"; shift
  R flushdb >/dev/null
  P "TRUNCATE job_ledger, probe_rows" >/dev/null
  "$BIN" enqueue ProbeInsert --args '["bench"]' --count "$N" --batch 1000 >/dev/null
  local start end wpid rows succeeded left pg0 pg1 redis0 redis1 client
  settle_backends; pg0=$(postgres_cpu); redis0=$(redis_cpu)
  start=$(date +%s.%N)
  "${CLIENT[@]}" "$BIN" worker --bench-jobs --concurrency "$CONCURRENCY" "$@" 2>/tmp/bench-pg-worker.log &
  wpid=$!
  # Every job acknowledged: the drain clock with a start condition already met (N + 1), so start-up counts here.
  "${CLIENT[@]}" python3 bench/drain_clock.py "$REDIS_URL" $((N + 1)) ours >/dev/null
  end=$(date +%s.%N)
  client=$(process_cpu $wpid)
  kill -TERM $wpid; wait $wpid || true
  settle_backends; pg1=$(postgres_cpu); redis1=$(redis_cpu)
  read -r rows succeeded <<<"$(count_rows)"
  left=$(( $(R zcard retry) + $(R zcard dead) ))
  if [ "$rows" -ne "$N" ] || [ "$succeeded" -ne "$N" ] || [ "$left" -ne 0 ]; then
    echo "$name: FAILED: $rows rows, $succeeded jobs succeeded, $left in retry/dead (expected $N, $N, 0); see /tmp/bench-pg-worker.log" >&2
    exit 1
  fi
  record "$name" "$(echo "$succeeded / ($end - $start)" | bc -l)"
  printf "   %s: %d jobs succeeded, %d rows, %.0f jobs/s\n" "$name" "$succeeded" "$rows" "$(echo "$succeeded / ($end - $start)" | bc -l)"
  record_cpu "$name" "$pg0" "$pg1" "$redis0" "$redis1" "$client"
}

# pgbench NAME JOBS-PER-TRANSACTION [pipeline]: N jobs' rows by CONCURRENCY clients; records NAME (jobs per
# second). `pipeline`: the transaction's statements in one pipeline, prepared (-M prepared); else the simple protocol.
pgbench_run() {
  local name="$1" per="$2" mode="${3:-}" script="$FIGURES/$1.sql" out tps rows succeeded pg0 pg1 redis0 redis1 client
  local protocol=(-M simple)
  P "TRUNCATE job_ledger, probe_rows" >/dev/null
  {
    if [ "$mode" = pipeline ]; then echo "\\startpipeline"; protocol=(-M prepared); fi
    echo "BEGIN;"
    for i in $(seq 1 "$per"); do
      echo "\\set n$i random(1, 1000000000000)"
      echo "INSERT INTO job_ledger (jid, job_class, queue, started_at, finished_at) VALUES ('pgb' || :client_id || '-' || :n$i, 'ProbeInsert', 'default', clock_timestamp(), clock_timestamp()) ON CONFLICT (jid) DO NOTHING;"
      echo "INSERT INTO probe_rows (jid, note) VALUES ('pgb' || :client_id || '-' || :n$i, 'bench');"
    done
    echo "COMMIT;"
    if [ "$mode" = pipeline ]; then echo "\\endpipeline"; fi
  } >"$script"
  settle_backends; pg0=$(postgres_cpu); redis0=$(redis_cpu)
  out=$(TIMEFORMAT='cpu %U %S'; { time "${CLIENT[@]}" "$PGBENCH" -n "${protocol[@]}" -f "$script" -c "$CONCURRENCY" -j 2 \
    -t $((N / CONCURRENCY / per)) "$DATABASE_URL"; } 2>&1)
  client=$(echo "$out" | awk '/^cpu / {print $2 + $3}' | tail -1)
  settle_backends; pg1=$(postgres_cpu); redis1=$(redis_cpu)
  tps=$(echo "$out" | grep -oE 'tps = [0-9.]+' | head -1 | cut -d' ' -f3)
  read -r rows succeeded <<<"$(count_rows)"
  record "$name" "$(echo "$tps * $per" | bc -l)"
  printf "   %s: %d transactions/s x %d = %.0f jobs/s (%d rows, %d with their ledger row)\n" "$name" "${tps%.*}" "$per" \
    "$(echo "$tps * $per" | bc -l)" "$rows" "$succeeded"
  record_cpu "$name" "$pg0" "$pg1" "$redis0" "$redis1" "$client"
}

echo "== machine: $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); N=$N, RUNS=$RUNS, concurrency $CONCURRENCY (pool $CONCURRENCY connections, $CONCURRENCY pgbench clients)"
[ "${PIN_POSTGRES:-0}" != 1 ] || echo "== PIN_POSTGRES=1: PostgreSQL on CPU 0; Redis, the worker, pgbench and the drain clock on CPUs 1-$(($(nproc) - 1))"
echo "== PostgreSQL synchronous_commit=$(P 'SHOW synchronous_commit'), fsync=$(P 'SHOW fsync'); $("$PGBENCH" --version)"
for run in $(seq 1 "$RUNS"); do
  record load "$(cut -d' ' -f1 /proc/loadavg)"
  echo "-- run $run of $RUNS (load $(cut -d' ' -f1 /proc/loadavg))"
  ours ours_per_job --commit-batch 1
  ours ours_group
  pgbench_run pgbench_1 1
  pgbench_run pgbench_batched "$PER_COMMIT"
  if [ "$PGBENCH_MAJOR" -ge 14 ]; then pgbench_run pgbench_pipelined "$PER_COMMIT" pipeline; fi
  record ratio_per_job "$(echo "$(tail -1 "$FIGURES/ours_per_job") / $(tail -1 "$FIGURES/pgbench_1")" | bc -l)"
  record ratio_group_vs_1 "$(echo "$(tail -1 "$FIGURES/ours_group") / $(tail -1 "$FIGURES/pgbench_1")" | bc -l)"
  record ratio_group_vs_batched "$(echo "$(tail -1 "$FIGURES/ours_group") / $(tail -1 "$FIGURES/pgbench_batched")" | bc -l)"
  [ "$PGBENCH_MAJOR" -lt 14 ] || record ratio_group_vs_pipelined "$(echo "$(tail -1 "$FIGURES/ours_group") / $(tail -1 "$FIGURES/pgbench_pipelined")" | bc -l)"
done
psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS pgbench_jobs" >/dev/null
R flushdb >/dev/null

echo "== results: median of $RUNS runs (min–max); jobs/s = jobs succeeded (rows checked: N rows, none doubled, each with its ledger row)"
report load "" "load average (1 min) at the start of each run"
report ours_per_job jobs/s "ours, one COMMIT per job (--commit-batch 1)"
report ours_group jobs/s "ours, group commit (up to $PER_COMMIT jobs per COMMIT)"
report pgbench_1 jobs/s "pgbench, 1 job's rows per transaction"
report pgbench_batched jobs/s "pgbench, $PER_COMMIT jobs' rows per transaction (group commit's batching; a round trip per statement)"
report pgbench_pipelined jobs/s "pgbench, $PER_COMMIT jobs' rows per transaction, pipelined and prepared (the best pgbench does)"
for side in ours_per_job ours_group pgbench_1 pgbench_batched pgbench_pipelined; do
  [ -s "$FIGURES/${side}_pg_us" ] || continue
  report "${side}_pg_us" "µs" "CPU per job, $side: PostgreSQL (every server process)"
  report "${side}_redis_us" "µs" "CPU per job, $side: Redis"
  report "${side}_client_us" "µs" "CPU per job, $side: client (the worker process, or pgbench)"
done
report ratio_per_job "" "ratio ours one COMMIT per job / pgbench 1 per transaction"
report ratio_group_vs_1 "" "ratio ours group commit / pgbench 1 per transaction"
report ratio_group_vs_batched "" "ratio ours group commit / pgbench $PER_COMMIT per transaction (same batching)"
report ratio_group_vs_pipelined "" "ratio ours group commit / pgbench $PER_COMMIT per transaction pipelined (the best pgbench does)"
