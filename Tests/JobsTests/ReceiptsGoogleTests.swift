import _CryptoExtras
import Foundation
import WorkersHTTP
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// ValidateReceiptJob (Google), PlayNotificationJob, the shared token cache, and the expiry sweep.
final class ReceiptsGoogleTests: ReceiptsTestCase {
    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "receipts_test", fakes: .own([.google])) }

    /// Google against the fakes (`googleConfiguration`), 2 s requests, sweep batches of 2.
    func configuration() throws -> ReceiptsConfiguration {
        var c = try googleConfiguration()
        c.requestTimeout = .seconds(2)
        c.sweepBatchSize = 2
        return c
    }

    func services(_ c: ReceiptsConfiguration) throws -> ReceiptServices { try ReceiptServices(configuration: c, http: http) }

    /// Jobs go through the worker's `JobRunner` (ledger check, retry and dead rules): see `JobRunnerDriver`.
    func driver(_ s: ReceiptServices) -> JobRunnerDriver {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: s)
        return fixture.driver(registry)
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

    /// Acknowledgements the fake accepted (200), per token.
    func acknowledgements() throws -> [String: Int] {
        try fakes.admin(.google, "GET", "google/acknowledgements")["acknowledgements"] as? [String: Int] ?? [:]
    }

    /// Acknowledge requests the fake's handler answered (accepted or refused; scripted answers excluded), per token.
    func acknowledgeAttempts() throws -> [String: Int] {
        try fakes.admin(.google, "GET", "google/acknowledgements")["attempts"] as? [String: Int] ?? [:]
    }

    func ackPath(_ token: String) -> String {
        "/androidpublisher/v3/applications/com.example.app/purchases/subscriptions/\(ReceiptsDatabase.googleProduct)/tokens/\(token):acknowledge"
    }

    /// `outcome` of the owed acknowledgement row, "owed" while unsettled, nil without a row.
    func acknowledgementOutcome(_ token: String) throws -> String? {
        try db.string("SELECT COALESCE(outcome, 'owed') AS v FROM google_acknowledgements WHERE purchase_token = $1", [token])
    }

    func testValidationAcknowledgesAndAppliesOnce() throws {
        let s = try services(try configuration())
        let d = driver(s)
        let user = try db.newUser()
        try setPurchase("tok-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(30 * 86400))
        let first = try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-1"))
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-1"))
        try d.redeliverInterrupted(first)  // the ledger check skips it
        XCTAssertEqual(try acknowledgementOutcome("tok-1"), "acknowledged")
        XCTAssertEqual(try acknowledgeAttempts(), ["tok-1": 1])
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
        try setPurchase("tok-x", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(86400))
        XCTAssertThrowsError(try driver(try services(c)).run("ValidateReceiptJob", googleArgs(user: user, token: "tok-x"))) {
            Failure.isUnavailable($0, service: "Google OAuth", containing: "token request refused (invalid_grant")
        }
        c = try configuration()
        let d = driver(try services(c))
        try fakes.script(.google, ["match": ["prefix": "/androidpublisher"], "status": 429, "retry_after": 7])
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-x"))) {
            Failure.isRetryAfter($0, seconds: 7)
        }
        let scripts: [([String: Any], String)] = [
            (["google_error": "backendError"], "HTTP 500"),
            (["malformed_json": true], "unreadable answer"),
            (["hang": true, "delay": 4], "HTTP timeout"),
        ]
        for (script, reason) in scripts {
            try fakes.script(.google, script.merging(["match": ["prefix": "/androidpublisher"]]) { a, _ in a })
            XCTAssertThrowsError(try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-x"))) {
                Failure.isUnavailable($0, service: "Google Play API", containing: reason)
            }
        }
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", googleArgs(user: user, token: "never-registered"))) {
            Failure.isPermanent($0, containing: "RCV-GOOGLE-404")
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

    // MARK: Acknowledgement never lost (issue 12 point 1)

    /// Each failure of the acknowledgement after the commit (409 concurrentUpdate, 5xx, timeout): the job is done
    /// (its redelivery is skipped by the ledger check, as before), the debt stays recorded, and the sweep pays it.
    func testFailedAcknowledgementStaysOwedUntilTheSweepPaysIt() throws {
        let d = driver(try services(try configuration()))
        let failures: [(String, [String: Any], String)] = [
            ("ack-409", ["google_error": "concurrentUpdate"], "HTTP 409 concurrentUpdate"),
            ("ack-503", ["google_error": "unavailable"], "HTTP 503"),
            ("ack-timeout", ["hang": true, "delay": 4], "HTTP timeout"),
        ]
        for (token, failure, reason) in failures {
            let user = try db.newUser()
            try setPurchase(token, state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(30 * 86400))
            try fakes.script(.google, failure.merging(["match": ["path": ackPath(token)]]) { a, _ in a })
            let delivered = try d.run("ValidateReceiptJob", googleArgs(user: user, token: token))
            XCTAssertEqual(try db.userStatus(user), "premium", token)
            XCTAssertEqual(try acknowledgementOutcome(token), "owed", token)
            let lastError = try XCTUnwrap(db.string("SELECT last_error AS v FROM google_acknowledgements WHERE purchase_token = $1", [token]))
            XCTAssertTrue(lastError.contains("Google Play acknowledge temporarily unavailable") && lastError.contains(reason), lastError)
            XCTAssertFalse(lastError.contains(token), "the token is redacted: \(lastError)")
            // A redelivery (crash after the commit) is skipped by the ledger: the job alone would never acknowledge.
            try d.redeliverInterrupted(delivered)
            XCTAssertNil(try acknowledgements()[token], token)
            try d.run("GoogleAcknowledgementSweepJob", "[]")
            XCTAssertEqual(try acknowledgements()[token], 1, token)
            XCTAssertEqual(try acknowledgementOutcome(token), "acknowledged", token)
        }
        // Settled rows are not tried again.
        try d.run("GoogleAcknowledgementSweepJob", "[]")
        XCTAssertEqual(try acknowledgeAttempts(), ["ack-409": 1, "ack-503": 1, "ack-timeout": 1])
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscription_events WHERE event_type = 'subscription_started'"), 3)
    }

    /// Google refuses the acknowledgement (400 invalidPurchaseState) because it went through already (the app
    /// acknowledged it, or an earlier answer was lost): the state, read again, settles it — no second acknowledgement.
    func testRefusedAcknowledgementIsSettledByGooglesState() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser(), other = try db.newUser()
        try setPurchase("ack-race", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(30 * 86400))
        // The handler runs (Google acknowledges), then the answer our call gets is 400 invalidPurchaseState.
        try fakes.script(.google, ["match": ["path": ackPath("ack-race")], "passthrough": true, "google_error": "invalidPurchaseState"])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "ack-race"))
        XCTAssertEqual(try acknowledgementOutcome("ack-race"), "already_acknowledged")
        XCTAssertEqual(try acknowledgements(), ["ack-race": 1])
        // Refused while Google still says pending and entitled: stays owed (and is tried again).
        try setPurchase("ack-stuck", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(30 * 86400))
        try fakes.script(.google, ["match": ["path": ackPath("ack-stuck")], "google_error": "invalidPurchaseState"])
        try d.run("ValidateReceiptJob", googleArgs(user: other, token: "ack-stuck"))
        XCTAssertEqual(try acknowledgementOutcome("ack-stuck"), "owed")
        // The purchase ended meanwhile (refunded by Google after 3 days): nothing left to acknowledge.
        try setPurchase("ack-stuck", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: Date().addingTimeInterval(-60))
        try d.run("GoogleAcknowledgementSweepJob", "[]")
        XCTAssertEqual(try acknowledgementOutcome("ack-stuck"), "not_needed")
        XCTAssertNil(try acknowledgements()["ack-stuck"])
    }

    /// An RTDN for a known purchase still pending owes and pays the acknowledgement the same way.
    func testPlayNotificationOwesAndPaysTheAcknowledgement() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        try setPurchase("rtdn-ack", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(30 * 86400),
                        extra: ["acknowledgementState": "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "rtdn-ack"))
        XCTAssertNil(try acknowledgementOutcome("rtdn-ack"), "nothing owed for an acknowledged purchase")
        // A resubscription makes it pending again; the RTDN's own attempt fails with a 503.
        try setPurchase("rtdn-ack", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(60 * 86400))
        try fakes.script(.google, ["match": ["path": ackPath("rtdn-ack")], "google_error": "unavailable"])
        let payload = try d.run("PlayNotificationJob", rtdn(messageID: "ack-m1", type: 7, token: "rtdn-ack"))
        XCTAssertEqual(try acknowledgementOutcome("rtdn-ack"), "owed")
        try d.redeliverInterrupted(payload)
        try d.run("GoogleAcknowledgementSweepJob", "[]")
        XCTAssertEqual(try acknowledgements(), ["rtdn-ack": 1])
        XCTAssertEqual(try acknowledgementOutcome("rtdn-ack"), "acknowledged")
    }

    // MARK: Replacement, grace, voided orders (issue 12 points 4, 5, 6)

    /// A purchase carrying `linkedPurchaseToken` ends the linked one at once, whichever account held it.
    func testLinkedPurchaseTokenEndsTheReplacedEntitlement() throws {
        let d = driver(try services(try configuration()))
        let oldOwner = try db.newUser(), newOwner = try db.newUser(), same = try db.newUser()
        let far = Date().addingTimeInterval(20 * 86400)
        try setPurchase("old-a", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: far)
        try d.run("ValidateReceiptJob", googleArgs(user: oldOwner, token: "old-a"))
        XCTAssertEqual(try db.userStatus(oldOwner), "premium")
        // The upgrade was bought from another account.
        try setPurchase("new-a", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: far, extra: ["linkedPurchaseToken": "old-a"])
        try d.run("ValidateReceiptJob", googleArgs(user: newOwner, token: "new-a"))
        XCTAssertEqual(try db.subscriptionStatus(key: "old-a"), "expired")
        XCTAssertEqual(try db.userStatus(oldOwner), "free")
        XCTAssertEqual(try db.userStatus(newOwner), "premium")
        XCTAssertEqual(try db.events(key: "old-a"), ["subscription_started", "replaced"])
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions WHERE store_transaction_id = 'old-a' AND end_date <= now() AND NOT auto_renew"), 1)
        // A late RTDN for the old token (Google: canceled by replacement, expiry still ahead) does not bring it back.
        try setPurchase("old-a", state: "SUBSCRIPTION_STATE_CANCELED", expiry: far,
                        extra: ["canceledStateContext": ["replacementCancellation": [:] as [String: String]]])
        try d.run("PlayNotificationJob", rtdn(messageID: "late-old", type: 3, token: "old-a"))
        XCTAssertEqual(try db.subscriptionStatus(key: "old-a"), "expired")
        XCTAssertEqual(try db.userStatus(oldOwner), "free")
        // Same account: the user keeps premium, now through the new purchase.
        try setPurchase("old-b", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: far)
        try d.run("ValidateReceiptJob", googleArgs(user: same, token: "old-b"))
        try setPurchase("new-b", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: far, extra: ["linkedPurchaseToken": "old-b"])
        try d.run("ValidateReceiptJob", googleArgs(user: same, token: "new-b"))
        XCTAssertEqual(try db.subscriptionStatus(key: "old-b"), "expired")
        XCTAssertEqual(try db.userStatus(same), "premium")
        XCTAssertEqual(try db.string("""
            SELECT s.store_transaction_id AS v FROM users u JOIN subscriptions s ON s.id = u.subscription_id WHERE u.id = $1
            """, [same]), "new-b")
    }

    /// IN_GRACE_PERIOD: the line item's expiryTime is the end of grace (its length is the base plan's); nothing is
    /// added to it.
    func testGoogleGraceEndsAtGooglesExpiryTime() throws {
        let c = try configuration()
        let d = driver(try services(c))
        let user = try db.newUser()
        let graceEnd = Date().addingTimeInterval(5 * 86400)  // a base plan with a 7-day grace, 2 days in
        try setPurchase("grace-1", state: "SUBSCRIPTION_STATE_IN_GRACE_PERIOD", expiry: graceEnd)
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "grace-1"))
        XCTAssertEqual(try db.subscriptionStatus(key: "grace-1"), "grace_period")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = 'grace-1'
              AND abs(extract(epoch FROM grace_period_end) - $1) < 1
            """, [graceEnd.timeIntervalSince1970]), 1, "grace_period_end is Google's expiryTime")
        let stores = try services(c)
        XCTAssertEqual(try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, stores: stores,
                                                            now: graceEnd.addingTimeInterval(-60)), .init())
        // Past the grace window the sweep asks Google (the source of truth), which now says EXPIRED.
        try setPurchase("grace-1", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: graceEnd)
        XCTAssertEqual(try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, stores: stores,
                                                            now: graceEnd.addingTimeInterval(60)).expired, 1)
        XCTAssertEqual(try db.subscriptionStatus(key: "grace-1"), "expired")
        XCTAssertEqual(try db.userStatus(user), "free")
    }

    /// A voided order is compared with the order that paid the current period before anything is revoked.
    func testVoidedOlderOrderKeepsTheCurrentPaidPeriod() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        let current = "GPA.3372-4150-9088-12345..2"
        try setPurchase("void-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(20 * 86400),
                        extra: ["latestSuccessfulOrderId": current])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "void-1"))
        // A chargeback on the first renewal: Google still says ACTIVE for the period paid by ..2.
        try d.run("PlayNotificationJob", rtdn(messageID: "void-old", token: "void-1", voided: true, orderID: "GPA.3372-4150-9088-12345..1"))
        XCTAssertEqual(try db.subscriptionStatus(key: "void-1"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.events(key: "void-1"), ["subscription_started", "order_voided"])
        XCTAssertEqual(try db.string("SELECT event_data->>'order' AS v FROM subscription_events WHERE event_type = 'order_voided'"), "older")
    }

    /// Review L-c: the order that paid the current period refunded without revoke (Play Console refund without
    /// "revoke", or purchases.subscriptions.refund: the subscription "remains valid until its expiration time and it
    /// will continue to recur") keeps the entitlement Google still reports; only the revoke (Google's state no longer
    /// entitling, RTDN 12 SUBSCRIPTION_REVOKED) removes it.
    func testARefundWithoutRevokeKeepsTheEntitlementGoogleReportsUntilTheRevoke() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        let current = "GPA.3372-4150-9088-77777"
        try setPurchase("refund-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(20 * 86400),
                        extra: ["latestSuccessfulOrderId": current])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "refund-1"))
        try d.run("PlayNotificationJob", rtdn(messageID: "refund-void", token: "refund-1", voided: true, orderID: current))
        XCTAssertEqual(try db.subscriptionStatus(key: "refund-1"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.events(key: "refund-1"), ["subscription_started", "order_voided"])
        XCTAssertEqual(try db.string("SELECT event_data->>'order' AS v FROM subscription_events WHERE event_type = 'order_voided'"), "current")
        // Revoked afterwards: Google's state ends, and its RTDN 12 arrives.
        try setPurchase("refund-1", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: Date().addingTimeInterval(-60),
                        extra: ["latestSuccessfulOrderId": current])
        try d.run("PlayNotificationJob", rtdn(messageID: "refund-revoke", type: 12, token: "refund-1"))
        XCTAssertEqual(try db.subscriptionStatus(key: "refund-1"), "refunded")
        XCTAssertEqual(try db.userStatus(user), "free")
    }

    /// A void whose revoke Google already applied (its state no longer entitles: the RTDN 12 was lost) ends the period.
    func testAVoidGoogleNoLongerEntitlesRevokesThePeriod() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        try setPurchase("revoked-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(20 * 86400),
                        extra: ["latestSuccessfulOrderId": "GPA.9"])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "revoked-1"))
        try setPurchase("revoked-1", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: Date().addingTimeInterval(-60),
                        extra: ["latestSuccessfulOrderId": "GPA.9"])
        try d.run("PlayNotificationJob", rtdn(messageID: "revoked-void", token: "revoked-1", voided: true, orderID: "GPA.9"))
        XCTAssertEqual(try db.subscriptionStatus(key: "revoked-1"), "refunded")
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.events(key: "revoked-1"), ["subscription_started", "refunded"])
    }

    // MARK: RTDN

    func rtdn(messageID: String, type: Int? = nil, token: String, voided: Bool = false, orderID: String = "GPA.1",
              test: Bool = false, eventTimeMillis: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> String {
        var n: [String: Any] = ["version": "1.0", "packageName": "com.example.app",
                                "eventTimeMillis": String(eventTimeMillis)]
        if voided { n["voidedPurchaseNotification"] = ["purchaseToken": token, "orderId": orderID, "productType": 1] }
        else if test { n["testNotification"] = ["version": "1.0"] }
        else { n["subscriptionNotification"] = ["version": "1.0", "notificationType": type ?? 2, "purchaseToken": token,
                                                "subscriptionId": ReceiptsDatabase.googleProduct] }
        let data = try! JSONSerialization.data(withJSONObject: n).base64EncodedString()
        return jsonString([["message": ["data": data, "messageId": messageID, "attributes": [:] as [String: String]],
                            "subscription": "projects/demo/subscriptions/rtdn"]])
    }

    /// An eventTimeMillis PostgreSQL cannot hold (year -4368 here) is not used as the event's time: the void is applied
    /// at our clock instead of failing its statement and retrying until dead.
    func testAPlayNotificationWithAnEventTimeOutsideTheCalendarIsAppliedAtOurClock() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        try setPurchase("tok-t", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(10 * 86400),
                        extra: ["latestSuccessfulOrderId": "GPA.1"])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "tok-t"))
        try setPurchase("tok-t", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: Date().addingTimeInterval(-60))  // revoked
        try d.run("PlayNotificationJob", rtdn(messageID: "t-1", token: "tok-t", voided: true, eventTimeMillis: -200_000_000_000_000))
        XCTAssertEqual(try db.subscriptionStatus(key: "tok-t"), "refunded")
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = 'tok-t' AND cancelled_at > now() - interval '1 hour'
            """), 1)
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
        // No store client (stores: nil): renewing rows past their window cannot be confirmed, so they stay (L1).
        let first = try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, stores: nil, now: Date())
        XCTAssertEqual(first, .init(expired: 1, graceStarted: 2, unconfirmed: 2))
        XCTAssertEqual(try db.subscriptionStatus(key: "apple-in-grace"), "grace_period")
        XCTAssertEqual(try db.subscriptionStatus(key: "google-in-grace"), "grace_period")
        XCTAssertEqual(try db.subscriptionStatus(key: "apple-past-grace"), "active")
        XCTAssertEqual(try db.subscriptionStatus(key: "apple-cancelled"), "expired")
        XCTAssertEqual(try db.subscriptionStatus(key: "google-past-grace"), "trial")
        XCTAssertEqual(try db.subscriptionStatus(key: "still-running"), "active")
        XCTAssertEqual(try db.userStatus(users["apple-past-grace"]!), "premium")
        XCTAssertEqual(try db.userStatus(users["apple-cancelled"]!), "free")
        XCTAssertEqual(try db.userStatus(users["apple-in-grace"]!), "premium")
        XCTAssertEqual(try db.events(key: "apple-cancelled"), ["expired"])
        // Again, now: nothing changes but the alert. Four days later Google's 3-day window is over too: unconfirmed.
        XCTAssertEqual(try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, stores: nil, now: Date()),
                       .init(unconfirmed: 2))
        let later = try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, stores: nil,
                                                         now: Date().addingTimeInterval(4 * 86400))
        XCTAssertEqual(later, .init(unconfirmed: 3))
        XCTAssertEqual(try db.subscriptionStatus(key: "google-in-grace"), "grace_period")
        XCTAssertEqual(try db.subscriptionStatus(key: "apple-in-grace"), "grace_period")
        XCTAssertEqual(try db.userStatus(users["google-in-grace"]!), "premium")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscription_events WHERE event_type = 'expired'"), 1)
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
