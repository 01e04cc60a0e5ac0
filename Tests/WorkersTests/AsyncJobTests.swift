import WorkersBenchJobs
import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Synchronization
import WorkersTestServices
import WorkersTestSupport
import XCTest

@testable import Workers

/// Async jobs (`AsyncJob`, issue 53 point 3) through a real in-process `WorkerProcess` (real Redis and PostgreSQL,
/// fetched, run as tasks and settled by the runtime): acknowledgement, retry, dead, the timeout's cancel and the
/// in-flight place it holds, the in-flight limit, an operator's cancel, the ledger, async middleware. Redis
/// databases 140-142. No assertion reads a clock: waits are `until`/`eventually` (patience), gates are explicit.
final class AsyncJobTests: XCTestCase {
    var redis: TestRedis!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var processes: [WorkerProcess] = []
    let recorder = Recorder()
    let gate = Gate()
    let counter = ConcurrentRuns()

    override func setUpWithError() throws {
        redis = try TestRedis(database: 140)
        database = try PostgresTestDatabase.create(prefix: "async_jobs_test")
        pool = PostgresPool(url: database.url, maxConnections: 4)
        _ = try BundledSchema.migrate(pool: pool)
        try BenchSchema.create(pool: pool)
    }

    override func tearDown() {
        gate.open()  // a job still waiting must not keep its task (and the process's stop) waiting
        for process in processes { process.shutdown() }
        pool?.shutdown()
        database?.drop()
    }

    /// A worker with the built-in jobs and this file's async jobs.
    func start(concurrency: Int = 2, asyncConcurrency: Int = 100,
               middleware: [any JobMiddleware] = []) throws -> WorkerProcess {
        var registry = JobRegistry.builtins()
        registry.register(AsyncRecordJob(recorder: recorder))
        registry.register(AsyncFailJob())
        registry.register(AsyncTypedJob(recorder: recorder))
        registry.register(StubbornJob(recorder: recorder, gate: gate))
        registry.register(AsyncGatedJob(counter: counter, gate: gate))
        registry.register(WaitForCancelJob(recorder: recorder))
        registry.register(AsyncProbeInsertJob())
        var configuration = WorkerConfiguration.forTests(redis: redis, concurrency: concurrency)
        configuration.asyncConcurrency = asyncConcurrency
        configuration.unknownClassGrace = .zero
        var logger = Logger(label: "async-job-test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: configuration, registry: registry,
                                        database: JobDatabase(pool: pool), logger: logger, middleware: middleware)
        try process.start()
        processes.append(process)
        return process
    }

    func rows(_ jid: String) throws -> Int {
        try pool.withConnection { connection in
            try connection.queryFirst("SELECT count(*)::int AS n FROM probe_rows WHERE jid = $1", [jid])?.int("n") ?? -1
        }
    }

