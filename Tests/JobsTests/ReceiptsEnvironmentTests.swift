import Foundation
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// Issue 52 point 3 (review 2026-12-07 L-a): environment and ownership are recorded; sandbox, test and family-shared
/// subscriptions still grant premium but are not `revenue_eligible`. Through the real runner, against the fakes.
extension ReceiptsAppleTests {
    /// `store_environment|ownership_type|revenue_eligible` of a subscription row.
    func revenueFacts(key: String) throws -> String? {
        try db.string("""
            SELECT coalesce(store_environment, '-') || '|' || coalesce(ownership_type, '-') || '|' || revenue_eligible::text AS v
            FROM subscriptions WHERE store_transaction_id = $1
            """, [key])
    }

    func testSandboxAndFamilySharedAppleSubscriptionsGrantPremiumButAreNoRevenue() throws {
        try fakes.configure(.apple, ["shared_secret": "shh"])
        let d = try driver(configuration())
        let ms = { (d: Date) in String(Int64(d.timeIntervalSince1970 * 1000)) }
        for (receipt, transaction, environment, ownership) in [("r-paid", "1000000101", "Production", "PURCHASED"),
                                                               ("r-sandbox", "1000000102", "Sandbox", "PURCHASED"),
                                                               ("r-family", "1000000103", "Production", "FAMILY_SHARED")] {
            try fakes.admin(.apple, "POST", "apple/receipts", json: [
                "receipt-data": receipt, "status": 0, "environment": environment,
                "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": transaction,
                                         "original_transaction_id": transaction, "in_app_ownership_type": ownership,
                                         "purchase_date_ms": ms(Date().addingTimeInterval(-86400)),
                                         "expires_date_ms": ms(Date().addingTimeInterval(29 * 86400))]],
                "pending_renewal_info": [["original_transaction_id": transaction, "auto_renew_status": "1"]],
            ])
            let user = try db.newUser()
            try d.run("ValidateReceiptJob", appleArgs(user: user, receipt: receipt, transaction: transaction))
            XCTAssertEqual(try db.userStatus(user), "premium", receipt)
        }
        XCTAssertEqual(try revenueFacts(key: "1000000101"), "Production|PURCHASED|true")
        XCTAssertEqual(try revenueFacts(key: "1000000102"), "Sandbox|PURCHASED|false")
        XCTAssertEqual(try revenueFacts(key: "1000000103"), "Production|FAMILY_SHARED|false")
    }
}

extension ReceiptsGoogleTests {
    func testAGoogleTestPurchaseGrantsPremiumButIsNoRevenue() throws {
        let d = driver(try services(try configuration()))
        let tester = try db.newUser(), payer = try db.newUser()
        try setPurchase("tok-tester", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(5 * 86400),
                        extra: ["testPurchase": [:] as [String: String]])
        try setPurchase("tok-payer", state: "SUBSCRIPTION_STATE_ACTIVE", expiry: Date().addingTimeInterval(5 * 86400))
        try d.run("ValidateReceiptJob", googleArgs(user: tester, token: "tok-tester"))
        try d.run("ValidateReceiptJob", googleArgs(user: payer, token: "tok-payer"))
        XCTAssertEqual(try db.userStatus(tester), "premium")
        XCTAssertEqual(try db.string("""
            SELECT string_agg(store_transaction_id || ':' || store_environment || ':' || revenue_eligible::text, ','
                              ORDER BY store_transaction_id) AS v FROM subscriptions
            """), "tok-payer:Production:true,tok-tester:Test:false")
    }
}
