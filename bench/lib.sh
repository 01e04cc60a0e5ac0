# bench/lib.sh — sourced by the benchmarks; one way to get the binary they measure.

# Sets BIN to the workerctl to measure: $BIN when given (an A/B run of two builds), else a fresh release build.
# A failed build stops the benchmark: it never measures an older binary left in .build-release.
release_workerctl() {
  if [ -n "${BIN:-}" ]; then
    [ -x "$BIN" ] || { echo "BIN=$BIN is not an executable" >&2; exit 1; }
    echo "== measuring BIN=$BIN"
    return 0
  fi
  echo "== building release"
  local log; log="$(mktemp)"
  if ! swift build -c release --scratch-path .build-release --product workerctl >"$log" 2>&1; then
    grep -E "error" "$log" | head -20 >&2
    echo "release build failed: nothing measured" >&2
    rm -f "$log"; exit 1
  fi
  rm -f "$log"
  BIN="$(swift build -c release --scratch-path .build-release --show-bin-path)/workerctl"
}

# Figures: one file per name under $FIGURES, one value per run; `bench_report` prints the median (min–max) of each.
bench_figures_init() { FIGURES="$(mktemp -d)"; trap 'rm -rf "$FIGURES"' EXIT; }
bench_record() { echo "$2" >>"$FIGURES/$1"; }
bench_report() {  # bench_report NAME UNIT LABEL
  [ -s "$FIGURES/$1" ] || { echo "$3: no figure"; return 0; }
  python3 - "$FIGURES/$1" "$2" "$3" <<'PY'
import statistics, sys
values = [float(v) for v in open(sys.argv[1]) if v.strip()]
unit, label = sys.argv[2], sys.argv[3]
fmt = (lambda v: "%.0f" % v) if max(values) >= 100 else (lambda v: "%.2f" % v)
print("%s: median %s %s (min %s – max %s, %d runs)" % (label, fmt(statistics.median(values)), unit,
      fmt(min(values)), fmt(max(values)), len(values)))
PY
}
