import Foundation
import WorkersStorage

/// `subscription_plans` row a validation is for.
struct PlanRecord: Sendable {
    let id: UUID
    let appID: UUID
    let planType: String
    let appleProductID: String?
    let googleProductID: String?

    func productID(for store: Store) -> String? { store == .apple ? appleProductID : googleProductID }
}

/// Who a subscription belongs to (from the validation's arguments).
struct SubscriptionOwner: Sendable {
    let userID: UUID?
    let appID: UUID
    let planID: UUID?
    let planType: String
}

/// A subscription row already known.
struct ExistingSubscription: Sendable {
    let id: UUID
    let userID: UUID?
    let appID: UUID
    let planID: UUID?
    let planType: String
    let productID: String

    var owner: SubscriptionOwner { SubscriptionOwner(userID: userID, appID: appID, planID: planID, planType: planType) }
}

/// Result of the idempotent upsert.
struct UpsertOutcome: Sendable {
    let subscriptionID: UUID
    let userID: UUID?
    /// The row now holds this state (false: it already held a state the store asserted later).
    let applied: Bool
    let previousStatus: String?
}

/// The SQL of the receipt jobs. Every function runs on the connection it is given (inside the caller's
/// transaction when there is one) and only with parameters: no value is ever spliced into SQL.
enum SubscriptionStore {
    static func plan(_ id: UUID, on c: PostgresConnection) throws -> PlanRecord? {
        guard let row = try c.queryFirst("""
            SELECT id, app_id, plan_type, apple_product_id, google_product_id FROM subscription_plans WHERE id = $1
            """, [id]) else { return nil }
        return PlanRecord(id: try row.uuid("id"), appID: try row.uuid("app_id"), planType: try row.string("plan_type"),
                          appleProductID: try row.optionalString("apple_product_id"),
                          googleProductID: try row.optionalString("google_product_id"))
    }

    static func userApp(_ id: UUID, on c: PostgresConnection) throws -> UUID? {
        try c.queryFirst("SELECT app_id FROM users WHERE id = $1", [id]).map { try $0.uuid("app_id") }
    }

    /// `(id, user_id)` of the subscription with upsert key `key`, if any.
    static func subscription(store: Store, key: String, on c: PostgresConnection) throws -> ExistingSubscription? {
        try c.queryFirst("""
            SELECT id, user_id, app_id, plan_id, plan_type, store_product_id FROM subscriptions
            WHERE store = $1 AND store_transaction_id = $2
            """, [store.rawValue, key]).map {
            ExistingSubscription(id: try $0.uuid("id"), userID: try $0.optionalUUID("user_id"), appID: try $0.uuid("app_id"),
                                 planID: try $0.optionalUUID("plan_id"), planType: try $0.string("plan_type"),
                                 productID: try $0.string("store_product_id"))
        }
    }

    /// Gives subscription `id` to `newOwner` (L2): the previous owner loses it as their current subscription (back to
    /// `free` when it was), and an `ownership_moved` event records the change. The caller has checked the proof.
    static func moveOwner(_ id: UUID, from previous: UUID, to newOwner: UUID, on c: PostgresConnection) throws {
        try c.execute("UPDATE subscriptions SET user_id = $2, updated_at = now() WHERE id = $1", [id, newOwner])
        try c.execute("""
            UPDATE users SET status = CASE WHEN status = 'premium' THEN 'free' ELSE status END, subscription_id = NULL,
                             updated_at = now()
            WHERE id = $1 AND subscription_id = $2
            """, [previous, id])
        try event(id, type: "ownership_moved", data: ["source": "validation", "reason": "latest transaction's appAccountToken"],
                  idempotencyKey: "ownership:\(id.uuidString.lowercased()):\(newOwner.uuidString.lowercased())", on: c)
    }

    /// The end of the period the subscription row holds (`end_date`).
    static func periodEnd(_ id: UUID, on c: PostgresConnection) throws -> Date? {
        try c.queryFirst("SELECT end_date FROM subscriptions WHERE id = $1", [id]).flatMap { try $0.optionalDate("end_date") }
    }

    /// A Google purchase voided (refund or chargeback): refunded now, not entitled.
    static func markRefunded(_ id: UUID, at time: Date, on c: PostgresConnection) throws {
        try c.execute("""
            UPDATE subscriptions SET status = 'refunded', cancelled_at = COALESCE(cancelled_at, $2),
                   end_date = LEAST(COALESCE(end_date, $2), $2), auto_renew = false, grace_period_end = NULL,
                   store_state_at = GREATEST(COALESCE(store_state_at, $2), $2), updated_at = now()
            WHERE id = $1
            """, [id, time])
    }

