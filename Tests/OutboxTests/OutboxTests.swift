import WorkersBenchJobs
import Foundation
import WorkersOutbox
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import XCTest

/// Transactional enqueue end to end (docs/outbox.md): real PostgreSQL, real Redis, the real `workerctl relay`
/// and `workerctl worker` processes (killed with SIGKILL where a test says so). The effect counted is
/// `ProbeInsert`'s row in `probe_rows` (no unique key on jid: a job applied twice shows as two rows), written
/// through the job ledger by the real runner.
final class OutboxTests: XCTestCase {
    var database: PostgresTestDatabase!
    var connection: PostgresConnection!

    override func setUpWithError() throws {
        database = try PostgresTestDatabase.create(prefix: "outbox_test")
        connection = try database.connect()
        try BundledSchema.migrate(on: connection)
        try BenchSchema.create(on: connection)
    }

    override func tearDown() {
        connection?.close()
        database?.drop()
    }

    // MARK: helpers

    func count(_ sql: String, _ parameters: [(any PostgresBindable)?] = []) throws -> Int {
        try XCTUnwrap(connection.queryFirst("SELECT (\(sql))::int AS n", parameters)).int("n")
    }

    func start(_ arguments: [String], redis: TestRedis, environment: [String: String] = [:]) throws -> ChildProcess {
        try ChildProcess(executable: TestServices.workerctl, arguments: arguments,
                         environment: ["REDIS_URL": redis.url, "DATABASE_URL": database.url, "LOG_LEVEL": "debug"]
                            .merging(environment) { $1 })
    }

    func workerArguments(_ extra: [String] = []) -> [String] {
        ["worker", "--bench-jobs", "--concurrency", "4", "--poll-interval", "0.2", "--heartbeat-interval", "0.3"] + extra
    }

    /// SIGTERM once the process has started (its signal handlers are installed before it logs "started").
    func stop(_ child: ChildProcess) {
        XCTAssertTrue(eventually { child.stderr.contains("started") || !child.isRunning }, child.stderr)
        child.signal(SIGTERM)
        XCTAssertEqual(child.wait(), 0, child.stderr)
    }

    /// Every jid of `job_outbox` applied exactly once: one ledger row and one probe row each.
    func assertEachJobAppliedOnce(_ expected: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox"), expected, file: file, line: line)
        XCTAssertEqual(try count("SELECT count(*) FROM probe_rows"), expected, "one effect per job", file: file, line: line)
        XCTAssertEqual(try count("""
            SELECT count(*) FROM job_outbox o WHERE (SELECT count(*) FROM probe_rows p WHERE p.jid = o.jid) = 1
              AND EXISTS (SELECT 1 FROM job_ledger l WHERE l.jid = o.jid)
            """), expected, "every outbox jid applied once, through the ledger", file: file, line: line)
    }

    // MARK: rollback, commit, wire format

