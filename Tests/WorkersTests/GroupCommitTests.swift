import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Synchronization
import WorkersTestServices
import Workers
import XCTest

/// A group-commit job for these tests: inserts a row stamped with its transaction id and attempt, so a
/// test can see which jobs shared a COMMIT, and (with the row's `xmin`) whether the row was written in a
/// savepoint or directly in the group's transaction (fast path). By its note:
/// - `fail` throws after its insert (permanent: dead); `flaky` does on its first attempt only (retried);
/// - `refuse` throws before its transaction on its first attempt (retried);
/// - `swallow` throws inside its transaction and catches the error itself, then returns normally;
/// - `poison` on its first attempt breaks a deferred foreign key, so COMMIT itself fails;
/// - `sever` on its first attempt terminates its own database session (the connection breaks mid-group);
/// - `write…` inserts its row with `PostgresConnection.write` (deferred on the fast path), not `execute`;
/// - `collide` does too, and on its first attempt also writes a row `group_probe_unique` already has (a unique
///   violation, deferred on the fast path with the rest of its work);
/// - `peek` writes its row, then records in `group_probe_seen` the last statement its transaction's session sent
///   to the server, read through another session (`pg_stat_activity`).
struct GroupProbeJob: Job {
    struct Arguments: SingleJobArgument { static let className = "GroupProbe"; let value: String }
    static let options = JobOptions(maxRetries: 3, backoff: .schedule([.zero]), timeout: .seconds(30), groupCommit: true)

    struct Failure: Error {}

    func perform(_ arguments: Arguments, context: JobContext) throws {
        let note = arguments.value
        let insert = { (connection: PostgresConnection) throws in
            let sql = "INSERT INTO group_probe (jid, note, txid, attempt) VALUES ($1, $2, txid_current(), $3)"
            if note.hasPrefix("write") || note == "collide" || note == "peek" {
                try connection.write(sql, [context.jid, note, context.attempt])
            } else {
                try connection.execute(sql, [context.jid, note, context.attempt])
            }
        }
        if note == "refuse", context.attempt == 1 { throw Failure() }
        if note == "swallow" {
            _ = try? context.transaction { connection in
                try insert(connection)
                throw Failure()
            }
            return
        }
        try context.transaction { connection in
            try insert(connection)
            if note == "slow" { Thread.sleep(forTimeInterval: 0.03) }
            if note == "fail" { throw JobError.permanent("asked to fail") }
            if note == "flaky", context.attempt == 1 { throw Failure() }
            if note == "poison", context.attempt == 1 {
                try connection.execute("INSERT INTO group_probe_child (parent) VALUES ('missing')")
            }
            if note == "sever", context.attempt == 1 {
                try connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            }
            if note == "collide", context.attempt == 1 {
                try connection.write("INSERT INTO group_probe_unique (key) VALUES ('taken')")
            }
            if note == "peek", let pool = context.database?.pool {
                let seen = try pool.withConnection { other in
                    try other.queryFirst("SELECT query FROM pg_stat_activity WHERE pid = $1", [connection.backendPID])?.string("query")
                }
                try connection.write("INSERT INTO group_probe_seen (jid, query) VALUES ($1, $2)", [context.jid, seen])
            }
        }
    }
}

/// A job that does not share commits: it says it started, then waits until the test opens `latch`.
struct HoldJob: Job {
    struct Arguments: SingleJobArgument { static let className = "Hold"; let value: String }
    static let options = JobOptions(timeout: .seconds(60))

    final class Latch: Sendable {
        private let state = Mutex<(started: Bool, open: Bool)>((false, false))
        var started: Bool { state.withLock { $0.started } }
        func open() { state.withLock { $0.open = true } }
        fileprivate func startAndWait() {
            state.withLock { $0.started = true }
            while !state.withLock({ $0.open }) { Thread.sleep(forTimeInterval: 0.01) }
        }
    }

    let latch: Latch
    func perform(_ arguments: Arguments, context: JobContext) throws { latch.startAndWait() }
}

