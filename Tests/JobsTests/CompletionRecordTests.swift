import Foundation
import WorkersOutbox
import WorkersQueue
import WorkersTestServices
import Workers
import WorkersClient
import XCTest

/// "What became of my job" (issue 53 point 5): a class that keeps a completion record (`JobOptions.completionRecord`)
/// is answered done / dead / cancelled by `WorkersClient.status(jid:)` without a ledger, from the record the settle
/// script writes (`completion:<jid>`, with its TTL); a class that does not keeps nothing; a hostile value at the key
/// is a clear unknown; and the public ledger lookup (`PostgresLedgerLookup`, Outbox) answers done for a ledger job.
/// Through a real in-process worker (`TestWorker`). Redis database 130.
final class CompletionRecordTests: JobsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "completion_record_test", connections: 4, redis: 130)
    }

    static let ttl: Duration = .seconds(3600)

    /// `ok` returns, `fail` fails for good, `wait` runs until it is cancelled (at most a minute), then throws.
    struct RecordedJob: Job {
        struct Arguments: SingleJobArgument { static let className = "RecordedProbe"; let value: String }
        static var options: JobOptions {
            var options = JobOptions(maxRetries: 0)
            options.completionRecord = .keep(ttl: CompletionRecordTests.ttl)
            return options
        }
        func perform(_ arguments: Arguments, context: JobContext) throws {
            switch arguments.value {
            case "fail": throw JobError.permanent("asked to fail")
            case "wait":
                for _ in 0..<3000 where !context.isCancelled { Thread.sleep(forTimeInterval: 0.02) }
                if context.isCancelled { throw CancelledProbe() }
            default: return
            }
        }
    }

    struct CancelledProbe: Error {}

    /// The same as `RecordedJob` without the option.
    struct UnrecordedJob: Job {
        struct Arguments: SingleJobArgument { static let className = "UnrecordedProbe"; let value: String }
        static var options: JobOptions { JobOptions(maxRetries: 0) }
        func perform(_ arguments: Arguments, context: JobContext) throws {
            if arguments.value == "fail" { throw JobError.permanent("asked to fail") }
        }
    }

    /// Writes its ledger row (`context.transaction`), no completion record.
    struct LedgerProbeJob: Job {
        struct Arguments: SingleJobArgument { static let className = "LedgerStatusProbe"; let value: String }
        static var options: JobOptions { JobOptions(usesLedger: true) }
        func perform(_ arguments: Arguments, context: JobContext) throws {
            _ = try context.transaction { _ in }
        }
    }

    /// Group commit (`JobOptions.groupCommit`): its records are written once its group's COMMIT succeeded.
    struct GroupedJob: Job {
        struct Arguments: SingleJobArgument { static let className = "GroupedRecordProbe"; let value: String }
        static var options: JobOptions {
            var options = JobOptions(groupCommit: true)
            options.completionRecord = .keep(ttl: CompletionRecordTests.ttl)
            return options
        }
        func perform(_ arguments: Arguments, context: JobContext) throws {
            _ = try context.transaction { _ in }
        }
    }

    func startWorker() throws -> WorkerProcess {
        var registry = JobRegistry()
        registry.register(RecordedJob())
        registry.register(GroupedJob())
        registry.register(UnrecordedJob())
        registry.register(LedgerProbeJob())
        return try TestWorker.start(redis: redis, registry: registry, database: fixture.jobDatabase, concurrency: 2)
    }

    func client() throws -> WorkersClient { try WorkersClient(url: redis.url, maxConnections: 2) }

    func recordExists(_ jid: String) throws -> Bool { try redis.int("EXISTS", JobCompletion.key(jid: jid)) == 1 }

    /// The record `status` answers with, or a failure naming what it answered instead.
    func completed(_ status: JobStatus, file: StaticString = #filePath, line: UInt = #line) -> JobCompletion? {
        guard case .completed(let record) = status.explanation else {
            XCTFail("not answered from a completion record: \(status.explanation)", file: file, line: line)
            return nil
        }
        return record
    }

    /// `jid`'s status once no process lists it as running any more (the busy hash lags the settlement by up to a
    /// heartbeat).
    func notRunning(_ client: WorkersClient, _ jid: String) async throws -> JobStatus {
        var status = try await client.status(jid: jid)
        for _ in 0..<600 {
            guard case .running = status.explanation else { break }
            try await Task.sleep(for: .milliseconds(50))
            status = try await client.status(jid: jid)
        }
        return status
    }

    func testDoneDeadAndCancelledAreReadableByJidWithoutALedger() async throws {
        let worker = try startWorker()
        defer { worker.shutdown() }
        let client = try client()
        defer { client.shutdown() }

        // Done.
        let done = try await client.enqueue(NewJob("RecordedProbe", args: ["ok"]))
        XCTAssertTrue(try eventually { try recordExists(done) }, "no record after the run")
        let doneStatus = try await notRunning(client, done)
        let doneRecord = completed(doneStatus)
        XCTAssertEqual(doneRecord?.state, .done)
        XCTAssertEqual(doneRecord?.className, "RecordedProbe")
        XCTAssertEqual(doneRecord?.queue, "default")
        XCTAssertEqual(doneRecord?.attempts, 1)
        XCTAssertEqual(doneStatus.explanation.reason, "done")
        XCTAssertEqual(doneStatus.attempts, 1)
        XCTAssertNil(doneStatus.state)
        XCTAssertTrue(doneStatus.explanation.description.hasPrefix("done: RecordedProbe on queue default settled at "),
                      doneStatus.explanation.description)
        let ttl = try redis.int("TTL", JobCompletion.key(jid: done))
        XCTAssertTrue((3000...3600).contains(ttl), "the class's TTL, 3600 s: \(ttl)")
        let stored = try XCTUnwrap(try redis.command("GET", JobCompletion.key(jid: done)).string)
        XCTAssertFalse(stored.contains("\"args\"") || stored.contains("\"ok\""), "no arguments in the record: \(stored)")

        // Dead: the dead entry gone (trimmed, deleted), the record still answers.
        let dead = try await client.enqueue(NewJob("RecordedProbe", args: ["fail"]))
        XCTAssertTrue(try eventually { try recordExists(dead) }, "no record after the failure")
        try redis.command("DEL", Keys.dead)
        let deadStatus = try await notRunning(client, dead)
        XCTAssertEqual(completed(deadStatus)?.state, .dead)
        XCTAssertEqual(deadStatus.explanation.reason, "dead")
        let deadStored = try XCTUnwrap(try redis.command("GET", JobCompletion.key(jid: dead)).string)
        XCTAssertFalse(deadStored.contains("asked to fail"), "no error text in the record: \(deadStored)")

        // Cancelled while running: the worker settles it as cancelled.
        let cancelled = try await client.enqueue(NewJob("RecordedProbe", args: ["wait"]))
        var running = false
        for _ in 0..<600 where !running {
            if case .running = try await client.status(jid: cancelled).explanation { running = true } else {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        XCTAssertTrue(running, "the waiting probe never ran")
        _ = try await client.cancel(jid: cancelled)
        XCTAssertTrue(try eventually { try recordExists(cancelled) }, "no record after the cancel")
        try redis.command("DEL", Keys.dead)
        let cancelledStatus = try await notRunning(client, cancelled)
        XCTAssertEqual(completed(cancelledStatus)?.state, .cancelled)
        XCTAssertEqual(cancelledStatus.explanation.reason, "cancelled")
        XCTAssertEqual(completed(cancelledStatus)?.attempts, 1)
    }

    func testAClassThatDoesNotOptInLeavesNoRecord() async throws {
        let worker = try startWorker()
        defer { worker.shutdown() }
        let client = try client()
        defer { client.shutdown() }

        let ok = try await client.enqueue(NewJob("UnrecordedProbe", args: ["ok"]))
        let fail = try await client.enqueue(NewJob("UnrecordedProbe", args: ["fail"]))
        XCTAssertTrue(eventually { worker.processedCount >= 2 }, "the two probes did not run")
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        XCTAssertEqual(try redis.command("KEYS", "completion:*").array?.count, 0, "no completion key written")
        try redis.command("DEL", Keys.dead)
        let okStatus = try await client.status(jid: ok)
        XCTAssertEqual(okStatus.explanation, .unknown(jid: ok, searchIncomplete: false))
        XCTAssertTrue(okStatus.explanation.description.contains("no completion record"), okStatus.explanation.description)
        let failStatus = try await client.status(jid: fail)
        XCTAssertEqual(failStatus.explanation, .unknown(jid: fail, searchIncomplete: false))
    }

    func testAHostileValueAtTheRecordIsAClearUnknownNeverATrap() async throws {
        let client = try client()
        defer { client.shutdown() }
        let cases: [(jid: String, write: [any RedisArgument], problem: String)] = [
            ("c00000000000000000000001", ["HSET", JobCompletion.key(jid: "c00000000000000000000001"), "state", "done"], "not a string"),
            ("c00000000000000000000002", ["SET", JobCompletion.key(jid: "c00000000000000000000002"), "\u{1}garbage{"], "not a JSON object"),
            ("c00000000000000000000003", ["SET", JobCompletion.key(jid: "c00000000000000000000003"), #"{"state":"exploded","class":"X","finished_at":1}"#], "no known state"),
            ("c00000000000000000000004", ["SET", JobCompletion.key(jid: "c00000000000000000000004"), #"{"state":"done","class":"X","finished_at":1e300}"#], "finish time"),
            ("c00000000000000000000005", ["SET", JobCompletion.key(jid: "c00000000000000000000005"), String(repeating: "x", count: 100_000)], "more than a record's"),
        ]
        for entry in cases {
            try redis.pool.withConnection { try $0.send(entry.write).checked() }
            let status = try await client.status(jid: entry.jid)
            guard case .unreadableRecord(entry.jid, let problem) = status.explanation else {
                XCTFail("\(entry.jid): \(status.explanation)")
                continue
            }
            XCTAssertTrue(problem.contains(entry.problem), "\(entry.jid): \(problem)")
            XCTAssertTrue(status.explanation.isUnknown)
            XCTAssertEqual(status.explanation.reason, "unknown")
            XCTAssertFalse(status.explanation.description.contains("garbage"), "never the value")
        }
        // A sane record with absurd numbers is bounded, and the ledger still answers past an unreadable one.
        try redis.command("SET", JobCompletion.key(jid: "c00000000000000000000006"),
                          #"{"state":"dead","class":"X","queue":"q","finished_at":100,"attempts":1e308}"#)
        let bounded = try await client.status(jid: "c00000000000000000000006")
        XCTAssertEqual(completed(bounded)?.attempts, 0, "a non-integer count reads as 0")
        let ledger = PostgresLedgerLookup(pool: pool)
        let unreadable = try await client.status(jid: "c00000000000000000000002", ledger: ledger)
        guard case .unreadableRecord = unreadable.explanation else { return XCTFail("\(unreadable.explanation)") }

        // TTLs a class asks for are clamped: a minute to 30 days.
        XCTAssertEqual(JobCompletion.ttlSeconds(.seconds(0)), 60)
        XCTAssertEqual(JobCompletion.ttlSeconds(.seconds(-5)), 60)
        XCTAssertEqual(JobCompletion.ttlSeconds(.seconds(Int64.max)), 30 * 86_400)
        XCTAssertEqual(JobCompletion.ttlSeconds(.seconds(86_400)), 86_400)
    }

    func testGroupCommittedJobsLeaveTheirRecords() async throws {
        let client = try client()
        defer { client.shutdown() }
        // Waiting before the worker starts, so that its pool threads run them in groups.
        var jids: [String] = []
        for index in 0..<40 { jids.append(try await client.enqueue(NewJob("GroupedRecordProbe", args: [.string("\(index)")]))) }
        let worker = try startWorker()
        defer { worker.shutdown() }
        XCTAssertTrue(eventually { worker.processedCount >= 40 }, "the grouped probes did not run")
        let recorded = try eventually { try jids.allSatisfy { try recordExists($0) } }
        let missing = try jids.filter { try !recordExists($0) }.count
        XCTAssertTrue(recorded, "records missing: \(missing) of 40")
        let status = try await notRunning(client, jids[17])
        XCTAssertEqual(completed(status)?.state, .done)
        XCTAssertEqual(completed(status)?.className, "GroupedRecordProbe")
    }

    /// `workerctl jobs explain` and `jobs show` answer from the record too; an unreadable one exits 1 with its problem.
    func testWorkerctlExplainsAFinishedJobFromItsRecord() throws {
        let jid = "d00000000000000000000001"
        let record = JobCompletion(state: .cancelled, className: "RecordedProbe", queue: "default",
                                   finishedAt: Date(timeIntervalSince1970: 1_800_000_000), attempts: 2)
        try redis.command("SET", JobCompletion.key(jid: jid), record.json, "EX", 600)
        let workerctl = WorkerctlRunner(redisURL: redis.url)
        let noLedger = ["DATABASE_URL": ""]
        let explain = try workerctl.run(["jobs", "explain", jid, "--json"], environment: noLedger)
        XCTAssertEqual(explain.status, 0, explain.stderr)
        XCTAssertEqual(explain.object?["reason"]?.stringValue, "cancelled", explain.stdout)
        XCTAssertEqual(explain.object?["details"]?.objectValue?["attempts"]?.intValue, 2, explain.stdout)
        let show = try workerctl.run(["jobs", "show", jid], environment: noLedger)
        XCTAssertEqual(show.status, 0, show.stderr)
        XCTAssertTrue(show.stdout.contains("cancelled: RecordedProbe on queue default settled at 2027-01-15T08:00:00Z after 2 runs"), show.stdout)

        try redis.command("DEL", JobCompletion.key(jid: jid))
        try redis.command("RPUSH", JobCompletion.key(jid: jid), "x")
        let hostile = try workerctl.run(["jobs", "explain", jid], environment: noLedger)
        XCTAssertEqual(hostile.status, 1, hostile.stderr)
        XCTAssertTrue(hostile.stdout.contains("the completion record is not a string"), hostile.stdout + hostile.stderr)
    }

    func testThePublicLedgerLookupAnswersDoneForALedgerJob() async throws {
        let worker = try startWorker()
        defer { worker.shutdown() }
        let client = try client()
        defer { client.shutdown() }

        let jid = try await client.enqueue(NewJob("LedgerStatusProbe", args: ["ok"]))
        XCTAssertTrue(eventually { worker.processedCount >= 1 }, "the ledger probe did not run")
        var status = try await client.status(jid: jid)
        XCTAssertEqual(status.explanation, .unknown(jid: jid, searchIncomplete: false), "no record, no ledger given")
        for ledger in [PostgresLedgerLookup(pool: pool), PostgresLedgerLookup(url: fixture.database.url)] {
            status = try await client.status(jid: jid, ledger: ledger)
            guard case .done(let finishedAt, "LedgerStatusProbe", "default") = status.explanation else {
                XCTFail("\(status.explanation)")
                continue
            }
            XCTAssertNotNil(finishedAt)
        }
        // A URL it cannot reach: a typed error, the password redacted.
        do {
            _ = try PostgresLedgerLookup(url: "postgres://probe:s3cret@127.0.0.1:1/none").row(jid: jid)
            XCTFail("no error")
        } catch let error as LedgerLookupError {
            XCTAssertFalse(error.description.contains("s3cret"), error.description)
        }
    }
}
