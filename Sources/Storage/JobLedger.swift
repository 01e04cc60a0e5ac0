import Foundation

/// What `JobLedger.runOnce` did.
public enum LedgerOutcome: Sendable {
    /// The job's body ran and its effects committed together with the ledger row.
    case applied
    /// A ledger row for this jid already existed: the body did not run (a redelivered job).
    case alreadyApplied
}

/// Exactly-once database effects for jobs that may be delivered more than once.
///
/// A job's effects and a `job_ledger` row keyed by its `jid` commit in one transaction. The row is inserted
/// first with `ON CONFLICT (jid) DO NOTHING`: when it already exists the body is skipped. Two concurrent
/// deliveries of the same jid serialise on the primary key — the second INSERT waits for the first
/// transaction and then inserts nothing (first committed) or its own row (first rolled back) — so exactly
/// one body's effects commit.
///
/// The body receives the connection inside the open transaction; it must not COMMIT or ROLLBACK itself
/// (throwing rolls everything back, ledger row included). Thread-safe: every call checks out its own
/// connection from the pool, or uses the one its caller owns.
public struct JobLedger: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    /// Runs `body` inside one transaction together with inserting the ledger row for `jid`.
    /// If the row already exists (a job delivered again), `body` is not run and the result is `.alreadyApplied`.
    /// Two concurrent deliveries of the same jid: exactly one applies (unique index + ON CONFLICT DO NOTHING).
    ///
    /// Errors: whatever `body` throws (after rollback), or a `PostgresError` — check `isTransient` /
    /// `isConnectionFailure` to decide between retry and `dead`.
    public func runOnce(jid: String, jobClass: String, queue: String,
                        _ body: (PostgresConnection) throws -> Void) throws -> LedgerOutcome {
        try pool.withConnection { connection in
            try runOnce(jid: jid, jobClass: jobClass, queue: queue, on: connection, body)
        }
    }

    /// `runOnce` on a connection the caller already owns (it must not be inside a transaction it expects to
    /// commit itself: if it is, this nests as a savepoint and the outer transaction decides).
    public func runOnce(jid: String, jobClass: String, queue: String, on connection: PostgresConnection,
                        _ body: (PostgresConnection) throws -> Void) throws -> LedgerOutcome {
        // The row commits with the effects or not at all, so it is written finished in one statement, and
        // that statement travels with BEGIN (or SAVEPOINT) in one round trip.
        let insert = PostgresConnection.Statement("""
            INSERT INTO job_ledger (jid, job_class, queue, started_at, finished_at)
            VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp())
            ON CONFLICT (jid) DO NOTHING
            """, [jid, jobClass, queue])
        return try connection.transaction(startingWith: insert) { conn, inserted in
            guard inserted.affectedRows == 1 else { return .alreadyApplied }
            try body(conn)
            return .applied
        }
    }

    /// One job's ledger row, for `claimStatement`.
    public struct Claim: Sendable, Equatable {
        public let jid: String
        public let jobClass: String
        public let queue: String
        public init(jid: String, jobClass: String, queue: String) {
            self.jid = jid
            self.jobClass = jobClass
            self.queue = queue
        }
    }

    /// One statement that inserts the ledger rows of several jobs at once, for a caller that then runs
    /// those jobs' bodies directly in the same transaction (group commit's fast path, `GroupCommit.runGroup`)
    /// and commits or rolls back everything together. Read its answer with `claimedJids`.
    ///
    /// Invariants, the same as `runOnce`'s for each row: a jid that already has a committed row is not
    /// inserted (ON CONFLICT DO NOTHING); a jid whose row another open transaction has inserted makes this
    /// statement wait for that transaction and then insert nothing (it committed) or its own row (it rolled
    /// back), so of two concurrent deliveries exactly one claims the row. A jid listed twice is claimed once
    /// (its first occurrence). Rows are inserted in jid order, so two claim statements over overlapping jids
    /// take their row locks in the same order. The rows are written finished, as in `runOnce`.
    public static func claimStatement(_ claims: [Claim]) -> PostgresConnection.Statement {
        var seen = Set<String>()
        var jids: [String] = [], classes: [String] = [], queues: [String] = []
        jids.reserveCapacity(claims.count)
        for claim in claims where seen.insert(claim.jid).inserted {
            jids.append(claim.jid)
            classes.append(claim.jobClass)
            queues.append(claim.queue)
        }
        return PostgresConnection.Statement("""
            INSERT INTO job_ledger (jid, job_class, queue, started_at, finished_at)
            SELECT claim.jid, claim.job_class, claim.queue, clock_timestamp(), clock_timestamp()
            FROM unnest($1::text[], $2::text[], $3::text[]) AS claim (jid, job_class, queue)
            ORDER BY claim.jid
            ON CONFLICT (jid) DO NOTHING
            RETURNING jid
            """, [jids, classes, queues])
    }

    /// Deletes ledger rows a `claimStatement` inserted in the caller's open transaction for jobs that will not
    /// run in it after all (group commit's window closed first): they run in a later transaction, which claims
    /// them again. Only for rows this transaction inserted; a committed row must never be deleted this way.
    public static func unclaimStatement(jids: [String]) -> PostgresConnection.Statement {
        PostgresConnection.Statement("DELETE FROM job_ledger WHERE jid = ANY($1::text[])", [jids])
    }

    /// The jids a `claimStatement` inserted (their jobs' bodies may run); a jid it was given and that is
    /// missing here already had a row (`alreadyApplied` once the caller's transaction commits).
    public static func claimedJids(_ rows: PostgresRows) throws -> Set<String> {
        var jids = Set<String>(minimumCapacity: rows.count)
        for row in rows { jids.insert(try row.string("jid")) }
        return jids
    }

    /// True when a ledger row for `jid` is committed (the job's effects are in the database).
    public func isApplied(jid: String) throws -> Bool {
        try pool.withConnection { connection in try isApplied(jid: jid, on: connection) }
    }

    /// `isApplied` on a connection the caller owns; inside an open transaction it also sees that
    /// transaction's own ledger rows.
    public func isApplied(jid: String, on connection: PostgresConnection) throws -> Bool {
        try connection.queryFirst("SELECT 1 AS present FROM job_ledger WHERE jid = $1", [jid]) != nil
    }

    /// Deletes ledger rows finished before `cutoff` (retention sweep); returns how many. Keep the window
    /// longer than any redelivery can take (Sidekiq retries span about 21 days by default).
    @discardableResult
    public func purge(finishedBefore cutoff: Date) throws -> Int {
        try pool.withConnection { connection in
            try connection.execute("DELETE FROM job_ledger WHERE finished_at < $1", [cutoff])
        }
    }
}
