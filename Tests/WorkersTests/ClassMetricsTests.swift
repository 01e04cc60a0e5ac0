import WorkersBenchJobs
import Foundation
import Logging
import WorkersQueue
import WorkersTestServices
@testable import Workers
import WorkersTestSupport
import XCTest

/// Per-class execution metrics (docs/metrics-and-health.md, "Per-class metrics"): recorded by a real worker's runs
/// through the runtime's `ClassMetricsMiddleware`, flushed by its heartbeat in Sidekiq 8's layout, read back by
/// `ClassMetricsReport` (what `workerctl stats --classes` and the dashboard show).
final class ClassMetricsTests: XCTestCase {
    var redis: TestRedis!
    var processes: [WorkerProcess] = []

    override func setUpWithError() throws {
        redis = try TestRedis(database: 81)
    }

    override func tearDown() {
        for process in processes { process.shutdown() }
    }

    func start() throws -> WorkerProcess {
        var registry = JobRegistry.builtins()
        BenchJobs.register(into: &registry)
        var logger = Logger(label: "class-metrics-test")
        logger.logLevel = .critical
        var configuration = WorkerConfiguration.forTests(redis: redis, concurrency: 4)
        configuration.unknownClassGrace = .zero  // an unregistered class is a failed run here, counted under _other
        let process = try WorkerProcess(configuration: configuration, registry: registry, logger: logger)
        try process.start()
        processes.append(process)
        return process
    }

    func testRunsFailuresAndTimesAreRecordedPerRegisteredClassAndUnknownClassesUnderOther() throws {
        for _ in 0..<20 { try redis.client.enqueue(NewJob("Noop")) }
        for i in 0..<5 { try redis.client.enqueue(NewJob("Fail", args: [.string("boom \(i)")], retry: 0)) }
        for _ in 0..<3 { try redis.client.enqueue(NewJob("Producer::Invented::Class")) }
        _ = try start()
        XCTAssertTrue(try eventually { try redis.processed() == 28 })
        var byClass: [String: ClassMetricsSummary] = [:]
        XCTAssertTrue(try eventually {
            byClass = Dictionary(uniqueKeysWithValues: try ClassMetricsReport.load(try redis.connection(), period: .hour)
                .map { ($0.className, $0) })
            return byClass.values.reduce(0) { $0 + $1.runs } == 28
        }, "the heartbeat flushed every run: \(byClass)")
        let noop = try XCTUnwrap(byClass["Noop"])
        XCTAssertEqual(noop.runs, 20)
        XCTAssertEqual(noop.failed, 0)
        XCTAssertEqual(noop.p50Milliseconds, 20, "a no-op run falls in the first bucket (< 20 ms)")
        XCTAssertEqual(noop.p95Milliseconds, 20)
        let fail = try XCTUnwrap(byClass["Fail"])
        XCTAssertEqual(fail.runs, 5)
        XCTAssertEqual(fail.failed, 5)
        XCTAssertNil(fail.p50Milliseconds, "failed runs' times are left out, as Sidekiq does")
        XCTAssertEqual(fail.totalMilliseconds, 0)
        let other = try XCTUnwrap(byClass[ClassMetricsLayout.otherClass], "an unregistered class counts under _other")
        XCTAssertEqual(other.runs, 3)
        XCTAssertEqual(other.failed, 3)
        XCTAssertNil(byClass["Producer::Invented::Class"], "a producer's class name never becomes a key of its own")

        // Sidekiq 8's own keys, with their TTLs: what Sidekiq Web's Metrics tab reads.
        let connection = try redis.connection()
        let minuteKeys = try connection.command("KEYS", "j|*").strings
        XCTAssertFalse(minuteKeys.isEmpty)
        var sidekiqRuns = 0
        for key in minuteKeys where key.split(separator: ":").last?.count == 2 {  // one-minute buckets (H:MM)
            sidekiqRuns += Int(try connection.command("HGET", key, "Noop|p").string ?? "0") ?? 0
            let ttl = try redis.int("TTL", key)
            XCTAssertTrue(ttl > 0 && ttl <= ClassMetricsLayout.minuteTTLSeconds, "\(key) ttl \(ttl)")
        }
        XCTAssertEqual(sidekiqRuns, 20, "Noop|p in the one-minute j| hashes")
        let histograms = try connection.command("KEYS", "h|Noop-*").strings
        XCTAssertFalse(histograms.isEmpty, "Sidekiq's u16 histogram")
        for key in try connection.command("KEYS", "*").strings where key.hasPrefix("j|") || key.hasPrefix("h") {
            XCTAssertGreaterThan(try redis.int("TTL", key), 0, "\(key) expires")
        }
    }

