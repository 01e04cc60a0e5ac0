import WorkersBenchJobs
import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// The exactly-once ledger at work inside the worker runtime, against real Redis and PostgreSQL.
final class LedgerTests: XCTestCase {
    var redis: TestRedis!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var processes: [WorkerProcess] = []

    override func setUpWithError() throws {
        redis = try TestRedis(database: 7)
        database = try PostgresTestDatabase.create(prefix: "ledger_test")
        pool = PostgresPool(url: database.url, maxConnections: 8)
        _ = try BundledSchema.migrate(pool: pool)
        try BenchSchema.create(pool: pool)  // probe_rows, which ProbeInsert writes
    }

    override func tearDown() {
        for process in processes { process.shutdown() }
        pool?.shutdown()
        database?.drop()
    }

    func start(concurrency: Int = 4, commitBatch: Int = WorkerConfiguration().commitBatch) throws -> WorkerProcess {
        var configuration = WorkerHarness(redis: redis).configuration(concurrency: concurrency)
        configuration.orphanSweepInterval = .seconds(0.3)
        configuration.commitBatch = commitBatch
        var logger = Logger(label: "ledger-test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: configuration, registry: BenchJobs.registry(),
                                        database: JobDatabase(pool: pool), logger: logger)
        try process.start()
        processes.append(process)
        return process
    }

    func rows(_ jid: String? = nil) throws -> [(jid: String, count: Int)] {
        try pool.withConnection { connection in
            try connection.query("SELECT jid, count(*)::bigint AS n FROM probe_rows GROUP BY jid").map {
                (try $0.string("jid"), Int(try $0.int64("n")))
            }
        }
    }

    func testSameJobDeliveredTwiceAppliesOnce() throws {
        let payload = try JobClient.payload(for: NewJob("ProbeInsert", args: ["twice"]), createdAt: Clock.now(), enqueuedAt: Clock.now())
        try redis.command("LPUSH", "queue:default", payload.serialized(), payload.serialized())
        _ = try start()
        XCTAssertTrue(try eventually { try redis.processed() == 2 })
        XCTAssertEqual(try rows().map(\.count), [1])
        XCTAssertEqual(try rows().first?.jid, payload.jid)
        XCTAssertEqual(try redis.failed(), 0)
    }

    func testWorkerKilledBetweenCommitAndAcknowledgeAppliesOnce() throws {
        // The commit happened (ledger row and effect), then the process died before acknowledging:
        // its job is still in its in-flight list and its heartbeat is gone.
        let payload = try JobClient.payload(for: NewJob("ProbeInsert", args: ["crash"]), createdAt: Clock.now(), enqueuedAt: Clock.now())
        let jid = try XCTUnwrap(payload.jid)
        let outcome = try JobLedger(pool: pool).runOnce(jid: jid, jobClass: "ProbeInsert", queue: "default") { connection in
            try connection.execute("INSERT INTO probe_rows (jid, note) VALUES ($1, 'crash')", [jid])
        }
        XCTAssertEqual(outcome, .applied)
        try redis.command("LPUSH", Keys.working(queue: "default", identity: "gone:999:0123456789ab"), payload.serialized())
        _ = try start()
        XCTAssertTrue(try eventually { try redis.processed() == 1 })
        XCTAssertEqual(try rows().map(\.count), [1])
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead) + redis.int("ZCARD", Keys.retry), 0)
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty })
    }

    /// ProbeInsert is a group-commit job: the restart cuts shared transactions.
    func testPostgresRestartMidRunLosesAndDoublesNothing() throws {
        try restartMidRun(commitBatch: WorkerConfiguration().commitBatch)
    }

    func testPostgresRestartMidRunWithOneCommitPerJobLosesAndDoublesNothing() throws {
        try restartMidRun(commitBatch: 1)
    }

    private func restartMidRun(commitBatch: Int) throws {
        // Each job holds its transaction open 4 ms, so the run lasts at least 2.5 s on 8 threads and the
        // restart lands while transactions are open, however fast the machine.
        let count = 5000
        let jids = try redis.client.enqueueMany((0..<count).map { NewJob("ProbeInsert", args: [.string("n\($0)"), 4]) })
        _ = try start(concurrency: 8, commitBatch: commitBatch)
        XCTAssertTrue(try eventually { try redis.processed() > count / 5 })
        let restart = try ChildProcess.run(TestServices.repositoryRoot.appendingPathComponent("scripts/services"),
                                           ["restart-postgres"])
        XCTAssertEqual(restart.status, 0, restart.stderr)
        XCTAssertLessThan(try rows().count, count, "the restart came after the run: it proves nothing")
        // Runs cut by the restart failed with a connection error and wait in `retry`; make them due.
        XCTAssertTrue(try eventually(timeout: 120) {
            for member in try redis.command("ZRANGE", Keys.retry, 0, -1).strings {
                try redis.command("ZADD", Keys.retry, "XX", 0, member)
            }
            return try rows().count == count
        })
        let counted = try rows()
        XCTAssertEqual(Set(counted.map(\.jid)), Set(jids))
        XCTAssertEqual(counted.filter { $0.count != 1 }.map(\.jid), [], "rows applied more than once")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        XCTAssertGreaterThan(try redis.failed(), 0, "the restart cut no transaction")
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 0 && redis.workingKeys().isEmpty })
    }
}
