import Foundation
import WorkersHTTP
import WorkersQueue
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
        public struct Empty: Decodable, Sendable {}
        public let userInitiatedCancellation: UserInitiated?
        /// Set when the subscription was replaced by a new one (its token is the new purchase's `linkedPurchaseToken`).
        public let replacementCancellation: Empty?
    }
    /// `OutOfAppPurchaseContext`: set on a purchase made outside the app (Play Store resubscribe, promo code) when
    /// it follows an expired subscription of the same user. Google: `expiredPurchaseToken` "must only be used to help
    /// identify the user if the link between the purchaseToken and user is stored in your database"
    /// (developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2#OutOfAppPurchaseContext).
    public struct OutOfAppPurchaseContext: Decodable, Sendable {
        public let expiredPurchaseToken: String?
        public let expiredExternalAccountIdentifiers: ExternalAccountIdentifiers?
    }
    /// `ExternalAccountIdentifiers`: what the app set at purchase time (`BillingFlowParams.setObfuscatedAccountId`).
    /// Ours is `GoogleAccountHash.of(user)` (docs/jobs-receipts.md, "What the Android app sends").
    public struct ExternalAccountIdentifiers: Decodable, Sendable {
        public let externalAccountId: String?
        public let obfuscatedExternalAccountId: String?
        public let obfuscatedExternalProfileId: String?
    }
    public let subscriptionState: String?
    public let startTime: String?
    public let acknowledgementState: String?
    public let latestOrderId: String?
    public let linkedPurchaseToken: String?
    public let lineItems: [LineItem]?
    public let canceledStateContext: CanceledStateContext?
    public let outOfAppPurchaseContext: OutOfAppPurchaseContext?
    public let externalAccountIdentifiers: ExternalAccountIdentifiers?
    /// "Only present if this subscription purchase is a test purchase" (SubscriptionPurchaseV2 `testPurchase`,
    /// developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2): license testers pay nothing.
    public let testPurchase: CanceledStateContext.Empty?

    /// `externalAccountIdentifiers.obfuscatedExternalAccountId`, nil when absent or empty.
    public var obfuscatedAccountID: String? {
        externalAccountIdentifiers?.obfuscatedExternalAccountId.flatMap { $0.isEmpty ? nil : $0 }
    }

    public var needsAcknowledgement: Bool { acknowledgementState == "ACKNOWLEDGEMENT_STATE_PENDING" }
    public var isAcknowledged: Bool { acknowledgementState == "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED" }

    /// The order that paid the current period of `productID`: the line item's `latestSuccessfulOrderId`, else the
    /// deprecated top-level `latestOrderId`.
    public func currentOrderID(productID: String) -> String? {
        lineItems?.first(where: { $0.productId == productID })?.latestSuccessfulOrderId ?? latestOrderId
    }

    /// Whether Google's state entitles the user now (ACTIVE, IN_GRACE_PERIOD, CANCELED before its expiry).
    public func entitles(productID: String, now: Date) -> Bool {
        GoogleStateDerivation.state(self, purchaseToken: "", productID: productID, now: now)?.status.isEntitled ?? false
    }
}

/// RFC 3339 timestamps as Google writes them: protobuf's `Timestamp` JSON mapping, `YYYY-MM-DDTHH:MM:SS`, 0 to 9
/// fractional digits, `Z` or a `±HH:MM` offset (RFC 3339 §5.6; hours 00–23, minutes and seconds 00–59). Anything
/// else is nil.
///
/// The shape is checked on the bytes, then swift-foundation's `Date.ISO8601FormatStyle` (Swift, `Sendable`, made
/// once) reads it — instead of an `ISO8601DateFormatter` per call, whose ICU set-up was a quarter of a Google receipts
/// job's CPU (bench/receipts-cpu.sh, issue 38). The style alone rolls `T23:59:99` over into the next day, and the
/// formatter took a leading space or `T24:30`: the shape check refuses all of these.
enum RFC3339 {
    private static let fractional = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
    private static let whole = Date.ISO8601FormatStyle()

    static func parse(_ text: String?) -> Date? {
        guard let text else { return nil }
        switch shape(Array(text.utf8)) {
        case .whole?: return try? whole.parse(text)
        case .fractional?: return try? fractional.parse(text)
        case nil: return nil
        }
    }