    func testAFlushCostsTheSameCommandsFor10000RunsAsFor3() throws {
        let recorder = ClassMetricsRecorder(registeredClasses: ["A", "B"])
        func commandsAfter(runs: Int) -> Int {
            for i in 0..<runs { recorder.record(className: ["A", "B", "Z"][i % 3], failed: i % 7 == 0, milliseconds: Double(i % 400)) }
            return recorder.commands(for: recorder.drain(), now: 1_800_000_000).count
        }
        let few = commandsAfter(runs: 3)
        let many = commandsAfter(runs: 10_000)
        XCTAssertGreaterThan(few, 0)
        XCTAssertLessThanOrEqual(many, few + 3 * 2 * 2,
                                 "bounded by classes (A, B, _other) and buckets, never by runs (\(few) vs \(many))")
        XCTAssertEqual(recorder.commands(for: recorder.drain(), now: 1_800_000_000).count, 0, "drained: nothing left")
    }

    func testTheDayReadsTenMinuteBucketsAndTheHourOnlyTheLastSixtyMinutes() throws {
        let now = Clock.now()
        let recorder = ClassMetricsRecorder(registeredClasses: ["Old", "New"])
        let connection = try redis.connection()
        for _ in 0..<4 { recorder.record(className: "Old", failed: false, milliseconds: 800) }
        try recorder.flush(on: connection, now: now - 3 * 3_600)
        for _ in 0..<19 { recorder.record(className: "New", failed: false, milliseconds: 10) }
        recorder.record(className: "New", failed: false, milliseconds: 4_000)
        try recorder.flush(on: connection, now: now)

        let hour = try ClassMetricsReport.load(connection, period: .hour, now: now)
        XCTAssertEqual(hour.map(\.className), ["New"], "three hours ago is outside the last hour")
        let day = Dictionary(uniqueKeysWithValues: try ClassMetricsReport.load(connection, period: .day, now: now)
            .map { ($0.className, $0) })
        XCTAssertEqual(day["Old"]?.runs, 4)
        XCTAssertEqual(day["Old"]?.p50Milliseconds, 1_100, "800 ms lies in the 750…1100 ms bucket")
        XCTAssertEqual(day["New"]?.runs, 20)
        XCTAssertEqual(day["New"]?.p50Milliseconds, 20)
        XCTAssertEqual(day["New"]?.p95Milliseconds, 20, "19 of 20 runs under 20 ms: the 95th is the 19th")
        XCTAssertEqual(day["New"]?.totalMilliseconds, 4_190)
    }

    func testHostileCountersInTheMetricsKeysAreClampedNeverATrap() throws {
        // Anyone can write these keys: values past Int64, negative, or not numbers, and histogram buckets at u32's top.
        let minute = ClassMetricsLayout.Minute(epochSeconds: Clock.now())
        try redis.command("HSET", "j|" + minute.minute, "Big|p", "99999999999999999999999", "Big|f", "-3", "Big|ms", "x",
                          "Big2|p", String(Int.max))
        try redis.command("HSET", "j|" + ClassMetricsLayout.Minute(epochSeconds: Clock.now() - 60).minute, "Big|p", String(Int.max))
        for bucket in 0..<26 {
            try redis.command("BITFIELD", "hx|Big|" + minute.minute, "SET", "u32", "#\(bucket)", 4_294_967_295)
        }
        let byClass = Dictionary(uniqueKeysWithValues: try ClassMetricsReport.load(try redis.connection(), period: .hour)
            .map { ($0.className, $0) })
        XCTAssertEqual(byClass["Big"]?.runs, 2 * Bounded.maxCounter, "each value clamped, then added")
        XCTAssertEqual(byClass["Big"]?.failed, 0)
        XCTAssertEqual(byClass["Big"]?.p50Milliseconds, 2_500, "26 equal buckets at u32's top: the 13th holds the median")
        XCTAssertEqual(byClass["Big2"]?.runs, Bounded.maxCounter)
    }

    func testPercentilesAreTheBucketBoundOfTheNearestRank() {
        var histogram = Array(repeating: 0, count: ClassMetricsLayout.bucketUpperBoundsMs.count)
        XCTAssertNil(ClassMetricsReport.percentile(0.5, of: histogram))
        histogram[0] = 50
        histogram[25] = 50
        XCTAssertEqual(ClassMetricsReport.percentile(0.50, of: histogram), 20)
        XCTAssertEqual(ClassMetricsReport.percentile(0.51, of: histogram), .infinity)
        XCTAssertEqual(ClassMetricsLayout.bucket(milliseconds: .nan), 0)
        XCTAssertEqual(ClassMetricsLayout.bucket(milliseconds: 1e300), 25)
        XCTAssertEqual(ClassMetricsLayout.bucket(milliseconds: 20), 1, "upper bounds are exclusive, as Sidekiq's")
    }

    func testSidekiqMinuteNamesMatchItsStrftimeFormats() {
        // 2026-11-27 08:05:30 UTC: Sidekiq's `%y%m%d|%-H:%M` and its ten-minute cut, and the histogram's `%-d-%-H:%-M`.
        let minute = ClassMetricsLayout.Minute(epochSeconds: 1_795_766_730)
        XCTAssertEqual(minute.minute, "261127|8:05")
        XCTAssertEqual(minute.tenMinutes, "261127|8:0")
        XCTAssertEqual(minute.histogramWindow, "27-8:5")
    }
}
