import Foundation
import WorkersAppJobs
import Logging
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// The nightly ad revenue run as a batch (docs/batches.md, "Nightly ad revenue"), through a real worker (fetch,
/// JobRunner, settle script): one aggregation job per app, the day recorded once all succeeded, and the morning
/// check's alert for a day that is not.
final class AdsRevenueBatchTests: JobsTestCase {
    let appA = UUID(uuidString: "aaaaaaaa-0000-0000-0000-0000000000a1")!
    let appB = UUID(uuidString: "bbbbbbbb-0000-0000-0000-0000000000b2")!
    var process: WorkerProcess?
    let logs = CapturedLogs()

    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "ads_batch_test", connections: 6, redis: 79) }

    override func tearDown() {
        process?.shutdown()
        super.tearDown()
    }

    func start() throws {
        var registry = JobRegistry()
        AdsJobs.register(into: &registry, configuration: AdsConfiguration(), http: http, redis: redis.pool)
        process = try TestWorker.start(redis: redis, registry: registry, database: fixture.jobDatabase, concurrency: 4,
                                       logger: logs.logger(label: "ads-batch-test", level: .info))
    }

    func view(_ app: UUID, at time: String, revenue: Double?) throws {
        try pool.withConnection { connection in
            try connection.execute("""
                INSERT INTO ad_views (app_id, ad_type, provider, placement, display_duration_ms, ad_clicked, ad_completed,
                                      revenue_usd, created_at)
                VALUES ($1, 'rewarded', 'admob', 'level_end', 15000, false, true, $2, $3::timestamptz)
                """, [app, revenue, time])
        }
    }

    func dayRow(_ day: String) throws -> (bid: String, apps: Int)? {
        try pool.withConnection { connection in
            try connection.queryFirst("SELECT bid, apps FROM ad_revenue_days WHERE day = $1::date", [day])
                .map { (try $0.string("bid"), try $0.int("apps")) }
        }
    }

    func testNightlyRunFansOutPerAppAndRecordsTheDayOnceAllSucceeded() throws {
        try view(appA, at: "2026-03-13T10:00:00Z", revenue: 0.02)
        try view(appA, at: "2026-03-14T10:00:00Z", revenue: 0.01)
        try view(appB, at: "2026-03-14T11:00:00Z", revenue: nil)
        try start()
        // The nightly tick, delivered twice (a redelivery): one batch.
        let nightly = NewJob(AdRevenueNightlyJob.className, args: [.object(["days": 2]), .object(["date": "2026-03-14"])])
        try redis.client.enqueueMany([nightly, nightly])

        XCTAssertTrue(try eventually(timeout: 30) { try dayRow("2026-03-14") != nil }, "\(logs.all)")
        let row = try XCTUnwrap(try dayRow("2026-03-14"))
        XCTAssertEqual(row.bid, "ad-revenue-2026-03-14")
        XCTAssertEqual(row.apps, 2)
        let batch = try XCTUnwrap(try BatchAdmin.summary(redis.connection(), bid: row.bid))
        XCTAssertEqual([batch.total, batch.pending, batch.failures, batch.dead], [2, 0, 0, 0])
        XCTAssertEqual(batch.state, "success")
        XCTAssertEqual(logs.messages(containing: "ad revenue run already fanned out").count, 1)
        // Each app's days were aggregated by its own job (the app total rows: one per app and day).
        let totals = try pool.withConnection { connection in
            try connection.query("""
                SELECT app_id::text || ' ' || day::text AS k FROM ad_revenue_daily WHERE ad_type = '' ORDER BY 1
                """).map { try $0.string("k") }
        }
        XCTAssertEqual(totals, ["\(appA.uuidString.lowercased()) 2026-03-13", "\(appA.uuidString.lowercased()) 2026-03-14",
                                "\(appB.uuidString.lowercased()) 2026-03-14"])
        XCTAssertTrue(try eventually { try redis.processed() == 5 }, "2 nightly (one a duplicate) + 2 per-app + 1 callback")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)

        // The morning check: the complete day raises nothing; a day without a row raises the alert.
        logs.clear()
        try redis.client.enqueue(NewJob(AdRevenueDayCheckJob.className, args: [.object(["date": "2026-03-14"])]))
        XCTAssertTrue(eventually { !logs.messages(containing: "ad revenue day is complete").isEmpty }, "\(logs.all.map { "\($0) \($0.metadata)" })")
        XCTAssertEqual(logs.alerts, [])
        try redis.client.enqueue(NewJob(AdRevenueDayCheckJob.className, args: [.object(["date": "2026-03-12"])]))
        XCTAssertTrue(eventually { logs.alerts == ["ad_revenue_day_incomplete"] }, "\(logs.all)")
        let alert = try XCTUnwrap(logs.all.first { $0.metadata["alert"] != nil })
        XCTAssertEqual(alert.level, .error)
        XCTAssertEqual(alert.metadata["day"], "2026-03-12")
        XCTAssertEqual(alert.metadata["batch"], "none")
    }

    /// A day whose batch has not finished (an app's job still failing) is not recorded, and the morning alert
    /// carries the batch's counts.
    func testDayWithAFailingAppIsNotCompleteAndTheCheckSaysWhy() throws {
        try view(appA, at: "2026-03-14T10:00:00Z", revenue: 0.01)
        // The batch as the nightly job makes it, but one app's job cannot succeed (its app_id is not a UUID: dead).
        let good = NewJob(AdRevenueAggregationJob.className, args: [.object(["date": "2026-03-14", "app_id": .string(appA.uuidString)])])
        let bad = NewJob(AdRevenueAggregationJob.className, args: [.object(["date": "2026-03-14", "app_id": "not-a-uuid"])])
        try redis.client.createBatch(NewBatch(jobs: [good, bad], onSuccess: BatchCallback(AdRevenueDayCompleteJob.className,
                                                                                        options: .object(["day": "2026-03-14", "apps": 2]))),
                                     bid: "ad-revenue-2026-03-14")
        try start()
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 && redis.processed() == 2 })
        logs.clear()
        try redis.client.enqueue(NewJob(AdRevenueDayCheckJob.className, args: [.object(["date": "2026-03-14"])]))
        XCTAssertTrue(eventually { logs.alerts == ["ad_revenue_day_incomplete"] }, "\(logs.all)")
        XCTAssertNil(try dayRow("2026-03-14"))
        let alert = try XCTUnwrap(logs.all.first { $0.metadata["alert"] != nil })
        XCTAssertEqual([alert.metadata["total"], alert.metadata["pending"], alert.metadata["dead"]], ["2", "1", "1"])
    }
}
