import Foundation
import WorkersHTTP
import Logging
import WorkersStorage
import Workers

/// Why we cancel a Google subscription, and the `CancellationType` of `purchases.subscriptionsv2.cancel` that says so
/// (developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2/cancel#CancellationType).
///
/// We call `subscriptionsv2.cancel`, not v1 `purchases.subscriptions.cancel`: v1's reference page itself points to v2
/// ("Newer version is available at purchases.subscriptionsv2.cancel"), v2 names the purchase by its token alone (v1's
/// `subscriptionId` "is not required, and not recommended for subscription with add-ons" since May 2025), and v2's
/// `cancellationContext` is required, so our intent is stated on every call instead of v1's silent default
/// (DEVELOPER_REQUESTED_STOP_PAYMENTS when no type is given).
enum GoogleCancellationKind: String, Sendable {
    /// The deletion was requested: `USER_REQUESTED_STOP_RENEWALS` ("the subscription can be restored. It only stops
    /// the subscription's next renewal"): a withdrawal of the request lets the user restore it in the Play Store.
    case stopRenewals = "stop_renewals"
    /// The account is erased: `DEVELOPER_REQUESTED_STOP_PAYMENTS` ("the subscription cannot be restored. It stops
    /// the subscription's next payment", installments included): nobody can be charged for a deleted account.
    case stopPayments = "stop_payments"

    var googleType: String {
        switch self {
        case .stopRenewals: return "USER_REQUESTED_STOP_RENEWALS"
        case .stopPayments: return "DEVELOPER_REQUESTED_STOP_PAYMENTS"
        }
    }
}

/// The Google cancellations we owe because of an account deletion (`google_cancellations`, migration 0022), as SQL.
///
/// Invariant: a deletion request that still has a chargeable Google subscription (ours says `pending`, `trial`,
/// `active`, `grace_period`, `on_hold` or `paused`: Google's PENDING, ACTIVE, IN_GRACE_PERIOD, ON_HOLD, PAUSED) owes
/// one row per purchase, written in the transaction that records the request (`stop_renewals`) or the erasure
/// (`stop_payments`). Only the latest token of a `linkedPurchaseToken` chain is owed: a replaced row is ended by
/// `GooglePurchaseEffects.endReplaced` (status `expired`, a `replaced` event), and the payer reads Google before
/// calling. A row keeps its purchase token while owed and loses it when settled. Every function runs on the
/// connection it is given.
enum GoogleCancellationStore {
    /// Our statuses under which Google may still charge the person.
    static let chargeableStatuses = "('pending', 'trial', 'active', 'grace_period', 'on_hold', 'paused')"

    /// Owes `kind` for each chargeable Google subscription `userID` holds now (before the erasure detaches them).
    /// A purchase already owed for that kind is not owed twice, and a subscription owes each kind once per request
    /// (a user who restores it in the Play Store after our stop_renewals is not cancelled again by the daily sweep). For `stopPayments`, a `stopRenewals` still owed for the
    /// same purchase is settled `superseded` (the stronger cancel replaces it). Returns the rows owed now.
    @discardableResult
    static func owe(_ kind: GoogleCancellationKind, userID: UUID, requestID: UUID, on c: PostgresConnection) throws -> Int {
        if kind == .stopPayments {
            try c.execute("""
                UPDATE google_cancellations SET settled_at = now(), outcome = 'superseded', purchase_token = NULL,
                       last_error = NULL
                WHERE kind = 'stop_renewals' AND settled_at IS NULL AND purchase_token IN
                      (SELECT store_transaction_id FROM subscriptions WHERE user_id = $1 AND store = 'google')
                """, [userID])
        }
        return try c.execute("""
            INSERT INTO google_cancellations (kind, request_id, subscription_id, purchase_token, package_name)
            SELECT $3, $2, s.id, s.store_transaction_id,
                   (SELECT a.package_name FROM google_acknowledgements a WHERE a.purchase_token = s.store_transaction_id)
            FROM subscriptions s
            WHERE s.user_id = $1 AND s.store = 'google' AND s.status IN \(chargeableStatuses)
              AND NOT EXISTS (SELECT 1 FROM subscription_events e WHERE e.subscription_id = s.id AND e.event_type = 'replaced')
              AND NOT EXISTS (SELECT 1 FROM google_cancellations g
                              WHERE g.subscription_id = s.id AND g.kind = $3 AND g.request_id = $2)
            ON CONFLICT (purchase_token, kind) WHERE settled_at IS NULL DO NOTHING
            """, [userID, requestID, kind.rawValue])
    }

