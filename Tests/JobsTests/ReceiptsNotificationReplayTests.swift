import Foundation
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Issue 33 point 2, L8 (Apple half): a notification that lands before the first validation commits is `unmatched`;
/// the validation's commit enqueues its replay, which applies the newer signed state (the `store_state_at` guard
/// decides by `signedDate`). The Google half is in ReceiptsGoogleOutOfAppTests.swift.
extension ReceiptsAppleTests {
    func testUnmatchedAppleNotificationIsReplayedAfterTheValidationCommits() throws {
        let signer = try TestAppleSigner()
        var c = configuration()
        c.appleRootCertificates = [signer.rootDER]
        try fakes.configure(.apple, ["shared_secret": "shh"])
        let d = try driver(c)
        let user = try db.newUser()
        // Apple signs the expiry (of the period the receipt holds) after the validation read the receipt, and it
        // arrives before the validation commits.
        let periodEnd = Date().addingTimeInterval(20 * 86400)
        let expired = try notificationArgs(signer, type: "EXPIRED", subtype: "VOLUNTARY", expires: periodEnd,
                                           status: 2, signedAt: Date().addingTimeInterval(120))
        try d.run("AppStoreNotificationJob", expired)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'unmatched' AND store_key = '1000000001'"), 1)
        try register(receipt: "receipt-race", transaction: "1000000001", expires: periodEnd)
        try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: "receipt-race", transaction: "1000000001"))
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "active", "the validation's older view")
        XCTAssertEqual(try relayCommittedOutbox(d, db), ["AppStoreNotificationJob"])
        XCTAssertEqual(try db.subscriptionStatus(key: "1000000001"), "expired", "the replayed notification is newer")
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.events(key: "1000000001"), ["subscription_started", "expired"])
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE outcome = 'applied'"), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM store_notifications WHERE store_key IS NOT NULL OR replay_args IS NOT NULL"), 0)
        try d.run("AppStoreNotificationJob", expired)  // Apple resends: now a duplicate
        XCTAssertEqual(try db.events(key: "1000000001"), ["subscription_started", "expired"])
    }
}
