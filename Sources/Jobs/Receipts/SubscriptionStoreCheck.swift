import Foundation
import WorkersHTTP
import Logging
import WorkersStorage
import Workers

/// A renewing subscription whose period (and grace window) has ended in our table: before the expiry sweep turns
/// it `expired` and its user `free`, the store is asked (L1). Read by `SubscriptionExpirySweepJob`.
struct DueRenewal: Sendable {
    let id: UUID
    let store: Store
    /// `store_transaction_id`: Apple's original transaction id, Google's purchase token.
    let key: String
    let productID: String
    let windowEnd: Date
    let owner: SubscriptionOwner
}

/// Asks the store for the state of one `DueRenewal` and applies it like a notification would.
///
/// The stores are the source of truth: Google's `purchases.subscriptionsv2.get` "is considered the source of
/// truth" for a subscription's state (developer.android.com/google/play/billing/lifecycle/subscriptions), Apple's Get
/// All Subscription Statuses gives the status and latest signed transaction of a subscription
/// (developer.apple.com/documentation/appstoreserverapi/get_all_subscription_statuses). Without App Store Server
/// API credentials the receipt stored by the last validation is sent to verifyReceipt again (its
/// `latest_receipt_info` holds the renewals Apple made since).
///
/// Thread rules: a value over the shared `ReceiptServices`; called by the sweep's thread, one row at a time, with no
/// database transaction open while the store is asked.
struct SubscriptionStoreCheck: Sendable {
    let services: ReceiptServices

    enum Outcome: Sendable, Equatable {
        /// The store answered; its state was applied (the row may still be live, renewed, in grace, or ended).
        case applied(SubscriptionStatus)
        /// The store no longer knows the purchase (Google 410: expired too long ago): the sweep ends the row.
        case ended
        /// No store could be asked for this row (not configured, nothing stored to ask with, or the store failed):
        /// the row stays as it is.
        case cannotAsk(String)
    }

    /// `source`: who asked, in the `store_checked` event (`expiry_sweep`, `store_reconciliation`).
    func check(_ row: DueRenewal, pool: PostgresPool, now: Date, cancellation: HTTPCancellation?,
               source: String = "expiry_sweep") -> Outcome {
        let state: StoreSubscriptionState
        do {
            guard let read = try read(row, pool: pool, now: now, cancellation: cancellation) else { return .ended }
            state = read
        } catch let unasked as Unasked {
            return .cannotAsk(unasked.reason)
        } catch {
            return .cannotAsk("\(row.store.rawValue) store call failed: \(error)")
        }
        do {
            try pool.withConnection { c in
                try c.transaction { c in
                    let outcome = try SubscriptionStore.upsert(state, owner: row.owner, on: c)
                    if outcome.applied {
                        try SubscriptionStore.applyEntitlement(subscriptionID: outcome.subscriptionID, userID: row.owner.userID,
                                                               entitled: state.status.isEntitled, on: c)
                    }
                    let end = state.endDate.map { "\(Int64($0.timeIntervalSince1970))" } ?? "none"
                    try SubscriptionStore.event(outcome.subscriptionID, type: "store_checked",
                                                data: ["source": source, "status": state.status.rawValue,
                                                       "transaction_id": state.transactionID],
                                                idempotencyKey: "sweep:store_check:\(row.id.uuidString.lowercased()):\(state.status.rawValue):\(end)",
                                                on: c)
                }
            }
        } catch {
            return .cannotAsk("applying the store's answer failed: \(error)")
        }
        return .applied(state.status)
    }

    private struct Unasked: Error { let reason: String }

