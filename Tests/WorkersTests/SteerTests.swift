import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import WorkersTestSupport
import XCTest

/// Progress by jid and cancelling jobs (issue 36 points 2 and 3; docs/workerctl.md "Cancel a job"), through real
/// `workerctl worker --bench-jobs` processes (heartbeat 200 ms) running the probe `SteerProbe`
/// (Sources/BenchJobs/SteerProbeJob.swift), real Redis and PostgreSQL, and `workerctl jobs cancel`.
final class SteerTests: XCTestCase {
    static let heartbeat = 0.2

    func migrated(_ database: PostgresTestDatabase) throws {
        let migrate = try ChildProcess.run(TestServices.workerctl, ["migrate", "--bench-tables"],
                                           environment: ["DATABASE_URL": database.url])
        XCTAssertEqual(migrate.status, 0, migrate.stderr)
    }

    func startWorker(redis: TestRedis, database: PostgresTestDatabase, concurrency: Int = 2) throws -> ChildProcess {
        try ChildProcess(executable: TestServices.workerctl,
                         arguments: ["worker", "--bench-jobs", "--concurrency", "\(concurrency)",
                                     "--heartbeat-interval", "\(Self.heartbeat)", "--heartbeat-ttl", "2",
                                     "--poll-interval", "0.1"],
                         environment: ["REDIS_URL": redis.url, "DATABASE_URL": database.url, "LOG_LEVEL": "warning"])
    }

    func stop(_ worker: ChildProcess) {
        worker.signal(SIGTERM)
        _ = worker.wait()
    }

    /// Enqueues a `SteerProbe` with `arguments` (its hash) and returns its jid.
    func probe(_ redis: TestRedis, _ arguments: JSONObject, at date: Date? = nil) throws -> String {
        let job = NewJob("SteerProbe", args: [.object(arguments)])
        if let date { return try redis.client.enqueue(job, at: date) }
        return try redis.client.enqueue(job)
    }

    func runs(_ redis: TestRedis, _ jid: String) throws -> Int { try redis.int("GET", "probe:steer:runs:\(jid)") }

    func progress(_ redis: TestRedis, _ jid: String) throws -> JobProgress? {
        try JobProgress.read(try redis.connection(), jid: jid)
    }

    /// The dead entry of `jid`, if any.
    func dead(_ redis: TestRedis, _ jid: String) throws -> JobPayload? {
        try redis.payloads(zset: Keys.dead).first { $0.jid == jid }
    }

    func cancel(_ redis: TestRedis, _ jid: String) throws -> String {
        let result = try WorkerctlRunner(redisURL: redis.url).run("jobs", "cancel", jid)
        XCTAssertEqual(result.status, 0, result.stderr)
        return result.stdout
    }

    func ledgerRows(_ database: PostgresTestDatabase, _ jid: String) throws -> (ledger: Int, probe: Int) {
        let connection = try database.connect()
        defer { connection.close() }
        let ledger = try connection.queryFirst("SELECT count(*)::int AS n FROM job_ledger WHERE jid = $1", [jid])?.int("n") ?? -1
        let probe = try connection.queryFirst("SELECT count(*)::int AS n FROM probe_rows WHERE jid = $1", [jid])?.int("n") ?? -1
        return (ledger, probe)
    }

    // MARK: A running job

