# bench/lib.sh — sourced by the benchmarks; one way to get the binary they measure.

# Sets BIN to the workerctl to measure: $BIN when given (an A/B run of two builds), else a fresh release build.
# A failed build stops the benchmark: it never measures an older binary left in .build-release.
# The build is the deployment build (scripts/release-build: static Swift runtime, lld with RELR).
release_workerctl() {
  if [ -n "${BIN:-}" ]; then
    [ -x "$BIN" ] || { echo "BIN=$BIN is not an executable" >&2; exit 1; }
    echo "== measuring BIN=$BIN"
    return 0
  fi
  echo "== building release (scripts/release-build)"
  BIN="$(scripts/release-build)" || { echo "release build failed: nothing measured" >&2; exit 1; }
}

# Drops the page cache's copy of $BIN (fsync, then POSIX_FADV_DONTNEED; no root needed), so that the next start reads
# it as after a reboot. Why: a process's resident pages of its binary depend on how the file sits in the cache (Linux
# maps the whole cached folio around a page fault, and folio sizes follow how the file was written or read): the
# same no-op drain peaked 1-2 MB higher with a binary just written by the linker or `cp` than with one whose cold pages
# had been evicted, which made a build copied later look heavier in an A/B (issue 38, docs/benchmarks.md). The next
# start pays the reads (drain clocks of ours include them: conservative against Sidekiq).
cold_binary() {
  python3 - "$BIN" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
PY
}

# A worker with PostgreSQL refuses to start without a KEK while a registered class declares personal arguments (the
# receipts jobs; docs/jobs-privacy.md). Unless the caller set one, the benchmarks use the demo's KEK
# (.dev/demo/workers-kek, made once as scripts/demo-env makes it), so the dev database's subject keys stay under one
# KEK id whichever of the two started first. Runs when this file is sourced.
bench_kek() {
  [ -n "${WORKERS_KEK:-}${WORKERS_KEK_FILE:-}" ] && return 0
  local dir file
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.dev/demo"
  file="$dir/workers-kek"
  mkdir -p "$dir"
  [ -s "$file" ] || (umask 077; { printf 'demo-1:'; head -c 32 /dev/urandom | base64; } >"$file")
  export WORKERS_KEK_FILE="$file"
}
bench_kek

# The helpers below expect the caller to define R (redis-cli on the benchmark's database), N, and FIGURES (a
# temporary folder it removes on exit).

