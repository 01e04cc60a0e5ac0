import Foundation
import Logging
import WorkersQueue
import WorkersStorage

/// Settings of the lost-job finder (docs/outbox.md, "Jobs Redis lost").
public struct LostJobSettings: Sendable {
    /// Time between rounds (each relay runs rounds; one at a time in the fleet).
    public var interval: Duration
    /// How long a pushed row is kept, and so how far back a lost job can be found.
    public var retention: Duration
    /// Job classes that write a `job_ledger` row when they finish (`JobOptions.usesLedger`). Only these are
    /// pushed again: for any other class "not in Redis" may just mean "finished", which leaves no trace.
    public var ledgerClasses: [String]
    /// Most rows one round checks (the next round goes on from where this one stopped).
    public var batchSize: Int
    /// Times one job may be pushed again (a finished job that left no ledger row — dropped, deleted by an
    /// operator, trimmed from dead — looks lost; this bounds how often it comes back).
    public var maxPushesAgain: Int

    /// `interval` is raised to at least 50 ms, `retention` to at least 1 s.
    public init(interval: Duration = .seconds(60), retention: Duration = .seconds(7 * 86_400), ledgerClasses: [String],
                batchSize: Int = 1000, maxPushesAgain: Int = 1) {
        self.interval = max(.milliseconds(50), interval)
        self.retention = max(.seconds(1), retention)
        self.ledgerClasses = ledgerClasses
        self.batchSize = max(1, batchSize)
        self.maxPushesAgain = max(0, maxPushesAgain)
    }
}

/// Finds outbox jobs Redis lost (a restart without AOF, a failover to a replica that lagged, an eviction) and
/// pushes them again.
///
/// A round, holding `pg_try_advisory_xact_lock` so that one relay in the fleet runs it at a time (deleting expired
/// rows is `OutboxRetention`'s job, which runs whether or not the finder does):
/// 1. reads up to `batchSize` candidates: rows pushed within the window but at least one `interval` ago (most
///    fresh jobs are still queued or just done: without them most rounds find no candidate and skip step 2),
///    of a ledger class, pushed again fewer than `maxPushesAgain` times, with no `job_ledger` row (not done),
///    locked `FOR UPDATE SKIP LOCKED` until the round commits (see "Erased users" below);
///    (the test hook `afterCandidates` runs here, between the candidate query and the Redis search);
/// 2. asks Redis which of their jids appear in no `queue:*`, `working:queue:*`, `schedule`, `retry` or `dead`
///    member (`JidSearch`: short paged Lua calls, never one long one; not atomic, so a second pass confirms
///    what the first did not find);
/// 3. reads the ledger again for those (a job that finished between steps 1 and 2 committed its ledger row
///    before its acknowledgement removed it from Redis, so it shows up here);
/// 4. pushes the rest again exactly as the relay does (same jid, `created_at`), and counts it in
///    `recovered_count` — all in the same transaction. A shard that is down or refuses costs only its own rows
///    (they stay candidates for a later round).
///
/// Erased users (GDPR erasure, docs/jobs-privacy.md): the account deletion deletes the outbox rows naming the user in
/// its transaction and purges Redis only after its commit. The lock on the candidates orders the two: a row the
/// finder holds makes the erasure's DELETE wait until the round committed, so anything the round pushed is in Redis
/// before the purge looks; a row the erasure is deleting is skipped (`SKIP LOCKED`), and once deleted it is no
/// candidate. So the finder never brings back a job the erasure purged (and a job that still ran for an erased
/// user changes nothing: `ErasedUser`). The relay's batches lock their rows the same way.
///
/// What it cannot see is in docs/outbox.md. Value type; the relay thread owns it and passes its connections.
struct LostJobFinder {
    let settings: LostJobSettings
    let logger: Logger
    /// Where the next round starts (row id); back to 0 after a round that reached the end.
    private var cursor = 0
    /// Test hook: called on the round's thread with the candidates' jids, after the candidate query and before
    /// the Redis search (so a test can commit a ledger row exactly there). Nil in production.
    var afterCandidates: (([String]) -> Void)?

    /// Advisory lock key of the finder ("SWKROUTB").
    static let lockKey: Int64 = 0x5357_4B52_4F55_5442

    init(settings: LostJobSettings, logger: Logger) {
        self.settings = settings
        self.logger = logger
    }

    struct Report: Sendable, Equatable {
        var ran = false
        var checked = 0
        var missing = 0
        var pushedAgain = 0
    }

    mutating func round(database: PostgresConnection, redis: OutboxShards,
                        maxPayloadBytes: Int = OutboxRelaySettings.defaultMaxPayloadBytes) throws -> Report {
        let settings = self.settings
        var nextCursor = cursor
        let report: Report = try database.transaction { connection in
            var report = Report()
            guard try connection.queryFirst("SELECT pg_try_advisory_xact_lock($1) AS locked", [Self.lockKey])?
                .bool("locked") == true else { return report }
            report.ran = true
            guard !settings.ledgerClasses.isEmpty else { return report }
            let rows = try connection.query("""
                SELECT \(OutboxRow.columns) FROM job_outbox o
                WHERE o.id > $1 AND o.pushed_at IS NOT NULL AND o.error IS NULL
                  AND o.pushed_at >= clock_timestamp() - make_interval(secs => $2)
                  AND o.pushed_at < clock_timestamp() - make_interval(secs => $6)
                  AND o.recovered_count < $3 AND o.class = ANY($4::text[])
                  AND NOT EXISTS (SELECT 1 FROM job_ledger l WHERE l.jid = o.jid)
                ORDER BY o.id LIMIT $5
                FOR UPDATE OF o SKIP LOCKED
                """, [cursor, settings.retention.inSeconds, settings.maxPushesAgain, settings.ledgerClasses, settings.batchSize,
                   settings.interval.inSeconds])
                .map { try OutboxRow(row: $0) }
            nextCursor = rows.count == settings.batchSize ? (rows.last?.id ?? 0) : 0
            report.checked = rows.count
            if rows.isEmpty { return report }
            afterCandidates?(rows.map(\.jid))
            let missingInRedis = redis.missing(rows)  // each row looked for on its queue's shard
            if missingInRedis.isEmpty { return report }
            let doneSince = Set(try connection.query("SELECT jid FROM job_ledger WHERE jid = ANY($1::text[])",
                                                     [Array(missingInRedis)]).map { try $0.string("jid") })
            let lost = rows.filter { missingInRedis.contains($0.jid) && !doneSince.contains($0.jid) }
            report.missing = lost.count
            if lost.isEmpty { return report }
            // A row whose shard refuses stays as it was (looked for again next round); one that cannot become a
            // payload any more is left alone too (it was pushed once, as it was then).
            let pushed = try redis.push(lost, now: Clock.now(), maxPayloadBytes: maxPayloadBytes).pushed
            if pushed.isEmpty { return report }
            try connection.execute("""
                UPDATE job_outbox SET recovered_count = recovered_count + 1, recovered_at = clock_timestamp()
                WHERE id = ANY($1::bigint[])
                """, [pushed.map(\.id)])
            report.pushedAgain = pushed.count
            return report
        }
        cursor = nextCursor
        if report.checked > 0 {
            logger.debug("outbox: lost-job round", metadata: [
                "checked": "\(report.checked)", "missing": "\(report.missing)", "pushed_again": "\(report.pushedAgain)"])
        }
        if report.pushedAgain > 0 {
            logger.notice("outbox: jobs Redis lost pushed again", metadata: [
                "checked": "\(report.checked)", "pushed_again": "\(report.pushedAgain)"])
        }
        return report
    }
}