    /// Inserts or updates the subscription keyed by `state.key` (`store_transaction_id`). Owner and start date stay
    /// those of the first validation; store facts (status, dates, auto-renew, product, `cancelled_at`) follow the
    /// newest state, and the plan follows the product (a crossgrade) when one of the app's plans sells it.
    static func upsert(_ state: StoreSubscriptionState, owner: SubscriptionOwner, on c: PostgresConnection) throws -> UpsertOutcome {
        let previous = try c.queryFirst("SELECT status FROM subscriptions WHERE store_transaction_id = $1 FOR UPDATE",
                                        [state.key]).map { try $0.string("status") }
        let rows = try c.query("""
            INSERT INTO subscriptions (app_id, user_id, plan_id, plan_type, status, start_date, end_date, trial_end_date,
                                       grace_period_end, auto_renew, store, store_product_id, store_transaction_id,
                                       store_original_transaction_id, cancelled_at, store_state_at, store_environment,
                                       ownership_type)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
            ON CONFLICT (store_transaction_id) DO UPDATE SET
                status = EXCLUDED.status,
                end_date = EXCLUDED.end_date,
                trial_end_date = COALESCE(EXCLUDED.trial_end_date, subscriptions.trial_end_date),
                grace_period_end = EXCLUDED.grace_period_end,
                auto_renew = EXCLUDED.auto_renew,
                store_product_id = EXCLUDED.store_product_id,
                -- A crossgrade (monthly → annual keeps Apple's original transaction id, Google's token chain) moves
                -- the row to the plan of the product the store now names, when the app has one.
                plan_id = COALESCE((SELECT p.id FROM subscription_plans p
                                    WHERE p.app_id = subscriptions.app_id
                                      AND CASE EXCLUDED.store WHEN 'apple' THEN p.apple_product_id ELSE p.google_product_id END
                                          = EXCLUDED.store_product_id), subscriptions.plan_id),
                plan_type = COALESCE((SELECT p.plan_type FROM subscription_plans p
                                      WHERE p.app_id = subscriptions.app_id
                                        AND CASE EXCLUDED.store WHEN 'apple' THEN p.apple_product_id ELSE p.google_product_id END
                                            = EXCLUDED.store_product_id), subscriptions.plan_type),
                -- The store's value: a refund reversed or a subscription restarted clears it.
                cancelled_at = EXCLUDED.cancelled_at,
                store_state_at = EXCLUDED.store_state_at,
                -- Environment and ownership (migration 0023): the store's word when it gives one.
                store_environment = COALESCE(EXCLUDED.store_environment, subscriptions.store_environment),
                ownership_type = COALESCE(EXCLUDED.ownership_type, subscriptions.ownership_type),
                updated_at = now()
            WHERE subscriptions.store = EXCLUDED.store
              AND (subscriptions.store_state_at IS NULL OR subscriptions.store_state_at <= EXCLUDED.store_state_at)
            RETURNING id, user_id
            """, [owner.appID, owner.userID, owner.planID, owner.planType, state.status.rawValue, state.startDate,
                  state.endDate, state.trialEndDate, state.gracePeriodEnd, state.autoRenew, state.store.rawValue,
                  state.productID, state.key, state.originalTransactionID, state.cancelledAt, state.stateAt,
                  state.environment, state.ownershipType])
        if let row = rows.first {
            return UpsertOutcome(subscriptionID: try row.uuid("id"), userID: try row.optionalUUID("user_id"), applied: true,
                                 previousStatus: previous)
        }
        guard let existing = try subscription(store: state.store, key: state.key, on: c) else {
            throw PostgresError(category: .query, message: "subscription upsert returned no row for a \(state.store) key")
        }
        return UpsertOutcome(subscriptionID: existing.id, userID: existing.userID, applied: false, previousStatus: previous)
    }

    /// Records one event; `idempotencyKey` makes a repeated event a no-op. Returns whether it was new.
    @discardableResult
    static func event(_ subscriptionID: UUID, type: String, data: [String: String], idempotencyKey: String,
                      on c: PostgresConnection) throws -> Bool {
        let json = (try? JSONSerialization.data(withJSONObject: data, options: [.sortedKeys]))
            .map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        return try c.execute("""
            INSERT INTO subscription_events (subscription_id, event_type, event_data, idempotency_key)
            VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (idempotency_key) DO NOTHING
            """, [subscriptionID, type, json, idempotencyKey]) == 1
    }

