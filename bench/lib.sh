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
# The number that follows KEY in a log line (`KEY=1.2`, `"KEY":"1.2"`, `KEY: 1.2`).
field() { grep -oE "\"?$1\"?[=:] ?\"?[0-9.]+" | tail -1 | grep -oE '[0-9.]+$'; }

# Seconds from the first job taken until every job is acknowledged ($2 is a command that succeeds once it is).
# Start-up (Ruby's takes seconds) is not counted; jobs fetched but not yet acknowledged are.
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
# Ours: the queue is empty and no in-flight list is left (Redis deletes an empty list, so no `working:*` key).
ours_acknowledged() { [ "$(R llen queue:default)" -eq 0 ] && [ -z "$(R --scan --pattern 'working:*' | head -1)" ]; }
# Sidekiq (BasicFetch has no in-flight list: a job is acknowledged when its perform returns): the queue is empty and
# the processes' own completion counter (sidekiq_noop.rb, BENCH_DONE=1: flushed every 5 ms) has reached N.
sidekiq_acknowledged() { [ "$(R llen queue:default)" -eq 0 ] && [ "$(R get bench:done)" -ge "$N" ] 2>/dev/null; }
