import Foundation
import HTTP
import Logging
import Storage
import Workers

/// `ValidateReceiptJob` arguments: `[{"user_id", "app_id", "plan_id", "store": "apple", "receipt_data",
/// "transaction_id"}]` or `[{"user_id", "app_id", "plan_id", "store": "google", "package_name", "product_id",
/// "purchase_token"}]`.
public struct ValidateReceiptArguments: Decodable, Sendable, ValidatedArguments {
    public enum Proof: Sendable {
        case apple(receiptData: String, transactionID: String)
        case google(packageName: String, productID: String, purchaseToken: String)
    }
    public let userID: String
    public let appID: String
    public let planID: String
    public let proof: Proof

    public var store: Store {
        if case .apple = proof { return .apple }
        return .google
    }

    enum CodingKeys: String, CodingKey {
        case user_id, app_id, plan_id, store, receipt_data, transaction_id, package_name, product_id, purchase_token
    }

    public init(userID: String, appID: String, planID: String, proof: Proof) {
        self.userID = userID
        self.appID = appID
        self.planID = planID
        self.proof = proof
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        userID = try c.decode(String.self, forKey: .user_id)
        appID = try c.decode(String.self, forKey: .app_id)
        planID = try c.decode(String.self, forKey: .plan_id)
        let store = try c.decode(String.self, forKey: .store)
        switch store {
        case "apple":
            proof = .apple(receiptData: try c.decode(String.self, forKey: .receipt_data),
                           transactionID: try c.decode(String.self, forKey: .transaction_id))
        case "google":
            proof = .google(packageName: try c.decode(String.self, forKey: .package_name),
                            productID: try c.decode(String.self, forKey: .product_id),
                            purchaseToken: try c.decode(String.self, forKey: .purchase_token))
        default:
            throw DecodingError.dataCorruptedError(forKey: .store, in: c,
                                                   debugDescription: "store must be \"apple\" or \"google\"")
        }
    }

    public func validate() throws(JobError) {
        for (name, value) in [("user_id", userID), ("app_id", appID), ("plan_id", planID)] where UUID(uuidString: value) == nil {
            throw .badInput("\(name) is not a UUID")
        }
        switch proof {
        case .apple(let receipt, let transaction):
            guard !receipt.isEmpty, receipt.count <= 1_000_000 else { throw .badInput("receipt_data is empty or larger than 1 MB") }
            guard !transaction.isEmpty, transaction.count <= 64, transaction.allSatisfy(\.isASCII),
                  transaction.allSatisfy(\.isNumber) else {
                throw .badInput("transaction_id must be the App Store's numeric transaction id")
            }
        case .google(let package, let product, let token):
            guard !package.isEmpty, package.count <= 255, !package.contains("/") else { throw .badInput("package_name is invalid") }
            guard !product.isEmpty, product.count <= 255, !product.contains("/") else { throw .badInput("product_id is invalid") }
            guard !token.isEmpty, token.count <= 4096 else { throw .badInput("purchase_token is empty or too long") }
        }
    }
}

/// Validates a purchase with its store and records it: subscription upserted by `store_transaction_id`, user
/// premium, one event, one receipt row — in one transaction with the job's ledger row.
///
/// Failure policy: invalid receipts (store says so, wrong product, transaction not in the receipt, signed data that
/// does not verify) are recorded as invalid, logged as a security alert `RCV-…` and the job goes to `dead`
/// (`JobError.permanent`) without retry; temporary store failures are retried with Sidekiq backoff.
public struct ValidateReceiptJob: Job {
    public static let className = "ValidateReceiptJob"
    public static let options = JobOptions(maxRetries: 25, backoff: .sidekiq, timeout: 120, usesLedger: true)
    let services: ReceiptServices

    public init(services: ReceiptServices) { self.services = services }

    /// A validation that ends without effects: recorded as an invalid receipt and alerted.
    struct Rejection: Error {
        let code: String
        let status: Int?
        let reason: String
    }

    /// The subscription already belongs to another user: a replayed receipt.
    struct OwnershipConflict: Error {}

