import Foundation

/// Where an App Store notification's effect on the subscription row it names comes from (issue 52, point 2): the
/// notification's own transaction, Get All Subscription Statuses, or nowhere (an older transaction: its event is
/// recorded, the row is left as it is).
///
/// Any notification that carries a `signedTransactionInfo` can be about a period older than the one the row holds:
/// Apple retries an undelivered notification for days (developer.apple.com/documentation/appstoreservernotifications/
/// responding-to-app-store-server-notifications), and REFUND, REFUND_REVERSED, REFUND_DECLINED and CONSUMPTION_REQUEST
/// name the transaction the customer disputes, often a past renewal ("If your app revoked content or services as a
/// result of the related refund, it needs to reinstate them", REFUND_REVERSED,
/// developer.apple.com/documentation/appstoreservernotifications/notificationtype). The notification's `signedDate`
/// says when Apple signed it, not which period it is about: it never decides here.
///
/// Decision, in order (`heldPeriodEnd` is the row's `end_date`; the row is keyed by `originalTransactionId`, so the
/// transaction is one of the row's):
/// 1. `older`: the transaction's `expiresDate` (JWSTransactionDecodedPayload,
///    developer.apple.com/documentation/appstoreserverapi/jwstransactiondecodedpayload) is before `heldPeriodEnd` —
///    except an `UPGRADE` subtype (DID_CHANGE_RENEWAL_PREF, OFFER_REDEEMED: "The upgrade goes into effect immediately,
///    starting a new billing period", notificationType), whose new period may end sooner: `fromStatuses` when available.
/// 2. `fromStatuses`: the notification has no `data.status` ("the status of an auto-renewable subscription as of the
///    signedDate", developer.apple.com/documentation/appstoreservernotifications/data), or its transaction is not the
///    period the row holds — `isUpgraded`, or expiring after `heldPeriodEnd` while the type does not start a period
///    (a refund, its reversal, a renewal-status change, an expiry…). The state is then read from Get All Subscription
///    Statuses, whose `lastTransactions` entry is the subscription's latest transaction and its status
///    (developer.apple.com/documentation/appstoreserverapi/get-all-subscription-statuses). Without Server API
///    credentials: `asSent` (an `isUpgraded` transaction: `older`).
/// 3. `asSent`: the notification's transaction and `data.status`.
///
/// A value; pure.
enum AppleNotificationRecency: String, Equatable, Sendable {
    case older = "past_transaction"
    case fromStatuses = "get_all_subscription_statuses"
    case asSent = "notification"

    /// Apple's dates are milliseconds; `end_date` round-trips through PostgreSQL's microseconds.
    static let sameInstant: TimeInterval = 0.001

    /// Types whose transaction starts a period the row may not hold yet (a renewal, a purchase, an offer, an
    /// immediate upgrade, an extension): a later `expiresDate` is the new period, applied as sent.
    static func startsPeriod(_ type: String, subtype: String?) -> Bool {
        switch type {
        case "SUBSCRIBED", "DID_RENEW", "OFFER_REDEEMED", "RENEWAL_EXTENDED": return true
        case "DID_CHANGE_RENEWAL_PREF": return subtype == "UPGRADE"
        default: return false
        }
    }

    static func decide(type: String, subtype: String?, transaction t: AppleTransaction, statusCode: Int?,
                       heldPeriodEnd: Date?, statusesAvailable: Bool) -> AppleNotificationRecency {
        let expires = t.expiresDate?.millisecondsDate
        if let expires, let heldPeriodEnd, expires < heldPeriodEnd.addingTimeInterval(-sameInstant) {
            // An immediate upgrade starts a new period that may end sooner (annual basic → monthly premium): Apple's
            // statuses say whether it is the current one; without them it is only recorded.
            return statusesAvailable && subtype == "UPGRADE" ? .fromStatuses : .older
        }
        var later = false
        if let expires, let heldPeriodEnd { later = expires > heldPeriodEnd.addingTimeInterval(sameInstant) }
        let notHeld = t.isUpgraded == true || (later && !startsPeriod(type, subtype: subtype))
        guard statusCode == nil || notHeld else { return .asSent }
        if statusesAvailable { return .fromStatuses }
        return t.isUpgraded == true ? .older : .asSent
    }
}