    /// A long job inside its ledger transaction reports progress, readable by jid while it runs; `workerctl jobs
    /// cancel` stops it within about one heartbeat; it ends in dead with `Cancelled`, is never retried, its
    /// transaction did not commit (no ledger row, no probe row), and its progress key is gone after it.
    func testRunningJobReportsProgressAndStopsWithinAHeartbeatOfItsCancel() throws {
        let redis = try TestRedis(database: 33)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let worker = try startWorker(redis: redis, database: database)
        defer { stop(worker) }

        let jid = try probe(redis, ["steps": 1200, "step_ms": 50, "ledger": "inside"])
        var first: JobProgress?
        XCTAssertTrue(try eventually(timeout: 30) { first = try progress(redis, jid); return first != nil }, worker.stderr)
        var later: JobProgress?
        XCTAssertTrue(try eventually(timeout: 10) {
            later = try progress(redis, jid)
            return (later?.fraction ?? 0) > (first?.fraction ?? 1)
        }, "progress moves while the job runs: \(String(describing: first)) then \(String(describing: later))")
        XCTAssertTrue(later?.note?.hasPrefix("step ") == true, "\(String(describing: later))")
        XCTAssertLessThan(later?.fraction ?? 1, 0.5)
        let ttl = try redis.int("TTL", JobProgress.key(jid: jid))
        XCTAssertTrue((86_000...86_400).contains(ttl), "TTL \(ttl)")

        let output = try cancel(redis, jid)
        let cancelledAt = Date()
        XCTAssertTrue(output.contains("running on"), output)
        XCTAssertEqual(try redis.command("EXISTS", JobCancels.markKey(jid: jid)).integer, 1, "Sidekiq's cancelled? key")
        if RubySidekiq.isAvailable {  // the wiki's pattern, as a Ruby job would call it
            let ruby = try RubySidekiq.run(#"puts Sidekiq.redis { |c| c.exists("cancelled-\#(jid)") }"#, redisURL: redis.url)
            // redis-rb 4.2+ answers the count, older versions true.
            XCTAssertTrue(["1", "true"].contains(ruby.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), ruby.stdout + ruby.stderr)
        }
        var entry: JobPayload?
        XCTAssertTrue(try eventually(timeout: 10) { entry = try dead(redis, jid); return entry != nil }, worker.stderr)
        let took = Date().timeIntervalSince(cancelledAt)
        print("SteerTests: cancel to dead in \(Int(took * 1000)) ms (heartbeat \(Int(Self.heartbeat * 1000)) ms)")
        XCTAssertLessThan(took, 1.5, "stopped within about one heartbeat (+ a step, the settle and the poll)")
        XCTAssertEqual(entry?.errorClass, JobCancels.errorClass)
        XCTAssertEqual(entry?.fields["error_message"]?.stringValue, JobCancels.message)
        XCTAssertEqual(entry?.retryCount, 0, "dead from its first failure, never through the retry set")
        XCTAssertNil(entry?.fields["retried_at"])

        Thread.sleep(forTimeInterval: 1)  // a retry (100 ms backoff) would have run by now
        XCTAssertEqual(try runs(redis, jid), 1, "never retried")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        XCTAssertEqual(try redis.int("GET", "probe:steer:done:\(jid)"), 0)
        let rows = try ledgerRows(database, jid)
        XCTAssertEqual(rows.ledger, 0, "the cancelled run's transaction did not commit")
        XCTAssertEqual(rows.probe, 0)
        XCTAssertTrue(try eventually(timeout: 5) { try progress(redis, jid) == nil }, "progress deleted after the run")
    }

    /// A job cancelled after its ledger transaction committed is done: acknowledged, not dead, its row kept.
    func testJobCancelledAfterItsLedgerRowCommittedIsAcknowledged() throws {
        let redis = try TestRedis(database: 33)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let worker = try startWorker(redis: redis, database: database)
        defer { stop(worker) }

        let jid = try probe(redis, ["steps": 1200, "step_ms": 50, "ledger": "after"])
        XCTAssertTrue(try eventually(timeout: 30) { try progress(redis, jid) != nil }, worker.stderr)
        XCTAssertEqual(try ledgerRows(database, jid).ledger, 1, "committed before the steps")
        _ = try cancel(redis, jid)
        XCTAssertTrue(try eventually(timeout: 10) { try redis.processed() == 1 }, worker.stderr)
        XCTAssertNil(try dead(redis, jid), "done, not dead")
        XCTAssertEqual(try redis.failed(), 0)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        XCTAssertEqual(try runs(redis, jid), 1)
        let rows = try ledgerRows(database, jid)
        XCTAssertEqual(rows.ledger, 1)
        XCTAssertEqual(rows.probe, 1)
    }

    /// A job waiting on an HTTP call (to a server that never answers) stops within about a heartbeat of its cancel:
    /// curl's progress callback sees the flag; the transport's `cancelled` error is settled as `Cancelled` in dead,
    /// not as a timeout nor a retried failure.
    func testCancelDuringAnHTTPCallIsSettledAsCancelledNotAFailure() throws {
        let redis = try TestRedis(database: 35)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let silent = try SilentListener()
        defer { silent.close() }
        let worker = try startWorker(redis: redis, database: database)
        defer { stop(worker) }

        let jid = try probe(redis, ["steps": 1, "step_ms": 1, "url": .string("http://127.0.0.1:\(silent.port)/slow")])
        XCTAssertTrue(try eventually(timeout: 30) { try progress(redis, jid)?.note == "calling" }, worker.stderr)
        _ = try cancel(redis, jid)
        let cancelledAt = Date()
        var entry: JobPayload?
        XCTAssertTrue(try eventually(timeout: 10) { entry = try dead(redis, jid); return entry != nil }, worker.stderr)
        XCTAssertLessThan(Date().timeIntervalSince(cancelledAt), 2.5)
        XCTAssertEqual(entry?.errorClass, JobCancels.errorClass)
        XCTAssertEqual(entry?.retryCount, 0, "dead from its first failure, never through the retry set")
        XCTAssertNil(entry?.fields["retried_at"])
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(try runs(redis, jid), 1, "not retried")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
    }

    /// A group-commit job cancelled on group commit's fast path (its body straight in the group's transaction, its
    /// ledger row claimed up front): the group rolls back and runs again with savepoints, where the pre-run check
    /// settles it — dead with `Cancelled`, run once, no ledger row, no probe row.
    func testGroupCommitJobCancelledOnTheFastPathLeavesNoLedgerRow() throws {
        let redis = try TestRedis(database: 37)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let worker = try startWorker(redis: redis, database: database)
        defer { stop(worker) }

        let jid = try redis.client.enqueue(NewJob("SteerGroupProbe", args: [.object(["steps": 1200, "step_ms": 50, "ledger": "inside"])]))
        XCTAssertTrue(try eventually(timeout: 30) { try progress(redis, jid) != nil }, worker.stderr)
        _ = try cancel(redis, jid)
        var entry: JobPayload?
        XCTAssertTrue(try eventually(timeout: 10) { entry = try dead(redis, jid); return entry != nil }, worker.stderr)
        XCTAssertEqual(entry?.errorClass, JobCancels.errorClass)
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(try runs(redis, jid), 1)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        let rows = try ledgerRows(database, jid)
        XCTAssertEqual(rows.ledger, 0)
        XCTAssertEqual(rows.probe, 0)
    }

    // MARK: Jobs not started

    /// A scheduled job cancelled never runs, even after its time passed with the worker's poller on.
    func testScheduledJobCancelledNeverRuns() throws {
        let redis = try TestRedis(database: 35)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let worker = try startWorker(redis: redis, database: database)
        defer { stop(worker) }

        let jid = try probe(redis, ["steps": 1, "step_ms": 1], at: Date().addingTimeInterval(1.5))
        let output = try cancel(redis, jid)
        XCTAssertTrue(output.contains("scheduled → dead"), output)
        XCTAssertEqual(try redis.int("ZCARD", Keys.schedule), 0)
        let control = try probe(redis, ["steps": 1, "step_ms": 1], at: Date().addingTimeInterval(1.5))
        XCTAssertTrue(try eventually(timeout: 20) { try runs(redis, control) == 1 }, "the poller ran the other one")
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(try runs(redis, jid), 0, "never ran")
        XCTAssertEqual(try dead(redis, jid)?.errorClass, JobCancels.errorClass)
    }

    /// A job waiting in its queue behind a blocker, cancelled, never runs; the blocker, cancelled next, stops.
    func testQueuedJobBehindABlockerCancelledNeverRuns() throws {
        let redis = try TestRedis(database: 35)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let worker = try startWorker(redis: redis, database: database, concurrency: 1)
        defer { stop(worker) }

        let blocker = try probe(redis, ["steps": 1200, "step_ms": 50])
        XCTAssertTrue(try eventually(timeout: 30) { try runs(redis, blocker) == 1 }, worker.stderr)
        let waiting = try probe(redis, ["steps": 1, "step_ms": 1])
        _ = try cancel(redis, waiting)
        _ = try cancel(redis, blocker)
        XCTAssertTrue(try eventually(timeout: 10) { try dead(redis, blocker) != nil }, worker.stderr)
        Thread.sleep(forTimeInterval: 1)
        XCTAssertEqual(try runs(redis, waiting), 0, "never ran")
        XCTAssertEqual(try dead(redis, waiting)?.errorClass, JobCancels.errorClass)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0)
    }