    /// Apple subscriptions `userID` holds that still renew: only the user can stop them (no server-side cancel at
    /// Apple), so the erasure's audit entry counts them and the Auth Service's deletion screen tells the user.
    static func liveAppleSubscriptions(userID: UUID, on c: PostgresConnection) throws -> Int {
        Int(try c.queryFirst("""
            SELECT count(*) AS n FROM subscriptions
            WHERE user_id = $1 AND store = 'apple' AND auto_renew AND status IN \(chargeableStatuses)
            """, [userID])?.int64("n") ?? 0)
    }

    /// One owed cancellation, claimed for one attempt.
    struct Claim: Sendable {
        let id: Int64
        let kind: GoogleCancellationKind
        let purchaseToken: String
        let packageName: String?
        let attempt: Int
        /// The deletion request was withdrawn (cancelled, or the user no longer asks for deletion).
        let withdrawn: Bool
    }

    /// Claims row `id` for one attempt when it is owed and due at `now`: moves `next_attempt_at` to now + `retry` ×
    /// 2^(attempts, at most 6) — the back-off of 429, 5xx, timeouts and refusals — so a concurrent sweep finds it not
    /// due. Nil when settled, not due, or taken meanwhile. Times are the receipt jobs' clock (`ReceiptServices.now`).
    static func claim(id: Int64, now: Date, retry: Duration, on c: PostgresConnection) throws -> Claim? {
        guard let row = try c.queryFirst("""
            UPDATE google_cancellations g
               SET attempts = attempts + 1,
                   next_attempt_at = $2 + make_interval(secs => $3::float8 * power(2, LEAST(attempts, 6)))
             WHERE id = $1 AND settled_at IS NULL AND next_attempt_at <= $2
            RETURNING kind, purchase_token, package_name, attempts,
                      COALESCE((SELECT r.cancelled_at IS NOT NULL OR NOT u.delete_requested
                                FROM deletion_requests r JOIN users u ON u.id = r.user_id
                                WHERE r.id = g.request_id AND r.completed_at IS NULL), false) AS withdrawn
            """, [id, now, Double(retry.components.seconds)]) else { return nil }
        guard let kind = GoogleCancellationKind(rawValue: try row.string("kind")) else {
            throw StoreUnavailable("google_cancellations", "row \(id) has an unknown kind")
        }
        return Claim(id: id, kind: kind, purchaseToken: try row.string("purchase_token"),
                     packageName: try row.optionalString("package_name"),
                     attempt: Int(clamping: try row.int64("attempts")), withdrawn: try row.bool("withdrawn"))
    }

    /// Up to `limit` owed rows due at `now`, oldest first.
    static func due(now: Date, limit: Int, on c: PostgresConnection) throws -> [Int64] {
        try c.query("""
            SELECT id FROM google_cancellations
            WHERE settled_at IS NULL AND next_attempt_at <= $1 ORDER BY next_attempt_at, id LIMIT $2
            """, [now, limit]).map { try $0.int64("id") }
    }

    /// Settles row `id` with `outcome`, drops its purchase token, and rewrites the erasure's audit entry
    /// (`details.google_cancellations`: stop_payments rows of the request counted by outcome, `owed` while unsettled;
    /// counts only, never a token). One transaction.
    static func settle(id: Int64, outcome: GoogleCanceller.Outcome, on c: PostgresConnection) throws {
        try c.transaction { t in
            guard let row = try t.queryFirst("""
                UPDATE google_cancellations SET settled_at = now(), outcome = $2, purchase_token = NULL, last_error = NULL
                WHERE id = $1 AND settled_at IS NULL RETURNING request_id
                """, [id, outcome.rawValue]) else { return }
            try recordOutcome(requestID: try row.uuid("request_id"), on: t)
        }
    }

    /// `details.google_cancellations` of the request's `account_deleted` audit entry, from the rows as they are now.
    static func recordOutcome(requestID: UUID, on c: PostgresConnection) throws {
        try c.execute("""
            UPDATE audit_logs SET details = jsonb_set(details, '{google_cancellations}', COALESCE((
                SELECT jsonb_object_agg(o, n) FROM (
                    SELECT COALESCE(outcome, 'owed') AS o, count(*) AS n FROM google_cancellations
                    WHERE request_id = $1 AND kind = 'stop_payments' GROUP BY 1) t), '{}'::jsonb))
            WHERE action = 'account_deleted' AND details ->> 'request_id' = $2
            """, [requestID, requestID.uuidString.lowercased()])
    }

    /// Keeps the row owed and notes why this attempt failed (`reason` carries no token).
    static func failed(id: Int64, reason: String, on c: PostgresConnection) throws {
        try c.execute("UPDATE google_cancellations SET last_error = $2 WHERE id = $1", [id, String(reason.prefix(1000))])
    }
}

