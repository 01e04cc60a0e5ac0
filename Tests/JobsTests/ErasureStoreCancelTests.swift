import Foundation
@testable import WorkersAppJobs
import Logging
import WorkersMail
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// The erasure ends the store subscription (issue 52 point 1, review 2026-12-07 H1; docs/jobs-privacy.md, "The store
/// subscription"): Google cancels owed in the request's and the erasure's transactions and paid by
/// `GoogleAcknowledgementSweepJob` until `subscriptionsv2.get` shows no further renewal; an Apple renewal on a row an
/// erasure detached alerts once. Real PostgreSQL, Redis database 87, the Apple and Google fakes; every job through the
/// runner (`JobRunnerDriver`); time moved by the test's clock (`ReceiptServices.now`), never slept on.
final class ErasureStoreCancelTests: ReceiptsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "erasure_cancel_test", redis: 87, fakes: .own([.apple, .google]))
    }

    /// The receipt jobs' clock: stands still until the test moves it (`advance`, or `syncClock` after rows were owed
    /// at PostgreSQL's `now()`), so whether a row is due never depends on how long the test took.
    final class TestClock: @unchecked Sendable {
        private let lock = NSLock()
        private var current = Date()
        var now: Date { lock.withLock { current } }
        func advance(_ seconds: TimeInterval) { lock.withLock { current = current.addingTimeInterval(seconds) } }
        func catchUp(to date: Date) { lock.withLock { current = max(current, date) } }
    }

    let clock = TestClock()

    /// Moves the clock up to PostgreSQL's `now()` (a transaction after the one that owed the rows), so what was
    /// just owed is due; never backwards.
    func syncClock() throws {
        clock.catchUp(to: try pool.withConnection { try $0.queryFirst("SELECT now() AS t")!.date("t") })
    }
    let logs = CapturedLogs()
    static let stopPayments = "DEVELOPER_REQUESTED_STOP_PAYMENTS"
    static let stopRenewals = "USER_REQUESTED_STOP_RENEWALS"

    /// The receipt jobs (Google against the fake, Apple signed data under `appleRoot`) and the privacy jobs, as one
    /// worker registers them, run by the runner with its log captured in `logs`.
    func driver(appleRoot: [UInt8]? = nil) throws -> JobRunnerDriver {
        var c = try googleConfiguration(appleRoot.map { appleConfiguration(roots: [$0]) } ?? ReceiptsConfiguration())
        c.requestTimeout = .seconds(2)
        var registry = JobRegistry()
        let clock = self.clock
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: c, http: http, now: { clock.now }))
        let privacy = try PrivacyConfiguration(
            storageDirectory: FileManager.default.temporaryDirectory.appendingPathComponent("erasure-cancel-\(UUID().uuidString)"),
            urlBase: "https://downloads.example.test/privacy/exports",
            signingSecret: Data("test-signing-secret-0123456789-abcdefghijklmnop".utf8),
            smtp: SMTPConfiguration(host: "127.0.0.1", port: 9, security: .none, connectTimeout: .seconds(1), timeout: .seconds(1)),
            mailFrom: EmailAddress("privacy@example.test", name: "Privacy Team"))
        PrivacyJobs.register(into: &registry, configuration: privacy, redis: redis.pool)
        return JobRunnerDriver(registry: registry, database: fixture.jobDatabase, logger: logs.logger(label: "erasure-cancel"))
    }

    func setPurchase(_ token: String, state: String = "SUBSCRIPTION_STATE_ACTIVE", extra: [String: Any] = [:]) throws {
        try fakes.admin(.google, "POST", "google/subscriptions", json: [
            "token": token, "subscriptionState": state, "productId": ReceiptsDatabase.googleProduct,
            "expiryTime": ISO8601DateFormatter().string(from: Date().addingTimeInterval(30 * 86400))].merging(extra) { $1 })
    }

    /// A user whose Google purchase `token` (ACTIVE at Google) was validated and acknowledged by the real job.
    func googleSubscriber(_ token: String, driver d: JobRunnerDriver) throws -> UUID {
        let user = try db.newUser()
        try setPurchase(token)
        try d.run("ValidateReceiptJob", jsonString([[
            "user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString, "store": "google",
            "package_name": "com.example.app", "product_id": ReceiptsDatabase.googleProduct, "purchase_token": token]]))
        XCTAssertEqual(try db.subscriptionStatus(key: token), "active")
        return user
    }

    /// A deletion request as the Auth Service records it, due now (`due`) or in 20 days.
    func deletionRequest(_ user: UUID, due: Bool = true) throws -> UUID {
        try pool.withConnection { c in
            let at = due ? "now() - interval '1 minute'" : "now() + interval '20 days'"
            try c.execute("UPDATE users SET delete_requested = true, delete_scheduled_at = \(at) WHERE id = $1", [user])
            return try c.queryFirst("""
                INSERT INTO deletion_requests (user_id, requested_at, scheduled_at)
                VALUES ($1, now() - interval '8 days', \(at)) RETURNING id
                """, [user])!.uuid("id")
        }
    }

    func erase(_ user: UUID, _ request: UUID, _ d: JobRunnerDriver) throws {
        try d.run(AccountDeletionJob.className, PrivacyJobs.deletionJob(userID: user, requestID: request).args)
        try syncClock()
    }

    func sweep(_ d: JobRunnerDriver) throws { try d.run("GoogleAcknowledgementSweepJob", "[]") }

    /// Cancels the fake accepted, per token, with their `cancellationType`.
    func cancels() throws -> [String: [String]] {
        try fakes.admin(.google, "GET", "google/cancellations")["cancellations"] as? [String: [String]] ?? [:]
    }

    func cancelPath(_ token: String) -> String {
        "/androidpublisher/v3/applications/com.example.app/purchases/subscriptionsv2/tokens/\(token):cancel"
    }

    /// Cancel requests that reached the fake for `token` (scripted answers included).
    func cancelRequests(_ token: String) throws -> Int { try fakes.requests(.google, path: cancelPath(token)).count }

    /// The request's rows: "<kind>:<outcome or owed>:<token kept?>", sorted.
    func rows(_ request: UUID) throws -> [String] {
        try pool.withConnection { c in
            try c.query("""
                SELECT kind || ':' || COALESCE(outcome, 'owed') || ':' ||
                       CASE WHEN purchase_token IS NULL THEN 'no-token' ELSE 'token' END AS v
                FROM google_cancellations WHERE request_id = $1 ORDER BY 1
                """, [request]).map { try $0.string("v") }
        }
    }

    /// `details.google_cancellations` of the erasure's audit entry (counts by outcome), as JSON text.
    func auditOutcome(_ request: UUID) throws -> String? {
        try db.string("""
            SELECT (details -> 'google_cancellations')::text AS v FROM audit_logs
            WHERE action = 'account_deleted' AND details ->> 'request_id' = $1::text
            """, [request])
    }

    // MARK: - Google

    /// Erasing a user with an ACTIVE Google purchase owes one DEVELOPER_REQUESTED_STOP_PAYMENTS cancel in the erasure's
    /// transaction; the sweep sends it once, reads Google again, settles the row and drops the token; the audit entry
    /// counts the outcome (never the token). A second sweep sends nothing.
    func testErasureCancelsAnActiveGooglePurchaseOnceAndDropsTheTokenOnceGoogleShowsNoRenewal() throws {
        let d = try driver()
        let user = try googleSubscriber("gc-active-1", driver: d)
        let request = try deletionRequest(user)
        try erase(user, request, d)
        XCTAssertEqual(try rows(request), ["stop_payments:owed:token"], "owed with the erasure's commit")
        XCTAssertEqual(try auditOutcome(request), #"{"owed": 1}"#)
        XCTAssertEqual(try cancels(), [:], "nothing sent inside the transaction")

        try sweep(d)
        XCTAssertEqual(try cancels(), ["gc-active-1": [Self.stopPayments]])
        XCTAssertEqual(try rows(request), ["stop_payments:cancelled:no-token"])
        XCTAssertEqual(try auditOutcome(request), #"{"cancelled": 1}"#)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM google_cancellations WHERE purchase_token = 'gc-active-1'"), 0)
        clock.advance(3 * 3600)
        try sweep(d)
        XCTAssertEqual(try cancelRequests("gc-active-1"), 1, "settled: never sent again")
        XCTAssertEqual(try db.string("SELECT details::text AS v FROM audit_logs WHERE action = 'account_deleted'")?
            .contains("gc-active-1"), false)
    }

    /// 403 (the service account lacks order management) raises RCV-GOOGLE-CANCEL-FORBIDDEN on the first attempt and
    /// keeps the row owed with its token; once the permission is granted a later sweep settles it.
    func testForbiddenCancelAlertsAtOnceAndKeepsTheRowOwed() throws {
        let d = try driver()
        let user = try googleSubscriber("gc-forbidden-1", driver: d)
        let request = try deletionRequest(user)
        try erase(user, request, d)
        try fakes.script(.google, ["match": ["path": cancelPath("gc-forbidden-1")], "google_error": "permissionDenied"])
        try sweep(d)
        XCTAssertEqual(logs.alerts.filter { $0 == GoogleCanceller.forbiddenAlert }.count, 1, "alerted at once")
        XCTAssertEqual(try rows(request), ["stop_payments:owed:token"])
        XCTAssertEqual(try db.string("SELECT last_error AS v FROM google_cancellations WHERE request_id = $1", [request])?
            .contains("403"), true)
        XCTAssertEqual(try auditOutcome(request), #"{"owed": 1}"#)

        clock.advance(2 * 60 + 1)
        try sweep(d)
        XCTAssertEqual(try rows(request), ["stop_payments:cancelled:no-token"])
        XCTAssertEqual(try cancels(), ["gc-forbidden-1": [Self.stopPayments]])
        for entry in logs.all {
            XCTAssertFalse(entry.message.contains("gc-forbidden-1") || entry.metadata.values.contains { $0.contains("gc-forbidden-1") },
                           "the raw token is never logged: \(entry)")
        }
    }

    /// 503 keeps the row owed and backs off (not due again before the back-off, by the test's clock); the next attempt
    /// after it succeeds and settles.
    func testUnavailableCancelIsRetriedAfterTheBackOffThenSettles() throws {
        let d = try driver()
        let user = try googleSubscriber("gc-503-1", driver: d)
        let request = try deletionRequest(user)
        try erase(user, request, d)
        try fakes.script(.google, ["match": ["path": cancelPath("gc-503-1")], "google_error": "unavailable"])
        try sweep(d)
        XCTAssertEqual(try rows(request), ["stop_payments:owed:token"])
        XCTAssertEqual(try cancelRequests("gc-503-1"), 1)
        try sweep(d)
        XCTAssertEqual(try cancelRequests("gc-503-1"), 1, "not due again before the back-off")
        clock.advance(61)
        try sweep(d)
        XCTAssertEqual(try cancelRequests("gc-503-1"), 2)
        XCTAssertEqual(try rows(request), ["stop_payments:cancelled:no-token"])
        XCTAssertEqual(try cancels(), ["gc-503-1": [Self.stopPayments]])
    }

    /// Google's 200 alone settles nothing: a cancel answered 200 while `subscriptionsv2.get` still shows ACTIVE (an
    /// answer that did not take effect) keeps the row owed with its token, and the next attempt settles it.
    func testAnAcceptedCancelSettlesOnlyWhenGoogleShowsNoFurtherRenewal() throws {
        let d = try driver()
        let user = try googleSubscriber("gc-reread-1", driver: d)
        let request = try deletionRequest(user)
        try erase(user, request, d)
        try fakes.script(.google, ["match": ["path": cancelPath("gc-reread-1")], "status": 200, "body": "{}"])
        try sweep(d)
        XCTAssertEqual(try cancelRequests("gc-reread-1"), 1)
        XCTAssertEqual(try rows(request), ["stop_payments:owed:token"], "Google still shows ACTIVE")
        clock.advance(61)
        try sweep(d)
        XCTAssertEqual(try rows(request), ["stop_payments:cancelled:no-token"])
        XCTAssertEqual(try cancels(), ["gc-reread-1": [Self.stopPayments]])
    }

    /// A `linkedPurchaseToken` chain (A replaced by B, B by C) whose older rows our table still shows active: only the
    /// latest token is cancelled; Google's state settles the older ones without a call.
    func testOnlyTheLatestTokenOfALinkedChainIsCancelled() throws {
        let d = try driver()
        let user = try db.newUser()
        let replaced: [String: Any] = ["canceledStateContext": ["replacementCancellation": [String: Any]()]]
        try setPurchase("gc-chain-a", state: "SUBSCRIPTION_STATE_CANCELED", extra: replaced)
        try setPurchase("gc-chain-b", state: "SUBSCRIPTION_STATE_CANCELED",
                        extra: replaced.merging(["linkedPurchaseToken": "gc-chain-a"]) { $1 })
        try setPurchase("gc-chain-c", extra: ["linkedPurchaseToken": "gc-chain-b"])
        try pool.withConnection { c in
            for token in ["gc-chain-a", "gc-chain-b", "gc-chain-c"] {
                try c.execute("""
                    INSERT INTO subscriptions (app_id, user_id, plan_id, plan_type, status, start_date, store,
                                               store_product_id, store_transaction_id, store_original_transaction_id)
                    VALUES ($1, $2, $3, 'monthly', 'active', now() - interval '60 days', 'google', $4, $5, $5)
                    """, [db.appID, user, db.planID, ReceiptsDatabase.googleProduct, token])
            }
        }
        let request = try deletionRequest(user)
        try erase(user, request, d)
        XCTAssertEqual(try rows(request).count, 3, "our table alone cannot tell the chain")
        try sweep(d)
        XCTAssertEqual(try cancels(), ["gc-chain-c": [Self.stopPayments]])
        XCTAssertEqual(try cancelRequests("gc-chain-a") + cancelRequests("gc-chain-b"), 0)
        XCTAssertEqual(try rows(request), ["stop_payments:already_ended:no-token", "stop_payments:already_ended:no-token",
                                           "stop_payments:cancelled:no-token"])
        XCTAssertEqual(try auditOutcome(request), #"{"cancelled": 1, "already_ended": 2}"#)
    }

    /// The request stops renewals (USER_REQUESTED_STOP_RENEWALS, restorable by the user); a request withdrawn before
    /// the call settles its row `withdrawn` with no call; one withdrawn after it is not undone by us (only the user can
    /// restore it in the Play Store); the erasure of a user whose renewals were stopped still stops payments (the
    /// subscription could otherwise be restored after the erasure).
    func testTheRequestStopsRenewalsAWithdrawalBeforeTheCallSendsNoneAndTheErasureStopsPayments() throws {
        let d = try driver()
        let withdrawing = try googleSubscriber("gc-req-withdrawn", driver: d)
        let staying = try googleSubscriber("gc-req-staying", driver: d)
        let withdrawnRequest = try deletionRequest(withdrawing, due: false)
        let stayingRequest = try deletionRequest(staying, due: false)
        for (user, request) in [(withdrawing, withdrawnRequest), (staying, stayingRequest)] {
            try d.run(DeletionRequestedJob.Arguments.className, PrivacyJobs.deletionRequestedJob(userID: user, requestID: request).args)
        }
        try syncClock()
        XCTAssertEqual(try rows(withdrawnRequest), ["stop_renewals:owed:token"])
        try pool.withConnection { c in
            try c.execute("UPDATE deletion_requests SET cancelled_at = now() WHERE id = $1", [withdrawnRequest])
            try c.execute("UPDATE users SET delete_requested = false WHERE id = $1", [withdrawing])
        }
        try sweep(d)
        XCTAssertEqual(try rows(withdrawnRequest), ["stop_renewals:withdrawn:no-token"])
        XCTAssertEqual(try cancelRequests("gc-req-withdrawn"), 0, "withdrawn before the call: nothing sent")
        XCTAssertEqual(try cancels(), ["gc-req-staying": [Self.stopRenewals]])
        XCTAssertEqual(try rows(stayingRequest), ["stop_renewals:cancelled:no-token"])

        // Due now: the erasure owes STOP_PAYMENTS although Google shows CANCELED (restorable until it expires).
        try pool.withConnection { _ = try $0.execute("UPDATE deletion_requests SET scheduled_at = now() - interval '1 minute' WHERE id = $1", [stayingRequest]) }
        try erase(staying, stayingRequest, d)
        try sweep(d)
        XCTAssertEqual(try cancels(), ["gc-req-staying": [Self.stopRenewals, Self.stopPayments]])
        XCTAssertEqual(try rows(stayingRequest), ["stop_payments:cancelled:no-token", "stop_renewals:cancelled:no-token"])
    }

    /// The daily DueDeletionSweepJob owes the stop_renewals of an open request whose DeletionRequestedJob never ran,
    /// once per subscription and request: a user who restores the subscription in the Play Store afterwards is not
    /// cancelled again by the next day's sweep.
    func testTheDailySweepStopsRenewalsOfARequestOnceAndNotAgainAfterTheUserRestores() throws {
        let d = try driver()
        let user = try googleSubscriber("gc-sweep-1", driver: d)
        let request = try deletionRequest(user, due: false)
        try d.run(DueDeletionSweepJob.className, "[]")
        try syncClock()
        XCTAssertEqual(try rows(request), ["stop_renewals:owed:token"])
        try sweep(d)
        XCTAssertEqual(try cancels(), ["gc-sweep-1": [Self.stopRenewals]])
        try setPurchase("gc-sweep-1")  // the user restored it in the Play Store: ACTIVE and renewing again
        try d.run(DueDeletionSweepJob.className, "[]")
        try syncClock()
        clock.advance(3600)
        try sweep(d)
        XCTAssertEqual(try rows(request), ["stop_renewals:cancelled:no-token"], "owed once per request")
        XCTAssertEqual(try cancelRequests("gc-sweep-1"), 1)
    }

    // MARK: - Apple

    /// Apple has no server-side cancel: a DID_RENEW landing on a row an erasure detached raises
    /// RCV-RENEWAL-AFTER-ERASURE once, not per renewal; a renewal before the erasure raises nothing. The erasure's audit
    /// entry counts the live Apple subscription the user had to cancel themselves.
    func testAnAppleRenewalOnAnErasedUsersRowAlertsOnce() throws {
        let signer = try TestAppleSigner()
        let d = try driver(appleRoot: signer.rootDER)
        let user = try db.newUser()
        let ms = { (date: Date) in String(Int64(date.timeIntervalSince1970 * 1000)) }
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "zq-apple-receipt", "status": 0, "environment": "Production",
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "75000001",
                                     "original_transaction_id": "75000001",
                                     "purchase_date_ms": ms(Date().addingTimeInterval(-86400)),
                                     "expires_date_ms": ms(Date().addingTimeInterval(20 * 86400)), "is_trial_period": "false"]],
            "pending_renewal_info": [["original_transaction_id": "75000001", "auto_renew_status": "1"]],
        ])
        try d.run("ValidateReceiptJob", jsonString([["user_id": user.uuidString.lowercased(), "app_id": db.appID.uuidString,
                                                     "plan_id": db.planID.uuidString, "store": "apple",
                                                     "receipt_data": "zq-apple-receipt", "transaction_id": "75000001"]]))
        var renewal = 1
        func didRenew() throws {
            renewal += 1
            let now = Date()
            let transaction: [String: Any] = [
                "transactionId": "7500000\(renewal)", "originalTransactionId": "75000001", "bundleId": "com.example",
                "productId": ReceiptsDatabase.appleProduct, "purchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-3600)),
                "expiresDate": TestAppleSigner.ms(now.addingTimeInterval(Double(30 * renewal) * 86400)), "environment": "Sandbox",
                "signedDate": TestAppleSigner.ms(now)]
            let payload: [String: Any] = [
                "notificationType": "DID_RENEW", "notificationUUID": UUID().uuidString, "version": "2.0",
                "signedDate": TestAppleSigner.ms(now),
                "data": ["bundleId": "com.example", "environment": "Sandbox", "appAppleId": 1234, "status": 1,
                         "signedTransactionInfo": try signer.sign(transaction)] as [String: Any]]
            try d.run("AppStoreNotificationJob", jsonString([["signedPayload": try signer.sign(payload)]]))
        }
        try didRenew()
        XCTAssertEqual(logs.alerts.filter { $0 == DetachedRenewal.alert }, [], "the user's own renewal")
        let request = try deletionRequest(user)
        try erase(user, request, d)
        XCTAssertEqual(try db.string("""
            SELECT (details -> 'apple_subscriptions_live')::text AS v FROM audit_logs WHERE action = 'account_deleted'
            """), "1")
        try didRenew()
        try didRenew()
        XCTAssertEqual(try db.events(key: "75000001").filter { $0 == "renewed" }.count, 3, "the accounting row follows Apple")
        XCTAssertEqual(logs.alerts.filter { $0 == DetachedRenewal.alert }, [DetachedRenewal.alert], "once, not per renewal")
    }
}
