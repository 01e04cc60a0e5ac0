import Foundation
import Synchronization
import WorkersTestServices
import XCTest

@testable import WorkersStorage

/// The pool: concurrency, checkout timeout, recovery after the server drops every session.
final class PostgresPoolTests: XCTestCase {
    nonisolated(unsafe) static var database: PostgresTestDatabase?

    override class func setUp() {
        super.setUp()
        database = try? PostgresTestDatabase.create(prefix: "storage_test_pool")
    }

    override class func tearDown() {
        database?.drop()
        database = nil
        super.tearDown()
    }

    private func makePool(max: Int, checkoutTimeout: Duration = .seconds(10)) throws -> PostgresPool {
        let database = try XCTUnwrap(Self.database, "could not create the test database")
        return PostgresPool(configuration: PostgresPoolConfiguration(
            url: database.url, maxConnections: max, checkoutTimeout: checkoutTimeout,
            initialReconnectDelay: .milliseconds(20), maxReconnectDelay: .milliseconds(200)))
    }

    /// Terminates every other session on the test database and waits until they are gone.
    private func terminateOtherSessions() throws -> Int {
        let admin = try XCTUnwrap(Self.database).connect()
        defer { admin.close() }
        return try admin.query("""
            SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid()
            """).count
    }

    func testManyThreadsShareASmallPool() throws {
        let pool = try makePool(max: 4)
        defer { pool.shutdown() }
        try pool.withConnection { conn in
            try conn.executeScript("DROP TABLE IF EXISTS counter; CREATE TABLE counter (n integer NOT NULL); INSERT INTO counter VALUES (0);")
        }
        let maxSeen = Mutex<Int>(0)
        let results = runOnThreads(16) { _ in
            ThreadOutcome {
                for _ in 0..<25 {
                    try pool.withConnection { conn in
                        try conn.transaction { tx in
                            try tx.execute("UPDATE counter SET n = n + $1", [1])
                        }
                    }
                    let open = pool.statistics.open
                    maxSeen.withLock { $0 = max($0, open) }
                }
                return true
            }
        }
        XCTAssertEqual(results.compactMap(\.value).count, 16, "\(results)")
        XCTAssertEqual(try pool.withConnection { try $0.queryFirst("SELECT n FROM counter")?.int("n") }, 400)
        XCTAssertLessThanOrEqual(maxSeen.withLock { $0 }, 4)
        XCTAssertLessThanOrEqual(pool.statistics.open, 4)
        XCTAssertEqual(pool.statistics.inUse, 0)
    }

    func testCheckoutTimesOutWhenThePoolIsExhausted() throws {
        let pool = try makePool(max: 1, checkoutTimeout: .milliseconds(200))
        defer { pool.shutdown() }
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let holder = Thread {
            _ = try? pool.withConnection { _ in
                holding.signal()
                release.wait()
            }
        }
        holder.start()
        holding.wait()
        XCTAssertThrowsError(try pool.withConnection { _ in }) { error in
            XCTAssertEqual((error as? PostgresError)?.category, .poolTimeout)
            XCTAssertTrue(PostgresError.isTransient(error))
        }
        release.signal()
        // Once released, the single connection is handed to the next caller.
        XCTAssertEqual(try pool.withConnection { try $0.queryFirst("SELECT 1 AS one")?.int("one") }, 1)
    }

    func testWaitingCheckoutGetsTheReturnedConnection() throws {
        let pool = try makePool(max: 1, checkoutTimeout: .seconds(5))
        defer { pool.shutdown() }
        let outcomes = runOnThreads(6) { index in
            ThreadOutcome { try pool.withConnection { conn -> Int32 in
                try conn.query("SELECT pg_sleep(0.05)")
                return conn.backendPID
            } }
        }
        let pids = Set(outcomes.compactMap(\.value))
        XCTAssertEqual(outcomes.compactMap(\.value).count, 6, "\(outcomes)")
        XCTAssertEqual(pids.count, 1, "one connection reused by every caller")
    }

