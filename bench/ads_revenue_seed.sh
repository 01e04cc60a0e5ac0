#!/usr/bin/env bash
# Seeds a benchmark database for AdRevenueAggregationJob: ROWS ad views (default 1,000,000) and
# 1.25 × ROWS ad requests on one UTC day (2026-03-14), plus 10 % of that volume on the days around
# it, spread over 5 apps × 3 ad types × 4 providers × 6 placements; 20 % of the views have no
# revenue (so the estimate path runs). Then runs the timed aggregation (AdsRevenueBenchmarkTests).
#
# Usage: bench/ads_revenue_seed.sh [ROWS]            (from the repository root)
# Env:   PGURL (default postgres://postgres@127.0.0.1:5440), BENCH_DB (default ads_bench),
#        SCRATCH (SwiftPM scratch path, default .build), SKIP_RUN=1 to seed only.
set -euo pipefail
ROWS=${1:-1000000}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5440}
BENCH_DB=${BENCH_DB:-ads_bench}
SCRATCH=${SCRATCH:-.build}
cd "$(dirname "$0")/.."

psql "$PGURL/postgres" -qX -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $BENCH_DB" -c "CREATE DATABASE $BENCH_DB"
# The runtime's line, then the app's (docs/architecture.md, "PostgreSQL").
for f in Sources/Storage/WorkersMigrations/0*.sql Sources/Storage/Migrations/0*.sql; do psql "$PGURL/$BENCH_DB" -qX -v ON_ERROR_STOP=1 -f "$f" >/dev/null; done

start=$(date +%s.%N)
psql "$PGURL/$BENCH_DB" -qX -v ON_ERROR_STOP=1 -v rows="$ROWS" <<'SQL'
SET synchronous_commit = off;
-- The day itself.
INSERT INTO ad_views (app_id, ad_type, provider, placement, display_duration_ms, ad_clicked, ad_completed,
                      reward_granted, revenue_usd, created_at)
SELECT ('00000000-0000-0000-0000-00000000000' || (i % 5))::uuid,
       (ARRAY['rewarded', 'interstitial', 'banner'])[1 + i % 3],
       (ARRAY['admob', 'unity', 'applovin', 'meta'])[1 + (i / 3) % 4],
       (ARRAY['', 'home', 'level_end', 'shop', 'menu', 'bonus'])[1 + (i / 12) % 6],
       5000 + (i * 7919) % 25000,
       (i * 31) % 100 < 3,
       i % 3 = 0 AND (i * 17) % 10 < 8,
       i % 3 = 0,
       CASE WHEN (i * 13) % 10 < 2 THEN NULL ELSE round(((i * 7) % 1000) / 100000.0, 6) END,
       timestamptz '2026-03-14 00:00:00+00' + ((i * 86399.0 / :rows) || ' seconds')::interval
FROM generate_series(1::bigint, :rows) AS i;
INSERT INTO ad_requests (app_id, ad_type, provider, placement, filled, created_at)
SELECT ('00000000-0000-0000-0000-00000000000' || (i % 5))::uuid,
       (ARRAY['rewarded', 'interstitial', 'banner'])[1 + i % 3],
       (ARRAY['admob', 'unity', 'applovin', 'meta'])[1 + (i / 3) % 4],
       (ARRAY['', 'home', 'level_end', 'shop', 'menu', 'bonus'])[1 + (i / 12) % 6],
       i % 5 <> 0,
       timestamptz '2026-03-14 00:00:00+00' + ((i * 86399.0 / (:rows * 1.25)) || ' seconds')::interval
FROM generate_series(1::bigint, (:rows * 1.25)::int) AS i;
-- Neighbouring days (must not be counted, but make the index do its job).
INSERT INTO ad_views (app_id, ad_type, provider, placement, revenue_usd, created_at)
SELECT ('00000000-0000-0000-0000-00000000000' || (i % 5))::uuid, 'banner', 'admob', 'home', 0.0001,
       timestamptz '2026-03-13 00:00:00+00' + ((i % 2) * 2 || ' days')::interval + ((i % 86000) || ' seconds')::interval
FROM generate_series(1::bigint, (:rows / 10)::int) AS i;
ANALYZE ad_views;
ANALYZE ad_requests;
SQL
end=$(date +%s.%N)
echo "seeded $ROWS ad views (+ requests, + neighbours) into $BENCH_DB in $(echo "$end - $start" | bc) s"

if [ "${SKIP_RUN:-0}" != 1 ]; then
    ADS_BENCH_DATABASE_URL="$PGURL/$BENCH_DB" swift test --scratch-path "$SCRATCH" --skip-build \
        --filter AdsRevenueBenchmarkTests 2>&1 | grep -E "ads-bench|Executed|error"
fi
