#!/usr/bin/env bash
# bench/request_budget.sh — what one dashboard GET or one worker's /metrics scrape costs Redis with what producers can
# grow at scale (issue 51 point 3, review M5): QUEUES names in `queues` (default 200,000, empty queues as a producer's
# `SADD` leaves them) and KEYS other keys (default 1,000,000 `progress:*` strings), plus a dead job, a declared limit
# with 50 instances and 50 unique locks. Goal: at most 10 ms of Redis time per request.
#
# For each of /, /api/stats.json, /limits, /unique, the dead job's page and a worker's /metrics: `CONFIG RESETSTAT`,
# the request (curl), then `INFO commandstats`: Redis time (the sum of `usec`, the main thread's time executing the
# request's commands), commands, reply bytes (`total_net_output_bytes`) and the body's size. Medians of RUNS.
#
#   bench/request_budget.sh                                 a fresh release build (bench/lib.sh)
#   BIN=.build/debug/workerctl QUEUES=20000 KEYS=100000 bench/request_budget.sh
#
# A benchmark, not a test: it asserts nothing (RequestBudgetTests counts commands and bytes at 1× and 100× without a
# clock). Starts its own redis-server (no persistence) on PORT (default 6532), so no other client is counted; the
# worker scrape's window also holds that worker's own background commands (a heartbeat at most: a few commands).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
QUEUES="${QUEUES:-200000}"
KEYS="${KEYS:-1000000}"
RUNS="${RUNS:-5}"
PORT="${PORT:-6532}"
WORK="$(mktemp -d)"
REDIS_PID="" WEB_PID="" WORKER_PID=""
cleanup() {
  for pid in "$WEB_PID" "$WORKER_PID" "$REDIS_PID"; do
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

. bench/lib.sh
release_workerctl

redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
R() { redis-cli -p "$PORT" "$@"; }
for _ in $(seq 50); do R ping >/dev/null 2>&1 && break; sleep 0.1; done
R flushall >/dev/null

echo "== filling: $QUEUES queue names, $KEYS keys"
# Lua loops in chunks of 100,000 (each call blocks Redis for well under a second).
LOOP='for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call(ARGV[3], ARGV[4] .. i, ARGV[5]) end'
fill() { # command prefix count value
  local start=1
  while [ "$start" -le "$3" ]; do
    local end=$((start + 99999)); [ "$end" -gt "$3" ] && end="$3"
    R eval "$LOOP" 0 "$start" "$end" "$1" "$2" "$4" >/dev/null
    start=$((end + 1))
  done
}
R eval 'for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call("SADD", "queues", "bulk-" .. i) end' 0 1 "$QUEUES" >/dev/null
fill SET progress:fill- "$KEYS" '{}'
NOW="$(date +%s)"
JID=0123456789abcdef01234567
R zadd dead "$NOW" "{\"class\":\"Failing\",\"args\":[1],\"queue\":\"default\",\"jid\":\"$JID\",\"created_at\":$NOW,\"enqueued_at\":$NOW,\"error_class\":\"RuntimeError\",\"error_message\":\"boom\",\"failed_at\":$NOW,\"retry_count\":2}" >/dev/null
R hset limits per-user "concurrent 1 60000" >/dev/null
R eval 'for i = 1, 50 do redis.call("ZADD", "limit:per-user:user-" .. i, ARGV[1], "lease-" .. i) end' 0 "$(( (NOW + 3600) * 1000 ))" >/dev/null
R eval 'for i = 1, 50 do local d = redis.sha1hex("lock" .. i) .. string.sub(redis.sha1hex("x" .. i), 1, 24)
  redis.call("SET", "unique:" .. d, "uniq" .. i, "EX", 3600)
  redis.call("HSET", "unique-jid:uniq" .. i, "class", "Noop", "queue", "default", "lock", "unique:" .. d) end' 0 >/dev/null
echo "   $(R dbsize) keys, $(R scard queues) queue names"

export REDIS_URL="redis://127.0.0.1:$PORT/0" DATABASE_URL=""
"$BIN" web --port 0 >"$WORK/web.log" 2>&1 &
WEB_PID=$!
url_in() { # log field
  for _ in $(seq 100); do
    local url
    url="$(grep -o "\"$2\":\"[^\"]*\"" "$1" | head -1 | cut -d'"' -f4 || true)"
    [ -n "$url" ] && { echo "$url"; return 0; }
    sleep 0.1
  done
  echo "no $2 in $1:" >&2; cat "$1" >&2; exit 1
}
WEB="$(url_in "$WORK/web.log" web_url)"

# The worker runs only for its scrape, started after the dashboard's figures; its own housekeeping (the orphan sweep's
# `SCAN working:*`, every 15 s) is no part of a scrape: EXCLUDE names the commands left out of its window.
EXCLUDE="cmdstat_config|resetstat"
measure() { # url → one line per run: usec commands body
  local url="$1"
  R config resetstat >/dev/null
  local body
  body="$(curl -s -o "$WORK/body" -w '%{size_download}' "$url")"
  R info commandstats | tr -d '\r' >"$WORK/stats"
  awk -F'[:,=]' -v ex="$EXCLUDE:" '/^cmdstat_/ && index(ex, $1 ":") == 0 { print $5, substr($1, 9) "×" $3 }' "$WORK/stats" \
    | sort -rn | head -3 | awk '{ printf "%s%s %dµs", (NR > 1 ? ", " : ""), $2, $1 }' >"$WORK/top"
  awk -F'[:,=]' -v body="$body" -v ex="$EXCLUDE:" '
    /^cmdstat_/ && index(ex, $1 ":") == 0 { calls += $3; usec += $5 }
    END { printf "%d %d %d\n", usec, calls, body }' "$WORK/stats"
  R info stats | awk -F: '/^total_net_output_bytes/ { print $2 - 5 }' | tr -d '\r' >>"$WORK/bytes"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '%-22s %10s %9s %12s %12s  %s\n' "request" "Redis µs" "commands" "reply bytes" "body bytes" "costliest (last run)"
row() { # name url
  local name="$1" url="$2"
  : >"$WORK/runs"; : >"$WORK/bytes"
  for _ in $(seq "$RUNS"); do measure "$url" >>"$WORK/runs"; done
  printf '%-22s %10s %9s %12s %12s  %s\n' "$name" "$(cut -d' ' -f1 "$WORK/runs" | median)" "$(cut -d' ' -f2 "$WORK/runs" | median)" \
    "$(median <"$WORK/bytes")" "$(cut -d' ' -f3 "$WORK/runs" | median)" "$(cat "$WORK/top")"
}
row / "$WEB"
row /api/stats.json "${WEB}api/stats.json"
row /limits "${WEB}limits"
row /unique "${WEB}unique"
row "dead job's page" "${WEB}job/$JID"
kill -TERM "$WEB_PID"; wait "$WEB_PID" 2>/dev/null || true; WEB_PID=""

"$BIN" worker --no-database --metrics-port 0 --queue benchq >"$WORK/worker.log" 2>&1 &
WORKER_PID=$!
METRICS="$(url_in "$WORK/worker.log" metrics_url)"
EXCLUDE="cmdstat_config|resetstat:cmdstat_scan"
row "worker /metrics" "$METRICS"
