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

