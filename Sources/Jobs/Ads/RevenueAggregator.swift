import Foundation
import WorkersStorage

/// Daily ad revenue aggregates, computed in PostgreSQL (one grouped scan of the day's `ad_views`
/// and `ad_requests` through their `created_at` indexes; no row reaches Swift).
///
/// Rows of `ad_revenue_daily` for a UTC day and app:
/// - one per (ad_type, provider, placement) seen in views or requests;
/// - one app total with `ad_type = provider = placement = ''` ('' is never a real ad type, so the
///   key stays unique; see 0002_domain.sql).
/// Metrics: eCPM = revenue / impressions × 1000, fill rate = impressions / requests, CTR = clicks /
/// impressions, completion rate = completions / impressions of rewarded ads (NULL where a
/// denominator is 0, and for non-rewarded groups).
///
/// NULL `revenue_usd` (the network has not reported it yet) is estimated at a reported revenue per
/// view (eCPM / 1000), the first that exists of: the same group that day; the same group over the
/// `estimateDays` days before (its trailing eCPM); the same app, ad type and provider that day,
/// then over the trailing days; the same app and ad type that day, then over the trailing days;
/// else 0. The row is flagged `estimated` while any of its views is unreported. Everything is
/// derived from `ad_views`/`ad_requests` (never from earlier aggregates), so re-running a day on
/// the same data yields identical rows — unchanged rows are not even rewritten (`computed_at`
/// stays), rows of groups that disappeared are deleted — and re-running it after late revenue
/// arrived replaces the estimates. Runs of the same day are serialised by an advisory lock.
public struct RevenueAggregator: Sendable {
    /// Days before the aggregated day whose reported revenue estimates the unreported views.
    public let estimateDays: Int

    public init(estimateDays: Int = 7) { self.estimateDays = estimateDays }

    static let createScratch = """
        CREATE TEMP TABLE ad_revenue_scratch (
            day date, app_id uuid, ad_type text, provider text, placement text, requests bigint, impressions bigint,
            clicks bigint, completions bigint, revenue_usd numeric(14, 6), avg_display_duration_ms double precision,
            ecpm double precision, fill_rate double precision, ctr double precision, completion_rate double precision,
            estimated boolean
        ) ON COMMIT DROP
        """

