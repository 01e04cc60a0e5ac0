import Foundation
import Logging
import PostgresNIO
import WorkersOutbox
import WorkersPostgresNIO
import XCTest

/// `WorkersOutboxNIO.enqueue` against the PostgreSQL of scripts/services (`DATABASE_URL`, migrated by the root's
/// `workerctl migrate`; `WorkersSchema.migrate` here as well, which finds it up to date): the row is written inside
/// the caller's PostgresNIO transaction, is the row `Outbox.enqueue` (libpq) writes for the same job, and a job
/// `Outbox.enqueue` refuses is refused with the same error. Rows are told apart by jid; no Redis.
final class WorkersOutboxNIOTests: XCTestCase {
    struct ReceiptArguments: JobArguments {
        static let className = "NIOOutboxReceiptJob"
        static let queue = "nio_outbox"
        let userID: Int
        let receipt: String
    }

    static var databaseURL: String {
        ProcessInfo.processInfo.environment["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5440/workers"
    }

    /// One libpq connection (WorkersOutbox's), for `Outbox.enqueue` and for reading what was committed.
    var libpq: WorkersOutbox.PostgresConnection!

    override func setUp() async throws {
        _ = try WorkersSchema.migrate(url: Self.databaseURL)
        libpq = try WorkersOutbox.PostgresConnection(url: Self.databaseURL)
    }

    override func tearDown() async throws {
        libpq?.close()
    }

    /// A PostgresNIO connection to `DATABASE_URL` for `body`, closed after it.
    func withNIOConnection<T: Sendable>(_ body: (PostgresNIO.PostgresConnection) async throws -> T) async throws -> T {
        let url = try XCTUnwrap(URLComponents(string: Self.databaseURL))
        let configuration = PostgresNIO.PostgresConnection.Configuration(
            host: url.host ?? "127.0.0.1", port: url.port ?? 5432, username: url.user ?? "postgres",
            password: url.password, database: String(url.path.dropFirst()), tls: .disable)
        let connection = try await PostgresNIO.PostgresConnection.connect(configuration: configuration, id: 1,
                                                                         logger: WorkersOutboxNIO.silentLogger)
        do {
            let result = try await body(connection)
            try await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// The columns of `jid`'s row a producer chose (all but id, jid and created_at), as text; nil if there is none.
    func row(_ jid: String) throws -> [String]? {
        try libpq.queryFirst("""
            SELECT class, args::text AS args, queue, retry::text AS retry, extra::text AS extra,
                   coalesce(extract(epoch FROM run_at)::bigint::text, 'now') AS run_at, (pushed_at IS NULL)::text AS unpushed
              FROM job_outbox WHERE jid = $1
            """, [jid]).map { row in
            try ["class", "args", "queue", "retry", "extra", "run_at", "unpushed"].map { try row.string($0) }
        }
    }

    struct Rollback: Error {}

    func testACommittedTransactionHoldsTheRowOutboxEnqueueWritesForTheSameJob() async throws {
        let at = Date(timeIntervalSince1970: 4_102_444_800)  // 2100-01-01: stays in `schedule`
        let job = NewJob("NIOOutboxReportJob", args: [.int(7), .object(["user_id": .int(7), "b": .string("x/y")])],
                         queue: "nio_low", retry: .int(5), extra: ["tags": .array([.string("nightly")])])
        let (nioJid, typedJid) = try await withNIOConnection { connection in
            try await connection.withTransaction(logger: WorkersOutboxNIO.silentLogger) { connection in
                (try await WorkersOutboxNIO.enqueue(job, at: at, on: connection),
                 try await WorkersOutboxNIO.enqueue(ReceiptArguments(userID: 7, receipt: "r-1"), on: connection))
            }
        }
        let libpqJid = try Outbox.enqueue(job, at: at, on: libpq)
        let typedLibpqJid = try Outbox.enqueue(try NewJob(ReceiptArguments(userID: 7, receipt: "r-1")), on: libpq)

        let written = try XCTUnwrap(try row(nioJid), "the committed transaction's row")
        XCTAssertEqual(written, try row(libpqJid), "the row Outbox.enqueue writes for the same job")
        XCTAssertEqual(written[5], "4102444800", "scheduled at `at`")
        let typed = try XCTUnwrap(try row(typedJid), "the typed enqueue's row")
        XCTAssertEqual(typed, try row(typedLibpqJid))
        XCTAssertEqual(typed[0], "NIOOutboxReceiptJob")
        XCTAssertEqual(typed[2], "nio_outbox", "A.queue")
        XCTAssertNotEqual(nioJid, libpqJid)
    }

    func testARolledBackTransactionLeavesNoRow() async throws {
        let job = NewJob("NIOOutboxRolledBackJob", args: [.int(1)])
        let jid = try await withNIOConnection { connection in
            var enqueued: String?
            do {
                try await connection.withTransaction(logger: WorkersOutboxNIO.silentLogger) { connection in
                    let jid = try await WorkersOutboxNIO.enqueue(job, on: connection)
                    enqueued = jid
                    // Written on the caller's connection: its own transaction sees the row before the rollback.
                    let rows = try await connection.query("SELECT count(*)::int FROM job_outbox WHERE jid = \(jid)",
                                                          logger: WorkersOutboxNIO.silentLogger)
                    for try await count in rows.decode(Int.self) { XCTAssertEqual(count, 1, "visible inside") }
                    throw Rollback()
                }
                XCTFail("the transaction should have thrown")
            } catch let error as PostgresTransactionError {
                XCTAssertTrue(error.closureError is Rollback, "\(error)")
                XCTAssertNil(error.rollbackError)
            }
            return try XCTUnwrap(enqueued)
        }
        XCTAssertNil(try row(jid), "rolled back with the caller's transaction")
    }

    func testAJobOutboxEnqueueRefusesIsRefusedWithTheSameErrorBeforeAnythingIsSent() async throws {
        let refused = [NewJob("Bad Class", args: []), NewJob("Ok", args: [], queue: "no*glob"),
                       NewJob("Ok", args: [], retry: .string("often"))]
        for job in refused {
            var libpqError: EnqueueError?
            XCTAssertThrowsError(try Outbox.enqueue(job, on: libpq)) { libpqError = $0 as? EnqueueError }
            let expected = try XCTUnwrap(libpqError, "Outbox.enqueue refuses \(job.className) with an EnqueueError")
            try await withNIOConnection { connection in
                do {
                    try await WorkersOutboxNIO.enqueue(job, on: connection)
                    XCTFail("\(job.className) on \(job.queue) was enqueued")
                } catch let error as EnqueueError {
                    XCTAssertEqual(error.description, expected.description)
                } catch {
                    XCTFail("not an EnqueueError: \(String(reflecting: error))")
                }
            }
        }
        let far = Date(timeIntervalSince1970: -1)
        await XCTAssertThrowsErrorAsync(try await withNIOConnection { connection in
            try await WorkersOutboxNIO.enqueue(NewJob("Ok"), at: far, on: connection)
        }) { XCTAssertEqual(($0 as? EnqueueError)?.description, "invalid time: -1.0 is not an epoch time") }
        XCTAssertEqual(try libpq.queryFirst("SELECT count(*)::int AS n FROM job_outbox WHERE class IN ('Bad Class', 'Ok')")?
            .int("n"), 0, "nothing sent")
    }
}

func XCTAssertThrowsErrorAsync<T>(_ expression: @autoclosure () async throws -> T, file: StaticString = #filePath,
                                  line: UInt = #line, _ handler: (any Error) -> Void) async {
    do {
        _ = try await expression()
        XCTFail("no error thrown", file: file, line: line)
    } catch {
        handler(error)
    }
}
