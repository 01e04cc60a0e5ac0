#!/usr/bin/env bash
# bench/outage-cpu.sh — what a worker costs while Redis is down (issue 56): a `workerctl run` (worker, scheduler, outbox
# relay with its lost-job finder, metrics endpoint) at its default intervals loses its Redis for OUTAGE seconds
# (default 60). "Redis" is then a listener that accepts and closes every connection, counting them: the process's
# connection attempts, counted by the server side, and its CPU (utime + stime from /proc, clock ticks) over the
# outage. One run (the figures are counts, not latencies).
#
#   bench/outage-cpu.sh              release build (scripts/release-build)
#   BIN=path/to/workerctl OUTAGE=60 bench/outage-cpu.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source bench/lib.sh
release_workerctl
scripts/services start >/dev/null
eval "$(scripts/services env)"
OUTAGE="${OUTAGE:-60}"
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" 2>&1 &
redis_pid=$!
worker_pid=""
cleanup() {
  [ -n "$worker_pid" ] && kill -TERM "$worker_pid" 2>/dev/null || true
  kill -9 "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
cat >"$work/schedule.yaml" <<'YAML'
- name: every_second
  cron: "* * * * * *"
  class: Noop
  catch_up: skip
YAML
REDIS_URL="redis://127.0.0.1:$port/0" "$BIN" run --schedule "$work/schedule.yaml" --outbox-relay --metrics-port 0 \
  2>"$work/worker.log" &
worker_pid=$!
sleep 1; kill -0 "$worker_pid" || { echo "worker did not start:"; tail -5 "$work/worker.log"; exit 1; }
for _ in $(seq 100); do [ "$(redis-cli -p "$port" get stat:processed 2>/dev/null || true)" -ge 2 ] 2>/dev/null && break; sleep 0.2; done
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$worker_pid/stat"; }
kill -9 "$redis_pid"; wait "$redis_pid" 2>/dev/null || true
before="$(ticks)"
attempts="$(python3 - "$port" "$OUTAGE" <<'PY'
import socket, sys, time
port, outage = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(128); s.settimeout(0.2)
count, end = 0, time.time() + outage
while time.time() < end:
    try:
        c, _ = s.accept(); c.close(); count += 1
    except socket.timeout:
        pass
print(count)
PY
)"
after="$(ticks)"
hz="$(getconf CLK_TCK)"
used=$((after - before))
echo "outage ${OUTAGE} s: ${attempts} connection attempts ($(python3 -c "print(f'{$attempts/$OUTAGE:.2f}')")/s), CPU ${used} ticks at ${hz}/s = $(python3 -c "print(f'{100*$used/$hz/$OUTAGE:.2f}')") % of one core"
kill -0 "$worker_pid" 2>/dev/null && echo "worker alive after the outage" || { echo "worker died:"; tail -5 "$work/worker.log"; exit 1; }
