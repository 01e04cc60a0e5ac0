import Foundation
@testable import WorkersAppJobs
import Logging
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Issue 52 point 3 (review 2026-12-07 L-b): the daily `StoreReconciliationJob`, through the real runner
/// (`JobRunnerDriver`), against the Apple and Google fakes' Get Notification History and voidedpurchases.list (with
/// their pagination), time moved by the test's clock (`ReceiptsTestClock`), never by sleeping.
extension ReceiptsAppleTests {
    /// Apple's history lists a notification our endpoint never received (a DID_FAIL_TO_RENEW: billing retry) on its
    /// second page, beside one the notification job already applied and one older than the 48 h window: the missed
    /// one is applied once, by the notification job's own code (its claim, its event), the others not again.
    func testTheReconciliationAppliesMissedAppStoreNotificationsOnceThroughTheNotificationJob() throws {
        let clock = ReceiptsTestClock(), signer = try TestAppleSigner()
        let services = try ReceiptServices(configuration: try serverAPIConfiguration(root: signer.rootDER), http: http,
                                           now: { clock.now })
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: services)
        let d = fixture.driver(registry)
        try fakes.configure(.apple, ["history_page_size": 2])
        let user = try db.newUser(), original = "1000000700"
        let held = try signer.subscriptionTransaction(id: original, original: original, accountToken: user)
        try signer.register(held, id: original, with: fakes)
        try d.run("ValidateReceiptJob", jsonString([[
            "user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString, "store": "apple",
            "receipt_data": "unused", "transaction_id": original]]))
        XCTAssertEqual(try db.userStatus(user), "premium")
        clock.advance(60)

        func notification(_ type: String, subtype: String? = nil, uuid: String, status: Int?) throws -> String {
            var data: [String: Any] = ["bundleId": "com.example", "environment": "Production", "appAppleId": 1234]
            if let status {
                data["status"] = status
                data["signedTransactionInfo"] = held
            }
            var payload: [String: Any] = ["notificationType": type, "notificationUUID": uuid, "data": data, "version": "2.0",
                                          "signedDate": TestAppleSigner.ms(clock.now)]
            if let subtype { payload["subtype"] = subtype }
            return try signer.sign(payload)
        }
        let delivered = UUID().uuidString.lowercased(), test = UUID().uuidString.lowercased()
        let missed = UUID().uuidString.lowercased(), tooOld = UUID().uuidString.lowercased()
        let deliveredPayload = try notification("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_ENABLED", uuid: delivered, status: 1)
        try d.run("AppStoreNotificationJob", jsonString([["signedPayload": deliveredPayload]]))
        clock.advance(60)  // what Apple sent after it is signed later
        let hour: Double = 3_600_000, now = Double(TestAppleSigner.ms(clock.now))
        for (payload, hoursAgo) in [(try notification("REVOKE", uuid: tooOld, status: 5), 60.0), (deliveredPayload, 30),
                                    (try notification("TEST", uuid: test, status: nil), 20),
                                    (try notification("DID_FAIL_TO_RENEW", uuid: missed, status: 3), 10)] {
            try fakes.admin(.apple, "POST", "apple/notification_history",
                            json: ["signedPayload": payload, "attemptDate": Int64(now - hoursAgo * hour)])
        }
        let eventsBefore = try db.events(key: original)

        try d.run("StoreReconciliationJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: original), "on_hold")
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.events(key: original).count, eventsBefore.count + 1)
        XCTAssertEqual(try db.events(key: original).filter { $0 == "billing_retry" }.count, 1)
        XCTAssertEqual(try db.string("SELECT outcome AS v FROM store_notifications WHERE notification_id = $1", [missed]), "applied")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE notification_id = $1", [tooOld]), 0,
                       "outside the 48 h window")
        let pages = try fakes.requests(.apple, path: "/inApps/v1/notifications/history")
        XCTAssertEqual(pages.count, 2, "two pages of two records")

        // The next day: the same records are listed again; nothing is applied twice.
        clock.advance(86_400 - 60)
        let recorded = try db.scalar("SELECT count(*) FROM store_notifications")
        try d.run("StoreReconciliationJob", "[]")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications"), recorded)
        XCTAssertEqual(try db.events(key: original).filter { $0 == "billing_retry" }.count, 1)
    }
}

