#!/usr/bin/env bash
# bench/scale.sh — cost as the work grows (issue 19): what a long queue, a large due set, a large dead set and a
# large schedule cost. Figures and their reading: docs/cost-at-scale.md; docs/benchmarks.md's "Cost at scale" table.
#
#   bench/scale.sh                         every part, RUNS=3
#   PARTS="queue poller" N=200000 bench/scale.sh
#   BIN=/path/to/workerctl bench/scale.sh  another build (an A/B comparison)
#
# Parts (PARTS, default all four):
#   queue   N (1,000,000) no-op jobs enqueued with the Swift client's bulk API (`workerctl enqueue --count N
#           --batch 1000`: JobClient.enqueueMany, one pipelined LPUSH of 1000 payloads per round trip); Redis memory
#           per job (INFO memory used_memory after − before, ÷ N, next to one payload's length); then one worker
#           (concurrency 10) drains them and bench/counter_clock.py reads `stat:processed` (counted by the settle
#           script, i.e. when the job is acknowledged) every 2 ms: the drain rate of each SLICE (100,000) jobs, so
#           the first and the last 100,000 can be compared.
#   poller  DUE (100,000) jobs due at once in `schedule`, then in `retry`: an idle worker (serving another queue,
#           --poll-interval 1) moves them to queue:default (ReliableQueue.moveDue: batches of 100, one
#           ZRANGEBYSCORE and one script each, until none is due). Time from the first job moved to the last,
#           Redis CPU (INFO cpu used_cpu_sys + used_cpu_user, before/after), the commands' own time (INFO
#           commandstats: EVALSHA + ZRANGEBYSCORE), and the worker process's CPU (/proc/PID/stat).
#   bulk    `workerctl jobs retry|delete --all --state dead --yes` over BULK_SIZES (10000 100000) dead jobs:
#           wall time and peak RSS (/usr/bin/time %M): the walk reads pages of 1000, so memory must not grow
#           with the set.
#   cron    `workerctl scheduler` with CRON_ENTRIES (1000) entries firing every 10 s (`*/10 * * * * *`) for
#           CRON_SECONDS (35): Redis commands per round (idle and firing), Redis time per round (commandstats),
#           the scheduler's CPU per round (/proc/PID/stat), how long a firing round takes (first to last
#           "fired" log line of one tick) and how late its last job is (from the tick to the last "fired" line).
# Every figure is the median of RUNS runs with min–max. A benchmark, not a test: it asserts nothing but that the
# jobs arrived. Uses Redis database 103 of the private instance (scripts/services); prints the persistence in use.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-3}"
PARTS="${PARTS:-queue poller bulk cron}"
N="${N:-1000000}"
SLICE="${SLICE:-100000}"
DUE="${DUE:-100000}"
BULK_SIZES="${BULK_SIZES:-10000 100000}"
CRON_ENTRIES="${CRON_ENTRIES:-1000}"
CRON_SECONDS="${CRON_SECONDS:-35}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
export REDIS_URL="${REDIS_URL%/*}/103"
R() { redis-cli -u "$REDIS_URL" "$@"; }

. bench/lib.sh
release_workerctl

FIGURES="$(mktemp -d)"
WPID=""
cleanup() { [ -n "$WPID" ] && kill -TERM "$WPID" 2>/dev/null; rm -rf "$FIGURES"; }
trap cleanup EXIT

# INFO field of a section, e.g. info memory used_memory.
info() { R info "$1" | tr -d '\r' | awk -F: -v k="$2" '$1 == k { print $2 }'; }
# calls and usec of one command since CONFIG RESETSTAT (0 0 if never called).
cmdstat() {
  local line
  line=$(info commandstats "cmdstat_$1")
  [ -n "$line" ] || { echo "0 0"; return; }
  echo "$line" | sed -E 's/^calls=([0-9]+),usec=([0-9]+),.*/\1 \2/'
}
idle_worker() {  # a worker whose pool has nothing to do: only its housekeeper (the poller) works
  "$BIN" worker --no-database --concurrency 1 --queue scale-idle --poll-interval 1 2>/tmp/bench-scale-worker.log &
  WPID=$!
  sleep 2
}
stop_worker() { kill -TERM "$WPID"; wait "$WPID" || true; WPID=""; }

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== redis $(info server redis_version), persistence: appendonly $(R config get appendonly | tail -1), appendfsync $(R config get appendfsync | tail -1), save '$(R config get save | tail -1)'"
echo "== RUNS=$RUNS, PARTS=$PARTS"

