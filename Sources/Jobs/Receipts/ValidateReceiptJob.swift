import Foundation
import WorkersHTTP
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// `ValidateReceiptJob` arguments: `[{"user_id", "app_id", "plan_id", "store": "apple", "receipt_data"?,
/// "transaction_id", "original_transaction_id"?, "signed_transaction"?}]` (`receipt_data` or `signed_transaction`
/// required; see `docs/jobs-receipts.md`) or `[{"user_id", "app_id", "plan_id", "store": "google", "package_name",
/// "product_id", "purchase_token"}]`.
/// A value is valid by construction: `init(userID:appID:planID:proof:)` (and so `init(from:)`) checks the proof's
/// formats and throws `JobError.badInput` (dead at once as "invalid arguments for ValidateReceiptJob: …").
///
/// The personal fields are held as `Personal` values (issue 50 point 1): an error, a log line or a reason that quotes
/// one shows `[field]`; the job takes a value with `reveal()` where it sends it to the store or writes it to
/// PostgreSQL.
public struct ValidateReceiptArguments: JobArguments, Equatable {
    public static let className = "ValidateReceiptJob"
    /// Encrypted under the user's data key by Swift producers and `workerctl enqueue` (docs/jobs-privacy.md,
    /// "Encrypted arguments"): the user id, the store proofs and the store's transaction ids. `app_id`, `plan_id`,
    /// `store`, `package_name` and `product_id` stay readable (they name our catalogue, not a person).
    public static let personalFields: Set<String> = [
        "user_id", "receipt_data", "signed_transaction", "purchase_token", "transaction_id", "original_transaction_id",
    ]
    public static let subjectField: String? = "user_id"

    public enum Proof: Sendable, Equatable {
        /// `signedTransaction`: the device's StoreKit 2 `jwsRepresentation` of the purchase (proof of possession);
        /// `originalTransactionID`: a StoreKit 1 restore's `original.transactionIdentifier`.
        case apple(receiptData: Personal<String>?, transactionID: Personal<String>, originalTransactionID: Personal<String>?,
                   signedTransaction: Personal<String>?)
        case google(packageName: String, productID: String, purchaseToken: Personal<String>)

        /// An Apple proof from plain values, each held as the personal value of its field.
        public static func apple(receiptData: String?, transactionID: String, originalTransactionID: String?,
                                 signedTransaction: String?) -> Proof {
            .apple(receiptData: receiptData.map { Personal($0, field: CodingKeys.receipt_data.rawValue) },
                   transactionID: Personal(transactionID, field: CodingKeys.transaction_id.rawValue),
                   originalTransactionID: originalTransactionID.map { Personal($0, field: CodingKeys.original_transaction_id.rawValue) },
                   signedTransaction: signedTransaction.map { Personal($0, field: CodingKeys.signed_transaction.rawValue) })
        }

        /// A Google proof from plain values, the token held as the personal value of `purchase_token`.
        public static func google(packageName: String, productID: String, purchaseToken: String) -> Proof {
            .google(packageName: packageName, productID: productID,
                    purchaseToken: Personal(purchaseToken, field: CodingKeys.purchase_token.rawValue))
        }
    }
    public let userID: Personal<UUID>
    public let appID: UUID
    public let planID: UUID
    public let proof: Proof

    public var store: Store {
        if case .apple = proof { return .apple }
        return .google
    }

    enum CodingKeys: String, CodingKey {
        case user_id, app_id, plan_id, store, receipt_data, transaction_id, package_name, product_id, purchase_token
        case original_transaction_id, signed_transaction
    }

    public init(userID: UUID, appID: UUID, planID: UUID, proof: Proof) throws(JobError) {
        try self.init(userID: Personal(userID, field: CodingKeys.user_id.rawValue), appID: appID, planID: planID, proof: proof)
    }

