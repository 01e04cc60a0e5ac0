#!/usr/bin/env bash
# bench/subject_keys.sh — the cost of encrypted personal arguments (issue 37 point 4, docs/benchmarks.md "Encrypted
# arguments"), against the services of scripts/services (REDIS_PORT / PG_PORT as usual).
#
#   bench/subject_keys.sh                        both parts below
#   PART=test bench/subject_keys.sh              only part 1 (debug, in one thread)
#   PART=drain N=10000 bench/subject_keys.sh     only part 2 (release drain)
#   WORKERCTL=path PART=drain bench/subject_keys.sh   part 2 measuring that workerctl (BIN= works too) instead of
#                                                     building one (scripts/release-build)
#
# Both parts need the debug test build (`swift build --build-tests`): part 1 runs in it, part 2 fills its queue from it.
#
# Part 1: SubjectKeysBenchmarkTests (SUBJECT_KEYS_BENCH_SUBJECTS, default 10000; SUBJECT_KEYS_BENCH_JOBS, default 300):
# opening a 4 KB receipt argument per job across 10,000 subjects, cold and warm key cache, next to decoding it in
# clear, and the receipts job's real path with and without encryption. Debug build, one thread, Redis database 63.
#
# Part 2: N `SealedProbe` jobs (Sources/BenchJobs/SealedProbeJob.swift: a 4 KB `receipt` personal under `user_id`,
# perform does nothing), one per subject (N subjects), drained by one release `workerctl worker --bench-jobs` process
# (CONCURRENCY, default 10) with PostgreSQL (the key store; a database of its own, `subject_keys_bench`, made anew
# with a fresh KEK each run of the script) and the same WORKERS_KEK, strict mode off (so clear arguments are
# accepted) and WORKERS_SUBJECT_KEY_CACHE_SECONDS=3600 for every side. The queue is filled before the worker starts
# (JobsTests.SubjectKeysBenchFillTests, not measured) with two passes over the same N subjects, 2N jobs; one worker
# process drains both passes, clocked by bench/drain_clock.py as bench/throughput.sh clocks the plain drain (from
# the first job taken until every job is acknowledged): one clock for the whole drain, one from the first job of
# pass 2; pass 1 = the difference. Sides, alternating within each of RUNS runs, each figure the median of RUNS:
#   clear    the arguments in clear (pass 1 and pass 2)
#   sealed   the receipt sealed: pass 1 = cold key cache (a fresh worker: one key fetch per subject), pass 2 = warm
#            (the same subjects again in the same process)
#   noop     `Noop` jobs with no arguments (the plain drain of bench/throughput.sh), 2N, for reference
# A drain that leaves any job in `retry` or `dead` stops the script (nothing measured would be the jobs' real path).
# Prints jobs/s and µs per job (1 / rate: wall time per job of a concurrent drain, not CPU) per pass, the worker's
# CPU per job over the whole drain, and the µs per job sealed adds over clear (cold: pass 1s; warm: pass 2s).
# PERSISTENCE (always|everysec|no, default always) as in bench/throughput.sh, for every side; Redis database DB
# (default 82).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PART="${PART:-all}"
case "$PART" in all|test|drain) ;; *) echo "PART must be all, test or drain (got $PART)" >&2; exit 2 ;; esac
eval "$(scripts/services env)"
export WORKERS_REPO_ROOT="$PWD"

if [ "$PART" != drain ]; then
  echo "== part 1: SubjectKeysBenchmarkTests (debug build, one thread)"
  SUBJECT_KEYS_BENCH=1 swift test --skip-build --filter 'JobsTests.SubjectKeysBenchmarkTests' 2>&1 \
    | grep -E 'subject-keys-bench|error|failed|Executed'
fi
[ "$PART" = test ] && exit 0

echo "== part 2: release drain of SealedProbe jobs"
N="${N:-10000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-10}"
PERSISTENCE="${PERSISTENCE:-always}"
DB="${DB:-82}"
export REDIS_URL="${REDIS_URL%/*}/$DB"
ADMIN_URL="$DATABASE_URL"
export DATABASE_URL="${DATABASE_URL%/*}/subject_keys_bench"
R() { redis-cli -u "$REDIS_URL" "$@"; }
. bench/lib.sh
BIN="${BIN:-${WORKERCTL:-}}"
release_workerctl

