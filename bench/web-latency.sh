#!/usr/bin/env bash
# bench/web-latency.sh — how long `workerctl web` takes to answer the page of a queue holding N jobs (issue 36:
# target under a second for 1,000,000). Fills queue `big` with N copies of one small payload (a Lua script, RPUSH in
# batches of 1,000: seconds), starts the dashboard on a free port, and times with curl (median of RUNS):
#   the queue's first page, a page in the middle of it, /queues and / (which list the queue with its size and latency).
#
#   bench/web-latency.sh                              N=1000000 RUNS=3, a fresh release build (bench/lib.sh)
#   BIN=.build/debug/workerctl N=200000 bench/web-latency.sh
#
# A benchmark, not a test: it asserts nothing (WebDashboardTests.testAQueueOfAMillionJobsIsReadInABoundedSlice
# checks the page issues the same Redis commands for 10 and 1,000,010 jobs). Uses Redis database 127 of the
# private instance (scripts/services), emptied before and after.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-1000000}"
RUNS="${RUNS:-3}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
DB="${DB:-127}"
URL="${REDIS_URL%/*}/$DB"
R() { redis-cli -u "$URL" "$@"; }
FIGURES="$(mktemp -d)"
LOG="$FIGURES/web.log"
WEB_PID=""
cleanup() {
  [ -n "$WEB_PID" ] && kill -TERM "$WEB_PID" 2>/dev/null && wait "$WEB_PID" 2>/dev/null || true
  R flushdb >/dev/null || true
  rm -rf "$FIGURES"
}
trap cleanup EXIT

. bench/lib.sh
release_workerctl

R flushdb >/dev/null
PAYLOAD='{"class":"Noop","args":[1],"retry":true,"queue":"big","jid":"0123456789abcdef01234567","created_at":1764201600.0,"enqueued_at":1764201600.0}'
FILL='local b = {} for i = 1, 1000 do b[i] = ARGV[1] end
for j = 1, tonumber(ARGV[2]) do redis.call("RPUSH", KEYS[1], unpack(b)) end
local rest = tonumber(ARGV[3]) for i = 1, rest do redis.call("RPUSH", KEYS[1], ARGV[1]) end
redis.call("SADD", KEYS[2], "big") return redis.call("LLEN", KEYS[1])'
START=$(date +%s.%N)
SIZE=$(R eval "$FILL" 2 queue:big queues "$PAYLOAD" $((N / 1000)) $((N % 1000)))
echo "== queue big: $SIZE jobs pushed in $(echo "$(date +%s.%N) - $START" | bc) s"

REDIS_URL="$URL" "$BIN" web --port 0 2>"$LOG" &
WEB_PID=$!
BASE=""
for _ in $(seq 1 200); do
  BASE="$(grep -oE '"web_url":"[^"]+"' "$LOG" | head -1 | sed -E 's/.*"(http[^"]+)"/\1/')" || true
  [ -n "$BASE" ] && break
  sleep 0.05
done
[ -n "$BASE" ] || { echo "the dashboard did not start:" >&2; cat "$LOG" >&2; exit 1; }

MIDDLE=$(( N / 25 / 2 + 1 ))
[ "$MIDDLE" -gt 1000000 ] && MIDDLE=1000000
for run in $(seq 1 "$RUNS"); do
  for page in "first:jobs/enqueued?queue=big" "middle:jobs/enqueued?queue=big&page=$MIDDLE" "queues:queues" "dashboard:"; do
    name="${page%%:*}"; path="${page#*:}"
    seconds=$(curl -s -o /dev/null -w '%{time_total}' "$BASE$path")
    record "$name" "$(echo "$seconds * 1000" | bc)"
  done
done
report first ms "queue of $SIZE jobs, first page (/jobs/enqueued?queue=big)"
report middle ms "queue of $SIZE jobs, page $MIDDLE (the middle)"
report queues ms "/queues"
report dashboard ms "/ (dashboard)"
