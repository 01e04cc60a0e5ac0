import Foundation
import WorkersHTTP
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// Ends subscriptions past their `end_date`, in batches of `sweepBatchSize` rows (one transaction each).
///
/// Rules: a live (`trial`/`active`) subscription that still renews (`auto_renew`) enters `grace_period` until
/// `end_date` + the store's grace (Apple 16 days, Google 3 days) unless the store already gave a
/// `grace_period_end`; a subscription that will not renew becomes `expired` at `end_date` (and a `grace_period`
/// that stopped renewing at its end) with one `expired` event and its user back to `free`.
///
/// A *renewing* subscription whose window has ended is never expired on our table's word: the store is the source
/// of truth (a lost or dead RENEWED / DID_RENEW would otherwise make a paying user `free`). Up to
/// `storeChecksPerSweep` such rows per run are asked (`SubscriptionStoreCheck`: Google `subscriptionsv2.get`,
/// Apple Get All Subscription Statuses, or verifyReceipt with the stored receipt), least recently touched first,
/// and the store's answer is applied. A row no store can be asked about stays as it is; once it is
/// `unconfirmedAlertDelay` past its window the run logs the alert `RCV-EXPIRY-UNCONFIRMED` (every run, with the
/// count, until it is settled). The job holds one slot of each store's call limiter (`StoreCallLimits`) while it
/// runs, so its calls count against the fleet-wide cap like the receipt jobs'.
///
/// Naturally idempotent (every step is conditioned on the row's state), so it runs without the ledger and may run
/// twice or concurrently (`FOR UPDATE SKIP LOCKED`; a store answer is applied through the out-of-order guard).
public struct SubscriptionExpirySweepJob: Job {
    /// `args: []`.
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "SubscriptionExpirySweepJob"
        public init() {}
    }
    public static let options = StoreCallLimits.optionsForBothStores(
        JobOptions(maxRetries: 3, backoff: .sidekiq, timeout: .seconds(600), usesLedger: false))
    /// Renewing rows asked about per run (the sweep runs every 15 minutes: 800 an hour at most).
    static let storeChecksPerSweep = 200
    /// How long past its window a renewing row may stay unconfirmed before the alert.
    static let unconfirmedAlertDelay: TimeInterval = 3600
    let services: ReceiptServices

    public init(services: ReceiptServices) { self.services = services }

    public struct Totals: Sendable, Equatable {
        public var expired = 0
        public var graceStarted = 0
        /// Renewing rows the store answered for (their state applied).
        public var storeChecked = 0
        /// Renewing rows past their window that no store could be asked about, alerted.
        public var unconfirmed = 0
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let database = context.database else {
            throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database")
        }
        let cancellation = HTTPCancellation(isCancelled: { [cancellation = context.cancellation] in cancellation.isCancelled })
        let totals = try Self.sweep(pool: database.pool, configuration: services.configuration, stores: services, now: Date(),
                                    logger: context.logger, cancellation: cancellation, isCancelled: { context.isCancelled })
        context.logger.info("subscription expiry sweep done",
                            metadata: ["expired": "\(totals.expired)", "grace_started": "\(totals.graceStarted)",
                                       "store_checked": "\(totals.storeChecked)", "unconfirmed": "\(totals.unconfirmed)"])
    }

    /// Sweeps until a batch comes back short (or `isCancelled`), then asks the stores about renewing rows past their
    /// window. `stores` nil: no store can be asked (those rows stay, and are alerted).
    public static func sweep(pool: PostgresPool, configuration: ReceiptsConfiguration, stores: ReceiptServices?, now: Date,
                             logger: Logger = Logger(label: "subscription-expiry-sweep"), cancellation: HTTPCancellation? = nil,
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
        if !isCancelled() {
            let confirmed = try confirmRenewals(pool: pool, configuration: configuration,
                                                check: stores.map(SubscriptionStoreCheck.init(services:)), now: now,
                                                logger: logger, cancellation: cancellation, isCancelled: isCancelled)
            totals.expired += confirmed.expired
            totals.storeChecked += confirmed.storeChecked
            totals.unconfirmed += confirmed.unconfirmed
        }
        return totals
    }

    /// The window's end in SQL: the store's `grace_period_end`, else `end_date` + the store's grace days ($3 Apple, $4 Google).
    static let windowEndSQL = """
        COALESCE(grace_period_end, end_date + make_interval(days => CASE store WHEN 'apple' THEN $3::int ELSE $4::int END))
        """

    static func confirmRenewals(pool: PostgresPool, configuration: ReceiptsConfiguration, check: SubscriptionStoreCheck?,
                                now: Date, logger: Logger, cancellation: HTTPCancellation?,
                                isCancelled: () -> Bool) throws -> Totals {
        let rows: [DueRenewal] = try pool.withConnection { c in
            try c.query("""
                SELECT id, store, store_transaction_id, store_product_id, user_id, app_id, plan_id, plan_type, window_end
                FROM (SELECT *, \(windowEndSQL) AS window_end FROM subscriptions
                      WHERE status IN ('trial', 'active', 'grace_period') AND auto_renew AND end_date < $1) due
                WHERE window_end <= $1
                ORDER BY updated_at
                LIMIT $2
                """, [now, storeChecksPerSweep, configuration.appleGracePeriodDays, configuration.googleGracePeriodDays]).map { r in
                DueRenewal(id: try r.uuid("id"), store: Store(rawValue: try r.string("store")) ?? .apple,
                           key: try r.string("store_transaction_id"), productID: try r.string("store_product_id"),
                           windowEnd: try r.date("window_end"),
                           owner: SubscriptionOwner(userID: try r.optionalUUID("user_id"), appID: try r.uuid("app_id"),
                                                    planID: try r.optionalUUID("plan_id"), planType: try r.string("plan_type")))
            }
        }
        var totals = Totals()
        for row in rows where !isCancelled() {
            let outcome = check?.check(row, pool: pool, now: now, cancellation: cancellation)
                ?? .cannotAsk("no store client on this worker")
            switch outcome {
            case .applied(let status):
                totals.storeChecked += 1
                if !status.isEntitled { totals.expired += 1 }
            case .ended:
                totals.storeChecked += 1
                totals.expired += try pool.withConnection { c in try c.transaction { c in try expire(row, on: c) } }
            case .cannotAsk(let reason):
                // Rotated to the back of the queue (ORDER BY updated_at), so one unanswerable row does not hide others.
                try pool.withConnection { c in
                    _ = try c.execute("UPDATE subscriptions SET updated_at = now() WHERE id = $1", [row.id])
                }
                if now >= row.windowEnd.addingTimeInterval(unconfirmedAlertDelay) {
                    totals.unconfirmed += 1
                    logger.debug("renewing subscription not confirmed with its store",
                                 metadata: ["subscription_id": "\(row.id.uuidString.lowercased())", "reason": "\(reason)"])
                }
            }
        }
        if totals.unconfirmed > 0 {
            logger.error("""
                alert RCV-EXPIRY-UNCONFIRMED: \(totals.unconfirmed) renewing subscriptions are past their end and grace \
                but no store could confirm they ended; they stay entitled until one does
                """,
                         metadata: ["alert": "RCV-EXPIRY-UNCONFIRMED", "count": "\(totals.unconfirmed)"])
        }
        return totals
    }

    /// Ends a row the store no longer knows (a live one here, one on hold or paused in `StoreReconciliationJob`):
    /// `expired`, one event, its user `free`. 1 when it changed.
    static func expire(_ row: DueRenewal, on c: PostgresConnection) throws -> Int {
        let changed = try c.execute("""
            UPDATE subscriptions SET status = 'expired', auto_renew = false, updated_at = now()
            WHERE id = $1 AND status IN ('trial', 'active', 'grace_period', 'on_hold', 'paused')
            """, [row.id])
        guard changed == 1 else { return 0 }
        try SubscriptionStore.event(row.id, type: "expired", data: ["source": "expiry_sweep", "store": "gone"],
                                    idempotencyKey: "sweep:expired:\(row.id.uuidString.lowercased()):store-gone", on: c)
        try c.execute("UPDATE users SET status = 'free', updated_at = now() WHERE subscription_id = $1 AND status = 'premium'",
                      [row.id])
        return 1
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
                  -- renewing rows past their window: the store decides (confirmRenewals)
                  AND NOT (auto_renew AND \(windowEndSQL) <= $1)
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
