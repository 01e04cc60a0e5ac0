import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The per-minute run counters the settle script keeps (`stat:minutely:*`) and `Throughput`, which reads
/// them for the dashboard's last-hour and last-day graphs.
final class ThroughputTests: XCTestCase {
    let identity = "throughput-host:1:abcdef"
    /// 2025-11-25 00:00:00 UTC: a day boundary, so that one read spans two days' hashes.
    let midnight = 1_764_028_800.0

    private func settleOne(_ redis: TestRedis, _ connection: RedisConnection, at now: Double, counts: RunCounts, times: Int = 1) throws {
        _ = try redis.client.enqueue(NewJob("Noop"))
        let job = try XCTUnwrap(try ReliableQueue.fetch(connection, identity: identity, queues: ["default"], limit: 1).jobs.first)
        for _ in 0..<times { try ReliableQueue.settle(connection, [(job, .ack, counts)], now: now) }
    }

    /// Each run lands in the minute it was settled in, on its UTC day's hash; a settle batch sent again after a lost
    /// reply counts nothing twice (the same rule as `stat:processed`).
    func testRunsAreCountedOncePerMinuteAcrossADayBoundary() throws {
        let redis = try TestRedis(database: 90)
        let connection = try redis.connection()
        try settleOne(redis, connection, at: midnight - 30, counts: .processed)            // 23:59 of the day before
        try settleOne(redis, connection, at: midnight + 5, counts: .processed, times: 3)   // sent three times: counted once
        try settleOne(redis, connection, at: midnight + 50, counts: [.processed, .failed])
        try settleOne(redis, connection, at: midnight + 61, counts: .processed)

        XCTAssertEqual(try redis.command("HGET", Keys.statMinutelyProcessed(day: "2025-11-24"), "1439").string, "1")
        XCTAssertEqual(try redis.command("HGET", Keys.statMinutelyProcessed(day: "2025-11-25"), "0").string, "2")
        XCTAssertEqual(try redis.command("HGET", Keys.statMinutelyFailed(day: "2025-11-25"), "0").string, "1")
        let ttl = try XCTUnwrap(try redis.command("TTL", Keys.statMinutelyProcessed(day: "2025-11-25")).integer)
        XCTAssertTrue((Keys.minutelyRetention - 10...Keys.minutelyRetention).contains(Int(ttl)), "kept 3 days, TTL \(ttl)")

        let minutes = try Throughput.load(connection, minutes: 3, now: midnight + 90)
        XCTAssertEqual(minutes.map(\.start), [midnight - 60, midnight, midnight + 60])
        XCTAssertEqual(minutes.map(\.processed), [1, 2, 1])
        XCTAssertEqual(minutes.map(\.failed), [0, 1, 0])
        XCTAssertEqual(minutes[1].processedPerSecond, 2.0 / 60, accuracy: 1e-9)

        let quarters = try Throughput.load(connection, minutes: 30, bucketMinutes: 15, now: midnight + 90)
        XCTAssertEqual(quarters.count, 2)
        XCTAssertEqual(quarters.map(\.processed), [0, 4], "23:32–23:46 empty; 23:47–00:01 holds every run")
        XCTAssertEqual(quarters.map(\.failed), [0, 1])
        XCTAssertEqual(quarters.map(\.seconds), [900, 900])
        XCTAssertEqual(quarters.last?.start, midnight + 60 - 14 * 60)
    }

    func testAWholeDayIsReadAndBadSpansAreRefused() throws {
        let redis = try TestRedis(database: 90)
        let connection = try redis.connection()
        let day = try Throughput.load(connection, minutes: 1440, bucketMinutes: 15, now: midnight + 12 * 3600)
        XCTAssertEqual(day.count, 96)
        XCTAssertTrue(day.allSatisfy { $0.processed == 0 && $0.failed == 0 })
        XCTAssertThrowsError(try Throughput.load(connection, minutes: 0, now: midnight))
        XCTAssertThrowsError(try Throughput.load(connection, minutes: 10, bucketMinutes: 3, now: midnight))
        XCTAssertThrowsError(try Throughput.load(connection, minutes: 2_881, now: midnight))
    }
}
