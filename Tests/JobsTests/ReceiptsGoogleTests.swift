import _CryptoExtras
import Foundation
import HTTP
@testable import Jobs
import Storage
import TestSupport
import Workers
import XCTest

/// ValidateReceiptJob (Google), PlayNotificationJob, the shared token cache, and the expiry sweep.
final class ReceiptsGoogleTests: XCTestCase {
    var db: ReceiptsDatabase!
    var fakes: FakeServers!
    var http: HTTPClient!

    override class func setUp() { CurlRuntime.initialize() }

    override func setUpWithError() throws {
        db = try ReceiptsDatabase()
        fakes = try FakeServers([.google])
        http = HTTPClient(configuration: HTTPClientConfiguration(userAgent: "receipts-test", timeout: .seconds(5)))
    }

    override func tearDown() {
        fakes?.stop()
        db?.close()
    }

    /// A fresh RSA service account; the fake is told its public key and checks every assertion's signature.
    func configuration() throws -> ReceiptsConfiguration {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let json = jsonString(["type": "service_account", "project_id": "demo", "private_key_id": "k1",
                               "private_key": key.pkcs8PEMRepresentation, "client_email": "worker@demo.iam.gserviceaccount.com",
                               "token_uri": fakes.googleTokenURL])
        try fakes.configure(.google, ["service_account": ["client_email": "worker@demo.iam.gserviceaccount.com",
                                                          "public_key_pem": key.publicKey.pemRepresentation]])
        var c = ReceiptsConfiguration()
        c.googleServiceAccount = try GoogleServiceAccount(json: Secret(json))
        c.googlePlayAPIURL = fakes.googleAPIBaseURL
        c.googlePackageNames = ["com.example.app"]
        c.requestTimeout = .seconds(2)
        c.sweepBatchSize = 2
        return c
    }

    func services(_ c: ReceiptsConfiguration) throws -> ReceiptServices { try ReceiptServices(configuration: c, http: http) }