    func testRolledBackJobsNeverRunCommittedOnesReachRedisInSidekiqFormatWithTheirJid() throws {
        let redis = try TestRedis(database: 72)
        struct Abort: Error {}
        var rolledBack = ""
        XCTAssertThrowsError(try connection.transaction { conn in
            rolledBack = try Outbox.enqueue(NewJob("ProbeInsert", args: ["rolled back"]), on: conn)
            throw Abort()
        })
        try connection.execute("BEGIN")
        let rolledBackSQL = try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('ProbeInsert', '[\"sql rolled back\"]') AS jid")).string("jid")
        try connection.execute("ROLLBACK")

        let committed = try connection.transaction { conn in
            try Outbox.enqueue(NewJob("ProbeInsert", args: ["swift"], extra: ["tags": ["a/b"]]), on: conn)
        }
        let committedSQL = try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('ProbeInsert', '[\"sql\"]', queue => 'default') AS jid")).string("jid")
        let at = Clock.now() + 3600
        let scheduled = try Outbox.enqueue(NewJob("ProbeInsert", args: ["later"]), at: Date(timeIntervalSince1970: at),
                                           on: connection)
        for jid in [rolledBack, rolledBackSQL, committed, committedSQL, scheduled] { XCTAssertTrue(Identifiers.isValidJID(jid), jid) }
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox"), 3, "rolled-back enqueues left no row")

        let relay = try start(["relay"], redis: redis)
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:default") == 2 && redis.int("ZCARD", Keys.schedule) == 1 }, relay.stderr)
        XCTAssertTrue(try eventually { try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL") == 0 })
        stop(relay)

        // Sidekiq's format (shared/docs/sidekiq-wire-format.md §2): Ruby's key order, compact, `/` unescaped,
        // the jid chosen at enqueue, created_at from the enqueue, enqueued_at only on a queue.
        let raw = try redis.command("LRANGE", "queue:default", 0, -1).strings
        let swiftRaw = try XCTUnwrap(raw.first { $0.contains(committed) })
        XCTAssertTrue(swiftRaw.hasPrefix("{\"retry\":true,\"queue\":\"default\",\"tags\":[\"a/b\"],\"class\":\"ProbeInsert\",\"args\":[\"swift\"],\"jid\":\"\(committed)\",\"created_at\":"), swiftRaw)
        let queued = try raw.map { try JobPayload(parsing: $0) }
        XCTAssertEqual(Set(queued.compactMap(\.jid)), [committed, committedSQL])
        for payload in queued {
            XCTAssertEqual(payload.fields.map(\.key), ["retry", "queue"] + (payload.jid == committed ? ["tags"] : [])
                           + ["class", "args", "jid", "created_at", "enqueued_at"])
        }
        let entry = try redis.command("ZRANGE", Keys.schedule, 0, -1, "WITHSCORES").strings
        let scheduledPayload = try JobPayload(parsing: entry[0])
        XCTAssertEqual(scheduledPayload.jid, scheduled)
        XCTAssertNil(scheduledPayload.fields["enqueued_at"], "a scheduled job has no enqueued_at")
        XCTAssertEqual(try XCTUnwrap(Double(entry[1])), at, accuracy: 0.001)
        for jid in [rolledBack, rolledBackSQL] {
            XCTAssertFalse(raw.contains { $0.contains(jid) } || entry[0].contains(jid), "rolled-back job \(jid) reached Redis")
        }

        let worker = try start(workerArguments(), redis: redis)
        XCTAssertTrue(try eventually { try count("SELECT count(*) FROM job_ledger") == 2 && redis.int("LLEN", "queue:default") == 0 },
                      worker.stderr)
        stop(worker)
        XCTAssertEqual(try count("SELECT count(*) FROM probe_rows WHERE jid = ANY($1::text[])", [[committed, committedSQL]]), 2)
        XCTAssertEqual(try count("SELECT count(*) FROM probe_rows WHERE note IN ('rolled back', 'sql rolled back')"), 0,
                       "a rolled-back enqueue never runs")
    }

    func testInvalidInputIsRefusedInsideTheCallersTransaction() throws {
        XCTAssertThrowsError(try Outbox.enqueue(NewJob("Bad Class"), on: connection)) { error in
            XCTAssertEqual(error as? EnqueueError, .invalidClassName("'Bad Class' contains whitespace"))
        }
        XCTAssertThrowsError(try connection.query("SELECT workers_enqueue('ProbeInsert', '{\"not\": \"an array\"}')")) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "22023", "\(error)")
        }
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox"), 0)
    }

    // MARK: relay crashes

