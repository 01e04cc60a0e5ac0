#!/usr/bin/env bash
# bench/latency.sh — the Swift worker next to Ruby Sidekiq 6.4.1 with Redis on loopback and behind a 1 ms round trip
# (issue 18; Sidekiq 7's own benchmark, bin/sidekiqload, simulates 1 ms).
#
#   bench/latency.sh                       N=20000 no-op jobs, concurrency 10, RUNS=3, DELAY_US=500 each way
#   N=5000 RUNS=1 SKIP_SIDEKIQ=1 bench/latency.sh
#
# Three links between the workers and Redis, each measured the same way for both sides:
#   loopback   the workers talk to Redis directly;
#   proxy 0    through bench/delay_proxy.c with no delay (what the proxy itself costs);
#   1 ms RTT   through the proxy holding every byte DELAY_US µs each way (2 × 500 µs = 1 ms round trip).
# The delay is a user-space proxy, not `tc netem` in a network namespace: this machine's kernel has network
# namespaces and veth but no sch_netem (`tc qdisc add … netem` answers "Specified qdisc kind is unknown";
# CONFIG_NET_SCH_NETEM is not set), so there is no namespace to set up or clean. The proxy is stopped on exit (trap).
# Producers (the enqueue commands) go through the same link as the workers; the clocks and checks of the script
# itself talk to Redis directly.
#
# Per link: drain rate of N preloaded no-op jobs until every job is acknowledged (ours: one process; Sidekiq: 2
# processes x 5 threads, as bench/throughput.sh), and pickup latency p50/p99 at a steady STEADY_RATE jobs/s.
# Every figure is the median of RUNS runs with min–max. Prints the Redis persistence and the machine's load.
# A benchmark, not a test: it asserts nothing. Uses Redis database 87 of the private instance (scripts/services).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-20000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-10}"
DELAY_US="${DELAY_US:-500}"
STEADY_RATE="${STEADY_RATE:-200}"
STEADY_SECONDS="${STEADY_SECONDS:-5}"
scripts/services install >/dev/null
scripts/services start 2>/dev/null
eval "$(scripts/services env)"
DB="${DB:-87}"
DIRECT_URL="${REDIS_URL%/*}/$DB"
REDIS_PORT_DIRECT="$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+)/[0-9]+$#\1#')"
R() { redis-cli -u "$DIRECT_URL" "$@"; }
CLOCK_URL="$DIRECT_URL"   # bench/lib.sh clock_start: the clock talks to Redis directly

. bench/lib.sh
release_workerctl

SIDEKIQ=0
if [ "${SKIP_SIDEKIQ:-0}" != 1 ] && command -v sidekiq >/dev/null; then SIDEKIQ=1; fi

FIGURES="$(mktemp -d)"
chmod 755 "$FIGURES"
PROXY_PID=""
stop_proxy() { if [ -n "$PROXY_PID" ]; then kill "$PROXY_PID" 2>/dev/null || true; wait "$PROXY_PID" 2>/dev/null || true; PROXY_PID=""; fi; }
trap 'stop_proxy; rm -rf "$FIGURES"' EXIT
PROXY_BIN="$FIGURES/delay_proxy"
cc -O2 -pthread -o "$PROXY_BIN" bench/delay_proxy.c || { echo "could not build bench/delay_proxy.c: nothing measured" >&2; exit 1; }
PROXY_PORT=$((REDIS_PORT_DIRECT + 10000))

# Starts the proxy with $1 µs each way; sets WORKER_URL to the link the workers and producers use.
link() {
  stop_proxy
  case "$1" in
    direct) WORKER_URL="$DIRECT_URL" ;;
    *)
      "$PROXY_BIN" "$PROXY_PORT" "$REDIS_PORT_DIRECT" "$1" 2>/dev/null &
      PROXY_PID=$!
      for _ in $(seq 1 100); do redis-cli -p "$PROXY_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
      WORKER_URL="redis://127.0.0.1:$PROXY_PORT/$DB"
      ;;
  esac
}
# Median round trip of 200 PINGs on the current link, in ms (what the workers see).
measure_rtt() {
  python3 - "$WORKER_URL" <<'EOF'
import socket, statistics, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
s = socket.create_connection((u.hostname, u.port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
samples = []
for _ in range(200):
    t = time.perf_counter(); s.sendall(b"PING\r\n"); s.recv(64); samples.append((time.perf_counter() - t) * 1000)
print("%.3f" % statistics.median(samples))
EOF
}

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== redis persistence: appendonly $(R config get appendonly | tail -1), appendfsync $(R config get appendfsync | tail -1)"
echo "== N=$N, RUNS=$RUNS, concurrency $CONCURRENCY, delay ${DELAY_US} µs each way, Sidekiq $([ $SIDEKIQ = 1 ] && ruby -rsidekiq -e 'print Sidekiq::VERSION' || echo skipped)"

LINKS=(direct 0 "$DELAY_US")
# steady SIDE: PickupProbe jobs at STEADY_RATE for STEADY_SECONDS; each records its exact pickup latency in a
# per-process file (bench/throughput.sh explains the method); p50/p99 by bench/percentiles.py.
steady() {
  local samples="$FIGURES/samples-$1-$tag-$run" line
  mkdir -m 777 "$samples"
  REDIS_URL="$WORKER_URL" "$BIN" enqueue PickupProbe --args "[\"$samples\"]" --count $((STEADY_RATE * STEADY_SECONDS)) \
    --rate "$STEADY_RATE" >/dev/null
  sleep 1
  line=$(cat "$samples"/pickup.* | python3 bench/percentiles.py "$1: pickup")
  record "${tag}_$1_p50" "$(echo "$line" | sed -nE 's/.* p50 ([0-9.]+) ms.*/\1/p')"
  record "${tag}_$1_p99" "$(echo "$line" | sed -nE 's/.* p99 ([0-9.]+) ms.*/\1/p')"
}
name_of() { case "$1" in direct) echo loopback ;; 0) echo proxy0 ;; *) echo delayed ;; esac; }

