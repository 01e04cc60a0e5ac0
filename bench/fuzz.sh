#!/usr/bin/env bash
# bench/fuzz.sh — runs the fuzz harnesses (Sources/FuzzTargets) under libFuzzer. docs/fuzzing.md.
#
#   bench/fuzz.sh                      every harness, SECONDS_PER_HARNESS (default 60) each
#   HARNESS=cron bench/fuzz.sh         one harness
#   SECONDS_PER_HARNESS=600 HARNESS=payload bench/fuzz.sh
#   bench/fuzz.sh --list               the harnesses
#   bench/fuzz.sh --triage [harness]   groups the findings in .dev/fuzz/<h>/artifacts by trap (message and first
#                                      two frames in the project), replayed by the debug WorkersFuzzRunner; no fuzzing
#   bench/fuzz.sh state                the state fuzzer (Tests/JobsTests/StateFuzzTests.swift: hostile values at every
#                                      Redis key, then every command, route and loop) for STATE_SECONDS (default 600)
#                                      or ITERATIONS iterations, in runs of 5 with fresh seeds; prints each failing seed
#                                      (replay: STATE_FUZZ_SEED=<seed> STATE_FUZZ_ITERATIONS=1 swift test --skip-build
#                                      --filter StateFuzzTests). Needs scripts/services (PostgreSQL); its redis-server
#                                      runs on STATE_FUZZ_REDIS_PORT (default 6561).
#
# Builds WorkersFuzzRunner in release with libFuzzer and AddressSanitizer (`-DFUZZING -sanitize=fuzzer,address`) in its own
# scratch folder, .build-fuzz, so the normal .build is never touched; the first build takes many minutes (every
# dependency is compiled again, instrumented). Each harness starts from the committed corpus Tests/FuzzCorpus/<h>
# (read-only) plus a working corpus .dev/fuzz/<h>/corpus that keeps what libFuzzer found across runs; crashes,
# hangs (over TIMEOUT_SECONDS, default 10) and out-of-memory inputs are written to .dev/fuzz/<h>/artifacts/ and the
# run goes on (fork mode), so a finding already in the corpus does not stop it.
# Runs at `nice -n 10`. Exit status: 0 when no harness found anything, 1 otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# --triage: each artifact through the plain debug build (readable Swift trap messages), grouped; the smallest
# input of each group is the one to commit.
if [ "${1:-}" = "--triage" ]; then
    swift build --product WorkersFuzzRunner >/dev/null 2>&1 || { echo "debug build of WorkersFuzzRunner failed" >&2; exit 2; }
    for h in ${2:-$(ls Tests/FuzzCorpus)}; do
        [ -d ".dev/fuzz/$h/artifacts" ] || continue
        echo "== $h: $(ls ".dev/fuzz/$h/artifacts" | wc -l) artifacts"
        for f in ".dev/fuzz/$h/artifacts"/*; do
            [ -f "$f" ] || continue
            out=$(timeout 60 .build/debug/WorkersFuzzRunner "$h" "$f" 2>&1 >/dev/null)
            status=$?
            msg=$(echo "$out" | grep -m1 -E "Fatal error|Swift runtime failure" | sed 's/^\*\*\* //; s/ \*\*\*$//' | cut -c1-160)
            [ -z "$msg" ] && msg=$([ "$status" = 124 ] && echo "hang (over 60 s)" || echo "no trap in the debug replay (status $status)")
            frames=$(echo "$out" | grep "/Sources/" | grep ".swift:" | grep -v "\[system\]" | grep -v "FuzzHarness.violated" | head -2 \
                | sed -E 's/.* 0x[0-9a-f]+ //; s/ \+ [0-9]+ in WorkersFuzzRunner at .*\/Sources\// @ /' | paste -sd ';')
            printf '%s | %s\t%s\t%s\n' "$msg" "$frames" "$(wc -c <"$f")" "$f"
        done | sort -t$'\t' -k1,1 -k2,2n | awk -F'\t' '$1 != k {if (k != "") print "   " n "x  " k "\n        smallest: " f; k = $1; n = 0; f = $3 " (" $2 " bytes)"} {n++} END {if (k != "") print "   " n "x  " k "\n        smallest: " f}'
    done
    exit 0
fi

# state: the state fuzzer, in the ordinary debug build (its children are the real workerctl), one test run per 5
# iterations, each run with a fresh seed, until STATE_SECONDS or ITERATIONS is reached. Exit 1 when a seed failed.
if [ "${1:-}" = "state" ]; then
    budget="${STATE_SECONDS:-600}"; wanted="${ITERATIONS:-0}"; chunk=5
    mkdir -p .dev/fuzz/state
    log=.dev/fuzz/state/fuzz.log; : >"$log"
    echo "== building the tests (log: .dev/fuzz/state/build.log)"
    nice -n 10 swift build --build-tests >.dev/fuzz/state/build.log 2>&1 || { grep -E "error" .dev/fuzz/state/build.log | head -20; exit 2; }
    started=$SECONDS; done_iterations=0; runs=0; failed=""
    while :; do
        [ "$wanted" -gt 0 ] && [ "$done_iterations" -ge "$wanted" ] && break
        [ "$wanted" -eq 0 ] && [ $((SECONDS - started)) -ge "$budget" ] && break
        n=$chunk; [ "$wanted" -gt 0 ] && [ $((wanted - done_iterations)) -lt $n ] && n=$((wanted - done_iterations))
        seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
        out=$(STATE_FUZZ_SEED="$seed" STATE_FUZZ_ITERATIONS="$n" nice -n 10 swift test --skip-build \
              --filter 'StateFuzzTests/testAnyState' 2>&1)
        echo "$out" >>"$log"
        runs=$((runs + 1)); done_iterations=$((done_iterations + n))
        failed="$failed $(echo "$out" | grep -oE 'FAILED with STATE_FUZZ_SEED=[0-9]+' | grep -oE '[0-9]+$' | tr '\n' ' ')"
        if ! echo "$out" | grep -q "Executed 1 test"; then echo "   run $runs (seed $seed) did not complete: see $log"; failed="$failed $seed"; fi
    done
    echo "== state fuzzer: $done_iterations iterations in $runs runs, $((SECONDS - started)) s (log: $log)"
    failed=$(echo $failed)
    if [ -n "$failed" ]; then
        for s in $failed; do echo "   FAILING SEED: STATE_FUZZ_SEED=$s STATE_FUZZ_ITERATIONS=1 swift test --skip-build --filter StateFuzzTests"; done
        exit 1
    fi
    exit 0
fi

SECONDS_PER_HARNESS="${SECONDS_PER_HARNESS:-60}"
TIMEOUT_SECONDS="${TIMEOUT_SECONDS:-10}"
MAX_LEN="${MAX_LEN:-4096}"
SCRATCH=.build-fuzz
WORK=.dev/fuzz

echo "== building WorkersFuzzRunner with libFuzzer + ASan in $SCRATCH (log: $WORK/build.log)"
mkdir -p "$WORK"
started=$SECONDS
if ! nice -n 10 swift build -c release --product WorkersFuzzRunner --scratch-path "$SCRATCH" \
        -Xswiftc -DFUZZING -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library >"$WORK/build.log" 2>&1; then
    grep -E "error" "$WORK/build.log" | head -30
    echo "fuzz build failed (log: $WORK/build.log)" >&2
    exit 2
fi
BIN="$SCRATCH/release/WorkersFuzzRunner"
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
    # -fork=1: one child process at a time (2 cores) that libFuzzer restarts after a crash, so a known finding in the
    # committed corpus (left for a fix in progress) does not stop the run; every crash is still written to
    # $artifacts. ASAN_OPTIONS: Swift's runtime does not free everything at exit. SWIFT_BACKTRACE=enable=no: a trap is
    # a plain SIGILL for libFuzzer (Swift's backtracer, walking the stack of an instrumented process, makes ASan
    # report a bogus stack-buffer-underflow); replay the artifact with the debug WorkersFuzzRunner to see the trap.
    FUZZ_HARNESS="$h" ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1" SWIFT_BACKTRACE=enable=no \
        nice -n 10 "$BIN" \
        -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -max_total_time="$SECONDS_PER_HARNESS" -timeout="$TIMEOUT_SECONDS" -max_len="$MAX_LEN" -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/" "$corpus" "Tests/FuzzCorpus/$h" >"$log" 2>&1
    status=$?
    # Fork mode's progress lines: `#EXECS: cov: C ft: F corp: N exec/s: R oom/timeout/crash: O/T/X time: Ss job: J`.
    last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -1)
    runs=$(echo "$last" | grep -oE '^#[0-9]+' | tr -d '#')
    secs=$(echo "$last" | grep -oE 'time: [0-9]+s' | grep -oE '[0-9]+')
    rate=$([ -n "$runs" ] && [ "${secs:-0}" -gt 0 ] && echo $((runs / secs)) || echo "?")
    cov=$(echo "$last" | grep -oE 'cov: [0-9]+ ft: [0-9]+')
    crashes=$(echo "$last" | grep -oE 'oom/timeout/crash: [0-9/]+')
    echo "   executions: ${runs:-?} in ${secs:-?} s, ${rate} exec/s, ${cov:-}, ${crashes:-}, working corpus: $(ls "$corpus" | wc -l) files"
    if [ "$(ls "$artifacts" | wc -l)" -gt "$before" ] || [ "$status" -ne 0 ]; then
        found=1
        for f in $(ls -t "$artifacts" | head -5); do echo "   FINDING: $artifacts/$f"; done
        grep -E "Fatal error|Swift runtime failure|ERROR: (AddressSanitizer|libFuzzer)" "$log" | sort | uniq -c | sort -rn | head -5 | sed 's/^/   /'
    fi
done

if [ "$found" = 1 ]; then
    cat <<'TXT'
== to keep a finding (docs/fuzzing.md, "Adding a finding"):
   1. see it:      FUZZ_HARNESS=<h> .build-fuzz/release/WorkersFuzzRunner <artifact>     (or: swift run WorkersFuzzRunner <h> <artifact>)
   2. shrink it:   FUZZ_HARNESS=<h> .build-fuzz/release/WorkersFuzzRunner -minimize_crash=1 -runs=10000 <artifact>
   3. commit it:   cp <artifact> Tests/FuzzCorpus/<h>/<what-it-is>.txt   (a name saying what it is, < 4 KB)
   4. replay:      swift build --build-tests && swift test --skip-build --filter FuzzTests   (fails until fixed)
TXT
    exit 1
fi