    public func perform(_ arguments: SingleArgument<ValidateReceiptArguments>, context: JobContext) throws {
        let args = arguments.value
        let userID = UUID(uuidString: args.userID)!, appID = UUID(uuidString: args.appID)!, planID = UUID(uuidString: args.planID)!
        let plan = try loadPlan(planID: planID, userID: userID, appID: appID, store: args.store, context: context)
        let owner = SubscriptionOwner(userID: userID, appID: appID, planID: plan.id, planType: plan.planType)
        let cancellation = HTTPCancellation(isCancelled: { [cancellation = context.cancellation] in cancellation.isCancelled })
        let expectedProduct = plan.productID(for: args.store)!

        var logger = context.logger
        logger[metadataKey: "store"] = "\(args.store.rawValue)"
        logger[metadataKey: "user_id"] = "\(args.userID)"

        do {
            switch args.proof {
            case .apple(let receipt, let transactionID):
                logger[metadataKey: "receipt"] = "\(Redact.fingerprint(receipt))"
                let state = services.configuration.usesAppStoreServerAPI
                    ? try appleServerAPIState(transactionID: transactionID, product: expectedProduct, cancellation: cancellation)
                    : try appleVerifyReceiptState(receipt: receipt, transactionID: transactionID, product: expectedProduct,
                                                  cancellation: cancellation)
                try apply(state, owner: owner, receiptData: receipt, context: context)
                logger.info("receipt validated", metadata: ["status": "\(state.status.rawValue)"])
            case .google(let package, let product, let token):
                logger[metadataKey: "purchase_token"] = "\(Redact.token(token))"
                try services.checkPackage(package)
                guard product == expectedProduct else {
                    throw JobError.badInput("product_id \(product) is not the plan's Google product \(expectedProduct)")
                }
                let play = try services.requireGoogle()
                let purchase: GoogleSubscriptionPurchase
                switch try play.subscription(packageName: package, purchaseToken: token, cancellation: cancellation) {
                case .found(let p): purchase = p
                case .notFound(let status, let reason):
                    throw Rejection(code: "RCV-GOOGLE-\(status)", status: status, reason: "purchase token refused by Google: \(reason)")
                }
                guard let state = GoogleStateDerivation.state(purchase, purchaseToken: token, productID: product, now: Date()) else {
                    if purchase.lineItems?.contains(where: { $0.productId == product }) != true {
                        throw Rejection(code: "RCV-PRODUCT", status: nil, reason: "the purchase is not for product \(product)")
                    }
                    throw StoreUnavailable("Google Play API", "unknown subscriptionState \(purchase.subscriptionState ?? "<none>")")
                }
                // The debt to acknowledge commits with the grant (and the ledger row); it is paid after the commit,
                // here or by GoogleAcknowledgementSweepJob (docs/jobs-receipts.md, "Google acknowledgement").
                let owesAcknowledgement = purchase.needsAcknowledgement && state.status.isEntitled
                try apply(state, owner: owner, receiptData: token, context: context) { c, subscriptionID in
                    try GooglePurchaseEffects.endReplaced(by: purchase, token: token, at: Date(), on: c)
                    if owesAcknowledgement {
                        try GoogleAcknowledgementStore.owe(purchaseToken: token, packageName: package, productID: product,
                                                           subscriptionID: subscriptionID, on: c)
                    }
                }
                logger.info("receipt validated", metadata: ["status": "\(state.status.rawValue)"])
                if owesAcknowledgement, let database = context.database {
                    _ = try services.acknowledger(pool: database.pool).pay(purchaseToken: token, cancellation: cancellation, logger: logger)
                }
            }
        } catch let rejection as Rejection {
            try context.withConnection { c in
                try SubscriptionStore.invalidReceipt(store: args.store, appID: appID, userID: userID, transactionID: receiptKeyFor(args),
                                                     productID: expectedProduct, receiptData: receiptDataFor(args),
                                                     status: rejection.status, error: "\(rejection.code): \(rejection.reason)", on: c)
            }
            logger.warning("security alert \(rejection.code): \(rejection.reason)",
                           metadata: ["alert": "\(rejection.code)", "security": "true"])
            throw JobError.permanent("\(rejection.code): \(rejection.reason)")
        } catch is OwnershipConflict {
            logger.warning("security alert RCV-OWNER: the store transaction already belongs to another user",
                           metadata: ["alert": "RCV-OWNER", "security": "true"])
            throw JobError.permanent("RCV-OWNER: the store transaction already belongs to another user")
        }
    }

    private func receiptKeyFor(_ a: ValidateReceiptArguments) -> String {
        switch a.proof {
        case .apple(_, let t): return t
        case .google(_, _, let token): return token
        }
    }

    private func receiptDataFor(_ a: ValidateReceiptArguments) -> String {
        switch a.proof {
        case .apple(let r, _): return r
        case .google(_, _, let token): return token
        }
    }

    private func loadPlan(planID: UUID, userID: UUID, appID: UUID, store: Store, context: JobContext) throws -> PlanRecord {
        let (plan, userApp) = try context.withConnection { c in
            (try SubscriptionStore.plan(planID, on: c), try SubscriptionStore.userApp(userID, on: c))
        }
        guard let plan else { throw JobError.badInput("plan_id \(planID.uuidString.lowercased()) does not exist") }
        guard plan.appID == appID else { throw JobError.badInput("plan_id belongs to another app than app_id") }
        guard let userApp else { throw JobError.badInput("user_id \(userID.uuidString.lowercased()) does not exist") }
        guard userApp == appID else { throw JobError.badInput("user_id belongs to another app than app_id") }
        guard plan.productID(for: store) != nil else { throw JobError.badInput("the plan has no \(store.rawValue) product id") }
        return plan
    }

    // MARK: Apple