for run in $(seq 1 "$RUNS"); do
  for l in "${LINKS[@]}"; do
    link "$l"
    tag=$(name_of "$l")
    echo "-- run $run of $RUNS, link $tag"
    record "${tag}_rtt" "$(measure_rtt)"

    R flushdb >/dev/null
    REDIS_URL="$WORKER_URL" "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null
    clock_start "$N" ours
    REDIS_URL="$WORKER_URL" "$BIN" worker --no-database --concurrency "$CONCURRENCY" 2>/tmp/bench-latency-worker.log &
    WPID=$!
    clock_read
    kill -TERM $WPID; wait $WPID || true
    OURS=$(echo "$N / $ELAPSED" | bc -l)
    record "${tag}_ours_drain" "$OURS"

    R flushdb >/dev/null
    REDIS_URL="$WORKER_URL" "$BIN" worker --no-database --bench-jobs --concurrency "$CONCURRENCY" 2>/tmp/bench-latency-worker.log &
    WPID=$!
    sleep 1
    steady ours
    kill -TERM $WPID; wait $WPID || true

    if [ $SIDEKIQ = 1 ]; then
      R flushdb >/dev/null
      REDIS_URL="$WORKER_URL" "$BIN" enqueue Noop --count "$N" --batch 1000 >/dev/null
      PIDS=()
      clock_start "$N" sidekiq
      for _ in 1 2; do
        REDIS_URL="$WORKER_URL" BENCH_DONE=1 sidekiq -r ./bench/sidekiq_noop.rb -c 5 -q default >/tmp/bench-latency-sidekiq.log 2>&1 &
        PIDS+=($!)
      done
      clock_read
      for p in "${PIDS[@]}"; do kill -TERM "$p"; done
      wait "${PIDS[@]}" || true
      THEIRS=$(echo "$N / $ELAPSED" | bc -l)
      record "${tag}_sidekiq_drain" "$THEIRS"
      record "${tag}_ratio" "$(echo "$OURS / $THEIRS" | bc -l)"

      R flushdb >/dev/null
      PIDS=()
      for _ in 1 2; do
        REDIS_URL="$WORKER_URL" sidekiq -r ./bench/sidekiq_noop.rb -c 5 -q default >/tmp/bench-latency-sidekiq.log 2>&1 &
        PIDS+=($!)
      done
      sleep 4   # Ruby boots
      steady sidekiq
      for p in "${PIDS[@]}"; do kill -TERM "$p"; done
      wait "${PIDS[@]}" || true
    fi
  done
done
stop_proxy
R flushdb >/dev/null

echo "== results (median of $RUNS runs, min–max); drain clocks stop when every job is acknowledged; load now $(cut -d' ' -f1-3 /proc/loadavg)"
for l in "${LINKS[@]}"; do
  tag=$(name_of "$l")
  case "$tag" in loopback) label="loopback" ;; proxy0) label="proxy, no delay" ;; *) label="proxy, ${DELAY_US} µs each way" ;; esac
  report "${tag}_rtt" ms "[$label] PING round trip seen by the workers"
  report "${tag}_ours_drain" jobs/s "[$label] ours: drain $N no-op jobs, one process, concurrency $CONCURRENCY"
  report "${tag}_ours_p50" ms "[$label] ours: pickup p50 at $STEADY_RATE jobs/s (exact samples)"
  report "${tag}_ours_p99" ms "[$label] ours: pickup p99 at $STEADY_RATE jobs/s (exact samples)"
  if [ $SIDEKIQ = 1 ]; then
    report "${tag}_sidekiq_drain" jobs/s "[$label] sidekiq: drain $N no-op jobs, 2 processes x 5 threads"
    report "${tag}_ratio" "" "[$label] ratio ours/sidekiq (per run)"
    report "${tag}_sidekiq_p50" ms "[$label] sidekiq: pickup p50 at $STEADY_RATE jobs/s (exact samples)"
    report "${tag}_sidekiq_p99" ms "[$label] sidekiq: pickup p99 at $STEADY_RATE jobs/s (exact samples)"
  fi
done
