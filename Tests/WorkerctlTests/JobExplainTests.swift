import Foundation
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import XCTest

/// "Why isn't my job running?" (issue 36 point 1; `Sources/Queue/Admin/JobExplain.swift`, `workerctl jobs explain`):
/// each reason with its state built for real — the real client, unique enqueue, batch API, queue pause, real
/// `workerctl worker` processes (a failing unknown class for retry/dead, the limiter probe `LimitProbeMutex` as a
/// long-running job and a limiter's slot holder), and a ledger row from a job run through a worker with a database.
/// Redis databases 29 (single states), 30 (a queue of 5,000), 32 (ledger).
final class JobExplainTests: XCTestCase {
    func workerArguments(queues: [String] = ["default"], concurrency: Int = 2, database: Bool = false) -> [String] {
        ["worker", "--bench-jobs", "--concurrency", "\(concurrency)"] + (database ? [] : ["--no-database"])
            + queues.flatMap { ["--queue", $0] }
            + ["--heartbeat-interval", "0.3", "--heartbeat-ttl", "2", "--orphan-sweep-interval", "0.5", "--poll-interval", "0.1",
               "--unknown-class-grace", "0"]
    }

    func startWorker(_ redis: TestRedis, queues: [String] = ["default"], concurrency: Int = 2,
                     environment: [String: String] = [:]) throws -> ChildProcess {
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: workerArguments(queues: queues, concurrency: concurrency,
                                                                 database: environment["DATABASE_URL"] != nil),
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "warning"].merging(environment) { $1 })
        XCTAssertTrue(try eventually { try redis.int("SCARD", Keys.processes) >= 1 }, worker.stderr)
        return worker
    }

    func stop(_ worker: ChildProcess) {
        worker.signal(SIGTERM)
        worker.wait()
    }

    func explain(_ redis: TestRedis, _ jid: String, aheadBound: Int = 10_000) throws -> JobExplanation {
        let connection = try redis.connection()
        defer { connection.close() }
        return try JobExplain(connection: connection, aheadBound: aheadBound).explain(jid: jid)
    }

    // MARK: without a worker

    /// Scheduled for later, a batch callback waiting for its jobs, a unique duplicate, no live process, unknown.
    func testStatesWithoutAWorker() throws {
        let redis = try TestRedis(database: 29)
        try redis.flush()
        defer { try? redis.flush() }
        let client = redis.client

        let later = Date().addingTimeInterval(3600)
        let scheduled = try client.enqueue(NewJob("NoSuchJob"), at: later)
        guard case .scheduled(let at, let queue) = try explain(redis, scheduled) else { return XCTFail("\(try explain(redis, scheduled))") }
        XCTAssertEqual(at.timeIntervalSince1970, later.timeIntervalSince1970, accuracy: 0.01)
        XCTAssertEqual(queue, "default")

        let batch = try client.createBatch(NewBatch(jobs: [NewJob("NoSuchJob", queue: "batch")],
                                                    onComplete: BatchCallback("BatchDone")))
        XCTAssertEqual(try explain(redis, try XCTUnwrap(batch.completeJid)),
                       .batchCallbackWaiting(bid: batch.bid, event: "complete", pending: 1))

        // The real unique enqueue takes the lock; a client that does not check pushes the same job again.
        let policy = UniquePolicy(for: .seconds(3600))
        let owner = try client.enqueueUnique(NewJob("UniqueThing", args: [7], queue: "uniq"), policy: policy).jid
        let duplicate = try client.enqueue(NewJob("UniqueThing", args: [7], queue: "uniq", extra: ["unique_for": 3600]))
        guard case .duplicateOfUnique(let lock, let ownerJid) = try explain(redis, duplicate) else {
            return XCTFail("\(try explain(redis, duplicate))")
        }
        XCTAssertEqual(ownerJid, owner)
        XCTAssertTrue(lock.hasPrefix("unique:"), lock)
        // The owner itself is not a duplicate: with no worker at all, no live process serves its queue.
        XCTAssertEqual(try explain(redis, owner), .noLiveProcess(queue: "uniq", processes: 0))

        XCTAssertEqual(try explain(redis, "0123456789abcdef01234567"),
                       .unknown(jid: "0123456789abcdef01234567", searchIncomplete: false))
        // The command line says the same and exits 1 for an unknown jid.
        let cli = try WorkerctlRunner(redisURL: redis.url).run(["jobs", "explain", scheduled])
        XCTAssertEqual(cli.status, 0, cli.stderr)
        XCTAssertTrue(cli.stdout.hasPrefix("scheduled for later: runs at "), cli.stdout)
        let json = try WorkerctlRunner(redisURL: redis.url).run(["jobs", "explain", duplicate, "--json"])
        XCTAssertEqual(json.object?["reason"]?.stringValue, "duplicate", json.stdout + json.stderr)
        XCTAssertEqual(json.object?["details"]?.objectValue?["owner_jid"]?.stringValue, owner, json.stdout)
        let unknown = try WorkerctlRunner(redisURL: redis.url).run(["jobs", "explain", "0123456789abcdef01234567"],
                                                                  environment: ["DATABASE_URL": ""])
        XCTAssertEqual(unknown.status, 1, unknown.stdout + unknown.stderr)
        XCTAssertTrue(unknown.stdout.hasPrefix("unknown jid 0123456789abcdef01234567"), unknown.stdout)
    }

    /// A quiet process fetches nothing: with only a quiet process listing the queue, no live process serves it
    /// (mutation sample 2026-12-07, survivor 5). A job a limiter refused once is over the limit, not merely scheduled
    /// (survivor E4): `overrated` 1 is the first reschedule, 0 none.
    func testAQuietProcessServesNothingAndAFirstLimiterRescheduleIsOverLimit() throws {
        let redis = try TestRedis(database: 29)
        try redis.flush()
        defer { try? redis.flush() }
        let identity = "quiet-host:77:0123456789ab"
        let info: JSONObject = ["hostname": "quiet-host", "pid": 77, "queues": ["hushed"], "identity": .string(identity),
                                "classes": ["Noop"], "classes_truncated": false]
        try redis.command("SADD", Keys.processes, identity)
        try redis.command("HSET", Keys.process(identity), "info", JSONValue.object(info).serialized(), "busy", 0,
                          "beat", Clock.now(), "quiet", "true")
        let waiting = try redis.client.enqueue(NewJob("Noop", queue: "hushed"))
        XCTAssertEqual(try explain(redis, waiting), .noLiveProcess(queue: "hushed", processes: 1))
        try redis.command("HSET", Keys.process(identity), "quiet", "false")
        guard case .behind(let queue, _, _, _) = try explain(redis, waiting) else { return XCTFail("\(try explain(redis, waiting))") }
        XCTAssertEqual(queue, "hushed", "the same process, no longer quiet, serves it")

        let at = Clock.now() + 600
        for (overrated, jid) in [(1, "overrated0000000000000001"), (0, "overrated0000000000000000")] {
            var payload = try JobClient.payload(for: NewJob("Noop"), createdAt: Clock.now(), enqueuedAt: Clock.now())
            payload.fields["jid"] = .string(jid)
            if overrated > 0 { payload.fields["overrated"] = .int(Int64(overrated)) }
            try redis.command("ZADD", Keys.schedule, at, payload.serialized())
        }
        guard case .overLimit(_, let reschedules, _, _) = try explain(redis, "overrated0000000000000001") else {
            return XCTFail("\(try explain(redis, "overrated0000000000000001"))")
        }
        XCTAssertEqual(reschedules, 1)
        guard case .scheduled = try explain(redis, "overrated0000000000000000") else {
            return XCTFail("\(try explain(redis, "overrated0000000000000000"))")
        }
    }

    // MARK: with a real worker

    /// Running (where, since when), no live process for a queue, a retry (attempt n of m), dead (why), over a
    /// limiter (which, who holds it), and a paused queue — which comes before the line the job stands in.
    func testStatesWithARealWorker() throws {
        let redis = try TestRedis(database: 29)
        try redis.flush()
        defer { try? redis.flush() }
        let client = redis.client
        // `held` is served by the worker but paused from the start (a fetch already waiting on a queue when it is
        // paused may still take one job).
        XCTAssertTrue(try QueueAdmin.pause(redis.connection(), name: "held"))
        let worker = try startWorker(redis, queues: ["default", "held"], concurrency: 3)
        defer { stop(worker) }
        let identity = try XCTUnwrap(try redis.command("SMEMBERS", Keys.processes).strings.first)

        // A long job: the limiter probe holds its `probe-mutex:r` slot for 10 s.
        let holder = try client.enqueue(NewJob("LimitProbeMutex", args: [10_000, "r"]))
        XCTAssertTrue(try eventually { try redis.int("GET", "probe:limits:running:probe-mutex-r") == 1 }, worker.stderr)
        XCTAssertTrue(try eventually {
            if case .running = try explain(redis, holder) { return true }
            return false
        }, "the heartbeat writes the work hash")
        guard case .running(let job) = try explain(redis, holder) else { return XCTFail("\(try explain(redis, holder))") }
        XCTAssertEqual(job.jid, holder)
        XCTAssertEqual(job.identity, identity)
        XCTAssertLessThan(abs(job.since.timeIntervalSinceNow), 30)

        // Over the limiter: a second job of the same key is refused and rescheduled; explain names the full limiter
        // and the running job that holds its slot.
        let waiting = try client.enqueue(NewJob("LimitProbeMutex", args: [0, "r"]))
        // (Rescheduled 1.5 s later each time: read it while it sits in `schedule`.)
        var overLimit: JobExplanation?
        XCTAssertTrue(try eventually {
            let answer = try explain(redis, waiting)
            if case .overLimit = answer { overLimit = answer }
            return overLimit != nil
        }, worker.stderr)
        guard case .overLimit(let nextTry, let reschedules, let full, let holders)? = overLimit else { return XCTFail("\(String(describing: overLimit))") }
        XCTAssertGreaterThanOrEqual(reschedules, 1)
        XCTAssertLessThan(abs(nextTry.timeIntervalSinceNow), 10, "rescheduled 1.5 s ahead")
        XCTAssertEqual(full.map { "\($0.name):\($0.key) \($0.used)/\($0.max)" }, ["probe-mutex:r 1/1"])
        XCTAssertEqual(holders.map(\.jid), [holder])

        // No live process serves queue `nobody` (the worker serves `default`).
        let orphan = try client.enqueue(NewJob("NoSuchJob", queue: "nobody"))
        XCTAssertEqual(try explain(redis, orphan), .noLiveProcess(queue: "nobody", processes: 1))

        // A real failure with `retry: 3`: a limiter probe past its reschedule cap fails as OverLimit (the normal
        // failure path) while the holder runs: retry set, the next run is attempt 2 of 4.
        var capped = NewJob("LimitProbeMutex", args: [0, "r"], retry: .int(3))
        capped.runtimeFields["overrated"] = 5
        let failing = try client.enqueue(capped)
        XCTAssertTrue(try eventually { try redis.payloads(zset: Keys.retry).contains { $0.jid == failing } }, worker.stderr)
        guard case .retryWaiting(let at, let attempt, let maxAttempts, let errorClass) = try explain(redis, failing) else {
            return XCTFail("\(try explain(redis, failing))")
        }
        XCTAssertEqual(attempt, 2)
        XCTAssertEqual(maxAttempts, 4)
        XCTAssertEqual(errorClass.map { $0.hasSuffix("OverLimit") }, true, "\(String(describing: errorClass))")
        XCTAssertGreaterThan(at.timeIntervalSinceNow, 0)

        // An unregistered class no live process knows, with a grace of 0: straight to dead, with the error stored.
        let doomed = try client.enqueue(NewJob("NoSuchJob"))
        XCTAssertTrue(try eventually { try redis.payloads(zset: Keys.dead).contains { $0.jid == doomed } }, worker.stderr)
        let stored = try XCTUnwrap(try redis.payloads(zset: Keys.dead).first { $0.jid == doomed })
        guard case .dead(_, let deadClass, let deadMessage) = try explain(redis, doomed) else {
            return XCTFail("\(try explain(redis, doomed))")
        }
        XCTAssertEqual(deadClass, stored.errorClass)
        XCTAssertEqual(deadMessage, stored.errorMessage)
        XCTAssertNotNil(deadClass)
        let deadLine = try WorkerctlRunner(redisURL: redis.url).run(["jobs", "explain", doomed])
        XCTAssertTrue(deadLine.stdout.hasPrefix("dead since "), deadLine.stdout)
        XCTAssertTrue(deadLine.stdout.contains(stored.errorClass ?? "?"), deadLine.stdout)

        // Paused: the queue's jobs wait for the resume, whatever their place in the line (it is first in line).
        let paused = try client.enqueue(NewJob("NoSuchJob", queue: "held"))
        XCTAssertEqual(try explain(redis, paused), .queuePaused(queue: "held"))
        let show = try WorkerctlRunner(redisURL: redis.url).run(["jobs", "show", paused], environment: ["DATABASE_URL": ""])
        XCTAssertEqual(show.status, 0, show.stderr)
        XCTAssertTrue(show.stdout.contains("explain      queue held is paused"), show.stdout)
        XCTAssertTrue(show.stdout.contains("attempts     0"), show.stdout)
        _ = try redis.command("DEL", "limit:probe-mutex:r")
    }

    /// A queue of 5,000 jobs with the jid at the far end: with a bound of 1,000 the answer is "more than 1000",
    /// found with one LRANGE of the head and one bounded LPOS from the tail (counted in `INFO commandstats`), never
    /// a walk of the list; with a larger bound the exact count, equal to the job's place in the list.
    func testBehindNJobsIsABoundedSearch() throws {
        let redis = try TestRedis(database: 184)
        try redis.flush()
        defer { try? redis.flush() }
        let client = redis.client
        // A live worker serves `line` but its one thread is busy with a long job: the line stands still.
        let worker = try startWorker(redis, queues: ["line"], concurrency: 1)
        defer { stop(worker) }
        _ = try client.enqueue(NewJob("LimitProbeMutex", args: [15_000, "line"], queue: "line"))
        XCTAssertTrue(try eventually { try redis.int("GET", "probe:limits:running:probe-mutex-line") == 1 }, worker.stderr)
        var index = 0
        while index < 5_000 {
            _ = try client.enqueueMany((0..<500).map { NewJob("Noop", args: [.int(Int64(index + $0))], queue: "line") })
            index += 500
        }
        let target = try client.enqueue(NewJob("Noop", args: ["target"], queue: "line"))
        Thread.sleep(forTimeInterval: 0.5)  // let the fetcher fill its prefetch buffer: the queue is still from here on

        let connection = try redis.connection()
        defer { connection.close() }
        func calls(_ command: String) throws -> Int {
            let stats = try connection.command("INFO", "commandstats").string ?? ""
            return stats.firstMatch(of: try Regex("cmdstat_\(command):calls=([0-9]+)"))
                .flatMap { Int($0.output[1].substring ?? "") } ?? 0
        }
        let before = (lrange: try calls("lrange"), lpos: try calls("lpos"))
        let bounded = try JobExplain(connection: connection, aheadBound: 1000).explain(jid: target)
        guard case .behind(let queue, let ahead, let exact, _) = bounded else { return XCTFail("\(bounded)") }
        XCTAssertEqual(queue, "line")
        XCTAssertEqual(ahead, 1000)
        XCTAssertFalse(exact, "past the bound the answer is 'more than 1000'")
        XCTAssertTrue(bounded.description.hasPrefix("behind more than 1000 jobs in queue line"), bounded.description)
        XCTAssertEqual(try calls("lpos") - before.lpos, 1, "one LPOS")
        XCTAssertEqual(try calls("lrange") - before.lrange, 1, "the jid was found in the first chunk of the head; no walk")

        let exactAnswer = try JobExplain(connection: connection, aheadBound: 10_000).explain(jid: target)
        let length = Int(try redis.int("LLEN", "queue:line"))
        let position = Int(try connection.command("LPOS", "queue:line", try XCTUnwrap(try redis.command("LINDEX", "queue:line", 0).bytes)).integer ?? -1)
        XCTAssertEqual(position, 0, "the target is the newest")
        guard case .behind(_, let all, true, _) = exactAnswer else { return XCTFail("\(exactAnswer)") }
        XCTAssertEqual(all, length - 1)
        XCTAssertGreaterThan(all, 4_000)

        // The worker serving `line` lists its registered classes in its process info: a class it does not register
        // is named as the reason, before its place in the line (it would go to dead when fetched).
        let unknownClass = try client.enqueue(NewJob("NoSuchJob", args: ["x"], queue: "line"))
        XCTAssertEqual(try JobExplain(connection: connection).explain(jid: unknownClass),
                       .classNotRegistered(queue: "line", className: "NoSuchJob", processes: 1))
    }

    // MARK: the ledger

    /// A job run through a worker with a database is gone from Redis: explain finds its `job_ledger` row (done);
    /// `jobs show` prints it too. Without a database the same jid is unknown.
    func testDoneComesFromTheLedger() throws {
        let database = try PostgresTestDatabase.create(prefix: "explain_test")
        defer { database.drop() }
        let redis = try TestRedis(database: 187)
        try redis.flush()
        defer { try? redis.flush() }
        let migrate = try WorkerctlRunner(redisURL: redis.url).run(["migrate", "--bench-tables"], environment: ["DATABASE_URL": database.url])
        XCTAssertEqual(migrate.status, 0, migrate.stderr)
        let worker = try startWorker(redis, environment: ["DATABASE_URL": database.url])
        let jid = try redis.client.enqueue(NewJob("ProbeInsert", args: ["explained"]))
        XCTAssertTrue(try eventually { try redis.processed() == 1 }, worker.stderr)
        stop(worker)

        let explained = try WorkerctlRunner(redisURL: redis.url).run(["jobs", "explain", jid, "--json", "--database-url", database.url])
        XCTAssertEqual(explained.status, 0, explained.stderr)
        XCTAssertEqual(explained.object?["reason"]?.stringValue, "done", explained.stdout)
        XCTAssertEqual(explained.object?["details"]?.objectValue?["class"]?.stringValue, "ProbeInsert", explained.stdout)
        XCTAssertNotNil(explained.object?["details"]?.objectValue?["finished_at"]?.stringValue, explained.stdout)
        let show = try WorkerctlRunner(redisURL: redis.url).run(["jobs", "show", jid], environment: ["DATABASE_URL": database.url])
        XCTAssertEqual(show.status, 0, show.stderr)
        XCTAssertTrue(show.stdout.contains("explain      done: ProbeInsert on queue default finished at "), show.stdout)
        let without = try WorkerctlRunner(redisURL: redis.url).run(["jobs", "explain", jid], environment: ["DATABASE_URL": ""])
        XCTAssertEqual(without.status, 1, without.stdout)
    }
}
