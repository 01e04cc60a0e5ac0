import Crypto
import Foundation
import WorkersQueue
import WorkersHTTP
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// The Apple half of issue 12, each job run through a real worker (`SettlingWorker`: ledger check, retries, dead
/// set) against PostgreSQL, Redis (database 50) and the Apple fake answering as Apple documents.
final class ReceiptsAppleContractTests: ReceiptsTestCase {
    var runners: [SettlingWorker] = []

    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "receipts_test", fakes: .own([.apple])) }

    override func tearDown() {
        runners.forEach { $0.shutdown() }
        super.tearDown()
    }

    // MARK: Set-up

    func configuration(roots: [[UInt8]] = [AppleRootCertificates.appleRootCAG3]) -> ReceiptsConfiguration {
        appleConfiguration(roots: roots)
    }

    /// App Store Server API mode; the fake checks our JWT with the fixture key.
    func serverAPIConfiguration(_ signer: TestAppleSigner) throws -> ReceiptsConfiguration {
        try fakes.configure(.apple, ["api_jwt": ["issuer": "issuer-1", "key_id": "KEY123", "bundle_id": "com.example",
                                                 "public_key_pem": try P256KeyPEM.publicKeyPEM(fromPrivate: try AppleFixtures.signingKeyPEM())]])
        var c = configuration(roots: [signer.rootDER])
        c.appleValidation = .serverAPI
        c.appleCredentials = AppStoreServerAPICredentials(issuerID: "issuer-1", keyID: "KEY123",
                                                          privateKey: Secret(try AppleFixtures.signingKeyPEM()))
        return c
    }

    func runner(_ c: ReceiptsConfiguration) throws -> SettlingWorker {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: c, http: http))
        let r = try SettlingWorker(redisDatabase: 50, registry: registry, database: fixture.jobDatabase)
        runners.append(r)
        return r
    }

    func validateArgs(user: UUID, receipt: String? = "unused", transaction: String, original: String? = nil,
                      signedTransaction: String? = nil) -> String {
        var a: [String: Any] = ["user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString,
                                "store": "apple", "transaction_id": transaction]
        if let receipt { a["receipt_data"] = receipt }
        if let original { a["original_transaction_id"] = original }
        if let signedTransaction { a["signed_transaction"] = signedTransaction }
        return jsonString([a])
    }

    /// A signed transaction of subscription `original` (the same JWS the device holds as `jwsRepresentation`).
    func signedTransaction(_ signer: TestAppleSigner, id: String, original: String, accountToken: UUID? = nil,
                           environment: String = "Production") throws -> String {
        try signer.subscriptionTransaction(id: id, original: original, accountToken: accountToken, environment: environment)
    }

    /// Registers transaction `id` with the fake (Get Transaction Info + Get All Subscription Statuses) and returns
    /// its signed transaction.
    @discardableResult
    func registerTransaction(_ signer: TestAppleSigner, id: String, accountToken: UUID? = nil) throws -> String {
        let jws = try signedTransaction(signer, id: id, original: id, accountToken: accountToken)
        try signer.register(jws, id: id, with: fakes)
        return jws
    }

    func subscriptionOwner(key: String) throws -> String? {
        try db.string("SELECT user_id::text AS v FROM subscriptions WHERE store_transaction_id = $1", [key])
    }

    // MARK: 2. Apple's notification body as Apple sends it

    func testNotificationBodyIsTakenExactlyAsApplePostsIt() throws {
        let signer = try TestAppleSigner()
        let r = try runner(configuration(roots: [try AppleFixtures.testCA(), signer.rootDER]))
        // Apple's own test notification (signed under Apple's test CA), in the body Apple POSTs: {"signedPayload": …}.
        let appleBody = #"{"signedPayload":""# + (try AppleFixtures.text("mock_signed_data/testNotification")) + #""}"#
        XCTAssertAck(try r.run("AppStoreNotificationJob", "[\(appleBody)]"))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE notification_type = 'TEST' AND outcome = 'ignored'"), 1)

        // A renewal in Apple's body changes the subscription.
        let user = try db.newUser()
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "receipt-n", "status": 0,
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "1000000001",
                                     "original_transaction_id": "1000000001",
                                     "expires_date_ms": String(TestAppleSigner.ms(Date().addingTimeInterval(5 * 86400)))]]])
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "receipt-n", transaction: "1000000001")))
        func renewal(_ uuid: String, days: Double) throws -> String {
            let now = Date()
            let tx = try signer.sign(["transactionId": "1000000002", "originalTransactionId": "1000000001", "bundleId": "com.example",
                                      "productId": ReceiptsDatabase.appleProduct, "environment": "Sandbox",
                                      "purchaseDate": TestAppleSigner.ms(now), "expiresDate": TestAppleSigner.ms(now.addingTimeInterval(days * 86400)),
                                      "signedDate": TestAppleSigner.ms(now)])
            return try signer.sign(["notificationType": "DID_RENEW", "notificationUUID": uuid, "version": "2.0",
                                    "signedDate": TestAppleSigner.ms(now),
                                    "data": ["bundleId": "com.example", "environment": "Sandbox", "appAppleId": 1234,
                                             "signedTransactionInfo": tx, "status": 1]])
        }
        let body = #"{"signedPayload":""# + (try renewal("22222222-2222-2222-2222-222222222222", days: 40)) + #""}"#
        XCTAssertAck(try r.run("AppStoreNotificationJob", "[\(body)]"))
        XCTAssertEqual(try db.events(key: "1000000001"), ["subscription_started", "renewed"])
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = '1000000001' AND end_date > now() + interval '30 days'
            """), 1)

        // The earlier key stays accepted as an alias; a body with neither key is bad input, dead at once.
        let alias = jsonString([["signed_payload": try renewal("33333333-3333-3333-3333-333333333333", days: 50)]])
        XCTAssertAck(try r.run("AppStoreNotificationJob", alias))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'applied'"), 2)
        Failure.dead(try r.run("AppStoreNotificationJob", #"[{"payload":"a.b.c"}]"#), errorClass: "BadInput",
                     messagePrefix: #"arguments do not fit AppStoreNotificationJob: args[0]: missing key "signedPayload""#)
    }

    // MARK: 3. A purchase belongs to the user who made it (App Store Server API mode)

    func testClaimOnAnotherUsersTransactionIsRefusedWithRCVOwner() throws {
        let signer = try TestAppleSigner()
        let r = try runner(try serverAPIConfiguration(signer))
        let owner = try db.newUser(), thief = try db.newUser()
        // The app set appAccountToken = the owner's user id at purchase; Apple signs it into the transaction.
        let ownersJWS = try registerTransaction(signer, id: "70000001", accountToken: owner)

        // A bare transaction id claimed by someone else: refused, nothing granted, even though it comes first.
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: thief, transaction: "70000001")),
                     errorClass: "PermanentFailure", messagePrefix: "RCV-OWNER: the transaction's appAccountToken names another user")
        // Replaying the owner's device-signed transaction does not help either.
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: thief, transaction: "70000001", signedTransaction: ownersJWS)),
                     errorClass: "PermanentFailure", messagePrefix: "RCV-OWNER: the transaction's appAccountToken names another user")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
        XCTAssertEqual(try db.userStatus(thief), "free")
        XCTAssertEqual(r.logs.securityAlerts, ["RCV-OWNER", "RCV-OWNER"])

        // The owner's claim, bare id or with the device's JWS, is granted: the subscription is theirs.
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: owner, transaction: "70000001")))
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: owner, receipt: nil, transaction: "70000001",
                                                                    signedTransaction: ownersJWS)))
        XCTAssertEqual(try subscriptionOwner(key: "70000001"), owner.uuidString.lowercased())
        XCTAssertEqual(try db.userStatus(owner), "premium")
        XCTAssertEqual(try db.events(key: "70000001"), ["subscription_started"])
    }

    func testVerifyReceiptEntryWithAnotherUsersAccountTokenIsRefused() throws {
        let owner = try db.newUser(), thief = try db.newUser()
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "owners-receipt", "status": 0,
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "75000001",
                                     "original_transaction_id": "75000001", "app_account_token": owner.uuidString.lowercased(),
                                     "expires_date_ms": String(TestAppleSigner.ms(Date().addingTimeInterval(20 * 86400)))]]])
        let r = try runner(configuration())
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: thief, receipt: "owners-receipt", transaction: "75000001")),
                     errorClass: "PermanentFailure", messagePrefix: "RCV-OWNER: the receipt's app_account_token names another user")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: owner, receipt: "owners-receipt", transaction: "75000001")))
        XCTAssertEqual(try subscriptionOwner(key: "75000001"), owner.uuidString.lowercased())
    }

    func testDeviceSignedTransactionBindsAPurchaseWithoutToken() throws {
        let signer = try TestAppleSigner(), stranger = try TestAppleSigner()
        let r = try runner(try serverAPIConfiguration(signer))
        let buyer = try db.newUser(), other = try db.newUser()
        let devices = try registerTransaction(signer, id: "71000001")   // no appAccountToken
        try registerTransaction(signer, id: "71000002")

        // Proofs that do not verify, or are about another purchase, are refused before the purchase is looked up.
        let forged = try signedTransaction(stranger, id: "71000001", original: "71000001")
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: buyer, transaction: "71000001", signedTransaction: forged)),
                     errorClass: "PermanentFailure", messagePrefix: "RCV-JWS: the device's signed transaction: the x5c chain is not trusted")
        let otherPurchase = try signedTransaction(signer, id: "71000002", original: "71000002")
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: buyer, transaction: "71000001", signedTransaction: otherPurchase)),
                     errorClass: "PermanentFailure",
                     messagePrefix: "RCV-TXN: the device's signed transaction is transaction 71000002, not [transaction_id]")
        let sandboxCopy = try signedTransaction(signer, id: "71000001", original: "71000001", environment: "Sandbox")
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: buyer, transaction: "71000001", signedTransaction: sandboxCopy)),
                     errorClass: "PermanentFailure",
                     messagePrefix: "RCV-JWS: the device's signed transaction: signed data is from environment Sandbox, accepted: Production")
        XCTAssertEqual(try fakes.requests(.apple, path: "/inApps/v1/transactions/71000001").count, 1, "only the sandbox copy's check asked Apple")

        // The device's own signed transaction binds it: granted to the buyer.
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: buyer, receipt: nil, transaction: "71000001",
                                                                    signedTransaction: devices)))
        XCTAssertEqual(try subscriptionOwner(key: "71000001"), buyer.uuidString.lowercased())
        XCTAssertEqual(try db.userStatus(buyer), "premium")
        // Someone else with a copy of it: the subscription is already the buyer's.
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: other, transaction: "71000001", signedTransaction: devices)),
                     errorClass: "PermanentFailure", messagePrefix: "RCV-OWNER: the store transaction already belongs to another user")
        XCTAssertEqual(try db.userStatus(other), "free")
    }

    func testBareTransactionIDWithoutProofIsRefused() throws {
        let signer = try TestAppleSigner()
        let r = try runner(try serverAPIConfiguration(signer))
        let user = try db.newUser()
        try registerTransaction(signer, id: "72000001")   // no appAccountToken
        // Neither receipt_data nor signed_transaction: not even a request (the arguments name no proof).
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: nil, transaction: "72000001")),
                     errorClass: "BadInput", messagePrefix: "arguments do not fit ValidateReceiptJob")
        // receipt_data that is no app receipt proves nothing either: refused with the reason, before Apple is asked
        // about anything but the transaction. (A verified receipt holding the id is proof: ReceiptsAppReceiptTests.)
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "unused", transaction: "72000001")),
                     errorClass: "PermanentFailure",
                     messagePrefix: "RCV-RECEIPT: the app receipt is malformed: receipt_data is not base64")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM iap_receipts WHERE transaction_id = '72000001' AND NOT validated AND validation_error LIKE 'RCV-RECEIPT:%'
            """), 1)
    }

    // MARK: The App Store Server API answers as Apple does (fake) and the job reads them right

    func testUnknownTransactionAndRateLimitAsAppleAnswersThem() throws {
        let signer = try TestAppleSigner()
        let r = try runner(try serverAPIConfiguration(signer))
        let user = try db.newUser()
        // 404 TransactionIdNotFoundError (4040010) in production, then in sandbox.
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: user, transaction: "73000001")),
                     errorClass: "PermanentFailure",
                     messagePrefix: "RCV-NOT-FOUND: unknown transaction: Sandbox: Transaction id not found. (4040010)")
        XCTAssertEqual(try fakes.requests(.apple).map(\.path),
                       ["/inApps/v1/transactions/73000001", "/sandbox/inApps/v1/transactions/73000001"])
        // 429 RateLimitExceededError (4290000), no Retry-After: retried after the client's 60 s default.
        try registerTransaction(signer, id: "73000002", accountToken: user)
        try fakes.configure(.apple, ["rate_limited": 1])
        Failure.retry(try r.run("ValidateReceiptJob", validateArgs(user: user, transaction: "73000002")),
                      errorClass: "RetryLater", messagePrefix: "App Store Server API (Production) rate limited (HTTP 429) (retry after 60 s)")
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: user, transaction: "73000002")))
        XCTAssertEqual(try db.userStatus(user), "premium")
    }

    // MARK: 7. verifyReceipt 21004 / 21000 are our faults

    func testSharedSecretMismatchAndUnreadableRequestAreRetriedConfigurationAlerts() throws {
        try fakes.configure(.apple, ["shared_secret": "the-apps-secret"])
        let user = try db.newUser()
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "genuine", "status": 0,
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "74000001",
                                     "original_transaction_id": "74000001",
                                     "expires_date_ms": String(TestAppleSigner.ms(Date().addingTimeInterval(20 * 86400)))]]])
        let r = try runner(configuration())   // sends "shh": not the app's secret
        let jid = Identifiers.jid()
        Failure.retry(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "genuine", transaction: "74000001"), jid: jid),
                      errorClass: Failure.className(of: AppleVerifyReceiptRequestRefused.self),
                      messagePrefix: "RCV-CONFIG-21004: Apple verifyReceipt refused our request: the shared secret RECEIPTS_APPLE_SHARED_SECRET does not match")
        Failure.retry(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "genuine", transaction: "74000001"),
                                jid: jid, retryCount: 0),
                      errorClass: Failure.className(of: AppleVerifyReceiptRequestRefused.self), messagePrefix: "RCV-CONFIG-21004")
        try fakes.configure(.apple, ["shared_secret": NSNull()])
        Failure.retry(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "status:21000", transaction: "74000002")),
                      errorClass: Failure.className(of: AppleVerifyReceiptRequestRefused.self),
                      messagePrefix: "RCV-CONFIG-21000: Apple verifyReceipt refused our request: the App Store could not read our request")
        // Nothing is held against the user: no receipt recorded invalid, no security alert; one configuration alert each.
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM iap_receipts"), 0)
        XCTAssertEqual(r.logs.securityAlerts, [])
        XCTAssertEqual(r.logs.alerts, ["RCV-CONFIG-21004", "RCV-CONFIG-21004", "RCV-CONFIG-21000"])
        XCTAssertEqual(try db.userStatus(user), "free")

        // Once the secret is right, the same job's next retry grants the purchase.
        try fakes.configure(.apple, ["shared_secret": "shh"])
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "genuine", transaction: "74000001"),
                                 jid: jid, retryCount: 1))
        XCTAssertEqual(try db.userStatus(user), "premium")
    }

    // MARK: 8. StoreKit 1 restores and older renewals

    func testRestoreAndOlderRenewalMatchTheirSubscriptionWithoutAlert() throws {
        let user = try db.newUser()
        let ms = { (d: Date) in String(TestAppleSigner.ms(d)) }
        // With exclude-old-transactions only the latest renewal (80000003) of subscription 80000001 is listed.
        let latest: [String: Any] = ["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "80000003",
                                     "original_transaction_id": "80000001",
                                     "purchase_date_ms": ms(Date().addingTimeInterval(-86400)),
                                     "expires_date_ms": ms(Date().addingTimeInterval(29 * 86400))]
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "restored", "status": 0, "latest_receipt_info": [latest], "in_app": [latest],
            "pending_renewal_info": [["original_transaction_id": "80000001", "auto_renew_status": "1"]]])
        let r = try runner(configuration())
        // A StoreKit 1 restore: a new transaction id, with its original's id.
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "restored", transaction: "80000099",
                                                                    original: "80000001")))
        // An older renewal's id, not in the receipt any more.
        XCTAssertAck(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "restored", transaction: "80000002")))
        XCTAssertEqual(try db.subscriptionStatus(key: "80000001"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.events(key: "80000001"), ["subscription_started"])
        XCTAssertEqual(r.logs.securityAlerts, [])

        // A receipt with no subscription to the plan's product still proves nothing for an unknown id.
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "other-product", "status": 0,
            "latest_receipt_info": [latest.merging(["product_id": "com.example.other", "transaction_id": "81000001",
                                                    "original_transaction_id": "81000001"]) { $1 }]])
        Failure.dead(try r.run("ValidateReceiptJob", validateArgs(user: user, receipt: "other-product", transaction: "81000009")),
                     errorClass: "PermanentFailure", messagePrefix: "RCV-TXN: transaction [transaction_id] is not in the receipt")
        XCTAssertEqual(r.logs.securityAlerts, ["RCV-TXN"])
    }

    // MARK: 9. appAppleId is required for Production signed data

    func testReceiptsAreaRefusesToStartForProductionWithoutAppAppleID() throws {
        let problem = "RECEIPTS_APPLE_APP_APPLE_ID: required when Production signed data is accepted"
        var registry = JobRegistry()
        let redisPool = try RedisPool(url: TestServices.redisURL(db: 50), maxConnections: 2)
        let statuses = DomainJobs.register(into: &registry, environment: ["RECEIPTS_APPLE_BUNDLE_ID": "com.example"],
                                           redis: redisPool, http: http)
        let receipts = try XCTUnwrap(statuses.first { $0.area == "receipts" })
        XCTAssertTrue(receipts.problem?.hasPrefix(problem) == true, receipts.problem ?? "started")
        // Its jobs wait in retry with the reason (never run unverified, never dead).
        let r = try SettlingWorker(redisDatabase: 50, registry: registry, database: fixture.jobDatabase)
        runners.append(r)
        let body = #"[{"signedPayload":""# + (try AppleFixtures.text("mock_signed_data/testNotification")) + #""}]"#
        Failure.retry(try r.run("AppStoreNotificationJob", body),
                      errorClass: Failure.className(of: UnconfiguredJob.NotConfigured.self), messagePrefix: "the receipts jobs are not configured on this worker: " + problem)

        // Built in code, the same configuration is refused too; with the id, or Sandbox only, it starts.
        var c = configuration()
        c.appleAppAppleID = nil
        XCTAssertThrowsError(try ReceiptServices(configuration: c, http: http)) { XCTAssertTrue("\($0)".hasPrefix(problem), "\($0)") }
        XCTAssertNil(try ReceiptsConfiguration.fromEnvironment(["RECEIPTS_APPLE_BUNDLE_ID": "com.example",
                                                                 "RECEIPTS_APPLE_APP_APPLE_ID": "1234"]).appleSignedDataProblem)
        XCTAssertNil(try ReceiptsConfiguration.fromEnvironment(["RECEIPTS_APPLE_BUNDLE_ID": "com.example",
                                                                 "RECEIPTS_APPLE_ENVIRONMENTS": "Sandbox"]).appleSignedDataProblem)
    }

    /// A configuration that cannot be turned into clients (an unparsable root certificate): the receipt classes
    /// are registered as stand-ins (`UnusableAreaJob`) whose every run is retried with the reason, never run and
    /// never dead; a payload whose arguments can never decode still goes to dead as bad input.
    func testUnusableReceiptsConfigurationLeavesItsJobsRetryingWithTheReason() throws {
        var c = appleConfiguration()
        c.appleRootCertificates = [[0x01, 0x02, 0x03]]
        XCTAssertThrowsError(try ReceiptServices(configuration: c, http: http))
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, configuration: c, http: http)
        XCTAssertEqual(registry.classNames, ReceiptJobs.classNames.sorted())
        let driver = fixture.driver(registry)
        for className in [SubscriptionExpirySweepJob.className, GoogleAcknowledgementSweepJob.className] {
            Failure.retry(try driver.deliver(className, []), errorClass: Failure.className(of: StoreUnavailable.self),
                          messagePrefix: "receipts temporarily unavailable: receipts configuration unusable: ")
        }
        Failure.dead(try driver.deliver(ValidateReceiptJob.className, [42]), errorClass: "BadInput",
                     messagePrefix: "arguments do not fit BrokenReceiptJob: ")
    }
}
