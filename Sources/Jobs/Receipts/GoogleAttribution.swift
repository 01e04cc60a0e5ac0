import Crypto
import Foundation
import WorkersStorage
import Workers

/// The value the Android app sets as the purchase's obfuscated account id (`BillingFlowParams.Builder
/// .setObfuscatedAccountId`, returned by Google as `externalAccountIdentifiers.obfuscatedExternalAccountId`): the
/// lowercase hex SHA-256 of the user's id written as lowercase UUID text, 64 characters (Google's limit is 64).
/// It names our user without revealing the id; PostgreSQL computes the same value
/// (`encode(sha256(id::text::bytea), 'hex')`, indexed by migration 0017).
public enum GoogleAccountHash {
    public static func of(_ user: UUID) -> String {
        SHA256.hash(data: Data(user.uuidString.lowercased().utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// Whether `obfuscated` names `user` (case-insensitive hex); nil when the purchase carries none.
    static func matches(_ obfuscated: String?, user: UUID) -> Bool? {
        obfuscated.map { $0.lowercased() == of(user) }
    }
}

/// Who a purchase we never saw (an out-of-app purchase: a resubscribe in the Play Store, a promo code, or a purchase
/// the app never posted) belongs to, found from Google's purchase alone, in this order:
/// 1. `linkedPurchaseToken`: a token we know → its user (the purchase replaces it);
/// 2. `outOfAppPurchaseContext.expiredPurchaseToken`: a token we know → its user (Google: use it "only … if the link
///    between the purchaseToken and user is stored in your database");
/// 3. `externalAccountIdentifiers.obfuscatedExternalAccountId` = `GoogleAccountHash.of(user)` (what the app set on this
///    purchase);
/// 4. `outOfAppPurchaseContext.expiredExternalAccountIdentifiers.obfuscatedExternalAccountId` = `GoogleAccountHash.of(user)`:
///    "User account identifier from the last expired subscription for this SKU" (googleapis.dev …OutOfAppPurchaseContext),
///    i.e. what our app set on the purchase this Play Store resubscribe follows, even when that purchase's token was never
///    stored here (bought before this system, or its token lost) — review L-d.
/// An anonymised (erased) user is never chosen. The plan is the user's app's plan whose `google_product_id` is a line
/// item's `productId`. Every function runs on the connection it is given.
struct GoogleAttribution: Sendable {
    enum Source: String, Sendable {
        case linkedPurchaseToken = "linked_purchase_token"
        case expiredPurchaseToken = "expired_purchase_token"
        case obfuscatedAccountID = "obfuscated_account_id"
        case expiredObfuscatedAccountID = "expired_obfuscated_account_id"
    }

    let owner: SubscriptionOwner
    let userID: UUID
    let productID: String
    let source: Source

    /// Why a purchase could not be attributed (carries no token).
    struct Unattributed: Error, Sendable {
        let reason: String
    }

    static func attribute(_ purchase: GoogleSubscriptionPurchase, token: String,
                          on c: PostgresConnection) throws -> Result<GoogleAttribution, Unattributed> {
        var found: (user: UUID, app: UUID, source: Source)?
        for (known, source) in [(purchase.linkedPurchaseToken, Source.linkedPurchaseToken),
                                (purchase.outOfAppPurchaseContext?.expiredPurchaseToken, .expiredPurchaseToken)] {
            guard found == nil, let known, !known.isEmpty, known != token,
                  let user = try SubscriptionStore.subscription(store: .google, key: known, on: c)?.userID,
                  let app = try liveUserApp(user, on: c) else { continue }
            found = (user, app, source)
        }
        let expiredObfuscated = purchase.outOfAppPurchaseContext?.expiredExternalAccountIdentifiers?.obfuscatedExternalAccountId
        for (obfuscated, source) in [(purchase.obfuscatedAccountID, Source.obfuscatedAccountID),
                                     (expiredObfuscated, .expiredObfuscatedAccountID)] {
            guard found == nil, let obfuscated, !obfuscated.isEmpty,
                  let row = try c.queryFirst("""
                      SELECT id, app_id FROM users
                      WHERE encode(sha256(id::text::bytea), 'hex') = lower($1) AND anonymized_at IS NULL
                      """, [obfuscated]) else { continue }
            found = (try row.uuid("id"), try row.uuid("app_id"), source)
        }
        guard let found else {
            return .failure(Unattributed(reason: "no linkedPurchaseToken or expiredPurchaseToken we know, and no "
                                         + "obfuscatedExternalAccountId (own or expired) naming a user of ours"))
        }
        for product in (purchase.lineItems ?? []).compactMap(\.productId) {
            if let plan = try c.queryFirst("""
                SELECT id, plan_type FROM subscription_plans WHERE app_id = $1 AND google_product_id = $2
                """, [found.app, product]) {
                let owner = SubscriptionOwner(userID: found.user, appID: found.app, planID: try plan.uuid("id"),
                                              planType: try plan.string("plan_type"))
                return .success(GoogleAttribution(owner: owner, userID: found.user, productID: product, source: found.source))
            }
        }
        return .failure(Unattributed(reason: "the user found by \(found.source.rawValue) has no plan for the purchase's products"))
    }

    /// The app of a user who is not anonymised.
    private static func liveUserApp(_ user: UUID, on c: PostgresConnection) throws -> UUID? {
        try c.queryFirst("SELECT app_id FROM users WHERE id = $1 AND anonymized_at IS NULL", [user]).map { try $0.uuid("app_id") }
    }
}

/// Notifications kept for a replay (`store_notifications.store_key` / `replay_args`, migration 0017).
///
/// Invariant: a notification recorded `unmatched` (Apple, or a Google token Google does not know) or `unattributed`
/// (a Google purchase no user of ours could be found for) keeps the store's key and the job's arguments. A
/// validation that commits a subscription with that key enqueues the notification job again (`workers_enqueue`, in
/// the validation's own transaction, in the order the notifications arrived) and clears the key, so one row is
/// replayed once per validation. The replayed job takes the row over (`SubscriptionStore.claimNotification`), reads
/// the state again and applies it; the `store_state_at` guard keeps an older state from overwriting a newer one.
/// Every function runs on the connection it is given, inside the caller's transaction.
enum NotificationReplay {
    /// After `SubscriptionStore.claimNotification`/before `finishNotification`: keeps what a replay needs.
    /// `owesAcknowledgement`: a Google purchase waiting for its acknowledgement (the late alert is for those only).
    static func keep(store: Store, id: String, key: String, arguments: [[String: Any]], owesAcknowledgementSince: Date? = nil,
                     on c: PostgresConnection) throws {
        let json = String(decoding: try JSONSerialization.data(withJSONObject: arguments, options: [.sortedKeys]), as: UTF8.self)
        try c.execute("""
            UPDATE store_notifications SET store_key = $3, replay_args = $4::jsonb,
                   unattributed_since = COALESCE(unattributed_since, $5)
            WHERE store = $1 AND notification_id = $2
            """, [store.rawValue, id, key, json, owesAcknowledgementSince])
    }

    /// Enqueues the replay of every kept notification for `key` on `queue` (the validation's: the receipts queue),
    /// oldest first; returns how many.
    @discardableResult
    static func enqueueReplays(store: Store, key: String, queue: String, on c: PostgresConnection) throws -> Int {
        let rows = try c.query("""
            WITH kept AS (
                SELECT notification_id, received_at FROM store_notifications
                WHERE store = $1 AND store_key = $2 AND outcome IN ('unmatched', 'unattributed')
                FOR UPDATE
            )
            UPDATE store_notifications n SET store_key = NULL FROM kept
            WHERE n.store = $1 AND n.notification_id = kept.notification_id AND n.replay_args IS NOT NULL
            RETURNING n.replay_args::text AS args, kept.received_at, n.notification_id
            """, [store.rawValue, key])
        let ordered = try rows.map { (try $0.string("args"), try $0.date("received_at"), try $0.string("notification_id")) }
            .sorted { ($0.1, $0.2) < ($1.1, $1.2) }
        let className = store == .apple ? AppStoreNotificationJob.className : PlayNotificationJob.className
        for (args, _, _) in ordered {
            _ = try c.queryFirst("SELECT workers_enqueue($1, $2::jsonb, $3) AS jid", [className, args, queue])
        }
        return ordered.count
    }

    /// Google purchases still unattributed and unacknowledged since `before` whose late alert has not fired: marks
    /// them alerted at `now` and returns their notification ids and first-seen times.
    static func lateUnattributed(before: Date, now: Date, on c: PostgresConnection) throws -> [(id: String, since: Date)] {
        try c.query("""
            UPDATE store_notifications SET alerted_at = $2
            WHERE store = 'google' AND outcome = 'unattributed' AND store_key IS NOT NULL AND alerted_at IS NULL
              AND unattributed_since <= $1
            RETURNING notification_id, unattributed_since
            """, [before, now]).map { (try $0.string("notification_id"), try $0.date("unattributed_since")) }
    }
}