    /// A job pushed after its cancel (found nowhere then, so only marked) never starts: the runner's pre-run check
    /// finds its jid in the process's set, refreshed by the heartbeat. It goes to dead with `Cancelled`.
    func testJobPushedAfterItsCancelNeverStarts() throws {
        let redis = try TestRedis(database: 36)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let worker = try startWorker(redis: redis, database: database)
        defer { stop(worker) }
        XCTAssertTrue(try eventually(timeout: 30) { try redis.int("SCARD", Keys.processes) == 1 }, worker.stderr)

        let jid = Identifiers.jid()
        let output = try cancel(redis, jid)
        XCTAssertTrue(output.contains("never starts"), output)
        Thread.sleep(forTimeInterval: 3 * Self.heartbeat)  // the worker's heartbeats read the mark
        let payload = try JobPayload(parsing: JSONValue.object([
            "class": "SteerProbe", "args": [.object(["steps": 1, "step_ms": 1])], "queue": "default", "jid": .string(jid),
            "retry": true, "created_at": .double(Clock.now()), "enqueued_at": .double(Clock.now()),
        ]).serialized())
        try redis.command("LPUSH", "queue:default", payload.serialized())
        XCTAssertTrue(try eventually(timeout: 10) { try dead(redis, jid) != nil }, worker.stderr)
        XCTAssertEqual(try runs(redis, jid), 0, "never started")
        XCTAssertEqual(try dead(redis, jid)?.errorClass, JobCancels.errorClass)

        // Retrying it from the dead set withdraws the cancel: it runs.
        let retry = try WorkerctlRunner(redisURL: redis.url).run("jobs", "retry", jid)
        XCTAssertEqual(retry.status, 0, retry.stderr)
        XCTAssertEqual(try redis.command("EXISTS", JobCancels.markKey(jid: jid)).integer, 0)
        XCTAssertTrue(try eventually(timeout: 10) { try runs(redis, jid) == 1 }, worker.stderr)
    }

