import Foundation
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Issue 52 point 2 (review 2026-12-07 M2): App Store notifications about a transaction older than the period the row
/// holds never rewind it, through the real runner (`JobRunnerDriver`), with the Server API configured against the
/// Apple fake (Get All Subscription Statuses served as Apple documents it) and time moved by the test's clock.
extension ReceiptsAppleTests {
    /// One subscription (original transaction 1000000001) crossgraded from monthly to annual: the row holds the annual
    /// period 1000000030 (bought at `start` − 1 day, ends at `heldEnd`); 1000000020 is the past monthly renewal.
    struct HeldAnnualSubscription {
        let driver: JobRunnerDriver
        let clock: ReceiptsTestClock
        let signer: TestAppleSigner
        let user: UUID
        let start: Date
        let heldEnd: Date
        static let original = "1000000001", past = "1000000020", held = "1000000030"
        static let annualProduct = "com.example.premium.annual"

        /// A signed transaction of the subscription (Production).
        func transaction(_ id: String, product: String, purchased: Date, expires: Date, revoked: Date? = nil,
                         revocationType: String? = nil) throws -> String {
            var t: [String: Any] = ["transactionId": id, "originalTransactionId": Self.original, "bundleId": "com.example",
                                    "productId": product, "type": "Auto-Renewable Subscription",
                                    "purchaseDate": TestAppleSigner.ms(purchased),
                                    "originalPurchaseDate": TestAppleSigner.ms(start.addingTimeInterval(-61 * 86400)),
                                    "expiresDate": TestAppleSigner.ms(expires), "environment": "Production",
                                    "appAccountToken": user.uuidString.lowercased(), "signedDate": TestAppleSigner.ms(clock.now)]
            if let revoked {
                t["revocationDate"] = TestAppleSigner.ms(revoked)
                t["revocationReason"] = 0
                t["revocationType"] = revocationType ?? "REFUND_FULL"
            }
            return try signer.sign(t)
        }

        func pastRenewal(revoked: Bool = false, revocationType: String? = nil) throws -> String {
            try transaction(Self.past, product: ReceiptsDatabase.appleProduct, purchased: start.addingTimeInterval(-31 * 86400),
                            expires: start.addingTimeInterval(-86400), revoked: revoked ? clock.now : nil,
                            revocationType: revocationType)
        }

        func heldPeriod(revoked: Date? = nil) throws -> String {
            try transaction(Self.held, product: Self.annualProduct, purchased: start.addingTimeInterval(-86400), expires: heldEnd,
                            revoked: revoked)
        }

        /// What Get All Subscription Statuses answers for the subscription from now on.
        func serveStatuses(latest: String, status: Int, autoRenew: Int = 1, with fakes: FakeServers) throws {
            try fakes.admin(.apple, "POST", "apple/subscriptions", json: ["transaction_id": Self.original, "response": [
                "environment": "Production", "bundleId": "com.example", "appAppleId": 1234,
                "data": [["subscriptionGroupIdentifier": "g", "lastTransactions": [[
                    "originalTransactionId": Self.original, "status": status, "signedTransactionInfo": latest,
                    "signedRenewalInfo": try signer.sign(["originalTransactionId": Self.original, "autoRenewStatus": autoRenew,
                                                          "autoRenewProductId": Self.annualProduct, "environment": "Production",
                                                          "signedDate": TestAppleSigner.ms(clock.now)]),
                ]]]]]])
        }

        /// The body Apple posts (ResponseBodyV2), signed now by the clock; `status` nil leaves `data.status` out.
        func notification(_ type: String, subtype: String? = nil, uuid: String = UUID().uuidString, transaction: String,
                          status: Int?) throws -> String {
            var data: [String: Any] = ["bundleId": "com.example", "environment": "Production", "appAppleId": 1234,
                                       "signedTransactionInfo": transaction]
            if let status { data["status"] = status }
            var payload: [String: Any] = ["notificationType": type, "notificationUUID": uuid, "data": data, "version": "2.0",
                                          "signedDate": TestAppleSigner.ms(clock.now)]
            if let subtype { payload["subtype"] = subtype }
            return jsonString([["signedPayload": try signer.sign(payload)]])
        }
    }

