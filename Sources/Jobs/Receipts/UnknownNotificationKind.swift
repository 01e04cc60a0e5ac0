import Foundation
import Logging
import WorkersStorage

/// The notification kinds the receipt jobs know, and the alert a kind outside them raises (review 2026-12-07 L-e:
/// "A new notification kind is silently recorded `ignored` and nobody learns that it exists").
///
/// A kind nobody knows is still recorded in `store_notifications` (its `notification_type` is the kind, so the rows
/// count it); the alert `RCV-NOTIFICATION-UNKNOWN` is logged at error level with the store, the kind and how many
/// notifications of that kind have been recorded so far (`count`), on every occurrence. A value; pure except
/// `count`, which reads the caller's connection.
enum UnknownNotificationKind {
    static let alert = "RCV-NOTIFICATION-UNKNOWN"

    /// Apple's `notificationType` values (App Store Server Notifications V2, developer.apple.com/documentation/
    /// appstoreservernotifications/notificationtype, as apple/app-store-server-library-swift's `NotificationTypeV2`
    /// lists them).
    static let appleTypes: Set<String> = [
        "SUBSCRIBED", "DID_CHANGE_RENEWAL_PREF", "DID_CHANGE_RENEWAL_STATUS", "OFFER_REDEEMED", "DID_RENEW", "EXPIRED",
        "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED", "PRICE_INCREASE", "REFUND", "REFUND_DECLINED", "CONSUMPTION_REQUEST",
        "RENEWAL_EXTENDED", "REVOKE", "TEST", "RENEWAL_EXTENSION", "REFUND_REVERSED", "EXTERNAL_PURCHASE_TOKEN",
        "ONE_TIME_CHARGE",
    ]

    /// The kinds of a Google `DeveloperNotification` (one is set per message): developer.android.com/google/play/
    /// billing/rtdn-reference. `oneTimeProductNotification` is known and ignored (no one-time products are sold).
    static let googleKinds: Set<String> = [
        "subscriptionNotification", "oneTimeProductNotification", "voidedPurchaseNotification", "testNotification",
    ]

    /// `SubscriptionNotification.notificationType` values of the same reference (1–13, and 20 PENDING_PURCHASE_CANCELED).
    static let googleSubscriptionTypes: Set<Int> = Set(1...13).union([20])

    /// How many notifications of `kind` from `store` are recorded (this one included when it is).
    static func count(store: Store, kind: String, on c: PostgresConnection) throws -> Int64 {
        try c.queryFirst("""
            SELECT count(*) AS n FROM store_notifications WHERE store = $1 AND notification_type = $2
            """, [store.rawValue, kind])?.int64("n") ?? 0
    }

    /// A kind as recorded and logged: at most 64 characters (a Google kind is a JSON key of the message).
    static func shown(_ kind: String) -> String { String(kind.prefix(64)) }

    static func raise(store: Store, kind: String, count: Int64, logger: Logger) {
        logger.error("alert \(alert): \(store.rawValue) sent a notification kind this release does not know; it is recorded in store_notifications",
                     metadata: ["alert": "\(alert)", "store": "\(store.rawValue)", "kind": "\(shown(kind))", "count": "\(count)"])
    }
}