    // MARK: At scale (issue 51 point 4)

    /// No cap decides whether a cancel works: with 100,000 live marks of other jids in `cancels` (one pipelined
    /// `ZADD`; before, a beat read at most 10,000, the oldest-expiring first, so a new cancel was silently ignored), a
    /// new cancel stops its running job, and a job pushed after its cancel never starts. Once each is dead its jid
    /// leaves `cancels` (the other marks stay) and `cancelled-<jid>` remains (Sidekiq's `cancelled?` pattern).
    func testCancelsWorkWithOneHundredThousandLiveMarks() throws {
        let redis = try TestRedis(database: 124)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let expires = Clock.now() + 86_400  // each expires before a new cancel's mark (7 days)
        var marks: [any RedisArgument] = ["ZADD", JobCancels.set]
        marks.reserveCapacity(200_002)
        for index in 0..<100_000 { marks += [expires, "othercancel\(100_000_000 + index)"] }
        XCTAssertEqual(try redis.connection().send(marks).checked().integer, 100_000)
        let worker = try startWorker(redis: redis, database: database)
        defer { stop(worker) }
        XCTAssertTrue(try eventually(timeout: 30) { try redis.int("SCARD", Keys.processes) == 1 }, worker.stderr)

        // A running job.
        let running = try probe(redis, ["steps": 1200, "step_ms": 50])
        XCTAssertTrue(try eventually(timeout: 30) { try progress(redis, running) != nil }, worker.stderr)  // a beat saw it
        let output = try cancel(redis, running)
        XCTAssertTrue(output.contains("running on"), output)
        XCTAssertTrue(try eventually(timeout: 10) { try dead(redis, running) != nil }, "the cancel stopped it: \(worker.stderr)")
        XCTAssertEqual(try dead(redis, running)?.errorClass, JobCancels.errorClass)
        XCTAssertEqual(try runs(redis, running), 1)
        XCTAssertTrue(try eventually(timeout: 10) { try redis.command("ZSCORE", JobCancels.set, running).isNull },
                      "its mark leaves cancels once it is settled (the second beat after)")
        XCTAssertEqual(try redis.int("EXISTS", JobCancels.markKey(jid: running)), 1, "cancelled-<jid> stays")

        // A job pushed after its cancel (found nowhere then: only marked).
        let late = Identifiers.jid()
        _ = try cancel(redis, late)
        Thread.sleep(forTimeInterval: 3 * Self.heartbeat)  // the worker's beats count the marks
        let payload = try JobPayload(parsing: JSONValue.object([
            "class": "SteerProbe", "args": [.object(["steps": 1, "step_ms": 1])], "queue": "default", "jid": .string(late),
            "retry": true, "created_at": .double(Clock.now()), "enqueued_at": .double(Clock.now()),
        ]).serialized())
        try redis.command("LPUSH", "queue:default", payload.serialized())
        XCTAssertTrue(try eventually(timeout: 10) { try dead(redis, late) != nil }, worker.stderr)
        XCTAssertEqual(try runs(redis, late), 0, "never started")
        XCTAssertEqual(try dead(redis, late)?.errorClass, JobCancels.errorClass)
        XCTAssertTrue(try eventually(timeout: 10) { try redis.command("ZSCORE", JobCancels.set, late).isNull })
        XCTAssertEqual(try redis.int("EXISTS", JobCancels.markKey(jid: late)), 1)
        XCTAssertEqual(try redis.int("ZCARD", JobCancels.set), 100_000, "the other marks stay")
    }

