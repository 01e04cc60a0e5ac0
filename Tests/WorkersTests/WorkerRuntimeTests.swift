import Foundation
import WorkersQueue
import WorkersTestServices
import Workers
import XCTest

final class WorkerRuntimeTests: XCTestCase {
    var redis: TestRedis!
    var harness: WorkerHarness!
    var processes: [WorkerProcess] = []

    override func setUpWithError() throws {
        redis = try TestRedis(database: 2)
        harness = WorkerHarness(redis: redis)
    }

    override func tearDown() {
        for process in processes { process.shutdown() }
        processes = []
    }

    func start(_ configuration: WorkerConfiguration) throws -> WorkerProcess {
        let process = try harness.start(configuration)
        processes.append(process)
        return process
    }

    func testEnqueuedJobsRunAndAreAcknowledged() throws {
        try redis.client.enqueueMany((0..<300).map { NewJob("Record", args: [.string("\($0)")]) })
        try redis.client.enqueueMany((0..<200).map { _ in NewJob("Noop") })
        let process = try start(harness.configuration())
        XCTAssertTrue(try eventually { try redis.processed() == 500 })
        XCTAssertEqual(Set(harness.recorder.all).count, 300)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0)
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty })
        XCTAssertEqual(try redis.failed(), 0)
        XCTAssertEqual(try redis.int("GET", Keys.statProcessed(day: Clock.utcDay(Clock.now()))), 500)
        XCTAssertEqual(process.processedCount, 500)
    }

    func testFailureIsRetriedWithSidekiqBookkeepingThenDies() throws {
        let jid = try redis.client.enqueue(NewJob("Fail", args: ["boom"], retry: 1))
        _ = try start(harness.configuration())
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        let first = try XCTUnwrap(redis.payloads(zset: Keys.retry).first)
        XCTAssertEqual(first.jid, jid)
        XCTAssertEqual(first.retryCount, 0)
        XCTAssertEqual(first.errorMessage, "boom")
        XCTAssertEqual(first.errorClass, "Fail::Failure", "a class path Ruby tools read, not Swift reflection")
        XCTAssertNotNil(first.fields["failed_at"]?.doubleValue)
        XCTAssertNil(first.fields["retried_at"])
        let score = try XCTUnwrap(redis.command("ZSCORE", Keys.retry, first.serialized()).double)
        XCTAssertGreaterThanOrEqual(score - (first.fields["failed_at"]?.doubleValue ?? 0), 14.9, "Sidekiq's first delay is 15-24 s")
        XCTAssertLessThanOrEqual(score - (first.fields["failed_at"]?.doubleValue ?? 0), 24.1)
        // Make it due now; the poller moves it back, it fails again and, out of retries, dies.
        try redis.command("ZADD", Keys.retry, 0, first.serialized())
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        let dead = try XCTUnwrap(redis.payloads(zset: Keys.dead).first)
        XCTAssertEqual(dead.jid, jid)
        XCTAssertEqual(dead.retryCount, 1)
        XCTAssertNotNil(dead.fields["retried_at"]?.doubleValue)
        XCTAssertEqual(dead.fields["retry_count"], .int(1))
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        XCTAssertEqual(try redis.failed(), 2)
    }

    func testRetryFalseVanishesAndRetryZeroDiesAtOnce() throws {
        try redis.client.enqueue(NewJob("Fail", args: ["no retry"], retry: false))
        let zero = try redis.client.enqueue(NewJob("Fail", args: ["zero"], retry: 0))
        _ = try start(harness.configuration())
        XCTAssertTrue(try eventually { try redis.failed() == 2 })
        XCTAssertEqual(try redis.payloads(zset: Keys.dead).map(\.jid), [zero])
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
    }

    func testDeadSetKeepsItsConfiguredCap() throws {
        var configuration = harness.configuration(concurrency: 1)
        configuration.deadLimits = DeadSetLimits(maxJobs: 3, maxAge: .seconds(3600))
        try redis.command("ZADD", Keys.dead, Clock.now() - 7200, #"{"class":"Old","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}"#)
        let jids = try redis.client.enqueueMany((0..<5).map { NewJob("Fail", args: [.string("x\($0)")], retry: 0) })
        _ = try start(configuration)
        XCTAssertTrue(try eventually { try redis.failed() == 5 })
        // Exactly three stay, all of them ours; the one past the age limit was trimmed.
        let kept = try redis.payloads(zset: Keys.dead).compactMap(\.jid)
        XCTAssertEqual(kept.count, 3)
        XCTAssertTrue(Set(kept).isSubset(of: Set(jids)), "\(kept)")
    }

    func testJobClassRetryCountAndBackoff() throws {
        // Tight: 2 retries, 0.2 s backoff, 0.5 s timeout. A 1 s run times out three times, then dies.
        let jid = try redis.client.enqueue(NewJob("Tight", args: [1000]))
        _ = try start(harness.configuration(concurrency: 1))
        XCTAssertTrue(try eventually(timeout: 30) { try redis.int("ZCARD", Keys.dead) == 1 })
        let dead = try XCTUnwrap(redis.payloads(zset: Keys.dead).first)
        XCTAssertEqual(dead.jid, jid)
        XCTAssertEqual(dead.errorClass, "JobTimeout")
        XCTAssertEqual(dead.retryCount, 2)
    }

    func testTimedOutJobDoesNotCostAThread() throws {
        var configuration = harness.configuration(concurrency: 1)
        configuration.defaultTimeout = .seconds(0.3)
        try redis.client.enqueue(NewJob("Sleep", args: [5000]))
        try redis.client.enqueue(NewJob("Record", args: ["after"]))
        _ = try start(configuration)
        // With one thread stuck in a 5 s sleep, "after" can only run on a replacement thread.
        XCTAssertTrue(eventually { self.harness.recorder.all == ["after"] })
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        let retried = try redis.payloads(zset: Keys.retry)
        XCTAssertEqual(retried.map(\.className), ["Sleep"])
        XCTAssertEqual(retried.first?.errorClass, "JobTimeout")
    }

    /// An abandoned Sleep stops at its cancellation flag instead of holding its thread for the rest of
    /// its sleep: the run returns (the pool records its run time) long before the minute is over.
    func testTimedOutSleepStopsAtItsCancellation() throws {
        var configuration = harness.configuration(concurrency: 1)
        configuration.defaultTimeout = .seconds(0.3)
        try redis.client.enqueue(NewJob("Sleep", args: [60_000], retry: 0))
        let process = try start(configuration)
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        XCTAssertEqual(try redis.payloads(zset: Keys.dead).first?.errorClass, "JobTimeout")
        XCTAssertTrue(eventually(timeout: 10) { process.runTime.count == 1 },
                      "the abandoned Sleep never returned: it ignored its cancellation")
        XCTAssertLessThan(try XCTUnwrap(process.runTime.percentile(1)), 30)
    }

    /// The bench/test job ProbeInsert is not in the production registry: a worker started without
    /// `--bench-jobs` treats it as an unknown class, like any class it does not know (with no other process serving
    /// the queue and a grace of 0: dead at once; RollingDeployTests covers the give-back).
    func testBenchJobIsNotInTheBuiltinRegistry() throws {
        XCTAssertNil(JobRegistry.builtins().options(for: "ProbeInsert"))
        XCTAssertNotNil(JobRegistry.builtins().options(for: "Sleep"))
        try redis.client.enqueue(NewJob("ProbeInsert", args: ["x"]))
        var configuration = harness.configuration()
        configuration.unknownClassGrace = .zero
        _ = try start(configuration)
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        let dead = try XCTUnwrap(redis.payloads(zset: Keys.dead).first)
        XCTAssertEqual(dead.className, "ProbeInsert")
        XCTAssertEqual(dead.errorClass, "BadInput")
        XCTAssertTrue(dead.errorMessage?.contains("ProbeInsert") ?? false, dead.errorMessage ?? "-")
    }

    func testScheduledJobRunsWhenDue() throws {
        try redis.client.enqueue(NewJob("Record", args: ["later"]), in: 0.5)
        XCTAssertEqual(try redis.int("ZCARD", Keys.schedule), 1)
        _ = try start(harness.configuration())
        XCTAssertTrue(eventually { self.harness.recorder.all == ["later"] })
        XCTAssertEqual(try redis.int("ZCARD", Keys.schedule), 0)
    }

    func testStrictQueueOrder() throws {
        try redis.client.enqueueMany((0..<20).map { NewJob("Record", args: [.string("low\($0)")], queue: "low") })
        try redis.client.enqueueMany((0..<20).map { NewJob("Record", args: [.string("high\($0)")], queue: "high") })
        var configuration = harness.configuration(concurrency: 1, queues: [QueueWeight(name: "high"), QueueWeight(name: "low")])
        configuration.prefetch = 0
        _ = try start(configuration)
        XCTAssertTrue(eventually { self.harness.recorder.all.count == 40 })
        let order = harness.recorder.all
        XCTAssertEqual(Array(order.prefix(20)), (0..<20).map { "high\($0)" })
        XCTAssertEqual(Array(order.suffix(20)), (0..<20).map { "low\($0)" })
    }

    func testWeightedQueuesServeBoth() throws {
        try redis.client.enqueueMany((0..<200).map { NewJob("Record", args: [.string("a\($0)")], queue: "a") })
        try redis.client.enqueueMany((0..<200).map { NewJob("Record", args: [.string("b\($0)")], queue: "b") })
        var configuration = harness.configuration(concurrency: 1, queues: [QueueWeight(name: "a", weight: 3), QueueWeight(name: "b", weight: 1)])
        configuration.prefetch = 0
        configuration.fetchBatch = 1
        _ = try start(configuration)
        XCTAssertTrue(eventually { self.harness.recorder.all.count >= 100 })
        let early = harness.recorder.all.prefix(100)
        let fromA = early.filter { $0.hasPrefix("a") }.count
        // Weighted random: mostly a, but b is not starved.
        XCTAssertGreaterThan(fromA, 50)
        XCTAssertLessThan(fromA, 100)
    }

    func testPausedQueueIsSkipped() throws {
        try redis.command("SADD", Keys.paused, "default")
        try redis.client.enqueue(NewJob("Record", args: ["x"]))
        _ = try start(harness.configuration(queues: [QueueWeight(name: "default")]))
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(harness.recorder.all, [])
        try redis.command("SREM", Keys.paused, "default")
        XCTAssertTrue(eventually { self.harness.recorder.all == ["x"] })
    }

    func testProcessRegistersInSidekiqFormatAndShowsBusyJobs() throws {
        try redis.client.enqueue(NewJob("Sleep", args: [1500]))
        let process = try start(harness.configuration(concurrency: 3))
        XCTAssertTrue(try eventually { try redis.int("HLEN", Keys.workers(process.identity)) == 1 })
        let connection = try redis.connection()
        // The workers hash and the process hash (with `busy`) are written by two transactions of one beat.
        XCTAssertTrue(try eventually { try ProcessRegistry.list(connection).first?.busy == 1 })
        let entry = try XCTUnwrap(ProcessRegistry.list(connection).first)
        XCTAssertEqual(entry.identity, process.identity)
        XCTAssertEqual(entry.concurrency, 3)
        XCTAssertEqual(entry.queues, ["default"])
        XCTAssertEqual(entry.pid, Int(ProcessInfo.processInfo.processIdentifier))
        XCTAssertEqual(entry.busy, 1)
        XCTAssertFalse(entry.quiet)
        let work = try XCTUnwrap(redis.command("HVALS", Keys.workers(process.identity)).strings.first)
        let workObject = try XCTUnwrap(JSONValue.parse(work).objectValue)
        XCTAssertEqual(workObject["queue"], "default")
        XCTAssertEqual(try JobPayload(parsing: XCTUnwrap(workObject["payload"]?.stringValue)).className, "Sleep")
        XCTAssertNotNil(workObject["run_at"]?.intValue)
        XCTAssertEqual(try redis.int("EXISTS", Keys.fetcherHeartbeat(identity: process.identity)), 1)
    }

    func testSidekiqQuietAndStopSignalsThroughRedis() throws {
        let process = try start(harness.configuration())
        let connection = try redis.connection()
        try ProcessRegistry.signal(connection, identity: process.identity, "TSTP")
        XCTAssertTrue(try eventually { try redis.command("HGET", process.identity, "quiet").string == "true" })
        try redis.client.enqueue(NewJob("Record", args: ["not fetched"]))
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(harness.recorder.all, [])
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 1)
        try ProcessRegistry.signal(connection, identity: process.identity, "TERM")
        XCTAssertTrue(try eventually { try redis.int("SISMEMBER", Keys.processes, process.identity) == 0 })
        process.waitUntilStopped()
    }

    func testGracefulShutdownPutsUnfinishedJobsBack() throws {
        var configuration = harness.configuration(concurrency: 2)
        configuration.shutdownTimeout = .seconds(0.5)
        configuration.prefetch = 3
        try redis.client.enqueueMany([NewJob("Sleep", args: [4000]), NewJob("Sleep", args: [4000])]
                                     + (0..<3).map { NewJob("Record", args: [.string("\($0)")]) })
        let process = try start(configuration)
        XCTAssertTrue(eventually { process.busyCount == 2 })
        process.shutdown()
        let back = try redis.payloads(list: "queue:default")
        XCTAssertEqual(back.count, 5, "\(back.map(\.className))")
        XCTAssertEqual(back.filter { $0.className == "Sleep" }.map(\.interruptedCount), [1, 1])
        XCTAssertEqual(back.filter { $0.className == "Record" }.map(\.interruptedCount), [0, 0, 0])
        // The interrupted ones are at the tail: they run next.
        XCTAssertEqual(back.suffix(2).map(\.className), ["Sleep", "Sleep"])
        XCTAssertEqual(try redis.workingKeys(), [])
        XCTAssertEqual(try redis.int("SISMEMBER", Keys.processes, process.identity), 0)
        XCTAssertEqual(try redis.int("EXISTS", Keys.workers(process.identity)), 0)
    }

    func testOrphanedJobsOfADeadProcessAreRecovered() throws {
        // A process that died: its in-flight list is there, its heartbeat is not.
        let deadIdentity = "deadhost:4242:abcdef012345"
        let raw = try JobClient.payload(for: NewJob("Record", args: ["orphan"]), createdAt: Clock.now(), enqueuedAt: Clock.now()).serialized()
        try redis.command("LPUSH", Keys.working(queue: "default", identity: deadIdentity), raw)
        // One that is alive keeps its job.
        let liveIdentity = "livehost:4243:abcdef012346"
        let liveRaw = try JobClient.payload(for: NewJob("Record", args: ["alive"]), createdAt: Clock.now(), enqueuedAt: Clock.now()).serialized()
        try redis.command("LPUSH", Keys.working(queue: "default", identity: liveIdentity), liveRaw)
        try redis.command("SET", Keys.fetcherHeartbeat(identity: liveIdentity), "1", "EX", 60)
        _ = try start(harness.configuration())
        XCTAssertTrue(eventually { self.harness.recorder.all == ["orphan"] })
        XCTAssertEqual(try redis.int("LLEN", Keys.working(queue: "default", identity: deadIdentity)), 0)
        XCTAssertEqual(try redis.int("LLEN", Keys.working(queue: "default", identity: liveIdentity)), 1)
    }

    func testJobThatKeepsKillingItsWorkerEndsInDead() throws {
        let deadIdentity = "deadhost:4242:abcdef012345"
        var payload = try JobClient.payload(for: NewJob("Record", args: ["poison"]), createdAt: Clock.now(), enqueuedAt: Clock.now())
        payload.fields["interrupted_count"] = 2
        try redis.command("LPUSH", Keys.working(queue: "default", identity: deadIdentity), payload.serialized())
        _ = try start(harness.configuration())
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        let dead = try XCTUnwrap(redis.payloads(zset: Keys.dead).first)
        XCTAssertEqual(dead.interruptedCount, 3)
        XCTAssertEqual(dead.errorClass, "Interrupted")
        XCTAssertEqual(harness.recorder.all, [])
    }

    func testManyPollersMoveEachDueJobOnce() throws {
        let count = 600
        let jids = try redis.client.enqueueMany((0..<count).map { _ in NewJob("Noop") },
                                                at: Array(repeating: Clock.now() + 0.2, count: count))
        Thread.sleep(forTimeInterval: 0.3)
        let group = DispatchGroup()
        let url = redis.url
        for _ in 0..<4 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                if let connection = try? RedisConnection(url: url) {
                    _ = try? ReliableQueue.moveDue(connection, from: Keys.schedule, batchSize: 50)
                }
            }
        }
        group.wait()
        let queued = try redis.payloads(list: "queue:default").compactMap(\.jid)
        XCTAssertEqual(queued.count, count)
        XCTAssertEqual(Set(queued), Set(jids))
        XCTAssertEqual(try redis.int("ZCARD", Keys.schedule), 0)
    }

    func testSettlingAJobAlreadyTakenBackDoesNotDuplicateIt() throws {
        // A job our sweep already gave back must not also land in retry when its slow run fails.
        let connection = try redis.connection()
        let raw = Array(#"{"class":"X","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}"#.utf8)
        let job = FetchedJob.init(queue: "default", raw: raw, workingKey: Keys.working(queue: "default", identity: "h:1:ab"))
        let settled = try ReliableQueue.settle(connection, [(job, .retry(payload: "{}", at: 1), [.processed, .failed])])
        XCTAssertEqual(settled, 0)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        // The run is counted when the job that went back is run again, not here.
        XCTAssertEqual(try redis.processed(), 0)
        XCTAssertEqual(try redis.failed(), 0)
    }

    func testResentSettleBatchCountsEachRunOnce() throws {
        // The settler sends a batch again when the reply of the first send was lost: the second
        // send must neither count the runs again nor write their retry/dead/requeue entries twice.
        let connection = try redis.connection()
        let working = Keys.working(queue: "default", identity: "h:1:ab")
        func job(_ jid: String) throws -> FetchedJob {
            let raw = Array(#"{"class":"X","args":[],"queue":"default","jid":"\#(jid)"}"#.utf8)
            try connection.command("LPUSH", working, raw).checked()
            return FetchedJob(queue: "default", raw: raw, workingKey: working)
        }
        let batch: [(job: FetchedJob, settlement: Settlement, counts: RunCounts)] = [
            (try job("a00000000000000000000001"), .ack, [.processed]),
            (try job("a00000000000000000000002"), .retry(payload: #"{"jid":"a00000000000000000000002","retry_count":0}"#, at: 100),
             [.processed, .failed]),
            (try job("a00000000000000000000003"), .dead(payload: #"{"jid":"a00000000000000000000003"}"#), [.processed, .failed]),
            (try job("a00000000000000000000004"), .requeue(payload: #"{"jid":"a00000000000000000000004"}"#), []),
        ]
        let now = Clock.now()
        let day = Clock.utcDay(now)
        XCTAssertEqual(try ReliableQueue.settle(connection, batch, now: now), 4)
        func state() throws -> [Int] {
            [try redis.processed(), try redis.failed(),
             try redis.int("GET", Keys.statProcessed(day: day)), try redis.int("GET", Keys.statFailed(day: day)),
             try redis.int("ZCARD", Keys.retry), try redis.int("ZCARD", Keys.dead),
             try redis.int("LLEN", "queue:default"), try redis.int("LLEN", working)]
        }
        XCTAssertEqual(try state(), [3, 2, 3, 2, 1, 1, 1, 0])
        XCTAssertEqual(try ReliableQueue.settle(connection, batch, now: now + 1), 0, "the resent batch settles nothing")
        XCTAssertEqual(try state(), [3, 2, 3, 2, 1, 1, 1, 0], "the resent batch changed the stats or the sets")
    }
}
