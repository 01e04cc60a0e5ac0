import Foundation
import WorkersStorage

/// Effects of Google's purchase facts on subscriptions other than the one being applied, and on voided orders.
/// Every function runs on the connection it is given, inside the caller's transaction.
enum GooglePurchaseEffects {
    /// A purchase that replaces another (upgrade, downgrade, resubscribe: `linkedPurchaseToken`, per
    /// developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2) ends the linked token's
    /// entitlement at once, whichever account held it: the old row becomes `expired` at `time`, its user (if that
    /// subscription is still the user's current one) goes back to `free`, and one `replaced` event is recorded.
    /// Idempotent: a row already ended is left as it is.
    static func endReplaced(by purchase: GoogleSubscriptionPurchase, token: String, at time: Date, on c: PostgresConnection) throws {
        guard let linked = purchase.linkedPurchaseToken, !linked.isEmpty, linked != token,
              let old = try SubscriptionStore.subscription(store: .google, key: linked, on: c) else { return }
        let changed = try c.execute("""
            UPDATE subscriptions SET status = 'expired', end_date = LEAST(COALESCE(end_date, $2), $2), auto_renew = false,
                   grace_period_end = NULL, cancelled_at = COALESCE(cancelled_at, $2),
                   store_state_at = GREATEST(COALESCE(store_state_at, $2), $2), updated_at = now()
            WHERE id = $1 AND status IN ('pending', 'trial', 'active', 'grace_period', 'on_hold', 'paused')
            """, [old.id, time])
        guard changed == 1 else { return }
        try SubscriptionStore.applyEntitlement(subscriptionID: old.id, userID: old.userID, entitled: false, on: c)
        try SubscriptionStore.event(old.id, type: "replaced",
                                    data: ["source": "google_linked_purchase", "replaced_by": Redact.fingerprint(token)],
                                    idempotencyKey: replacedKey(old.id), on: c)
    }

    /// Whether a later purchase of our table replaced subscription `id` (`endReplaced` recorded its `replaced` event,
    /// in the transaction that ended it). Such a token's notifications never apply Google's state of it again: with a
    /// deferred replacement Google may still call the old token ACTIVE or CANCELED-before-expiry until its period ends
    /// (developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2: `linkedPurchaseToken`), and
    /// applying it would take the user's current subscription back from the new token to the old product.
    static func wasReplaced(_ id: UUID, on c: PostgresConnection) throws -> Bool {
        try c.queryFirst("SELECT 1 AS one FROM subscription_events WHERE idempotency_key = $1",
                         [replacedKey(id)]) != nil
    }

    private static func replacedKey(_ id: UUID) -> String { "google:replaced:\(id.uuidString.lowercased())" }

    /// Whether a voided order (`voidedPurchaseNotification.orderId`) revokes the period: only when Google's
    /// state no longer entitles (a revoke ends it at once: developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2/revoke).
    /// A refund without revoke leaves the subscription "valid until its expiration time" and renewing
    /// (developers.google.com/android-publisher/api-ref/purchases/subscriptions/refund; review L-c), and a chargeback on
    /// an older renewal order leaves a period Google still calls ACTIVE alone: while Google entitles, the period stands.
    static func voidRevokesPeriod(purchase: GoogleSubscriptionPurchase, productID: String, now: Date) -> Bool {
        !purchase.entitles(productID: productID, now: now)
    }

    /// Whether the voided order paid the current period (`latestSuccessfulOrderId`; no order named counts as current).
    static func voidIsCurrentOrder(voidedOrderID: String?, purchase: GoogleSubscriptionPurchase, productID: String) -> Bool {
        guard let voided = voidedOrderID, !voided.isEmpty, let current = purchase.currentOrderID(productID: productID) else {
            return true
        }
        return voided == current
    }
}
