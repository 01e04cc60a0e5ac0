import Foundation
import WorkersHTTP
import Workers

/// One entry of `latest_receipt_info[]` / `receipt.in_app[]` (Apple sends numbers and flags as strings).
struct ReceiptTransaction: Decodable, Sendable {
    let product_id: String?
    let transaction_id: String?
    let original_transaction_id: String?
    let purchase_date_ms: String?
    let original_purchase_date_ms: String?
    let expires_date_ms: String?
    let cancellation_date_ms: String?
    let is_trial_period: String?
    /// The `appAccountToken` the app set at purchase (a UUID; ours is the user's id), when it set one.
    let app_account_token: String?
    /// PURCHASED or FAMILY_SHARED (developer.apple.com/documentation/appstorereceipts/in_app_ownership_type).
    let in_app_ownership_type: String?

    var expires: Date? { expires_date_ms.flatMap(Int64.init)?.millisecondsDate }
    var purchased: Date? { purchase_date_ms.flatMap(Int64.init)?.millisecondsDate }
}

/// One entry of `pending_renewal_info[]`.
struct PendingRenewal: Decodable, Sendable {
    let original_transaction_id: String?
    let auto_renew_status: String?
    let is_in_billing_retry_period: String?
    let grace_period_expires_date_ms: String?
}

/// A verifyReceipt answer with status 0 (or 21006: valid, expired, data returned).
struct VerifyReceiptResponse: Decodable, Sendable {
    struct Receipt: Decodable, Sendable {
        let bundle_id: String?
        let in_app: [ReceiptTransaction]?
        /// When Apple processed the request (Apple's clock): the answer's `store_state_at` (L7).
        let request_date_ms: String?
    }
    let status: Int
    let environment: String?
    let receipt: Receipt?
    let latest_receipt_info: [ReceiptTransaction]?
    let pending_renewal_info: [PendingRenewal]?
}

/// How a verifyReceipt `status` is handled (developer.apple.com/documentation/appstorereceipts/status).
enum VerifyReceiptStatus {
    case valid
    case sandboxReceipt      // 21007: resend to sandbox
    case productionReceipt   // 21008: resend to production
    case temporary(String)   // retry with backoff
    case ourFault(String)    // our request or secret is wrong: configuration alert, retry; the receipt is not judged
    case invalid(String)     // record invalid, alert RCV-<status>, no retry

    init(status: Int, isRetryable: Bool) {
        switch status {
        case 0, 21006: self = .valid
        case 21007: self = .sandboxReceipt
        case 21008: self = .productionReceipt
        case 21002: self = .temporary("receipt-data malformed or temporary service issue (21002)")
        case 21005: self = .temporary("receipt server temporarily unavailable (21005)")
        case 21009: self = .temporary("internal data access error (21009)")
        case 21100...21199:
            self = isRetryable ? .temporary("internal data access error (\(status), is-retryable)")
                               : .invalid("internal data access error, not retryable")
        // 21000 and 21004 say nothing about the receipt: our request was unreadable (a bug on our side) or our
        // shared secret is not the app's (configuration). external-apis §4a: "bug" / "config error".
        case 21000: self = .ourFault("the App Store could not read our request (21000)")
        case 21004: self = .ourFault("the shared secret RECEIPTS_APPLE_SHARED_SECRET does not match the app's (21004)")
        case 21001: self = .invalid("status no longer sent by Apple")
        case 21003: self = .invalid("receipt could not be authenticated")
        case 21010: self = .invalid("user account not found or deleted")
        default: self = .invalid("unknown verifyReceipt status")
        }
    }
}

/// verifyReceipt refused *our request*, not the user's receipt: 21004 (the shared secret we sent is not the app's)
/// or 21000 (the App Store could not read our request). A fault of our configuration or code: the job is retried
/// with backoff while an operator is alerted; the receipt is never recorded invalid and no fraud alert is raised
/// for the user. Carries no receipt and no secret.
public struct AppleVerifyReceiptRequestRefused: Error, Sendable, CustomStringConvertible {
    /// 21000 or 21004.
    public let status: Int
    public let reason: String
    /// The operator alert this fault raises: `RCV-CONFIG-<status>`.
    public var alert: String { "RCV-CONFIG-\(status)" }
    public var description: String { "\(alert): Apple verifyReceipt refused our request: \(reason); retried" }
}

/// The legacy verifyReceipt client: production first, 21007 → same body to sandbox, 21008 → production; at most
/// three requests per validation (a receipt bounced back and forth is a temporary fault: retried later).
///
/// Thread rules: a value; safe from any thread. Never logs or throws the receipt or the shared secret.
struct AppleVerifyReceiptClient: Sendable {
    enum Outcome: Sendable {
        case valid(VerifyReceiptResponse)
        case invalid(status: Int, reason: String)
    }

    let http: StoreHTTP
    let productionURL: String
    let sandboxURL: String
    let sharedSecret: Secret?

    private struct Body: Encodable {
        let receiptData: String
        let password: String?
        let excludeOldTransactions = true
        enum CodingKeys: String, CodingKey {
            case receiptData = "receipt-data", password, excludeOldTransactions = "exclude-old-transactions"
        }
    }

