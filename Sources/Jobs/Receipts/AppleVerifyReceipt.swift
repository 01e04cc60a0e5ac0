import Foundation
import HTTP
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
        case 21000: self = .invalid("request not readable by the App Store")
        case 21001: self = .invalid("status no longer sent by Apple")
        case 21003: self = .invalid("receipt could not be authenticated")
        case 21004: self = .invalid("shared secret does not match the account's")
        case 21010: self = .invalid("user account not found or deleted")
        default: self = .invalid("unknown verifyReceipt status")
        }
    }
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

    /// The subscription the transaction `transactionID` belongs to, read from its latest renewal
    /// (`latest_receipt_info` is not sorted: the entry with the latest expiry wins).
    static func state(_ r: VerifyReceiptResponse, transactionID: String, now: Date) throws(Failure) -> (StoreSubscriptionState, purchasedProduct: String) {
        let all = (r.latest_receipt_info ?? []) + (r.receipt?.in_app ?? [])
        guard let target = all.first(where: { $0.transaction_id == transactionID })
                ?? all.first(where: { $0.original_transaction_id == transactionID }) else {
            throw .transactionNotInReceipt
        }
        guard let targetProduct = target.product_id else { throw .missingFields }
        let original = target.original_transaction_id ?? target.transaction_id ?? transactionID
        let renewals = all.filter { ($0.original_transaction_id ?? $0.transaction_id) == original }
        let latest = renewals.max { a, b in
            (a.expires ?? a.purchased ?? .distantPast, a.purchased ?? .distantPast)
                < (b.expires ?? b.purchased ?? .distantPast, b.purchased ?? .distantPast)
        } ?? target
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
            autoRenew: pending.map { $0.auto_renew_status != "0" } ?? true, cancelledAt: cancelled, stateAt: now)
        return (state, targetProduct)
    }
}