for run in $(seq 1 "$RUNS"); do
  echo "-- run $run of $RUNS"

  if [[ " $PARTS " == *" queue "* ]]; then
    R flushdb >/dev/null
    rewrites0=$(info persistence aof_rewrites)
    before=$(info memory used_memory)
    rate=$("$BIN" enqueue Noop --count "$N" --batch 1000 | grep -oE '[0-9]+ jobs/s' | grep -oE '[0-9]+')
    [ "$(R llen queue:default)" -eq "$N" ] || { echo "enqueue: queue:default has $(R llen queue:default), not $N" >&2; exit 1; }
    after=$(info memory used_memory)
    record enqueue_rate "$rate"
    record bytes_per_job "$(echo "($after - $before) / $N" | bc -l)"
    record payload_bytes "$(R lindex queue:default 0 | tr -d '\n' | wc -c)"
    INTERVAL=0.002 python3 bench/counter_clock.py "$REDIS_URL" "$N" "$SLICE" GET stat:processed >"$FIGURES/slices.$run" &
    CLOCK=$!
    "$BIN" worker --no-database --concurrency 10 2>/tmp/bench-scale-worker.log &
    WPID=$!
    wait "$CLOCK"
    stop_worker
    slices=$(grep -c '^slice' "$FIGURES/slices.$run")
    record drain_first "$(sed -n 1p "$FIGURES/slices.$run" | grep -oE '[0-9]+/s$' | tr -d /s)"
    record drain_last "$(grep '^slice' "$FIGURES/slices.$run" | tail -1 | grep -oE '[0-9]+/s$' | tr -d /s)"
    record drain_all "$(echo "$N / ($(field total <"$FIGURES/slices.$run") - $(field first_wait <"$FIGURES/slices.$run"))" | bc -l)"
    echo "   drain by slices of $SLICE ($slices):" $(grep -oE '[0-9]+/s$' "$FIGURES/slices.$run")
    # With AOF on, a 1M-job queue makes Redis rewrite its AOF (a fork and a full write) during the run: say so.
    echo "   AOF rewrites during enqueue + drain: $(( $(info persistence aof_rewrites) - rewrites0 ))"
  fi

  if [[ " $PARTS " == *" poller "* ]]; then
    for set in schedule retry; do
      R flushdb >/dev/null
      "$BIN" enqueue Noop --count "$DUE" --at 4000000000 >/dev/null   # far in the future: nothing due yet
      [ "$set" = retry ] && R rename schedule retry >/dev/null
      idle_worker
      R config resetstat >/dev/null
      cpu0=$(redis_cpu); wcpu0=$(process_cpu "$WPID")
      R zunionstore "$set" 1 "$set" weights 0 >/dev/null   # every score 0: all due at once
      INTERVAL=0.002 python3 bench/counter_clock.py "$REDIS_URL" "$DUE" "$DUE" LLEN queue:default >"$FIGURES/poller"
      cpu1=$(redis_cpu); wcpu1=$(process_cpu "$WPID")
      stop_worker
      [ "$(R zcard "$set")" -eq 0 ] || { echo "poller: $set still holds $(R zcard "$set")" >&2; exit 1; }
      read -r calls usec < <(cmdstat evalsha)
      read -r zcalls zusec < <(cmdstat zrangebyscore)
      record "${set}_move_s" "$(echo "$(field total <"$FIGURES/poller") - $(field first_wait <"$FIGURES/poller")" | bc -l)"
      record "${set}_redis_cpu_s" "$(echo "$cpu1 - $cpu0" | bc -l)"
      record "${set}_cmd_ms" "$(echo "($usec + $zusec) / 1000" | bc -l)"
      record "${set}_calls" "$((calls + zcalls))"
      record "${set}_worker_cpu_s" "$(echo "$wcpu1 - $wcpu0" | bc -l)"
    done
  fi

  if [[ " $PARTS " == *" bulk "* ]]; then
    for size in $BULK_SIZES; do
      for action in retry delete; do
        R flushdb >/dev/null
        # Dead jobs as the runner leaves them (error fields, retry_count), written by Redis itself, 10,000 per call.
        for start in $(seq 0 10000 $((size - 1))); do
          R eval "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
                    redis.call('ZADD', 'dead', 1700000000 + i, '{\"retry\":true,\"queue\":\"default\",\"class\":\"Flaky\",\"args\":[' .. i .. '],\"jid\":\"' .. string.format('%024x', i) .. '\",\"created_at\":1700000000.5,\"enqueued_at\":1700000000.5,\"error_message\":\"flaky\",\"error_class\":\"RuntimeError\",\"failed_at\":1700000001.25,\"retry_count\":25,\"retried_at\":1700000002.5}')
                  end return 0" 0 "$start" "$(( (start + 10000 < size ? start + 10000 : size) - 1 ))" >/dev/null
        done
        [ "$(R zcard dead)" -eq "$size" ] || { echo "bulk: dead holds $(R zcard dead), not $size" >&2; exit 1; }
        /usr/bin/time -f "elapsed=%e peak_rss_kb=%M" -o "$FIGURES/time" "$BIN" jobs "$action" --all --state dead --yes >/dev/null
        [ "$(R zcard dead)" -eq 0 ] || { echo "bulk: $action left $(R zcard dead) dead jobs" >&2; exit 1; }
        if [ "$action" = retry ]; then
          [ "$(R llen queue:default)" -eq "$size" ] || { echo "bulk: queue:default has $(R llen queue:default)" >&2; exit 1; }
        fi
        record "bulk_${action}_${size}_rss" "$(field peak_rss_kb <"$FIGURES/time")"
        record "bulk_${action}_${size}_rate" "$(echo "$size / $(field elapsed <"$FIGURES/time")" | bc -l)"
      done
    done
  fi

  if [[ " $PARTS " == *" cron "* ]]; then
    R flushdb >/dev/null
    schedule="$FIGURES/schedule.yaml"
    for i in $(seq 1 "$CRON_ENTRIES"); do
      printf -- '- name: scale.%04d\n  cron: "*/10 * * * * *"\n  class: Noop\n  queue: scale-cron\n  args: [%d]\n' "$i" "$i"
    done >"$schedule"
    "$BIN" scheduler --schedule "$schedule" 2>"$FIGURES/scheduler.log" &
    WPID=$!
    # Start counting after the first firing round: from then on every round is a steady one.
    until [ "$(R llen queue:scale-cron)" -ge "$CRON_ENTRIES" ]; do sleep 0.05; done
    sleep 1
    R config resetstat >/dev/null
    cpu0=$(process_cpu "$WPID")
    sleep "$CRON_SECONDS"
    cpu1=$(process_cpu "$WPID")
    read -r hmget hmget_usec < <(cmdstat hmget)
    read -r fires fires_usec < <(cmdstat evalsha)
    all_calls=$(R info commandstats | tr -d '\r' | grep -oE 'calls=[0-9]+' | cut -d= -f2 | paste -sd+ | bc)
    stop_worker
    rounds=$(echo "$hmget / $CRON_ENTRIES" | bc -l)
    firing=$(echo "$fires / $CRON_ENTRIES" | bc -l)
    record cron_rounds "$rounds"
    record cron_firing_rounds "$firing"
    # Commands: INFO/CONFIG of this script are among all_calls (a handful); an idle round is one pipeline of HMGETs.
    record cron_idle_commands "$(echo "$hmget / $rounds" | bc -l)"
    record cron_firing_commands "$(echo "$hmget / $rounds + $fires / $firing" | bc -l)"
    record cron_idle_redis_ms "$(echo "$hmget_usec / $rounds / 1000" | bc -l)"
    record cron_fire_redis_ms "$(echo "$fires_usec / $firing / 1000" | bc -l)"
    record cron_cpu_ms_per_round "$(echo "($cpu1 - $cpu0) * 1000 / $rounds" | bc -l)"
    # commandstats also counts the commands a script runs: those of the fire scripts (and this script's INFO/CONFIG).
    record cron_inner_per_fire "$(echo "($all_calls - $hmget - $fires) / $fires" | bc -l)"
    # Wall time of a firing round: first to last "fired" line of each tick (ms, from the log's millisecond stamps);
    # and from the tick itself to the last "fired" line (how late the last entry's job is, wake-up included: since
    # a round sends its fires in one pipeline and logs them after the replies, every job of the round is in Redis
    # before its first line, and the first-to-last spread is the logging alone).
    python3 - "$FIGURES/scheduler.log" "$CRON_ENTRIES" "$FIGURES/cron_fire_ms" "$FIGURES/cron_tick_to_last_ms" <<'EOF'
