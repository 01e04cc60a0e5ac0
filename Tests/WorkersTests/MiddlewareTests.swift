import WorkersBenchJobs
import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Synchronization
import WorkersTestServices
import Workers
import WorkersTestSupport
import XCTest

/// The middleware seams (docs/writing-jobs.md, "Middleware"): `EnqueueMiddleware` on `JobClient`, `JobMiddleware` on a
/// real in-process `WorkerProcess` (real Redis and PostgreSQL, jobs fetched, run and settled by the runtime).
final class MiddlewareTests: XCTestCase {
    var redis: TestRedis!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var processes: [WorkerProcess] = []
    let recorder = Recorder()

    override func setUpWithError() throws {
        redis = try TestRedis(database: 34)
        database = try PostgresTestDatabase.create(prefix: "middleware_test")
        pool = PostgresPool(url: database.url, maxConnections: 4)
        _ = try BundledSchema.migrate(pool: pool)
    }

    override func tearDown() {
        for process in processes { process.shutdown() }
        pool?.shutdown()
        database?.drop()
    }

    /// A worker with the built-in jobs and `TenantJob`, running `middleware`.
    func start(_ middleware: [any JobMiddleware], commitBatch: Int? = nil) throws -> WorkerProcess {
        var registry = JobRegistry.builtins()
        registry.register(TenantJob(recorder: recorder))
        registry.register(RecordJob(recorder: recorder))
        BenchJobs.register(into: &registry)
        var configuration = WorkerConfiguration.forTests(redis: redis, concurrency: 2)
        if let commitBatch { configuration.commitBatch = commitBatch }
        configuration.unknownClassGrace = .zero  // an unknown class is bad input at once here (RollingDeployTests: the give-back)
        var logger = Logger(label: "middleware-test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: configuration, registry: registry,
                                        database: JobDatabase(pool: pool), logger: logger, middleware: middleware)
        try process.start()
        processes.append(process)
        return process
    }

    func testTenantTagAddedAtEnqueueReachesTheRunMiddlewareAndTheJobsLogger() throws {
        let client = JobClient(pool: redis.pool, middleware: [TenantTag(tenant: "acme")])
        let jid = try client.enqueue(NewJob("Tenant"))
        let queued = try XCTUnwrap(try redis.payloads(list: "queue:default").first)
        XCTAssertEqual(queued.fields["tenant"], .string("acme"), "the enqueue middleware's field is in the payload")
        XCTAssertEqual(queued.jid, jid)

        let tags = Recorder()
        _ = try start([TenantFromPayload(seen: tags)])
        XCTAssertTrue(try eventually { try redis.processed() == 1 })
        XCTAssertEqual(tags.all, ["acme"], "the run middleware read the tag from context.payload")
        XCTAssertEqual(recorder.all, ["payload=acme logger=acme"], "the job sees it in its payload and its logger's metadata")
        XCTAssertEqual(try redis.failed(), 0)
    }

    func testErrorTrackerSeesEachFailedAttemptOnceAndTheJobIsStillRetriedThenDead() throws {
        let jid = try redis.client.enqueue(NewJob("Fail", args: ["boom"], retry: 1))
        let tracker = ErrorTracker()
        _ = try start([tracker])
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        let first = try XCTUnwrap(redis.payloads(zset: Keys.retry).first)
        XCTAssertEqual(first.retryCount, 0)
        XCTAssertEqual(first.errorClass, "Fail::Failure", "settled as without the middleware")
        XCTAssertEqual(first.errorMessage, "boom")
        try redis.command("ZADD", Keys.retry, 0, first.serialized())  // due now: the poller moves it back
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        let dead = try XCTUnwrap(redis.payloads(zset: Keys.dead).first)
        XCTAssertEqual(dead.jid, jid)
        XCTAssertEqual(dead.retryCount, 1)
        XCTAssertEqual(dead.errorClass, "Fail::Failure")
        XCTAssertEqual(try redis.failed(), 2)
        XCTAssertEqual(tracker.reports, ["1 \(jid) Workers.FailJob.Failure: boom", "2 \(jid) Workers.FailJob.Failure: boom"],
                       "one report per attempt, with the error's type and message")
    }