    func testAsyncJobRunsInATaskAndIsAcknowledged() throws {
        try redis.client.enqueue(NewJob("AsyncRecord", args: ["one"]))
        _ = try start()
        XCTAssertTrue(try eventually { try redis.processed() == 1 })
        XCTAssertEqual(recorder.all, ["one in a task"])
        XCTAssertEqual(try redis.failed(), 0)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0)
        XCTAssertTrue(try eventually { try redis.workingKeys().allSatisfy { try redis.int("LLEN", $0) == 0 } },
                      "acknowledged: its in-flight entry is gone")
    }

    func testAsyncJobThatThrowsIsRetriedWithItsErrorClass() throws {
        let jid = try redis.client.enqueue(NewJob("AsyncFail", args: ["boom"]))
        _ = try start()
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        let retry = try XCTUnwrap(redis.payloads(zset: Keys.retry).first)
        XCTAssertEqual(retry.jid, jid)
        XCTAssertEqual(retry.retryCount, 0)
        XCTAssertEqual(retry.errorClass, "AsyncFail::Failure", "named like a sync job's error")
        XCTAssertEqual(retry.errorMessage, "boom")
        XCTAssertEqual(try redis.failed(), 1)
    }

    func testAsyncJobWithBadInputGoesToDeadAtOnceWithoutRunning() throws {
        try redis.client.enqueue(NewJob("AsyncTyped", args: [.object(["count": .int(-1)])]))  // refused by init(from:)
        try redis.client.enqueue(NewJob("AsyncTyped", args: [.object(["count": .int(0)])]))   // perform throws badInput
        _ = try start()
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 2 })
        let dead = try redis.payloads(zset: Keys.dead)
        XCTAssertEqual(dead.map(\.errorClass), ["BadInput", "BadInput"])
        XCTAssertEqual(Set(dead.compactMap(\.errorMessage)),
                       ["invalid arguments for AsyncTyped: count must not be negative", "bad input: count is zero"])
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0, "never retried")
        XCTAssertEqual(recorder.all, ["perform 0"], "the refused arguments never reached perform")
    }

    /// A run past its timeout fails with `JobTimeout` (retried) and its task is cancelled (`context.isCancelled`,
    /// `Task.isCancelled`); a task that does not return keeps its in-flight place: with one place, the next async job
    /// starts only once the timed-out task has returned, which the test decides (the gate), and that task is counted
    /// as having outlived its timeout.
    func testTimedOutTaskIsCancelledAndHoldsItsPlaceUntilItReturns() throws {
        let stubborn = try redis.client.enqueue(NewJob("Stubborn"))
        let process = try start(asyncConcurrency: 1)
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        let retry = try XCTUnwrap(redis.payloads(zset: Keys.retry).first)
        XCTAssertEqual(retry.jid, stubborn)
        XCTAssertEqual(retry.errorClass, "JobTimeout")
        XCTAssertTrue(eventually { recorder.all.contains("cancelled: flag true, task true") }, "\(recorder.all)")
        try redis.client.enqueue(NewJob("AsyncRecord", args: ["after"]))
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:default") == 0 }, "fetched")
        XCTAssertEqual(process.pool.asyncRuns.inFlight, 1, "the timed-out task still holds the only place")
        XCTAssertEqual(process.pool.asyncRuns.outlivedCount, 0)
        XCTAssertFalse(recorder.all.contains("after in a task"), "no place for the next async job yet")

        gate.open()  // the stubborn task returns
        XCTAssertTrue(eventually { recorder.all.contains("after in a task") }, "\(recorder.all)")
        XCTAssertTrue(eventually { process.pool.asyncRuns.outlivedCount == 1 }, "counted as outliving its timeout")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 1, "settled once, by the watchdog")
    }

    /// One pool thread, three places: three async runs at once (more than the threads), never a fourth.
    func testInFlightTasksNeverExceedTheirLimitWhateverTheThreadCount() async throws {
        for _ in 0..<10 { try redis.client.enqueue(NewJob("AsyncGated")) }
        let process = try start(concurrency: 1, asyncConcurrency: 3)
        try await until { await counter.current == 3 }
        XCTAssertEqual(process.pool.asyncRuns.inFlight, 3)
        XCTAssertEqual(try redis.processed(), 0, "none finished: seven more wait, fetched or queued")
        gate.open()
        try await until { try redis.processed() == 10 }
        let peak = await counter.peak
        XCTAssertEqual(peak, 3, "the limit was reached and never passed")
        XCTAssertEqual(process.pool.asyncRuns.peakInFlight, 3)
    }

    /// A graceful stop waits for running async tasks as for pool threads (up to `shutdownTimeout`), then puts a run
    /// still going back at the front of its queue (`interrupted_count` 1) and cancels its task: nothing is left in the
    /// in-flight list. The gate never opens during the stop, so the outcome does not depend on timing.
    func testShutdownWaitsForARunningTaskThenPutsItBack() async throws {
        let jid = try redis.client.enqueue(NewJob("AsyncGated"))
        let process = try start()
        try await until { await counter.current == 1 }
        process.shutdown()
        let queued = try redis.payloads(list: "queue:default")
        XCTAssertEqual(queued.map(\.jid), [jid], "put back")
        XCTAssertEqual(queued.first?.interruptedCount, 1)
        XCTAssertEqual(try redis.workingKeys().reduce(0) { $0 + (try redis.int("LLEN", $1)) }, 0, "nothing left in flight")
        XCTAssertEqual(try redis.processed(), 1, "counted as an interrupted run")
    }

    /// `workerctl jobs cancel`'s API (`JobAdmin.cancel`) reaches a running async job: its `context.isCancelled` and
    /// its task's cancellation; it ends in dead as `Cancelled`.
    func testCancelThroughTheCancelAPIReachesIsCancelledAndTheTask() throws {
        let jid = try redis.client.enqueue(NewJob("WaitForCancel"))
        _ = try start()
        XCTAssertTrue(eventually { recorder.all.contains("waiting") })
        try JobAdmin(connection: try redis.connection()).cancel(jid: jid)
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        XCTAssertEqual(recorder.all, ["waiting", "cancelled: flag true, task true"])
        let dead = try XCTUnwrap(redis.payloads(zset: Keys.dead).first)
        XCTAssertEqual(dead.jid, jid)
        XCTAssertEqual(dead.errorClass, JobCancels.errorClass)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
    }

    /// The same async ledger job delivered twice applies once; a redelivery whose first delivery committed is
    /// acknowledged without running.
    func testRedeliveredAsyncLedgerJobAppliesOnce() throws {
        let twice = try JobClient.payload(for: NewJob("AsyncProbeInsert", args: ["twice"]), createdAt: Clock.now(),
                                          enqueuedAt: Clock.now())
        try redis.command("LPUSH", "queue:default", twice.serialized(), twice.serialized())
        var redelivered = try JobClient.payload(for: NewJob("AsyncProbeInsert", args: ["again"]), createdAt: Clock.now(),
                                                enqueuedAt: Clock.now())
        redelivered.fields["interrupted_count"] = .int(1)
        let again = try XCTUnwrap(redelivered.jid)
        _ = try JobLedger(pool: pool).runOnce(jid: again, jobClass: "AsyncProbeInsert", queue: "default") { connection in
            try connection.execute("INSERT INTO probe_rows (jid, note) VALUES ($1, 'first')", [again])
        }
        try redis.command("LPUSH", "queue:default", redelivered.serialized())
        _ = try start()
        XCTAssertTrue(try eventually { try redis.processed() == 3 })
        XCTAssertEqual(try rows(try XCTUnwrap(twice.jid)), 1, "delivered twice, applied once")
        XCTAssertEqual(try rows(again), 1, "the redelivery did not apply again")
        XCTAssertEqual(try redis.failed(), 0)
    }

    func testAsyncMiddlewareWrapsAsyncJobsAndSyncOnlyMiddlewareIsRefused() throws {
        try redis.client.enqueue(NewJob("AsyncRecord", args: ["job"]))
        try redis.client.enqueue(NewJob("Noop"))
        _ = try start(middleware: [AsyncAround(name: "A", recorder: recorder), AsyncAround(name: "B", recorder: recorder)])
        XCTAssertTrue(try eventually { try redis.processed() == 2 })
        XCTAssertEqual(recorder.all.filter { !$0.hasPrefix("sync") }, ["A>", "B>", "job in a task", "<B", "<A"])
        XCTAssertEqual(recorder.all.filter { $0.hasPrefix("sync") }, ["sync A", "sync B"], "sync jobs through run(_:next:)")

        XCTAssertThrowsError(try start(middleware: [SyncOnly()])) { error in
            XCTAssertTrue("\(error)".contains("WorkersTests.SyncOnly does not conform to AsyncJobMiddleware"), "\(error)")
        }
    }
}