    func heldAnnualSubscription() throws -> HeldAnnualSubscription {
        let clock = ReceiptsTestClock(), signer = try TestAppleSigner()
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: try serverAPIConfiguration(root: signer.rootDER),
                                                                            http: http, now: { clock.now }))
        let annualPlan = try fixture.pool.withConnection { c in
            try c.queryFirst("""
                INSERT INTO subscription_plans (app_id, name, plan_type, apple_product_id, google_product_id, price)
                VALUES ($1, 'Premium annual', 'annual', $2, 'premium_annual', 39.99) RETURNING id
                """, [db.appID, HeldAnnualSubscription.annualProduct])!.uuid("id")
        }
        let s = HeldAnnualSubscription(driver: fixture.driver(registry), clock: clock, signer: signer, user: try db.newUser(),
                                       start: clock.now, heldEnd: clock.now.addingTimeInterval(364 * 86400))
        // The app posts its current (annual) transaction; Apple's statuses name it as the subscription's latest.
        try fakes.admin(.apple, "POST", "apple/transactions", json: ["transaction_id": HeldAnnualSubscription.held,
                                                                      "signedTransactionInfo": try s.heldPeriod()])
        try s.serveStatuses(latest: try s.heldPeriod(), status: 1, with: fakes)
        try s.driver.run("ValidateReceiptJob", jsonString([[
            "user_id": s.user.uuidString, "app_id": db.appID.uuidString, "plan_id": annualPlan.uuidString, "store": "apple",
            "receipt_data": "unused", "transaction_id": HeldAnnualSubscription.held]]))
        XCTAssertEqual(try heldRow(), "active|\(HeldAnnualSubscription.annualProduct)|annual|annual|\(TestAppleSigner.ms(s.heldEnd))")
        XCTAssertEqual(try db.userStatus(s.user), "premium")
        return s
    }

    /// Status, product, plan type (the row's, then its plan's) and end date (ms) of the subscription row, in one string.
    func heldRow() throws -> String? {
        try db.string("""
            SELECT s.status || '|' || s.store_product_id || '|' || s.plan_type || '|' || p.plan_type || '|'
                   || (extract(epoch FROM s.end_date) * 1000)::bigint AS v
            FROM subscriptions s JOIN subscription_plans p ON p.id = s.plan_id WHERE s.store_transaction_id = $1
            """, [HeldAnnualSubscription.original])
    }

    /// Get All Subscription Statuses requests the Apple fake answered for the subscription.
    func statusesReads() throws -> Int {
        try fakes.requests(.apple).filter { $0.path == "/inApps/v1/subscriptions/\(HeldAnnualSubscription.original)" }.count
    }

    /// Every Apple type (and subtype) whose `signedTransactionInfo` can name a past renewal — any type that carries an
    /// auto-renewable subscription's transaction, since Apple retries a notification for days and the refund family
    /// names the disputed transaction (AppleNotificationRecency) — delivered about the past monthly renewal while the
    /// row holds the annual period, signed later than anything the row has seen: the row's status, product, plan and
    /// end date stay, the user keeps premium, and the notification's event is recorded as a past transaction's.
    /// Left out: TEST, RENEWAL_EXTENSION (SUMMARY, FAILURE), EXTERNAL_PURCHASE_TOKEN (no subscription transaction) and
    /// ONE_TIME_CHARGE (no one-time products are sold).
    func testNotificationsAboutAPastRenewalRecordTheirEventAndNeverRewindThePeriod() throws {
        let s = try heldAnnualSubscription()
        let held = try heldRow()
        let readsAfterValidation = try statusesReads()
        s.clock.advance(40 * 86400)
        let table: [(type: String, subtype: String?, status: Int?, revoked: String?)] = [
            ("DID_RENEW", nil, 1, nil), ("DID_RENEW", "BILLING_RECOVERY", 1, nil),
            ("REFUND", nil, 1, "REFUND_FULL"), ("REFUND", nil, 1, "REFUND_PRORATED"), ("REFUND", nil, 2, "REFUND_FULL"),
            ("REFUND_REVERSED", nil, 1, nil), ("REFUND_REVERSED", nil, nil, nil), ("REFUND_DECLINED", nil, 1, nil),
            ("CONSUMPTION_REQUEST", nil, 1, nil), ("RENEWAL_EXTENDED", nil, 1, nil),
            ("PRICE_INCREASE", "PENDING", 1, nil), ("PRICE_INCREASE", "ACCEPTED", 1, nil),
            ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", 1, nil), ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", 1, nil),
            ("DID_CHANGE_RENEWAL_PREF", "UPGRADE", 1, nil), ("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", 1, nil),
            ("DID_CHANGE_RENEWAL_PREF", nil, 1, nil),
            ("OFFER_REDEEMED", nil, 1, nil), ("OFFER_REDEEMED", "UPGRADE", 1, nil), ("OFFER_REDEEMED", "DOWNGRADE", 1, nil),
            ("SUBSCRIBED", "INITIAL_BUY", 1, nil), ("SUBSCRIBED", "RESUBSCRIBE", 1, nil),
            ("DID_FAIL_TO_RENEW", "GRACE_PERIOD", 4, nil), ("DID_FAIL_TO_RENEW", nil, 3, nil),
            ("EXPIRED", "VOLUNTARY", 2, nil), ("EXPIRED", "BILLING_RETRY", 2, nil), ("EXPIRED", "PRICE_INCREASE", 2, nil),
            ("EXPIRED", "PRODUCT_NOT_FOR_SALE", 2, nil), ("GRACE_PERIOD_EXPIRED", nil, 2, nil),
            ("REVOKE", nil, 5, "FAMILY_REVOKE"),
        ]
        for row in table {
            let name = "\(row.type) \(row.subtype ?? "-") status \(row.status.map(String.init) ?? "none")"
            let uuid = UUID().uuidString
            s.clock.advance(3600)
            try s.driver.run("AppStoreNotificationJob", try s.notification(row.type, subtype: row.subtype, uuid: uuid,
                                                                           transaction: try s.pastRenewal(revoked: row.revoked != nil,
                                                                                                          revocationType: row.revoked),
                                                                           status: row.status))
            XCTAssertEqual(try heldRow(), held, name)
            XCTAssertEqual(try db.userStatus(s.user), "premium", name)
            // An immediate upgrade may start a shorter period: Apple's statuses decide (they name the annual one).
            let expected = row.subtype == "UPGRADE" ? "applied_from' = 'get_all_subscription_statuses" : "scope' = 'past_transaction"
            XCTAssertEqual(try db.scalar("""
                SELECT count(*) FROM subscription_events WHERE idempotency_key = $1
                   AND event_data->>'transaction_id' = $2 AND event_data->>'notification_type' = $3
                   AND event_data->>'\(expected)'
                """, ["apple:notification:\(uuid)", HeldAnnualSubscription.past, row.type]), 1, name)
        }
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM store_notifications WHERE outcome NOT IN ('stale', 'ignored') AND subtype IS DISTINCT FROM 'UPGRADE'
            """), 0)
        XCTAssertEqual(try statusesReads(), readsAfterValidation + 2, "only the two UPGRADE rows read Apple's statuses")
    }

    /// The current annual period refunded on day 40 (revoked: user free), the refund reversed on day 50: the reversal's
    /// transaction is not the period the row holds (that one ended at the revocation), so Get All Subscription
    /// Statuses is read and the period is reinstated (active, annual, its own end date, premium). A renewal-status
    /// change without `data.status` is applied from the statuses too.
    func testARefundReversedOfTheCurrentRevokedPeriodReinstatesItFromTheStatuses() throws {
        let s = try heldAnnualSubscription()
        let held = try heldRow()
        s.clock.advance(40 * 86400)
        let revokedAt = s.clock.now
        let revoked = try s.heldPeriod(revoked: revokedAt)
        try s.serveStatuses(latest: revoked, status: 5, with: fakes)
        try s.driver.run("AppStoreNotificationJob", try s.notification("REFUND", transaction: revoked, status: 5))
        XCTAssertEqual(try heldRow(), "refunded|\(HeldAnnualSubscription.annualProduct)|annual|annual|\(TestAppleSigner.ms(revokedAt))")
        XCTAssertEqual(try db.userStatus(s.user), "free")

        s.clock.advance(10 * 86400)
        let reinstated = try s.heldPeriod()
        try s.serveStatuses(latest: reinstated, status: 1, with: fakes)
        let uuid = UUID().uuidString
        try s.driver.run("AppStoreNotificationJob", try s.notification("REFUND_REVERSED", uuid: uuid, transaction: reinstated, status: 1))
        XCTAssertEqual(try heldRow(), held)
        XCTAssertEqual(try db.userStatus(s.user), "premium")
        XCTAssertEqual(try db.string("SELECT cancelled_at::text AS v FROM subscriptions WHERE store_transaction_id = $1",
                                     [HeldAnnualSubscription.original]), nil)
        XCTAssertEqual(try db.string("""
            SELECT event_type || '|' || (event_data->>'applied_from') AS v FROM subscription_events WHERE idempotency_key = $1
            """, ["apple:notification:\(uuid)"]), "refund_reversed|get_all_subscription_statuses")
        XCTAssertEqual(try statusesReads(), 2, "the validation's read, then the reversal's")

        // No data.status: Apple's statuses say auto-renew is off.
        s.clock.advance(86400)
        try s.serveStatuses(latest: reinstated, status: 1, autoRenew: 0, with: fakes)
        let noStatus = UUID().uuidString
        try s.driver.run("AppStoreNotificationJob", try s.notification("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED",
                                                                       uuid: noStatus, transaction: reinstated, status: nil))
        XCTAssertEqual(try heldRow(), held)
        XCTAssertEqual(try db.string("""
            SELECT event_type || '|' || (event_data->>'applied_from') AS v FROM subscription_events WHERE idempotency_key = $1
            """, ["apple:notification:\(noStatus)"]), "auto_renew_disabled|get_all_subscription_statuses")
        XCTAssertEqual(try statusesReads(), 3)
        XCTAssertEqual(try db.string("SELECT auto_renew::text AS v FROM subscriptions WHERE store_transaction_id = $1",
                                     [HeldAnnualSubscription.original]), "false")
    }

    /// An immediate upgrade to a product with a shorter period (annual → monthly, "effect immediately, starting a new
    /// billing period"): its transaction ends before the row's end date, yet Apple's statuses name it as the latest,
    /// so it is applied (monthly product and plan, its own end date) rather than taken for a past transaction.
    func testAnUpgradeToAShorterPeriodIsAppliedFromTheStatuses() throws {
        let s = try heldAnnualSubscription()
        s.clock.advance(40 * 86400)
        let upgradeEnd = s.clock.now.addingTimeInterval(30 * 86400)
        let upgrade = try s.transaction("1000000040", product: ReceiptsDatabase.appleProduct, purchased: s.clock.now,
                                        expires: upgradeEnd)
        try s.serveStatuses(latest: upgrade, status: 1, with: fakes)
        try s.driver.run("AppStoreNotificationJob", try s.notification("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE",
                                                                       transaction: upgrade, status: 1))
        XCTAssertEqual(try heldRow(), "active|\(ReceiptsDatabase.appleProduct)|monthly|monthly|\(TestAppleSigner.ms(upgradeEnd))")
        XCTAssertEqual(try db.userStatus(s.user), "premium")
    }
}