    func verify(receiptData: String, cancellation: HTTPCancellation?) throws -> Outcome {
        let body = Body(receiptData: receiptData, password: sharedSecret?.value)
        var url = productionURL
        var asked: [String] = []
        while true {
            asked.append(url)
            let environment = url == productionURL ? "production" : "sandbox"
            let service = "Apple verifyReceipt (\(environment))"
            let request: HTTPRequest
            do { request = try HTTPRequest.json(.post, url, body: body) } catch {
                throw JobError.permanent("\(service): \(error)")
            }
            let response = try http.send(request, service: service, cancellation: cancellation)
            try StoreHTTP.throwIfRetryable(response, service: service)
            guard response.isSuccess else { throw JobError.permanent("\(service) answered HTTP \(response.status)") }
            guard let object = try? response.jsonObject(), let status = (object["status"] as? NSNumber)?.intValue else {
                throw StoreUnavailable(service, "answer is not JSON with a status")
            }
            let retryable = (object["is-retryable"] as? NSNumber)?.boolValue ?? (object["is-retryable"] as? Bool) ?? false
            switch VerifyReceiptStatus(status: status, isRetryable: retryable) {
            case .valid:
                return .valid(try StoreHTTP.decode(VerifyReceiptResponse.self, response, service: service))
            case .sandboxReceipt where asked.count < 3:
                url = sandboxURL
            case .productionReceipt where asked.count < 3:
                url = productionURL
            case .sandboxReceipt, .productionReceipt:
                throw StoreUnavailable(service, "status \(status) after \(asked.count) requests bouncing between environments")
            case .temporary(let why):
                throw StoreUnavailable(service, why)
            case .ourFault(let why):
                throw AppleVerifyReceiptRequestRefused(status: status, reason: why)
            case .invalid(let why):
                return .invalid(status: status, reason: why)
            }
        }
    }
}

/// verifyReceipt data → our subscription state for the purchase `transactionID`.
enum VerifyReceiptDerivation {
    enum Failure: Error, Equatable {
        case transactionNotInReceipt
        case missingFields
    }

    /// What the receipt says about the claimed purchase.
    struct Derived {
        let state: StoreSubscriptionState
        /// The product of the entry the claim matched (checked against the plan by the caller).
        let purchasedProduct: String
        /// The `app_account_token` of that subscription's latest renewal (else of any of its entries), when the app set
        /// one: the latest says whose app account made the current period (L2).
        let appAccountToken: String?
    }

    /// The subscription the transaction `transactionID` belongs to, read from its latest renewal
    /// (`latest_receipt_info` is not sorted: the entry with the latest expiry wins).
    ///
    /// The claim is matched, in order, by: an entry's `transaction_id`; an entry's `original_transaction_id`;
    /// `originalTransactionID` (a StoreKit 1 restore's `original.transactionIdentifier`); and else the latest
    /// subscription to `planProduct` in the receipt. The last two cover a restore's new transaction id and an
    /// older renewal's id, neither of which is in `latest_receipt_info` with `exclude-old-transactions` (only the
    /// latest renewal is). This grants nothing the receipt does not prove: the receipt is Apple-verified and the
    /// subscription key is the receipt's own `original_transaction_id`, never the claimed id.
    static func state(_ r: VerifyReceiptResponse, transactionID: String, originalTransactionID: String? = nil,
                      planProduct: String? = nil, now: Date) throws(Failure) -> Derived {
        let all = (r.latest_receipt_info ?? []) + (r.receipt?.in_app ?? [])
        func latest(_ entries: [ReceiptTransaction]) -> ReceiptTransaction? {
            entries.max { a, b in
                (a.expires ?? a.purchased ?? .distantPast, a.purchased ?? .distantPast)
                    < (b.expires ?? b.purchased ?? .distantPast, b.purchased ?? .distantPast)
            }
        }
        guard let target = all.first(where: { $0.transaction_id == transactionID })
                ?? all.first(where: { $0.original_transaction_id == transactionID })
                ?? originalTransactionID.flatMap({ o in all.first(where: { $0.original_transaction_id == o }) })
                ?? planProduct.flatMap({ p in latest(all.filter { $0.product_id == p }) }) else {
            throw .transactionNotInReceipt
        }
        guard let targetProduct = target.product_id else { throw .missingFields }
        let original = target.original_transaction_id ?? target.transaction_id ?? transactionID
        let renewals = all.filter { ($0.original_transaction_id ?? $0.transaction_id) == original }
        let latest = latest(renewals) ?? target
        guard let latestID = latest.transaction_id, let product = latest.product_id else { throw .missingFields }
        let pending = r.pending_renewal_info?.first { $0.original_transaction_id == original }
        let grace = pending?.grace_period_expires_date_ms.flatMap(Int64.init)?.millisecondsDate
        let cancelled = latest.cancellation_date_ms.flatMap(Int64.init)?.millisecondsDate
        let isTrial = latest.is_trial_period == "true"
        let status: SubscriptionStatus
        if cancelled != nil {
            status = .refunded
        } else if let expires = latest.expires, expires <= now {
            if let grace, grace > now { status = .gracePeriod }
            else if pending?.is_in_billing_retry_period == "1" { status = .onHold }
            else { status = .expired }
        } else {
            status = isTrial ? .trial : .active
        }
        let firstPurchase = renewals.compactMap(\.purchased).min() ?? latest.purchased ?? now
        let state = StoreSubscriptionState(
            store: .apple, key: original, transactionID: latestID, originalTransactionID: original, productID: product,
            status: status, startDate: firstPurchase, endDate: cancelled ?? latest.expires,
            trialEndDate: isTrial ? latest.expires : nil, gracePeriodEnd: status == .gracePeriod ? grace : nil,
            autoRenew: pending.map { $0.auto_renew_status != "0" } ?? true, cancelledAt: cancelled,
            stateAt: r.receipt?.request_date_ms.flatMap(Int64.init)?.millisecondsDate ?? now,
            latestAppAccountToken: latest.app_account_token, environment: r.environment,
            ownershipType: latest.in_app_ownership_type)
        return Derived(state: state, purchasedProduct: targetProduct,
                       appAccountToken: latest.app_account_token ?? renewals.lazy.compactMap(\.app_account_token).first)
    }
}
