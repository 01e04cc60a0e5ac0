import Foundation
import Logging
import Queue
import Storage
import TestSupport
import Workers
import XCTest

/// A group-commit job for these tests: inserts a row stamped with its transaction id, so a test can
/// see which jobs shared a COMMIT. `fail` throws after its insert (its savepoint must undo it);
/// `poison` on its first attempt breaks a deferred foreign key, so COMMIT itself fails.
struct GroupProbeJob: Job {
    static let className = "GroupProbe"
    static let options = JobOptions(maxRetries: 3, backoff: .schedule([0]), timeout: 30, groupCommit: true)

    func perform(_ arguments: SingleArgument<String>, context: JobContext) throws {
        try context.transaction { connection in
            try connection.execute("INSERT INTO group_probe (jid, note, txid) VALUES ($1, $2, txid_current())",
                                   [context.jid, arguments.value])
            if arguments.value == "fail" { throw JobError.permanent("asked to fail") }
            if arguments.value == "poison", context.attempt == 1 {
                try connection.execute("INSERT INTO group_probe_child (parent) VALUES ('missing')")
            }
        }
    }
}

/// Group commit (`JobOptions.groupCommit`): several jobs in one transaction, each in its own savepoint,
/// acknowledged only after the shared COMMIT — against real Redis and PostgreSQL.
final class GroupCommitTests: XCTestCase {
    var redis: TestRedis!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var processes: [WorkerProcess] = []

    override func setUpWithError() throws {
        redis = try TestRedis(database: 9)
        database = try PostgresTestDatabase.create(prefix: "group_commit_test")
        pool = PostgresPool(url: database.url, maxConnections: 8)
        _ = try Migrator.bundled().migrate(pool: pool)
        try pool.withConnection { connection in
            try connection.executeScript("""
                CREATE TABLE group_probe (jid text NOT NULL, note text NOT NULL, txid bigint NOT NULL);
                CREATE TABLE group_probe_parent (id text PRIMARY KEY);
                CREATE TABLE group_probe_child (
                    parent text REFERENCES group_probe_parent (id) DEFERRABLE INITIALLY DEFERRED);
                """)
        }
    }

    override func tearDown() {
        for process in processes { process.shutdown() }
        pool?.shutdown()
        database?.drop()
    }

    /// A worker whose buffer fills at once (a large prefetch wait) and whose groups end only when the
    /// buffer is empty or `commitBatch` jobs are in (the window is far longer than any run here).
    func start(concurrency: Int, commitBatch: Int = 50) throws -> WorkerProcess {
        var configuration = WorkerHarness(redis: redis).configuration(concurrency: concurrency)
        configuration.prefetchWait = 10
        configuration.commitBatch = commitBatch
        configuration.commitWindow = 30
        var registry = JobRegistry.builtins()
        registry.register(GroupProbeJob())
        var logger = Logger(label: "group-commit-test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: configuration, registry: registry,
                                        database: JobDatabase(pool: pool), logger: logger)
        try process.start()
        processes.append(process)
        return process
    }

    func enqueue(_ notes: [String]) throws -> [String] {
        try redis.client.enqueueMany(notes.map { NewJob("GroupProbe", args: [.string($0)]) })
    }

    /// Rows per jid, and the number of distinct transactions they committed in.
    func committed() throws -> (perJid: [String: Int], transactions: Int, ledger: Int) {
        try pool.withConnection { connection in
            var perJid: [String: Int] = [:]
            for row in try connection.query("SELECT jid, count(*)::bigint AS n FROM group_probe GROUP BY jid") {
                perJid[try row.string("jid")] = Int(try row.int64("n"))
            }
            let transactions = try connection.queryFirst("SELECT count(DISTINCT txid)::bigint AS n FROM group_probe")
            let ledger = try connection.queryFirst("SELECT count(*)::bigint AS n FROM job_ledger WHERE job_class = 'GroupProbe'")
            return (perJid, Int(try transactions!.int64("n")), Int(try ledger!.int64("n")))
        }
    }

