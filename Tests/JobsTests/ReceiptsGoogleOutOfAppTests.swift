import Foundation
import WorkersHTTP
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// A clock the test moves (`ReceiptServices.now`); never slept on.
final class ReceiptsTestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date
    init(_ start: Date = Date()) { current = start }
    var now: Date { lock.withLock { current } }
    func advance(_ seconds: TimeInterval) { lock.withLock { current = current.addingTimeInterval(seconds) } }
}

/// What the outbox relay does: the committed `job_outbox` rows not pushed yet, delivered in order through `d`;
/// returns their classes.
@discardableResult
func relayCommittedOutbox(_ d: JobRunnerDriver, _ db: ReceiptsDatabase) throws -> [String] {
    let rows = try db.pool.withConnection { c in
        try c.query("SELECT id, class, args::text AS args FROM job_outbox WHERE pushed_at IS NULL ORDER BY id").map {
            (try $0.int64("id"), try $0.string("class"), try $0.string("args"))
        }
    }
    for (id, className, args) in rows {
        try db.pool.withConnection { _ = try $0.execute("UPDATE job_outbox SET pushed_at = now() WHERE id = $1", [id]) }
        try d.run(className, args)
    }
    return rows.map(\.1)
}

/// Issue 33 point 2 (review 2026-11-27 N1, L5, L8, L11, L12): Google purchases made outside the app, through the real
/// runner (`JobRunnerDriver`) or a real worker (`SettlingWorker`, Redis database 32), against the Google fake.
extension ReceiptsGoogleTests {
    func services(_ c: ReceiptsConfiguration, clock: ReceiptsTestClock) throws -> ReceiptServices {
        try ReceiptServices(configuration: c, http: http, now: { clock.now })
    }

    /// Registers a purchase the app never posted and returns the RTDN Google sends for it (PlayNotificationJob's
    /// arguments), as the fake builds it (`/__admin/google/out_of_app`).
    func outOfApp(_ token: String, state: String = "SUBSCRIPTION_STATE_ACTIVE", expiry: Date = Date().addingTimeInterval(30 * 86400),
                  type: Int = 4, numericEventTime: Bool = false, extra: [String: Any] = [:]) throws -> String {
        var body: [String: Any] = ["token": token, "subscriptionState": state, "productId": ReceiptsDatabase.googleProduct,
                                   "expiryTime": ISO8601DateFormatter().string(from: expiry), "notificationType": type,
                                   "event_time_numeric": numericEventTime]
        body.merge(extra) { $1 }
        return jsonString([try fakes.admin(.google, "POST", "google/out_of_app", json: body)])
    }

    @discardableResult
    func relayOutbox(_ d: JobRunnerDriver) throws -> [String] { try relayCommittedOutbox(d, db) }

    func notificationOutcome(_ token: String) throws -> String? {
        try db.string("""
            SELECT n.outcome AS v FROM store_notifications n
            WHERE n.store = 'google' AND (n.store_key = $1 OR n.subscription_id IN
                  (SELECT id FROM subscriptions WHERE store_transaction_id = $1))
            ORDER BY n.received_at DESC LIMIT 1
            """, [token])
    }

    func currentSubscriptionKey(_ user: UUID) throws -> String? {
        try db.string("""
            SELECT s.store_transaction_id AS v FROM users u JOIN subscriptions s ON s.id = u.subscription_id WHERE u.id = $1
            """, [user])
    }

    // MARK: N1 attribution