    enum Shape { case whole, fractional }

    /// Whether `b` is an RFC 3339 date-time as described above, and whether it has a fraction.
    static func shape(_ b: [UInt8]) -> Shape? {
        func number(_ at: Int, _ digits: Int) -> Int? {
            guard at + digits <= b.count else { return nil }
            var value = 0
            for byte in b[at..<(at + digits)] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        func byte(_ at: Int, _ expected: Character) -> Bool { at < b.count && b[at] == expected.asciiValue! }
        guard number(0, 4) != nil, byte(4, "-"), let month = number(5, 2), (1...12).contains(month), byte(7, "-"),
              let day = number(8, 2), (1...31).contains(day), byte(10, "T"),
              let hour = number(11, 2), hour <= 23, byte(13, ":"), let minute = number(14, 2), minute <= 59, byte(16, ":"),
              let second = number(17, 2), second <= 59 else { return nil }
        var at = 19, fraction = false
        if byte(at, ".") {
            var digits = 0
            while at + 1 + digits < b.count, number(at + 1 + digits, 1) != nil { digits += 1 }
            guard (1...9).contains(digits) else { return nil }
            at += 1 + digits
            fraction = true
        }
        if byte(at, "Z") {
            at += 1
        } else {
            guard byte(at, "+") || byte(at, "-"), let h = number(at + 1, 2), h <= 23, byte(at + 3, ":"),
                  let m = number(at + 4, 2), m <= 59 else { return nil }
            at += 6
        }
        guard at == b.count else { return nil }
        return fraction ? .fractional : .whole
    }
}

/// `subscriptionState` → our status. ACTIVE, IN_GRACE_PERIOD and CANCELED-with-future-expiry are entitled;
/// ON_HOLD, PAUSED, EXPIRED, PENDING are not. A cancelled-but-running subscription is kept `active` with
/// `auto_renew = false` and `cancelled_at` set, so the expiry sweep ends it at `end_date`.
///
/// Grace comes from Google: in `SUBSCRIPTION_STATE_IN_GRACE_PERIOD` the line item's `expiryTime` is taken as the end
/// of the grace period (its length is set per base plan: `gracePeriodDuration`, P0D–P30D). Google's v2 reference does
/// not say that `expiryTime` moves during grace, so while Google says IN_GRACE_PERIOD `grace_period_end` is never in
/// the past: it is `max(expiryTime, now + graceBridge)`. The bridge keeps the user entitled until Google's next word
/// (RTDN 1 RECOVERED, 5 ON_HOLD, 13 EXPIRED, or the next validation) instead of the expiry sweep ending a period
/// Google still entitles.
enum GoogleStateDerivation {
    /// How long past `now` a subscription Google calls IN_GRACE_PERIOD stays entitled at least: one day.
    static let graceBridge: TimeInterval = 86_400


    static func state(_ p: GoogleSubscriptionPurchase, purchaseToken: String, productID: String,
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
            // Replaced by another purchase: its entitlement moved to the new token (GooglePurchaseEffects.endReplaced).
            let replaced = p.canceledStateContext?.replacementCancellation != nil
            status = !replaced && (expiry.map { $0 > now } ?? false) ? live : .expired
        case "SUBSCRIPTION_STATE_ON_HOLD": status = .onHold
        case "SUBSCRIPTION_STATE_PAUSED": status = .paused
        case "SUBSCRIPTION_STATE_EXPIRED": status = .expired
        case "SUBSCRIPTION_STATE_PENDING": status = .pending
        case "SUBSCRIPTION_STATE_PENDING_PURCHASE_CANCELED": status = .cancelled
        default: return nil
        }
        return StoreSubscriptionState(
            store: .google, key: purchaseToken, transactionID: p.currentOrderID(productID: productID) ?? "token:" + Redact.fingerprint(purchaseToken),
            originalTransactionID: purchaseToken,
            productID: productID, status: status, startDate: RFC3339.parse(p.startTime) ?? now, endDate: expiry,
            trialEndDate: isTrial ? expiry : nil,
            gracePeriodEnd: status == .gracePeriod ? max(expiry ?? now, now.addingTimeInterval(graceBridge)) : nil,
            autoRenew: cancelledAt == nil && (line.autoRenewingPlan?.autoRenewEnabled ?? true) && status.isEntitled,
            cancelledAt: cancelledAt, stateAt: now, environment: p.testPurchase == nil ? "Production" : "Test",
            ownershipType: "PURCHASED")
    }
}