    /// A job waiting in its queue and cancelled there goes to dead at once, and its mark leaves `cancels` with it
    /// (no process needs to look it up); `cancelled-<jid>` stays. A mark whose job was found nowhere stays.
    func testCancelOfAWaitingJobRemovesItsMarkFoundNowhereKeepsIt() throws {
        let redis = try TestRedis(database: 124)
        let waiting = try probe(redis, ["steps": 1, "step_ms": 1])
        let output = try cancel(redis, waiting)
        XCTAssertEqual(try dead(redis, waiting)?.errorClass, JobCancels.errorClass, output)
        XCTAssertTrue(try redis.command("ZSCORE", JobCancels.set, waiting).isNull)
        XCTAssertEqual(try redis.int("EXISTS", JobCancels.markKey(jid: waiting)), 1)
        let nowhere = Identifiers.jid()
        _ = try cancel(redis, nowhere)
        XCTAssertFalse(try redis.command("ZSCORE", JobCancels.set, nowhere).isNull)
    }

    // MARK: Progress bounds

    /// NaN is ignored, -1 and 2 are clamped, a 10 kB note with control characters is cut to 200 clean characters;
    /// a job that never reports leaves no key.
    func testProgressIsStoredBoundedAndAQuietJobLeavesNoKey() throws {
        let redis = try TestRedis(database: 37)
        let database = try PostgresTestDatabase.create(prefix: "steer")
        defer { database.drop() }
        try migrated(database)
        let worker = try startWorker(redis: redis, database: database, concurrency: 4)
        defer { stop(worker) }

        let repeats = 1000  // 10 bytes each: 10 kB
        let nan = try probe(redis, ["steps": 1200, "step_ms": 50, "fraction": "nan", "note_repeat": .int(Int64(repeats))])
        let negative = try probe(redis, ["steps": 1200, "step_ms": 50, "fraction": "-1", "note_repeat": .int(Int64(repeats))])
        let over = try probe(redis, ["steps": 1200, "step_ms": 50, "fraction": "2", "note_repeat": .int(Int64(repeats))])
        let quiet = try probe(redis, ["steps": 1200, "step_ms": 50, "quiet": true])
        var values: [String: JobProgress] = [:]
        XCTAssertTrue(try eventually(timeout: 30) {
            for jid in [nan, negative, over] { values[jid] = try progress(redis, jid) }
            let quietRuns = try runs(redis, quiet)
            return values.count == 3 && quietRuns == 1
        }, worker.stderr)
        XCTAssertEqual(values[nan]?.fraction, 0.25, "NaN ignored: the report before it stays")
        XCTAssertEqual(values[nan]?.note, "before")
        XCTAssertEqual(values[negative]?.fraction, 0)
        XCTAssertEqual(values[over]?.fraction, 1)
        for jid in [negative, over] {
            let raw = try XCTUnwrap(try redis.command("GET", JobProgress.key(jid: jid)).string)
            XCTAssertLessThan(raw.utf8.count, 1000, raw)
            let note = try XCTUnwrap(values[jid]?.note)
            XCTAssertEqual(note.utf8.count, JobProgress.maxNoteBytes)
            XCTAssertFalse(note.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, note)
            XCTAssertTrue(note.hasPrefix("ab[31mab[31m"), note)
        }
        Thread.sleep(forTimeInterval: 3 * Self.heartbeat)
        XCTAssertNil(try progress(redis, quiet))
        XCTAssertEqual(try redis.int("EXISTS", JobProgress.key(jid: quiet)), 0, "a job that never reports leaves no key")

        for jid in [nan, negative, over, quiet] { _ = try cancel(redis, jid) }
        XCTAssertTrue(try eventually(timeout: 10) { try redis.int("ZCARD", Keys.dead) == 4 }, worker.stderr)
        XCTAssertTrue(try eventually(timeout: 5) { try redis.command("KEYS", "progress:*").strings.isEmpty })
    }

