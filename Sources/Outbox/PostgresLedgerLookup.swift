import Foundation
import WorkersQueue
import WorkersStorage

/// Reads `job_ledger` by jid: the `JobLedgerLookup` that tells a finished ledger job ("done") to
/// `WorkersClient.status(jid:ledger:)` / `explain(jid:ledger:)`, `JobExplain` and `workerctl jobs explain`
/// (docs/writing-jobs.md, "What became of my job"). Only jobs whose class writes the ledger (`JobOptions.usesLedger`,
/// `context.transaction`) have a row, kept for the ledger's retention (`workerctl relay --ledger-retention`).
///
/// Two sources of a connection, one query: `init(pool:)` borrows one from the service's pool for each call;
/// `init(url:)` opens one per call and closes it (a command-line tool: a job found in Redis never needs the database).
/// Immutable; any thread (each call uses its own connection). Errors: `LedgerLookupError` when no connection could be
/// had from a URL (the URL named with its password redacted), else what the query throws (`PostgresError`).
public struct PostgresLedgerLookup: JobLedgerLookup {
    private enum Source: Sendable {
        case pool(PostgresPool)
        case url(String)
    }

    private let source: Source

    /// Reads through `pool` (one connection for the duration of each call).
    public init(pool: PostgresPool) { source = .pool(pool) }

    /// Reads through a connection to `url` opened for each call.
    public init(url: String) { source = .url(url) }

    public func row(jid: String) throws -> LedgerRow? {
        switch source {
        case .pool(let pool):
            return try pool.withConnection { try Self.row(jid: jid, on: $0) }
        case .url(let url):
            let connection: PostgresConnection
            do { connection = try PostgresConnection(url: url) } catch {
                throw LedgerLookupError(url: PostgresURL.redacted(url), reason: "\(error)")
            }
            defer { connection.close() }
            return try Self.row(jid: jid, on: connection)
        }
    }

    /// The ledger row of `jid` on a connection the caller owns.
    public static func row(jid: String, on connection: PostgresConnection) throws -> LedgerRow? {
        guard let row = try connection.queryFirst(
            """
            SELECT job_class, queue, extract(epoch FROM started_at)::float8 AS started_at,
                   extract(epoch FROM finished_at)::float8 AS finished_at
            FROM job_ledger WHERE jid = $1
            """, [jid]) else { return nil }
        func date(_ column: String) throws -> Date? {
            guard !(try row.isNull(column)), let seconds = Bounded.epochSeconds(try row.double(column)) else { return nil }
            return Date(timeIntervalSince1970: seconds)
        }
        return LedgerRow(className: try row.string("job_class"), queue: try row.string("queue"),
                         startedAt: try date("started_at"), finishedAt: try date("finished_at"))
    }
}

/// `PostgresLedgerLookup(url:)` could not connect: the URL (password redacted) and why.
public struct LedgerLookupError: Error, Sendable, CustomStringConvertible {
    public let url: String
    public let reason: String

    public var description: String { "cannot connect to PostgreSQL at \(url) to read job_ledger: \(reason)" }
}
