import Foundation
import Logging
import WorkersQueue
import WorkersTestServices
import Workers
import XCTest

/// Throws `JobError.retryAfter` with the number of seconds its argument gives (a provider's `Retry-After`), read
/// as any outside number is (`Bounded.duration`: at most a year, never a trap); the runner clamps it to a day.
struct RetryLaterJob: Job {
    struct Arguments: SingleJobArgument { static let className = "RetryLater"; let value: Double }
    func perform(_ arguments: Arguments, context: JobContext) throws {
        throw JobError.retryAfter(Bounded.duration(seconds: arguments.value), reason: "provider asked to wait")
    }
}

/// Numbers a producer or a provider controls never trap a worker (review H1, M1, M9): a payload whose run-time
/// counters no process could add 1 to goes to dead with its reason, in the runner and in every other process's
/// orphan sweep; client-settable numbers (`unique_for`, `retry`, a `Retry-After`) are clamped.
final class HostileNumbersTests: XCTestCase {
    private func start(_ harness: WorkerHarness, concurrency: Int = 2) throws -> WorkerProcess {
        var registry = harness.registry
        registry.register(RetryLaterJob())
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: harness.configuration(concurrency: concurrency), registry: registry,
                                        logger: logger)
        try process.start()
        return process
    }

    func testRunTimeCountersAtAnyExtremeGoToDeadWithTheirReasonAndTheWorkerRunsOn() throws {
        let redis = try TestRedis(database: 14)
        let harness = WorkerHarness(redis: redis)
        let cases: [(raw: String, reason: String)] = [
            (#"{"class":"Record","args":["h1"],"jid":"bbbbbbbbbbbbbbbbbbbbbbb1","queue":"default","retry_count":9223372036854775807,"interrupted_count":9223372036854775807}"#,
             #"payload "retry_count" is 9223372036854775807, outside -1...1000000"#),
            (#"{"class":"Record","args":["min"],"jid":"bbbbbbbbbbbbbbbbbbbbbbb2","queue":"default","retry_count":-9223372036854775808}"#,
             #"payload "retry_count" is -9223372036854775808, outside -1...1000000"#),
            (#"{"class":"Record","args":["ic"],"jid":"bbbbbbbbbbbbbbbbbbbbbbb3","queue":"default","interrupted_count":9223372036854775807}"#,
             #"payload "interrupted_count" is 9223372036854775807, outside 0...1000000"#),
            (#"{"class":"Record","args":["float"],"jid":"bbbbbbbbbbbbbbbbbbbbbbb4","queue":"default","retry_count":1e300}"#,
             #"payload "retry_count" must be an integer, got float"#),
            (#"{"class":"Record","args":["str"],"jid":"bbbbbbbbbbbbbbbbbbbbbbb5","queue":"default","retry_count":"5"}"#,
             #"payload "retry_count" must be an integer, got string"#),
        ]
        for (raw, _) in cases { try redis.command("LPUSH", "queue:default", raw) }
        try redis.client.enqueue(NewJob("Record", args: ["still alive"]))

        let process = try start(harness)
        defer { process.shutdown() }
        XCTAssertTrue(eventually { harness.recorder.all == ["still alive"] }, "\(harness.recorder.all)")
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == cases.count })
        let messages = try redis.payloads(zset: Keys.dead).compactMap(\.errorMessage)
        for (raw, reason) in cases {
            XCTAssertTrue(messages.contains(reason), "no dead entry says '\(reason)' for \(raw); got \(messages)")
        }
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty })
    }

    func testAnOrphanWhoseCountersAreAtTheLimitGoesToDeadInsteadOfCrashingTheSweep() throws {
        let redis = try TestRedis(database: 15)
        let hostile = #"{"class":"Noop","args":[],"jid":"bbbbbbbbbbbbbbbbbbbbbbb2","queue":"default","retry_count":9223372036854775807,"interrupted_count":9223372036854775807}"#
        let ordinary = #"{"class":"Noop","args":[],"jid":"cccccccccccccccccccccccc","queue":"default"}"#
        // A process that died holding both (no heartbeat key): the next sweep of any process recovers them.
        try redis.command("LPUSH", Keys.working(queue: "default", identity: "gone:1:abcdef"), hostile, ordinary)
        let report = try ReliableQueue.recoverOrphans(try redis.connection(), ownIdentity: "me:1:123456")
        XCTAssertEqual(report.requeued, 1)
        XCTAssertEqual(report.killed, 1)
        let requeued = try redis.payloads(list: "queue:default")
        XCTAssertEqual(requeued.map(\.jid), ["cccccccccccccccccccccccc"])
        XCTAssertEqual(requeued.first?.interruptedCount, 1)
        let dead = try redis.payloads(zset: Keys.dead)
        XCTAssertEqual(dead.count, 1)
        XCTAssertEqual(dead.first?.className, UnreadableJob.className)
        XCTAssertEqual(dead.first?.errorMessage, #"payload "retry_count" is 9223372036854775807, outside -1...1000000"#)
        XCTAssertEqual(dead.first?.fields["raw_payload"]?.stringValue, hostile)
        XCTAssertTrue(try redis.workingKeys().isEmpty)
    }

    func testAHugeRetryAfterOrRetryCountIsClampedAndNeverTrapsTheRunner() throws {
        let redis = try TestRedis(database: 16)
        let harness = WorkerHarness(redis: redis)
        // A 20-digit Retry-After (review M9), an infinite one, and a retry count whose Sidekiq backoff (count^4 s)
        // is beyond Int's range when logged.
        try redis.client.enqueue(NewJob("RetryLater", args: [.double(1e20)]))
        try redis.client.enqueue(NewJob("RetryLater", args: [.double(1e300)]))
        try redis.command("LPUSH", "queue:default",
                          #"{"class":"Fail","args":["boom"],"jid":"dddddddddddddddddddddddd","queue":"default","retry":1000000,"retry_count":999998,"failed_at":1700000000.0}"#)
        try redis.command("LPUSH", "queue:default",
                          #"{"class":"Fail","args":["boom"],"jid":"eeeeeeeeeeeeeeeeeeeeeeee","queue":"default","retry":1000000,"retry_count":999999,"failed_at":1700000000.0}"#)
        let before = Clock.now()
        let process = try start(harness)
        defer { process.shutdown() }
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 3 && redis.int("ZCARD", Keys.dead) == 1 })
        let entries = try retryEntries(redis)
        XCTAssertEqual(entries.count, 3)
        for (payload, score) in entries {
            XCTAssertGreaterThanOrEqual(score, before)
            // A Retry-After waits at most a day; a backoff at most a year.
            let limit = payload.className == "RetryLater" ? JobError.maxRetryAfter.inSeconds : Bounded.maxIntervalSeconds
            XCTAssertLessThanOrEqual(score, Clock.now() + limit, "\(payload.className) scheduled beyond the clamp")
        }
        XCTAssertEqual(entries.filter { $0.payload.className == "RetryLater" }.count, 2)
        // The count the next read would refuse ends the retries with the job's own error instead.
        let dead = try redis.payloads(zset: Keys.dead)
        XCTAssertEqual(dead.map(\.jid), ["eeeeeeeeeeeeeeeeeeeeeeee"])
        XCTAssertEqual(dead.first?.retryCount, 1_000_000)
        XCTAssertEqual(dead.first?.errorClass, "Fail::Failure")
    }

    func testAPayloadUniqueForOfAnyMagnitudeIsClampedToAYear() throws {
        let redis = try TestRedis(database: 17)
        let harness = WorkerHarness(redis: redis)
        // 1e300 trapped the fetcher; 1e15 passed it but made the settle script's PEXPIREAT fail after its LREM,
        // losing the retried job (review M1).
        let hold = #"{"class":"Sleep","args":[400],"jid":"ffffffffffffffffffffff01","queue":"default","unique_for":1e300}"#
        let retried = #"{"class":"Fail","args":["x"],"jid":"ffffffffffffffffffffff02","queue":"default","retry":1,"unique_for":1e15}"#
        try redis.command("LPUSH", "queue:default", hold, retried)
        let process = try start(harness)
        defer { process.shutdown() }
        // The failed job waits in retry, still holding its lock, whose TTL is within the clamp (plus the delay).
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty && redis.command("KEYS", "unique:*").strings.count == 1 })
        let retryAt = try XCTUnwrap(retryEntries(redis).first?.score)
        for key in try redis.command("KEYS", "unique:*").strings {
            let ttl = try redis.int("PTTL", key)
            XCTAssertGreaterThan(ttl, 0)
            XCTAssertLessThanOrEqual(Double(ttl), (retryAt - Clock.now() + UniquePolicy.maxSeconds) * 1000 + 1000)
        }
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
    }

    func testAProviderHoldIsClampedToAnHourWhateverItAsks() throws {
        let redis = try TestRedis(database: 18)
        // Nominatim's 429 with `Retry-After: 31536000000` held the fleet's geocoding for 1,000 years (review M9).
        let asked: [Duration] = [Bounded.duration(seconds: 3.1536e10), .seconds(Int64.max), Bounded.duration(seconds: .infinity),
                                 Bounded.duration(seconds: .nan), .seconds(-5)]
        for (index, duration) in asked.enumerated() {
            let limiter = CallLimiter(.bucket("hostile-hold-\(index)", capacity: 1, per: .seconds(1)), redis: redis.pool,
                                      patience: .seconds(1))
            try limiter.hold(for: duration)
        }
        let keys = try redis.command("KEYS", "*hostile-hold-*").strings
        XCTAssertEqual(keys.count, 5, "\(keys)")
        for key in keys {
            let ttl = try redis.int("PTTL", key)
            XCTAssertLessThanOrEqual(ttl, Int(CallLimiter.maxHold.inSeconds * 1000) + 2_000, "\(key) held for \(ttl) ms")
        }
    }

    func testAConfigurationDurationOrCountOfAnyMagnitudeIsRefusedAtStart() {
        let cases: [(String, (inout WorkerConfiguration) -> Void)] = [
            ("orphan sweep interval", { $0.orphanSweepInterval = .seconds(Int64.max) }),
            ("orphan sweep interval", { $0.orphanSweepInterval = .seconds(1e15) }),
            ("poll interval", { $0.pollInterval = .seconds(1e18) }),
            ("shutdown timeout", { $0.shutdownTimeout = .seconds(Int64.max) }),
            ("default timeout", { $0.defaultTimeout = .seconds(Int64.max) }),
            ("fetcher heartbeat TTL", { $0.fetcherHeartbeatTTL = .seconds(1e15) }),
            ("interrupt limit", { $0.interruptLimit = .max }),
            ("prefetch", { $0.prefetch = .max }),
        ]
        for (name, change) in cases {
            var configuration = WorkerConfiguration()
            change(&configuration)
            XCTAssertThrowsError(try configuration.validate(), name) { error in
                XCTAssertTrue("\(error)".contains(name), "\(error)")
            }
        }
        XCTAssertNoThrow(try WorkerConfiguration().validate())
    }

    /// The `retry` set's entries with their scores.
    private func retryEntries(_ redis: TestRedis) throws -> [(payload: JobPayload, score: Double)] {
        let flat = try redis.command("ZRANGE", Keys.retry, 0, -1, "WITHSCORES").strings
        return try stride(from: 0, to: flat.count - 1, by: 2).map { index in
            (try JobPayload(parsing: flat[index]), try XCTUnwrap(Double(flat[index + 1])))
        }
    }
}
