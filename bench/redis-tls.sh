#!/usr/bin/env bash
# bench/redis-tls.sh — what TLS to Redis costs (issue 57, point 3): drain rate, Redis CPU per job and the worker's
# CPU per job over `rediss://` beside plain `redis://`, in the same run on the same Redis; and whether a fleet's TLS
# handshakes storm a Redis that restarts (every link reconnecting at once).
#
#   bench/redis-tls.sh                                   N=50000, RUNS=3, P=8
#   BIN=/path/to/workerctl N=3000 RUNS=1 P=2 bench/redis-tls.sh        a quick check of one build
#
# One redis-server of the script's own (not the dev one) listening on two ports of the same process: plain
# PLAIN_PORT (default 6396) and TLS TLS_PORT (default 6397), with a test CA and a server certificate for localhost
# and 127.0.0.1 made by `openssl` in a temporary folder (P-256; clients not asked for certificates), no RDB, no AOF.
# The sides: plain `redis://127.0.0.1:PLAIN_PORT/0` and TLS `rediss://localhost:TLS_PORT/0?ca_file=…` (the
# certificate verified, as in production). In each run, both sides, their order alternating from run to run:
#   drain     FLUSHALL, N no-op jobs preloaded over that side's URL (`workerctl enqueue --batch 1000`), then one
#             worker process (`worker --no-database --concurrency CONCURRENCY`, REDIS_URL that side's) drains them.
#             Figures: Redis's own CPU (INFO cpu used_cpu_sys + used_cpu_user: main and background threads) from
#             the phase's start to the last job acknowledged, divided by N, µs per job; the drain rate; the worker's
#             own CPU per job (utime + stime from /proc/PID/stat read before it is stopped: its start-up, TLS
#             handshakes included, and the drain); its peak RSS (`peak_rss_kb` of its "stopped" line). Both sides
#             are clocked by bench/drain_clock.py over the PLAIN port (it only reads; polls every millisecond), whose
#             own cost, measured alone for one second in each run and printed as "clock only", is subtracted for
#             the drain's duration, as bench/redis-cpu.sh does.
#   restart   P idle worker processes on that side's URL; once all are registered (SCARD processes), their start-up
#             CPU is read, Redis is killed (SIGKILL) and started again at once on the same ports with the same
#             certificates; for the new server's first RESTART_SECONDS (10): connections it accepted
#             (total_connections_received, the watcher's own one taken off), how many arrived after the first
#             second, its CPU from its start (INFO cpu), the seconds until all P were registered again, and the
#             fleet's own CPU in those seconds. Also once with no worker at all ("no workers": the new server's
#             own start-up, the floor of both sides).
# With PIN=1 (default on machines with 2+ cores) Redis runs on the last CPU alone and every other process (workers,
# producers, clock, watcher) on the others (taskset), as bench/redis-cpu.sh pins it.
# Every figure is the median of RUNS runs with min–max; TLS/plain ratios are taken within each run. A benchmark, not
# a test: it asserts nothing. Worker logs: /tmp/bench-redis-tls-worker.*.log.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-50000}"
RUNS="${RUNS:-3}"
P="${P:-8}"
CONCURRENCY="${CONCURRENCY:-10}"
PLAIN_PORT="${PLAIN_PORT:-6396}"
TLS_PORT="${TLS_PORT:-6397}"
RESTART_SECONDS="${RESTART_SECONDS:-10}"
PIN="${PIN:-$([ "$(nproc)" -ge 2 ] && echo 1 || echo 0)}"
for cmd in redis-server redis-cli openssl python3 bc; do
  command -v "$cmd" >/dev/null || { echo "$cmd is not installed" >&2; exit 1; }
done

. bench/lib.sh
release_workerctl

FIGURES="$(mktemp -d)"
TLS_DIR="$(mktemp -d)"
REDIS_PID=""
STARTED=()
stop_started() { for p in "${STARTED[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
stop_redis() { [ -n "$REDIS_PID" ] && { kill -KILL "$REDIS_PID" 2>/dev/null || true; wait "$REDIS_PID" 2>/dev/null || true; }; REDIS_PID=""; }
trap 'stop_started; stop_redis; rm -rf "$FIGURES" "$TLS_DIR"' EXIT

# Everything but Redis runs through $CLIENT (pinned off Redis's CPU when PIN=1); Redis through $SERVER.
CLIENT=()
SERVER=()
if [ "$PIN" = 1 ]; then
  command -v taskset >/dev/null || { echo "PIN=1 needs taskset (util-linux)" >&2; exit 1; }
  SERVER=(taskset -c "$(($(nproc) - 1))")
  CLIENT=(taskset -c "0-$(($(nproc) - 2))")
fi

# The test CA and the server's certificate (the commands of Tests/TestSupport/TLSRedisServer.swift).
certificates() {
  local curve=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes) d=$TLS_DIR
  openssl req -x509 "${curve[@]}" -keyout "$d/ca.key" -out "$d/ca.crt" -days 2 -subj "/CN=Workers bench CA" 2>/dev/null
  echo "subjectAltName=DNS:localhost,IP:127.0.0.1" >"$d/server.ext"
  openssl req "${curve[@]}" -keyout "$d/server.key" -out "$d/server.csr" -subj "/CN=localhost" 2>/dev/null
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -out "$d/server.crt" \
    -days 2 -extfile "$d/server.ext" 2>/dev/null
}
certificates