    /// Premium for an entitled subscription; back to free when the user's current subscription stops being one.
    /// Never links an erased user (`anonymized_at`): a store notification that read the subscription just before the
    /// erasure committed waits here for the erasure's row lock, then finds the account anonymised (ErasedUser).
    static func applyEntitlement(subscriptionID: UUID, userID: UUID?, entitled: Bool, on c: PostgresConnection) throws {
        if entitled, let userID {
            try c.execute("""
                UPDATE users SET status = 'premium', subscription_id = $2, updated_at = now()
                WHERE id = $1 AND status <> 'suspended' AND (status <> 'premium' OR subscription_id IS DISTINCT FROM $2)
                  AND anonymized_at IS NULL
                """, [userID, subscriptionID])
        } else if !entitled {
            try c.execute("""
                UPDATE users SET status = 'free', updated_at = now() WHERE subscription_id = $1 AND status = 'premium'
                """, [subscriptionID])
        }
    }

    /// The validated receipt row, keyed by (store, transaction id).
    static func validatedReceipt(_ state: StoreSubscriptionState, owner: SubscriptionOwner, subscriptionID: UUID,
                                 receiptData: String?, on c: PostgresConnection) throws {
        try c.execute("""
            INSERT INTO iap_receipts (app_id, user_id, subscription_id, store, receipt_data, transaction_id,
                                      original_transaction_id, product_id, purchase_date, expiration_date, is_trial,
                                      is_active, validated, validation_date, validation_status, validation_error)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, true, now(), 0, NULL)
            ON CONFLICT (store, transaction_id) WHERE transaction_id IS NOT NULL DO UPDATE SET
                user_id = EXCLUDED.user_id, receipt_data = EXCLUDED.receipt_data,
                subscription_id = EXCLUDED.subscription_id, expiration_date = EXCLUDED.expiration_date,
                is_trial = EXCLUDED.is_trial, is_active = EXCLUDED.is_active, validated = true,
                validation_date = now(), validation_status = 0, validation_error = NULL
            """, [owner.appID, owner.userID, subscriptionID, state.store.rawValue, receiptData, state.transactionID,
                  state.originalTransactionID, state.productID, state.startDate, state.endDate,
                  state.status == .trial, state.status.isEntitled])
    }

    /// An invalid receipt, with the store's status and our reason. Never overwrites a receipt already validated
    /// (a forged or replayed receipt cannot invalidate a genuine one).
    static func invalidReceipt(store: Store, appID: UUID, userID: UUID, transactionID: String, productID: String?,
                               receiptData: String?, status: Int?, error: String, on c: PostgresConnection) throws {
        try c.execute("""
            INSERT INTO iap_receipts (app_id, user_id, store, receipt_data, transaction_id, product_id, validated,
                                      validation_date, validation_status, validation_error)
            VALUES ($1, $2, $3, $4, $5, $6, false, now(), $7, $8)
            ON CONFLICT (store, transaction_id) WHERE transaction_id IS NOT NULL DO UPDATE SET
                validation_date = now(), validation_status = EXCLUDED.validation_status,
                validation_error = EXCLUDED.validation_error
            WHERE NOT iap_receipts.validated
            """, [appID, userID, store.rawValue, receiptData, transactionID, productID, status, error])
    }

    /// Claims a notification id; false when it was handled before (a duplicate). A notification recorded
    /// `unmatched` or `unattributed` is not final: its redelivery or replay (`NotificationReplay`) takes the row over
    /// (what it kept for the replay is cleared; the job keeps it again if it is still unmatched).
    static func claimNotification(store: Store, id: String, type: String, subtype: String?, on c: PostgresConnection) throws -> Bool {
        try c.execute("""
            INSERT INTO store_notifications (store, notification_id, notification_type, subtype, outcome)
            VALUES ($1, $2, $3, $4, 'ignored') ON CONFLICT (store, notification_id) DO UPDATE
                SET outcome = 'ignored', store_key = NULL, replay_args = NULL
                WHERE store_notifications.outcome IN ('unmatched', 'unattributed')
            """, [store.rawValue, id, type, subtype]) == 1
    }

    static func finishNotification(store: Store, id: String, outcome: String, subscriptionID: UUID?, on c: PostgresConnection) throws {
        try c.execute("""
            UPDATE store_notifications SET outcome = $3, subscription_id = $4 WHERE store = $1 AND notification_id = $2
            """, [store.rawValue, id, outcome, subscriptionID])
    }

    static func notificationSeen(store: Store, id: String, on c: PostgresConnection) throws -> Bool {
        try c.queryFirst("""
            SELECT 1 AS one FROM store_notifications
            WHERE store = $1 AND notification_id = $2 AND outcome NOT IN ('unmatched', 'unattributed')
            """, [store.rawValue, id]) != nil
    }
}