    func driver(_ s: ReceiptServices) -> JobDriver {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: s)
        return JobDriver(registry: registry, database: JobDatabase(pool: db.pool))
    }

    func googleArgs(user: UUID, token: String, product: String = ReceiptsDatabase.googleProduct) -> String {
        jsonString([["user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString,
                     "store": "google", "package_name": "com.example.app", "product_id": product, "purchase_token": token]])
    }

    func setPurchase(_ token: String, state: String, expiry: Date, extra: [String: Any] = [:]) throws {
        let f = ISO8601DateFormatter()
        try fakes.admin(.google, "POST", "google/subscriptions", json: [
            "token": token, "subscriptionState": state, "productId": ReceiptsDatabase.googleProduct,
            "expiryTime": f.string(from: expiry)].merging(extra) { $1 })
    }

    func acknowledgements() throws -> [String: Int] {
        try fakes.admin(.google, "GET", "google/acknowledgements")["acknowledgements"] as? [String: Int] ?? [:]
    }

    func testValidationAcknowledgesAndAppliesOnce() throws {
        let s = try services(try configuration())
        let d = driver(s)
        let user = try db.newUser()
        try setPurchase("tok-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(30 * 86400))
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-1"))
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-1"))
        XCTAssertEqual(try db.subscriptionStatus(key: "tok-1"), "active")
        XCTAssertEqual(try db.events(key: "tok-1"), ["subscription_started"])
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try acknowledgements(), ["tok-1": 1], "acknowledged once; the second run saw it acknowledged")
        XCTAssertEqual(s.googleTokens?.fetchCount, 1, "the access token is cached")
        let tokens = try fakes.admin(.google, "GET", "google/tokens")
        XCTAssertEqual((tokens["issued"] as? [String])?.count, 1)
        XCTAssertEqual((tokens["rejected"] as? [String]) ?? [], [], "the fake verified our RS256 assertion")
    }

    func testStateMappingDecidesEntitlement() throws {
        let d = driver(try services(try configuration()))
        let cases: [(String, TimeInterval, String, String)] = [
            ("SUBSCRIPTION_STATE_IN_GRACE_PERIOD", 86400, "grace_period", "premium"),
            ("SUBSCRIPTION_STATE_CANCELED", 5 * 86400, "active", "premium"),
            ("SUBSCRIPTION_STATE_CANCELED", -86400, "expired", "free"),
            ("SUBSCRIPTION_STATE_ON_HOLD", -86400, "on_hold", "free"),
            ("SUBSCRIPTION_STATE_PAUSED", -86400, "paused", "free"),
            ("SUBSCRIPTION_STATE_EXPIRED", -86400, "expired", "free"),
            ("SUBSCRIPTION_STATE_PENDING", 86400, "pending", "free"),
        ]
        for (index, (state, offset, status, userStatus)) in cases.enumerated() {
            let user = try db.newUser(), token = "map-\(index)"
            try setPurchase(token, state: state, expiry: Date().addingTimeInterval(offset))
            try d.run("ValidateReceiptJob", googleArgs(user: user, token: token))
            XCTAssertEqual(try db.subscriptionStatus(key: token), status, state)
            XCTAssertEqual(try db.userStatus(user), userStatus, state)
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions WHERE auto_renew AND status <> 'active' AND status <> 'grace_period'"), 0)
        XCTAssertEqual(try acknowledgements().keys.sorted(), ["map-0", "map-1"], "only entitled purchases are acknowledged")
    }

    func testTokenCacheIsSharedByThreads() throws {
        let s = try services(try configuration())
        let tokens = try XCTUnwrap(s.googleTokens)
        let results = ThreadSafeList()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            results.append((try? tokens.token(cancellation: nil)) ?? "error")
        }
        XCTAssertEqual(Set(results.all).count, 1)
        XCTAssertFalse(results.all.contains("error"))
        XCTAssertEqual(tokens.fetchCount, 1)
        // Close to expiry: replaced.
        _ = try tokens.token(cancellation: nil, now: Date().addingTimeInterval(3599 - GoogleAccessTokenProvider.refreshMargin + 5))
        XCTAssertEqual(tokens.fetchCount, 2)
    }

    func testExpiredAccessTokenIsRefreshedOnce() throws {
        let s = try services(try configuration())
        let d = driver(s)
        let user = try db.newUser()
        try setPurchase("tok-exp", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(86400),
                        extra: ["acknowledgementState": "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"])
        _ = try s.googleTokens?.token(cancellation: nil)
        try fakes.admin(.google, "POST", "google/expire_tokens")
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-exp"))
        XCTAssertEqual(s.googleTokens?.fetchCount, 2)
        XCTAssertEqual(try db.userStatus(user), "premium")
    }

    func testRefusedAssertionRetriesAndFailuresAreTriaged() throws {
        var c = try configuration()
        // The fake now expects another key: our assertion is refused (invalid_grant) -> retried, nothing recorded.
        let other = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        try fakes.configure(.google, ["service_account": ["client_email": "worker@demo.iam.gserviceaccount.com",
                                                          "public_key_pem": other.publicKey.pemRepresentation]])
        let user = try db.newUser()
        XCTAssertThrowsError(try driver(try services(c)).run("ValidateReceiptJob", googleArgs(user: user, token: "tok-x"))) {
            Failure.isRetryable($0)
        }
        c = try configuration()
        let d = driver(try services(c))
        try fakes.script(.google, ["match": ["prefix": "/androidpublisher"], "status": 429, "retry_after": 7])
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-x"))) { error in
            guard case JobError.retryAfter(let seconds, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(seconds, 7, accuracy: 1)
        }
        for script: [String: Any] in [["status": 500], ["malformed_json": true], ["hang": true, "delay": 4]] {
            try fakes.script(.google, script.merging(["match": ["prefix": "/androidpublisher"]]) { a, _ in a })
            XCTAssertThrowsError(try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-x"))) { Failure.isRetryable($0) }
        }
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", googleArgs(user: user, token: "gone-1"))) {
            Failure.isPermanent($0, containing: "RCV-GOOGLE-410")
        }
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", googleArgs(user: user, token: "t", product: "other"))) {
            Failure.isPermanent($0, containing: "not the plan's Google product")
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
        XCTAssertEqual(try db.userStatus(user), "free")
    }

    // MARK: RTDN

    func rtdn(messageID: String, type: Int? = nil, token: String, voided: Bool = false, test: Bool = false) -> String {
        var n: [String: Any] = ["version": "1.0", "packageName": "com.example.app",
                                "eventTimeMillis": String(Int64(Date().timeIntervalSince1970 * 1000))]
        if voided { n["voidedPurchaseNotification"] = ["purchaseToken": token, "orderId": "GPA.1", "productType": 1] }
        else if test { n["testNotification"] = ["version": "1.0"] }
        else { n["subscriptionNotification"] = ["version": "1.0", "notificationType": type ?? 2, "purchaseToken": token,
                                                "subscriptionId": ReceiptsDatabase.googleProduct] }
        let data = try! JSONSerialization.data(withJSONObject: n).base64EncodedString()
        return jsonString([["message": ["data": data, "messageId": messageID, "attributes": [:] as [String: String]],
                            "subscription": "projects/demo/subscriptions/rtdn"]])
    }

    func testPlayNotificationsRenewDeduplicateAndVoid() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        try setPurchase("tok-n", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(10 * 86400))
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-n"))
        try setPurchase("tok-n", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(40 * 86400))
        try d.run("PlayNotificationJob", rtdn(messageID: "m-1", type: 2, token: "tok-n"))
        try d.run("PlayNotificationJob", rtdn(messageID: "m-1", type: 2, token: "tok-n"))  // Pub/Sub redelivery
        XCTAssertEqual(try db.events(key: "tok-n"), ["subscription_started", "renewed"])
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = 'tok-n' AND end_date > now() + interval '35 days'
            """), 1)
        try setPurchase("tok-n", state: "SUBSCRIPTION_STATE_ON_HOLD", expiry: Date().addingTimeInterval(-3600))
        try d.run("PlayNotificationJob", rtdn(messageID: "m-2", type: 5, token: "tok-n"))
        XCTAssertEqual(try db.subscriptionStatus(key: "tok-n"), "on_hold")
        XCTAssertEqual(try db.userStatus(user), "free")
        try d.run("PlayNotificationJob", rtdn(messageID: "m-3", token: "tok-n", voided: true))
        XCTAssertEqual(try db.subscriptionStatus(key: "tok-n"), "refunded")
        try d.run("PlayNotificationJob", rtdn(messageID: "m-4", type: 4, token: "unknown-token"))
        try d.run("PlayNotificationJob", rtdn(messageID: "m-5", token: "", test: true))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'unmatched'"), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'ignored'"), 1)
        XCTAssertThrowsError(try d.run("PlayNotificationJob", jsonString([["message": ["data": "%%%", "messageId": "m-6"]]]))) {
            Failure.isPermanent($0, containing: "not base64")
        }
    }

    // MARK: Expiry sweep

    func insertSubscription(user: UUID, store: String, key: String, status: String, endOffsetDays: Double,
                            autoRenew: Bool = true) throws {
        let app = db.appID, plan = db.planID
        try db.pool.withConnection { c in
            let id = try c.queryFirst("""
                INSERT INTO subscriptions (app_id, user_id, plan_id, plan_type, status, start_date, end_date, auto_renew,
                                           store, store_product_id, store_transaction_id)
                VALUES ($1, $2, $3, 'monthly', $4, now() - interval '40 days', now() + make_interval(secs => $5), $6, $7, 'p', $8)
                RETURNING id
                """, [app, user, plan, status, endOffsetDays * 86400, autoRenew, store, key])!.uuid("id")
            try c.execute("UPDATE users SET status = 'premium', subscription_id = $2 WHERE id = $1", [user, id])
        }
    }

    func testExpirySweepHonoursGraceWindowsInBatches() throws {
        let c = try configuration()
        var users: [String: UUID] = [:]
        let rows: [(String, String, String, Double, Bool)] = [
            ("apple-in-grace", "apple", "active", -1, true),
            ("apple-past-grace", "apple", "active", -20, true),
            ("apple-cancelled", "apple", "active", -1, false),
            ("google-in-grace", "google", "active", -1, true),
            ("google-past-grace", "google", "trial", -4, true),
            ("still-running", "google", "active", 5, true),
        ]
        for (key, store, status, offset, renew) in rows {
            users[key] = try db.newUser()
            try insertSubscription(user: users[key]!, store: store, key: key, status: status, endOffsetDays: offset, autoRenew: renew)
        }
        let first = try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, now: Date())
        XCTAssertEqual(first, .init(expired: 3, graceStarted: 2))
        XCTAssertEqual(try db.subscriptionStatus(key: "apple-in-grace"), "grace_period")
        XCTAssertEqual(try db.subscriptionStatus(key: "google-in-grace"), "grace_period")
        XCTAssertEqual(try db.subscriptionStatus(key: "apple-past-grace"), "expired")
        XCTAssertEqual(try db.subscriptionStatus(key: "apple-cancelled"), "expired")
        XCTAssertEqual(try db.subscriptionStatus(key: "google-past-grace"), "expired")
        XCTAssertEqual(try db.subscriptionStatus(key: "still-running"), "active")
        XCTAssertEqual(try db.userStatus(users["apple-past-grace"]!), "free")
        XCTAssertEqual(try db.userStatus(users["apple-in-grace"]!), "premium")
        XCTAssertEqual(try db.events(key: "apple-past-grace"), ["expired"])
        // Again, now: nothing changes. Four days later: Google's 3-day grace is over, Apple's 16 days are not.
        XCTAssertEqual(try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, now: Date()), .init())
        let later = try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, now: Date().addingTimeInterval(4 * 86400))
        XCTAssertEqual(later.expired, 1)
        XCTAssertEqual(try db.subscriptionStatus(key: "google-in-grace"), "expired")
        XCTAssertEqual(try db.subscriptionStatus(key: "apple-in-grace"), "grace_period")
        XCTAssertEqual(try db.userStatus(users["google-in-grace"]!), "free")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscription_events WHERE event_type = 'expired'"), 4)
        // Through the job class.
        try driver(try services(c)).run("SubscriptionExpirySweepJob", "[]")
        XCTAssertThrowsError(try driver(try services(c)).run("SubscriptionExpirySweepJob", "[1]"))
    }
}

/// Strings appended from several threads.
final class ThreadSafeList: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func append(_ s: String) { lock.withLock { items.append(s) } }
    var all: [String] { lock.withLock { items } }
}