import collections, datetime, json, sys
ticks = collections.defaultdict(list)
for line in open(sys.argv[1]):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    if entry.get("msg") == "fired":
        stamp = datetime.datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
        ticks[entry.get("tick")].append(stamp)
complete = [(tick, stamps) for tick, stamps in sorted(ticks.items()) if len(stamps) == int(sys.argv[2])]
with open(sys.argv[3], "a") as spread, open(sys.argv[4], "a") as late:
    for index, (tick, stamps) in enumerate(complete):
        print("%.1f" % ((max(stamps) - min(stamps)) * 1000), file=spread)
        if index > 0:  # the first round ran when the scheduler started, seconds after its tick
            due = datetime.datetime.strptime(tick, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
            print("%.1f" % ((max(stamps) - due) * 1000), file=late)
EOF
  fi
done
R flushdb >/dev/null

echo "== results (median of $RUNS runs, min–max)"
if [[ " $PARTS " == *" queue "* ]]; then
  report enqueue_rate jobs/s "enqueue $N no-op jobs (JobClient.enqueueMany, 1000 per round trip)"
  report bytes_per_job bytes "Redis memory per enqueued job (used_memory after − before, ÷ $N)"
  report payload_bytes bytes "  one payload's length"
  report drain_first jobs/s "drain, first $SLICE jobs (one worker, concurrency 10)"
  report drain_last jobs/s "drain, last $SLICE jobs"
  report drain_all jobs/s "drain, all $N jobs"
fi
if [[ " $PARTS " == *" poller "* ]]; then
  for set in schedule retry; do
    report "${set}_move_s" s "$DUE due in $set: first moved to last moved"
    report "${set}_redis_cpu_s" s "  Redis CPU meanwhile (used_cpu_sys + used_cpu_user)"
    report "${set}_cmd_ms" ms "  EVALSHA + ZRANGEBYSCORE time inside Redis (commandstats)"
    report "${set}_calls" "" "  EVALSHA + ZRANGEBYSCORE calls"
    report "${set}_worker_cpu_s" s "  the worker's CPU (poller: parse, stamp enqueued_at)"
  done
fi
if [[ " $PARTS " == *" bulk "* ]]; then
  for size in $BULK_SIZES; do
    for action in retry delete; do
      report "bulk_${action}_${size}_rss" kB "jobs $action --all --state dead, $size jobs: peak RSS"
      report "bulk_${action}_${size}_rate" jobs/s "  rate"
    done
  done
fi
if [[ " $PARTS " == *" cron "* ]]; then
  report cron_rounds "" "scheduler, $CRON_ENTRIES entries every 10 s, ${CRON_SECONDS} s: rounds"
  report cron_firing_rounds "" "  of which firing ($CRON_ENTRIES ticks each)"
  report cron_idle_commands "" "  Redis commands per round, idle (HMGET, one pipeline)"
  report cron_firing_commands "" "  Redis commands per firing round (HMGETs + one EVALSHA per tick)"
  report cron_idle_redis_ms ms "  Redis time per round, the HMGETs"
  report cron_fire_redis_ms ms "  Redis time per firing round, the fire scripts"
  report cron_cpu_ms_per_round ms "  scheduler CPU per round (average over idle and firing rounds)"
  report cron_fire_ms ms "  wall time of a firing round (first to last 'fired' log line)"
  report cron_tick_to_last_ms ms "  from the tick to the last 'fired' log line (the last job's delay)"
  report cron_inner_per_fire "" "  commands each fire script runs inside Redis (claim, cursor, SADD, LPUSH, history)"
fi
