import Foundation
import Storage

/// The state of `job_outbox` at a glance (`workerctl outbox status`, the dashboard's outbox page).
public struct OutboxSummary: Sendable, Equatable {
    /// Committed rows the relay has not pushed yet.
    public var pending: Int
    /// Seconds since the oldest pending row was committed (nil when none is pending): how far the relay is behind.
    public var oldestPendingAge: Double?
    /// Rows the relay could not turn into a payload (marked with their `error`, never pushed).
    public var errored: Int
    /// Pushed rows still kept (the lost-job finder's window).
    public var pushedKept: Int
    /// Rows pushed in the hour before `now`.
    public var pushedLastHour: Int
    /// Rows the lost-job finder pushed again at least once.
    public var recovered: Int
    /// When the relay last pushed a row (epoch seconds), nil if never.
    public var lastPushedAt: Double?
}

/// One row of `job_outbox`, for listing. `args` is the JSON text as stored.
public struct OutboxEntry: Sendable, Equatable {
    public var id: Int
    public var jid: String
    public var className: String
    public var queue: String
    public var args: String
    public var createdAt: Double
    public var runAt: Double?
    public var pushedAt: Double?
    public var error: String?
    public var recoveredCount: Int
    public var recoveredAt: Double?
}

/// Which rows `OutboxAdmin.entries` lists.
public enum OutboxEntryKind: String, Sendable, CaseIterable {
    /// Not pushed yet, oldest first (the relay's order).
    case pending
    /// Refused by the relay, newest first.
    case errored
    /// Pushed again by the lost-job finder, latest recovery first.
    case recovered
}

/// Reading `job_outbox` for operators (docs/outbox.md). Read-only: the relay and the finder are the only
/// writers. Each call is one statement on the caller's connection (used by one thread at a time).
public enum OutboxAdmin {
    public static func summary(_ connection: PostgresConnection) throws -> OutboxSummary {
        let row = try connection.queryFirst("""
            SELECT count(*) FILTER (WHERE pushed_at IS NULL) AS pending,
                   extract(epoch FROM clock_timestamp() - min(created_at) FILTER (WHERE pushed_at IS NULL))::float8 AS oldest_age,
                   count(*) FILTER (WHERE error IS NOT NULL) AS errored,
                   count(*) FILTER (WHERE pushed_at IS NOT NULL AND error IS NULL) AS pushed_kept,
                   count(*) FILTER (WHERE error IS NULL AND pushed_at >= clock_timestamp() - interval '1 hour') AS pushed_last_hour,
                   count(*) FILTER (WHERE recovered_count > 0) AS recovered,
                   extract(epoch FROM max(pushed_at))::float8 AS last_pushed_at
            FROM job_outbox
            """)
        guard let row else { throw PostgresError(category: .query, message: "no summary row", query: "job_outbox summary") }
        return OutboxSummary(pending: try row.int("pending"), oldestPendingAge: try row.optionalDouble("oldest_age"),
                             errored: try row.int("errored"), pushedKept: try row.int("pushed_kept"),
                             pushedLastHour: try row.int("pushed_last_hour"), recovered: try row.int("recovered"),
                             lastPushedAt: try row.optionalDouble("last_pushed_at"))
    }

    /// At most `limit` (1...1000) rows of `kind`, in the order its doc comment gives.
    public static func entries(_ connection: PostgresConnection, _ kind: OutboxEntryKind, limit: Int = 50) throws -> [OutboxEntry] {
        let limit = min(max(limit, 1), 1000)
        let clause: String
        switch kind {
        case .pending: clause = "WHERE pushed_at IS NULL ORDER BY id"
        case .errored: clause = "WHERE error IS NOT NULL ORDER BY id DESC"
        case .recovered: clause = "WHERE recovered_count > 0 ORDER BY recovered_at DESC NULLS LAST, id DESC"
        }
        return try connection.query("""
            SELECT id, jid, class, queue, args::text AS args,
                   extract(epoch FROM created_at)::float8 AS created_at, extract(epoch FROM run_at)::float8 AS run_at,
                   extract(epoch FROM pushed_at)::float8 AS pushed_at, error, recovered_count,
                   extract(epoch FROM recovered_at)::float8 AS recovered_at
            FROM job_outbox \(clause) LIMIT $1
            """, [limit]).map { row in
            OutboxEntry(id: try row.int("id"), jid: try row.string("jid"), className: try row.string("class"),
                        queue: try row.string("queue"), args: try row.string("args"), createdAt: try row.double("created_at"),
                        runAt: try row.optionalDouble("run_at"), pushedAt: try row.optionalDouble("pushed_at"),
                        error: try row.optionalString("error"), recoveredCount: try row.int("recovered_count"),
                        recoveredAt: try row.optionalDouble("recovered_at"))
        }
    }
}