extension ReceiptsAppleTests {
    /// Apple rate-limits the history (429 RateLimitExceededError): the run alerts RCV-RECONCILE-INCOMPLETE and fails, so
    /// the runner retries it; the retry reads the history and applies what was missed.
    func testARateLimitedAppStoreHistoryIsAlertedAndTheRetryAppliesIt() throws {
        let clock = ReceiptsTestClock(), signer = try TestAppleSigner(), logs = CapturedLogs()
        var c = try serverAPIConfiguration(root: signer.rootDER)
        c.appleAllowedEnvironments = ["Production"]
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: c, http: http, now: { clock.now }))
        let d = JobRunnerDriver(registry: registry, database: fixture.jobDatabase, logger: logs.logger(label: "reconcile-test"))
        let uuid = UUID().uuidString.lowercased()
        let test = try signer.sign(["notificationType": "TEST", "notificationUUID": uuid, "version": "2.0",
                                    "signedDate": TestAppleSigner.ms(clock.now),
                                    "data": ["bundleId": "com.example", "environment": "Production", "appAppleId": 1234]])
        try fakes.admin(.apple, "POST", "apple/notification_history",
                        json: ["signedPayload": test, "attemptDate": TestAppleSigner.ms(clock.now.addingTimeInterval(-3600))])
        try fakes.configure(.apple, ["rate_limited": 1])
        XCTAssertThrowsError(try d.run("StoreReconciliationJob", "[]"))
        XCTAssertEqual(logs.alerts, ["RCV-RECONCILE-INCOMPLETE"])
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE notification_id = $1", [uuid]), 0)
        try d.run("StoreReconciliationJob", "[]")
        XCTAssertEqual(try db.string("SELECT outcome AS v FROM store_notifications WHERE notification_id = $1", [uuid]), "ignored")
    }
}