    public init(userID: Personal<UUID>, appID: UUID, planID: UUID, proof: Proof) throws(JobError) {
        try Self.check(proof)
        self.userID = userID
        self.appID = appID
        self.planID = planID
        self.proof = proof
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let userID = try c.decode(Personal<String>.self, forKey: .user_id)
        let appID = try c.decode(String.self, forKey: .app_id)
        let planID = try c.decode(String.self, forKey: .plan_id)
        let store = try c.decode(String.self, forKey: .store)
        let proof: Proof
        switch store {
        case "apple":
            let receipt = try c.decodeIfPresent(Personal<String>.self, forKey: .receipt_data)
            let signed = try c.decodeIfPresent(Personal<String>.self, forKey: .signed_transaction)
            guard receipt != nil || signed != nil else {
                throw DecodingError.keyNotFound(CodingKeys.receipt_data, .init(
                    codingPath: c.codingPath, debugDescription: "an Apple purchase needs receipt_data or signed_transaction"))
            }
            proof = .apple(receiptData: receipt, transactionID: try c.decode(Personal<String>.self, forKey: .transaction_id),
                           originalTransactionID: try c.decodeIfPresent(Personal<String>.self, forKey: .original_transaction_id),
                           signedTransaction: signed)
        case "google":
            proof = .google(packageName: try c.decode(String.self, forKey: .package_name),
                            productID: try c.decode(String.self, forKey: .product_id),
                            purchaseToken: try c.decode(Personal<String>.self, forKey: .purchase_token))
        default:
            throw DecodingError.dataCorruptedError(forKey: .store, in: c,
                                                   debugDescription: "store must be \"apple\" or \"google\"")
        }
        try self.init(userID: userID.map { try ArgumentUUID.parse($0, field: "user_id") },
                      appID: ArgumentUUID.parse(appID, field: "app_id"),
                      planID: ArgumentUUID.parse(planID, field: "plan_id"), proof: proof)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(userID.map { $0.uuidString.lowercased() }, forKey: .user_id)  // itself only for the typed enqueue
        try c.encodeUUID(appID, forKey: .app_id)
        try c.encodeUUID(planID, forKey: .plan_id)
        switch proof {
        case .apple(let receipt, let transaction, let original, let signed):
            try c.encode("apple", forKey: .store)
            try c.encodeIfPresent(receipt, forKey: .receipt_data)
            try c.encode(transaction, forKey: .transaction_id)
            try c.encodeIfPresent(original, forKey: .original_transaction_id)
            try c.encodeIfPresent(signed, forKey: .signed_transaction)
        case .google(let package, let product, let token):
            try c.encode("google", forKey: .store)
            try c.encode(package, forKey: .package_name)
            try c.encode(product, forKey: .product_id)
            try c.encode(token, forKey: .purchase_token)
        }
    }

