import Foundation
import Logging
import WorkersStorage

/// PostgreSQL for jobs: the exactly-once ledger and the pool it draws from. Shared by every pool
/// thread (the pool hands each connection to one thread at a time).
public struct JobDatabase: Sendable {
    public let pool: PostgresPool
    public let ledger: JobLedger

    public init(pool: PostgresPool) {
        self.pool = pool
        self.ledger = JobLedger(pool: pool)
    }

    /// A pool of at most `maxConnections` sessions to `url` (`postgres://…`), for a service that runs workers in its
    /// own executable without naming Storage's types. Opens no connection yet (the first job that needs one does).
    /// The schema (`job_ledger`, …) is `workerctl migrate`'s; give the pool at least the worker's `concurrency`.
    public init(url: String, maxConnections: Int, logger: Logger) {
        self.init(pool: PostgresPool(configuration: PostgresPoolConfiguration(url: url, maxConnections: maxConnections),
                                     logger: logger))
    }

    public func isApplied(jid: String) throws -> Bool { try ledger.isApplied(jid: jid) }

    /// `isApplied` on a connection the caller owns (inside a shared transaction it also sees this
    /// transaction's own, not yet committed, ledger rows).
    func isApplied(jid: String, on connection: PostgresConnection) throws -> Bool {
        try ledger.isApplied(jid: jid, on: connection)
    }
}

/// The database is not configured for this process, but a job needs it.
public struct DatabaseUnavailable: Error, CustomStringConvertible {
    public var description: String { "this job needs PostgreSQL but the worker runs without a database" }
}

extension JobContext {
    /// Runs `body` in one transaction together with this job's ledger row: the job's effects
    /// commit exactly once however often the job is delivered. Returns `.alreadyApplied` (and does
    /// not run `body`) when an earlier delivery committed. The job must not COMMIT itself; throwing
    /// rolls everything back. A lost connection throws a transient `PostgresError`: the job is retried.
    ///
    /// A group-commit job on the fast path (`SharedTransaction.claimedRow`) runs `body` straight in the
    /// group's transaction, its ledger row already inserted: if `body` throws, the pool thread rolls the
    /// whole group back and runs it again with a savepoint per job, so the outcome is the same.
    @discardableResult
    public func transaction(_ body: (PostgresConnection) throws -> Void) throws -> LedgerOutcome {
        guard let database else { throw JobError.permanent(DatabaseUnavailable().description) }
        if let shared = sharedTransaction {
            if let row = shared.claimedRow {
                guard row.use() else { return .alreadyApplied }
                do { try body(shared.connection) } catch {
                    row.markBodyFailed()
                    throw error
                }
                return .applied
            }
            return try database.ledger.runOnce(jid: jid, jobClass: className, queue: queue, on: shared.connection, body)
        }
        return try database.ledger.runOnce(jid: jid, jobClass: className, queue: queue, body)
    }

    /// A pooled connection for reads outside the ledger transaction (e.g. loading the row a job
    /// works on before calling an external service). For a group-commit job it is the shared
    /// transaction's connection.
    public func withConnection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        guard let database else { throw JobError.permanent(DatabaseUnavailable().description) }
        if let shared = sharedTransaction { return try body(shared.connection) }
        return try database.pool.withConnection(body)
    }
}

extension JobContext {
    /// `transaction(_:)` for an `AsyncJob`: the same ledger transaction (exactly once per jid, `.alreadyApplied`
    /// without running `body` after an earlier delivery committed), run on a Dispatch thread and awaited, so that
    /// libpq's blocking calls never hold a thread of Swift's cooperative pool. Cancelling the task does not
    /// interrupt a transaction under way: it commits or rolls back as it would have.
    @discardableResult
    public func transaction(_ body: @escaping @Sendable (PostgresConnection) throws -> Void) async throws -> LedgerOutcome {
        try await BlockingWork.run { try self.transaction(body) }
    }

    /// `withConnection(_:)` for an `AsyncJob`, on a Dispatch thread as `transaction` (async).
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await BlockingWork.run { try self.withConnection(body) }
    }
}

/// Blocking work (libpq) an async job awaits: run on a concurrent Dispatch queue, whose threads may block, never
/// on the cooperative pool (a handful of threads, one per core). Any task may call it.
enum BlockingWork {
    private static let queue = DispatchQueue(label: "workers.blocking-work", attributes: .concurrent)

    static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try work() }) }
        }
    }
}