    /// `JobProgress`'s bounds on their own: NaN refused; a note cut at `maxNoteBytes` bytes, at whole characters
    /// (never inside a UTF-8 sequence or a grapheme cluster); a character holding a control or format character (a
    /// zero-width joiner too) dropped; an empty or all-control note is nil; a stored value is bounded again on read.
    func testJobProgressBounds() throws {
        let at = Date(timeIntervalSince1970: 1_800_000_000)
        XCTAssertNil(JobProgress(fraction: .nan, note: nil, at: at))
        XCTAssertEqual(JobProgress(fraction: -.infinity, note: nil, at: at)?.fraction, 0)
        XCTAssertEqual(JobProgress(fraction: .infinity, note: nil, at: at)?.fraction, 1)
        let accented = String(repeating: "e\u{301}", count: 300)  // 300 characters of 3 bytes each
        XCTAssertEqual(JobProgress(fraction: 0.5, note: accented, at: at)?.note, String(repeating: "e\u{301}", count: 66))
        XCTAssertEqual(JobProgress(fraction: 0.5, note: String(repeating: "🙂", count: 250), at: at)?.note?.count, 50)
        XCTAssertNil(JobProgress(fraction: 0.5, note: String(repeating: "👩‍👩‍👧", count: 250), at: at)?.note, "joined by U+200D")
        XCTAssertNil(JobProgress(fraction: 0.5, note: "\u{0}\n\u{1B}\u{85}\u{2028}", at: at)?.note)
        let stored = JobProgress(json: #"{"fraction":7,"note":"a\u0000b","at":1800000000.5}"#)
        XCTAssertEqual(stored?.fraction, 1)
        XCTAssertEqual(stored?.note, "ab")
        XCTAssertEqual(stored?.at.timeIntervalSince1970, 1_800_000_000.5)
        XCTAssertNil(JobProgress(json: #"{"note":"x"}"#))
        XCTAssertNil(JobProgress(json: "not json"))
        let value = try XCTUnwrap(JobProgress(fraction: 0.5, note: "half", at: at))
        XCTAssertEqual(JobProgress(json: value.json), value)
    }

    // MARK: Cost

    /// No extra Redis command per job while no cancel exists, nor while one does: 1,000 no-op jobs through an
    /// in-process worker, counted with INFO commandstats from just before the worker starts to the moment its
    /// 1,000th job is settled, without and with a live cancel of another jid. (The pool threads hold no Redis
    /// connection at all; the check is an in-memory lookup.)
    func testNoRedisCommandPerJobForCancelChecks() throws {
        let redis = try TestRedis(database: 36)
        let harness = WorkerHarness(redis: redis)
        func commandsFor1000Jobs() throws -> [String: Int] {
            _ = try redis.client.enqueueMany((0..<1000).map { _ in NewJob("Noop") })
            let before = try calls(redis)
            let process = try harness.start(harness.configuration(concurrency: 4))
            let done = eventually(timeout: 60) { process.processedCount >= 1000 }
            let after = try calls(redis)
            process.shutdown()
            XCTAssertTrue(done)
            return after.merging(before.mapValues { -$0 }) { $0 + $1 }.filter { $0.value != 0 }
        }
        let without = try commandsFor1000Jobs()
        try redis.command("FLUSHDB")
        _ = try cancel(redis, Identifiers.jid())
        let with = try commandsFor1000Jobs()
        let total = (without: without.values.reduce(0, +), with: with.values.reduce(0, +))
        print("SteerTests: Redis commands for 1,000 no-op jobs (commands inside scripts included): \(total.without) without a cancel, \(total.with) with one")
        // Per command name (the totals vary with the settle batches' sizes: each batch's script runs a few commands):
        // a command per job would add 1,000 calls of one name. LREM is the settle script's, one per job in both runs.
        for name in Set(without.keys).union(with.keys) {
            XCTAssertLessThan(abs(with[name, default: 0] - without[name, default: 0]), 500,
                              "\(name): \(without[name, default: 0]) without a cancel, \(with[name, default: 0]) with one")
        }
        XCTAssertLessThan(without.filter { $0.key != "lrem" }.values.reduce(0, +), 3000,
                          "besides the settle script's LREM, a few commands per fetch and settle batch: \(without)")
    }

    /// `calls=` per command from INFO commandstats (the whole server: only this test uses it meanwhile), less the
    /// INFO call itself.
    func calls(_ redis: TestRedis) throws -> [String: Int] {
        let info = try redis.command("INFO", "commandstats").string ?? ""
        var out: [String: Int] = [:]
        for line in info.split(whereSeparator: \.isNewline) where line.hasPrefix("cmdstat_") {
            guard let colon = line.firstIndex(of: ":"), let range = line.range(of: "calls="),
                  let end = line[range.upperBound...].firstIndex(of: ",") else { continue }
            out[String(line[line.index(line.startIndex, offsetBy: 8)..<colon])] = Int(line[range.upperBound..<end]) ?? 0
        }
        out["info", default: 0] -= 1
        return out
    }
}

/// A TCP listener on 127.0.0.1 that accepts nothing and never answers: an HTTP call to it waits until its timeout
/// or its cancellation.
final class SilentListener {
    let port: Int
    private let descriptor: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        descriptor = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = Glibc.close(descriptor) }
}
