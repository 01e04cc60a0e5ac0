import Foundation
import Logging
import PostgresNIO
import WorkersOutbox
import WorkersPostgresNIO
import XCTest

/// `WorkersOutboxNIO.enqueue` against the PostgreSQL of scripts/services (`DATABASE_URL`, migrated by the root's
/// `workerctl migrate`; `WorkersSchema.migrate` here as well, which finds it up to date): the row is written inside
/// the caller's PostgresNIO transaction, is the row `Outbox.enqueue` (libpq) writes for the same job, and a job
/// `Outbox.enqueue` refuses is refused with the same error, and the root's `workerctl relay` pushes the row as it
/// pushes `Outbox.enqueue`'s (Redis database 200). Rows are told apart by jid.
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

    /// The root's `workerctl` (scripts/test builds it first): `WORKERS_REPO_ROOT`, else this file's repository.
    static var workerctl: String {
        let root = ProcessInfo.processInfo.environment["WORKERS_REPO_ROOT"].map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/workerctl").path
    }

    /// The payload in `queue:<queue>` of `redis` whose jid is `jid`, without the fields that differ per push
    /// (jid, created_at, enqueued_at).
    func pushedPayload(_ jid: String, queue: String, on redis: RedisConnection) throws -> JSONObject? {
        let members = try redis.command("LRANGE", "queue:\(queue)", "0", "-1").array ?? []
        for member in members {
            guard let text = member.string, let object = try JSONValue.parse(text).objectValue,
                  object["jid"] == .string(jid) else { continue }
            return JSONObject(object.entries.filter { !["jid", "created_at", "enqueued_at"].contains($0.key) })
        }
        return nil
    }

    func testACommittedRowIsPushedByTheRootsRelayAsOutboxEnqueuesIs() async throws {
        let baseURL = ProcessInfo.processInfo.environment["REDIS_URL"] ?? "redis://127.0.0.1:6390/0"
        let redisURL = (baseURL.range(of: "/", options: .backwards).map { String(baseURL[..<$0.lowerBound]) } ?? baseURL)
            + "/200"  // this class's Redis database
        let redis = try RedisConnection(url: redisURL)
        defer { redis.close() }
        _ = try redis.command("FLUSHDB").checked()
        let arguments = ReceiptArguments(userID: 9, receipt: "relayed")
        let nioJid = try await withNIOConnection { connection in
            try await connection.withTransaction(logger: WorkersOutboxNIO.silentLogger) { connection in
                try await WorkersOutboxNIO.enqueue(arguments, on: connection)
            }
        }
        let libpqJid = try Outbox.enqueue(try NewJob(arguments), on: libpq)

        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: Self.workerctl), "build the root package: \(Self.workerctl)")
        let relay = Process()
        relay.executableURL = URL(fileURLWithPath: Self.workerctl)
        relay.arguments = ["relay"]
        relay.environment = ProcessInfo.processInfo.environment.merging(
            ["REDIS_URL": redisURL, "DATABASE_URL": Self.databaseURL, "LOG_LEVEL": "warning"]) { $1 }
        try relay.run()
        let pushed = "SELECT count(*)::int AS n FROM job_outbox WHERE jid IN ($1, $2) AND pushed_at IS NOT NULL"
        for _ in 0..<600 {  // until both are pushed, at most 30 s
            if try libpq.queryFirst(pushed, [nioJid, libpqJid])?.int("n") == 2 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        relay.terminate()
        relay.waitUntilExit()
        XCTAssertEqual(relay.terminationStatus, 0, "the relay stops cleanly on SIGTERM")

        let nioPayload = try XCTUnwrap(try pushedPayload(nioJid, queue: ReceiptArguments.queue, on: redis),
                                       "the row enqueued on PostgresNIO reached Redis with its jid")
        XCTAssertEqual(nioPayload, try pushedPayload(libpqJid, queue: ReceiptArguments.queue, on: redis),
                       "the payload Outbox.enqueue's row becomes")
        XCTAssertEqual(nioPayload["class"], .string("NIOOutboxReceiptJob"))
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
