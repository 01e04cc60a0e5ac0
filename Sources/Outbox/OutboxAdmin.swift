import Foundation
import WorkersQueue
import WorkersStorage

/// The state of `job_outbox` at a glance (`workerctl outbox status`, the dashboard's outbox page).
public struct OutboxSummary: Sendable, Equatable {
    /// Committed rows the relay has not pushed yet.
    public var pending: Int
    /// Time since the oldest pending row was committed (nil when none is pending): how far the relay is behind.
    public var oldestPendingAge: Duration?
    /// Rows the relay could not turn into a payload (marked with their `error`, never pushed).
    public var errored: Int
    /// Pushed rows still kept (the lost-job finder's window).
    public var pushedKept: Int
    /// Rows pushed in the hour before `now`.
    public var pushedLastHour: Int
    /// Rows the lost-job finder pushed again at least once.
    public var recovered: Int
    /// When the relay last pushed a row, nil if never.
    public var lastPushedAt: Date?
    /// Relays whose heartbeat (`job_outbox_relays.seen_at`) is at most `OutboxAdmin.liveWithin` old.
    public var liveRelays: Int = 0
    /// True when `pushedKept` or `pushedLastHour` reached `OutboxAdmin.exactUpTo` and is an estimate (from the
    /// planner's row count, and from ids); `pending`, `errored` and `recovered` then read "at least" that many.
    public var estimated: Bool = false

    /// Rows wait and no relay is live: nothing will move them (docs/outbox.md, "Is a relay running?").
    public var waitingWithoutRelay: Bool { pending > 0 && liveRelays == 0 }

    /// "N rows waiting, oldest Xs, no live relay" when `waitingWithoutRelay`, else nil.
    public var noRelayWarning: String? {
        guard waitingWithoutRelay else { return nil }
        let count = pending >= OutboxAdmin.exactUpTo ? "at least \(pending)" : "\(pending)"
        let age = oldestPendingAge.map { " oldest \(Int(Bounded.seconds($0.inSeconds, max: Bounded.maxEpochSeconds)))s," } ?? ""
        return "\(count) rows waiting,\(age) no live relay (start `workerctl relay` or a worker with --outbox-relay)"
    }
}

/// One row of `job_outbox`, for listing. `args` is the JSON text as stored.
public struct OutboxEntry: Sendable, Equatable {
    public var id: Int
    public var jid: String
    public var className: String
    public var queue: String
    public var args: String
    public var createdAt: Date
    public var runAt: Date?
    public var pushedAt: Date?
    public var error: String?
    public var recoveredCount: Int
    public var recoveredAt: Date?
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
///
/// Invariant: no query here reads the whole table. Each count reads one partial index (unpushed, `error IS NOT
/// NULL`, `recovered_count > 0`, `pushed_at`) and stops at `exactUpTo` rows; beyond that a total is estimated.
public enum OutboxAdmin {
    /// Counts are exact up to this many rows.
    public static let exactUpTo = 100_000
    /// A relay whose heartbeat is older than this is not live (it beats every 5 s).
    public static let liveWithin: Duration = .seconds(liveSeconds)
    static let liveSeconds: Double = 30

    public static func summary(_ connection: PostgresConnection) throws -> OutboxSummary {
        // `order` names the partial index's key, so that the planner walks that index and stops at the cap.
        func capped(_ condition: String, order: String) -> String {
            "(SELECT count(*) FROM (SELECT 1 FROM job_outbox WHERE \(condition) ORDER BY \(order) LIMIT $1) t)"
        }
        let row = try connection.queryFirst("""
            SELECT \(capped("pushed_at IS NULL", order: "id")) AS pending,
                   (SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM job_outbox
                    WHERE pushed_at IS NULL ORDER BY id LIMIT 1) AS oldest_age,
                   \(capped("error IS NOT NULL", order: "id")) AS errored,
                   \(capped("pushed_at IS NOT NULL AND error IS NULL", order: "pushed_at DESC")) AS pushed_kept,
                   \(capped("pushed_at >= clock_timestamp() - interval '1 hour' AND error IS NULL", order: "pushed_at DESC")) AS pushed_last_hour,
                   \(capped("recovered_count > 0", order: "recovered_at DESC NULLS LAST, id DESC")) AS recovered,
                   (SELECT extract(epoch FROM max(pushed_at))::float8 FROM job_outbox WHERE pushed_at IS NOT NULL) AS last_pushed_at,
                   (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'job_outbox'::regclass) AS rows_estimate,
                   (SELECT max(id) FROM job_outbox) AS max_id,
                   (SELECT id FROM job_outbox WHERE pushed_at >= clock_timestamp() - interval '1 hour'
                    ORDER BY pushed_at LIMIT 1) AS first_id_last_hour,
                   (SELECT count(*) FROM job_outbox_relays
                    WHERE seen_at >= clock_timestamp() - make_interval(secs => $2)) AS live_relays
            """, [exactUpTo, liveSeconds])
        guard let row else { throw PostgresError(category: .query, message: "no summary row", query: "job_outbox summary") }
        var summary = OutboxSummary(pending: try row.int("pending"), oldestPendingAge: try row.optionalDouble("oldest_age").map { Bounded.duration(seconds: $0, max: Bounded.maxEpochSeconds) },
                                    errored: try row.int("errored"), pushedKept: try row.int("pushed_kept"),
                                    pushedLastHour: try row.int("pushed_last_hour"), recovered: try row.int("recovered"),
                                    lastPushedAt: try row.optionalDouble("last_pushed_at").map(Date.init(timeIntervalSince1970:)), liveRelays: try row.int("live_relays"))
        if summary.pushedKept >= exactUpTo {
            let estimate = try row.int("rows_estimate") - summary.pending - summary.errored
            summary.pushedKept = max(summary.pushedKept, estimate)
            summary.estimated = true
        }
        if summary.pushedLastHour >= exactUpTo, let maxID = try row.decode("max_id", as: Int?.self),
           let firstID = try row.decode("first_id_last_hour", as: Int?.self) {
            // Ids follow enqueue order, close to push order: rows since the first one pushed in the hour.
            summary.pushedLastHour = max(summary.pushedLastHour, maxID - firstID + 1 - summary.pending)
            summary.estimated = true
        }
        return summary
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
                        queue: try row.string("queue"), args: try row.string("args"), createdAt: Date(timeIntervalSince1970: try row.double("created_at")),
                        runAt: try row.optionalDouble("run_at").map(Date.init(timeIntervalSince1970:)),
                        pushedAt: try row.optionalDouble("pushed_at").map(Date.init(timeIntervalSince1970:)),
                        error: try row.optionalString("error"), recoveredCount: try row.int("recovered_count"),
                        recoveredAt: try row.optionalDouble("recovered_at").map(Date.init(timeIntervalSince1970:)))
        }
    }
}