/// Group commit (`JobOptions.groupCommit`): several jobs in one transaction — their ledger rows claimed
/// in one statement and their work done without savepoints (fast path), or each in its own savepoint
/// when the fast path had to be rolled back — acknowledged only after the shared COMMIT, against real
/// Redis and PostgreSQL, through the real worker runtime.
final class GroupCommitTests: XCTestCase {
    var redis: TestRedis!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var processes: [WorkerProcess] = []

    override func setUpWithError() throws {
        redis = try TestRedis(database: 9)
        database = try PostgresTestDatabase.create(prefix: "group_commit_test")
        pool = PostgresPool(url: database.url, maxConnections: 8)
        _ = try BundledSchema.migrate(pool: pool)
        try pool.withConnection { connection in
            try connection.executeScript("""
                CREATE TABLE group_probe (jid text NOT NULL, note text NOT NULL, txid bigint NOT NULL,
                                          attempt int NOT NULL);
                CREATE TABLE group_probe_parent (id text PRIMARY KEY);
                CREATE TABLE group_probe_child (
                    parent text REFERENCES group_probe_parent (id) DEFERRABLE INITIALLY DEFERRED);
                CREATE TABLE group_probe_unique (key text PRIMARY KEY);
                INSERT INTO group_probe_unique (key) VALUES ('taken');
                CREATE TABLE group_probe_seen (jid text NOT NULL, query text);
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
    func start(concurrency: Int, commitBatch: Int = 50, hold: HoldJob.Latch? = nil,
               adjust: (inout WorkerConfiguration) -> Void = { _ in }) throws -> WorkerProcess {
        var configuration = WorkerHarness(redis: redis).configuration(concurrency: concurrency)
        configuration.prefetchWait = .seconds(10)
        configuration.commitBatch = commitBatch
        configuration.commitWindow = .seconds(30)
        adjust(&configuration)
        var registry = JobRegistry.builtins()
        registry.register(GroupProbeJob())
        if let hold { registry.register(HoldJob(latch: hold)) }
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

    /// Reads `committed()` and checks the exactly-once picture: rows for exactly the jids `applied`, one row each,
    /// and `ledger` ledger rows. Returns what it read for further checks.
    @discardableResult
    func assertAppliedOnce(_ applied: Set<String>, ledger: Int, _ appliedMessage: String = "",
                           ledgerMessage: String = "", file: StaticString = #filePath, line: UInt = #line) throws
        -> (perJid: [String: Int], transactions: Int, ledger: Int) {
        let result = try committed()
        XCTAssertEqual(Set(result.perJid.keys), applied, appliedMessage, file: file, line: line)
        XCTAssertEqual(result.perJid.values.filter { $0 != 1 }.count, 0, "a job applied more than once", file: file, line: line)
        XCTAssertEqual(result.ledger, ledger, ledgerMessage, file: file, line: line)
        return result
    }

    /// A payload with its jid chosen now (for tests that push it themselves).
    func payload(_ note: String) throws -> JobPayload {
        try JobClient.payload(for: NewJob("GroupProbe", args: [.string(note)]), createdAt: Clock.now(), enqueuedAt: Clock.now())
    }

    /// Pushes payloads so that they are fetched in this order.
    func push(_ payloads: [JobPayload]) throws {
        for payload in payloads { try redis.command("LPUSH", "queue:default", payload.serialized()) }
    }

    /// How the committed rows were written: `direct` job rows and `claimed` ledger rows were written by their
    /// group's top-level transaction itself (their `xmin` is the transaction's xid), not inside a savepoint
    /// (whose rows carry the subtransaction's xid). Only the fast path writes them so. (`txid_current()` is the
    /// 64-bit xid, `xmin` its low 32 bits; a fresh test cluster has no wraparound epochs, the modulo is for form.)
    func writtenWithoutSavepoints() throws -> (direct: Int, claimed: Int) {
        try pool.withConnection { connection in
            let row = try XCTUnwrap(try connection.queryFirst("""
                SELECT count(*) FILTER (WHERE p.xmin::text::bigint = p.txid % 4294967296)::bigint AS direct,
                       count(*) FILTER (WHERE l.xmin::text::bigint = p.txid % 4294967296)::bigint AS claimed
                FROM group_probe p LEFT JOIN job_ledger l ON l.jid = p.jid
                """))
            return (Int(try row.int64("direct")), Int(try row.int64("claimed")))
        }
    }

    /// The attempt each jid's committed row was written by.
    func attempts() throws -> [String: Int] {
        try pool.withConnection { connection in
            var attempts: [String: Int] = [:]
            for row in try connection.query("SELECT jid, attempt::bigint AS attempt FROM group_probe") {
                attempts[try row.string("jid")] = Int(try row.int64("attempt"))
            }
            return attempts
        }
    }

    func assertNothingLeftInRedis(file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty && redis.int("ZCARD", Keys.retry) == 0 },
                      "jobs left in flight or in retry", file: file, line: line)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0, file: file, line: line)
    }

    /// What a pool thread holds for a reconciliation (`RunningJobs.Slot.held`) is exactly its jobs whose settlement is
    /// not queued: a group's jobs, once committed and acknowledged, are not among them while the same thread runs the
    /// job it took out of the buffer behind them (which cannot join a group). Here an acknowledgement is lost after it
    /// was written (the job pushed back in flight by hand, as a Sentinel failover to a replica that missed the write
    /// leaves it), and the fetcher reconciles (its `BLMOVE` killed) while that thread is busy: the job goes back to the
    /// queue and, run again, is found applied. Were the thread still to list it, the reconciliation would leave it in
    /// flight for good (until this process dies and another's orphan sweep takes it back).
    func testAJobAcknowledgedWithItsGroupIsNotHeldWhileItsThreadRunsTheJobTakenBehindIt() throws {
        let latch = HoldJob.Latch()
        let (first, second) = (try payload("a"), try payload("b"))
        let hold = try JobClient.payload(for: NewJob("Hold", args: ["carried"]), createdAt: Clock.now(), enqueuedAt: Clock.now())
        try push([first, second, hold])
        _ = try start(concurrency: 1, hold: latch)
        // One thread: it takes both group jobs and then the Hold job, commits the group and runs Hold.
        XCTAssertTrue(try eventually(timeout: 20) {
            guard latch.started, try committed().perJid.count == 2, let key = try redis.workingKeys().first else { return false }
            return try redis.command("LRANGE", key, 0, -1).strings == [try hold.serialized()]
        }, "the group committed and was acknowledged while Hold runs")
        let key = try XCTUnwrap(try redis.workingKeys().first)
        try redis.command("LPUSH", key, try first.serialized())  // its acknowledgement lost
        XCTAssertTrue(try eventually(timeout: 10) { try redis.clientsWaitingInBLMOVE() == 1 }, "the fetcher waits")
        XCTAssertEqual(try redis.killClientsInBLMOVE(), 1)
        // The fetcher reconnects and reconciles at once (within milliseconds), while Hold still runs. (Were it to take
        // longer than this, the check below would pass either way: it cannot fail for time, only miss the defect.)
        Thread.sleep(forTimeInterval: 0.5)
        latch.open()
        XCTAssertTrue(try eventually(timeout: 10) { try redis.workingKeys().isEmpty && redis.int("LLEN", "queue:default") == 0 },
                      "a job left in flight: \((try? redis.workingKeys().map { try redis.command("LRANGE", $0, 0, -1).strings }) ?? [])")
        try assertAppliedOnce([try XCTUnwrap(first.jid), try XCTUnwrap(second.jid)], ledger: 2)
    }

    func testJobsShareCommitsAndEachAppliesOnceEvenWhenDeliveredTwiceInOneGroup() throws {
        var jids = try enqueue((0..<400).map { "ok\($0)" })
        // The same payload twice, next to each other: both deliveries land in one shared transaction.
        let payload = try JobClient.payload(for: NewJob("GroupProbe", args: ["twice"]), createdAt: Clock.now(), enqueuedAt: Clock.now())
        try redis.command("RPUSH", "queue:default", payload.serialized(), payload.serialized())
        jids.append(try XCTUnwrap(payload.jid))
        _ = try start(concurrency: 2)
        XCTAssertTrue(try eventually { try redis.processed() == 402 })
        let result = try assertAppliedOnce(Set(jids), ledger: 401)
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
        let result = try assertAppliedOnce(Set(jids).subtracting(failing), ledger: 270, ledgerMessage: "a failed job's ledger row must be rolled back with its savepoint")
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
        try assertAppliedOnce(Set(jids), ledger: 100)
        XCTAssertGreaterThan(try redis.failed(), 1, "only the poison job failed: its group did not share its fate")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        try assertNothingLeftInRedis()
    }

    // MARK: - The fast path (ledger rows claimed in one statement, no savepoints) and its fallbacks

    /// The window bounds a transaction however many jobs were taken up front: with a 50 ms window and jobs of at
    /// least 30 ms, no transaction holds more than 2 of them (checked before each job after the first; a slower
    /// machine only makes transactions smaller). The jobs left when the window closes run in the next transaction,
    /// each once. Without the check, one thread with a full buffer commits 50 per transaction.
    func testTheCommitWindowBoundsATransactionOfJobsTakenTogether() throws {
        let jids = try enqueue((0..<40).map { _ in "slow" })
        _ = try start(concurrency: 1) { $0.commitWindow = .seconds(0.05) }
        XCTAssertTrue(try eventually(timeout: 60) { try redis.processed() == 40 })
        try assertAppliedOnce(Set(jids), ledger: 40)
        let largest = try pool.withConnection { connection in
            try connection.queryFirst("SELECT max(n)::bigint AS n FROM (SELECT count(*) AS n FROM group_probe GROUP BY txid) AS t")
        }
        XCTAssertLessThanOrEqual(try XCTUnwrap(largest).int64("n"), 2, "jobs ran in a transaction past its window")
        XCTAssertEqual(try redis.failed(), 0)
        try assertNothingLeftInRedis()
    }

    func testAGroupClaimsItsLedgerRowsTogetherAndRunsItsJobsWithoutSavepoints() throws {
        let jids = try enqueue((0..<300).map { "ok\($0)" })
        _ = try start(concurrency: 2)
        XCTAssertTrue(try eventually { try redis.processed() == 300 })
        let result = try assertAppliedOnce(Set(jids), ledger: 300)
        XCTAssertLessThanOrEqual(result.transactions, 300 / 2, "jobs did not share commits")
        let written = try writtenWithoutSavepoints()
        XCTAssertEqual(written.direct, 300, "job rows written inside savepoints: the fast path was not taken")
        XCTAssertEqual(written.claimed, 300, "ledger rows written inside savepoints: they were not claimed by the group")
        XCTAssertEqual(try redis.failed(), 0)
        try assertNothingLeftInRedis()
    }

    func testAJobFailingInTheMiddleOfAGroupIsRetriedAloneWithoutEffectsWhileTheOthersCommitOnce() throws {
        // One thread, a full buffer: groups of up to 50 in enqueue order, one failing job in each. On their first
        // attempt two jobs fail inside their transaction (after their insert), one before it.
        let notes = (0..<150).map { $0 == 20 || $0 == 120 ? "flaky" : $0 == 75 ? "refuse" : "ok\($0)" }
        let jids = try enqueue(notes)
        let failing = Set(zip(jids, notes).filter { $0.1 == "flaky" || $0.1 == "refuse" }.map(\.0))
        _ = try start(concurrency: 1)
        XCTAssertTrue(try eventually(timeout: 60) { try committed().perJid.count == 150 })
        try assertNothingLeftInRedis()
        try assertAppliedOnce(Set(jids), ledger: 150)
        XCTAssertEqual(try redis.failed(), 3, "only the failing jobs may fail: the other jobs of their groups must commit, not be retried")
        let attempts = try attempts()
        XCTAssertEqual(failing.map { attempts[$0] }, [2, 2, 2], "a failed first attempt left its row behind")
        XCTAssertTrue(zip(jids, notes).allSatisfy { failing.contains($0.0) || attempts[$0.0] == 1 })
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        XCTAssertLessThan(try writtenWithoutSavepoints().direct, 150,
                          "no group was rolled back and run again with a savepoint per job")
    }

    func testAJobThatCatchesItsOwnTransactionsFailureLeavesNoEffectsBehind() throws {
        // The job's body throws after its insert and the job catches the error: on the savepoint path its savepoint
        // undoes the insert and its ledger row; the fast path has no savepoint, so it must not commit that group.
        let notes = (0..<60).map { $0 == 30 ? "swallow" : "ok\($0)" }
        let jids = try enqueue(notes)
        _ = try start(concurrency: 1)
        XCTAssertTrue(try eventually { try redis.processed() == 60 })
        try assertNothingLeftInRedis()
        try assertAppliedOnce(Set(jids).subtracting([jids[30]]), ledger: 59, "the swallowed insert was committed", ledgerMessage: "the swallowing job's ledger row must be undone with its insert")
        XCTAssertEqual(try redis.failed(), 0)
    }

    func testAJobWhoseLedgerRowIsAlreadyCommittedIsSkippedInsideAGroup() throws {
        // First deliveries as far as the payloads tell (no retry_count, no interrupted_count, so the runner's own
        // redelivery check does not look): only the group's claim can notice that 10 of them were applied.
        let payloads = try (0..<60).map { try payload("ok\($0)") }
        let jids = try payloads.map { try XCTUnwrap($0.jid) }
        let applied = Set(stride(from: 5, to: 60, by: 6).map { jids[$0] })
        try pool.withConnection { connection in
            for jid in applied {
                try connection.execute("""
                    INSERT INTO job_ledger (jid, job_class, queue, finished_at) VALUES ($1, 'GroupProbe', 'default', now())
                    """, [jid])
            }
        }
        try push(payloads)
        _ = try start(concurrency: 1)
        XCTAssertTrue(try eventually { try redis.processed() == 60 })
        try assertNothingLeftInRedis()
        try assertAppliedOnce(Set(jids).subtracting(applied), ledger: 60, "a job whose ledger row was committed ran again")
        XCTAssertEqual(try redis.failed(), 0)
        XCTAssertEqual(try writtenWithoutSavepoints().direct, 50, "the group was not run on the fast path")
    }

    /// Another delivery of one jid — here the test, through the real `JobLedger.runOnce`, as another worker's
    /// savepoint path would — holds that jid's ledger row in an open transaction while a worker's group claims
    /// it. The claim waits (seen in pg_stat_activity, no clock involved); when the other transaction commits the
    /// group skips the job, when it rolls back the group runs it. Either way exactly one delivery's work commits.
    func runAgainstAConcurrentDelivery(otherCommits: Bool) throws {
        struct Abort: Error {}
        let payloads = try (0..<31).map { try payload("ok\($0)") }
        let jids = try payloads.map { try XCTUnwrap($0.jid) }
        let contested = jids[15]
        do {
            try JobLedger(pool: pool).runOnce(jid: contested, jobClass: "GroupProbe", queue: "default") { connection in
                try connection.execute("""
                    INSERT INTO group_probe (jid, note, txid, attempt) VALUES ($1, 'other delivery', txid_current(), 1)
                    """, [contested])
                try push(payloads)
                _ = try start(concurrency: 1)
                XCTAssertTrue(try eventually { try claimWaitsForALock() }, "the group's claim never waited for the contested row")
                if !otherCommits { throw Abort() }
            }
        } catch is Abort {}
        XCTAssertTrue(try eventually { try redis.processed() == 31 })
        try assertNothingLeftInRedis()
        try assertAppliedOnce(Set(jids), ledger: 31)
        let note = try pool.withConnection { try $0.queryFirst("SELECT note FROM group_probe WHERE jid = $1", [contested]) }
        XCTAssertEqual(try note?.string("note"), otherCommits ? "other delivery" : "ok15")
        XCTAssertEqual(try redis.failed(), 0)
    }

    /// True while a session of the test database waits for a row lock in a group's claim statement.
    func claimWaitsForALock() throws -> Bool {
        try pool.withConnection { connection in
            try connection.queryFirst("""
                SELECT count(*)::bigint AS n FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%unnest(%'
                """)?.int64("n") ?? 0
        } > 0
    }

    func testAGroupSkipsAJobWhoseConcurrentDeliveryCommitsFirst() throws {
        try runAgainstAConcurrentDelivery(otherCommits: true)
    }

    func testAGroupRunsAJobWhoseConcurrentDeliveryRollsBack() throws {
        try runAgainstAConcurrentDelivery(otherCommits: false)
    }

    func testDuplicatesDeliveredToTwoWorkersAtOnceApplyOnce() throws {
        // Every payload twice, side by side, served by two worker processes fetching a few jobs at a time: the
        // two deliveries of a jid mostly land in the two processes' open groups at the same time.
        let payloads = try (0..<150).map { try payload("ok\($0)") }
        try push(payloads.flatMap { [$0, $0] })
        for _ in 0..<2 {
            _ = try start(concurrency: 2) { configuration in
                configuration.fetchBatch = 6
                configuration.prefetch = 6
            }
        }
        XCTAssertTrue(try eventually(timeout: 60) {
            try redis.int("LLEN", "queue:default") == 0 && redis.workingKeys().isEmpty && redis.int("ZCARD", Keys.retry) == 0
        })
        try assertAppliedOnce(Set(try payloads.map { try XCTUnwrap($0.jid) }), ledger: 150)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
    }

    // MARK: - Deferred writes (`PostgresConnection.write` on the fast path)

    func testAGroupsWritesWaitUnsentOnTheFastPathUntilAStatementThatReads() throws {
        // One thread, one group of 30 jobs that only write: while each runs, its session has sent nothing since
        // the group's claim (its last statement, seen by the server), though the earlier jobs have all written.
        let jids = try enqueue((0..<30).map { _ in "peek" })
        _ = try start(concurrency: 1)
        XCTAssertTrue(try eventually { try redis.processed() == 30 })
        try assertAppliedOnce(Set(jids), ledger: 30)
        XCTAssertEqual(try writtenWithoutSavepoints().direct, 30, "the group did not run on the fast path")
        let seen = try pool.withConnection { connection in
            try connection.query("SELECT query FROM group_probe_seen").map { try $0.string("query") }
        }
        XCTAssertEqual(seen.count, 30)
        let sentSinceTheClaim = seen.filter { !$0.hasPrefix("INSERT INTO job_ledger") }
        XCTAssertEqual(sentSinceTheClaim, [], "writes were sent before the COMMIT")
        XCTAssertEqual(try redis.failed(), 0)
        try assertNothingLeftInRedis()
    }

    func testADeferredWriteThatFailsFailsOnlyItsJobThroughTheSavepointPathAndTheOthersCommitOnce() throws {
        // One thread, a full buffer: the first group holds jobs 0…49, which only write; job 30's write breaks a
        // unique index on its first attempt. On the fast path that error surfaces at the COMMIT, not in job 30:
        // the group is rolled back and run again with a savepoint per job, where the write runs at once and fails
        // job 30 alone (retried, then applied); the other 49 commit on their first attempt.
        let notes = (0..<100).map { $0 == 30 ? "collide" : "write\($0)" }
        let jids = try enqueue(notes)
        _ = try start(concurrency: 1)
        XCTAssertTrue(try eventually(timeout: 60) { try committed().perJid.count == 100 })
        try assertNothingLeftInRedis()
        try assertAppliedOnce(Set(jids), ledger: 100)
        XCTAssertEqual(try redis.failed(), 1, "jobs other than the one whose write failed were failed with it")
        let attempts = try attempts()
        XCTAssertEqual(attempts[jids[30]], 2, "the failing write's job did not fail (or its first attempt committed)")
        XCTAssertTrue(jids.enumerated().allSatisfy { $0.offset == 30 || attempts[$0.element] == 1 })
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        XCTAssertLessThan(try writtenWithoutSavepoints().direct, 100,
                          "no group was rolled back and run again with a savepoint per job")
    }

    func testAConnectionLostInTheMiddleOfAGroupRetriesEveryJobOfTheGroupAndEachAppliesOnce() throws {
        // One thread, a full buffer: the first group holds jobs 0…49; job 30 ends its own database session.
        let notes = (0..<100).map { $0 == 30 ? "sever" : "ok\($0)" }
        let jids = try enqueue(notes)
        _ = try start(concurrency: 1)
        XCTAssertTrue(try eventually(timeout: 60) { try committed().perJid.count == 100 })
        try assertNothingLeftInRedis()
        try assertAppliedOnce(Set(jids), ledger: 100)
        XCTAssertGreaterThanOrEqual(try redis.failed(), 31,
                                    "the jobs that ran before the lost connection were not all retried")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
    }
}
