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
