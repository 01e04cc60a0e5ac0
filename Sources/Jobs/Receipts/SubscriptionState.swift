import Foundation

/// The stores we validate against (`subscriptions.store`).
public enum Store: String, Sendable, Codable {
    case apple, google
}

/// `subscriptions.status`.
public enum SubscriptionStatus: String, Sendable, Equatable {
    case pending, trial, active
    case gracePeriod = "grace_period"
    case onHold = "on_hold"
    case paused, cancelled, expired, refunded

    /// The user has premium access: trial, active, or in a store grace period.
    public var isEntitled: Bool { self == .trial || self == .active || self == .gracePeriod }

    /// The `subscription_events.event_type` for reaching this status by a validation.
    public var validationEvent: String {
        switch self {
        case .trial: return "trial_started"
        case .active: return "subscription_started"
        case .gracePeriod: return "grace_period"
        case .onHold: return "billing_retry"
        case .paused: return "paused"
        case .cancelled: return "cancelled"
        case .expired: return "expired"
        case .refunded: return "refunded"
        case .pending: return "pending"
        }
    }
}

/// What a store says about one subscription, in our terms: the row `subscriptions` gets.
///
/// `key` is the upsert key `store_transaction_id`, stable for the subscription's life: Apple's
/// `original_transaction_id` (renewals keep it), Google's purchase token (renewals keep it).
public struct StoreSubscriptionState: Sendable, Equatable {
    public var store: Store
    public var key: String
    /// The transaction this state was read from (Apple transaction id, Google order id): the receipt row key.
    public var transactionID: String
    public var originalTransactionID: String?
    public var productID: String
    public var status: SubscriptionStatus
    public var startDate: Date
    public var endDate: Date?
    public var trialEndDate: Date?
    public var gracePeriodEnd: Date?
    public var autoRenew: Bool
    public var cancelledAt: Date?
    /// When the store asserted this state (signedDate, or when we read its API): older states never overwrite newer.
    public var stateAt: Date
    /// Apple: the `appAccountToken` of the subscription's *latest* transaction (Apple-signed, or from Apple's
    /// verifyReceipt answer), which says whose app account made the current period. Decides a change of owner
    /// (`SubscriptionOwnership`). Nil for Google and when the app set none.
    public var latestAppAccountToken: String? = nil
    /// Where it was bought: Apple's `environment` (Production, Sandbox, Xcode, LocalTesting), Google's Production or
    /// Test (`testPurchase`). Nil when the store did not say (the row keeps what it has).
    public var environment: String? = nil
    /// PURCHASED, or Apple's FAMILY_SHARED (`inAppOwnershipType`): a family member's entitlement paid by the organiser.
    public var ownershipType: String? = nil
}

extension StoreSubscriptionState {
    /// A purchase the store refunded and revoked at `time` (Google RTDN SUBSCRIPTION_REVOKED, 12): `refunded`, ended
    /// at `time` at the latest, no longer renewing.
    mutating func revoke(at time: Date) {
        status = .refunded
        cancelledAt = cancelledAt ?? time
        endDate = min(endDate ?? time, time)
        autoRenew = false
    }
}

/// Apple's data (verifyReceipt entries, or verified JWS) → `StoreSubscriptionState`.
enum AppleStateDerivation {
    /// The status of a subscription from its latest transaction, its renewal info, the App Store status code
    /// (1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked; from Get All Subscription Statuses or
    /// a notification's `data.status`) and the notification type, in that order of authority.
    ///
    /// The status code outranks the transaction's `revocationDate`: a revoked transaction may be an earlier renewal
    /// while the subscription is active (`AppleRefundScope`); a revocation decides only when the code says the
    /// subscription ended (2, 5) or there is no code.
    static func status(transaction t: AppleTransaction, renewal: AppleRenewalInfo?, statusCode: Int?,
                       notificationType: String? = nil, subtype: String? = nil, now: Date) -> SubscriptionStatus {
        if notificationType == "REVOKE" { return .cancelled }
        let revoked = t.revocationDate != nil || notificationType == "REFUND"
        let expires = t.expiresDate?.millisecondsDate
        let live: SubscriptionStatus = t.isTrial ? .trial : .active
        switch statusCode {
        case 1: return live
        case 2: return revoked ? .refunded : .expired
        case 3: return .onHold
        case 4: return .gracePeriod
        case 5: return revoked ? .refunded : .cancelled
        default: break
        }
        if revoked { return .refunded }
        switch notificationType {
        case "EXPIRED", "GRACE_PERIOD_EXPIRED": return .expired
        case "DID_FAIL_TO_RENEW": return subtype == "GRACE_PERIOD" ? .gracePeriod : .onHold
        default: break
        }
        guard let expires else { return live }
        if expires > now { return live }
        if let grace = renewal?.gracePeriodExpiresDate?.millisecondsDate, grace > now { return .gracePeriod }
        if renewal?.isInBillingRetryPeriod == true { return .onHold }
        return .expired
    }

    static func state(transaction t: AppleTransaction, renewal: AppleRenewalInfo?, statusCode: Int?,
                      notificationType: String? = nil, subtype: String? = nil, stateAt: Date, now: Date) -> StoreSubscriptionState? {
        guard let transactionID = t.transactionId, let productID = t.productId else { return nil }
        let original = t.originalTransactionId ?? transactionID
        let status = status(transaction: t, renewal: renewal, statusCode: statusCode, notificationType: notificationType,
                            subtype: subtype, now: now)
        let expires = t.expiresDate?.millisecondsDate
        var autoRenew = renewal.map { $0.autoRenewStatus != 0 } ?? true
        if notificationType == "DID_CHANGE_RENEWAL_STATUS" { autoRenew = subtype != "AUTO_RENEW_DISABLED" }
        return StoreSubscriptionState(
            store: .apple, key: original, transactionID: transactionID, originalTransactionID: original,
            productID: productID, status: status,
            startDate: (t.purchaseDate ?? t.originalPurchaseDate)?.millisecondsDate ?? stateAt,
            endDate: status == .cancelled || status == .refunded ? (t.revocationDate?.millisecondsDate ?? expires) : expires,
            trialEndDate: t.isTrial ? expires : nil,
            gracePeriodEnd: status == .gracePeriod ? renewal?.gracePeriodExpiresDate?.millisecondsDate : nil,
            autoRenew: autoRenew && status.isEntitled,
            cancelledAt: t.revocationDate?.millisecondsDate,
            stateAt: stateAt, latestAppAccountToken: t.appAccountToken, environment: t.environment,
            ownershipType: t.inAppOwnershipType)
    }
}
