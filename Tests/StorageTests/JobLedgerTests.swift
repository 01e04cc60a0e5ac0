import Foundation
import Synchronization
import WorkersTestServices
import XCTest

@testable import WorkersStorage

/// The ledger: a job's effects and its jid row commit together, once.
final class JobLedgerTests: XCTestCase {
    nonisolated(unsafe) static var database: PostgresTestDatabase?
    nonisolated(unsafe) static var pool: PostgresPool?
    var ledger: JobLedger!
    var pool: PostgresPool!

    override class func setUp() {
        super.setUp()
        guard let database = try? PostgresTestDatabase.create(prefix: "storage_test_ledger") else { return }
        Self.database = database
        let pool = PostgresPool(configuration: PostgresPoolConfiguration(url: database.url, maxConnections: 8, checkoutTimeout: .seconds(10)))
        do {
            try BundledSchema.migrate(pool: pool)
            try pool.withConnection { try $0.executeScript("CREATE TABLE effects (jid text NOT NULL, note text)") }
        } catch {
            print("ledger test setup failed: \(error)")
        }
        Self.pool = pool
    }

    override class func tearDown() {
        pool?.shutdown()
        pool = nil
        database?.drop()
        database = nil
        super.tearDown()
    }

    override func setUpWithError() throws {
        pool = try XCTUnwrap(Self.pool, "could not create the test database")
        ledger = JobLedger(pool: pool)
    }

    private func effectCount(_ jid: String) throws -> Int {
        try pool.withConnection { try $0.queryFirst("SELECT count(*) AS n FROM effects WHERE jid = $1", [jid])?.int("n") ?? -1 }
    }

    private func newJID() -> String {
        UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(24).description
    }

    func testSameJidTwiceAppliesOnce() throws {
        let jid = newJID()
        var runs = 0
        let body: (PostgresConnection) throws -> Void = { conn in
            runs += 1
            try conn.execute("INSERT INTO effects (jid, note) VALUES ($1, $2)", [jid, "credited"])
        }
        XCTAssertFalse(try ledger.isApplied(jid: jid))
        XCTAssertEqual(try ledger.runOnce(jid: jid, jobClass: "PendingRewardJob", queue: "default", body), .applied)
        XCTAssertEqual(try ledger.runOnce(jid: jid, jobClass: "PendingRewardJob", queue: "default", body), .alreadyApplied)
        XCTAssertEqual(runs, 1)
        XCTAssertEqual(try effectCount(jid), 1)
        XCTAssertTrue(try ledger.isApplied(jid: jid))

        let row = try XCTUnwrap(try pool.withConnection { try $0.queryFirst("SELECT * FROM job_ledger WHERE jid = $1", [jid]) })
        XCTAssertEqual(try row.string("job_class"), "PendingRewardJob")
        XCTAssertEqual(try row.string("queue"), "default")
        XCTAssertNotNil(try row.optionalDate("finished_at"))
    }

    func testConcurrentDeliveriesOfTheSameJidApplyOnce() throws {
        for _ in 0..<3 {
            let jid = newJID()
            let ledger = self.ledger!
            let outcomes = runOnThreads(6) { _ in
                ThreadOutcome { () -> LedgerOutcome in
                    try ledger.runOnce(jid: jid, jobClass: "ReceiptValidationJob", queue: "critical") { conn in
                        try conn.execute("INSERT INTO effects (jid, note) VALUES ($1, $2)", [jid, "subscription upserted"])
                        try conn.query("SELECT pg_sleep(0.2)")   // keep the transaction open while the others arrive
                    }
                }
            }
            let results = outcomes.compactMap(\.value)
            XCTAssertEqual(results.count, 6, "no delivery failed: \(outcomes)")
            XCTAssertEqual(results.filter { $0 == .applied }.count, 1)
            XCTAssertEqual(results.filter { $0 == .alreadyApplied }.count, 5)
            XCTAssertEqual(try effectCount(jid), 1)
        }
    }