    static let compute = """
        INSERT INTO ad_revenue_scratch
        WITH bounds AS (
            SELECT $1::date AS day,
                   ($1::date)::timestamp AT TIME ZONE 'UTC' AS lo,
                   ($1::date + 1)::timestamp AT TIME ZONE 'UTC' AS hi
        ),
        v AS (
            SELECT app_id, ad_type, provider, placement,
                   count(*) AS impressions,
                   count(*) FILTER (WHERE ad_clicked) AS clicks,
                   count(*) FILTER (WHERE ad_completed) AS completions,
                   count(revenue_usd) AS reported,
                   coalesce(sum(revenue_usd), 0) AS reported_revenue,
                   coalesce(sum(display_duration_ms), 0) AS duration_sum,
                   count(display_duration_ms) AS duration_n
            FROM ad_views, bounds
            WHERE created_at >= bounds.lo AND created_at < bounds.hi AND ($2::uuid IS NULL OR app_id = $2::uuid)
            GROUP BY app_id, ad_type, provider, placement
        ),
        by_provider AS (
            SELECT app_id, ad_type, provider, sum(reported_revenue) / nullif(sum(reported), 0) AS rpv
            FROM v GROUP BY app_id, ad_type, provider
        ),
        by_type AS (
            SELECT app_id, ad_type, sum(reported_revenue) / nullif(sum(reported), 0) AS rpv
            FROM v GROUP BY app_id, ad_type
        ),
        -- Reported revenue of the trailing days (the trailing eCPM), for groups the day itself cannot estimate.
        h AS (
            SELECT app_id, ad_type, provider, placement, count(*) AS reported, sum(revenue_usd) AS reported_revenue
            FROM ad_views, bounds
            WHERE created_at >= bounds.lo - make_interval(days => $3::int) AND created_at < bounds.lo
              AND revenue_usd IS NOT NULL AND ($2::uuid IS NULL OR app_id = $2::uuid)
            GROUP BY app_id, ad_type, provider, placement
        ),
        h_group AS (
            SELECT app_id, ad_type, provider, placement, reported_revenue / reported AS rpv FROM h
        ),
        h_provider AS (
            SELECT app_id, ad_type, provider, sum(reported_revenue) / sum(reported) AS rpv
            FROM h GROUP BY app_id, ad_type, provider
        ),
        h_type AS (
            SELECT app_id, ad_type, sum(reported_revenue) / sum(reported) AS rpv FROM h GROUP BY app_id, ad_type
        ),
        ve AS (
            SELECT v.*,
                   round(v.reported_revenue + (v.impressions - v.reported)
                         * coalesce(v.reported_revenue / nullif(v.reported, 0), hg.rpv, p.rpv, hp.rpv, t.rpv, ht.rpv, 0),
                         6) AS revenue,
                   v.impressions > v.reported AS estimated
            FROM v JOIN by_provider p USING (app_id, ad_type, provider) JOIN by_type t USING (app_id, ad_type)
                 LEFT JOIN h_group hg USING (app_id, ad_type, provider, placement)
                 LEFT JOIN h_provider hp USING (app_id, ad_type, provider)
                 LEFT JOIN h_type ht USING (app_id, ad_type)
        ),
        r AS (
            SELECT app_id, ad_type, provider, placement, count(*) AS requests
            FROM ad_requests, bounds
            WHERE created_at >= bounds.lo AND created_at < bounds.hi AND ($2::uuid IS NULL OR app_id = $2::uuid)
            GROUP BY app_id, ad_type, provider, placement
        ),
        fine AS (
            SELECT app_id, ad_type, provider, placement,
                   coalesce(r.requests, 0) AS requests,
                   coalesce(ve.impressions, 0) AS impressions,
                   coalesce(ve.clicks, 0) AS clicks,
                   coalesce(ve.completions, 0) AS completions,
                   coalesce(ve.revenue, 0) AS revenue,
                   coalesce(ve.duration_sum, 0) AS duration_sum,
                   coalesce(ve.duration_n, 0) AS duration_n,
                   coalesce(ve.estimated, false) AS estimated,
                   CASE WHEN ad_type = 'rewarded' THEN coalesce(ve.impressions, 0) ELSE 0 END AS rewarded_impressions,
                   CASE WHEN ad_type = 'rewarded' THEN coalesce(ve.completions, 0) ELSE 0 END AS rewarded_completions
            FROM ve FULL JOIN r USING (app_id, ad_type, provider, placement)
        ),
        rolled AS (
            SELECT app_id,
                   CASE WHEN grouping(ad_type) = 1 THEN '' ELSE ad_type END AS ad_type,
                   CASE WHEN grouping(provider) = 1 THEN '' ELSE provider END AS provider,
                   CASE WHEN grouping(placement) = 1 THEN '' ELSE placement END AS placement,
                   sum(requests) AS requests, sum(impressions) AS impressions, sum(clicks) AS clicks,
                   sum(completions) AS completions, sum(revenue) AS revenue, sum(duration_sum) AS duration_sum,
                   sum(duration_n) AS duration_n, bool_or(estimated) AS estimated,
                   sum(rewarded_impressions) AS rewarded_impressions, sum(rewarded_completions) AS rewarded_completions
            FROM fine
            GROUP BY GROUPING SETS ((app_id, ad_type, provider, placement), (app_id))
        )
        SELECT (SELECT day FROM bounds), app_id, ad_type, provider, placement,
               requests, impressions, clicks, completions, revenue,
               CASE WHEN duration_n > 0 THEN duration_sum::float8 / duration_n END,
               CASE WHEN impressions > 0 THEN revenue::float8 / impressions * 1000 END,
               CASE WHEN requests > 0 THEN impressions::float8 / requests END,
               CASE WHEN impressions > 0 THEN clicks::float8 / impressions END,
               CASE WHEN rewarded_impressions > 0 THEN rewarded_completions::float8 / rewarded_impressions END,
               estimated
        FROM rolled
        """