    private func read(_ row: DueRenewal, pool: PostgresPool, now: Date,
                      cancellation: HTTPCancellation?) throws -> StoreSubscriptionState? {
        switch row.store {
        case .google:
            guard let play = services.googlePlay else { throw Unasked(reason: "Google Play is not configured") }
            guard let package = try googlePackage(row, pool: pool) else {
                throw Unasked(reason: "the purchase's package name is unknown (set RECEIPTS_GOOGLE_PACKAGE_NAMES)")
            }
            switch try play.subscription(packageName: package, purchaseToken: row.key, cancellation: cancellation) {
            case .found(let purchase):
                return GoogleStateDerivation.state(purchase, purchaseToken: row.key, productID: row.productID, now: now)
                    ?? GoogleStateDerivation.state(purchase, purchaseToken: row.key,
                                                   productID: purchase.lineItems?.first?.productId ?? row.productID, now: now)
            case .notFound(let status, _):
                // 410: "the subscription purchase is no longer available for query because it has been expired for
                // too long" — ended for Google; answer with an expired state at the period we hold.
                guard status == 410 else { throw Unasked(reason: "Google answered HTTP \(status) for the purchase") }
                return nil
            }
        case .apple:
            if let api = services.appStoreAPI, let verifier = services.appleVerifier {
                return try appleServerAPIState(row, api: api, verifier: verifier, now: now, cancellation: cancellation)
            }
            return try appleReceiptState(row, pool: pool, now: now, cancellation: cancellation)
        }
    }

    /// The configured package when there is exactly one, else the one recorded with the purchase's acknowledgement.
    private func googlePackage(_ row: DueRenewal, pool: PostgresPool) throws -> String? {
        let configured = services.configuration.googlePackageNames
        if configured.count == 1 { return configured.first }
        return try pool.withConnection { c in
            try c.queryFirst("SELECT package_name FROM google_acknowledgements WHERE purchase_token = $1", [row.key])
                .map { try $0.string("package_name") }
        }
    }

    private func appleServerAPIState(_ row: DueRenewal, api: AppStoreServerAPIClient, verifier: AppleSignedDataVerifier,
                                     now: Date, cancellation: HTTPCancellation?) throws -> StoreSubscriptionState? {
        for environment in services.configuration.appleAllowedEnvironments.sorted(by: { $0 == "Production" && $1 != "Production" }) {
            guard let (last, env) = try api.lastTransaction(of: row.key, environment: environment, cancellation: cancellation),
                  let signed = last.signedTransactionInfo else { continue }
            let transaction = try verifier.verifyTransaction(signed, expectedEnvironment: env)
            let renewal = try last.signedRenewalInfo.map { try verifier.verifyRenewalInfo($0, expectedEnvironment: env) }
            let stateAt = transaction.signedDate?.millisecondsDate ?? now
            return AppleStateDerivation.state(transaction: transaction, renewal: renewal, statusCode: last.status,
                                              stateAt: stateAt, now: now)
        }
        throw Unasked(reason: "the App Store does not know the subscription")
    }

    private func appleReceiptState(_ row: DueRenewal, pool: PostgresPool, now: Date,
                                   cancellation: HTTPCancellation?) throws -> StoreSubscriptionState? {
        let receipt = try pool.withConnection { c in
            try c.queryFirst("""
                SELECT receipt_data FROM iap_receipts
                WHERE subscription_id = $1 AND validated AND receipt_data IS NOT NULL AND store = 'apple'
                ORDER BY validation_date DESC LIMIT 1
                """, [row.id]).map { try $0.string("receipt_data") }
        }
        guard let receipt else { throw Unasked(reason: "no stored receipt and no App Store Server API credentials") }
        switch try services.verifyReceipt.verify(receiptData: receipt, cancellation: cancellation) {
        case .invalid(let status, _):
            throw Unasked(reason: "verifyReceipt answered status \(status) for the stored receipt")
        case .valid(let response):
            do {
                return try VerifyReceiptDerivation.state(response, transactionID: row.key, originalTransactionID: row.key,
                                                         planProduct: row.productID, now: now).state
            } catch {
                throw Unasked(reason: "the stored receipt no longer holds the subscription")
            }
        }
    }
}