    func testThrowingBodyLeavesNoLedgerRowAndNoEffects() throws {
        let jid = newJID()
        XCTAssertThrowsError(try ledger.runOnce(jid: jid, jobClass: "GeocodeJob", queue: "low") { conn in
            try conn.execute("INSERT INTO effects (jid, note) VALUES ($1, $2)", [jid, "half done"])
            throw TestFailure(reason: "geocoder said 500")
        }) { XCTAssertEqual($0 as? TestFailure, TestFailure(reason: "geocoder said 500")) }
        XCTAssertFalse(try ledger.isApplied(jid: jid))
        XCTAssertEqual(try effectCount(jid), 0)

        // The retry of that job runs its body and applies.
        XCTAssertEqual(try ledger.runOnce(jid: jid, jobClass: "GeocodeJob", queue: "low") { conn in
            try conn.execute("INSERT INTO effects (jid, note) VALUES ($1, $2)", [jid, "done"])
        }, .applied)
        XCTAssertEqual(try effectCount(jid), 1)
    }

    func testSQLErrorInBodyLeavesNothing() throws {
        let jid = newJID()
        XCTAssertThrowsError(try ledger.runOnce(jid: jid, jobClass: "X", queue: "default") { conn in
            try conn.execute("INSERT INTO effects (jid, note) VALUES ($1, $2)", [jid, "x"])
            try conn.execute("INSERT INTO effects (jid, note) VALUES ($1, $2)", [nil, "violates NOT NULL"])
        }) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "23502")
            XCTAssertFalse(PostgresError.isTransient(error), "bad data is a permanent failure")
        }
        XCTAssertFalse(try ledger.isApplied(jid: jid))
        XCTAssertEqual(try effectCount(jid), 0)
    }

    func testLostConnectionDuringBodyIsRetryableAndLeavesNothing() throws {
        let jid = newJID()
        XCTAssertThrowsError(try ledger.runOnce(jid: jid, jobClass: "X", queue: "default") { conn in
            try conn.execute("INSERT INTO effects (jid, note) VALUES ($1, $2)", [jid, "x"])
            try conn.query("SELECT pg_terminate_backend(pg_backend_pid())")   // the server goes away mid-job
        }) { error in
            XCTAssertTrue(PostgresError.isConnectionFailure(error), "\(error)")
            XCTAssertTrue(PostgresError.isTransient(error))
        }
        XCTAssertFalse(try ledger.isApplied(jid: jid))
        XCTAssertEqual(try effectCount(jid), 0)
        XCTAssertEqual(try ledger.runOnce(jid: jid, jobClass: "X", queue: "default") { _ in }, .applied)
    }

    func testRunOnceOnACallerOwnedConnection() throws {
        let jid = newJID()
        try pool.withConnection { conn in
            XCTAssertEqual(try ledger.runOnce(jid: jid, jobClass: "X", queue: "q", on: conn) { _ in }, .applied)
            XCTAssertEqual(try ledger.runOnce(jid: jid, jobClass: "X", queue: "q", on: conn) { _ in XCTFail("ran twice") }, .alreadyApplied)
        }
    }

    func testPurgeRemovesOldRowsOnly() throws {
        let old = newJID(), recent = newJID()
        XCTAssertEqual(try ledger.runOnce(jid: old, jobClass: "X", queue: "q") { _ in }, .applied)
        XCTAssertEqual(try ledger.runOnce(jid: recent, jobClass: "X", queue: "q") { _ in }, .applied)
        try pool.withConnection { conn in
            try conn.execute("UPDATE job_ledger SET finished_at = now() - interval '40 days' WHERE jid = $1", [old])
        }
        XCTAssertGreaterThanOrEqual(try ledger.purge(finishedBefore: Date().addingTimeInterval(-30 * 86_400)), 1)
        XCTAssertFalse(try ledger.isApplied(jid: old))
        XCTAssertTrue(try ledger.isApplied(jid: recent))
    }
}