PLAIN_URL="redis://127.0.0.1:$PLAIN_PORT/0"
TLS_URL="rediss://localhost:$TLS_PORT/0?ca_file=$TLS_DIR/ca.crt"
url_of() { if [ "$1" = tls ]; then echo "$TLS_URL"; else echo "$PLAIN_URL"; fi; }
# Every reading of ours goes over the plain port: INFO is the same process's whichever port asks.
R() { redis-cli -h 127.0.0.1 -p "$PLAIN_PORT" "$@"; }

for port in "$PLAIN_PORT" "$TLS_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "port $port is in use (PLAIN_PORT / TLS_PORT)" >&2; exit 1; fi
done
STARTS=0
# Starts the redis-server (sets REDIS_PID) and returns once it accepts connections on both ports; `quiet` waits
# without connecting (its log says so), so that the restart phase counts only the workers' connections.
start_redis() {
  STARTS=$((STARTS + 1))
  local log="$TLS_DIR/redis.$STARTS.log"
  "${SERVER[@]}" redis-server --bind 127.0.0.1 --port "$PLAIN_PORT" --tls-port "$TLS_PORT" \
    --tls-cert-file "$TLS_DIR/server.crt" --tls-key-file "$TLS_DIR/server.key" --tls-ca-cert-file "$TLS_DIR/ca.crt" \
    --tls-auth-clients no --save "" --appendonly no --dir "$TLS_DIR" --logfile "$log" >/dev/null 2>&1 &
  REDIS_PID=$!
  [ "${1:-}" = quiet ] && return 0
  for _ in $(seq 1 500); do
    grep -q "Ready to accept connections" "$log" 2>/dev/null && R ping >/dev/null 2>&1 && return 0
    kill -0 "$REDIS_PID" 2>/dev/null || break
    sleep 0.02
  done
  cat "$log" >&2; echo "redis-server did not start" >&2; exit 1
}
start_redis

registered() { for _ in $(seq 1 600); do [ "$(R scard processes)" -ge "$1" ] && { sleep 0.5; return 0; }; sleep 0.05; done; echo "workers did not register" >&2; exit 1; }
per_job() { echo "($2 - $1) * 1000000 / $N" | bc -l; }  # per_job CPU_BEFORE CPU_AFTER -> µs per job
stop_workers() { for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done; for p in "$@"; do wait "$p" 2>/dev/null || true; done; }
start_workers() {  # start_workers SIDE COUNT TAG: sets PIDS
  PIDS=()
  for i in $(seq 1 "$2"); do
    REDIS_URL="$(url_of "$1")" "${CLIENT[@]}" "$BIN" worker --no-database --concurrency "$CONCURRENCY" \
      2>>"/tmp/bench-redis-tls-worker.$1.$3.$i.log" &
    PIDS+=($!); STARTED+=($!)
  done
}
fleet_cpu() { local s=0 p; for p in "$@"; do s=$(echo "$s + $(process_cpu "$p")" | bc -l); done; echo "$s"; }
clock_start_pinned() {  # as bench/lib.sh's clock_start, the clock pinned with the clients, over the plain port
  rm -f "$FIGURES/clock.ready"
  "${CLIENT[@]}" python3 bench/drain_clock.py "$PLAIN_URL" "$1" ours "$FIGURES/clock.ready" >"$FIGURES/clock" &
  CLOCK_PID=$!
  until [ -e "$FIGURES/clock.ready" ]; do
    kill -0 "$CLOCK_PID" 2>/dev/null || { echo "the drain clock stopped before the drain began" >&2; exit 1; }
    sleep 0.01
  done
}
preload() {  # preload SIDE
  R flushall >/dev/null
  REDIS_URL="$(url_of "$1")" "${CLIENT[@]}" "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null
  [ "$(R llen queue:default)" = "$N" ] || { echo "preload over $1: $(R llen queue:default) jobs queued, not $N" >&2; exit 1; }
}

