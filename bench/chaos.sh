#!/usr/bin/env bash
# bench/chaos.sh — nothing lost, nothing doubled, nothing stuck, under fire.
#
# N jobs (default 20000), each inserting one row keyed by its jid into PostgreSQL through the ledger
# (ProbeInsert), spread over 4 worker processes. While they run: SIGKILL a random worker every few seconds and
# start a new one; crash Redis once (SIGKILL; it restarts from its append-only file, appendfsync always) and
# restart PostgreSQL once. At the end: rows present, rows duplicated, jobs left in queues, in-flight lists,
# retry and dead. Exit status 0 only if every job left exactly one row and nothing is left anywhere.
#
#   bench/chaos.sh                      the full run
#   N=4000 KILL_EVERY=1 WORKER_CONCURRENCY=4 bench/chaos.sh   a shortened run (what the test suite runs)
#   PAUSE_MS=20 (default): each job holds its transaction open that long (ProbeInsert's second argument)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-20000}"
WORKERS="${WORKERS:-4}"
KILL_EVERY="${KILL_EVERY:-2}"
PAUSE_MS="${PAUSE_MS:-20}"
DEADLINE="${DEADLINE:-300}"
# WORKERCTL: the binary to fire at (the test suite passes the one it built); otherwise a build of this tree now,
# so a run never measures a binary older than the source. A failed build stops the run.
if [ -n "${WORKERCTL:-}" ]; then
  BIN="$WORKERCTL"
else
  swift build --product workerctl >/dev/null || { echo "build failed: nothing run" >&2; exit 1; }
  BIN="$(swift build --show-bin-path)/workerctl"
fi
[ -x "$BIN" ] || { echo "$BIN is not an executable" >&2; exit 1; }
. bench/lib.sh   # bench_kek: the workers below run with PostgreSQL

# Its own Redis and PostgreSQL (crashed and restarted below), so nothing else on the machine is disturbed.
export DATA_DIR="${CHAOS_DATA_DIR:-$ROOT/.dev/chaos}" REDIS_PORT="${CHAOS_REDIS_PORT:-6391}" PG_PORT="${CHAOS_PG_PORT:-5441}"
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
DB_NAME="chaos_$$"
ADMIN_URL="$DATABASE_URL"
export DATABASE_URL="${DATABASE_URL%/*}/$DB_NAME"
R() { redis-cli -u "$REDIS_URL" "$@"; }
P() { psql "$DATABASE_URL" -tAc "$1"; }

psql "$ADMIN_URL" -qc "CREATE DATABASE $DB_NAME" >/dev/null
"$BIN" migrate --bench-tables >/dev/null 2>&1   # + probe_rows, the bench table ProbeInsert writes
R flushdb >/dev/null
LOGDIR=$(mktemp -d)
declare -a PIDS=()
start_worker() {
  "$BIN" worker --bench-jobs --concurrency "${WORKER_CONCURRENCY:-8}" --heartbeat-interval 1 --heartbeat-ttl 4 --orphan-sweep-interval 2 --poll-interval 1 \
    2>>"$LOGDIR/workers.log" &
  PIDS+=($!)
  disown $!   # no "Killed" chatter from the shell when we SIGKILL it
}
cleanup() {
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB_NAME" >/dev/null 2>&1 || true
  [ "${KEEP_SERVERS:-0}" = 1 ] || scripts/services stop 2>/dev/null || true
}
trap cleanup EXIT

# Each job holds its transaction open PAUSE_MS: kills and restarts land inside open (group) transactions,
# and the run lasts at least N * PAUSE_MS / (threads) however fast the machine is, so every event happens mid-run.
"$BIN" enqueue ProbeInsert --args "[\"chaos\", $PAUSE_MS]" --count "$N" --batch 1000 >/dev/null
echo "enqueued $N jobs; $WORKERS workers; a SIGKILL every ${KILL_EVERY}s"
for _ in $(seq 1 "$WORKERS"); do start_worker; done