    /// SIGKILL the relay with the batch's rows locked and (a) nothing pushed yet, (b) pushed but not marked:
    /// the next relay pushes them (again), and the worker applies each job exactly once.
    func testRelayKilledBeforeAndAfterItsPushEachJobRunsExactlyOnce() throws {
        let redis = try TestRedis(database: 73)
        for step in ["before-push", "after-push"] {
            try redis.flush()
            try connection.execute("TRUNCATE job_outbox, probe_rows, job_ledger")
            try connection.execute("SELECT workers_enqueue('ProbeInsert', jsonb_build_array('n' || i)) FROM generate_series(1, 20) i")

            let first = try start(["relay"], redis: redis, environment: ["WORKERS_OUTBOX_TEST_PAUSE": step])
            XCTAssertTrue(eventually { first.stderr.contains("outbox relay paused at \(step)") }, first.stderr)
            XCTAssertEqual(try redis.int("LLEN", "queue:default"), step == "before-push" ? 0 : 20, step)
            first.signal(SIGKILL)
            first.wait()
            XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL"), 20,
                           "\(step): nothing is marked pushed by a relay that died before its COMMIT")

            let second = try start(["relay"], redis: redis)
            XCTAssertTrue(try eventually { try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL") == 0 }, second.stderr)
            stop(second)
            XCTAssertEqual(try redis.int("LLEN", "queue:default"), step == "before-push" ? 20 : 40,
                           "\(step): pushed at most once more")

            let worker = try start(workerArguments(), redis: redis)
            XCTAssertTrue(try eventually {
                try redis.int("LLEN", "queue:default") == 0 && redis.workingKeys().isEmpty && count("SELECT count(*) FROM job_ledger") == 20
            }, worker.stderr)
            stop(worker)
            try assertEachJobAppliedOnce(20)
        }
    }

    /// A commit wakes the relay through NOTIFY: with a fallback poll of an hour, a job enqueued after the relay's
    /// first round still reaches Redis.
    func testACommitWakesTheRelayThroughNotify() throws {
        let redis = try TestRedis(database: 74)
        let first = try connection.queryFirst("SELECT workers_enqueue('Noop') AS jid")!.string("jid")
        let relay = try start(["relay", "--outbox-poll-interval", "3600"], redis: redis)
        defer { stop(relay) }
        // Its first round (after LISTEN) pushed the first job.
        XCTAssertTrue(try eventually { try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NOT NULL") == 1 }, relay.stderr)
        let second = try connection.transaction { conn in try Outbox.enqueue(NewJob("Noop"), on: conn) }
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:default") == 2 }, relay.stderr)
        XCTAssertEqual(Set(try redis.payloads(list: "queue:default").compactMap(\.jid)), [first, second])
    }

    /// Two relays at once over the same rows never push one row twice (`FOR UPDATE SKIP LOCKED`).
    func testTwoRelaysAtOnceNeverPushARowTwice() throws {
        let redis = try TestRedis(database: 72)
        try connection.execute("SELECT workers_enqueue('Noop') FROM generate_series(1, 3000)")
        let relays = try (0..<2).map { _ in try start(["relay", "--outbox-batch", "50"], redis: redis) }
        XCTAssertTrue(try eventually { try count("SELECT count(*) FROM job_outbox WHERE pushed_at IS NULL") == 0 }, relays[0].stderr)
        relays.forEach(stop)
        let jids = try redis.payloads(list: "queue:default").compactMap(\.jid)
        XCTAssertEqual(jids.count, 3000, "no row pushed twice")
        XCTAssertEqual(Set(jids).count, 3000)
    }

    // MARK: jobs Redis lost

    /// Redis is flushed while the worker (with its relay and lost-job finder) is half way through: the outbox jobs
    /// that were neither done nor anywhere in Redis are pushed again and run once; the done ones are not pushed
    /// again, nor is a non-ledger job (its finishing leaves no trace, so the finder leaves it alone).
    func testRedisFlushedMidRunOutboxJobsArePushedAgainDoneOnesNot() throws {
        let redis = try TestRedis(database: 75)
        let noop = try XCTUnwrap(connection.queryFirst("SELECT workers_enqueue('Noop') AS jid")).string("jid")
        try connection.execute("SELECT workers_enqueue('ProbeInsert', jsonb_build_array('n' || i, 100)) FROM generate_series(1, 40) i")
        let worker = try start(workerArguments(["--concurrency", "2", "--commit-batch", "1", "--outbox-relay",
                                                "--outbox-poll-interval", "0.2", "--lost-job-interval", "0.3"]), redis: redis)
        defer { if worker.isRunning { stop(worker) } }
        XCTAssertTrue(try eventually { try redis.processed() >= 1 && count("SELECT count(*) FROM job_ledger") >= 6 }, worker.stderr)
        // While Redis holds the pending jobs, a round that checked them pushes nothing again.
        XCTAssertTrue(eventually { worker.stderr.contains("outbox: lost-job round") }, worker.stderr)
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE recovered_count > 0"), 0,
                       "a job still in Redis (queue, in flight) is not pushed again")
        let doneBeforeFlush = try connection.query("SELECT jid FROM job_ledger").map { try $0.string("jid") }
        try redis.flush()

        XCTAssertTrue(try eventually(timeout: 60) { try count("SELECT count(*) FROM job_ledger") == 40 }, worker.stderr)
        XCTAssertTrue(try eventually { try redis.int("LLEN", "queue:default") == 0 && redis.workingKeys().isEmpty })
        stop(worker)
        XCTAssertEqual(try count("SELECT count(*) FROM probe_rows"), 40, "one effect per job")
        XCTAssertEqual(try count("SELECT count(DISTINCT jid) FROM probe_rows"), 40)
        XCTAssertEqual(try count("SELECT count(*) FROM job_outbox WHERE recovered_count > 0 AND jid = ANY($1::text[])", [doneBeforeFlush]), 0,
                       "a job done before the flush is not pushed again")
        XCTAssertEqual(try count("SELECT recovered_count FROM job_outbox WHERE jid = $1", [noop]), 0,
                       "a non-ledger job is never pushed again")
        XCTAssertGreaterThan(try count("SELECT count(*) FROM job_outbox WHERE recovered_count = 1"), 0, worker.stderr)
        XCTAssertTrue(worker.stderr.contains("jobs Redis lost pushed again"), worker.stderr)
    }

    // MARK: looking for jids in Redis (JidSearch)

    /// A Sidekiq-format member for `jid` (24 hex digits, as `JobClient` makes them).
    func member(_ jid: String, queue: String) -> String {
        #"{"class":"ProbeInsert","args":["x",1],"queue":""# + queue + #"","jid":""# + jid + #"","retry":true}"#
    }

    func jid(_ n: Int) -> String { String(format: "%024x", n) }

    /// Fills `key` (a list, or a zset when `zset`) with the jids `range`, 1,000 members per command.
    func fill(_ redis: TestRedis, _ key: String, zset: Bool = false, _ range: Range<Int>) throws {
        let connection = try redis.connection()
        defer { connection.close() }
        var commands: [[any RedisArgument]] = []
        for chunk in stride(from: range.lowerBound, to: range.upperBound, by: 1000) {
            var command: [any RedisArgument] = [zset ? "ZADD" : "RPUSH", key]
            for n in chunk..<min(chunk + 1000, range.upperBound) {
                if zset { command.append(Double(n)) }
                command.append(member(jid(n), queue: "a"))
            }
            commands.append(command)
        }
        for reply in try connection.pipeline(commands) { try reply.checked() }
    }

    func testJidsSpreadOverEveryContainerOnLaterPagesAreAllFoundAndOneMissingIsMissing() throws {
        let redis = try TestRedis(database: 74)
        try redis.flush()
        let page = JidSearch.pageSize
        // Every container holds more than one page; the wanted jids sit on the first and the last page of each.
        let containers: [(key: String, zset: Bool, range: Range<Int>)] = [
            ("queue:a", false, 0..<(2 * page + 5)),
            ("queue:b", false, 10_000..<(10_000 + page + 1)),
            ("working:queue:a:host:1:abc", false, 20_000..<(20_000 + page + 1)),
            ("schedule", true, 30_000..<(30_000 + page + 1)),
            ("retry", true, 40_000..<(40_000 + page + 1)),
            ("dead", true, 50_000..<(50_000 + page + 1)),
        ]
        var wanted: Set<String> = []
        for container in containers {
            try fill(redis, container.key, zset: container.zset, container.range)
            wanted.insert(jid(container.range.lowerBound))
            wanted.insert(jid(container.range.upperBound - 1))
        }
        try redis.command("SET", "queue:not-a-list", "x").checked()
        let missing = jid(99_999)
        let connection = try redis.connection()
        defer { connection.close() }
        XCTAssertEqual(try JidSearch.missing(wanted, in: connection), [],
                       "every jid held in a queue, an in-flight list, schedule, retry or dead is found")
        XCTAssertEqual(try JidSearch.missing(wanted.union([missing]), in: connection), [missing],
                       "a jid in no container is missing, and only it")
        try redis.flush()
    }

    /// During a backlog the finder's candidates (the oldest outbox rows) sit at the tail of their queue, where
    /// producers' LPUSH put them first: the search reads lists from the tail, so it finds them in the first page
    /// instead of after the whole backlog (review L8). Counted in Lua calls (`INFO commandstats`), not in time.
    func testAnOldJobAtTheTailOfABacklogIsFoundInTheFirstPage() throws {
        let redis = try TestRedis(database: 27)
        try redis.flush()
        let page = JidSearch.pageSize
        // RPUSH in order, so jid(0) is at the head and the last one at the tail; then the oldest at the tail.
        try fill(redis, "queue:a", 1..<(3 * page))
        try redis.command("RPUSH", "queue:a", member(jid(0), queue: "a")).checked()
        let connection = try redis.connection()
        defer { connection.close() }
        func scriptCalls() throws -> Int {
            let stats = try connection.command("INFO", "commandstats").string ?? ""
            return ["evalsha", "eval"].reduce(0) { total, name in
                total + (stats.firstMatch(of: try! Regex("cmdstat_\(name):calls=([0-9]+)"))
                    .flatMap { Int($0.output[1].substring ?? "") } ?? 0)
            }
        }
        let before = try scriptCalls()
        XCTAssertEqual(try JidSearch.missing([jid(0)], in: connection), [])
        XCTAssertEqual(try scriptCalls() - before, 1, "the oldest job was found only after reading from the head")
        try redis.flush()
    }

    /// Figures of docs/outbox.md ("Cost of looking for a jid in Redis"), only with OUTBOX_MEASURE=1: 100,000 jobs
    /// held (97,000 in one queue, 1,000 each in schedule, retry, dead), 1,000 candidates of which 999 sit in the
    /// last containers read and one is missing — the worst case: two whole passes. Prints the total time and the
    /// longest single Redis call (SLOWLOG, server side). Asserts only what was found.
    func testMeasureJidSearchCost() throws {
        guard ProcessInfo.processInfo.environment["OUTBOX_MEASURE"] == "1" else { throw XCTSkip("OUTBOX_MEASURE=1 to measure") }
        let redis = try TestRedis(database: 75)
        try redis.flush()
        try fill(redis, "queue:a", 0..<97_000)
        try fill(redis, "schedule", zset: true, 97_000..<98_000)
        try fill(redis, "retry", zset: true, 98_000..<99_000)
        try fill(redis, "dead", zset: true, 99_000..<100_000)
        let wanted = Set((99_001..<100_000).map(jid) + [jid(200_000)])
        let connection = try redis.connection()
        defer { connection.close() }
        _ = try connection.command("CONFIG", "SET", "slowlog-log-slower-than", 0)
        _ = try connection.command("CONFIG", "SET", "slowlog-max-len", 100_000)
        _ = try connection.command("SLOWLOG", "RESET")
        let started = Date()
        let missing = try JidSearch.missing(wanted, in: connection)
        let seconds = Date().timeIntervalSince(started)
        let log = try connection.command("SLOWLOG", "GET", 100_000).array ?? []
        _ = try connection.command("CONFIG", "SET", "slowlog-log-slower-than", 10_000)
        _ = try connection.command("CONFIG", "SET", "slowlog-max-len", 128)
        let calls = log.compactMap { $0.array }.filter { ($0.count > 3) && ($0[3].array?.first?.string?.uppercased() == "EVALSHA") }
        let longest = calls.compactMap { $0[2].integer }.max() ?? -1
        print("JidSearch cost: total \(String(format: "%.3f", seconds)) s, \(calls.count) Lua calls, longest \(longest) µs")
        XCTAssertEqual(missing, [jid(200_000)])
        try redis.flush()
    }
}