/// Polls `condition` until it holds (patience, not an assertion on time: 30 s, then fails).
func until(_ condition: () async throws -> Bool, file: StaticString = #filePath, line: UInt = #line) async throws {
    for _ in 0..<1500 {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    XCTFail("condition never held", file: file, line: line)
}

// MARK: - Jobs and middleware of these tests

/// A gate async jobs wait at, ignoring their task's cancellation, until the test opens it.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

/// Counts the async runs in progress and the most at once.
actor ConcurrentRuns {
    private(set) var current = 0
    private(set) var peak = 0
    func enter() { current += 1; peak = max(peak, current) }
    func leave() { current -= 1 }
}

struct AsyncRecordJob: AsyncJob {
    struct Arguments: SingleJobArgument { static let className = "AsyncRecord"; let value: String }
    let recorder: Recorder
    func perform(_ arguments: Arguments, context: JobContext) async throws {
        await Task.yield()
        recorder.append("\(arguments.value)\(withUnsafeCurrentTask { $0 != nil } ? " in a task" : " on a thread")")
    }
}

struct AsyncFailJob: AsyncJob {
    struct Arguments: SingleJobArgument { static let className = "AsyncFail"; let value: String }
    struct Failure: Error, CustomStringConvertible { let description: String }
    static let options = JobOptions(backoff: .schedule([.seconds(3600)]))
    func perform(_ arguments: Arguments, context: JobContext) async throws {
        await Task.yield()
        throw Failure(description: arguments.value)
    }
}

/// `[{"count": n}]`: a negative count is refused by `init(from:)`, zero by `perform`.
struct AsyncTypedJob: AsyncJob {
    struct Arguments: JobArguments {
        static let className = "AsyncTyped"
        let count: Int
        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            count = try container.decode(Int.self, forKey: .count)
            guard count >= 0 else { throw JobError.badInput("count must not be negative") }
        }
        enum CodingKeys: String, CodingKey { case count }
    }
    let recorder: Recorder
    func perform(_ arguments: Arguments, context: JobContext) async throws {
        recorder.append("perform \(arguments.count)")
        if arguments.count == 0 { throw JobError.badInput("count is zero") }
    }
}