FIGURES="$(mktemp -d)"
save_persistence
WPID=""
stop_worker() { [ -n "$WPID" ] && kill -TERM "$WPID" 2>/dev/null && wait "$WPID" 2>/dev/null; WPID=""; }
drop_keys() { PGOPTIONS="-c client_min_messages=warning" psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS subject_keys_bench" >/dev/null || true; }
trap 'stop_worker || true; restore_persistence; drop_keys; rm -rf "$FIGURES"' EXIT
use_persistence "$PERSISTENCE"

# The key store: a database of its own with a KEK of this run (a KEK of an earlier run would not open its lookup key).
drop_keys
psql "$ADMIN_URL" -qc "CREATE DATABASE subject_keys_bench" >/dev/null
"$BIN" migrate >"$FIGURES/migrate.log" 2>&1 || { cat "$FIGURES/migrate.log" >&2; echo "migrate failed" >&2; exit 1; }
export WORKERS_KEK="bench:$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')"
export SUBJECT_KEYS_BENCH_KEK="$WORKERS_KEK" WORKERS_SUBJECT_KEY_CACHE_SECONDS=3600
unset WORKERS_KEK_FILE WORKERS_KEK_PREVIOUS WORKERS_KEK_PREVIOUS_FILE WORKERS_PERSONAL_ARGS_STRICT

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== redis persistence: appendonly $(R config get appendonly | tail -1), appendfsync $(R config get appendfsync | tail -1) (PERSISTENCE=$PERSISTENCE)"
echo "== N=$N subjects, 2 passes (2N jobs per drain), RUNS=$RUNS, concurrency $CONCURRENCY, Redis database $DB"

# fill SIDE: 2N jobs of SIDE in queue:default (two passes over the same N subjects).
fill() {
  R flushdb >/dev/null
  if [ "$1" = noop ]; then
    "$BIN" enqueue Noop --count $((2 * N)) --batch 1000 >/dev/null
  else
    local out
    out=$(SUBJECT_KEYS_BENCH_FILL="$1" SUBJECT_KEYS_BENCH_SUBJECTS="$N" SUBJECT_KEYS_BENCH_PASSES=2 \
          swift test --skip-build --filter 'JobsTests.SubjectKeysBenchFillTests' 2>&1) || true
    grep -q 'subject-keys-bench-fill:' <<<"$out" || { grep -E 'error|failed' <<<"$out" >&2; echo "the fill failed" >&2; exit 1; }
  fi
  [ "$(R llen queue:default)" = $((2 * N)) ] || { echo "the fill left $(R llen queue:default) jobs, not $((2 * N))" >&2; exit 1; }
}

# drain SIDE: fill, then one fresh worker drains both passes under the two clocks.
drain() {
  local side=$1 total=$((2 * N)) whole second cpu
  fill "$side"
  if [ "$side" = sealed ] && [ -z "${SEALED_SEEN:-}" ]; then
    local head; head=$(R lrange queue:default 0 0)
    if echo "$head" | grep -q '"enc":"v1"' && ! echo "$head" | grep -q MIIT; then
      echo "   (sealed payloads checked: the receipt is an envelope, no receipt text in Redis)"; SEALED_SEEN=1
    else echo "a sealed payload is not an envelope" >&2; exit 1; fi
  fi
  aof_settled
  rm -f "$FIGURES/clock2.ready"
  python3 bench/drain_clock.py "$REDIS_URL" "$N" ours "$FIGURES/clock2.ready" >"$FIGURES/clock2" &
  local clock2=$!
  until [ -e "$FIGURES/clock2.ready" ]; do sleep 0.01; done
  clock_start "$total" ours
  "$BIN" worker --bench-jobs --concurrency "$CONCURRENCY" 2>"$FIGURES/worker.log" &
  WPID=$!
  clock_read
  wait "$clock2"
  cpu=$(process_cpu "$WPID")
  stop_worker || true
  if [ "$(R zcard retry)" != 0 ] || [ "$(R zcard dead)" != 0 ]; then
    echo "$side: jobs in retry/dead after the drain:" >&2; R zrange dead 0 0 >&2; R zrange retry 0 0 >&2; exit 1
  fi
  whole=$ELAPSED; second=$(cat "$FIGURES/clock2")
  local first; first=$(echo "$whole - $second" | bc -l)
  record "${side}_1_rate" "$(echo "$N / $first" | bc -l)"; record "${side}_1_us" "$(echo "$first * 1000000 / $N" | bc -l)"
  record "${side}_2_rate" "$(echo "$N / $second" | bc -l)"; record "${side}_2_us" "$(echo "$second * 1000000 / $N" | bc -l)"
  record "${side}_cpu_us" "$(echo "$cpu * 1000000 / $total" | bc -l)"
  printf '   %-6s pass 1 %6.0f jobs/s, pass 2 %6.0f jobs/s, worker CPU %.1f µs per job\n' "$side" \
    "$(echo "$N / $first" | bc -l)" "$(echo "$N / $second" | bc -l)" "$(echo "$cpu * 1000000 / $total" | bc -l)"
}

for run in $(seq 1 "$RUNS"); do
  echo "-- run $run of $RUNS (load $(cut -d' ' -f1 /proc/loadavg))"
  if [ $((run % 2)) = 1 ]; then SIDES="clear sealed noop"; else SIDES="sealed clear noop"; fi
  for side in $SIDES; do drain "$side"; done
done

median() { python3 -c 'import statistics, sys; print(statistics.median(float(v) for v in open(sys.argv[1]) if v.strip()))' "$FIGURES/$1"; }
echo "== medians of $RUNS runs (min – max); µs per job = 1 / rate"
report clear_1_rate jobs/s "clear, pass 1"; report clear_1_us "µs per job" "clear, pass 1"
report clear_2_rate jobs/s "clear, pass 2"; report clear_2_us "µs per job" "clear, pass 2"
report sealed_1_rate jobs/s "sealed, cold key cache (pass 1)"; report sealed_1_us "µs per job" "sealed, cold key cache (pass 1)"
report sealed_2_rate jobs/s "sealed, warm key cache (pass 2)"; report sealed_2_us "µs per job" "sealed, warm key cache (pass 2)"
report noop_1_rate jobs/s "Noop, pass 1"; report noop_2_rate jobs/s "Noop, pass 2"
report clear_cpu_us "µs" "worker CPU per job, clear"; report sealed_cpu_us "µs" "worker CPU per job, sealed (cold + warm)"
report noop_cpu_us "µs" "worker CPU per job, Noop"
printf 'added by sealing, per job (medians): cold %+.1f µs, warm %+.1f µs; worker CPU %+.1f µs (cold + warm over clear)\n' \
  "$(echo "$(median sealed_1_us) - $(median clear_1_us)" | bc -l)" "$(echo "$(median sealed_2_us) - $(median clear_2_us)" | bc -l)" \
  "$(echo "$(median sealed_cpu_us) - $(median clear_cpu_us)" | bc -l)"
