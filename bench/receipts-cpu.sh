#!/usr/bin/env bash
# bench/receipts-cpu.sh — the worker's CPU per receipts job on its real code path (issue 38 goal 2's last item),
# against the project's fake stores (Tests/Fakes/fakes.py), next to a `Noop` job's in the same worker set-up.
#
#   bench/receipts-cpu.sh                       N=1000 jobs per side, RUNS=3, CONCURRENCY=10
#   BIN=/path/to/workerctl RUNS=1 bench/receipts-cpu.sh
#   SIDES="apple noop" bench/receipts-cpu.sh       only those sides (apple, google, noop)
#
# Sides, in alternating order within each run, each drained by a fresh release `workerctl worker` (PostgreSQL on, a
# database of its own, `receipts_bench`, made anew each time the script runs):
#   apple   ValidateReceiptJob in App Store Server API mode: the device's signed transaction verified (x5c chain to
#           the bench's root, ES256), an ES256 API JWT per request, Get Transaction Info and Get All Subscription
#           Statuses (their signed transaction and renewal info verified: four JWS per job), the store-call limiter,
#           the ledger and the subscription's PostgreSQL transaction;
#   google  ValidateReceiptJob for Google Play: the OAuth token (cached by the worker: one assertion per process),
#           purchases.subscriptionsv2.get, the acknowledgement, the limiter, the ledger and the transaction;
#   noop    NOOP_N (default 20,000) `Noop` jobs drained by the same worker set-up (PostgreSQL connected): the
#           runtime's own share.
# The purchases and jobs come from JobsTests.ReceiptsBenchFillTests (debug test build; not measured): one user and
# one purchase per job, registered with the fakes, then the jobs pushed while `default` is paused. The worker starts,
# registers, its CPU is read (/proc/PID/stat), the queue is resumed, the drain clocked as bench/throughput.sh clocks
# it (bench/drain_clock.py) and the CPU read again: start-up is not counted, the drain's idle waits are. Every job
# must end acknowledged (a job in retry or dead stops the script: that would not be the real path), and the fakes'
# request counts per job are printed (the calls really made). The fakes are Python: the drain rate is theirs (printed
# for reference, not a figure of ours); the worker's CPU per job is.
# Prints, median (min–max) of RUNS: worker CPU per job for each side, and each store side minus noop (the job's own
# code: store calls, JWS, JSON, SQL). Redis persistence as scripts/services sets it (AOF always); database DB (83).
# A benchmark, not a test: it asserts nothing about speed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-1000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-10}"
DB="${DB:-83}"
SIDES="${SIDES:-apple google noop}"
NOOP_N="${NOOP_N:-20000}"   # Noop jobs are cheap: more of them, so the CPU clock's 10 ms ticks do not blur the figure
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export WORKERS_REPO_ROOT="$PWD"
export REDIS_URL="${REDIS_URL%/*}/$DB"
ADMIN_URL="$DATABASE_URL"
export DATABASE_URL="${DATABASE_URL%/*}/receipts_bench"
R() { redis-cli -u "$REDIS_URL" "$@"; }
. bench/lib.sh
release_workerctl
[ -e .build/debug/SwiftWorkersPackageTests.xctest ] || { echo "== building the tests (the fill runs in them)"; swift build --build-tests >/dev/null; }

