import Foundation
import WorkersHTTP
import Logging
import WorkersStorage
import Workers

/// Store requests one reconciliation run may still make.
///
/// Thread rules: owned by the run's thread, never shared.
final class StoreCallBudget {
    let limit: Int
    private(set) var used = 0
    /// Set when a call was refused: something was left for the next run.
    private(set) var exhausted = false

    init(limit: Int) { self.limit = max(0, limit) }

    /// Takes one call; false (and `exhausted`) once `limit` calls were taken.
    func take() -> Bool {
        guard used < limit else {
            exhausted = true
            return false
        }
        used += 1
        return true
    }

    var remaining: Int { limit - used }
}

/// The daily reconciliation with the stores (issue 52 point 3, review L-b): what their notifications did not bring.
///
/// 1. Apple: 48 h of Get Notification History (every accepted environment, Production first, paginated by
///    `paginationToken`). A notification whose `notificationUUID` is already in `store_notifications` (any outcome:
///    an `unmatched` one waits for its validation's replay) is skipped; any other is applied by
///    `AppStoreNotificationJob.perform` itself — the same verification, claim and effects as a delivered one.
/// 2. Google: 48 h of `purchases.voidedpurchases.list` per configured package (`type=1`, paginated by `token`). A
///    void of a token we hold is applied by `PlayNotificationJob.perform` as the voided-purchase RTDN Google sent
///    (message id `reconcile:voided:<orderId>`); skipped when that order's void is already recorded on the row
///    (`event_data.order_id`), the row is already `refunded`, or the token is not ours.
/// 3. Rows `on_hold` / `paused` (Apple billing retry, Google account hold or pause) untouched for a day are asked
///    again (`SubscriptionStoreCheck`, oldest first) and their store's answer applied: a lost RECOVERED / DID_RENEW
///    no longer leaves a payer `free` until the app's next launch.
///
/// Every request counts against `ReceiptsConfiguration.reconcileCallBudget` (history and list pages, each
/// notification applied, each row asked); past it the rest waits for the next run, logged with the counts. A store
/// that cannot be read (401, 429, 5xx) is logged (`alert=RCV-RECONCILE-INCOMPLETE`) and the run fails after the other
/// steps, so it is retried. Idempotent: applying goes through the notification jobs' claim, and re-checks through the
/// out-of-order guard. Applied notifications use a ledger row of their own (jid `reconcile:<store>:<id>`).
public struct StoreReconciliationJob: Job {
    /// `args: []`.
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "StoreReconciliationJob"
        public init() {}
    }
    public static let options = StoreCallLimits.optionsForBothStores(
        JobOptions(maxRetries: 3, backoff: .sidekiq, timeout: .seconds(1800), usesLedger: false))
    /// How far back the stores' lists are read: two daily runs overlap, so one failed run loses nothing.
    static let window: TimeInterval = 48 * 3600
    /// How long an `on_hold` / `paused` row stays unasked.
    static let recheckAfter: TimeInterval = 86_400
    /// The alert of a store list that could not be read this run.
    static let incompleteAlert = "RCV-RECONCILE-INCOMPLETE"
    let services: ReceiptServices

    public init(services: ReceiptServices) { self.services = services }

    public struct Totals: Sendable, Equatable {
        /// Notifications / voided purchases the stores listed.
        public var listed = 0
        /// Applied through the notification jobs.
        public var applied = 0
        /// Already recorded (or not ours): nothing to do.
        public var skipped = 0
        /// Applying failed (logged; the next run lists them again while they are in the window).
        public var failed = 0
        /// `on_hold` / `paused` rows whose store answered.
        public var rechecked = 0
        /// `on_hold` / `paused` rows no store could be asked about.
        public var recheckFailed = 0
        /// Store calls made.
        public var calls = 0
        /// The budget ran out: the rest waits for the next run.
        public var overBudget = false
        /// Stores whose list could not be read.
        public var incomplete: [String] = []
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let database = context.database else {
            throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database")
        }
        let budget = StoreCallBudget(limit: services.configuration.reconcileCallBudget)
        let now = services.now()
        var totals = Totals()
        let cancellation = HTTPCancellation(isCancelled: { [cancellation = context.cancellation] in cancellation.isCancelled })
        let logger = context.logger
        if let api = services.appStoreAPI, let verifier = services.appleVerifier {
            reconcileApple(api: api, verifier: verifier, now: now, budget: budget, totals: &totals, context: context,
                           cancellation: cancellation)
        }
        if let play = services.googlePlay {
            reconcileGoogle(play: play, now: now, budget: budget, totals: &totals, context: context, cancellation: cancellation)
        }
        try recheck(pool: database.pool, now: now, budget: budget, totals: &totals, cancellation: cancellation,
                    isCancelled: { context.isCancelled })
        totals.calls = budget.used
        let counts: Logger.Metadata = [
            "listed": "\(totals.listed)", "applied": "\(totals.applied)", "skipped": "\(totals.skipped)",
            "failed": "\(totals.failed)", "rechecked": "\(totals.rechecked)", "recheck_failed": "\(totals.recheckFailed)",
            "calls": "\(totals.calls)", "budget": "\(budget.limit)"]
        if budget.exhausted {
            logger.warning("store reconciliation reached its call budget (RECEIPTS_RECONCILE_CALL_BUDGET); the rest waits for the next run",
                           metadata: counts)
        } else {
            logger.info("store reconciliation done", metadata: counts)
        }
        if !totals.incomplete.isEmpty {
            throw StoreUnavailable(totals.incomplete.joined(separator: ", "), "list not read; the reconciliation is retried")
        }
    }

    // MARK: Apple

    private func reconcileApple(api: AppStoreServerAPIClient, verifier: AppleSignedDataVerifier, now: Date,
                                budget: StoreCallBudget, totals: inout Totals, context: JobContext,
                                cancellation: HTTPCancellation) {
        let job = AppStoreNotificationJob(services: services)
        let environments = services.configuration.appleAllowedEnvironments.sorted { $0 == "Production" && $1 != "Production" }
        for environment in environments {
            var token: String?
            repeat {
                guard !context.isCancelled, budget.take() else { return }
                let page: NotificationHistoryResponse
                do {
                    page = try api.notificationHistory(environment: environment, startDate: now.addingTimeInterval(-Self.window),
                                                       endDate: now, paginationToken: token, cancellation: cancellation)
                } catch {
                    incomplete("apple", environment: environment, error: error, totals: &totals, logger: context.logger)
                    break
                }
                for item in page.notificationHistory ?? [] {
                    totals.listed += 1
                    guard let payload = item.signedPayload, let arguments = try? AppStoreNotificationArguments(signedPayload: payload),
                          let id = try? verifier.verifyNotification(payload).notificationUUID else {
                        totals.failed += 1
                        context.logger.warning("store reconciliation: an App Store history record does not verify")
                        continue
                    }
                    if (try? recorded(store: .apple, id: id, context: context)) == true {
                        totals.skipped += 1
                        continue
                    }
                    guard budget.take() else { return }
                    apply(store: .apple, id: id, className: AppStoreNotificationJob.className, totals: &totals, context: context) {
                        try job.perform(arguments, context: $0)
                    }
                }
                token = page.hasMore == true ? page.paginationToken : nil
            } while token != nil
        }
    }

    // MARK: Google

    private func reconcileGoogle(play: GooglePlayClient, now: Date, budget: StoreCallBudget, totals: inout Totals,
                                 context: JobContext, cancellation: HTTPCancellation) {
        let packages = services.configuration.googlePackageNames.sorted()
        if packages.isEmpty {
            context.logger.notice("store reconciliation: Google voided purchases not read (RECEIPTS_GOOGLE_PACKAGE_NAMES is empty)")
        }
        let job = PlayNotificationJob(services: services)
        for package in packages {
            var token: String?
            repeat {
                guard !context.isCancelled, budget.take() else { return }
                let page: VoidedPurchasesPage
                do {
                    page = try play.voidedPurchases(packageName: package, startTime: now.addingTimeInterval(-Self.window),
                                                    pageToken: token, maxResults: 1000, cancellation: cancellation)
                } catch {
                    incomplete("google", environment: package, error: error, totals: &totals, logger: context.logger)
                    break
                }
                for voided in page.voidedPurchases ?? [] {
                    totals.listed += 1
                    guard let purchaseToken = voided.purchaseToken, !purchaseToken.isEmpty else {
                        totals.skipped += 1
                        continue
                    }
                    let order = voided.orderId ?? ""
                    let messageID = "reconcile:voided:" + (order.isEmpty
                        ? Redact.fingerprint(purchaseToken) + ":" + (voided.voidedTimeMillis ?? "") : order)
                    guard (try? voidPending(token: purchaseToken, orderID: order, messageID: messageID, context: context)) == true else {
                        totals.skipped += 1
                        continue
                    }
                    var notification: [String: Any] = [
                        "version": "1.0", "packageName": package,
                        "voidedPurchaseNotification": ["purchaseToken": purchaseToken, "orderId": order, "productType": 1]]
                    if let millis = voided.voidedTimeMillis.flatMap({ Int64($0) }) { notification["eventTimeMillis"] = millis }
                    guard let data = try? JSONSerialization.data(withJSONObject: notification),
                          let arguments = try? PlayNotificationArguments(
                            message: .init(data: data.base64EncodedString(), messageId: messageID)) else {
                        totals.failed += 1
                        continue
                    }
                    guard budget.take() else { return }
                    apply(store: .google, id: messageID, className: PlayNotificationJob.className, totals: &totals, context: context) {
                        try job.perform(arguments, context: $0)
                    }
                }
                token = page.tokenPagination?.nextPageToken.flatMap { $0.isEmpty ? nil : $0 }
            } while token != nil
        }
    }

    /// Whether a listed void still has something to do: the token is ours, the row not already `refunded`, neither
    /// this message nor a void of the same order (an RTDN's `order_voided` / `refunded` event) recorded.
    private func voidPending(token: String, orderID: String, messageID: String, context: JobContext) throws -> Bool {
        try context.withConnection { c in
            guard let row = try c.queryFirst("SELECT id, status FROM subscriptions WHERE store = 'google' AND store_transaction_id = $1",
                                             [token]), try row.string("status") != "refunded" else { return false }
            if try c.queryFirst("SELECT 1 AS one FROM store_notifications WHERE store = 'google' AND notification_id = $1",
                                [messageID]) != nil { return false }
            guard !orderID.isEmpty else { return true }
            return try c.queryFirst("""
                SELECT 1 AS one FROM subscription_events
                WHERE subscription_id = $1 AND event_type IN ('order_voided', 'refunded') AND event_data->>'order_id' = $2
                """, [try row.uuid("id"), orderID]) == nil
        }
    }

    // MARK: Shared

    /// Whether the store's notification `id` is recorded, whatever its outcome.
    private func recorded(store: Store, id: String, context: JobContext) throws -> Bool {
        try context.withConnection { c in
            try c.queryFirst("SELECT 1 AS one FROM store_notifications WHERE store = $1 AND notification_id = $2",
                             [store.rawValue, id]) != nil
        }
    }

    /// Runs a notification job's `perform` under a context of its own (ledger jid `reconcile:<store>:<id>`).
    private func apply(store: Store, id: String, className: String, totals: inout Totals, context: JobContext,
                       _ body: (JobContext) throws -> Void) {
        let child = JobContext(jid: "reconcile:\(store.rawValue):\(id)", className: className, queue: context.queue,
                               attempt: context.attempt, payload: context.payload, deadline: context.deadline,
                               cancellation: context.cancellation, logger: context.logger, database: context.database)
        do {
            try body(child)
            totals.applied += 1
        } catch {
            totals.failed += 1
            context.logger.warning("store reconciliation: a missed notification could not be applied; listed again next run",
                                   metadata: ["store": "\(store.rawValue)", "error": "\(error)"])
        }
    }

    private func incomplete(_ store: String, environment: String, error: any Error, totals: inout Totals, logger: Logger) {
        totals.incomplete.append("\(store) (\(environment))")
        logger.error("alert \(Self.incompleteAlert): the \(store) list (\(environment)) could not be read: \(error)",
                     metadata: ["alert": "\(Self.incompleteAlert)", "store": "\(store)"])
    }

    // MARK: Re-check of rows on hold

    private func recheck(pool: PostgresPool, now: Date, budget: StoreCallBudget, totals: inout Totals,
                         cancellation: HTTPCancellation, isCancelled: () -> Bool) throws {
        let rows: [DueRenewal] = try pool.withConnection { c in
            try c.query("""
                SELECT id, store, store_transaction_id, store_product_id, user_id, app_id, plan_id, plan_type,
                       COALESCE(end_date, $1) AS window_end
                FROM subscriptions
                WHERE status IN ('on_hold', 'paused') AND updated_at <= $2
                ORDER BY updated_at, id
                LIMIT $3
                """, [now, now.addingTimeInterval(-Self.recheckAfter), budget.remaining + 1]).map { r in
                DueRenewal(id: try r.uuid("id"), store: Store(rawValue: try r.string("store")) ?? .apple,
                           key: try r.string("store_transaction_id"), productID: try r.string("store_product_id"),
                           windowEnd: try r.date("window_end"),
                           owner: SubscriptionOwner(userID: try r.optionalUUID("user_id"), appID: try r.uuid("app_id"),
                                                    planID: try r.optionalUUID("plan_id"), planType: try r.string("plan_type")))
            }
        }
        let check = SubscriptionStoreCheck(services: services)
        for row in rows where !isCancelled() {
            guard budget.take() else { return }
            switch check.check(row, pool: pool, now: now, cancellation: cancellation, source: "store_reconciliation") {
            case .applied:
                totals.rechecked += 1
            case .ended:
                totals.rechecked += 1
                _ = try pool.withConnection { c in try c.transaction { c in try SubscriptionExpirySweepJob.expire(row, on: c) } }
            case .cannotAsk:
                totals.recheckFailed += 1
            }
            // Asked (whatever the answer): back of the queue, not asked again for a day.
            try pool.withConnection { c in
                _ = try c.execute("UPDATE subscriptions SET updated_at = $2 WHERE id = $1", [row.id, now])
            }
        }
    }
}
