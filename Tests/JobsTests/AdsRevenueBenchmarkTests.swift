import Foundation
import WorkersAppJobs
import WorkersStorage
import XCTest

/// Times `RevenueAggregator.aggregate` on a database seeded by `bench/ads_revenue_seed.sh`.
/// Skipped unless `ADS_BENCH_DATABASE_URL` names such a database. Prints the figures; asserts only
/// what the seed implies (rows exist, a re-run changes nothing), never a duration.
final class AdsRevenueBenchmarkTests: XCTestCase {
    func testAggregateOneSeededDay() throws {
        guard let url = ProcessInfo.processInfo.environment["ADS_BENCH_DATABASE_URL"] else {
            throw XCTSkip("set ADS_BENCH_DATABASE_URL (see bench/ads_revenue_seed.sh)")
        }
        let pool = PostgresPool(url: url, maxConnections: 1)
        defer { pool.shutdown() }
        let day = PostgresDay(year: 2026, month: 3, day: 14)
        let views = try pool.withConnection {
            try $0.queryFirst("SELECT count(*)::bigint AS n FROM ad_views WHERE created_at >= '2026-03-14' AND created_at < '2026-03-15'")!.int64("n")
        }
        let aggregator = RevenueAggregator()
        var first: RevenueAggregator.Summary?
        for run in 1...2 {
            let started = Date()
            let summary = try pool.withConnection { try aggregator.aggregate(day: day, connection: $0) }
            let seconds = Date().timeIntervalSince(started)
            print("ads-bench: run \(run): \(views) ad views aggregated into \(summary.rows) rows in "
                  + String(format: "%.2f", seconds) + " s (written \(summary.written), deleted \(summary.deleted))")
            if run == 1 { first = summary } else { XCTAssertEqual(summary.written, 0) }
        }
        XCTAssertGreaterThan(first?.rows ?? 0, 0)
    }
}
