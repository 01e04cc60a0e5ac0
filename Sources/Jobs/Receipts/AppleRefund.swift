import Foundation

/// What an App Store `REFUND` notification does to the subscription it names.
///
/// Apple refunds per transaction: "The revocationDate contains the timestamp of the refunded transaction"
/// (REFUND, App Store Server Notifications V2, quoted in developer.apple.com/forums/thread/697873), and a customer
/// can have a past renewal refunded (reportaproblem.apple.com) while the current, paid period runs. So the refunded
/// transaction alone does not say whether the user keeps premium; the subscription's status does:
/// `data.status` is "the status of an auto-renewable subscription as of the signedDate"
/// (apple.github.io/app-store-server-library-node/interfaces/Data.html; 1 active, 2 expired, 3 billing retry,
/// 4 grace period, 5 revoked — developer.apple.com/documentation/appstoreserverapi/status).
///
/// Decision, in order of authority (after `AppleNotificationRecency`: a refunded transaction that expires before the
/// period the row holds is a past one whatever the status says):
/// 1. a status code (the notification's `data.status`, else one re-read with Get All Subscription Statuses):
///    1, 3 or 4 → the current period stands (`pastTransaction`); 2 or 5 → `currentPeriod`;
/// 2. without one (no status, no Server API credentials): the refunded transaction's `expiresDate` before the end of
///    the period we hold → `pastTransaction`; otherwise `currentPeriod`.
///
/// `revocationType` (developer.apple.com/documentation/appstoreservernotifications/revocationtype):
/// `REFUND_FULL` and `REFUND_PRORATED` are both refunds of that one transaction and follow the rule above; a prorated
/// refund of the current period ends it at `revocationDate` like a full one (the transaction is revoked; the
/// percentage refunded is recorded in the event, it does not keep part of the period). `FAMILY_REVOKE` comes with a
/// `REVOKE` notification, not `REFUND`, and is handled there.
enum AppleRefundScope: String, Equatable, Sendable {
    /// The period the user holds now is refunded: the subscription becomes `refunded`, the user `free`.
    case currentPeriod = "current_period"
    /// An earlier transaction is refunded: recorded as an event, the subscription's state is unchanged.
    case pastTransaction = "past_transaction"

    static func decide(statusCode: Int?, refunded: AppleTransaction, heldPeriodEnd: Date?) -> AppleRefundScope {
        switch statusCode {
        case 1?, 3?, 4?: return .pastTransaction
        case 2?, 5?: return .currentPeriod
        default: break
        }
        if let refundedEnd = refunded.expiresDate?.millisecondsDate, let heldPeriodEnd, refundedEnd < heldPeriodEnd {
            return .pastTransaction
        }
        return .currentPeriod
    }

    /// The `subscription_events` data of a refund: which transaction, how, and what it did.
    static func eventData(_ t: AppleTransaction, scope: AppleRefundScope, statusCode: Int?) -> [String: String] {
        var data = ["source": "app_store_notification", "notification_type": "REFUND",
                    "transaction_id": t.transactionId ?? "", "scope": scope.rawValue,
                    "revocation_type": t.revocationType ?? ""]
        if let reason = t.revocationReason { data["revocation_reason"] = "\(reason)" }
        if t.revocationType == "REFUND_PRORATED", let share = t.revocationPercentage { data["revocation_percentage_milli"] = "\(share)" }
        if let statusCode { data["status_code"] = "\(statusCode)" }
        return data
    }
}
