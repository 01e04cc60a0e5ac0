import Foundation
import HTTP
import Workers

/// `SubscriptionPurchaseV2` (fields we use).
public struct GoogleSubscriptionPurchase: Decodable, Sendable {
    public struct LineItem: Decodable, Sendable {
        public struct AutoRenewingPlan: Decodable, Sendable { public let autoRenewEnabled: Bool? }
        public struct OfferPhase: Decodable, Sendable {
            public struct Empty: Decodable, Sendable {}
            public let freeTrial: Empty?
        }
        public let productId: String?
        public let expiryTime: String?
        public let autoRenewingPlan: AutoRenewingPlan?
        public let latestSuccessfulOrderId: String?
        public let offerPhase: OfferPhase?
    }
    public struct CanceledStateContext: Decodable, Sendable {
        public struct UserInitiated: Decodable, Sendable { public let cancelTime: String? }
        public let userInitiatedCancellation: UserInitiated?
    }
    public let subscriptionState: String?
    public let startTime: String?
    public let acknowledgementState: String?
    public let latestOrderId: String?
    public let linkedPurchaseToken: String?
    public let lineItems: [LineItem]?
    public let canceledStateContext: CanceledStateContext?

    public var needsAcknowledgement: Bool { acknowledgementState == "ACKNOWLEDGEMENT_STATE_PENDING" }
}

/// RFC 3339 timestamps as Google writes them (with or without fractional seconds).
enum RFC3339 {
    static func parse(_ text: String?) -> Date? {
        guard let text else { return nil }
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: text) { return d }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: text)
    }
}

/// `subscriptionState` → our status. ACTIVE, IN_GRACE_PERIOD and CANCELED-with-future-expiry are entitled;
/// ON_HOLD, PAUSED, EXPIRED, PENDING are not. A cancelled-but-running subscription is kept `active` with
/// `auto_renew = false` and `cancelled_at` set, so the expiry sweep ends it at `end_date`.
enum GoogleStateDerivation {
    static func state(_ p: GoogleSubscriptionPurchase, purchaseToken: String, productID: String, graceDays: Int,
                      now: Date) -> StoreSubscriptionState? {
        guard let line = p.lineItems?.first(where: { $0.productId == productID }) else { return nil }
        let expiry = RFC3339.parse(line.expiryTime)
        let isTrial = line.offerPhase?.freeTrial != nil
        let live: SubscriptionStatus = isTrial ? .trial : .active
        var cancelledAt: Date?
        let status: SubscriptionStatus
        switch p.subscriptionState {
        case "SUBSCRIPTION_STATE_ACTIVE": status = live
        case "SUBSCRIPTION_STATE_IN_GRACE_PERIOD": status = .gracePeriod
        case "SUBSCRIPTION_STATE_CANCELED":
            cancelledAt = RFC3339.parse(p.canceledStateContext?.userInitiatedCancellation?.cancelTime) ?? now
            status = (expiry.map { $0 > now } ?? false) ? live : .expired
        case "SUBSCRIPTION_STATE_ON_HOLD": status = .onHold
        case "SUBSCRIPTION_STATE_PAUSED": status = .paused
        case "SUBSCRIPTION_STATE_EXPIRED": status = .expired
        case "SUBSCRIPTION_STATE_PENDING": status = .pending
        case "SUBSCRIPTION_STATE_PENDING_PURCHASE_CANCELED": status = .cancelled
        default: return nil
        }
        let order = line.latestSuccessfulOrderId ?? p.latestOrderId ?? "token:" + Redact.fingerprint(purchaseToken)
        return StoreSubscriptionState(
            store: .google, key: purchaseToken, transactionID: order, originalTransactionID: purchaseToken,
            productID: productID, status: status, startDate: RFC3339.parse(p.startTime) ?? now, endDate: expiry,
            trialEndDate: isTrial ? expiry : nil,
            gracePeriodEnd: status == .gracePeriod ? expiry.map { $0.addingTimeInterval(Double(graceDays) * 86400) } : nil,
            autoRenew: cancelledAt == nil && (line.autoRenewingPlan?.autoRenewEnabled ?? true) && status.isEntitled,
            cancelledAt: cancelledAt, stateAt: now)
    }
}

/// Play Developer API: `purchases.subscriptionsv2.get` and `purchases.subscriptions.acknowledge`.
///
/// Authorised with the shared `GoogleAccessTokenProvider`; a 401 drops the cached token and retries once with a
/// new one (an expired or revoked access token). Thread rules: a value; safe from any thread.
struct GooglePlayClient: Sendable {
    enum Lookup: Sendable {
        case found(GoogleSubscriptionPurchase)
        /// 400/404/410: the token is invalid, unknown, or expired too long ago.
        case notFound(status: Int, reason: String)
    }

    let http: StoreHTTP
    let tokens: GoogleAccessTokenProvider
    let baseURL: String

    func subscription(packageName: String, purchaseToken: String, cancellation: HTTPCancellation?) throws -> Lookup {
        let url = baseURL + "/androidpublisher/v3/applications/\(Self.segment(packageName))/purchases/subscriptionsv2/tokens/"
            + Self.segment(purchaseToken)
        let response = try authorized(.get(url), cancellation: cancellation)
        try StoreHTTP.throwIfRetryable(response, service: "Google Play API")
        if response.isSuccess {
            return .found(try StoreHTTP.decode(GoogleSubscriptionPurchase.self, response, service: "Google Play API"))
        }
        let message = ((try? response.jsonObject())?["error"] as? [String: Any])?["message"] as? String ?? "HTTP \(response.status)"
        switch response.status {
        case 400, 404, 410: return .notFound(status: response.status, reason: message)
        case 401, 403: throw StoreUnavailable("Google Play API", "HTTP \(response.status): \(message); check the service account's Play Console access")
        default: throw JobError.permanent("Google Play API answered HTTP \(response.status): \(message)")
        }
    }

    /// Acknowledges the purchase (Google refunds purchases left unacknowledged for 3 days).
    func acknowledge(packageName: String, productID: String, purchaseToken: String, cancellation: HTTPCancellation?) throws {
        let url = baseURL + "/androidpublisher/v3/applications/\(Self.segment(packageName))/purchases/subscriptions/"
            + "\(Self.segment(productID))/tokens/\(Self.segment(purchaseToken)):acknowledge"
        let request: HTTPRequest
        do { request = try HTTPRequest.json(.post, url, object: [String: Any]()) } catch {
            throw JobError.permanent("Google acknowledge: \(error)")
        }
        let response = try authorized(request, cancellation: cancellation)
        try StoreHTTP.throwIfRetryable(response, service: "Google Play acknowledge")
        guard response.isSuccess else {
            throw StoreUnavailable("Google Play acknowledge", "HTTP \(response.status)")
        }
    }

    private func authorized(_ request: HTTPRequest, cancellation: HTTPCancellation?) throws -> HTTPResponse {
        var token = try tokens.token(cancellation: cancellation)
        var response = try http.send(request.with(header: "Authorization", "Bearer " + token), service: "Google Play API",
                                     cancellation: cancellation)
        if response.status == 401 {
            tokens.invalidate(token)
            token = try tokens.token(cancellation: cancellation)
            response = try http.send(request.with(header: "Authorization", "Bearer " + token), service: "Google Play API",
                                     cancellation: cancellation)
        }
        return response
    }

    /// A path segment: everything but unreserved characters percent-encoded.
    static func segment(_ value: String) -> String {
        let allowed = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }
}