    private static func check(_ proof: Proof) throws(JobError) {
        switch proof {
        case .apple(let receiptValue, let transactionValue, let originalValue, let signedValue):
            let receipt = receiptValue?.reveal(), transaction = transactionValue.reveal()
            let original = originalValue?.reveal(), signed = signedValue?.reveal()
            guard receipt != nil || signed != nil else { throw .badInput("an Apple purchase needs receipt_data or signed_transaction") }
            if let receipt {
                // Sizes in bytes (`utf8`): what the messages say, and no walk over a megabyte's grapheme clusters.
                guard !receipt.isEmpty, receipt.utf8.count <= 1_000_000 else { throw .badInput("receipt_data is empty or larger than 1 MB") }
            }
            func isTransactionID(_ t: String) -> Bool {
                !t.isEmpty && t.count <= 64 && t.allSatisfy(\.isASCII) && t.allSatisfy(\.isNumber)
            }
            guard isTransactionID(transaction) else {
                throw .badInput("transaction_id must be the App Store's numeric transaction id")
            }
            if let original, !isTransactionID(original) {
                throw .badInput("original_transaction_id must be the App Store's numeric transaction id")
            }
            if let signed {
                guard signed.utf8.count <= 100_000,
                      signed.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).count == 3 else {
                    throw .badInput("signed_transaction is not a compact JWS")
                }
            }
        case .google(let package, let product, let tokenValue):
            let token = tokenValue.reveal()
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
    public static let options = StoreCallLimits.options(
        JobOptions(maxRetries: 25, backoff: .sidekiq, timeout: .seconds(120), usesLedger: true))
    let services: ReceiptServices

    public init(services: ReceiptServices) { self.services = services }

    /// A validation that ends without effects: recorded as an invalid receipt and alerted.
    struct Rejection: Error {
        let code: String
        let status: Int?
        let reason: String
    }

    /// The purchase belongs to another user: its subscription is already someone else's (a replayed receipt), or
    /// Apple's signed data names another user (`appAccountToken`).
    struct OwnershipConflict: Error {
        var reason = "the store transaction already belongs to another user"
    }

    public func perform(_ arguments: ValidateReceiptArguments, context: JobContext) throws {
        let args = arguments
        let userID = args.userID, appID = args.appID, planID = args.planID
        let plan = try loadPlan(planID: planID, userID: userID, appID: appID, store: args.store, context: context)
        let owner = SubscriptionOwner(userID: userID.reveal(), appID: appID, planID: plan.id, planType: plan.planType)
        let cancellation = HTTPCancellation(isCancelled: { [cancellation = context.cancellation] in cancellation.isCancelled })
        let expectedProduct = plan.productID(for: args.store)!

        var logger = context.logger
        logger[metadataKey: "store"] = "\(args.store.rawValue)"
        logger[metadataKey: "user_id"] = "\(args.userID)"  // `[user_id]`: the id travels sealed, the line says whose field it is

        do {
            switch args.proof {
            case .apple(let receipt, let transactionID, let originalTransactionID, let signedTransaction):
                let fingerprint = Redact.fingerprint((receipt ?? signedTransaction)?.reveal() ?? "")  // a digest, not the value
                logger[metadataKey: "receipt"] = "\(fingerprint)"
                let state: StoreSubscriptionState
                if services.configuration.usesAppStoreServerAPI {
                    state = try appleServerAPIState(transactionID: transactionID, receipt: receipt,
                                                    originalTransactionID: originalTransactionID,
                                                    deviceSignedTransaction: signedTransaction,
                                                    userID: userID, product: expectedProduct, cancellation: cancellation)
                } else {
                    guard let receipt else {
                        throw JobError.badInput("receipt_data is required: this worker validates Apple purchases with verifyReceipt")
                    }
                    state = try appleVerifyReceiptState(receipt: receipt, transactionID: transactionID,
                                                        originalTransactionID: originalTransactionID, userID: userID,
                                                        product: expectedProduct, cancellation: cancellation)
                }
                try apply(state, owner: owner, receiptData: (receipt ?? signedTransaction)?.reveal(), context: context)
                logger.info("receipt validated", metadata: ["status": "\(state.status.rawValue)"])
            case .google(let package, let product, let token):
                let redactedToken = Redact.token(token.reveal())  // its first 4 characters and length
                logger[metadataKey: "purchase_token"] = "\(redactedToken)"
                try services.checkPackage(package)
                guard product == expectedProduct else {
                    throw JobError.badInput("product_id \(product) is not the plan's Google product \(expectedProduct)")
                }
                let play = try services.requireGoogle()
                let purchase: GoogleSubscriptionPurchase
                switch try play.subscription(packageName: package, purchaseToken: token.reveal(), cancellation: cancellation) {
                case .found(let p): purchase = p
                case .notFound(let status, let reason):
                    throw Rejection(code: "RCV-GOOGLE-\(status)", status: status, reason: "purchase token refused by Google: \(reason)")
                }
                // The app names the buyer at purchase time (GoogleAccountHash); a purchase naming someone else is not
                // this user's, whoever posts its token first.
                if GoogleAccountHash.matches(purchase.obfuscatedAccountID, user: userID.reveal()) == false {
                    throw OwnershipConflict(reason: "the purchase's obfuscatedExternalAccountId names another user")
                }
                guard let state = GoogleStateDerivation.state(purchase, purchaseToken: token.reveal(), productID: product, now: services.now()) else {
                    if purchase.lineItems?.contains(where: { $0.productId == product }) != true {
                        throw Rejection(code: "RCV-PRODUCT", status: nil, reason: "the purchase is not for product \(product)")
                    }
                    throw StoreUnavailable("Google Play API", "unknown subscriptionState \(purchase.subscriptionState ?? "<none>")")
                }
                // The debt to acknowledge commits with the grant (and the ledger row); it is paid after the commit,
                // here or by GoogleAcknowledgementSweepJob (docs/jobs-receipts.md, "Google acknowledgement").
                let owesAcknowledgement = purchase.needsAcknowledgement && state.status.isEntitled
                try apply(state, owner: owner, receiptData: token.reveal(), context: context) { c, subscriptionID in
                    try GooglePurchaseEffects.endReplaced(by: purchase, token: token.reveal(), at: services.now(), on: c)
                    if owesAcknowledgement {
                        try GoogleAcknowledgementStore.owe(purchaseToken: token.reveal(), packageName: package, productID: product,
                                                           subscriptionID: subscriptionID, on: c)
                    }
                }
                logger.info("receipt validated", metadata: ["status": "\(state.status.rawValue)"])
                if owesAcknowledgement, let database = context.database {
                    let purchaseToken = token.reveal()
                    _ = try services.acknowledger(pool: database.pool).pay(purchaseToken: purchaseToken, cancellation: cancellation,
                                                                           logger: logger)
                }
            }
        } catch let rejection as Rejection {
            try context.withConnection { c in
                try SubscriptionStore.invalidReceipt(store: args.store, appID: appID, userID: userID.reveal(), transactionID: receiptKeyFor(args),
                                                     productID: expectedProduct, receiptData: receiptDataFor(args),
                                                     status: rejection.status, error: "\(rejection.code): \(rejection.reason)", on: c)
            }
            logger.warning("security alert \(rejection.code): \(rejection.reason)",
                           metadata: ["alert": "\(rejection.code)", "security": "true"])
            throw JobError.permanent("\(rejection.code): \(rejection.reason)")
        } catch let conflict as OwnershipConflict {
            logger.warning("security alert RCV-OWNER: \(conflict.reason)", metadata: ["alert": "RCV-OWNER", "security": "true"])
            throw JobError.permanent("RCV-OWNER: \(conflict.reason)")
        } catch let refused as AppleVerifyReceiptRequestRefused {
            // Our secret or our request is wrong, not the user's receipt: one configuration alert per attempt, no
            // receipt recorded, no security alert; retried with backoff until an operator fixes it.
            logger.error("configuration alert \(refused.alert): \(refused.reason)",
                         metadata: ["alert": "\(refused.alert)", "configuration": "true"])
            throw refused
        }
    }

    /// The invalid receipt row's key (`iap_receipts.transaction_id`, a SQL parameter).
    private func receiptKeyFor(_ a: ValidateReceiptArguments) -> String {
        switch a.proof {
        case .apple(_, let t, _, _): return t.reveal()
        case .google(_, _, let token): return token.reveal()
        }
    }

    /// The invalid receipt row's proof (`iap_receipts.receipt_data`, a SQL parameter).
    private func receiptDataFor(_ a: ValidateReceiptArguments) -> String? {
        switch a.proof {
        case .apple(let r, _, _, let signed): return (r ?? signed)?.reveal()
        case .google(_, _, let token): return token.reveal()
        }
    }

    private func loadPlan(planID: UUID, userID: Personal<UUID>, appID: UUID, store: Store, context: JobContext) throws -> PlanRecord {
        let user = userID.reveal()
        let (plan, userApp) = try context.withConnection { c in
            (try SubscriptionStore.plan(planID, on: c), try SubscriptionStore.userApp(user, on: c))
        }
        guard let plan else { throw JobError.badInput("plan_id \(planID.uuidString.lowercased()) does not exist") }
        guard plan.appID == appID else { throw JobError.badInput("plan_id belongs to another app than app_id") }
        guard let userApp else { throw JobError.badInput("user_id \(userID) does not exist") }
        guard userApp == appID else { throw JobError.badInput("user_id belongs to another app than app_id") }
        guard plan.productID(for: store) != nil else { throw JobError.badInput("the plan has no \(store.rawValue) product id") }
        return plan
    }

    // MARK: Apple

    private func appleVerifyReceiptState(receipt: Personal<String>, transactionID: Personal<String>,
                                         originalTransactionID: Personal<String>?, userID: Personal<UUID>,
                                         product: String, cancellation: HTTPCancellation) throws -> StoreSubscriptionState {
        switch try services.verifyReceipt.verify(receiptData: receipt.reveal(), cancellation: cancellation) {
        case .invalid(let status, let reason):
            throw Rejection(code: "RCV-\(status)", status: status, reason: reason)
        case .valid(let response):
            if let expected = services.configuration.appleBundleID, let bundle = response.receipt?.bundle_id, bundle != expected {
                throw Rejection(code: "RCV-BUNDLE", status: response.status, reason: "receipt is for bundle id \(bundle), expected \(expected)")
            }
            let derived: VerifyReceiptDerivation.Derived
            do {
                derived = try VerifyReceiptDerivation.state(response, transactionID: transactionID.reveal(),
                                                            originalTransactionID: originalTransactionID?.reveal(),
                                                            planProduct: product, now: Date())
            } catch {
                switch error {
                case .transactionNotInReceipt:
                    throw Rejection(code: "RCV-TXN", status: response.status, reason: "transaction \(transactionID) is not in the receipt")
                case .missingFields:
                    throw Rejection(code: "RCV-DATA", status: response.status, reason: "the receipt's transaction lacks product or transaction id")
                }
            }
            guard derived.purchasedProduct == product else {
                throw Rejection(code: "RCV-PRODUCT", status: response.status,
                                reason: "the transaction is for product \(derived.purchasedProduct), the plan's is \(product)")
            }
            if AppAccountToken.matches(derived.appAccountToken, userID: userID.reveal()) == false {
                throw OwnershipConflict(reason: "the receipt's app_account_token names another user")
            }
            return derived.state
        }
    }

    /// Server API mode. A bare `transaction_id` proves nothing about who bought it (ids are not secret), so the
    /// purchase must be bound to `userID` by Apple-signed data:
    /// - the device's signed transaction for this purchase (`deviceSignedTransaction`, verified like every JWS);
    /// - else a StoreKit 1 app receipt (`receipt`) whose PKCS#7 signature verifies to Apple's root, for our bundle id,
    ///   and that contains the transaction (as transaction id 1703 or original transaction id 1705): possession of
    ///   the buyer's receipt, checked before any request (`AppleAppReceiptVerifier`);
    /// - and/or an `appAccountToken` equal to the user's id.
    /// A token naming someone else → `RCV-OWNER`. When the receipt is the proof (no device JWS, no token naming the
    /// user): a receipt that does not verify → `RCV-RECEIPT` (with the reason), a verified receipt without the
    /// transaction, or whose record belongs to another subscription than Apple's answer → `RCV-TXN`; no proof at
    /// all → `RCV-PROOF`.
    ///
    /// verifyReceipt fallback: while the Server API cannot answer (`StoreUnavailable`: 5xx without Retry-After,
    /// timeout, connection failure, our JWT refused, unreadable answer) and a verified receipt holds the
    /// transaction, the purchase is validated with verifyReceipt in the same attempt. A 429 or a Retry-After is
    /// obeyed (retried later), not bypassed.
    private func appleServerAPIState(transactionID: Personal<String>, receipt: Personal<String>?,
                                     originalTransactionID: Personal<String>?, deviceSignedTransaction: Personal<String>?,
                                     userID: Personal<UUID>, product: String,
                                     cancellation: HTTPCancellation) throws -> StoreSubscriptionState {
        guard let api = services.appStoreAPI else {
            throw JobError.permanent("App Store Server API credentials are not configured")
        }
        let verifier = try services.requireVerifier()
        // The device's proof is checked before any request: a forged or foreign one costs Apple nothing.
        var device: AppleTransaction?
        if let deviceSignedTransaction {
            let t: AppleTransaction
            let jws = deviceSignedTransaction.reveal()
            do { t = try verifier.verifyTransaction(jws) } catch {
                throw Rejection(code: "RCV-JWS", status: nil, reason: "the device's signed transaction: \(error.description)")
            }
            let id = transactionID.reveal()
            guard t.transactionId == id || t.originalTransactionId == id else {
                throw Rejection(code: "RCV-TXN", status: nil,
                                reason: "the device's signed transaction is transaction \(t.transactionId ?? "<none>"), not \(transactionID)")
            }
            if AppAccountToken.matches(t.appAccountToken, userID: userID.reveal()) == false {
                throw OwnershipConflict(reason: "the transaction's appAccountToken names another user")
            }
            device = t
        }
        // Without the device's JWS, a StoreKit 1 app receipt holding the transaction is the proof (checked first too;
        // its verdict is applied where the proof is needed, below).
        var receiptProof = AppReceiptProof.none
        if device == nil, let receipt {
            guard let receiptVerifier = services.appleReceiptVerifier else {
                throw UnconfiguredJob.NotConfigured(area: "receipts",
                                                    problem: "RECEIPTS_APPLE_BUNDLE_ID is not set: app receipts cannot be verified")
            }
            do {
                let appReceipt = try receiptVerifier.verify(base64: receipt.reveal())
                if let record = appReceipt.purchase(transactionID.reveal()) {
                    receiptProof = .holds(record)
                } else {
                    receiptProof = .refused(Rejection(code: "RCV-TXN", status: nil,
                                                      reason: "transaction \(transactionID) is not in the app receipt"))
                }
            } catch {
                receiptProof = .refused(Rejection(code: "RCV-RECEIPT", status: nil, reason: error.description))
            }
        }
        do {
            return try appleServerAPILookup(api: api, verifier: verifier, transactionID: transactionID, device: device,
                                            receiptProof: receiptProof, userID: userID, product: product,
                                            cancellation: cancellation)
        } catch let unavailable as StoreUnavailable {
            guard let receipt, case .holds = receiptProof else { throw unavailable }
            return try appleVerifyReceiptState(receipt: receipt, transactionID: transactionID,
                                               originalTransactionID: originalTransactionID, userID: userID,
                                               product: product, cancellation: cancellation)
        }
    }

    /// What the request's app receipt proves (Server API mode, without the device's JWS).
    enum AppReceiptProof {
        case none
        /// It verified and holds the transaction: this record.
        case holds(AppleAppReceipt.InAppPurchase)
        /// The rejection to give if the receipt is the only proof.
        case refused(Rejection)
    }

    /// The Server API part of `appleServerAPIState`, once the proofs sent with the job were checked.
    private func appleServerAPILookup(api: AppStoreServerAPIClient, verifier: AppleSignedDataVerifier,
                                      transactionID: Personal<String>,
                                      device: AppleTransaction?, receiptProof: AppReceiptProof, userID: Personal<UUID>,
                                      product: String, cancellation: HTTPCancellation) throws -> StoreSubscriptionState {
        let signed: String, environment: String
        switch try api.transactionInfo(transactionID.reveal(), cancellation: cancellation) {
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
        if let device {
            guard device.environment == environment else {
                throw Rejection(code: "RCV-JWS", status: nil, reason: "the device's signed transaction: "
                                + AppleJWSError.wrongEnvironment(allowed: [environment], found: device.environment).description)
            }
            guard device.originalTransactionId == transaction.originalTransactionId else {
                throw Rejection(code: "RCV-TXN", status: nil,
                                reason: "the device's signed transaction belongs to another subscription than \(transactionID)")
            }
        }
        switch AppAccountToken.matches(transaction.appAccountToken, userID: userID.reveal()) {
        case false?: throw OwnershipConflict(reason: "the transaction's appAccountToken names another user")
        case true?: break
        case nil:
            guard device == nil else { break }
            switch receiptProof {
            case .holds(let record):
                if let original = record.originalTransactionID, original != transaction.originalTransactionId {
                    throw Rejection(code: "RCV-TXN", status: nil,
                                    reason: "the app receipt's transaction belongs to another subscription than \(transactionID)")
                }
            case .refused(let rejection):
                throw rejection
            case .none:
                throw Rejection(code: "RCV-PROOF", status: nil, reason: "transaction \(transactionID) carries no appAccountToken and "
                                + "no signed_transaction or receipt_data was sent: nothing binds it to this user")
            }
        }
        let original = transaction.originalTransactionId ?? transactionID.reveal()
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
                                                     stateAt: latest.signedDate?.millisecondsDate ?? now, now: now) else {
            throw Rejection(code: "RCV-DATA", status: nil, reason: "the signed transaction lacks product or transaction id")
        }
        if let first = transaction.originalPurchaseDate?.millisecondsDate { state.startDate = first }
        return state
    }

    // MARK: Effects

    /// One transaction with the ledger: upsert, entitlement, event, receipt row, and the store's `also` effects
    /// (given the subscription id).
    private func apply(_ state: StoreSubscriptionState, owner: SubscriptionOwner, receiptData: String?, context: JobContext,
                       also: (PostgresConnection, UUID) throws -> Void = { _, _ in }) throws {
        var movedFrom: UUID?
        try context.transaction { c in
            if try ErasedUser.skips(owner.userID, on: c, context) { return }  // erasure stays erased (ErasedUser)
            if let existing = try SubscriptionStore.subscription(store: state.store, key: state.key, on: c),
               let existingUser = existing.userID, existingUser != owner.userID {
                // The same store account subscribing from another app account (Apple keeps the original transaction
                // id): the latest transaction's Apple-signed appAccountToken says whose the current period is, and
                // moves the subscription (L2). Without it, a replayed receipt: refused.
                guard let newOwner = owner.userID,
                      AppAccountToken.matches(state.latestAppAccountToken, userID: newOwner) == true else {
                    throw OwnershipConflict()
                }
                try SubscriptionStore.moveOwner(existing.id, from: existingUser, to: newOwner, on: c)
                movedFrom = existingUser
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
            try NotificationReplay.enqueueReplays(store: state.store, key: state.key, queue: context.queue, on: c)  // L8: notifications that came first
        }
        if movedFrom != nil {
            context.logger.warning("alert RCV-OWNER-MOVED: the store's latest transaction names this user's app account; the subscription moved from its previous owner",
                                   metadata: ["alert": "RCV-OWNER-MOVED", "store": "\(state.store.rawValue)"])
        }
    }
}