# Figures: one file per name under $FIGURES, one value per run; `report` prints median (min–max) of each.
record() { echo "$2" >>"$FIGURES/$1"; }
report() {  # report NAME UNIT LABEL
  [ -s "$FIGURES/$1" ] || { echo "$3: no figure"; return 0; }
  python3 - "$FIGURES/$1" "$2" "$3" <<'EOF'
import statistics, sys
values = [float(v) for v in open(sys.argv[1]) if v.strip()]
unit, label = sys.argv[2], sys.argv[3]
fmt = (lambda v: "%.0f" % v) if max(values) >= 100 else (lambda v: "%.2f" % v)
print("%s: median %s %s (min %s – max %s, %d runs)" % (label, fmt(statistics.median(values)), unit,
      fmt(min(values)), fmt(max(values)), len(values)))
EOF
}
# Seconds of CPU Redis has used so far: its main thread and background threads (INFO cpu used_cpu_sys + used_cpu_user).
redis_cpu() { R info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f\n", s}'; }
# Seconds of CPU process PID has used so far, all its threads (/proc/PID/stat utime + stime).
process_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.6f\n", ($14 + $15) / hz}' "/proc/$1/stat"; }
# The number that follows KEY in a log line (`KEY=1.2`, `"KEY":"1.2"`, `KEY: 1.2`).
field() { grep -oE "\"?$1\"?[=:] ?\"?[0-9.]+" | tail -1 | grep -oE '[0-9.]+$'; }

# The seconds from the first job taken until every job is acknowledged, for `ours` or `sidekiq` (bench/drain_clock.py:
# both sides clocked by the same process, polling Redis every millisecond). Start-up (Ruby's takes seconds) is not
# counted; jobs fetched but not yet acknowledged are. Ours: the queue is empty and no in-flight list is left.
# Sidekiq (BasicFetch has no in-flight list): the queue is empty and its finished-job counter `bench:done`
# (sidekiq_noop.rb, BENCH_DONE=1) has reached the total.
# `clock_start TOTAL SIDE` starts the clock in the background before the workers start, and returns once it polls
# (the queue still full); `clock_read` waits for it and sets ELAPSED to the seconds. Needs $FIGURES.
clock_start() {
  rm -f "$FIGURES/clock.ready"
  python3 bench/drain_clock.py "${CLOCK_URL:-$REDIS_URL}" "$1" "$2" "$FIGURES/clock.ready" >"$FIGURES/clock" &
  CLOCK_PID=$!
  until [ -e "$FIGURES/clock.ready" ]; do
    kill -0 "$CLOCK_PID" 2>/dev/null || { echo "the drain clock stopped before the drain began" >&2; exit 1; }
    sleep 0.01
  done
}
clock_read() { wait "$CLOCK_PID"; ELAPSED=$(cat "$FIGURES/clock"); }
# The median of the values in FILE, one a line (the upper middle one of an even count), for a verdict line.
median_of() { sort -g "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Remembers Redis's persistence settings now (save_persistence) and puts them back (restore_persistence, for the
# EXIT trap): a benchmark that changes them with use_persistence leaves the server as it found it.
save_persistence() { SAVED_AOF="$(R config get appendonly | tail -1) $(R config get appendfsync | tail -1)"; }
restore_persistence() {
  [ -n "${SAVED_AOF:-}" ] || return 0
  set -- $SAVED_AOF
  R config set appendfsync "$2" >/dev/null || true
  R config set appendonly "$1" >/dev/null || true
}
# Redis persistence for a benchmark run, the same for every side it measures (CONFIG SET on the running server;
# the caller restores the previous setting on exit): always | everysec | no.
use_persistence() {
  case "$1" in
    always|everysec) R config set appendonly yes >/dev/null; R config set appendfsync "$1" >/dev/null ;;
    no) R config set appendonly no >/dev/null ;;
    *) echo "PERSISTENCE must be always, everysec or no (got $1)" >&2; exit 2 ;;
  esac
  aof_settled
}
# With AOF on: rewrites it now and waits until no rewrite is running or scheduled, so an automatic rewrite does not
# fall into one side's measured phase only.
aof_settled() {
  [ "$(R config get appendonly | tail -1)" = yes ] || return 0
  local info
  for _ in $(seq 1 600); do
    info=$(R info persistence)
    if ! echo "$info" | grep -qE 'aof_rewrite_in_progress:1|aof_rewrite_scheduled:1'; then break; fi
    sleep 0.1
  done
  R bgrewriteaof >/dev/null 2>&1 || true
  for _ in $(seq 1 600); do
    info=$(R info persistence)
    if ! echo "$info" | grep -qE 'aof_rewrite_in_progress:1|aof_rewrite_scheduled:1'; then return 0; fi
    sleep 0.1
  done
}

# bench/shards.sh's clock (several Redis servers; drain_clock.py polls one): seconds from the queue first dropping
# below TOTAL until $2 (a command) succeeds. It starts once the first job is taken, so it can start late on a fast
# drain; every shard count is clocked this way, so they compare with each other, not with throughput.sh.
# $3 (optional): a command printing how many jobs are still queued (default: `R llen queue:default`).
clock_drain() {
  local start now total=$1 done_check=$2 queued=${3:-default_queued}
  while [ "$($queued)" -ge "$total" ]; do sleep 0.005; done
  start=$(date +%s.%N)
  while ! $done_check; do sleep 0.01; done
  now=$(date +%s.%N)
  echo "$now - $start" | bc -l
}
default_queued() { R llen queue:default; }
