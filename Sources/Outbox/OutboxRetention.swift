import Foundation
import Logging
import WorkersQueue
import WorkersStorage

/// Settings of the retention loop (docs/outbox.md, "Retention").
public struct OutboxRetentionSettings: Sendable {
    /// Time between passes when the previous pass left no expired row.
    public var interval: Duration
    /// How long a pushed (or refused) `job_outbox` row is kept: the lost-job finder's window.
    public var outboxRetention: Duration
    /// How long a finished `job_ledger` row is kept. Never shorter than `outboxRetention` (raised to it): a done
    /// job whose ledger row is gone while its outbox row is kept would look lost to the finder.
    public var ledgerRetention: Duration
    /// Most rows one DELETE removes (one short transaction each).
    public var batchSize: Int
    /// How long one pass may spend deleting; a pass that runs out starts again at once (after a 50 ms pause)
    /// instead of waiting `interval`.
    public var timeBudget: Duration

    /// The longest retention accepted (10 years); longer values are clamped (`Bounded`).
    public static let maxRetention: Duration = .seconds(maxRetentionSeconds)
    static let maxRetentionSeconds: Double = 10 * 365 * 86_400

    /// Clamps each duration: `interval` into 50 ms...1 day, the retentions into 1 s...`maxRetention` (the
    /// ledger's raised to at least the outbox's), `timeBudget` into 50 ms...1 hour.
    public init(interval: Duration = .seconds(10), outboxRetention: Duration = .seconds(7 * 86_400),
                ledgerRetention: Duration = .seconds(30 * 86_400), batchSize: Int = 10_000, timeBudget: Duration = .seconds(20)) {
        self.interval = .seconds(max(0.05, Bounded.seconds(interval.inSeconds, max: 86_400)))
        let outbox = max(1, Bounded.seconds(outboxRetention.inSeconds, max: Self.maxRetentionSeconds))
        self.outboxRetention = .seconds(outbox)
        self.ledgerRetention = .seconds(max(outbox, Bounded.seconds(ledgerRetention.inSeconds, max: Self.maxRetentionSeconds)))
        self.batchSize = Bounded.int(batchSize, in: 1...1_000_000)
        self.timeBudget = .seconds(max(0.05, Bounded.seconds(timeBudget.inSeconds, max: 3600)))
    }
}

/// Deletes expired rows: `job_outbox` rows pushed before the outbox window, `job_ledger` rows finished before the
/// ledger window, `job_outbox_relays` rows not seen for a day. It runs whether or not the lost-job finder does.
///
/// A pass takes the session-level advisory lock `lockKey` with `pg_try_advisory_lock` (one pass at a time in the
/// fleet; another relay's pass skips), then deletes in batches of `batchSize`, each its own short transaction
/// (autocommit), until a batch comes back short (nothing expired is left) or `timeBudget` is spent, and unlocks.
///
/// Value type; the retention thread of an `OutboxRelay` owns it and passes its own connection.
struct OutboxRetention {
    let settings: OutboxRetentionSettings
    let logger: Logger

    /// Advisory lock key of the retention loop ("SWKRRETN").
    static let lockKey: Int64 = 0x5357_4B52_5245_544E
    /// Rows of `job_outbox_relays` not seen for this long are deleted.
    static let staleRelaySeconds: Double = 86_400

    struct Report: Sendable, Equatable {
        /// False when another relay's pass held the lock.
        var ran = false
        var outboxDeleted = 0
        var ledgerDeleted = 0
        /// True when both tables hold no expired row any more (false: the time budget ran out).
        var finished = false
    }

    /// One pass on `connection` (which must not be inside a transaction).
    func pass(on connection: PostgresConnection) throws -> Report {
        var report = Report()
        guard try connection.queryFirst("SELECT pg_try_advisory_lock($1) AS locked", [Self.lockKey])?
            .bool("locked") == true else { return report }
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", [Self.lockKey]) }
        report.ran = true
        let deadline = ContinuousClock.now + .milliseconds(Bounded.milliseconds(settings.timeBudget.inSeconds, maxSeconds: 3600))
        var outboxDone = false
        var ledgerDone = false
        while ContinuousClock.now < deadline && !(outboxDone && ledgerDone) {
            if !outboxDone {
                let deleted = try connection.execute("""
                    DELETE FROM job_outbox WHERE id IN (SELECT id FROM job_outbox
                      WHERE pushed_at < clock_timestamp() - make_interval(secs => $1) LIMIT $2)
                    """, [settings.outboxRetention.inSeconds, settings.batchSize])
                report.outboxDeleted += deleted
                outboxDone = deleted < settings.batchSize
            } else {
                let deleted = try connection.execute("""
                    DELETE FROM job_ledger WHERE jid IN (SELECT jid FROM job_ledger
                      WHERE finished_at < clock_timestamp() - make_interval(secs => $1) LIMIT $2)
                    """, [settings.ledgerRetention.inSeconds, settings.batchSize])
                report.ledgerDeleted += deleted
                ledgerDone = deleted < settings.batchSize
            }
        }
        report.finished = outboxDone && ledgerDone
        try connection.execute("DELETE FROM job_outbox_relays WHERE seen_at < clock_timestamp() - make_interval(secs => $1)",
                               [Self.staleRelaySeconds])
        if report.outboxDeleted > 0 || report.ledgerDeleted > 0 || !report.finished {
            logger.info("outbox: retention pass", metadata: [
                "outbox_deleted": "\(report.outboxDeleted)", "ledger_deleted": "\(report.ledgerDeleted)",
                "finished": "\(report.finished)"])
        }
        return report
    }
}
