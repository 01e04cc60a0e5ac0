import Foundation
import Logging
import PostgresNIO
import WorkersClient

// The names a service writes beside `WorkersOutboxNIO.enqueue`: the job, its typed arguments and the refusal.
@_exported import struct WorkersQueue.NewJob
@_exported import enum WorkersQueue.EnqueueError
@_exported import protocol WorkersQueue.JobArguments
@_exported import enum WorkersQueue.JSONValue
@_exported import struct WorkersQueue.JSONObject

/// Transactional enqueue on the service's own PostgresNIO connection (docs/outbox.md, "From a PostgresNIO / Fluent
/// service"): the `job_outbox` row is written by the SQL function `workers_enqueue` on `connection`, so inside the
/// caller's transaction (`connection.withTransaction { … }`, Fluent's `database.transaction { … }` on a
/// PostgreSQL database) it commits or rolls back with the caller's own writes; outside one it commits at once. The
/// relay (`workerctl relay`) pushes committed rows to Redis with the jid returned here.
///
/// Same checks as every other way in: the job is prepared by WorkersQueue's `OutboxEnqueueCall`, the preparation
/// `Outbox.enqueue` (WorkersOutbox, libpq) uses, so a job it refuses is refused here with the same `EnqueueError`
/// before anything is sent; the SQL function then applies what it applies to every language (payload size, stripped
/// runtime fields, clamped times) and, refusing, raises a `PSQLError` that aborts the caller's transaction.
///
/// Stateless: each call sends one statement on the connection it is given and waits for its row; PostgresNIO
/// orders the statements of one connection, so the caller must not share an open transaction's connection with
/// concurrent work it does not mean to include.
public enum WorkersOutboxNIO {
    /// The logger queries are sent with when the caller passes none: discards everything.
    public static let silentLogger = Logger(label: "workers.outbox.nio", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Enqueues `job` on `connection` to run now, or at `at` when that is in the future (then it waits in
    /// `schedule`). Returns the jid the job keeps in Redis.
    ///
    /// Throws `EnqueueError` for a job Sidekiq would refuse (nothing is sent), else the `PSQLError` of the statement.
    @discardableResult
    public static func enqueue(_ job: NewJob, at: Date? = nil, on connection: PostgresConnection,
                               logger: Logger = silentLogger) async throws -> String {
        let call = try OutboxEnqueueCall(job, at: at)
        var binds = PostgresBindings(capacity: 7)
        binds.append(call.className)
        binds.append(call.args)
        binds.append(call.queue)
        binds.append(call.runAt)
        binds.append(call.retry)
        binds.append(call.extra)
        binds.append(call.jid)
        let rows = try await connection.query(PostgresQuery(unsafeSQL: OutboxEnqueueCall.sql, binds: binds), logger: logger)
        var jid: String?
        for try await (value) in rows.decode(String.self) where jid == nil { jid = value }
        guard let jid else { throw WorkersOutboxNIOError.noJid(className: call.className) }
        return jid
    }

    /// Enqueues `arguments` as a job of `A.className` on `queue` (default `A.queue`), now or at `at`; encoded
    /// exactly as the worker's job decodes them (`JobArguments.sidekiqArgs()`), as `WorkersClient.enqueue` does.
    @discardableResult
    public static func enqueue<A: JobArguments>(_ arguments: A, queue: String? = nil, at: Date? = nil,
                                                on connection: PostgresConnection,
                                                logger: Logger = silentLogger) async throws -> String {
        try await enqueue(NewJob(arguments, queue: queue), at: at, on: connection, logger: logger)
    }
}

/// What went wrong with a `workers_enqueue` call that PostgreSQL accepted. Names the class, never arguments.
public enum WorkersOutboxNIOError: Error, CustomStringConvertible, Sendable {
    /// The statement returned no row (a `workers_enqueue` that is not the runtime's: run `workerctl migrate`).
    case noJid(className: String)

    public var description: String {
        switch self {
        case .noJid(let className): return "workers_enqueue returned no jid for a \(className) job"
        }
    }
}