    func testMiddlewaresRunOuterToInnerInRegistrationOrder() throws {
        try redis.client.enqueue(NewJob("Record", args: ["job"]))
        _ = try start([Around(name: "A", recorder: recorder), Around(name: "B", recorder: recorder)])
        XCTAssertTrue(try eventually { try redis.processed() == 1 })
        XCTAssertEqual(recorder.all, ["A>", "B>", "job", "<B", "<A"])
    }

    func testMiddlewareThrowingBeforeNextFailsTheRunWithoutRunningTheJobAndItIsRetried() throws {
        let jid = try redis.client.enqueue(NewJob("Record", args: ["never"]))
        _ = try start([Refuse()])
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        let retry = try XCTUnwrap(redis.payloads(zset: Keys.retry).first)
        XCTAssertEqual(retry.jid, jid)
        XCTAssertEqual(retry.retryCount, 0)
        XCTAssertEqual(retry.errorMessage, "refused by the middleware")
        XCTAssertEqual(try redis.failed(), 1)
        XCTAssertEqual(recorder.all, [], "the job never ran")
    }

    func testRedeliveryFoundAppliedAndBadInputNeverEnterTheChain() throws {
        try BenchSchema.create(pool: pool)
        // A redelivery (interrupted once) whose first delivery committed: the ledger check acknowledges it unrun.
        var payload = try JobClient.payload(for: NewJob("ProbeInsert", args: ["again"]), createdAt: Clock.now(),
                                            enqueuedAt: Clock.now())
        payload.fields["interrupted_count"] = .int(1)
        let jid = try XCTUnwrap(payload.jid)
        _ = try JobLedger(pool: pool).runOnce(jid: jid, jobClass: "ProbeInsert", queue: "default") { connection in
            try connection.execute("INSERT INTO probe_rows (jid, note) VALUES ($1, 'first')", [jid])
        }
        try redis.command("LPUSH", "queue:default", payload.serialized())
        try redis.client.enqueue(NewJob("NoSuchJob"))  // bad input: dead before any middleware
        let counter = Around(name: "seen", recorder: recorder)
        _ = try start([counter], commitBatch: 1)  // one job per transaction: the runner's own ledger check
        XCTAssertTrue(try eventually { try redis.processed() == 2 })
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 1)
        XCTAssertEqual(recorder.all, [], "neither run entered the chain")
    }

    func testNextCalledTwiceRunsTheJobOnceAndTellsTheMiddleware() throws {
        try redis.client.enqueue(NewJob("Record", args: ["once"]))
        let twice = Twice()
        _ = try start([twice])
        XCTAssertTrue(try eventually { try redis.processed() == 1 })
        XCTAssertEqual(recorder.all, ["once"])
        XCTAssertEqual(twice.errors, [.nextCalledTwice(middleware: "WorkersTests.Twice")])
        XCTAssertEqual(try redis.failed(), 0, "the middleware caught the misuse: the run succeeded")
    }

    func testEnqueueMiddlewareCannotAddRuntimeOwnedFieldsOrOversizePayloadsOnAnyEnqueuePath() throws {
        let forging = JobClient(pool: redis.pool, middleware: [Forge(field: "retry_count", value: .int(9_223_372_036_854_775_807))])
        let job = NewJob("Record", args: ["x"])
        XCTAssertThrowsError(try forging.enqueue(job)) { XCTAssertEqual($0 as? EnqueueError, .runtimeField("retry_count")) }
        XCTAssertThrowsError(try forging.enqueueMany([job, job])) { XCTAssertEqual($0 as? EnqueueError, .runtimeField("retry_count")) }
        XCTAssertThrowsError(try forging.enqueue(job, in: 60)) { XCTAssertEqual($0 as? EnqueueError, .runtimeField("retry_count")) }
        XCTAssertThrowsError(try forging.enqueue(job, at: Clock.now() - 1)) { XCTAssertEqual($0 as? EnqueueError, .runtimeField("retry_count")) }
        XCTAssertThrowsError(try forging.enqueueUnique(job, policy: UniquePolicy(for: .seconds(60)))) {
            XCTAssertEqual($0 as? EnqueueError, .runtimeField("retry_count"))
        }
        XCTAssertThrowsError(try forging.createBatch(NewBatch(jobs: [job]))) {
            guard case BatchError.invalidJob(index: 0, .runtimeField("retry_count"))? = $0 as? BatchError else {
                return XCTFail("\($0)")
            }
        }
        let bloating = JobClient(pool: redis.pool, middleware: [Forge(field: "notes", value: .string(String(repeating: "x", count: 1_100_000)))])
        XCTAssertThrowsError(try bloating.enqueue(job)) {
            guard case EnqueueError.tooLarge? = $0 as? EnqueueError else { return XCTFail("\($0)") }
        }
        XCTAssertEqual(try redis.command("KEYS", "*").strings, [], "nothing was written")
    }
}

