import Foundation
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Issue 52 point 3 (review 2026-12-07 L-e): a notification kind this release does not know is recorded and raises
/// `RCV-NOTIFICATION-UNKNOWN` with its kind and how many of that kind are recorded, through the real runner.
extension ReceiptsAppleTests {
    func testAnUnknownAppleNotificationTypeIsRecordedAndAlertedCountedByKind() throws {
        let signer = try TestAppleSigner()
        var c = configuration()
        c.appleRootCertificates = [signer.rootDER]
        let logs = CapturedLogs()
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: c, http: http))
        let d = JobRunnerDriver(registry: registry, database: fixture.jobDatabase, logger: logs.logger(label: "unknown-kind"))
        for type in ["A_TYPE_APPLE_ADDS_LATER", "PRICE_INCREASE", "A_TYPE_APPLE_ADDS_LATER"] {
            try d.run("AppStoreNotificationJob", try notificationArgs(signer, type: type, expires: Date().addingTimeInterval(86400)))
        }
        let alerts = logs.all.filter { $0.metadata["alert"] == UnknownNotificationKind.alert }
        XCTAssertEqual(alerts.map { "\($0.level) \($0.metadata["store"] ?? "") \($0.metadata["kind"] ?? "") \($0.metadata["count"] ?? "")" },
                       ["error apple A_TYPE_APPLE_ADDS_LATER 1", "error apple A_TYPE_APPLE_ADDS_LATER 2"])
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM store_notifications WHERE notification_type = 'A_TYPE_APPLE_ADDS_LATER' AND outcome = 'ignored'
            """), 2)
    }
}

extension ReceiptsGoogleTests {
    /// An RTDN kind Google adds later (a key of the DeveloperNotification we do not know) is recorded under its name;
    /// a subscription `notificationType` outside Google's list is handled as before and alerted as `subscription_N`.
    /// `oneTimeProductNotification` is known (ignored without an alert).
    func testAnUnknownPlayNotificationKindIsRecordedAndAlertedCountedByKind() throws {
        let logs = CapturedLogs()
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try services(try configuration()))
        let d = JobRunnerDriver(registry: registry, database: fixture.jobDatabase, logger: logs.logger(label: "unknown-kind"))
        func message(_ id: String, _ kind: String, _ body: [String: Any]) -> String {
            let n: [String: Any] = ["version": "1.0", "packageName": "com.example.app", "eventTimeMillis": "1700000000000", kind: body]
            return jsonString([["message": ["data": try! JSONSerialization.data(withJSONObject: n).base64EncodedString(),
                                            "messageId": id]]])
        }
        try d.run("PlayNotificationJob", message("k-1", "futureThingNotification", ["version": "1.0"]))
        try d.run("PlayNotificationJob", message("k-2", "oneTimeProductNotification", ["version": "1.0", "notificationType": 1,
                                                                                         "purchaseToken": "otp", "sku": "coins"]))
        try d.run("PlayNotificationJob", message("k-3", "futureThingNotification", ["version": "1.0"]))
        try d.run("PlayNotificationJob", rtdn(messageID: "k-4", type: 99, token: "never-seen"))
        let alerts = logs.all.filter { $0.metadata["alert"] == UnknownNotificationKind.alert }
        XCTAssertEqual(alerts.map { "\($0.level) \($0.metadata["store"] ?? "") \($0.metadata["kind"] ?? "") \($0.metadata["count"] ?? "")" },
                       ["error google futureThingNotification 1", "error google futureThingNotification 2",
                        "error google subscription_99 1"])
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM store_notifications WHERE store = 'google' AND notification_type = 'futureThingNotification'
            """), 2)
    }
}