    /// A resubscribe in the Play Store replaces a token we know (`linkedPurchaseToken`): the RTDN alone grants the
    /// new purchase to that token's user and pays its acknowledgement.
    func testOutOfAppPurchaseLinkedToAKnownTokenIsGrantedAndAcknowledged() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        try setPurchase("oop-old", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(2 * 86400))
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "oop-old"))
        let rtdn = try outOfApp("oop-new", extra: ["linkedPurchaseToken": "oop-old"])
        try d.run("PlayNotificationJob", rtdn)
        XCTAssertEqual(try db.subscriptionStatus(key: "oop-new"), "active")
        XCTAssertEqual(try currentSubscriptionKey(user), "oop-new")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.subscriptionStatus(key: "oop-old"), "expired", "replaced")
        XCTAssertEqual(try db.events(key: "oop-new"), ["purchased"])
        XCTAssertEqual(try db.string("""
            SELECT e.event_data->>'attributed_by' AS v FROM subscription_events e JOIN subscriptions s ON s.id = e.subscription_id
            WHERE s.store_transaction_id = 'oop-new'
            """), "linked_purchase_token")
        XCTAssertEqual(try acknowledgementOutcome("oop-new"), "acknowledged")
        XCTAssertEqual(try acknowledgements()["oop-new"], 1, "the fake recorded the acknowledge call")
        XCTAssertEqual(try notificationOutcome("oop-new"), "applied")
    }

    /// A lapsed subscriber resubscribes in the Play Store: the purchase names the expired token we know
    /// (`outOfAppPurchaseContext.expiredPurchaseToken`).
    func testOutOfAppPurchaseAfterAnExpiredTokenIsGrantedAndAcknowledged() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        try setPurchase("lapsed-old", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: Date().addingTimeInterval(-10 * 86400),
                        extra: ["acknowledgementState": "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "lapsed-old"))
        XCTAssertEqual(try db.userStatus(user), "free")
        try d.run("PlayNotificationJob", try outOfApp("lapsed-new", extra: ["expiredPurchaseToken": "lapsed-old"]))
        XCTAssertEqual(try db.subscriptionStatus(key: "lapsed-new"), "active")
        XCTAssertEqual(try currentSubscriptionKey(user), "lapsed-new")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try acknowledgements()["lapsed-new"], 1)
        XCTAssertEqual(try acknowledgementOutcome("lapsed-new"), "acknowledged")
    }

    /// A promo code redeemed in the Play Store by a user who never bought before: the app's obfuscated account id
    /// (`GoogleAccountHash`) names them. The RTDN's eventTimeMillis is a JSON number here (L12).
    func testOutOfAppPurchaseNamedByTheObfuscatedAccountIdIsGranted() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser(), other = try db.newUser()
        XCTAssertEqual(GoogleAccountHash.of(user).count, 64)
        let rtdn = try outOfApp("promo-1", numericEventTime: true,
                                extra: ["obfuscatedExternalAccountId": GoogleAccountHash.of(user)])
        XCTAssertTrue(rtdn.contains("data"))
        try d.run("PlayNotificationJob", rtdn)
        XCTAssertEqual(try currentSubscriptionKey(user), "promo-1")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.userStatus(other), "free")
        XCTAssertEqual(try acknowledgements()["promo-1"], 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM iap_receipts WHERE transaction_id IS NOT NULL AND user_id = $1", [user]), 1)
    }

    /// Review L-d: a Play Store resubscribe after a subscription whose token we never stored (bought before this system,
    /// or on a token since lost) but on which our app had set the obfuscated account id: Google returns that id as
    /// `outOfAppPurchaseContext.expiredExternalAccountIdentifiers` ("User account identifier from the last expired
    /// subscription for this SKU"), and it names the user.
    func testOutOfAppResubscribeNamedByTheExpiredSubscriptionsObfuscatedAccountIdIsGranted() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser(), other = try db.newUser()
        try d.run("PlayNotificationJob", try outOfApp("resub-1", extra: [
            "expiredPurchaseToken": "a-token-we-never-stored", "expiredObfuscatedExternalAccountId": GoogleAccountHash.of(user)]))
        XCTAssertEqual(try currentSubscriptionKey(user), "resub-1")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.userStatus(other), "free")
        XCTAssertEqual(try db.string("""
            SELECT e.event_data->>'attributed_by' AS v FROM subscription_events e JOIN subscriptions s ON s.id = e.subscription_id
            WHERE s.store_transaction_id = 'resub-1'
            """), "expired_obfuscated_account_id")
        XCTAssertEqual(try acknowledgements()["resub-1"], 1)
    }

    /// L12: an RTDN whose eventTimeMillis is a JSON number is applied (it used to fail decoding and go dead).
    func testNumericEventTimeMillisIsDecoded() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        try setPurchase("num-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(10 * 86400))
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "num-1"))
        let millis = Int64(Date().timeIntervalSince1970 * 1000)
        let n: [String: Any] = ["version": "1.0", "packageName": "com.example.app", "eventTimeMillis": millis,
                                "subscriptionNotification": ["version": "1.0", "notificationType": 2, "purchaseToken": "num-1",
                                                             "subscriptionId": ReceiptsDatabase.googleProduct]]
        let data = try JSONSerialization.data(withJSONObject: n).base64EncodedString()
        try d.run("PlayNotificationJob", jsonString([["message": ["data": data, "messageId": "num-m1"]]]))
        XCTAssertEqual(try db.events(key: "num-1"), ["subscription_started", "renewed"])
        let notification = try PlayNotificationArguments(message: .init(data: data, messageId: "x")).notification()
        XCTAssertEqual(notification.eventTimeMillis, millis)
    }

    /// Nobody can be found for the purchase: nothing is granted, the alert fires at once and once more from the
    /// acknowledgement sweep 24 h later (the clock moved, not slept), leaving two of Google's three days.
    func testUnattributablePurchaseAlertsAtOnceAndAfter24Hours() throws {
        let clock = ReceiptsTestClock()
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try services(try configuration(), clock: clock))
        let worker = try SettlingWorker(redisDatabase: 186, registry: registry, database: fixture.jobDatabase)
        defer { worker.shutdown() }
        let token = "lost-purchase-token-1"
        let rtdn = try outOfApp(token, extra: ["obfuscatedExternalAccountId": String(repeating: "0", count: 64)])
        XCTAssertAck(try worker.run("PlayNotificationJob", rtdn))
        XCTAssertEqual(worker.logs.alerts, ["RCV-GOOGLE-UNATTRIBUTED"], "at once")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0, "nothing granted")
        XCTAssertNil(try acknowledgementOutcome(token), "nothing owed to no one")
        XCTAssertNil(try acknowledgements()[token])
        XCTAssertEqual(try notificationOutcome(token), "unattributed")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM users WHERE status = 'premium'"), 0)

        clock.advance(23 * 3600)
        XCTAssertAck(try worker.run("GoogleAcknowledgementSweepJob", "[]"))
        XCTAssertEqual(worker.logs.alerts, ["RCV-GOOGLE-UNATTRIBUTED"], "not yet at 23 h")
        clock.advance(3600 + 60)
        XCTAssertAck(try worker.run("GoogleAcknowledgementSweepJob", "[]"))
        XCTAssertEqual(worker.logs.alerts, ["RCV-GOOGLE-UNATTRIBUTED", "RCV-GOOGLE-UNATTRIBUTED"], "again after 24 h")
        clock.advance(3600)
        XCTAssertAck(try worker.run("GoogleAcknowledgementSweepJob", "[]"))
        XCTAssertEqual(worker.logs.alerts.count, 2, "once")
        let late = try XCTUnwrap(worker.logs.all.last { $0.metadata["alert"] != nil })
        XCTAssertEqual(late.metadata["unattributed_hours"], "24")
        for entry in worker.logs.all {
            XCTAssertFalse(entry.message.contains(token) || entry.metadata.values.contains { $0.contains(token) },
                           "the raw token is never logged: \(entry)")
        }
    }

    // MARK: L8 replay

    /// An RTDN that lands before the first validation commits (unattributable then) is replayed once the validation
    /// commits: the validation read the older ACTIVE state, the replay reads Google again (the user cancelled).
    func testUnmatchedNotificationIsReplayedAfterTheValidationCommits() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        let expiry = Date().addingTimeInterval(20 * 86400)
        let f = ISO8601DateFormatter()
        // Google's state when the RTDN arrives: cancelled by the user, still running.
        let rtdn = try outOfApp("race-1", state: "SUBSCRIPTION_STATE_CANCELED", expiry: expiry, type: 3)
        try d.run("PlayNotificationJob", rtdn)
        XCTAssertEqual(try notificationOutcome("race-1"), "unattributed")
        // The validation read Google before the cancellation (its answer, scripted once), and commits after the RTDN.
        try fakes.script(.google, ["match": ["path": "/androidpublisher/v3/applications/com.example.app/purchases/subscriptionsv2/tokens/race-1"],
                                   "json": ["subscriptionState": "SUBSCRIPTION_STATE_ACTIVE", "acknowledgementState": "ACKNOWLEDGEMENT_STATE_PENDING",
                                            "startTime": f.string(from: Date().addingTimeInterval(-86400)),
                                            "lineItems": [["productId": ReceiptsDatabase.googleProduct, "expiryTime": f.string(from: expiry),
                                                           "autoRenewingPlan": ["autoRenewEnabled": true]]]]])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "race-1"))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions WHERE store_transaction_id = 'race-1' AND auto_renew"), 1)
        XCTAssertEqual(try relayOutbox(d), ["PlayNotificationJob"], "the replay was enqueued with the validation")
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = 'race-1' AND NOT auto_renew AND cancelled_at IS NOT NULL
            """), 1, "the replay applied Google's newer state")
        XCTAssertEqual(try db.subscriptionStatus(key: "race-1"), "active")
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.events(key: "race-1"), ["subscription_started", "cancelled"])
        XCTAssertEqual(try notificationOutcome("race-1"), "applied")
        // A second validation replays nothing again.
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "race-1"))
        XCTAssertEqual(try relayOutbox(d), [])
    }

    // MARK: L5

    /// A leaked token posted by another account: Google's obfuscated account id names the buyer → RCV-OWNER.
    func testForeignObfuscatedAccountIdIsAnOwnershipConflict() throws {
        let d = driver(try services(try configuration()))
        let buyer = try db.newUser(), thief = try db.newUser()
        try setPurchase("leaked-1", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(20 * 86400),
                        extra: ["obfuscatedExternalAccountId": GoogleAccountHash.of(buyer)])
        XCTAssertThrowsError(try d.run("ValidateReceiptJob", googleArgs(user: thief, token: "leaked-1"))) {
            Failure.isPermanent($0, containing: "RCV-OWNER")
        }
        XCTAssertNil(try db.subscriptionStatus(key: "leaked-1"))
        XCTAssertEqual(try db.userStatus(thief), "free")
        try d.run("ValidateReceiptJob", googleArgs(user: buyer, token: "leaked-1"))
        XCTAssertEqual(try db.userStatus(buyer), "premium")
    }

    // MARK: L11

    /// Google still says IN_GRACE_PERIOD while its expiryTime has passed: grace ends one bridge (a day) after now,
    /// never in the past, so the expiry sweep does not end a period Google still entitles.
    func testGraceNeverEndsInThePastWhileGoogleSaysInGrace() throws {
        let c = try configuration()
        let clock = ReceiptsTestClock()
        let d = driver(try services(c, clock: clock))
        let user = try db.newUser()
        try setPurchase("grace-past", state: "SUBSCRIPTION_STATE_IN_GRACE_PERIOD", expiry: clock.now.addingTimeInterval(-3600))
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "grace-past"))
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM subscriptions WHERE store_transaction_id = 'grace-past'
              AND abs(extract(epoch FROM grace_period_end) - $1) < 1
            """, [clock.now.addingTimeInterval(GoogleStateDerivation.graceBridge).timeIntervalSince1970]), 1)
        let stores = try services(c, clock: clock)
        XCTAssertEqual(try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, stores: stores,
                                                            now: clock.now.addingTimeInterval(15 * 60)), .init())
        XCTAssertEqual(try db.userStatus(user), "premium")
        // Past the bridge the sweep asks Google (L1); still in grace, the bridge moves on; once Google says EXPIRED it ends.
        XCTAssertEqual(try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, stores: stores,
                                                            now: clock.now.addingTimeInterval(GoogleStateDerivation.graceBridge + 60)),
                       .init(storeChecked: 1))
        XCTAssertEqual(try db.userStatus(user), "premium")
        try setPurchase("grace-past", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: clock.now.addingTimeInterval(-3600))
        XCTAssertEqual(try SubscriptionExpirySweepJob.sweep(pool: db.pool, configuration: c, stores: stores,
                                                            now: clock.now.addingTimeInterval(2 * GoogleStateDerivation.graceBridge + 60)).expired, 1)
        XCTAssertEqual(try db.userStatus(user), "free")
    }
}

extension ReceiptsGoogleTests {
    /// L8 for a voided purchase: the void of the order that paid the period lands before the first validation
    /// commits; the validation's replay revokes the period.
    func testVoidedPurchaseBeforeTheValidationIsReplayed() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        let order = "GPA.3372-4150-9088-55555"
        try setPurchase("void-early", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(20 * 86400),
                        extra: ["latestSuccessfulOrderId": order])
        try d.run("PlayNotificationJob", rtdn(messageID: "void-early-m", token: "void-early", voided: true, orderID: order))
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'unmatched' AND store_key = 'void-early'"), 1)
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "void-early"))
        XCTAssertEqual(try db.userStatus(user), "premium")
        // Revoked: Google no longer entitles when the replay reads its state (a refund without revoke would keep it).
        try setPurchase("void-early", state: "SUBSCRIPTION_STATE_EXPIRED", expiry: Date().addingTimeInterval(-60),
                        extra: ["latestSuccessfulOrderId": order])
        XCTAssertEqual(try relayOutbox(d), ["PlayNotificationJob"])
        XCTAssertEqual(try db.subscriptionStatus(key: "void-early"), "refunded")
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.events(key: "void-early"), ["subscription_started", "refunded"])
    }
}