// MARK: - Jobs and middleware of these tests

/// Records the tenant the job sees in its payload and in its logger's metadata.
struct TenantJob: Job {
    struct Arguments: NoJobArguments { static let className = "Tenant" }
    let recorder: Recorder
    func perform(_ arguments: Arguments, context: JobContext) throws {
        let fromPayload = context.payload.fields["tenant"]?.stringValue ?? "-"
        let fromLogger = context.logger[metadataKey: "tenant"].map { "\($0)" } ?? "-"
        recorder.append("payload=\(fromPayload) logger=\(fromLogger)")
    }
}

/// Enqueue side: tags every job with its tenant.
struct TenantTag: EnqueueMiddleware {
    let tenant: String
    func prepare(_ job: inout NewJob) throws { job.extra["tenant"] = .string(tenant) }
}

/// Run side: reads the tag from the payload and puts it into the run's logger metadata.
struct TenantFromPayload: JobMiddleware {
    let seen: Recorder
    func run(_ context: JobContext, next: (JobContext) throws -> Void) throws {
        guard let tenant = context.payload.fields["tenant"]?.stringValue else { return try next(context) }
        seen.append(tenant)
        var context = context
        context[loggerMetadataKey: "tenant"] = .string(tenant)
        try next(context)
    }
}

/// An error tracker: reports every error a run throws (attempt, jid, type, message), then rethrows it.
final class ErrorTracker: JobMiddleware {
    private let lines = Mutex<[String]>([])
    var reports: [String] { lines.withLock { $0 } }
    func run(_ context: JobContext, next: (JobContext) throws -> Void) throws {
        do {
            try next(context)
        } catch {
            let line = "\(context.attempt) \(context.jid) \(String(reflecting: type(of: error))): \(error)"
            lines.withLock { $0.append(line) }
            throw error
        }
    }
}

/// Records entering and leaving around the rest of the chain.
struct Around: JobMiddleware {
    let name: String
    let recorder: Recorder
    func run(_ context: JobContext, next: (JobContext) throws -> Void) throws {
        recorder.append("\(name)>")
        defer { recorder.append("<\(name)") }
        try next(context)
    }
}

/// Refuses every run before the job.
struct Refuse: JobMiddleware {
    struct Refusal: Error, CustomStringConvertible { var description: String { "refused by the middleware" } }
    func run(_ context: JobContext, next: (JobContext) throws -> Void) throws { throw Refusal() }
}

/// Calls `next` twice, and keeps the error of the second call.
final class Twice: JobMiddleware {
    private let caught = Mutex<[JobMiddlewareError]>([])
    var errors: [JobMiddlewareError] { caught.withLock { $0 } }
    func run(_ context: JobContext, next: (JobContext) throws -> Void) throws {
        try next(context)
        do { try next(context) } catch let error as JobMiddlewareError { caught.withLock { $0.append(error) } }
    }
}

/// Sets an extra field on every job.
struct Forge: EnqueueMiddleware {
    let field: String
    let value: JSONValue
    func prepare(_ job: inout NewJob) throws { job.extra[field] = value }
}