extension ReceiptsGoogleTests {
    func reconciliation(budget: Int, clock: ReceiptsTestClock, logs: CapturedLogs? = nil) throws -> JobRunnerDriver {
        var c = try configuration()
        c.reconcileCallBudget = budget
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: c, http: http, now: { clock.now }))
        return JobRunnerDriver(registry: registry, database: fixture.jobDatabase, logger: logs?.logger(label: "reconcile-test"))
    }

    func voided(_ token: String, order: String, hoursAgo: Double, clock: ReceiptsTestClock, productType: String = "subscription") throws {
        try fakes.admin(.google, "POST", "google/voided", json: [
            "purchaseToken": token, "orderId": order, "productType": productType,
            "voidedTimeMillis": String(Int64((clock.now.timeIntervalSince1970 - hoursAgo * 3600) * 1000))])
    }

    /// Google revoked two purchases and its RTDNs never reached us: voidedpurchases.list (type 1, paginated) names them.
    /// With a budget of two calls the first run reads one page and applies one void (the rest is logged and left); the
    /// next run applies the other and skips the one done; a voided in-app product and a token not ours change nothing.
    func testTheReconciliationAppliesMissedVoidedPurchasesWithinItsCallBudget() throws {
        let clock = ReceiptsTestClock(), logs = CapturedLogs()
        let d = try reconciliation(budget: 2, clock: clock, logs: logs)
        try fakes.configure(.google, ["voided_page_size": 2])
        let first = try db.newUser(), second = try db.newUser()
        for (user, token) in [(first, "rev-1"), (second, "rev-2")] {
            try setPurchase(token, state: "SUBSCRIPTION_STATE_ACTIVE", expiry: clock.now.addingTimeInterval(20 * 86400),
                            extra: ["latestSuccessfulOrderId": "GPA.\(token)"])
            try d.run("ValidateReceiptJob", googleArgs(user: user, token: token))
            // Revoked in the Play Console: Google no longer entitles.
            try setPurchase(token, state: "SUBSCRIPTION_STATE_EXPIRED", expiry: clock.now.addingTimeInterval(-60),
                            extra: ["latestSuccessfulOrderId": "GPA.\(token)"])
        }
        try voided("rev-1", order: "GPA.rev-1", hoursAgo: 30, clock: clock)
        try voided("rev-2", order: "GPA.rev-2", hoursAgo: 20, clock: clock)
        try voided("not-ours", order: "GPA.x", hoursAgo: 10, clock: clock)
        try voided("inapp-1", order: "GPA.i", hoursAgo: 5, clock: clock, productType: "inapp")

        try d.run("StoreReconciliationJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "rev-1"), "refunded")
        XCTAssertEqual(try db.userStatus(first), "free")
        XCTAssertEqual(try db.subscriptionStatus(key: "rev-2"), "active", "over the budget: left for the next run")
        XCTAssertEqual(try db.userStatus(second), "premium")
        XCTAssertEqual(logs.messages(containing: "call budget").count, 1)

        clock.advance(86_400)
        try d.run("StoreReconciliationJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "rev-2"), "refunded")
        XCTAssertEqual(try db.userStatus(second), "free")
        XCTAssertEqual(try db.events(key: "rev-1"), ["subscription_started", "refunded"], "applied once")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE notification_id LIKE 'reconcile:voided:%'"), 2)
        XCTAssertTrue(try fakes.requests(.google).contains { $0.path.hasSuffix("/purchases/voidedpurchases") && $0.query.contains("type=1") })
    }

    /// A list Google refuses (403: the service account lacks "View financial data") raises the alert and fails the run,
    /// which is retried; nothing is changed.
    func testAVoidedPurchasesListGoogleRefusesIsAlertedAndRetried() throws {
        let clock = ReceiptsTestClock(), logs = CapturedLogs()
        let d = try reconciliation(budget: 10, clock: clock, logs: logs)
        try fakes.script(.google, ["match": ["prefix": "/androidpublisher/v3/applications/com.example.app/purchases/voidedpurchases"],
                                   "status": 403, "json": ["error": ["code": 403, "message": "The current user has insufficient permissions",
                                                                     "status": "PERMISSION_DENIED",
                                                                     "errors": [["reason": "permissionDenied"]]]]])
        XCTAssertThrowsError(try d.run("StoreReconciliationJob", "[]"))
        XCTAssertEqual(logs.alerts, ["RCV-RECONCILE-INCOMPLETE"])
    }

    /// A lost RECOVERED: a row on hold (Google ON_HOLD, user free) is asked again once it has been untouched for a day,
    /// oldest first within the budget, and Google's answer (ACTIVE again) is applied.
    func testRowsOnHoldForADayAreAskedAgainOldestFirstWithinTheBudget() throws {
        let clock = ReceiptsTestClock()
        let d = try reconciliation(budget: 2, clock: clock)  // one voided-list page + one re-check per run
        var users: [String: UUID] = [:]
        for token in ["hold-1", "hold-2"] {
            let user = try db.newUser()
            users[token] = user
            try setPurchase(token, state: "SUBSCRIPTION_STATE_ACTIVE", expiry: clock.now.addingTimeInterval(10 * 86400))
            try d.run("ValidateReceiptJob", googleArgs(user: user, token: token))
            try setPurchase(token, state: "SUBSCRIPTION_STATE_ON_HOLD", expiry: clock.now.addingTimeInterval(-3600))
            try d.run("PlayNotificationJob", rtdn(messageID: "hold-\(token)", type: 5, token: token))
            XCTAssertEqual(try db.subscriptionStatus(key: token), "on_hold")
            // The payment went through; the RECOVERED notification was lost.
            try setPurchase(token, state: "SUBSCRIPTION_STATE_ACTIVE", expiry: clock.now.addingTimeInterval(30 * 86400))
        }
        try db.pool.withConnection { c in
            _ = try c.execute("UPDATE subscriptions SET updated_at = $1 WHERE store_transaction_id = 'hold-2'",
                              [clock.now.addingTimeInterval(-60)])
        }
        // Less than a day on hold: not asked.
        try d.run("StoreReconciliationJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "hold-1"), "on_hold")
        XCTAssertEqual(try db.subscriptionStatus(key: "hold-2"), "on_hold")
        // A day later: the oldest (hold-2) first; the budget leaves hold-1 for the next run.
        clock.advance(86_400 + 60)
        try d.run("StoreReconciliationJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "hold-2"), "active")
        XCTAssertEqual(try db.userStatus(users["hold-2"]!), "premium")
        XCTAssertEqual(try db.subscriptionStatus(key: "hold-1"), "on_hold")
        clock.advance(60)
        try d.run("StoreReconciliationJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "hold-1"), "active")
        XCTAssertEqual(try db.userStatus(users["hold-1"]!), "premium")
        XCTAssertEqual(try db.string("""
            SELECT e.event_data->>'source' AS v FROM subscription_events e JOIN subscriptions s ON s.id = e.subscription_id
            WHERE s.store_transaction_id = 'hold-1' AND e.event_type = 'store_checked'
            """), "store_reconciliation")
    }
}