/// `VoidedPurchasesListResponse` (developers.google.com/android-publisher/api-ref/rest/v3/purchases.voidedpurchases/list):
/// `voidedPurchases[]` (VoidedPurchase: purchaseToken, orderId, voidedTimeMillis as an int64 string, voidedSource,
/// voidedReason) and `tokenPagination.nextPageToken`.
struct VoidedPurchasesPage: Decodable, Sendable {
    struct VoidedPurchase: Decodable, Sendable {
        let purchaseToken: String?
        let orderId: String?
        let voidedTimeMillis: String?
        let voidedSource: Int?
        let voidedReason: Int?
    }
    struct TokenPagination: Decodable, Sendable { let nextPageToken: String? }
    let voidedPurchases: [VoidedPurchase]?
    let tokenPagination: TokenPagination?
}

/// Play Developer API: `purchases.subscriptionsv2.get`, `purchases.subscriptions.acknowledge`, `purchases.subscriptionsv2.cancel`
/// and `purchases.voidedpurchases.list`.
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
        let response = try authorized(HTTPRequest.get(url).withSecretPathSegment(purchaseToken), cancellation: cancellation)
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

    /// One page of `purchases.voidedpurchases.list` (developers.google.com/android-publisher/api-ref/rest/v3/purchases.voidedpurchases/list):
    /// `startTime` (epoch ms, at most 30 days back; ignored by Google once a page `token` is given), `type=1` (voided
    /// subscriptions too: type 0, the default, lists in-app products only; developers.google.com/android-publisher/voided-purchases),
    /// `maxResults` (Google's maximum 1000). The service account needs "View financial data". 401/403 and any other
    /// refusal are `StoreUnavailable` (the reconciliation tries again next run); 429 / 5xx as every request.
    func voidedPurchases(packageName: String, startTime: Date, pageToken: String?, maxResults: Int,
                         cancellation: HTTPCancellation?) throws -> VoidedPurchasesPage {
        var query = [("startTime", String(Bounded.int(startTime.timeIntervalSince1970 * 1000, in: 0...253_402_300_799_999))), ("type", "1"),
                     ("maxResults", String(maxResults))]
        if let pageToken { query.append(("token", pageToken)) }
        let url = baseURL + "/androidpublisher/v3/applications/\(Self.segment(packageName))/purchases/voidedpurchases"
        let service = "Google Play voided purchases"
        let response = try authorized(HTTPRequest.get(url, query: query), service: service, cancellation: cancellation)
        try StoreHTTP.throwIfRetryable(response, service: service)
        guard response.isSuccess else {
            throw StoreUnavailable(service, "HTTP \(response.status) \(Self.errorReason(response))")
        }
        return try StoreHTTP.decode(VoidedPurchasesPage.self, response, service: service)
    }

    /// What Google answered to an acknowledgement that reached it.
    enum AcknowledgeAnswer: Sendable, Equatable {
        /// 200: acknowledged now.
        case acknowledged
        /// A 4xx other than 401/403/408/409/429 (e.g. 400 `invalidPurchaseState` for a purchase already acknowledged
        /// or no longer acknowledgeable, 404/410): Google will not acknowledge it; its state says why.
        case refused(status: Int, reason: String)
    }

    /// `purchases.subscriptions.acknowledge` (Google refunds purchases left unacknowledged for 3 days).
    ///
    /// Throws `StoreUnavailable` / `JobError.retryAfter` when it may succeed later: transport failures, 5xx, 429,
    /// 409 `concurrentUpdate` (the purchase is being acknowledged concurrently, e.g. by the app), 401/403 (our
    /// credentials). Never puts the token in an error: it is a secret path segment of the request.
    func acknowledge(packageName: String, productID: String, purchaseToken: String,
                     cancellation: HTTPCancellation?) throws -> AcknowledgeAnswer {
        let url = baseURL + "/androidpublisher/v3/applications/\(Self.segment(packageName))/purchases/subscriptions/"
            + "\(Self.segment(productID))/tokens/\(Self.segment(purchaseToken)):acknowledge"
        let request = HTTPRequest(method: .post, url: url, headers: ["Content-Type": "application/json"], body: Data("{}".utf8))
            .withSecretPathSegment(purchaseToken)
        let response = try authorized(request, service: "Google Play acknowledge", cancellation: cancellation)
        try StoreHTTP.throwIfRetryable(response, service: "Google Play acknowledge")
        if response.isSuccess { return .acknowledged }
        let reason = Self.errorReason(response)
        switch response.status {
        case 409: throw StoreUnavailable("Google Play acknowledge", "HTTP 409 \(reason)")
        case 401, 403: throw StoreUnavailable("Google Play acknowledge", "HTTP \(response.status) \(reason); check the service account's Play Console access")
        default: return .refused(status: response.status, reason: reason)
        }
    }

    /// What Google answered to a cancel that reached it.
    enum CancelAnswer: Sendable, Equatable {
        /// 2xx ("If successful, the response body is empty").
        case accepted
        /// Another 4xx (e.g. 400 for a purchase that cannot be cancelled any more, 404/410): its state says why.
        case refused(status: Int, reason: String)
    }

    /// 401/403 on an order-management call (after a fresh access token): the service account lacks the permission.
    struct Forbidden: Error, Sendable, CustomStringConvertible {
        let status: Int
        let reason: String
        var description: String { "Google Play cancel answered HTTP \(status): \(reason)" }
    }

    /// `purchases.subscriptionsv2.cancel` with `cancellationContext.cancellationType` (why v2: `GoogleCancellationKind`).
    /// Throws `Forbidden` for 401/403, `StoreUnavailable` / `JobError.retryAfter` for 429, 5xx, 408, 409 and
    /// transport failures. Never puts the token in an error: it is a secret path segment of the request.
    func cancel(packageName: String, purchaseToken: String, cancellationType: String,
                cancellation: HTTPCancellation?) throws -> CancelAnswer {
        let url = baseURL + "/androidpublisher/v3/applications/\(Self.segment(packageName))/purchases/subscriptionsv2/tokens/"
            + "\(Self.segment(purchaseToken)):cancel"
        let body = try JSONSerialization.data(withJSONObject: ["cancellationContext": ["cancellationType": cancellationType]])
        let request = HTTPRequest(method: .post, url: url, headers: ["Content-Type": "application/json"], body: body)
            .withSecretPathSegment(purchaseToken)
        let response = try authorized(request, service: "Google Play cancel", cancellation: cancellation)
        try StoreHTTP.throwIfRetryable(response, service: "Google Play cancel")
        if response.isSuccess { return .accepted }
        let reason = Self.errorReason(response)
        switch response.status {
        case 401, 403: throw Forbidden(status: response.status, reason: reason)
        case 409: throw StoreUnavailable("Google Play cancel", "HTTP 409 \(reason)")
        default: return .refused(status: response.status, reason: reason)
        }
    }

    /// `reason: message` of Google's error envelope (`{"error": {"message", "errors": [{"reason"}]}}`), or the status.
    static func errorReason(_ response: HTTPResponse) -> String {
        let error = (try? response.jsonObject())?["error"] as? [String: Any]
        let reason = (error?["errors"] as? [[String: Any]])?.first?["reason"] as? String
        let message = error?["message"] as? String
        switch (reason, message) {
        case (let r?, let m?): return "\(r): \(m)"
        case (let r?, nil): return r
        case (nil, let m?): return m
        default: return "HTTP \(response.status)"
        }
    }

    private func authorized(_ request: HTTPRequest, service: String = "Google Play API",
                            cancellation: HTTPCancellation?) throws -> HTTPResponse {
        var token = try tokens.token(cancellation: cancellation)
        var response = try http.send(request.with(header: "Authorization", "Bearer " + token), service: service,
                                     cancellation: cancellation)
        if response.status == 401 {
            tokens.invalidate(token)
            token = try tokens.token(cancellation: cancellation)
            response = try http.send(request.with(header: "Authorization", "Bearer " + token), service: service,
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
