import _CryptoExtras
import Foundation
import WorkersHTTP
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// L1: before the expiry sweep turns a *renewing* subscription `expired` (and its user `free`), it asks the store —
/// Google `subscriptionsv2.get`, Apple verifyReceipt with the stored receipt (or Get All Subscription Statuses with
/// Server API credentials) — and applies the answer; with no store to ask the row stays and an alert fires one hour
/// past its window. Time moves by placing the rows' `end_date` in the past, never by sleeping; the sweep runs
/// through the real `JobRunner` (`JobRunnerDriver`).
final class ReceiptsExpirySweepTests: ReceiptsTestCase {
    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "receipts_test", fakes: .own([.apple, .google])) }

    func driver(_ c: ReceiptsConfiguration, logs: CapturedLogs? = nil) throws -> JobRunnerDriver {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: c, http: http))
        return JobRunnerDriver(registry: registry, database: fixture.jobDatabase, logger: logs?.logger(label: "sweep-test"))
    }

    func setGooglePurchase(_ token: String, state: String, expiry: Date) throws {
        try fakes.admin(.google, "POST", "google/subscriptions", json: [
            "token": token, "subscriptionState": state, "productId": ReceiptsDatabase.googleProduct,
            "expiryTime": ISO8601DateFormatter().string(from: expiry)])
    }

    /// Our row's period ended `days` ago (a lost RENEWED / DID_RENEW: the store renewed, we were not told).
    func endPeriod(key: String, daysAgo days: Double) throws {
        let changed = try db.pool.withConnection { c in
            try c.execute("""
                UPDATE subscriptions SET end_date = now() - make_interval(secs => $2), grace_period_end = NULL
                WHERE store_transaction_id = $1
                """, [key, days * 86400])
        }
        XCTAssertEqual(changed, 1)
    }

    func endDays(key: String) throws -> Int {
        try db.scalar("SELECT round(extract(epoch FROM end_date - now()) / 86400)::int FROM subscriptions WHERE store_transaction_id = $1",
                      [key])
    }

    func testGoogleRenewalTheSweepWasNotToldAboutIsAskedAndKept() throws {
        let c = try googleConfiguration(appleConfiguration())
        let d = try driver(c)
        let user = try db.newUser()
        try setGooglePurchase("renew-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(20 * 86400))
        try d.run("ValidateReceiptJob", jsonString([["user_id": user.uuidString, "app_id": db.appID.uuidString,
                                                     "plan_id": db.planID.uuidString, "store": "google",
                                                     "package_name": "com.example.app", "product_id": ReceiptsDatabase.googleProduct,
                                                     "purchase_token": "renew-1"]]))
        // Four days past our end (Google's 3-day window over); Google renewed it for 26 more days.
        try endPeriod(key: "renew-1", daysAgo: 4)
        try setGooglePurchase("renew-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(26 * 86400))
        try d.run("SubscriptionExpirySweepJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "renew-1"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try endDays(key: "renew-1"), 26)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscription_events WHERE event_type = 'store_checked'"), 1)

        // Later Google says it expired: the sweep applies that, and the user is free.
        try endPeriod(key: "renew-1", daysAgo: 4)
        try setGooglePurchase("renew-1", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: Date().addingTimeInterval(-4 * 86400))
        try d.run("SubscriptionExpirySweepJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "renew-1"), "expired")
        XCTAssertEqual(try db.userStatus(user), "free")
    }

    func testAppleWithoutServerAPICredentialsRevalidatesTheStoredReceipt() throws {
        let c = appleConfiguration()
        let d = try driver(c)
        let user = try db.newUser()
        let ms = { (d: Date) in String(Int64(d.timeIntervalSince1970 * 1000)) }
        func register(expires: Date) throws {
            try fakes.admin(.apple, "POST", "apple/receipts", json: [
                "receipt-data": "receipt-s", "status": 0, "environment": "Production",
                "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "1000000077",
                                         "original_transaction_id": "1000000077",
                                         "purchase_date_ms": ms(expires.addingTimeInterval(-30 * 86400)), "expires_date_ms": ms(expires)]],
                "pending_renewal_info": [["original_transaction_id": "1000000077", "auto_renew_status": "1"]],
            ])
        }
        try register(expires: Date().addingTimeInterval(10 * 86400))
        try d.run("ValidateReceiptJob", jsonString([["user_id": user.uuidString, "app_id": db.appID.uuidString,
                                                     "plan_id": db.planID.uuidString, "store": "apple",
                                                     "receipt_data": "receipt-s", "transaction_id": "1000000077"]]))
        // 20 days past our end (Apple's 16-day window over): Apple's receipt now holds a renewal to +12 days.
        try endPeriod(key: "1000000077", daysAgo: 20)
        try register(expires: Date().addingTimeInterval(12 * 86400))
        try d.run("SubscriptionExpirySweepJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000077"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try endDays(key: "1000000077"), 12)
    }

    func testARenewingRowNoStoreCanConfirmStaysAndIsAlertedAfterAnHour() throws {
        let logs = CapturedLogs()
        let d = try driver(appleConfiguration(), logs: logs)  // Google not configured on this worker
        let user = try db.newUser()
        let app = db.appID, plan = db.planID
        // Google's window (3 days) ended 30 minutes ago: no alert yet.
        let id = try db.pool.withConnection { c in
            try c.queryFirst("""
                INSERT INTO subscriptions (app_id, user_id, plan_id, plan_type, status, start_date, end_date, auto_renew,
                                           store, store_product_id, store_transaction_id)
                VALUES ($1, $2, $3, 'monthly', 'active', now() - interval '40 days',
                        now() - interval '3 days 30 minutes', true, 'google', $4, 'unasked-1') RETURNING id
                """, [app, user, plan, ReceiptsDatabase.googleProduct])!.uuid("id")
        }
        try db.pool.withConnection { c in
            _ = try c.execute("UPDATE users SET status = 'premium', subscription_id = $2 WHERE id = $1", [user, id])
        }
        try d.run("SubscriptionExpirySweepJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "unasked-1"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(logs.alerts, [])
        // An hour and a half past the window: still kept, now alerted (every run until a store settles it).
        try endPeriod(key: "unasked-1", daysAgo: 3 + 1.5 / 24)
        try d.run("SubscriptionExpirySweepJob", "[]")
        XCTAssertEqual(try db.subscriptionStatus(key: "unasked-1"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(logs.alerts, ["RCV-EXPIRY-UNCONFIRMED"])
        XCTAssertFalse(logs.all.contains { $0.description.contains("unasked-1") }, "the purchase token is not logged")
    }
}