FIGURES="$(mktemp -d)"
WPID="" FAKES_PID=""
stop_worker() { [ -n "$WPID" ] && kill -TERM "$WPID" 2>/dev/null && wait "$WPID" 2>/dev/null; WPID=""; }
drop_database() { PGOPTIONS="-c client_min_messages=warning" psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS receipts_bench" >/dev/null || true; }
cleanup() {
  stop_worker || true
  [ -n "$FAKES_PID" ] && kill "$FAKES_PID" 2>/dev/null
  R flushdb >/dev/null 2>&1 || true
  drop_database
  rm -rf "$FIGURES"
}
trap cleanup EXIT

drop_database
psql "$ADMIN_URL" -qc "CREATE DATABASE receipts_bench" >/dev/null
"$BIN" migrate >"$FIGURES/migrate.log" 2>&1 || { cat "$FIGURES/migrate.log" >&2; echo "migrate failed" >&2; exit 1; }

# The fakes (Apple and Google), alive as long as this script: their stdin is a FIFO only this shell writes to.
mkfifo "$FIGURES/fakes.in"
exec {FAKES_IN}<>"$FIGURES/fakes.in"
python3 Tests/Fakes/fakes.py --apple --google --exit-on-stdin-close <"$FIGURES/fakes.in" {FAKES_IN}>&- \
  >"$FIGURES/fakes.json" 2>"$FIGURES/fakes.log" &
FAKES_PID=$!
for _ in $(seq 1 150); do [ -s "$FIGURES/fakes.json" ] && [ "$(tail -c1 "$FIGURES/fakes.json" | od -An -c | tr -d ' ')" = '\n' ] && break; sleep 0.1; done
FAKES="$(head -n1 "$FIGURES/fakes.json")"
[ -n "$FAKES" ] || { cat "$FIGURES/fakes.log" >&2; echo "the fakes did not start" >&2; exit 1; }
port() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$FAKES" "$1"; }
APPLE="http://127.0.0.1:$(port apple)" GOOGLE="http://127.0.0.1:$(port google)"
# Requests the fake SERVICE_URL answered under PREFIX so far (its admin API; admin calls are not counted).
requests() { curl -fsS "$1/__admin/stats?prefix=$2" | python3 -c 'import json, sys; print(json.load(sys.stdin)["count"])'; }

# The worker's configuration (docs/jobs-receipts.md), pointed at the fakes; the key files come from the fill.
export RECEIPTS_APPLE_VALIDATION=server_api
export RECEIPTS_APPLE_SERVER_API_URL="$APPLE" RECEIPTS_APPLE_SERVER_API_SANDBOX_URL="$APPLE/sandbox"
export RECEIPTS_APPLE_ISSUER_ID=issuer-1 RECEIPTS_APPLE_KEY_ID=KEY123 RECEIPTS_APPLE_BUNDLE_ID=com.example RECEIPTS_APPLE_APP_APPLE_ID=1234
export RECEIPTS_APPLE_PRIVATE_KEY_FILE="$ROOT/Tests/Fixtures/apple-app-store-server/certs/testSigningKey.p8"
export RECEIPTS_APPLE_ROOT_CA_FILES="$FIGURES/apple-root.der"
export RECEIPTS_GOOGLE_SERVICE_ACCOUNT_FILE="$FIGURES/google-service-account.json"
export RECEIPTS_GOOGLE_TOKEN_URL="$GOOGLE/token" RECEIPTS_GOOGLE_PLAY_API_URL="$GOOGLE" RECEIPTS_GOOGLE_PACKAGE_NAMES=com.example.app
export RECEIPTS_HTTP_TIMEOUT_SECONDS=10

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== N=$N jobs per store side, $NOOP_N Noop, RUNS=$RUNS, concurrency $CONCURRENCY, Redis database $DB (appendfsync $(R config get appendfsync | tail -1))"

# The jobs of SIDE in a drain.
jobs_of() { if [ "$1" = noop ]; then echo "$NOOP_N"; else echo "$N"; fi; }

# fill SIDE RUN: the side's jobs in queue:default, which is left paused.
fill() {
  R flushdb >/dev/null
  if [ "$1" = noop ]; then
    "$BIN" enqueue Noop --count "$NOOP_N" --batch 500 >/dev/null
  else
    local out
    out=$(RECEIPTS_BENCH_FILL="$1" RECEIPTS_BENCH_JOBS="$N" RECEIPTS_BENCH_RUN="$2" RECEIPTS_BENCH_DIR="$FIGURES" \
          RECEIPTS_BENCH_FAKES="$FAKES" swift test --skip-build --filter 'JobsTests.ReceiptsBenchFillTests' 2>&1) || true
    grep -q 'receipts-bench-fill:' <<<"$out" || { grep -E 'error|failed' <<<"$out" >&2; echo "the fill failed" >&2; exit 1; }
  fi
  [ "$(R llen queue:default)" = "$(jobs_of "$1")" ] || { echo "the fill left $(R llen queue:default) jobs, not $(jobs_of "$1")" >&2; exit 1; }
  "$BIN" queues pause default >/dev/null
}

# drain SIDE RUN
drain() {
  local side=$1 cpu0 cpu1 apple0 apple1 google0 google1 n
  n=$(jobs_of "$side")
  fill "$side" "$2"
  aof_settled
  apple0=$(requests "$APPLE" /inApps/); google0=$(requests "$GOOGLE" /androidpublisher/)
  # Each store side's key file comes from its own fill: the other store's is left out of the worker's configuration.
  local unset=(-u RECEIPTS_APPLE_ROOT_CA_FILES -u RECEIPTS_GOOGLE_SERVICE_ACCOUNT_FILE)
  [ "$side" = apple ] && unset=(-u RECEIPTS_GOOGLE_SERVICE_ACCOUNT_FILE)
  [ "$side" = google ] && unset=(-u RECEIPTS_APPLE_ROOT_CA_FILES)
  env "${unset[@]}" "$BIN" worker --concurrency "$CONCURRENCY" 2>"$FIGURES/worker.log" &
  WPID=$!
  for _ in $(seq 1 300); do [ "$(R scard processes)" -ge 1 ] && break; sleep 0.05; done
  [ "$(R scard processes)" -ge 1 ] || { tail -5 "$FIGURES/worker.log" >&2; echo "the worker did not register" >&2; exit 1; }
  sleep 0.5
  cpu0=$(process_cpu "$WPID")
  clock_start "$n" ours
  "$BIN" queues resume default >/dev/null
  clock_read
  cpu1=$(process_cpu "$WPID")
  stop_worker || true
  if [ "$(R zcard retry)" != 0 ] || [ "$(R zcard dead)" != 0 ]; then
    echo "$side: jobs in retry/dead after the drain:" >&2; R zrange dead 0 0 >&2; R zrange retry 0 0 >&2; exit 1
  fi
  apple1=$(requests "$APPLE" /inApps/); google1=$(requests "$GOOGLE" /androidpublisher/)
  record "${side}_cpu_us" "$(echo "($cpu1 - $cpu0) * 1000000 / $n" | bc -l)"
  record "${side}_rate" "$(echo "$n / $ELAPSED" | bc -l)"
  printf '   %-6s worker CPU %7.1f µs per job; drain %5.0f jobs/s; store requests per job: Apple %.2f, Google %.2f\n' "$side" \
    "$(echo "($cpu1 - $cpu0) * 1000000 / $n" | bc -l)" "$(echo "$n / $ELAPSED" | bc -l)" \
    "$(echo "($apple1 - $apple0) / $n" | bc -l)" "$(echo "($google1 - $google0) / $n" | bc -l)"
}

for run in $(seq 1 "$RUNS"); do
  echo "-- run $run of $RUNS (load $(cut -d' ' -f1 /proc/loadavg))"
  if [ $((run % 2)) = 1 ]; then order="apple google noop"; else order="noop google apple"; fi
  for side in $order; do [[ " $SIDES " == *" $side "* ]] && drain "$side" "$run"; done
done

echo "== medians of $RUNS runs (min – max)"
report apple_cpu_us "µs" "worker CPU per job, ValidateReceiptJob Apple (App Store Server API, 4 JWS)"
report google_cpu_us "µs" "worker CPU per job, ValidateReceiptJob Google Play"
report noop_cpu_us "µs" "worker CPU per job, Noop (the same worker set-up)"
report apple_rate jobs/s "drain rate, Apple (bound by the Python fake)"
report google_rate jobs/s "drain rate, Google (bound by the Python fake)"
for side in apple google; do
  [ -s "$FIGURES/${side}_cpu_us" ] && [ -s "$FIGURES/noop_cpu_us" ] || continue
  printf '%s: the job'"'"'s own code per run (medians, minus Noop): %+.1f µs\n' "$side" \
    "$(echo "$(median_of "$FIGURES/${side}_cpu_us") - $(median_of "$FIGURES/noop_cpu_us")" | bc -l)"
done
