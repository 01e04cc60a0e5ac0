#!/usr/bin/env bash
# bench/fuzz.sh — runs the fuzz harnesses (Sources/FuzzTargets) under libFuzzer. docs/fuzzing.md.
#
#   bench/fuzz.sh                      every harness, SECONDS_PER_HARNESS (default 60) each
#   HARNESS=cron bench/fuzz.sh         one harness
#   SECONDS_PER_HARNESS=600 HARNESS=payload bench/fuzz.sh
#   bench/fuzz.sh --list               the harnesses
#
# Builds FuzzRunner in release with libFuzzer and AddressSanitizer (`-DFUZZING -sanitize=fuzzer,address`) in its own
# scratch folder, .build-fuzz, so the normal .build is never touched; the first build takes many minutes (every
# dependency is compiled again, instrumented). Each harness starts from the committed corpus Tests/FuzzCorpus/<h>
# (read-only) plus a working corpus .dev/fuzz/<h>/corpus that keeps what libFuzzer found across runs; crashes,
# hangs (over TIMEOUT_SECONDS, default 10) and out-of-memory inputs are written to .dev/fuzz/<h>/artifacts/.
# Runs at `nice -n 10`. Exit status: 0 when no harness found anything, 1 otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SECONDS_PER_HARNESS="${SECONDS_PER_HARNESS:-60}"
TIMEOUT_SECONDS="${TIMEOUT_SECONDS:-10}"
MAX_LEN="${MAX_LEN:-4096}"
SCRATCH=.build-fuzz
WORK=.dev/fuzz

echo "== building FuzzRunner with libFuzzer + ASan in $SCRATCH (log: $WORK/build.log)"
mkdir -p "$WORK"
started=$SECONDS
if ! nice -n 10 swift build -c release --product FuzzRunner --scratch-path "$SCRATCH" \
        -Xswiftc -DFUZZING -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library >"$WORK/build.log" 2>&1; then
    grep -E "error" "$WORK/build.log" | head -30
    echo "fuzz build failed (log: $WORK/build.log)" >&2
    exit 2
fi
BIN="$SCRATCH/release/FuzzRunner"
echo "== built in $((SECONDS - started)) s: $BIN"

# The harness names, from the plain build's replay mode would need a second build: read them from the corpus folders.
all_harnesses() { ls Tests/FuzzCorpus; }
if [ "${1:-}" = "--list" ]; then all_harnesses; exit 0; fi
harnesses="${HARNESS:-$(all_harnesses)}"

found=0
for h in $harnesses; do
    [ -d "Tests/FuzzCorpus/$h" ] || { echo "no harness '$h' (Tests/FuzzCorpus/$h missing)" >&2; exit 2; }
    corpus="$WORK/$h/corpus"; artifacts="$WORK/$h/artifacts"
    mkdir -p "$corpus" "$artifacts"
    log="$WORK/$h/fuzz.log"
    echo "== $h: ${SECONDS_PER_HARNESS} s (log: $log)"
    before=$(ls "$artifacts" | wc -l)
    # -fork would keep going after a crash but needs more cores than this machine has: one process, stop at the
    # first finding (fix or record it, then run again). ASAN_OPTIONS: Swift's runtime does not free at exit.
    FUZZ_HARNESS="$h" ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1" nice -n 10 "$BIN" \
        -max_total_time="$SECONDS_PER_HARNESS" -timeout="$TIMEOUT_SECONDS" -max_len="$MAX_LEN" -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" "Tests/FuzzCorpus/$h" >"$log" 2>&1
    status=$?
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
    rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
    cov=$(grep -oE '(cov|ft): [0-9]+' "$log" | tail -2 | tr '\n' ' ')
    echo "   executions: ${runs:-?}, ${rate:-?} exec/s, ${cov:-}, corpus: $(ls "$corpus" | wc -l) files, exit $status"
    if [ "$(ls "$artifacts" | wc -l)" -gt "$before" ] || [ "$status" -ne 0 ]; then
        found=1
        for f in $(ls -t "$artifacts" | head -5); do echo "   FINDING: $artifacts/$f"; done
        grep -m3 -E "Fatal error|ERROR: (AddressSanitizer|libFuzzer)|SUMMARY" "$log" | sed 's/^/   /'
    fi
done

if [ "$found" = 1 ]; then
    cat <<'TXT'
== to keep a finding (docs/fuzzing.md, "Adding a finding"):
   1. see it:      FUZZ_HARNESS=<h> .build-fuzz/release/FuzzRunner <artifact>     (or: swift run FuzzRunner <h> <artifact>)
   2. shrink it:   FUZZ_HARNESS=<h> .build-fuzz/release/FuzzRunner -minimize_crash=1 -runs=10000 <artifact>
   3. commit it:   cp <artifact> Tests/FuzzCorpus/<h>/<what-it-is>.txt   (a name saying what it is, < 4 KB)
   4. replay:      swift build --build-tests && swift test --skip-build --filter FuzzTests   (fails until fixed)
TXT
    exit 1
fi