drain() {  # drain SIDE
  local side=$1 cpu0 cpu1 wcpu
  preload "$side"
  cpu0=$(redis_cpu)
  clock_start_pinned "$N"
  start_workers "$side" 1 drain
  clock_read
  cpu1=$(redis_cpu)
  wcpu=$(process_cpu "${PIDS[0]}")
  stop_workers "${PIDS[@]}"
  record "${side}_us" "$(per_job "$cpu0" "$(echo "$cpu1 - $CLOCK_CPU_PER_S * $ELAPSED" | bc -l)")"
  record "${side}_rate" "$(echo "$N / $ELAPSED" | bc -l)"
  record "${side}_worker_us" "$(echo "$wcpu * 1000000 / $N" | bc -l)"
  record "${side}_rss" "$(field peak_rss_kb <"/tmp/bench-redis-tls-worker.$side.drain.1.log")"
  printf '   %-5s drain: Redis %.2f µs/job, %.0f jobs/s, worker %.2f µs/job, peak RSS %s kB\n' "$side" \
    "$(tail -1 "$FIGURES/${side}_us")" "$(tail -1 "$FIGURES/${side}_rate")" "$(tail -1 "$FIGURES/${side}_worker_us")" \
    "$(tail -1 "$FIGURES/${side}_rss")"
}