    static let upsert = """
        INSERT INTO ad_revenue_daily AS d (day, app_id, ad_type, provider, placement, requests, impressions, clicks,
            completions, revenue_usd, avg_display_duration_ms, ecpm, fill_rate, ctr, completion_rate, estimated, computed_at)
        SELECT day, app_id, ad_type, provider, placement, requests, impressions, clicks, completions, revenue_usd,
               avg_display_duration_ms, ecpm, fill_rate, ctr, completion_rate, estimated, now()
        FROM ad_revenue_scratch
        ON CONFLICT (day, app_id, ad_type, provider, placement) DO UPDATE SET
            requests = EXCLUDED.requests, impressions = EXCLUDED.impressions, clicks = EXCLUDED.clicks,
            completions = EXCLUDED.completions, revenue_usd = EXCLUDED.revenue_usd,
            avg_display_duration_ms = EXCLUDED.avg_display_duration_ms, ecpm = EXCLUDED.ecpm,
            fill_rate = EXCLUDED.fill_rate, ctr = EXCLUDED.ctr, completion_rate = EXCLUDED.completion_rate,
            estimated = EXCLUDED.estimated, computed_at = EXCLUDED.computed_at
        WHERE (d.requests, d.impressions, d.clicks, d.completions, d.revenue_usd, d.avg_display_duration_ms, d.ecpm,
               d.fill_rate, d.ctr, d.completion_rate, d.estimated)
              IS DISTINCT FROM
              (EXCLUDED.requests, EXCLUDED.impressions, EXCLUDED.clicks, EXCLUDED.completions, EXCLUDED.revenue_usd,
               EXCLUDED.avg_display_duration_ms, EXCLUDED.ecpm, EXCLUDED.fill_rate, EXCLUDED.ctr,
               EXCLUDED.completion_rate, EXCLUDED.estimated)
        """

    static let deleteStale = """
        DELETE FROM ad_revenue_daily d
        WHERE d.day = $1::date AND ($2::uuid IS NULL OR d.app_id = $2::uuid)
          AND NOT EXISTS (SELECT 1 FROM ad_revenue_scratch s
                          WHERE s.app_id = d.app_id AND s.ad_type = d.ad_type AND s.provider = d.provider
                            AND s.placement = d.placement)
        """

    /// What one aggregation did.
    public struct Summary: Sendable, Equatable {
        /// Rows the day has now (for the app, when one was given).
        public let rows: Int
        /// Rows inserted or changed.
        public let written: Int
        /// Rows deleted because their group no longer has data.
        public let deleted: Int
    }

    /// Aggregates one UTC day (all apps, or one), in one transaction.
    public func aggregate(day: PostgresDay, appID: UUID? = nil, connection: PostgresConnection) throws -> Summary {
        try connection.transaction { connection in
            try connection.execute("SELECT pg_advisory_xact_lock(hashtext('ad_revenue_daily:' || $1))", [day.description])
            try connection.execute(Self.createScratch)
            let rows = try connection.execute(Self.compute, [day, appID, estimateDays])
            let written = try connection.execute(Self.upsert)
            let deleted = try connection.execute(Self.deleteStale, [day, appID])
            return Summary(rows: rows, written: written, deleted: deleted)
        }
    }

    /// Deletes `ad_views`, then `ad_requests`, older than `years`, `batchSize` rows per
    /// transaction; returns the rows deleted. Stops early (to be resumed by the next run) when
    /// `isCancelled` says so.
    public func purge(olderThanYears years: Int, batchSize: Int, pool: PostgresPool,
                      isCancelled: () -> Bool = { false }) throws -> Int {
        var total = 0
        for table in ["ad_views", "ad_requests"] {
            // The table name is one of two constants, never input.
            let sql = """
                DELETE FROM \(table) WHERE id IN (
                    SELECT id FROM \(table) WHERE created_at < now() - make_interval(years => $1::int) LIMIT $2::int)
                """
            while !isCancelled() {
                let deleted = try pool.withConnection { try $0.execute(sql, [years, batchSize]) }
                total += deleted
                if deleted < batchSize { break }
            }
        }
        return total
    }
}
