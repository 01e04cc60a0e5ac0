import Foundation
import WorkersAppJobs
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest
import WorkersHTTP

/// AdRevenueAggregationJob, the purge and RevenueReport against a real PostgreSQL.
final class AdsRevenueTests: JobsTestCase {
    let appA = UUID(uuidString: "aaaaaaaa-0000-0000-0000-000000000001")!
    let appB = UUID(uuidString: "bbbbbbbb-0000-0000-0000-000000000002")!
    let day = PostgresDay(year: 2026, month: 3, day: 14)

    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "ads_revenue_test", connections: 4) }

    /// The aggregation job as a worker runs it (JobRunner: validation, retries, dead).
    var driver: JobRunnerDriver {
        var registry = JobRegistry()
        let redis = try! RedisPool(url: TestServices.redisURL(db: 160), maxConnections: 1)
        AdsJobs.register(into: &registry, configuration: AdsConfiguration(purgeBatchSize: 2), http: .init(), redis: redis)
        return fixture.driver(registry)
    }

    /// The arguments the nightly schedule entry gives a tick (config/schedule.yaml: `args: [{days: 3}]`,
    /// `pass_tick: date_minus_1`): the 3 days ending `date`.
    func nightly(_ date: String) -> [JSONValue] { [.object(["days": 3]), .object(["date": .string(date)])] }

    /// One ad view at `time` (ISO text, UTC).
    func view(_ app: UUID, _ type: String, _ provider: String, _ placement: String, at time: String,
              revenue: Double?, clicked: Bool = false, completed: Bool = false, durationMs: Int? = 15_000) throws {
        try pool.withConnection { connection in
            try connection.execute("""
                INSERT INTO ad_views (app_id, ad_type, provider, placement, display_duration_ms, ad_clicked, ad_completed,
                                      revenue_usd, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::timestamptz)
                """, [app, type, provider, placement, durationMs, clicked, completed, revenue, time])
        }
    }

    func requests(_ app: UUID, _ type: String, _ provider: String, _ placement: String, at time: String, count: Int) throws {
        try pool.withConnection { connection in
            try connection.execute("""
                INSERT INTO ad_requests (app_id, ad_type, provider, placement, created_at)
                SELECT $1, $2, $3, $4, $5::timestamptz FROM generate_series(1, $6::int)
                """, [app, type, provider, placement, time, count])
        }
    }

    func seedDay() throws {
        // App A, rewarded/admob/level_end: 2 views with revenue (0.01 + 0.03), 2 without; 1 click, 3 completions.
        try view(appA, "rewarded", "admob", "level_end", at: "2026-03-14T00:00:00Z", revenue: 0.01, completed: true, durationMs: 30_000)
        try view(appA, "rewarded", "admob", "level_end", at: "2026-03-14T12:00:00Z", revenue: 0.03, clicked: true, completed: true, durationMs: 20_000)
        try view(appA, "rewarded", "admob", "level_end", at: "2026-03-14T23:59:59.999Z", revenue: nil, completed: true, durationMs: 10_000)
        try view(appA, "rewarded", "admob", "level_end", at: "2026-03-14T08:00:00Z", revenue: nil, durationMs: nil)
        try requests(appA, "rewarded", "admob", "level_end", at: "2026-03-14T07:00:00Z", count: 5)
        // App A, banner/unity/home: no reported revenue at all: estimated as 0, flagged.
        try view(appA, "banner", "unity", "home", at: "2026-03-14T09:00:00Z", revenue: nil)
        try view(appA, "banner", "unity", "home", at: "2026-03-14T10:00:00Z", revenue: nil, clicked: true)
        try requests(appA, "banner", "unity", "home", at: "2026-03-14T09:00:00Z", count: 4)
        // App A, interstitial: requests but no impression (fill rate 0).
        try requests(appA, "interstitial", "admob", "", at: "2026-03-14T11:00:00Z", count: 3)
        // Other days and another app.
        try view(appA, "rewarded", "admob", "level_end", at: "2026-03-13T23:59:59Z", revenue: 5)
        try view(appA, "rewarded", "admob", "level_end", at: "2026-03-15T00:00:00Z", revenue: 5)
        try view(appB, "interstitial", "meta", "menu", at: "2026-03-14T15:00:00Z", revenue: 0.002)
    }

    func rows(_ app: UUID? = nil, day: PostgresDay? = nil) throws -> [String: PostgresRow] {
        try pool.withConnection { connection in
            var result: [String: PostgresRow] = [:]
            for row in try connection.query("""
                SELECT *, revenue_usd::text AS revenue_text, computed_at::text AS computed_text FROM ad_revenue_daily
                WHERE day = $1 AND ($2::uuid IS NULL OR app_id = $2::uuid)
                """, [day ?? self.day, app]) {
                let key = "\(try row.string("app_id").prefix(8))/\(try row.string("ad_type"))/\(try row.string("provider"))/\(try row.string("placement"))"
                result[key] = row
            }
            return result
        }
    }

    func testAggregatesPerGroupAndPerAppWithEstimates() throws {
        try seedDay()
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, [.object(["date": "2026-03-14"])]))
        let all = try rows()
        XCTAssertEqual(Set(all.keys), ["aaaaaaaa/rewarded/admob/level_end", "aaaaaaaa/banner/unity/home",
                                       "aaaaaaaa/interstitial/admob/", "aaaaaaaa///", "bbbbbbbb/interstitial/meta/menu",
                                       "bbbbbbbb///"])
        let rewarded = try XCTUnwrap(all["aaaaaaaa/rewarded/admob/level_end"])
        XCTAssertEqual(try rewarded.int64("requests"), 5)
        XCTAssertEqual(try rewarded.int64("impressions"), 4)
        XCTAssertEqual(try rewarded.int64("clicks"), 1)
        XCTAssertEqual(try rewarded.int64("completions"), 3)
        XCTAssertEqual(try rewarded.string("revenue_text"), "0.080000", "0.04 reported + 2 × 0.02 estimated")
        XCTAssertTrue(try rewarded.bool("estimated"))
        XCTAssertEqual(try rewarded.double("ecpm"), 20, accuracy: 1e-9)
        XCTAssertEqual(try rewarded.double("fill_rate"), 0.8, accuracy: 1e-12)
        XCTAssertEqual(try rewarded.double("ctr"), 0.25, accuracy: 1e-12)
        XCTAssertEqual(try rewarded.double("completion_rate"), 0.75, accuracy: 1e-12)
        XCTAssertEqual(try rewarded.double("avg_display_duration_ms"), 20_000, accuracy: 1e-9)

        let banner = try XCTUnwrap(all["aaaaaaaa/banner/unity/home"])
        XCTAssertEqual(try banner.string("revenue_text"), "0.000000")
        XCTAssertTrue(try banner.bool("estimated"))
        XCTAssertEqual(try banner.double("fill_rate"), 0.5, accuracy: 1e-12)
        XCTAssertNil(try banner.optionalDouble("completion_rate"), "completion rate is for rewarded ads")

        let unfilled = try XCTUnwrap(all["aaaaaaaa/interstitial/admob/"])
        XCTAssertEqual(try unfilled.int64("requests"), 3)
        XCTAssertEqual(try unfilled.int64("impressions"), 0)
        XCTAssertEqual(try unfilled.double("fill_rate"), 0)
        XCTAssertNil(try unfilled.optionalDouble("ecpm"))
        XCTAssertFalse(try unfilled.bool("estimated"))

        let total = try XCTUnwrap(all["aaaaaaaa///"])
        XCTAssertEqual(try total.int64("requests"), 12)
        XCTAssertEqual(try total.int64("impressions"), 6)
        XCTAssertEqual(try total.int64("clicks"), 2)
        XCTAssertEqual(try total.string("revenue_text"), "0.080000")
        XCTAssertTrue(try total.bool("estimated"))
        XCTAssertEqual(try total.double("fill_rate"), 0.5, accuracy: 1e-12)
        XCTAssertEqual(try total.double("completion_rate"), 0.75, accuracy: 1e-12)

        let other = try XCTUnwrap(all["bbbbbbbb/interstitial/meta/menu"])
        XCTAssertEqual(try other.string("revenue_text"), "0.002000")
        XCTAssertFalse(try other.bool("estimated"))
        XCTAssertNil(try other.optionalDouble("fill_rate"), "no requests recorded")
        XCTAssertEqual(try other.double("ecpm"), 2, accuracy: 1e-9)
    }

    func testEstimateFallsBackToTheProviderAverageOfTheApp() throws {
        try view(appA, "rewarded", "admob", "a", at: "2026-03-14T01:00:00Z", revenue: 0.04)
        try view(appA, "rewarded", "admob", "b", at: "2026-03-14T01:00:00Z", revenue: nil)
        try view(appA, "rewarded", "unity", "c", at: "2026-03-14T01:00:00Z", revenue: nil)
        _ = try pool.withConnection { try RevenueAggregator().aggregate(day: day, connection: $0) }
        let all = try rows()
        XCTAssertEqual(try all["aaaaaaaa/rewarded/admob/b"]?.string("revenue_text"), "0.040000", "same app, type, provider")
        XCTAssertEqual(try all["aaaaaaaa/rewarded/unity/c"]?.string("revenue_text"), "0.040000", "same app and type")
        XCTAssertEqual(try all["aaaaaaaa/rewarded/admob/a"]?.bool("estimated"), false)
    }

    func testRerunningADayGivesIdenticalRowsAndDropsVanishedGroups() throws {
        try seedDay()
        let aggregator = RevenueAggregator()
        let first = try pool.withConnection { try aggregator.aggregate(day: day, connection: $0) }
        XCTAssertEqual(first.rows, 6)
        func snapshot() throws -> [String] {
            try pool.withConnection { connection in
                try connection.query("SELECT row_to_json(d)::text AS j FROM ad_revenue_daily d ORDER BY app_id, ad_type, provider, placement")
                    .map { try $0.string("j") }
            }
        }
        let before = try snapshot()
        let second = try pool.withConnection { try aggregator.aggregate(day: day, connection: $0) }
        XCTAssertEqual(second.written, 0, "unchanged rows are not rewritten")
        XCTAssertEqual(try snapshot(), before, "identical rows, computed_at included")
        // Through the job with the same day, twice: still identical.
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, [.object(["date": "2026-03-14"])]))
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className,
                                        [.object(["date": "2026-03-14", "app_id": .string(appA.uuidString)])]))
        XCTAssertEqual(try snapshot(), before)

        // The banner views vanish (e.g. deleted upstream): their group row goes, the total follows.
        try pool.withConnection {
            _ = try $0.execute("DELETE FROM ad_views WHERE ad_type = 'banner'")
            _ = try $0.execute("DELETE FROM ad_requests WHERE ad_type = 'banner'")
        }
        let third = try pool.withConnection { try aggregator.aggregate(day: day, appID: appA, connection: $0) }
        XCTAssertEqual(third.deleted, 1)
        XCTAssertNil(try rows()["aaaaaaaa/banner/unity/home"])
        XCTAssertEqual(try rows()["aaaaaaaa///"]?.int64("impressions"), 4)
        XCTAssertNotNil(try rows()["bbbbbbbb///"], "another app is untouched by an app-filtered run")
    }

    func testArgumentsDefaultToYesterdayAndRejectBadDays() throws {
        let yesterday = PostgresDay(utc: Date().addingTimeInterval(-86_400))
        XCTAssertEqual(try AdRevenueAggregationJob.Arguments().day(), yesterday)
        XCTAssertEqual(AdRevenueAggregationJob.Arguments.parseDay("2024-02-29"), PostgresDay(year: 2024, month: 2, day: 29))
        for bad in ["2023-02-29", "2024-13-01", "24-01-01", "2024-1-01", "2024-01-01T00:00", "tomorrow"] {
            XCTAssertNil(AdRevenueAggregationJob.Arguments.parseDay(bad), bad)
        }
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, []))  // scheduler without args: yesterday
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, [.object([:])]))
        let window = try AdRevenueAggregationJob.Arguments(date: "2026-03-01", days: 3).window()
        XCTAssertEqual(window, [PostgresDay(year: 2026, month: 2, day: 27), PostgresDay(year: 2026, month: 2, day: 28),
                                PostgresDay(year: 2026, month: 3, day: 1)])
        for (args, reason) in [([JSONValue.object(["date": "2024-02-30"])], "calendar day"),
                               ([.object(["date": "2999-01-01"])], "outside"),
                               ([.object(["date": "2024-01-01", "app_id": "x"])], "app_id must be a UUID"),
                               ([.object(["date": .int(20240101)])], "args[0].date"),
                               ([.object(["days": 0])], "days must be 1...31, got 0"),
                               ([.object(["days": 32])], "days must be 1...31, got 32"),
                               ([.object(["date": "2024-01-01"]), .object(["date": "2024-01-02"])], "date given twice"),
                               ([.object([:]), .object([:]), .object([:])], "at most two arguments")] {
            Failure.settled(try driver.deliver(AdRevenueAggregationJob.className, args), in: .dead, errorClass: "BadInput",
                            containing: [reason])
        }
    }

    func testOldAdViewsArePurgedInBatches() throws {
        for _ in 0..<5 { try view(appA, "banner", "unity", "home", at: "2020-01-01T00:00:00Z", revenue: 0.001) }
        try requests(appA, "banner", "unity", "home", at: "2020-01-01T00:00:00Z", count: 3)
        let recent = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-400 * 86_400))
        try view(appA, "banner", "unity", "home", at: recent, revenue: 0.001)
        let purged = try RevenueAggregator().purge(olderThanYears: 2, batchSize: 2, pool: pool)
        XCTAssertEqual(purged, 8)
        let left = try pool.withConnection { try $0.queryFirst("SELECT count(*)::bigint AS n FROM ad_views")!.int64("n") }
        XCTAssertEqual(left, 1)
    }

    func testReportAsCSVAndJSON() throws {
        try seedDay()
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, [.object(["date": "2026-03-14"])]))
        let report = try RevenueReport.load(pool: pool, from: day, to: day)
        XCTAssertEqual(report.rows.count, 6)
        XCTAssertEqual(try RevenueReport.load(pool: pool, from: day, to: day, appID: appB).rows.count, 2)
        XCTAssertEqual(try RevenueReport.load(pool: pool, from: PostgresDay(year: 2026, month: 3, day: 15),
                                              to: PostgresDay(year: 2026, month: 3, day: 20)).rows.count, 0)
        let lines = report.csv().split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.first, RevenueReport.csvHeader)
        XCTAssertEqual(lines.count, 7)
        XCTAssertEqual(lines[1], "2026-03-14,aaaaaaaa-0000-0000-0000-000000000001,,,,12,6,2,3,0.080000,18000.0,13.333333,0.500000,0.333333,0.750000,true")
        XCTAssertTrue(lines.contains("2026-03-14,aaaaaaaa-0000-0000-0000-000000000001,rewarded,admob,level_end,5,4,1,3,0.080000,20000.0,20.000000,0.800000,0.250000,0.750000,true"), lines.joined(separator: "\n"))
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(report.json().utf8)) as? [String: Any])
        XCTAssertEqual(json["from"] as? String, "2026-03-14")
        let first = try XCTUnwrap((json["rows"] as? [[String: Any]])?.first)
        XCTAssertEqual(first["revenue_usd"] as? String, "0.080000")
        XCTAssertEqual(first["impressions"] as? Int, 6)
        XCTAssertEqual(first["estimated"] as? Bool, true)
        XCTAssertEqual(RevenueReport.csvField("a,\"b\""), "\"a,\"\"b\"\"\"")
    }

    // MARK: Late revenue, trailing estimates, days that died (issue 13)

    func snapshot(day: PostgresDay) throws -> [String] {
        try pool.withConnection { connection in
            try connection.query("SELECT row_to_json(d)::text AS j FROM ad_revenue_daily d WHERE day = $1 ORDER BY app_id, ad_type, provider, placement",
                                 [day]).map { try $0.string("j") }
        }
    }

    func testNightlyWindowReplacesEstimatesWithLateRevenueAndStaysIdempotent() throws {
        // Night of 03-15: the network has reported one of the two views of 03-14 so far.
        try view(appA, "rewarded", "admob", "level_end", at: "2026-03-14T10:00:00Z", revenue: 0.03)
        try view(appA, "rewarded", "admob", "level_end", at: "2026-03-14T11:00:00Z", revenue: nil)
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, nightly("2026-03-14")))
        let provisional = try XCTUnwrap(try rows()["aaaaaaaa/rewarded/admob/level_end"])
        XCTAssertEqual(try provisional.string("revenue_text"), "0.060000", "0.03 reported + 1 × 0.03 estimated")
        XCTAssertTrue(try provisional.bool("estimated"))

        // Two days later the network's final figure for the second view arrives (the Ads Service backfills it).
        try pool.withConnection {
            _ = try $0.execute("UPDATE ad_views SET revenue_usd = 0.05 WHERE revenue_usd IS NULL AND created_at < '2026-03-15'")
        }
        // Night of 03-16: its window 03-13...03-15 still holds 03-14.
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, nightly("2026-03-15")))
        let final = try XCTUnwrap(try rows()["aaaaaaaa/rewarded/admob/level_end"])
        XCTAssertEqual(try final.string("revenue_text"), "0.080000", "the late revenue replaced the estimate")
        XCTAssertFalse(try final.bool("estimated"))
        XCTAssertFalse(try XCTUnwrap(try rows()["aaaaaaaa///"]).bool("estimated"), "the app total follows")

        // Re-running the same night (a redelivery, or catch-up) changes nothing, computed_at included.
        let before = try snapshot(day: day)
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, nightly("2026-03-15")))
        XCTAssertEqual(try snapshot(day: day), before)
    }

    func testEstimateUsesTheGroupsTrailingECPMWhenTheDayHasNoReportedRevenue() throws {
        // 03-14: three views of the group, none reported yet.
        for hour in 1...3 {
            try view(appA, "banner", "unity", "home", at: "2026-03-14T0\(hour):00:00Z", revenue: nil)
        }
        // The 7 days before: 0.01 and 0.03 reported (0.02 per view = eCPM 20) and one view not reported (ignored);
        // 8 days before: outside the window.
        try view(appA, "banner", "unity", "home", at: "2026-03-07T00:00:00Z", revenue: 0.01)
        try view(appA, "banner", "unity", "home", at: "2026-03-13T23:59:59Z", revenue: 0.03)
        try view(appA, "banner", "unity", "home", at: "2026-03-12T12:00:00Z", revenue: nil)
        try view(appA, "banner", "unity", "home", at: "2026-03-06T23:59:59Z", revenue: 9)
        // Another placement's history is only a fallback: the group's own comes first.
        try view(appA, "banner", "unity", "other", at: "2026-03-10T00:00:00Z", revenue: 1)
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, [.object(["date": "2026-03-14"])]))
        let home = try XCTUnwrap(try rows()["aaaaaaaa/banner/unity/home"])
        XCTAssertEqual(try home.string("revenue_text"), "0.060000", "3 × 0.02, from the group's trailing 7 days")
        XCTAssertTrue(try home.bool("estimated"))
        XCTAssertEqual(try home.double("ecpm"), 20, accuracy: 1e-9)

        // A group with no history of its own takes its provider's trailing figure, not 0.
        try view(appA, "banner", "unity", "fresh", at: "2026-03-14T05:00:00Z", revenue: nil)
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, [.object(["date": "2026-03-14"])]))
        XCTAssertEqual(try rows()["aaaaaaaa/banner/unity/fresh"]?.string("revenue_text"), "0.346667",
                       "(0.01 + 0.03 + 1) / 3 reported views of app A's banner/unity in the trailing 7 days")
        // Nothing reported anywhere, ever: 0, flagged.
        try view(appB, "banner", "meta", "x", at: "2026-03-14T05:00:00Z", revenue: nil)
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, [.object(["date": "2026-03-14"])]))
        XCTAssertEqual(try rows()["bbbbbbbb/banner/meta/x"]?.string("revenue_text"), "0.000000")
        XCTAssertEqual(try rows()["bbbbbbbb/banner/meta/x"]?.bool("estimated"), true)
    }

    func testADayWhoseAggregationDiedIsCaughtByTheNextNightlyWindow() throws {
        try seedDay()
        // The run for 03-14 fails on every attempt (the table is unavailable) until it is dead.
        try pool.withConnection { _ = try $0.execute("ALTER TABLE ad_revenue_daily RENAME TO ad_revenue_daily_away") }
        var delivery = try driver.deliver(AdRevenueAggregationJob.className, nightly("2026-03-14"))
        var attempts = 1
        while case .retry(let next, _) = delivery {
            delivery = try driver.deliver(next)
            attempts += 1
        }
        guard case .dead = delivery else { return XCTFail("expected dead, got \(delivery)") }
        XCTAssertEqual(attempts, AdRevenueAggregationJob.options.maxRetries + 1)
        XCTAssertTrue(delivery.errorMessage?.contains("ad_revenue_daily") ?? false, "\(delivery)")
        try pool.withConnection { _ = try $0.execute("ALTER TABLE ad_revenue_daily_away RENAME TO ad_revenue_daily") }
        XCTAssertEqual(try rows().count, 0, "03-14 was never aggregated")

        // The next night aggregates 03-13...03-15, so 03-14 lands.
        XCTAssertAck(try driver.deliver(AdRevenueAggregationJob.className, nightly("2026-03-15")))
        XCTAssertEqual(try rows().count, 6)
        XCTAssertEqual(try rows()["aaaaaaaa/rewarded/admob/level_end"]?.string("revenue_text"), "0.080000")
        XCTAssertEqual(try rows(day: PostgresDay(year: 2026, month: 3, day: 15)).count, 2, "and its own day")
    }
}