START=$(date +%s.%N)
elapsed() { echo "$(date +%s.%N) - $START" | bc -l; }
KILLS=0; REDIS_CRASHED=0; PG_RESTARTED=0
NEXT_KILL=$KILL_EVERY
rows() { P "SELECT count(DISTINCT jid) FROM probe_rows" 2>/dev/null || echo 0; }
# Redis is crashed once a quarter of the jobs have their row and PostgreSQL restarted at half, so both happen while
# work remains however fast this machine is; a random worker is SIGKILLed (and a new one started) every KILL_EVERY s
# until every job has its row.
REDIS_CRASH_AT_ROWS=$(( N / 4 ))
PG_RESTART_AT_ROWS=$(( N / 2 ))
while true; do
  sleep 0.1
  NOW=$(elapsed)
  DONE=$(rows)
  if [ "$DONE" -ge "$N" ] || [ "$(echo "$NOW >= $DEADLINE" | bc)" = 1 ]; then break; fi
  if [ "$REDIS_CRASHED" = 0 ] && [ "$DONE" -ge "$REDIS_CRASH_AT_ROWS" ]; then
    REDIS_CRASHED=1
    kill -KILL "$(cat "$DATA_DIR/redis/redis.pid")"; sleep 0.3; scripts/services start 2>/dev/null
    printf "t=%.1fs rows=%s redis crashed (SIGKILL) and restarted from its AOF\n" "$NOW" "$DONE"
  fi
  if [ "$PG_RESTARTED" = 0 ] && [ "$DONE" -ge "$PG_RESTART_AT_ROWS" ]; then
    PG_RESTARTED=1
    scripts/services restart-postgres 2>/dev/null
    printf "t=%.1fs rows=%s postgres restarted\n" "$NOW" "$DONE"
  fi
  if [ "$(echo "$NOW >= $NEXT_KILL" | bc)" = 1 ]; then
    NEXT_KILL=$(echo "$NEXT_KILL + $KILL_EVERY" | bc -l)
    i=$(( RANDOM % ${#PIDS[@]} ))
    kill -KILL "${PIDS[$i]}" 2>/dev/null && KILLS=$((KILLS + 1))
    unset 'PIDS[$i]'; PIDS=("${PIDS[@]}")
    start_worker
    printf "t=%.1fs rows=%s kills=%s retry=%s dead=%s\n" "$NOW" "$DONE" "$KILLS" "$(R zcard retry)" "$(R zcard dead)"
  fi
done

# Jobs cut by the restarts wait in `retry` (15-24 s for a first retry): give them their turn.
while [ "$(echo "$(elapsed) < $DEADLINE" | bc)" = 1 ]; do
  LEFT=$(( $(R llen queue:default) + $(R zcard retry) + $(R zcard schedule) ))
  INFLIGHT=0
  for key in $(R --scan --pattern 'working:*'); do INFLIGHT=$(( INFLIGHT + $(R llen "$key") )); done
  [ "$LEFT" -eq 0 ] && [ "$INFLIGHT" -eq 0 ] && break
  sleep 1
done

PRESENT=$(rows)
DUPLICATED=$(P "SELECT count(*) FROM (SELECT jid FROM probe_rows GROUP BY jid HAVING count(*) > 1) d")
QUEUED=$(R llen queue:default)
INFLIGHT=0
for key in $(R --scan --pattern 'working:*'); do INFLIGHT=$(( INFLIGHT + $(R llen "$key") )); done
RETRY=$(R zcard retry); DEAD=$(R zcard dead)
ELAPSED=$(printf "%.1f" "$(elapsed)")
echo "jobs=$N seconds=$ELAPSED worker_kills=$KILLS redis_crashes=$REDIS_CRASHED postgres_restarts=$PG_RESTARTED"
echo "rows_present=$PRESENT rows_duplicated=$DUPLICATED queued=$QUEUED in_flight=$INFLIGHT retry=$RETRY dead=$DEAD"
if [ "$PRESENT" -eq "$N" ] && [ "$DUPLICATED" -eq 0 ] && [ "$QUEUED" -eq 0 ] && [ "$INFLIGHT" -eq 0 ] \
   && [ "$RETRY" -eq 0 ] && [ "$DEAD" -eq 0 ]; then
  echo "chaos: PASS (nothing lost, nothing doubled, nothing stuck)"
else
  echo "chaos: FAIL"; grep -iE "error|fatal" "$LOGDIR/workers.log" | tail -5
  exit 1
fi
