#!/usr/bin/env bash
# bench/shards.sh — drain rate of one worker process over 1, 2 and 3 Redis shards (docs/sharding.md).
#
#   bench/shards.sh                       N=60000 no-op jobs, concurrency 10, RUNS=3
#   N=20000 RUNS=3 bench/shards.sh
#   SHARD_BENCH_PORTS=7467,7468,7469 bench/shards.sh
#
# For K = 1, 2, 3: K private redis-server instances (ports SHARD_BENCH_PORTS, default 6467,6468,6469) started by
# this script with the same settings as scripts/services' (appendonly yes, appendfsync always, no RDB), queues
# q1..qK with qi on shard i, N no-op jobs spread evenly, then one `workerctl worker --no-database` serving all K
# queues drains them (one fetcher, heartbeat and housekeeper per shard, one settler writing to each). The figure
# is jobs/s from the first job taken to the last acknowledged (bench/lib.sh clock_drain), median of RUNS runs.
# Also: Redis memory per queued job (used_memory after the enqueue minus before, summed over shards) and Redis CPU
# per drained job (used_cpu_user + used_cpu_sys over the drain, summed over shards), for docs/sharding.md's plan.
#
# READ THE FIGURE AS OVERHEAD, NOT SCALING: on a 2-core machine the worker and every redis-server share the same
# two cores, so more shards cannot run faster; the difference between K=1 and K>1 is the cost of the extra
# fetchers, connections and per-shard script calls. Sharding pays when each shard has its own host (docs/sharding.md).
# A benchmark, not a test: it asserts nothing. A failed release build stops it (bench/lib.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${N:-60000}"
RUNS="${RUNS:-3}"
CONCURRENCY="${CONCURRENCY:-10}"
IFS=, read -r -a PORTS <<<"${SHARD_BENCH_PORTS:-6467,6468,6469}"
[ "${#PORTS[@]}" -ge 3 ] || { echo "SHARD_BENCH_PORTS must name 3 ports" >&2; exit 1; }

. bench/lib.sh
release_workerctl

FIGURES="$(mktemp -d)"
DATA="$(mktemp -d)"
SERVERS=()
cleanup() {
  for pid in "${SERVERS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVERS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$FIGURES" "$DATA"
}
trap cleanup EXIT

for port in "${PORTS[@]:0:3}"; do
  mkdir -p "$DATA/$port"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$DATA/$port" --appendonly yes --appendfsync always --save '' \
    --databases 16 >"$DATA/$port.log" 2>&1 &
  SERVERS+=($!)
done
for port in "${PORTS[@]:0:3}"; do
  for _ in $(seq 1 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  redis-cli -p "$port" ping >/dev/null || { echo "redis-server on $port did not start: $(cat "$DATA/$port.log")" >&2; exit 1; }
done

# R: the default shard (bench/lib.sh's helpers use it); S i ...: shard i (1-based).
R() { redis-cli -p "${PORTS[0]}" "$@"; }
S() { local i=$1; shift; redis-cli -p "${PORTS[$((i - 1))]}" "$@"; }

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== redis (each shard): appendonly $(R config get appendonly | tail -1), appendfsync $(R config get appendfsync | tail -1)"
echo "== N=$N, RUNS=$RUNS, concurrency $CONCURRENCY, one worker process; shards on ports ${PORTS[*]:0:3}"
echo "== NOTE: $(nproc) cores shared by the worker and every shard: the K>1 figures show sharding's overhead, not its scaling"

for k in 1 2 3; do
  SHARDS=""; QUEUES=""; QUEUE_FLAGS=()
  for i in $(seq 1 "$k"); do
    QUEUE_FLAGS+=(--queue "q$i")
    [ "$i" -gt 1 ] && SHARDS="${SHARDS:+$SHARDS,}s$i=redis://127.0.0.1:${PORTS[$((i - 1))]}/0"
    [ "$i" -gt 1 ] && QUEUES="${QUEUES:+$QUEUES,}q$i=s$i"
  done
  export REDIS_URL="redis://127.0.0.1:${PORTS[0]}/0" REDIS_SHARDS="$SHARDS" QUEUE_SHARDS="$QUEUES"
  queued() { local total=0 i; for i in $(seq 1 "$k"); do total=$((total + $(S "$i" llen "queue:q$i"))); done; echo "$total"; }
  drained() {
    local i
    for i in $(seq 1 "$k"); do
      [ "$(S "$i" llen "queue:q$i")" -eq 0 ] && [ -z "$(S "$i" --scan --pattern 'working:*' | head -1)" ] || return 1
    done
  }
  # Sums over the K shards: used_memory (bytes) and the Redis process's CPU seconds (user + sys).
  memory() { local total=0 i; for i in $(seq 1 "$k"); do total=$((total + $(S "$i" info memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}'))); done; echo "$total"; }
  cpu() { local i; for i in $(seq 1 "$k"); do S "$i" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {print s}'; done | paste -sd+ | bc -l; }
  for run in $(seq 1 "$RUNS"); do
    for i in 1 2 3; do S "$i" flushall >/dev/null; done
    MEMORY_BEFORE=$(memory)
    for i in $(seq 1 "$k"); do "$BIN" enqueue Noop --queue "q$i" --count $((N / k)) --batch 1000 >/dev/null; done
    TOTAL=$(queued)
    record "bytes$k" "$(echo "($(memory) - $MEMORY_BEFORE) / $TOTAL" | bc -l)"
    CPU_BEFORE=$(cpu)
    "$BIN" worker --no-database --concurrency "$CONCURRENCY" "${QUEUE_FLAGS[@]}" 2>/tmp/bench-shards-worker.log &
    WPID=$!
    ELAPSED=$(clock_drain "$TOTAL" drained queued)
    kill -TERM $WPID; wait $WPID || true
    RATE=$(echo "$TOTAL / $ELAPSED" | bc -l)
    record "cpu$k" "$(echo "($(cpu) - $CPU_BEFORE) * 1000000 / $TOTAL" | bc -l)"
    printf -- "-- %d shard(s), run %d of %d: %.0f jobs/s\n" "$k" "$run" "$RUNS" "$RATE"
    record "drain$k" "$RATE"
  done
done

echo
report drain1 jobs/s "drain, 1 shard (today's single-Redis path)"
report drain2 jobs/s "drain, 2 shards"
report drain3 jobs/s "drain, 3 shards"
report bytes1 bytes "Redis memory per queued no-op job, 1 shard"
report bytes3 bytes "Redis memory per queued no-op job, 3 shards (sum)"
report cpu1 "µs" "Redis CPU (user+sys) per job drained, 1 shard"
report cpu2 "µs" "Redis CPU (user+sys) per job drained, 2 shards (sum)"
report cpu3 "µs" "Redis CPU (user+sys) per job drained, 3 shards (sum)"
echo "(on $(nproc) cores the worker and all shards share the CPU: these show sharding's overhead, not scaling)"