/// Runs past its short timeout: waits for its cancel, records what it saw, then waits at the gate whatever its task's
/// cancellation says (a task that does not cooperate).
struct StubbornJob: AsyncJob {
    struct Arguments: NoJobArguments { static let className = "Stubborn" }
    static let options = JobOptions(backoff: .schedule([.seconds(3600)]), timeout: .milliseconds(300))
    let recorder: Recorder
    let gate: Gate
    func perform(_ arguments: Arguments, context: JobContext) async throws {
        while !context.cancellation.isCancelled { try? await Task.sleep(for: .milliseconds(10)) }
        recorder.append("cancelled: flag \(context.isCancelled), task \(Task.isCancelled)")
        await gate.wait()
    }
}

/// Counts itself in `counter` while it waits at the gate.
struct AsyncGatedJob: AsyncJob {
    struct Arguments: NoJobArguments { static let className = "AsyncGated" }
    let counter: ConcurrentRuns
    let gate: Gate
    func perform(_ arguments: Arguments, context: JobContext) async throws {
        await counter.enter()
        await gate.wait()
        await counter.leave()
    }
}

/// Waits until its task is cancelled (only an operator's cancel can do that here), then stops as cancelled.
struct WaitForCancelJob: AsyncJob {
    struct Arguments: NoJobArguments { static let className = "WaitForCancel" }
    let recorder: Recorder
    func perform(_ arguments: Arguments, context: JobContext) async throws {
        recorder.append("waiting")
        while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(10)) }
        recorder.append("cancelled: flag \(context.isCancelled), task \(Task.isCancelled)")
        try context.checkCancellation()
    }
}

/// `ProbeInsert` as an async ledger job: inserts one `probe_rows` row in its ledger transaction.
struct AsyncProbeInsertJob: AsyncJob {
    struct Arguments: SingleJobArgument { static let className = "AsyncProbeInsert"; let value: String }
    static let options = JobOptions(usesLedger: true)
    func perform(_ arguments: Arguments, context: JobContext) async throws {
        let jid = context.jid, note = arguments.value
        try await context.transaction { connection in
            try connection.execute("INSERT INTO probe_rows (jid, note) VALUES ($1, $2)", [jid, note])
        }
    }
}

/// Records entering and leaving an async run, and each sync run it wraps.
struct AsyncAround: AsyncJobMiddleware {
    let name: String
    let recorder: Recorder
    func run(_ context: JobContext, next: (JobContext) throws -> Void) throws {
        recorder.append("sync \(name)")
        try next(context)
    }
    func run(async context: JobContext, next: (JobContext) async throws -> Void) async throws {
        recorder.append("\(name)>")
        try await next(context)
        recorder.append("<\(name)")
    }
}

struct SyncOnly: JobMiddleware {
    func run(_ context: JobContext, next: (JobContext) throws -> Void) throws { try next(context) }
}