    private func appleVerifyReceiptState(receipt: String, transactionID: String, product: String,
                                         cancellation: HTTPCancellation) throws -> StoreSubscriptionState {
        switch try services.verifyReceipt.verify(receiptData: receipt, cancellation: cancellation) {
        case .invalid(let status, let reason):
            throw Rejection(code: "RCV-\(status)", status: status, reason: reason)
        case .valid(let response):
            if let expected = services.configuration.appleBundleID, let bundle = response.receipt?.bundle_id, bundle != expected {
                throw Rejection(code: "RCV-BUNDLE", status: response.status, reason: "receipt is for bundle id \(bundle), expected \(expected)")
            }
            let (state, purchased): (StoreSubscriptionState, String)
            do { (state, purchased) = try VerifyReceiptDerivation.state(response, transactionID: transactionID, now: Date()) } catch {
                switch error {
                case .transactionNotInReceipt:
                    throw Rejection(code: "RCV-TXN", status: response.status, reason: "transaction \(transactionID) is not in the receipt")
                case .missingFields:
                    throw Rejection(code: "RCV-DATA", status: response.status, reason: "the receipt's transaction lacks product or transaction id")
                }
            }
            guard purchased == product else {
                throw Rejection(code: "RCV-PRODUCT", status: response.status,
                                reason: "the transaction is for product \(purchased), the plan's is \(product)")
            }
            return state
        }
    }

    private func appleServerAPIState(transactionID: String, product: String, cancellation: HTTPCancellation) throws -> StoreSubscriptionState {
        guard let api = services.appStoreAPI else {
            throw JobError.permanent("App Store Server API credentials are not configured")
        }
        let verifier = try services.requireVerifier()
        let signed: String, environment: String
        switch try api.transactionInfo(transactionID, cancellation: cancellation) {
        case .found(let s, let env): (signed, environment) = (s, env)
        case .notFound(let why): throw Rejection(code: "RCV-NOT-FOUND", status: nil, reason: "unknown transaction: \(why)")
        }
        let transaction: AppleTransaction
        do { transaction = try verifier.verifyTransaction(signed, expectedEnvironment: environment) } catch {
            throw Rejection(code: "RCV-JWS", status: nil, reason: error.description)
        }
        guard transaction.productId == product else {
            throw Rejection(code: "RCV-PRODUCT", status: nil,
                            reason: "the transaction is for product \(transaction.productId ?? "<none>"), the plan's is \(product)")
        }
        let original = transaction.originalTransactionId ?? transactionID
        var latest = transaction
        var renewal: AppleRenewalInfo?
        var statusCode: Int?
        if case .found(let statuses, _) = try api.subscriptionStatuses(original, environment: environment, cancellation: cancellation),
           let last = statuses.data?.flatMap({ $0.lastTransactions ?? [] }).first(where: { $0.originalTransactionId == original }) {
            do {
                if let s = last.signedTransactionInfo { latest = try verifier.verifyTransaction(s, expectedEnvironment: environment) }
                if let s = last.signedRenewalInfo { renewal = try verifier.verifyRenewalInfo(s, expectedEnvironment: environment) }
            } catch {
                throw Rejection(code: "RCV-JWS", status: nil, reason: error.description)
            }
            statusCode = last.status
        }
        let now = Date()
        guard var state = AppleStateDerivation.state(transaction: latest, renewal: renewal, statusCode: statusCode,
                                                     stateAt: now, now: now) else {
            throw Rejection(code: "RCV-DATA", status: nil, reason: "the signed transaction lacks product or transaction id")
        }
        if let first = transaction.originalPurchaseDate?.millisecondsDate { state.startDate = first }
        return state
    }

    // MARK: Effects

    /// One transaction with the ledger: upsert, entitlement, event, receipt row, and the store's `also` effects
    /// (given the subscription id).
    private func apply(_ state: StoreSubscriptionState, owner: SubscriptionOwner, receiptData: String, context: JobContext,
                       also: (PostgresConnection, UUID) throws -> Void = { _, _ in }) throws {
        try context.transaction { c in
            if let existing = try SubscriptionStore.subscription(store: state.store, key: state.key, on: c),
               let existingUser = existing.userID, existingUser != owner.userID {
                throw OwnershipConflict()
            }
            let outcome = try SubscriptionStore.upsert(state, owner: owner, on: c)
            if outcome.applied {
                try SubscriptionStore.applyEntitlement(subscriptionID: outcome.subscriptionID, userID: owner.userID,
                                                       entitled: state.status.isEntitled, on: c)
            }
            try SubscriptionStore.event(outcome.subscriptionID, type: state.status.validationEvent,
                                        data: ["source": "validation", "transaction_id": state.transactionID,
                                               "product_id": state.productID, "status": state.status.rawValue],
                                        idempotencyKey: "\(state.store.rawValue):validation:\(state.transactionID):\(state.status.rawValue)",
                                        on: c)
            try SubscriptionStore.validatedReceipt(state, owner: owner, subscriptionID: outcome.subscriptionID,
                                                   receiptData: receiptData, on: c)
            try also(c, outcome.subscriptionID)
        }
    }
}
