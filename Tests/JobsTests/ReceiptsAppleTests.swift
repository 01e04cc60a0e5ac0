import Crypto
import Foundation
import WorkersHTTP
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// ValidateReceiptJob (Apple, both APIs) and AppStoreNotificationJob against PostgreSQL and the Apple fake.
final class ReceiptsAppleTests: ReceiptsTestCase {
    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "receipts_test", fakes: .own([.apple])) }

    func configuration() -> ReceiptsConfiguration { appleConfiguration() }

    /// Jobs go through the worker's `JobRunner` (ledger check, retry and dead rules): see `JobRunnerDriver`.
    func driver(_ c: ReceiptsConfiguration) throws -> JobRunnerDriver {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: c, http: http))
        return fixture.driver(registry)
    }

    func appleArgs(user: UUID, receipt: String, transaction: String) -> String {
        jsonString([["user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString,
                     "store": "apple", "receipt_data": receipt, "transaction_id": transaction]])
    }

    func register(receipt: String, transaction: String, product: String = ReceiptsDatabase.appleProduct,
                  environment: String = "Production", expires: Date = Date().addingTimeInterval(20 * 86400),
                  trial: Bool = false) throws {
        let ms = { (d: Date) in String(Int64(d.timeIntervalSince1970 * 1000)) }
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": receipt, "status": 0, "environment": environment,
            "latest_receipt_info": [["product_id": product, "transaction_id": transaction, "original_transaction_id": transaction,
                                     "purchase_date_ms": ms(Date().addingTimeInterval(-86400)), "expires_date_ms": ms(expires),
                                     "is_trial_period": trial ? "true" : "false"]],
            "pending_renewal_info": [["original_transaction_id": transaction, "auto_renew_status": "1"]],
        ])
    }

    // MARK: verifyReceipt

    func testVerifyReceiptHappyPathTwiceGivesOneSubscriptionOneEvent() throws {
        try fakes.configure(.apple, ["shared_secret": "shh"])
        let user = try db.newUser()
        try register(receipt: "receipt-1", transaction: "1000000001", trial: true)
        let d = try driver(configuration())
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-1", transaction: "1000000001"))
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-1", transaction: "1000000001"))  // another jid
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 1)
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "trial")
        XCTAssertEqual(try db.events(key: "1000000001"), ["trial_started"])
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM users WHERE subscription_id IS NOT NULL"), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM iap_receipts WHERE validated AND transaction_id = '1000000001'"), 1)
        let request = try XCTUnwrap(fakes.requests(.apple, path: "/verifyReceipt").first)
        XCTAssertTrue(request.body.contains(#""exclude-old-transactions":true"#))
        XCTAssertTrue(request.body.contains(#""password":"shh""#))
    }

    func testSameDeliveryTwiceIsSkippedByTheLedger() throws {
        let user = try db.newUser()
        try register(receipt: "receipt-2", transaction: "1000000002")
        let d = try driver(configuration())
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-2", transaction: "1000000002"), jid: "aaaaaaaaaaaaaaaaaaaaaaaa")
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-2", transaction: "1000000002"), jid: "aaaaaaaaaaaaaaaaaaaaaaaa")
        XCTAssertEqual(try db.events(key: "1000000002"), ["subscription_started"])
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM job_ledger"), 1)
    }

    func testSandboxReceiptIsResentToSandbox() throws {
        let user = try db.newUser()
        try register(receipt: "sandbox-receipt", transaction: "1000000003", environment: "Sandbox")
        try driver(configuration()).run("ValidateReceiptJob", appleArgs(user: user, receipt: "sandbox-receipt", transaction: "1000000003"))
        XCTAssertEqual(try fakes.requests(.apple).map(\.path), ["/verifyReceipt", "/sandbox/verifyReceipt"])
        XCTAssertEqual(try db.userStatus(user), "premium")
    }

    func testProductionReceiptSentToSandboxGoesBackToProduction() throws {
        let user = try db.newUser()
        try register(receipt: "prod-receipt", transaction: "1000000004", environment: "Production")
        // Production wrongly says "sandbox receipt" once; sandbox answers 21008; production is asked again.
        try fakes.script(.apple, ["match": ["path": "/verifyReceipt"], "json": ["status": 21007]])
        try driver(configuration()).run("ValidateReceiptJob", appleArgs(user: user, receipt: "prod-receipt", transaction: "1000000004"))
        XCTAssertEqual(try fakes.requests(.apple).map(\.path), ["/verifyReceipt", "/sandbox/verifyReceipt", "/verifyReceipt"])
        XCTAssertEqual(try db.userStatus(user), "premium")
        // Bouncing forever is a temporary fault.
        try fakes.script(.apple, ["match": ["path": "/verifyReceipt"], "json": ["status": 21007], "times": 5])
        try register(receipt: "bounce", transaction: "1000000005", environment: "Production")
        XCTAssertThrowsError(try driver(configuration()).run("ValidateReceiptJob",
                                                             appleArgs(user: user, receipt: "bounce", transaction: "1000000005"))) {
            Failure.isUnavailable($0, service: "Apple verifyReceipt (production)", containing: "bouncing between environments")
        }
    }

    func testPermanentStatusRecordsInvalidReceiptWithoutRetry() throws {
        let user = try db.newUser()
        let d = try driver(configuration())
        for status in [21003, 21010] {  // 21004 and 21000 are our faults: ReceiptsAppleContractTests
            let tx = "20000\(status)"
            XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "status:\(status)", transaction: tx))) {
                Failure.isPermanent($0, containing: "RCV-\(status)")
            }
            XCTAssertEqual(try db.scalar("""
                SELECT count(*) FROM iap_receipts WHERE transaction_id = $1 AND NOT validated AND validation_status = $2
                  AND validation_error LIKE 'RCV-%'
                """, [tx, status]), 1)
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
        XCTAssertEqual(try db.userStatus(user), "free")
    }

    func testTemporaryStatusesAndTransportFailuresRetry() throws {
        let user = try db.newUser()
        let d = try driver(configuration())
        for receipt in ["status:21002", "status:21005", "status:21009", "status:21100"] {
            XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: receipt, transaction: "30000001"))) {
                Failure.isUnavailable($0, service: "Apple verifyReceipt (production)", containing: "(\(receipt.dropFirst("status:".count))")
            }
        }
        try fakes.admin(.apple, "POST", "apple/receipts", json: ["receipt-data": "r199", "status": 21199, "is-retryable": 0])
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "r199", transaction: "30000002"))) {
            Failure.isPermanent($0, containing: "RCV-21199")
        }
        try register(receipt: "flaky", transaction: "30000003")
        let scripts: [([String: Any], String)] = [
            (["status": 503], "HTTP 503"),
            (["malformed_json": true], "answer is not JSON"),
            (["hang": true, "delay": 4], "HTTP timeout"),
            (["close": true], "HTTP transport"),
        ]
        for (script, reason) in scripts {
            try fakes.script(.apple, script.merging(["match": ["path": "/verifyReceipt"]]) { a, _ in a })
            XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "flaky", transaction: "30000003"))) {
                Failure.isUnavailable($0, service: "Apple verifyReceipt (production)", containing: reason)
            }
        }
        try fakes.script(.apple, ["match": ["path": "/verifyReceipt"], "status": 429, "retry_after": 42, "json": ["status": 0]])
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "flaky", transaction: "30000003"))) {
            Failure.isRetryAfter($0, seconds: 42)
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM iap_receipts WHERE validated"), 0)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM iap_receipts"), 1, "only the non-retryable 21199")
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "flaky", transaction: "30000003"))
        XCTAssertEqual(try db.userStatus(user), "premium")
    }

    func testWrongProductAndUnknownTransactionAreInvalid() throws {
        let user = try db.newUser()
        let d = try driver(configuration())
        try register(receipt: "other-product", transaction: "40000001", product: "com.example.other")
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "other-product", transaction: "40000001"))) {
            Failure.isPermanent($0, containing: "RCV-PRODUCT")
        }
        // A transaction that is not in the receipt, and no subscription to the plan's product there either.
        try register(receipt: "r-40000002", transaction: "40000002", product: "com.example.other")
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "r-40000002", transaction: "49999999"))) {
            Failure.isPermanent($0, containing: "RCV-TXN")
        }
        XCTAssertEqual(try db.userStatus(user), "free")
    }

    func testReceiptOfAnotherUserIsRefused() throws {
        let owner = try db.newUser(), thief = try db.newUser()
        try register(receipt: "shared", transaction: "50000001")
        let d = try driver(configuration())
        try d.run("ValidateReceiptJob", appleArgs(user: owner, receipt: "shared", transaction: "50000001"))
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: thief, receipt: "shared", transaction: "50000001"))) {
            Failure.isPermanent($0, containing: "RCV-OWNER")
        }
        XCTAssertEqual(try db.userStatus(thief), "free")
        XCTAssertEqual(try db.userStatus(owner), "premium")
    }

    /// L2: the same Apple ID resubscribes from another app account (B). Apple keeps the original transaction id; the
    /// latest renewal's `app_account_token` names B, so the subscription moves to B (alerted), A is free. A receipt
    /// whose latest renewal names A (or nobody) posted by B stays `RCV-OWNER`.
    func testLatestTransactionsAppAccountTokenMovesTheSubscription() throws {
        let a = try db.newUser(), b = try db.newUser()
        let ms = { (d: Date) in String(Int64(d.timeIntervalSince1970 * 1000)) }
        func register(_ receipt: String, renewals: [(String, Date, UUID)]) throws {
            try fakes.admin(.apple, "POST", "apple/receipts", json: [
                "receipt-data": receipt, "status": 0, "environment": "Production",
                "latest_receipt_info": renewals.map { id, expires, token in
                    ["product_id": ReceiptsDatabase.appleProduct, "transaction_id": id, "original_transaction_id": "70000001",
                     "purchase_date_ms": ms(expires.addingTimeInterval(-30 * 86400)), "expires_date_ms": ms(expires),
                     "app_account_token": token.uuidString.lowercased()]
                },
                "pending_renewal_info": [["original_transaction_id": "70000001", "auto_renew_status": "1"]],
            ])
        }
        let logs = CapturedLogs()
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: configuration(), http: http))
        let d = JobRunnerDriver(registry: registry, database: fixture.jobDatabase, logger: logs.logger(label: "l2"))
        try register("receipt-a", renewals: [("70000001", Date().addingTimeInterval(-5 * 86400), a)])
        try d.run("ValidateReceiptJob", appleArgs(user: a, receipt: "receipt-a", transaction: "70000001"))
        // A's account lapsed; B (same Apple ID) resubscribed: the new renewal names B.
        try register("receipt-b", renewals: [("70000001", Date().addingTimeInterval(-5 * 86400), a),
                                             ("70000002", Date().addingTimeInterval(25 * 86400), b)])
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", appleArgs(user: a, receipt: "receipt-b", transaction: "70000002"))) {
            Failure.isPermanent($0, containing: "RCV-OWNER")  // the latest renewal names B, not A
        }
        try d.run("ValidateReceiptJob", appleArgs(user: b, receipt: "receipt-b", transaction: "70000002"))
        XCTAssertEqual(try db.userStatus(b), "premium")
        XCTAssertEqual(try db.userStatus(a), "free")
        XCTAssertEqual(try db.string("SELECT user_id::text AS v FROM subscriptions WHERE store_transaction_id = '70000001'"),
                       b.uuidString.lowercased())
        XCTAssertEqual(try db.events(key: "70000001").filter { $0 == "ownership_moved" }.count, 1)
        XCTAssertEqual(logs.alerts.filter { $0 == "RCV-OWNER-MOVED" }.count, 1)
    }

    /// L7: `store_state_at` is the store's clock (verifyReceipt's `request_date_ms`), not the worker's. With the
    /// worker's clock 2 minutes fast, a REFUND Apple signed 1 minute ago still applies (it is newer than the
    /// validation in Apple's time), instead of being dropped as stale.
    func testValidationRecordsTheStoresClockSoALaterRefundIsNotStale() throws {
        let signer = try TestAppleSigner()
        var c = configuration()
        c.appleRootCertificates = [signer.rootDER]
        let d = try driver(c)
        let user = try db.newUser()
        let ms = { (d: Date) in String(Int64(d.timeIntervalSince1970 * 1000)) }
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "receipt-clock", "status": 0, "environment": "Production",
            "request_date_ms": Int64(Date().addingTimeInterval(-120).timeIntervalSince1970 * 1000),
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "1000000001",
                                     "original_transaction_id": "1000000001", "purchase_date_ms": ms(Date().addingTimeInterval(-86400)),
                                     "expires_date_ms": ms(Date().addingTimeInterval(20 * 86400))]],
            "pending_renewal_info": [["original_transaction_id": "1000000001", "auto_renew_status": "1"]],
        ])
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-clock", transaction: "1000000001"))
        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "REFUND", expires: Date().addingTimeInterval(20 * 86400),
                                                                  status: 5, revoked: true, signedAt: Date().addingTimeInterval(-60),
                                                                  transactionID: "1000000001"))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "refunded")
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'stale'"), 0)
    }

    func testBadInputIsRejectedBeforeAnyCall() throws {
        let user = try db.newUser()
        let d = try driver(configuration())
        let base: [String: Any] = ["user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString,
                                   "store": "apple", "receipt_data": "x", "transaction_id": "1"]
        let cases: [([String: Any], String)] = [
            (base.merging(["store": "amazon"]) { $1 }, "store must be"),
            (base.merging(["user_id": "nope"]) { $1 }, "user_id must be a UUID"),
            (base.filter { $0.key != "receipt_data" }, "receipt_data"),
            (base.merging(["transaction_id": "abc"]) { $1 }, "transaction_id"),
            (base.merging(["plan_id": UUID().uuidString]) { $1 }, "does not exist"),
            (base.merging(["user_id": UUID().uuidString]) { $1 }, "does not exist"),
        ]
        for (args, reason) in cases {
            XCTAssertThrowsError(try d.run("ValidateReceiptJob", jsonString([args]))) { Failure.isPermanent($0, containing: reason) }
        }
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", "[]")) { Failure.isPermanent($0, containing: "exactly one") }
        XCTAssertEqual(try fakes.requests(.apple).count, 0)
    }

    // MARK: App Store Server API

    func serverAPIConfiguration(root: [UInt8]) throws -> ReceiptsConfiguration {
        var c = configuration()
        c.appleValidation = .serverAPI
        c.appleCredentials = AppStoreServerAPICredentials(issuerID: "issuer-1", keyID: "KEY123",
                                                          privateKey: Secret(try AppleFixtures.signingKeyPEM()))
        c.appleRootCertificates = [root]
        return c
    }

    func testServerAPIValidationVerifiesSignedTransactionsAndStatuses() throws {
        let signer = try TestAppleSigner()
        let publicKey = try P256KeyPEM.publicKeyPEM(fromPrivate: try AppleFixtures.signingKeyPEM())
        try fakes.configure(.apple, ["api_jwt": ["issuer": "issuer-1", "key_id": "KEY123", "bundle_id": "com.example",
                                                 "public_key_pem": publicKey]])
        let now = Date()
        let user = try db.newUser()
        func tx(_ id: String, expires: Date) -> [String: Any] {
            ["transactionId": id, "originalTransactionId": "60000001", "bundleId": "com.example",
             "appAccountToken": user.uuidString.lowercased(),
             "productId": ReceiptsDatabase.appleProduct, "purchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-86400)),
             "originalPurchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-40 * 86400)),
             "expiresDate": TestAppleSigner.ms(expires), "environment": "Sandbox", "signedDate": TestAppleSigner.ms(now)]
        }
        try fakes.admin(.apple, "POST", "apple/transactions", json: ["transaction_id": "60000001", "status": 404])
        // Production does not know it: the client asks sandbox (same fake, /sandbox prefix answers the same data).
        try fakes.script(.apple, ["match": ["path": "/inApps/v1/transactions/60000001"], "status": 404,
                                  "json": ["errorCode": 4040010, "errorMessage": "Transaction id not found."]])
        try fakes.admin(.apple, "POST", "apple/transactions", json: [
            "transaction_id": "60000001", "signedTransactionInfo": try signer.sign(tx("60000001", expires: now.addingTimeInterval(-86400)))])
        try fakes.admin(.apple, "POST", "apple/subscriptions", json: ["transaction_id": "60000001", "response": [
            "environment": "Sandbox", "bundleId": "com.example",
            "data": [["subscriptionGroupIdentifier": "g", "lastTransactions": [[
                "originalTransactionId": "60000001", "status": 1,
                "signedTransactionInfo": try signer.sign(tx("60000009", expires: now.addingTimeInterval(25 * 86400))),
                "signedRenewalInfo": try signer.sign(["originalTransactionId": "60000001", "autoRenewStatus": 1,
                                                      "environment": "Sandbox", "signedDate": TestAppleSigner.ms(now)]),
            ]]]]]])
        // An "expired token" answer once: the client signs a fresh JWT and asks again.
        try fakes.script(.apple, ["match": ["path": "/sandbox/inApps/v1/transactions/60000001"], "status": 401,
                                  "body": ""])
        try driver(try serverAPIConfiguration(root: signer.rootDER))
            .run("ValidateReceiptJob", appleArgs(user: user, receipt: "unused", transaction: "60000001"))
        XCTAssertEqual(try db.subscriptionStatus(key: "60000001"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = '60000001' AND end_date > now() + interval '20 days'
            """), 1)
        let paths = try fakes.requests(.apple).map(\.path)
        XCTAssertEqual(paths, ["/inApps/v1/transactions/60000001", "/sandbox/inApps/v1/transactions/60000001",
                               "/sandbox/inApps/v1/transactions/60000001", "/sandbox/inApps/v1/subscriptions/60000001"])
    }

    /// With Server API credentials the App Store's statuses decide: the expiry sweep asks Get All Subscription
    /// Statuses before expiring a renewing row (L1), and a REFUND without `data.status` asks it whether the
    /// subscription is still active (N3) — here it is, so the refunded transaction is a past one even though its
    /// expiry alone would have looked like the current period's.
    func testServerAPIStatusesDecideTheSweepAndARefundWithoutStatus() throws {
        let signer = try TestAppleSigner()
        let now = Date()
        let user = try db.newUser()
        func tx(_ id: String, expires: Date, revoked: Bool = false) -> [String: Any] {
            var t: [String: Any] = ["transactionId": id, "originalTransactionId": "1000000001", "bundleId": "com.example",
                                    "appAccountToken": user.uuidString.lowercased(), "productId": ReceiptsDatabase.appleProduct,
                                    "purchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-86400)),
                                    "expiresDate": TestAppleSigner.ms(expires), "environment": "Sandbox",
                                    "signedDate": TestAppleSigner.ms(now)]
            if revoked { t["revocationDate"] = TestAppleSigner.ms(now) }
            return t
        }
        // Production does not know the sandbox subscription (404 4040010, as Apple answers), sandbox does.
        for path in ["/inApps/v1/transactions/1000000001", "/inApps/v1/subscriptions/1000000001"] {
            try fakes.script(.apple, ["match": ["path": path], "status": 404, "times": 5,
                                      "json": ["errorCode": 4040010, "errorMessage": "Transaction id not found."]])
        }
        try fakes.admin(.apple, "POST", "apple/transactions", json: [
            "transaction_id": "1000000001", "signedTransactionInfo": try signer.sign(tx("1000000001", expires: now.addingTimeInterval(5 * 86400)))])
        try fakes.admin(.apple, "POST", "apple/subscriptions", json: ["transaction_id": "1000000001", "response": [
            "environment": "Sandbox", "bundleId": "com.example",
            "data": [["subscriptionGroupIdentifier": "g", "lastTransactions": [[
                "originalTransactionId": "1000000001", "status": 1,
                "signedTransactionInfo": try signer.sign(tx("1000000009", expires: now.addingTimeInterval(25 * 86400))),
                "signedRenewalInfo": try signer.sign(["originalTransactionId": "1000000001", "autoRenewStatus": 1,
                                                      "environment": "Sandbox", "signedDate": TestAppleSigner.ms(now)]),
            ]]]]]])
        let c = try serverAPIConfiguration(root: signer.rootDER)
        let d = try driver(c)
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "unused", transaction: "1000000001"))
        XCTAssertEqual(try db.userStatus(user), "premium")

        // A lost DID_RENEW: our row ended 20 days ago (Apple's 16-day window over). The sweep asks Apple: renewed.
        try db.pool.withConnection { c in
            _ = try c.execute("UPDATE subscriptions SET end_date = now() - interval '20 days' WHERE store_transaction_id = '1000000001'")
        }
        try d.run("SubscriptionExpirySweepJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = '1000000001' AND end_date > now() + interval '20 days'
            """), 1)

        // A REFUND without data.status of a transaction whose expiry is past the period we hold: Apple's status (1,
        // re-read) says the subscription is active, so it is a past transaction's refund.
        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "REFUND", expires: now.addingTimeInterval(40 * 86400),
                                                                  revoked: true, transactionID: "1000000002"))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertTrue(try fakes.requests(.apple).map(\.path).contains("/sandbox/inApps/v1/subscriptions/1000000001"))
    }

    func testServerAPIRejectsDataSignedUnderAnotherRoot() throws {
        let signer = try TestAppleSigner(), other = try TestAppleSigner()
        try fakes.admin(.apple, "POST", "apple/transactions", json: [
            "transaction_id": "61000001",
            "signedTransactionInfo": try other.sign(["transactionId": "61000001", "bundleId": "com.example",
                                                     "productId": ReceiptsDatabase.appleProduct, "environment": "Production"])])
        let user = try db.newUser()
        XCTAssertThrowsError(try driver(try serverAPIConfiguration(root: signer.rootDER))
            .run("ValidateReceiptJob", appleArgs(user: user, receipt: "unused", transaction: "61000001"))) {
            Failure.isPermanent($0, containing: "RCV-JWS")
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM iap_receipts WHERE validation_error LIKE 'RCV-JWS%'"), 1)
    }

    // MARK: Notifications

    /// Apple's transaction ids are numeric strings (developer.apple.com/documentation/appstoreserverapi/transactionid).
    static func numericTransactionID() -> String { String(UInt64.random(in: 2_000_000_000...9_999_999_999)) }

    func notificationArgs(_ signer: TestAppleSigner, type: String, subtype: String? = nil, uuid: String = UUID().uuidString,
                          expires: Date, status: Int? = nil, revoked: Bool = false, signedAt: Date = Date(),
                          transactionID: String = ReceiptsAppleTests.numericTransactionID(), revocationType: String? = nil,
                          revocationPercentage: Int? = nil, product: String = ReceiptsDatabase.appleProduct) throws -> String {
        var tx: [String: Any] = ["transactionId": transactionID, "originalTransactionId": "1000000001",
                                 "bundleId": "com.example", "productId": product,
                                 "purchaseDate": TestAppleSigner.ms(signedAt.addingTimeInterval(-86400)),
                                 "expiresDate": TestAppleSigner.ms(expires), "environment": "Sandbox",
                                 "signedDate": TestAppleSigner.ms(signedAt)]
        if revoked { tx["revocationDate"] = TestAppleSigner.ms(signedAt); tx["revocationReason"] = 0 }
        if let revocationType { tx["revocationType"] = revocationType }
        if let revocationPercentage { tx["revocationPercentage"] = revocationPercentage }
        var data: [String: Any] = ["bundleId": "com.example", "environment": "Sandbox", "appAppleId": 1234,
                                   "signedTransactionInfo": try signer.sign(tx)]
        if let status { data["status"] = status }
        var payload: [String: Any] = ["notificationType": type, "notificationUUID": uuid, "data": data, "version": "2.0",
                                      "signedDate": TestAppleSigner.ms(signedAt)]
        if let subtype { payload["subtype"] = subtype }
        return jsonString([["signedPayload": try signer.sign(payload)]])  // Apple's body (ResponseBodyV2)
    }

    func testNotificationsRenewExpireRefundOnceEach() throws {
        let signer = try TestAppleSigner()
        var c = configuration()
        c.appleRootCertificates = [signer.rootDER]
        let d = try driver(c)
        let user = try db.newUser()
        try register(receipt: "receipt-n", transaction: "1000000001")
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-n", transaction: "1000000001"))

        // The renewed period ends in 60 days; the notifications after it are about that period (its transaction).
        let renewedEnd = Date().addingTimeInterval(60 * 86400)
        let renewal = try notificationArgs(signer, type: "DID_RENEW", uuid: "11111111-1111-1111-1111-111111111111",
                                           expires: renewedEnd, status: 1)
        try d.run("AppStoreNotificationJob", renewal)
        try d.run("AppStoreNotificationJob", renewal)  // Apple resends: deduplicated by notificationUUID
        XCTAssertEqual(try db.events(key: "1000000001"), ["subscription_started", "renewed"])
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = '1000000001' AND end_date > now() + interval '50 days'
            """), 1)

        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD",
                                                                  expires: renewedEnd, status: 4))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "grace_period")
        XCTAssertEqual(try db.userStatus(user), "premium")

        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "EXPIRED", subtype: "VOLUNTARY",
                                                                  expires: renewedEnd, status: 2))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "expired")
        XCTAssertEqual(try db.userStatus(user), "free")

        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "REFUND", expires: renewedEnd, revoked: true))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "refunded")

        // A late, older notification (signed before the refund) does not bring the subscription back.
        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "DID_RENEW", expires: Date().addingTimeInterval(30 * 86400),
                                                                  status: 1, signedAt: Date().addingTimeInterval(-7200)))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "refunded")
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'stale'"), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications"), 5)
    }

    /// N3: Apple refunds per transaction. A refund of last month's renewal, while this month is paid and active
    /// (`data.status` 1, or no status and a refunded period that ended before the one we hold), is recorded as an
    /// event and leaves the subscription and the user's premium as they are; `data.status` 5 ends the period.
    func testRefundOfAPastRenewalKeepsTheCurrentPaidPeriod() throws {
        let signer = try TestAppleSigner()
        var c = configuration()
        c.appleRootCertificates = [signer.rootDER]
        let d = try driver(c)
        let user = try db.newUser()
        try register(receipt: "receipt-r", transaction: "1000000001")
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-r", transaction: "1000000001"))
        let heldEnd = try db.string("SELECT end_date::text AS v FROM subscriptions WHERE store_transaction_id = '1000000001'")

        // Month 1 (ended 10 days ago) refunded on day 40; Apple says the subscription is active (status 1).
        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "REFUND", expires: Date().addingTimeInterval(-10 * 86400),
                                                                  status: 1, revoked: true, transactionID: "1000000005",
                                                                  revocationType: "REFUND_FULL"))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.string("SELECT end_date::text AS v FROM subscriptions WHERE store_transaction_id = '1000000001'"), heldEnd)
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscription_events WHERE event_type = 'transaction_refunded'
               AND event_data->>'transaction_id' = '1000000005' AND event_data->>'scope' = 'past_transaction'
            """), 1)

        // The same without data.status and without Server API credentials: the refunded period ended before ours.
        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "REFUND", expires: Date().addingTimeInterval(-40 * 86400),
                                                                  revoked: true, transactionID: "1000000004"))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")

        // A prorated refund of the current period (status 5, revoked): the period ends, the share is recorded.
        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "REFUND", expires: Date().addingTimeInterval(20 * 86400),
                                                                  status: 5, revoked: true, transactionID: "1000000001",
                                                                  revocationType: "REFUND_PRORATED", revocationPercentage: 40_000))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "refunded")
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscription_events WHERE event_type = 'refunded'
               AND event_data->>'scope' = 'current_period' AND event_data->>'revocation_percentage_milli' = '40000'
            """), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions WHERE cancelled_at IS NOT NULL"), 1)

        // L13: the refund reversed (status 1, no revocation): active again, and cancelled_at follows the store.
        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "REFUND_REVERSED", expires: Date().addingTimeInterval(20 * 86400),
                                                                  status: 1, signedAt: Date().addingTimeInterval(1), transactionID: "1000000001"))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions WHERE cancelled_at IS NOT NULL"), 0)
    }

    /// L6: a crossgrade keeps Apple's original transaction id; the row follows the product to the app's annual plan.
    func testCrossgradeMovesTheSubscriptionToThePlanOfTheNewProduct() throws {
        let signer = try TestAppleSigner()
        var c = configuration()
        c.appleRootCertificates = [signer.rootDER]
        let d = try driver(c)
        let annual = try fixture.pool.withConnection { c in
            try c.queryFirst("""
                INSERT INTO subscription_plans (app_id, name, plan_type, apple_product_id, google_product_id, price)
                VALUES ($1, 'Premium annual', 'annual', 'com.example.premium.annual', 'premium_annual', 39.99) RETURNING id
                """, [db.appID])!.uuid("id")
        }
        let user = try db.newUser()
        try register(receipt: "receipt-x", transaction: "1000000001")
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-x", transaction: "1000000001"))
        XCTAssertEqual(try db.string("SELECT plan_type AS v FROM subscriptions WHERE store_transaction_id = '1000000001'"), "monthly")
        try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: "DID_RENEW", expires: Date().addingTimeInterval(365 * 86400),
                                                                  status: 1, product: "com.example.premium.annual"))
        XCTAssertEqual(try db.string("SELECT plan_type AS v FROM subscriptions WHERE store_transaction_id = '1000000001'"), "annual")
        XCTAssertEqual(try db.string("SELECT plan_id::text AS v FROM subscriptions WHERE store_transaction_id = '1000000001'"),
                       annual.uuidString.lowercased())
        XCTAssertEqual(try db.userStatus(user), "premium")
    }

    func testUnknownSubscriptionIsRecordedUnmatched() throws {
        let signer = try TestAppleSigner()
        var c = configuration()
        c.appleRootCertificates = [signer.rootDER]
        try driver(c).run("AppStoreNotificationJob", try notificationArgs(signer, type: "DID_RENEW", expires: Date().addingTimeInterval(86400)))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'unmatched'"), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
    }

    func testAppleFixtureNotificationsTestIgnoredWrongBundleAndMissingX5CDead() throws {
        var c = configuration()
        c.appleRootCertificates = [try AppleFixtures.testCA()]
        let d = try driver(c)
        try d.run("AppStoreNotificationJob", jsonString([["signed_payload": try AppleFixtures.text("mock_signed_data/testNotification")]]))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'ignored' AND notification_type = 'TEST'"), 1)
        XCTAssertThrowsError(try d.run("AppStoreNotificationJob",
                                       jsonString([["signed_payload": try AppleFixtures.text("mock_signed_data/wrongBundleId")]]))) {
            Failure.isPermanent($0, containing: "bundle id com.example.wrong, expected com.example")
        }
        XCTAssertThrowsError(try d.run("AppStoreNotificationJob",
                                       jsonString([["signed_payload": try AppleFixtures.text("mock_signed_data/missingX5CHeaderClaim")]]))) {
            Failure.isPermanent($0, containing: "no x5c claim")
        }
        XCTAssertThrowsError(try d.run("AppStoreNotificationJob", jsonString([["signed_payload": "not-a-jws"]]))) {
            Failure.isPermanent($0, containing: "compact JWS")
        }
    }
}

/// The public key (SPKI PEM) of a PKCS#8 P-256 key, for the fake's JWT check.
enum P256KeyPEM {
    static func publicKeyPEM(fromPrivate pem: String) throws -> String {
        try P256.Signing.PrivateKey(pemRepresentation: pem).publicKey.pemRepresentation
    }
}
