import Foundation
import WorkersQueue
import WorkersTestServices
import Workers
import WorkersTestSupport
import XCTest

/// Jobs written by Sidekiq 7 and 8 clients (Tests/Fixtures/sidekiq-7-8, composed from Sidekiq 7.3.10's and
/// 8.1.7's source: Debian has only 6.4.1 to run), through a real worker process: Sidekiq 8's integer-millisecond
/// times read and written back in the payload's unit, `retry_for`, latency, and the process-registry fields
/// Sidekiq 7/8's API reads. Sidekiq 6.4.1's side stays covered by SidekiqInteropTests.
final class SidekiqNewerPayloadTests: XCTestCase {
    static func fixture(_ name: String) throws -> String {
        try String(contentsOf: TestServices.fixturesDirectory.appendingPathComponent("sidekiq-7-8/\(name)"), encoding: .utf8)
    }

    static var nowMilliseconds: Int64 { Int64((Clock.now() * 1000).rounded(.down)) }

    func member(_ redis: TestRedis, _ set: String, jid: String) throws -> JobPayload? {
        try redis.payloads(zset: set).first { $0.jid == jid }
    }

    /// An integer-millisecond time written between `low` and `high` (inclusive), as Sidekiq 8 writes it.
    func assertMilliseconds(_ value: JSONValue?, within low: Int64, _ high: Int64, _ what: String,
                            file: StaticString = #filePath, line: UInt = #line) {
        guard case .int(let ms)? = value else {
            return XCTFail("\(what): expected integer milliseconds (Sidekiq 8's unit), got \(value.map { $0.serialized() } ?? "nothing")",
                           file: file, line: line)
        }
        XCTAssertTrue((low...high).contains(ms), "\(what): \(ms) ms is not within \(low)…\(high)", file: file, line: line)
    }

    /// A Sidekiq 8 job fails: `failed_at` is integer ms; the poller moves it back with an integer-ms `enqueued_at`;
    /// its second failure writes an integer-ms `retried_at`. The times Sidekiq 8 wrote stay as they were.
    func testSidekiq8JobFailsAndComesBackWithMillisecondTimes() throws {
        let redis = try TestRedis(database: 84)
        let pushed = try Self.fixture("sidekiq-8.1.7-push.json")
        let jid = try XCTUnwrap(JobPayload(parsing: pushed).jid)
        try redis.command("LPUSH", Keys.queue("default"), pushed)
        let before = Self.nowMilliseconds
        let harness = WorkerHarness(redis: redis)
        let process = try harness.start(harness.configuration(concurrency: 2))
        defer { process.shutdown() }

        XCTAssertTrue(try eventually { try self.member(redis, Keys.retry, jid: jid) != nil })
        let first = try XCTUnwrap(member(redis, Keys.retry, jid: jid))
        assertMilliseconds(first.fields["failed_at"], within: before, Self.nowMilliseconds, "failed_at")
        XCTAssertEqual(first.fields["retry_count"], 0)
        XCTAssertNil(first.fields["retried_at"])
        XCTAssertEqual(first.fields["created_at"], .int(1_795_330_293_472), "Sidekiq 8's own time is kept as written")
        XCTAssertEqual(first.fields["enqueued_at"], .int(1_795_330_293_473))
        XCTAssertEqual(first.fields["error_class"], "Fail::Failure")

        // Due now: the housekeeper (the poller) moves it back to its queue and it fails a second time.
        let raw = try XCTUnwrap(redis.command("ZRANGE", Keys.retry, 0, -1).strings.first)
        let moved = Self.nowMilliseconds
        try redis.command("ZADD", Keys.retry, "XX", Clock.now() - 1, raw)
        XCTAssertTrue(try eventually { try self.member(redis, Keys.retry, jid: jid)?.retryCount == 1 })
        let second = try XCTUnwrap(member(redis, Keys.retry, jid: jid))
        assertMilliseconds(second.fields["enqueued_at"], within: moved, Self.nowMilliseconds, "enqueued_at written by the poller")
        assertMilliseconds(second.fields["retried_at"], within: moved, Self.nowMilliseconds, "retried_at")
        XCTAssertEqual(second.fields["failed_at"], first.fields["failed_at"], "failed_at is the first failure")
        XCTAssertEqual(second.fields["created_at"], .int(1_795_330_293_472))
        XCTAssertEqual(second.failedAt.map { $0 * 1000 }.map(Int64.init), first.fields["failed_at"]?.intValue)
    }