# The new server's first RESTART_SECONDS, watched from one connection of its own (over the plain port; refused
# attempts before the server listens are not accepted, so not counted): prints its connections accepted (this one
# taken off), those after the first second, its CPU from its start, and the seconds until SCARD processes reached
# WANT (-1: not within the window). Times count from the server's start.
watch_restart() {  # watch_restart WANT
  "${CLIENT[@]}" python3 - "$PLAIN_PORT" "$RESTART_SECONDS" "$1" <<'PY'
import socket, sys, time
port, seconds, want = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
start = time.monotonic()
while True:
    try:
        sock = socket.create_connection(("127.0.0.1", port)); break
    except OSError:
        if time.monotonic() - start > seconds: sys.exit("the restarted redis-server does not listen")
        time.sleep(0.002)
f = sock.makefile("rb")
def call(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = str(a).encode(); out += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(out)
    line = f.readline(); kind, rest = line[:1], line[1:-2]
    if kind == b":": return int(rest)
    if kind == b"$": return f.read(int(rest) + 2)[:-2].decode()
    if kind == b"-": raise RuntimeError(rest.decode())
    return rest.decode()
def info(section):
    return dict(l.split(":", 1) for l in call("INFO", section).splitlines() if ":" in l)
while True:  # "loading" until the server is ready
    try: call("PING"); break
    except RuntimeError: time.sleep(0.002)
back, first_second = -1.0, None
while True:
    now = time.monotonic() - start
    if now >= seconds: break
    if first_second is None and now >= 1.0:
        first_second = int(info("stats")["total_connections_received"])
    if back < 0 and want > 0 and call("SCARD", "processes") >= want: back = now
    time.sleep(0.05)
total = int(info("stats")["total_connections_received"])
cpu = info("cpu"); cpu = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
print(total - 1, total - (first_second or total), "%.6f" % cpu, "%.3f" % back)
PY
}

restart() {  # restart SIDE|none: P idle workers on SIDE's URL (none: no worker), Redis killed and started again
  local side=$1 want=0 cpu0 cpu1 conns late rcpu back
  R flushall >/dev/null
  PIDS=()
  if [ "$side" != none ]; then
    want=$P
    start_workers "$side" "$P" restart
    registered "$P"
    record "${side}_start_ms" "$(echo "$(fleet_cpu "${PIDS[@]}") * 1000 / $P" | bc -l)"
    cpu0=$(fleet_cpu "${PIDS[@]}")
  fi
  stop_redis
  start_redis quiet
  read -r conns late rcpu back < <(watch_restart "$want")
  record "restart_${side}_conns" "$conns"
  record "restart_${side}_late" "$late"
  record "restart_${side}_cpu_ms" "$(echo "$rcpu * 1000" | bc -l)"
  if [ "$side" != none ]; then
    cpu1=$(fleet_cpu "${PIDS[@]}")
    record "restart_${side}_fleet_ms" "$(echo "($cpu1 - $cpu0) * 1000" | bc -l)"
    [ "$back" != -1.000 ] && record "restart_${side}_back" "$back"
    stop_workers "${PIDS[@]}"
    printf '   %-5s restart, %s workers: %s connections in %ss (%s after the first second), Redis %.1f ms CPU, all registered again at %ss, fleet %.1f ms CPU\n' \
      "$side" "$P" "$conns" "$RESTART_SECONDS" "$late" "$(echo "$rcpu * 1000" | bc -l)" \
      "$([ "$back" = -1.000 ] && echo "(not within $RESTART_SECONDS)" || echo "$back")" "$(tail -1 "$FIGURES/restart_${side}_fleet_ms")"
  else
    printf '   no workers restart: %s connections in %ss, Redis %.1f ms CPU\n' "$conns" "$RESTART_SECONDS" "$(echo "$rcpu * 1000" | bc -l)"
  fi
  # The server is back: wait until it answers before the next phase reads it.
  for _ in $(seq 1 500); do R ping >/dev/null 2>&1 && return 0; sleep 0.02; done
  echo "redis-server did not come back" >&2; exit 1
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $(openssl version); Redis $(redis-server --version | grep -oE 'v=[^ ]+' | cut -d= -f2) (ports $PLAIN_PORT plain," \
     "$TLS_PORT TLS, no RDB/AOF); N=$N, RUNS=$RUNS, 1 drain process x concurrency $CONCURRENCY, restart P=$P," \
     "Redis $([ "$PIN" = 1 ] && echo "pinned to CPU $(($(nproc) - 1)), clients on the others" || echo unpinned)"
rm -f /tmp/bench-redis-tls-worker.*.log

for run in $(seq 1 "$RUNS"); do
  echo "-- run $run of $RUNS (load $(cut -d' ' -f1 /proc/loadavg))"
  if [ $((run % 2)) = 1 ]; then SIDES="plain tls"; else SIDES="tls plain"; fi
  # The clock's own polling, alone: the floor every drain figure below contains.
  preload plain
  cpu0=$(redis_cpu)
  clock_start_pinned "$N"
  sleep 1
  kill "$CLOCK_PID" 2>/dev/null || true; wait "$CLOCK_PID" 2>/dev/null || true
  CLOCK_CPU_PER_S=$(echo "$(redis_cpu) - $cpu0" | bc -l)
  record clock_us_per_s "$(echo "$CLOCK_CPU_PER_S * 1000000" | bc -l)"

  for side in $SIDES; do drain "$side"; done
  for what in us rate worker_us; do
    record "ratio_$what" "$(echo "$(tail -1 "$FIGURES/tls_$what") / $(tail -1 "$FIGURES/plain_$what")" | bc -l)"
  done

  restart none
  for side in $SIDES; do restart "$side"; done
  record ratio_restart_conns "$(echo "$(tail -1 "$FIGURES/restart_tls_conns") / $(tail -1 "$FIGURES/restart_plain_conns")" | bc -l)"
done

ratio() {  # ratio NAME LABEL
  [ -s "$FIGURES/$1" ] || return 0
  python3 - "$FIGURES/$1" "$2" <<'EOF'
import statistics, sys
v = [float(x) for x in open(sys.argv[1]) if x.strip()]
print("%s: %.2f× (min %.2f – max %.2f, %d runs)" % (sys.argv[2], statistics.median(v), min(v), max(v), len(v)))
EOF
}
echo
echo "== drain of N=$N no-op jobs, 1 worker x $CONCURRENCY (Redis CPU: the drain clock's own polling subtracted)"
report clock_us_per_s "µs of Redis CPU per second" "clock only (1 ms polls)"
for side in plain tls; do
  echo "-- $side ($(url_of "$side"))"
  report "${side}_us" "µs/job" "Redis CPU per job"
  report "${side}_rate" "jobs/s" "drain rate"
  report "${side}_worker_us" "µs/job" "worker CPU per job (its start-up included)"
  report "${side}_rss" kB "worker peak RSS (its \"stopped\" line)"
done
echo "-- TLS / plain, within each run"
ratio ratio_us "Redis CPU per job"
ratio ratio_rate "drain rate"
ratio ratio_worker_us "worker CPU per job"
echo
echo "== Redis restarted (SIGKILL, started again at once) under $P idle workers: the new server's first ${RESTART_SECONDS}s"
echo "-- no workers (the new server alone)"
report restart_none_conns connections accepted
report restart_none_cpu_ms ms "Redis CPU from its start"
for side in plain tls; do
  echo "-- $side, $P workers"
  report "${side}_start_ms" "ms" "a worker's CPU from its start to registered (before the restart)"
  report "restart_${side}_conns" connections accepted
  report "restart_${side}_late" connections "   of which after the first second"
  report "restart_${side}_cpu_ms" ms "Redis CPU from its start"
  report "restart_${side}_back" s "all $P registered again after"
  report "restart_${side}_fleet_ms" ms "the $P workers' CPU in those seconds"
done
echo "-- TLS / plain, within each run"
ratio ratio_restart_conns "connections accepted"
