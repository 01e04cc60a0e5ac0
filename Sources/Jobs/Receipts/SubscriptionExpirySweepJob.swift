import Foundation
import Logging
import Storage
import Workers

/// Ends subscriptions past their `end_date`, in batches of `sweepBatchSize` rows (one transaction each).
///
/// Rules: a live (`trial`/`active`) subscription that still renews (`auto_renew`) enters `grace_period` until
/// `end_date` + the store's grace (Apple 16 days, Google 3 days) unless the store already gave a
/// `grace_period_end`; a `grace_period` past its end, or a subscription that will not renew, becomes `expired`
/// with one `expired` event and its user back to `free`. Naturally idempotent (every step is conditioned on the
/// row's state), so it runs without the ledger and may run twice or concurrently (`FOR UPDATE SKIP LOCKED`).
public struct SubscriptionExpirySweepJob: Job {
    public static let className = "SubscriptionExpirySweepJob"
    public static let options = JobOptions(maxRetries: 3, backoff: .sidekiq, timeout: 600, usesLedger: false)
    let configuration: ReceiptsConfiguration

    public init(configuration: ReceiptsConfiguration) { self.configuration = configuration }

    public struct Totals: Sendable, Equatable {
        public var expired = 0
        public var graceStarted = 0
    }

    public func perform(_ arguments: NoArguments, context: JobContext) throws {
        guard let database = context.database else {
            throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database")
        }
        let totals = try Self.sweep(pool: database.pool, configuration: configuration, now: Date(),
                                    isCancelled: { context.isCancelled })
        context.logger.info("subscription expiry sweep done",
                            metadata: ["expired": "\(totals.expired)", "grace_started": "\(totals.graceStarted)"])
    }

    /// Sweeps until a batch comes back short (or `isCancelled`). Public for operators' tools and tests.
    public static func sweep(pool: PostgresPool, configuration: ReceiptsConfiguration, now: Date,
                             isCancelled: () -> Bool = { false }) throws -> Totals {
        var totals = Totals()
        while !isCancelled() {
            let batch = try pool.withConnection { c in
                try c.transaction { c in try sweepBatch(on: c, configuration: configuration, now: now) }
            }
            totals.expired += batch.expired
            totals.graceStarted += batch.graceStarted
            if batch.expired + batch.graceStarted < configuration.sweepBatchSize { break }
        }
        return totals
    }

    static func sweepBatch(on c: PostgresConnection, configuration: ReceiptsConfiguration, now: Date) throws -> Totals {
        let rows = try c.query("""
            WITH due AS (
                SELECT id, status, end_date, auto_renew,
                       COALESCE(grace_period_end,
                                end_date + make_interval(days => CASE store WHEN 'apple' THEN $3::int ELSE $4::int END))
                           AS window_end
                FROM subscriptions
                WHERE status IN ('trial', 'active', 'grace_period') AND end_date < $1
                  AND (status <> 'grace_period' OR grace_period_end IS NULL OR grace_period_end <= $1)
                ORDER BY end_date
                LIMIT $2
                FOR UPDATE SKIP LOCKED
            ), decided AS (
                SELECT id, window_end,
                       CASE WHEN (status = 'grace_period' OR auto_renew) AND window_end > $1 THEN 'grace_period'
                            ELSE 'expired' END AS next
                FROM due
            )
            UPDATE subscriptions s
               SET status = d.next,
                   grace_period_end = CASE WHEN d.next = 'grace_period' THEN d.window_end ELSE s.grace_period_end END,
                   auto_renew = CASE WHEN d.next = 'expired' THEN false ELSE s.auto_renew END,
                   updated_at = now()
              FROM decided d
             WHERE s.id = d.id
            RETURNING s.id, s.status, s.end_date, s.grace_period_end
            """, [now, configuration.sweepBatchSize, configuration.appleGracePeriodDays, configuration.googleGracePeriodDays])
        var totals = Totals()
        var expired: [UUID] = []
        for row in rows {
            let id = try row.uuid("id")
            let end = try row.date("end_date")
            if try row.string("status") == "expired" {
                expired.append(id)
                try SubscriptionStore.event(id, type: "expired",
                                            data: ["source": "expiry_sweep", "end_date": ISO8601DateFormatter().string(from: end)],
                                            idempotencyKey: "sweep:expired:\(id.uuidString.lowercased()):\(Int64(end.timeIntervalSince1970))",
                                            on: c)
            } else {
                totals.graceStarted += 1
                try SubscriptionStore.event(id, type: "grace_period",
                                            data: ["source": "expiry_sweep", "end_date": ISO8601DateFormatter().string(from: end)],
                                            idempotencyKey: "sweep:grace:\(id.uuidString.lowercased()):\(Int64(end.timeIntervalSince1970))",
                                            on: c)
            }
        }
        totals.expired = expired.count
        if !expired.isEmpty {
            try c.execute("""
                UPDATE users SET status = 'free', updated_at = now()
                WHERE subscription_id = ANY($1::uuid[]) AND status = 'premium'
                """, [expired])
        }
        return totals
    }
}