    func testPoolRecoversAfterEveryBackendIsTerminated() throws {
        let pool = try makePool(max: 3)
        defer { pool.shutdown() }
        // Open three sessions at once.
        let before = Set(runOnThreads(3) { _ in
            ThreadOutcome { try pool.withConnection { conn -> Int32 in
                try conn.query("SELECT pg_sleep(0.1)")
                return conn.backendPID
            } }
        }.compactMap(\.value))
        XCTAssertEqual(pool.statistics.open, 3)
        XCTAssertEqual(pool.statistics.idle, 3)

        XCTAssertGreaterThanOrEqual(try terminateOtherSessions(), 3)

        // Every later checkout works: the dead idle sessions are detected and replaced.
        var after = Set<Int32>()
        for _ in 0..<10 {
            after.insert(try pool.withConnection { conn in
                try conn.query("SELECT 1")
                return conn.backendPID
            })
        }
        XCTAssertTrue(after.isDisjoint(with: before), "new sessions replaced the terminated ones")
        XCTAssertLessThanOrEqual(pool.statistics.open, 3)
    }

    func testJobThatLosesItsConnectionGetsARetryableErrorAndThePoolHeals() throws {
        let pool = try makePool(max: 2)
        defer { pool.shutdown() }
        var lostPID: Int32 = 0
        XCTAssertThrowsError(try pool.withConnection { conn in
            lostPID = conn.backendPID
            try conn.transaction { tx in
                try tx.query("SELECT 1")
                _ = try self.terminateOtherSessions()   // simulates a server restart mid-job
                try tx.query("SELECT 2")
            }
        }) { error in
            XCTAssertTrue(PostgresError.isConnectionFailure(error), "\(error)")
            XCTAssertTrue(PostgresError.isTransient(error))
        }
        XCTAssertEqual(pool.statistics.open, 0, "the broken connection was closed, not returned")
        let newPID = try pool.withConnection { conn -> Int32 in
            try conn.query("SELECT 1")
            return conn.backendPID
        }
        XCTAssertNotEqual(newPID, lostPID)
    }

    func testBodyErrorKeepsAHealthyConnectionAndRollsBackAnOpenTransaction() throws {
        let pool = try makePool(max: 1)
        defer { pool.shutdown() }
        let pid = try pool.withConnection { $0.backendPID }
        XCTAssertThrowsError(try pool.withConnection { conn in
            try conn.execute("BEGIN")
            throw TestFailure(reason: "left a transaction open")
        })
        let (samePID, inTransaction) = try pool.withConnection { ($0.backendPID, $0.isInTransaction) }
        XCTAssertEqual(samePID, pid)
        XCTAssertFalse(inTransaction)
    }

    func testUnreachableServerGivesConnectionErrorsWithBackoff() throws {
        let pool = PostgresPool(configuration: PostgresPoolConfiguration(
            url: "postgres://postgres@127.0.0.1:1/nothing?connect_timeout=1", maxConnections: 2,
            checkoutTimeout: .milliseconds(100), initialReconnectDelay: .seconds(30), maxReconnectDelay: .seconds(60)))
        defer { pool.shutdown() }
        XCTAssertThrowsError(try pool.withConnection { _ in }) { XCTAssertTrue(PostgresError.isConnectionFailure($0)) }
        XCTAssertEqual(pool.statistics.connectAttempts, 1)
        // Within the backoff window (30 s; the checkout waits 100 ms) a checkout fails with the last connection
        // error without trying to connect again.
        XCTAssertThrowsError(try pool.withConnection { _ in }) { XCTAssertTrue(PostgresError.isConnectionFailure($0)) }
        XCTAssertEqual(pool.statistics.connectAttempts, 1, "a checkout inside the backoff window tried to connect")
        XCTAssertEqual(pool.statistics.open, 0)
    }

    func testShutdownRefusesCheckouts() throws {
        let pool = try makePool(max: 1)
        try pool.withConnection { try $0.query("SELECT 1") }
        pool.shutdown()
        XCTAssertEqual(pool.statistics.open, 0)
        XCTAssertThrowsError(try pool.withConnection { _ in }) { error in
            XCTAssertEqual((error as? PostgresError)?.category, .poolClosed)
            XCTAssertFalse(PostgresError.isTransient(error))
        }
    }
}
