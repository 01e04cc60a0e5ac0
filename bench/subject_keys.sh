#!/usr/bin/env bash
# The cost of encrypted personal arguments (issue 37 point 4, docs/benchmarks.md "Encrypted arguments"):
# SubjectKeysBenchmarkTests, against the services of scripts/services (REDIS_PORT / PG_PORT as usual), after
# `swift build --build-tests`. SUBJECT_KEYS_BENCH_SUBJECTS (default 10000), SUBJECT_KEYS_BENCH_JOBS (default 300).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/services env)"
export WORKERS_REPO_ROOT="$PWD" SUBJECT_KEYS_BENCH=1
swift test --skip-build --filter 'JobsTests.SubjectKeysBenchmarkTests' 2>&1 | grep -E 'subject-keys-bench|error|failed|Executed'