    /// `retry_for` (Sidekiq 7.1.3+): failures are retried while the first failure is less than `retry_for` seconds
    /// old, whatever `retry` says (8.1+: the two are mutually exclusive), and then go to `dead`. `failed_at` is read in
    /// either unit: a Sidekiq 7 float and a Sidekiq 8 integer from 2026-11-22 with a one-hour window are both over.
    func testRetryForEndsRetriesByTimeAndOverridesTheCount() throws {
        let redis = try TestRedis(database: 85)
        let seven = try Self.fixture("sidekiq-7.3.10-retry-for-first-failure.json")
        let eight = try Self.fixture("sidekiq-8.1.7-retry-for-first-failure.json")
        let pastCount = try Self.fixture("sidekiq-8.1.7-retry-for-past-count.json")
        for text in [seven, eight, pastCount] { try redis.command("LPUSH", Keys.queue("default"), text) }
        let before = Self.nowMilliseconds
        let harness = WorkerHarness(redis: redis)
        let process = try harness.start(harness.configuration(concurrency: 2))
        defer { process.shutdown() }

        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) + redis.int("ZCARD", Keys.retry) == 3 })
        let sevenJID = try XCTUnwrap(JobPayload(parsing: seven).jid)
        let eightJID = try XCTUnwrap(JobPayload(parsing: eight).jid)
        let pastCountJID = try XCTUnwrap(JobPayload(parsing: pastCount).jid)

        // One hour after a first failure in 2026-11-22 is over: dead at once, although `retry: true` allows 25.
        let retryJIDs = try redis.payloads(zset: Keys.retry).map(\.jid)
        let deadJIDs = try redis.payloads(zset: Keys.dead).map(\.jid)
        let deadSeven = try XCTUnwrap(member(redis, Keys.dead, jid: sevenJID), "7.x retry_for job not dead; retry holds \(retryJIDs)")
        XCTAssertEqual(deadSeven.retryCount, 1)
        guard case .double? = deadSeven.fields["retried_at"] else {
            return XCTFail("a Sidekiq 7 job keeps float seconds: \(deadSeven.serialized())")
        }
        XCTAssertEqual(deadSeven.fields["failed_at"], .double(1_795_330_293.5901234))
        let deadEight = try XCTUnwrap(member(redis, Keys.dead, jid: eightJID),
                                      "8.x retry_for job not dead: its integer-ms failed_at was not read as milliseconds")
        assertMilliseconds(deadEight.fields["retried_at"], within: before, Self.nowMilliseconds, "retried_at")

        // A window of 100 years is not over: retried although retry_count 5 is past `retry: 2`.
        let retried = try XCTUnwrap(member(redis, Keys.retry, jid: pastCountJID),
                                    "retry_for must override the count; dead holds \(deadJIDs)")
        XCTAssertEqual(retried.retryCount, 5)
        assertMilliseconds(retried.fields["retried_at"], within: before, Self.nowMilliseconds, "retried_at")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 2)
    }

    /// Queue latency (admin, `workerctl queues`) and the worker's pickup latency read Sidekiq 8's milliseconds.
    func testLatenciesReadMillisecondTimes() throws {
        let redis = try TestRedis(database: 86)
        let pushed = try Self.fixture("sidekiq-8.1.7-push.json")
        try redis.command("LPUSH", Keys.queue("default"), pushed)
        let connection = try redis.connection()
        // enqueued_at 1795330293473 ms, read at 1795330300.000 s.
        XCTAssertEqual(try JobQueue("default").latency(connection, now: 1_795_330_300), 6.527, accuracy: 1e-6)
        let listed = try XCTUnwrap(JobQueue("default").page(connection, page: try PageRequest(number: 1, size: 10)).items.first)
        XCTAssertEqual(try XCTUnwrap(listed.enqueuedAt), 1_795_330_293.473, accuracy: 1e-6)
        try redis.flush()

        // A Sidekiq 8 job enqueued (by its own clock) 60 s ago waits about 60 s when a worker picks it up.
        var job = try JobPayload(parsing: pushed)
        job.fields["class"] = "Noop"
        job.fields["enqueued_at"] = .int(Self.nowMilliseconds - 60_000)
        try redis.command("LPUSH", Keys.queue("default"), job.serialized())
        let harness = WorkerHarness(redis: redis)
        let process = try harness.start(harness.configuration(concurrency: 1))
        defer { process.shutdown() }
        XCTAssertTrue(try eventually { try redis.processed() == 1 })
        let pickup = try XCTUnwrap(process.pickupLatency.percentile(0.5))
        XCTAssertTrue((59...120).contains(pickup), "pickup latency \(pickup) s, expected about 60 s")
    }

    /// Our process entry as Sidekiq 7/8's `ProcessSet`, `Process` and `WorkSet` read it (v8.1.7 lib/sidekiq/api.rb):
    /// `concurrency` as a field of the hash (8.x reads it there, not from `info`), `capsules`, `weights`, `version`,
    /// `embedded` in `info`, and the busy threads in `IDENTITY:work` as well as 6.x's `IDENTITY:workers`.
    func testProcessRegistryCarriesTheFieldsSidekiq7And8Read() throws {
        let redis = try TestRedis(database: 85)
        let harness = WorkerHarness(redis: redis)
        let queues = [QueueWeight(name: "critical", weight: 2), QueueWeight(name: "default", weight: 1)]
        let process = try harness.start(harness.configuration(concurrency: 3, queues: queues))
        defer { process.shutdown() }
        _ = try redis.client.enqueue(NewJob("Sleep", args: [3000]))
        XCTAssertTrue(try eventually { try redis.int("HGET", Keys.process(process.identity), "busy") == 1 })

        XCTAssertEqual(try redis.command("HGET", Keys.process(process.identity), "concurrency").string, "3")
        let infoText = try XCTUnwrap(redis.command("HGET", Keys.process(process.identity), "info").string)
        let info = try XCTUnwrap(JSONValue.parse(infoText).objectValue)
        XCTAssertEqual(info["capsules"], .object(["default": .object(["concurrency": 3, "mode": "weighted",
                                                                     "weights": .object(["critical": 2, "default": 1])])]))
        XCTAssertEqual(info["weights"], .array([.object(["critical": 2, "default": 1])]), "7.x: one hash per capsule")
        XCTAssertEqual(info["queues"], ["critical", "default"])
        XCTAssertEqual(info["concurrency"], 3, "6.x and 7.x read it from info")
        XCTAssertEqual(info["embedded"], false, "an embedded process refuses quiet!/stop! in 7/8's API")
        XCTAssertNotNil(info["version"]?.stringValue)
        XCTAssertEqual(info["identity"]?.stringValue, process.identity)

        let work = try redis.command("HGETALL", Keys.work(process.identity)).strings
        XCTAssertEqual(work.count, 2, "Sidekiq 7/8's WorkSet reads IDENTITY:work")
        XCTAssertEqual(work, try redis.command("HGETALL", Keys.workers(process.identity)).strings)
        let busy = try XCTUnwrap(JSONValue.parse(try XCTUnwrap(work.last)).objectValue)
        XCTAssertEqual(busy["queue"], "default")
        XCTAssertNotNil(busy["run_at"]?.intValue)

        // Strict order (equal weights) is Sidekiq's strict mode: weight 0 for every queue.
        process.shutdown()
        XCTAssertEqual(try redis.int("EXISTS", Keys.work(process.identity)), 0, "deregistered")
        let strict = try harness.start(harness.configuration(concurrency: 2))
        defer { strict.shutdown() }
        let strictInfo = try XCTUnwrap(JSONValue.parse(try XCTUnwrap(
            redis.command("HGET", Keys.process(strict.identity), "info").string)).objectValue)
        XCTAssertEqual(strictInfo["capsules"]?.objectValue?["default"]?.objectValue?["mode"], "strict")
        XCTAssertEqual(strictInfo["weights"], .array([.object(["default": 0])]))
    }

    /// A Sidekiq 8 process in the registry, as its heartbeat writes it, read by our admin (`workerctl workers`,
    /// `workerctl jobs --state busy`): its concurrency is in the hash, its busy threads in `IDENTITY:work`; and a
    /// Sidekiq 8 retry entry's integer-ms times read as seconds, and written back in ms by "retry now".
    func testAdminReadsASidekiq8ProcessAndItsWork() throws {
        let redis = try TestRedis(database: 86)
        let identity = "app-1:4242:0a1b2c3d4e5f"
        try redis.command("SADD", Keys.processes, identity)
        try redis.command("HSET", identity, "info", try Self.fixture("sidekiq-8.1.7-process-info.json"), "concurrency", 5,
                          "busy", 1, "beat", "1795330295.5", "rtt_us", 812, "quiet", "false", "rss", 123456)
        try redis.command("HSET", Keys.work(identity), "2ge", try Self.fixture("sidekiq-8.1.7-work.json"))
        let connection = try redis.connection()

        let entry = try XCTUnwrap(ProcessRegistry.list(connection).first)
        XCTAssertEqual(entry.identity, identity)
        XCTAssertEqual(entry.concurrency, 5, "Sidekiq 8 keeps concurrency in the hash, not in info")
        XCTAssertEqual(entry.queues, ["critical", "default"])
        XCTAssertEqual(entry.rttMicroseconds, 812)

        let busy = try WorkSet.all(connection)
        XCTAssertEqual(busy.map(\.jid), ["8e5b4a6f7c8d9e0f1a2b3c4d"])
        XCTAssertEqual(try XCTUnwrap(busy.first?.enqueuedAt), 1_795_330_293.473, accuracy: 1e-6)

        // A Sidekiq 8 retry entry (`workerctl jobs --state retry`, the dashboard's recent failures).
        try redis.command("ZADD", Keys.retry, "1795330317.59", try Self.fixture("sidekiq-8.1.7-retry-first-failure.json"))
        let failed = try XCTUnwrap(SortedJobSet(.retry).page(connection, page: try PageRequest()).items.first)
        XCTAssertEqual(try XCTUnwrap(failed.failedAt), 1_795_330_293.590, accuracy: 1e-6)
        XCTAssertEqual(try XCTUnwrap(failed.lastFailureAt), 1_795_330_293.590, accuracy: 1e-6)
        XCTAssertEqual(try XCTUnwrap(failed.createdAt), 1_795_330_293.472, accuracy: 1e-6)

        // The operator's "retry now" (`workerctl jobs retry`) puts it back with Sidekiq 8's unit kept.
        try JobAdmin(connection: connection).perform(.retry, jid: "8b2e1d3c4f5a6b7c8d9e0f1a", now: 1_795_330_400.25)
        let requeued = try XCTUnwrap(redis.payloads(list: Keys.queue("default")).first)
        XCTAssertEqual(requeued.fields["enqueued_at"], .int(1_795_330_400_250))
        XCTAssertEqual(requeued.fields["created_at"], .int(1_795_330_293_472))
        XCTAssertEqual(requeued.retryCount, -1, "Ruby's SortedEntry#retry decrements retry_count")
    }

    /// Sidekiq 8 tells the units apart by JSON type; an integer below 10¹¹ (1973 in ms) is whole seconds, as a
    /// non-Ruby client may write them. Pure: no Redis.
    func testTimestampUnitsByTypeAndMagnitude() {
        XCTAssertEqual(TimestampUnit.seconds(.double(1_795_330_293.5)), 1_795_330_293.5)
        XCTAssertEqual(TimestampUnit.seconds(.int(1_795_330_293_500)), 1_795_330_293.5)
        XCTAssertEqual(TimestampUnit.seconds(.int(1_795_330_293)), 1_795_330_293, "integer seconds from a non-Ruby client")
        XCTAssertNil(TimestampUnit.seconds(.string("1795330293")))
        XCTAssertEqual(TimestampUnit.of(payload: ["created_at": .int(1_795_330_293)]), .seconds)
        XCTAssertEqual(TimestampUnit.of(payload: ["enqueued_at": .int(1_795_330_293_473)]), .milliseconds)
        XCTAssertEqual(TimestampUnit.milliseconds.value(1_795_330_293.4729), .int(1_795_330_293_472), "truncated, as Ruby's clock_gettime")
    }
}