    func assertNothingLeftInRedis(file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty && redis.int("ZCARD", Keys.retry) == 0 },
                      "jobs left in flight or in retry", file: file, line: line)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0, file: file, line: line)
    }

    func testJobsShareCommitsAndEachAppliesOnceEvenWhenDeliveredTwiceInOneGroup() throws {
        var jids = try enqueue((0..<400).map { "ok\($0)" })
        // The same payload twice, next to each other: both deliveries land in one shared transaction.
        let payload = try JobClient.payload(for: NewJob("GroupProbe", args: ["twice"]), createdAt: Clock.now(), enqueuedAt: Clock.now())
        try redis.command("RPUSH", "queue:default", payload.serialized(), payload.serialized())
        jids.append(try XCTUnwrap(payload.jid))
        _ = try start(concurrency: 2)
        XCTAssertTrue(try eventually { try redis.processed() == 402 })
        let result = try committed()
        XCTAssertEqual(Set(result.perJid.keys), Set(jids))
        XCTAssertEqual(result.perJid.values.filter { $0 != 1 }.count, 0, "a job applied more than once")
        XCTAssertEqual(result.ledger, 401)
        XCTAssertLessThanOrEqual(result.transactions, 401 / 2, "jobs did not share commits")
        XCTAssertEqual(try redis.failed(), 0)
        try assertNothingLeftInRedis()
    }

    func testCommitBatchOfOneCommitsEveryJobAlone() throws {
        let jids = try enqueue((0..<60).map { "alone\($0)" })
        _ = try start(concurrency: 2, commitBatch: 1)
        XCTAssertTrue(try eventually { try redis.processed() == 60 })
        let result = try committed()
        XCTAssertEqual(Set(result.perJid.keys), Set(jids))
        XCTAssertEqual(result.transactions, 60)
        try assertNothingLeftInRedis()
    }

    func testAFailingJobUndoesOnlyItsOwnWorkAndTheRestOfItsGroupCommits() throws {
        let notes = (0..<300).map { $0 % 10 == 3 ? "fail" : "ok\($0)" }
        let jids = try enqueue(notes)
        _ = try start(concurrency: 2)
        XCTAssertTrue(try eventually { try redis.processed() == 300 })
        let failing = Set(zip(jids, notes).filter { $0.1 == "fail" }.map(\.0))
        let result = try committed()
        XCTAssertEqual(Set(result.perJid.keys), Set(jids).subtracting(failing))
        XCTAssertEqual(result.perJid.values.filter { $0 != 1 }.count, 0)
        XCTAssertEqual(result.ledger, 270, "a failed job's ledger row must be rolled back with its savepoint")
        XCTAssertLessThanOrEqual(result.transactions, 270 / 2, "jobs did not share commits")
        let dead = try redis.command("ZRANGE", Keys.dead, 0, -1).strings
        XCTAssertEqual(dead.count, 30)
        let deadJids = Set(try dead.map { try XCTUnwrap(JobPayload(parsing: Array($0.utf8)).jid) })
        XCTAssertEqual(deadJids, failing)
        XCTAssertTrue(dead.allSatisfy { $0.contains("asked to fail") })
        try assertNothingLeftInRedis()
    }

    func testAFailedCommitRetriesEveryJobOfItsGroupAndEachStillAppliesOnce() throws {
        // One thread, a full buffer: groups of up to 50 in enqueue order, the poison job inside the second.
        let notes = (0..<100).map { $0 == 70 ? "poison" : "ok\($0)" }
        let jids = try enqueue(notes)
        _ = try start(concurrency: 1)
        // The poisoned group's COMMIT fails: all its jobs fail with it and are retried (backoff 0);
        // on their second attempt they commit.
        XCTAssertTrue(try eventually(timeout: 60) { try committed().perJid.count == 100 })
        let result = try committed()
        XCTAssertEqual(Set(result.perJid.keys), Set(jids))
        XCTAssertEqual(result.perJid.values.filter { $0 != 1 }.count, 0, "a job applied more than once")
        XCTAssertEqual(result.ledger, 100)
        XCTAssertGreaterThan(try redis.failed(), 1, "only the poison job failed: its group did not share its fate")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        try assertNothingLeftInRedis()
    }
}
