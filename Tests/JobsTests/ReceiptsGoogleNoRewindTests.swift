import Foundation
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Issue 52 point 2, Google side: an RTDN about an older token of a `linkedPurchaseToken` chain never takes the user's
/// current subscription back, through the real runner (`JobRunnerDriver`) against the Google fake.
extension ReceiptsGoogleTests {
    /// A deferred downgrade: the new purchase links the old token, which Google still calls entitled until its period
    /// ends (CANCELED, expiry ahead, no `replacementCancellation`). Every subscription RTDN about the old token records
    /// its event on the old row and leaves both rows and the user on the new purchase.
    func testNotificationsAboutAReplacedTokenNeverTakeTheUserBackToIt() throws {
        let d = driver(try services(try configuration()))
        let user = try db.newUser()
        let oldEnd = Date().addingTimeInterval(20 * 86400), newEnd = Date().addingTimeInterval(50 * 86400)
        try setPurchase("chain-old", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: oldEnd)
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "chain-old"))
        try setPurchase("chain-new", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: newEnd, extra: ["linkedPurchaseToken": "chain-old"])
        try d.run("ValidateReceiptJob", googleArgs(user: user, token: "chain-new"))
        func rows() throws -> String? {
            try db.string("""
                SELECT string_agg(store_transaction_id || ':' || status || ':' || (extract(epoch FROM end_date))::bigint, ','
                                  ORDER BY store_transaction_id) AS v
                FROM subscriptions WHERE store_transaction_id IN ('chain-old', 'chain-new')
                """)
        }
        let before = try rows()
        XCTAssertEqual(try currentSubscriptionKey(user), "chain-new")
        try setPurchase("chain-old", state: "SUBSCRIPTION_STATE_CANCELED", expiry: oldEnd,
                        extra: ["canceledStateContext": ["userInitiatedCancellation": ["cancelTime": ISO8601DateFormatter().string(from: Date())]]])
        for type in [1, 2, 3, 4, 7, 13] {  // RECOVERED, RENEWED, CANCELED, PURCHASED, RESTARTED, EXPIRED
            try d.run("PlayNotificationJob", rtdn(messageID: "chain-old-\(type)", type: type, token: "chain-old"))
            XCTAssertEqual(try rows(), before, "type \(type)")
            XCTAssertEqual(try currentSubscriptionKey(user), "chain-new", "type \(type)")
            XCTAssertEqual(try db.userStatus(user), "premium", "type \(type)")
            XCTAssertEqual(try db.scalar("""
                SELECT count(*) FROM subscription_events WHERE idempotency_key = $1 AND event_data->>'scope' = 'replaced_token'
                """, ["google:notification:chain-old-\(type)"]), 1, "type \(type)")
        }
    }
}