/// Pays one owed cancellation: claim, read Google, `subscriptionsv2.cancel`, read Google again, settle by Google's
/// state only.
///
/// - A `stop_renewals` whose deletion request was withdrawn before the call is settled `withdrawn`, with no call.
/// - Before the call: a purchase Google says renews no more (EXPIRED, PENDING_PURCHASE_CANCELED, CANCELED by a
///   replacement — an older token of a `linkedPurchaseToken` chain — or, for `stop_renewals`, CANCELED at all) or
///   no longer knows (400/404/410) is settled `already_ended` without a call. A CANCELED purchase that can still be
///   restored (not replaced, not expired) gets the erasure's `stop_payments`, which makes it unrestorable.
/// - After every call Google is read again: a state that is still chargeable (ACTIVE, IN_GRACE_PERIOD, ON_HOLD,
///   PAUSED, PENDING) keeps the row owed whatever the call answered; otherwise it is settled `cancelled` (Google
///   accepted) or `already_ended` (Google refused: it had ended already).
/// - 401/403 (the service account lacks Play Console's order-management permission) raise the alert
///   `RCV-GOOGLE-CANCEL-FORBIDDEN` at once, on every attempt while it lasts; 429, 5xx, 409, timeouts and transport
///   failures keep the row owed. Either way it is due again after the claim's back-off.
///
/// Thread rules: a value; safe from any thread. Never holds a database connection during an HTTP call.
struct GoogleCanceller: Sendable {
    enum Outcome: String, Sendable {
        case cancelled
        case alreadyEnded = "already_ended"
        case withdrawn
    }

    enum Result: Sendable, Equatable {
        case settled(Outcome)
        case owed(reason: String)
        case notClaimed
    }

    /// The back-off base: 1 min, doubling per attempt up to 64 min.
    static let retry: Duration = .seconds(60)
    static let forbiddenAlert = "RCV-GOOGLE-CANCEL-FORBIDDEN"
    /// Google's states under which the person can still be charged.
    static let chargeableStates: Set<String> = ["SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD",
                                                "SUBSCRIPTION_STATE_ON_HOLD", "SUBSCRIPTION_STATE_PAUSED",
                                                "SUBSCRIPTION_STATE_PENDING"]

    let play: GooglePlayClient
    let pool: PostgresPool
    /// `RECEIPTS_GOOGLE_PACKAGE_NAMES`: its only entry is the package of a row that recorded none.
    let packageNames: [String]
    let now: @Sendable () -> Date

    func pay(id: Int64, cancellation: HTTPCancellation?, logger: Logger) -> Result {
        var logger = logger
        logger[metadataKey: "cancellation_id"] = "\(id)"
        do {
            guard let claim = try pool.withConnection({
                try GoogleCancellationStore.claim(id: id, now: now(), retry: Self.retry, on: $0)
            }) else { return .notClaimed }
            logger[metadataKey: "kind"] = "\(claim.kind.rawValue)"
            if claim.kind == .stopRenewals && claim.withdrawn {
                return try settle(claim, .withdrawn, logger: logger)
            }
            guard let package = claim.packageName ?? (packageNames.count == 1 ? packageNames.first : nil) else {
                return owed(claim, "the purchase's package name is unknown (set RECEIPTS_GOOGLE_PACKAGE_NAMES)", logger: logger)
            }
            if let outcome = try attempt(claim, package: package, cancellation: cancellation) {
                return try settle(claim, outcome, logger: logger)
            }
            return owed(claim, "Google still shows a chargeable subscription after the cancel", logger: logger)
        } catch let forbidden as GooglePlayClient.Forbidden {
            let message = "alert \(Self.forbiddenAlert): Google Play refused to cancel the subscription of an erased or "
                + "deleting account (HTTP \(forbidden.status)): give the service account the Play Console permission "
                + "\"Manage orders and subscriptions\"; the cancellation stays owed and is retried"
            logger.error("\(message)", metadata: ["alert": "\(Self.forbiddenAlert)", "configuration": "true"])
            try? pool.withConnection { try GoogleCancellationStore.failed(id: id, reason: "\(forbidden)", on: $0) }
            return .owed(reason: "\(forbidden)")
        } catch {
            let reason = "\(error)"
            try? pool.withConnection { try GoogleCancellationStore.failed(id: id, reason: reason, on: $0) }
            logger.warning("Google cancellation still owed; retried by GoogleAcknowledgementSweepJob",
                           metadata: ["error": "\(reason)"])
            return .owed(reason: reason)
        }
    }

    private func settle(_ claim: GoogleCancellationStore.Claim, _ outcome: Outcome, logger: Logger) throws -> Result {
        try pool.withConnection { try GoogleCancellationStore.settle(id: claim.id, outcome: outcome, on: $0) }
        logger.info("Google cancellation settled", metadata: ["outcome": "\(outcome.rawValue)", "attempt": "\(claim.attempt)"])
        return .settled(outcome)
    }

    private func owed(_ claim: GoogleCancellationStore.Claim, _ reason: String, logger: Logger) -> Result {
        try? pool.withConnection { try GoogleCancellationStore.failed(id: claim.id, reason: reason, on: $0) }
        logger.warning("Google cancellation still owed: \(reason)")
        return .owed(reason: reason)
    }

    /// The outcome that settles the claim, or nil when it stays owed; throws when Google cannot answer now.
    private func attempt(_ claim: GoogleCancellationStore.Claim, package: String,
                         cancellation: HTTPCancellation?) throws -> Outcome? {
        guard case .found(let before) = try play.subscription(packageName: package, purchaseToken: claim.purchaseToken,
                                                             cancellation: cancellation),
              Self.needsCall(before, kind: claim.kind, now: now()) else { return .alreadyEnded }
        let answer = try play.cancel(packageName: package, purchaseToken: claim.purchaseToken,
                                     cancellationType: claim.kind.googleType, cancellation: cancellation)
        // Settled by Google's state only, read again after every call (as the acknowledgement sweep does).
        guard case .found(let after) = try play.subscription(packageName: package, purchaseToken: claim.purchaseToken,
                                                            cancellation: cancellation) else { return .alreadyEnded }
        if Self.chargeableStates.contains(after.subscriptionState ?? "") { return nil }
        return answer == .accepted ? .cancelled : .alreadyEnded
    }

    /// Whether `purchase` still needs our call: chargeable, or (for `stop_payments`) cancelled in a way the user could
    /// still restore before it expires.
    static func needsCall(_ purchase: GoogleSubscriptionPurchase, kind: GoogleCancellationKind, now: Date) -> Bool {
        let state = purchase.subscriptionState ?? ""
        if chargeableStates.contains(state) { return true }
        guard kind == .stopPayments, state == "SUBSCRIPTION_STATE_CANCELED",
              purchase.canceledStateContext?.replacementCancellation == nil else { return false }
        let expiry = purchase.lineItems?.compactMap { RFC3339.parse($0.expiryTime) }.max()
        return expiry.map { $0 > now } ?? false
    }
}

extension GoogleAcknowledgementSweepJob {
    /// Pays every owed Google cancellation that is due (`google_cancellations`), batch after batch until none is due
    /// by the receipt jobs' clock. Returns (settled, still owed).
    func payCancellations(pool: PostgresPool, context: JobContext, cancellation: HTTPCancellation) throws -> (Int, Int) {
        let canceller = GoogleCanceller(play: try services.requireGoogle(), pool: pool,
                                        packageNames: Array(services.configuration.googlePackageNames), now: services.now)
        var settled = 0, owed = 0
        var seen = Set<Int64>()
        while !context.isCancelled {
            let batch = try pool.withConnection {
                try GoogleCancellationStore.due(now: services.now(), limit: services.configuration.sweepBatchSize, on: $0)
            }.filter { !seen.contains($0) }
            if batch.isEmpty { break }
            for id in batch where !context.isCancelled {
                seen.insert(id)
                switch canceller.pay(id: id, cancellation: cancellation, logger: context.logger) {
                case .settled: settled += 1
                case .owed: owed += 1
                case .notClaimed: break
                }
            }
        }
        return (settled, owed)
    }
}

/// A renewal charged on a subscription an erasure detached from its user (Apple: only the user can stop it; Google:
/// a cancellation not settled yet): alerted once per subscription, never per renewal.
enum DetachedRenewal {
    static let alert = "RCV-RENEWAL-AFTER-ERASURE"
    /// Our event types that record a payment of a new period.
    static let renewalEvents: Set<String> = ["renewed", "recovered"]

    /// Inside the notification's transaction: true when `eventType` is a renewal on a row an erasure detached and no
    /// renewal on it was alerted before (the mark commits with the notification, so a redelivery does not alert
    /// again).
    static func markFirst(subscriptionID: UUID, eventType: String, on c: PostgresConnection) throws -> Bool {
        guard renewalEvents.contains(eventType) else { return false }
        return try c.execute("""
            UPDATE subscriptions SET detached_renewal_alerted_at = now()
            WHERE id = $1 AND user_id IS NULL AND detached_at IS NOT NULL AND detached_renewal_alerted_at IS NULL
            """, [subscriptionID]) == 1
    }

    /// The alert, after the commit (ids only).
    static func raise(store: String, subscriptionID: UUID, logger: Logger) {
        let advice = store == "apple"
            ? "Apple offers no server-side cancel: only the subscriber can stop it (Settings, Subscriptions)"
            : "check google_cancellations for this subscription"
        logger.error("alert \(alert): a \(store) renewal was charged on a subscription an account erasure detached; \(advice)",
                     metadata: ["alert": "\(alert)", "store": "\(store)",
                                "subscription_id": "\(subscriptionID.uuidString.lowercased())"])
    }
}
