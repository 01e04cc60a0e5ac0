import Crypto
import Foundation
import WorkersQueue
import WorkersHTTP
@testable import WorkersAppJobs
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// StoreKit 1 app receipts as proof of possession in App Store Server API mode (issue 33, point 1; review N2):
/// each job run through a real worker (`SettlingWorker`, Redis database 29) against PostgreSQL and the Apple fake,
/// with receipts built and signed by the fake's test CA (`POST /__admin/apple/app_receipt`).
final class ReceiptsAppReceiptTests: ReceiptsTestCase {
    var runners: [SettlingWorker] = []

    override func makeFixture() throws -> JobsFixture { try JobsFixture(prefix: "receipts_test", fakes: .own([.apple])) }

    override func tearDown() {
        runners.forEach { $0.shutdown() }
        super.tearDown()
    }

    // MARK: Set-up

    /// Server API mode (credentials set: what `auto` picks too), the JWS test root `signer`, and the fake's receipt
    /// test root as the only trusted receipt anchor.
    func configuration(_ signer: TestAppleSigner) throws -> ReceiptsConfiguration {
        try fakes.configure(.apple, ["api_jwt": ["issuer": "issuer-1", "key_id": "KEY123", "bundle_id": "com.example",
                                                 "public_key_pem": try P256KeyPEM.publicKeyPEM(fromPrivate: try AppleFixtures.signingKeyPEM())]])
        var c = appleConfiguration(roots: [signer.rootDER])
        c.appleValidation = .auto
        c.appleCredentials = AppStoreServerAPICredentials(issuerID: "issuer-1", keyID: "KEY123",
                                                          privateKey: Secret(try AppleFixtures.signingKeyPEM()))
        c.appleReceiptRootCertificates = [try receiptRoot("test")]
        XCTAssertTrue(c.usesAppStoreServerAPI)
        return c
    }

    func receiptRoot(_ name: String) throws -> [UInt8] {
        let roots = try fakes.admin(.apple, "GET", "apple/receipt_roots")
        return Array(try XCTUnwrap(Data(base64Encoded: try XCTUnwrap(roots[name] as? String))))
    }

    /// An app receipt for `bundle` holding `transactions` (each its own original), signed by the fake's `signer` chain.
    func appReceipt(_ transactions: [String], bundle: String = "com.example", signer: String = "test") throws -> String {
        let answer = try fakes.admin(.apple, "POST", "apple/app_receipt", json: [
            "bundle_id": bundle, "signer": signer,
            "in_app": transactions.map { ["transaction_id": $0, "product_id": ReceiptsDatabase.appleProduct] }])
        return try XCTUnwrap(answer["receipt_data"] as? String)
    }

    func runner(_ c: ReceiptsConfiguration) throws -> SettlingWorker {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: c, http: http))
        let r = try SettlingWorker(redisDatabase: 182, registry: registry, database: fixture.jobDatabase)
        runners.append(r)
        return r
    }

    /// The seed's StoreKit 1 request: `receipt_data` + `transaction_id`, no JWS, no appAccountToken.
    func args(user: UUID, receipt: String, transaction: String) -> String {
        jsonString([["user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString,
                     "store": "apple", "transaction_id": transaction, "receipt_data": receipt]])
    }

    /// Registers transaction `id` (no appAccountToken, as StoreKit 1 purchases) for Get Transaction Info and Get All
    /// Subscription Statuses.
    func registerTransaction(_ signer: TestAppleSigner, id: String, original: String? = nil) throws {
        let now = Date()
        let jws = try signer.sign([
            "transactionId": id, "originalTransactionId": original ?? id, "bundleId": "com.example",
            "productId": ReceiptsDatabase.appleProduct, "type": "Auto-Renewable Subscription",
            "purchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-86400)),
            "originalPurchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-86400)),
            "expiresDate": TestAppleSigner.ms(now.addingTimeInterval(29 * 86400)), "environment": "Production",
            "signedDate": TestAppleSigner.ms(now)])
        try fakes.admin(.apple, "POST", "apple/transactions", json: ["transaction_id": id, "signedTransactionInfo": jws])
        try fakes.admin(.apple, "POST", "apple/subscriptions", json: ["transaction_id": original ?? id, "response": [
            "environment": "Production", "bundleId": "com.example", "appAppleId": 1234,
            "data": [["subscriptionGroupIdentifier": "g", "lastTransactions": [[
                "originalTransactionId": original ?? id, "status": 1, "signedTransactionInfo": jws]]]]]])
    }

    func owner(key: String) throws -> String? {
        try db.string("SELECT user_id::text AS v FROM subscriptions WHERE store_transaction_id = $1", [key])
    }

    func invalidReceipts(_ transaction: String, code: String) throws -> Int {
        try db.scalar("""
            SELECT count(*) FROM iap_receipts WHERE transaction_id = $1 AND NOT validated AND validation_error LIKE $2
            """, [transaction, code + ":%"])
    }

    // MARK: Roots

    func testEmbeddedAppleRootCAMatchesPublishedFingerprint() throws {
        let hex = SHA256.hash(data: AppleRootCertificates.appleRootCA).map { String(format: "%02X", $0) }.joined(separator: ":")
        XCTAssertEqual(hex, "B0:B1:73:0E:CB:C7:FF:45:05:14:2C:49:F1:29:5E:6E:DA:6B:CA:ED:7E:2C:68:C5:BE:91:B5:A1:10:01:F0:24")
        XCTAssertEqual(ReceiptsConfiguration().appleReceiptRootCertificates, [AppleRootCertificates.appleRootCA])
        // Production default: a test-CA receipt is not Apple's.
        let verifier = try AppleAppReceiptVerifier(rootCertificatesDER: [AppleRootCertificates.appleRootCA], bundleID: "com.example")
        XCTAssertThrowsError(try verifier.verify(base64: try appReceipt(["76900001"]))) { error in
            guard case AppleAppReceiptError.untrustedChain = error else { return XCTFail("\(error)") }
        }
    }

    func testReceiptRootsComeFromTheEnvironment() throws {
        let der = try receiptRoot("test")
        let pem = "-----BEGIN CERTIFICATE-----\n" + Data(der).base64EncodedString(options: .lineLength64Characters)
            + "\n-----END CERTIFICATE-----\n"
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("receipt-root-\(UUID().uuidString).pem")
        try pem.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let c = try ReceiptsConfiguration.fromEnvironment(["RECEIPTS_APPLE_RECEIPT_ROOT_CA_FILES": file.path])
        XCTAssertEqual(c.appleReceiptRootCertificates, [der])
        XCTAssertThrowsError(try ReceiptsConfiguration.fromEnvironment(["RECEIPTS_APPLE_RECEIPT_ROOT_CA_FILES": " , "])) {
            XCTAssertEqual("\($0)", "RECEIPTS_APPLE_RECEIPT_ROOT_CA_FILES: no file named")
        }
    }

    /// Apple's own Xcode StoreKit receipt (app-store-server-library-swift resources/xcode, BER with indefinite
    /// lengths, `sha256WithRSAEncryption`): its signature verifies with its signer and it reads as
    /// `ReceiptUtility` reads it (transaction "0"); its self-signed StoreKit certificate is not an Apple chain.
    func testXcodeReceiptParsesAndIsNotTrustedUnderAppleRoot() throws {
        let base64 = try AppleFixtures.text("xcode/xcode-app-receipt-with-transaction")
        let signed = try SignedReceipt(der: Array(try XCTUnwrap(Data(base64Encoded: base64))))
        _ = try signed.verifySignature()
        let receipt = try AppleAppReceiptVerifier.payload(signed.content)
        XCTAssertEqual(receipt.bundleID, "com.example.naturelab.backyardbirds.example")
        XCTAssertEqual(receipt.purchases, [.init(productID: "pass.premium", transactionID: "0", originalTransactionID: nil)])
        XCTAssertEqual(receipt.creationDate, ISO8601DateFormatter().date(from: "2023-10-19T01:45:40Z"))
        let verifier = try AppleAppReceiptVerifier(rootCertificatesDER: [AppleRootCertificates.appleRootCA],
                                                   bundleID: "com.example.naturelab.backyardbirds.example")
        XCTAssertThrowsError(try verifier.verify(base64: base64)) { error in
            guard case AppleAppReceiptError.untrustedChain = error else { return XCTFail("\(error)") }
        }
    }

    // MARK: The seed's StoreKit 1 request under the Server API

    func testGenuineReceiptHoldingTheTransactionIsProof() throws {
        let signer = try TestAppleSigner()
        let r = try runner(try configuration(signer))
        let user = try db.newUser()
        try registerTransaction(signer, id: "76000001")
        XCTAssertAck(try r.run("ValidateReceiptJob", args(user: user, receipt: try appReceipt(["76000001"]), transaction: "76000001")))
        XCTAssertEqual(try owner(key: "76000001"), user.uuidString.lowercased())
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.events(key: "76000001"), ["subscription_started"])
        XCTAssertEqual(r.logs.securityAlerts, [])
        // Apple was asked through the Server API, never verifyReceipt.
        XCTAssertEqual(try fakes.requests(.apple).map(\.path), ["/inApps/v1/transactions/76000001", "/inApps/v1/subscriptions/76000001"])

        // Signed attributes (RFC 5652 §5.4: the signature covers them, their messageDigest the content) verify too.
        let other = try db.newUser()
        try registerTransaction(signer, id: "76000002")
        let withAttributes = try fakes.admin(.apple, "POST", "apple/app_receipt", json: [
            "signed_attributes": true, "in_app": [["transaction_id": "76000002", "product_id": ReceiptsDatabase.appleProduct]]])
        XCTAssertAck(try r.run("ValidateReceiptJob", args(user: other, receipt: try XCTUnwrap(withAttributes["receipt_data"] as? String),
                                                          transaction: "76000002")))
        XCTAssertEqual(try db.userStatus(other), "premium")
    }

    func testForgedReceiptNamingAnotherUsersTransactionIsRefused() throws {
        let signer = try TestAppleSigner()
        let r = try runner(try configuration(signer))
        let victim = try db.newUser(), thief = try db.newUser()
        try registerTransaction(signer, id: "76100001")
        // A look-alike chain (same names, the thief's own keys), naming the victim's transaction.
        let forged = try appReceipt(["76100001"], signer: "forged")
        Failure.dead(try r.run("ValidateReceiptJob", args(user: thief, receipt: forged, transaction: "76100001")),
                     errorClass: "PermanentFailure",
                     messagePrefix: "RCV-RECEIPT: the app receipt's certificate chain is not trusted")
        // The thief's genuine receipt altered to name the victim's purchase (its transaction and original transaction
        // ids, one byte each): the signature no longer verifies.
        var bytes = Array(try XCTUnwrap(Data(base64Encoded: try appReceipt(["76100009"]))))
        let digits = Array("76100009".utf8)
        let places = (0..<(bytes.count - digits.count)).filter { Array(bytes[$0..<($0 + digits.count)]) == digits }
        XCTAssertEqual(places.count, 2)
        for at in places { bytes[at + digits.count - 1] = UInt8(ascii: "1") }
        Failure.dead(try r.run("ValidateReceiptJob", args(user: thief, receipt: Data(bytes).base64EncodedString(), transaction: "76100001")),
                     errorClass: "PermanentFailure",
                     messagePrefix: "RCV-RECEIPT: the app receipt's signature does not verify")
        Failure.dead(try r.run("ValidateReceiptJob", args(user: thief, receipt: "bm90IGEgcmVjZWlwdA==", transaction: "76100001")),
                     errorClass: "PermanentFailure", messagePrefix: "RCV-RECEIPT: the app receipt is malformed")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
        XCTAssertEqual(try db.userStatus(thief), "free")
        XCTAssertEqual(try invalidReceipts("76100001", code: "RCV-RECEIPT"), 1, "one row per transaction id, the last verdict")
        XCTAssertEqual(r.logs.securityAlerts, ["RCV-RECEIPT", "RCV-RECEIPT", "RCV-RECEIPT"])

        // The victim's own receipt still grants it to the victim.
        XCTAssertAck(try r.run("ValidateReceiptJob", args(user: victim, receipt: try appReceipt(["76100001"]), transaction: "76100001")))
        XCTAssertEqual(try owner(key: "76100001"), victim.uuidString.lowercased())
    }

    func testGenuineReceiptWithoutTheTransactionIsRefusedWithRCVTXN() throws {
        let signer = try TestAppleSigner()
        let r = try runner(try configuration(signer))
        let thief = try db.newUser()
        try registerTransaction(signer, id: "76200001")   // the victim's purchase
        // The thief's own genuine receipt, holding only the thief's purchase.
        let thiefs = try appReceipt(["76200002"])
        Failure.dead(try r.run("ValidateReceiptJob", args(user: thief, receipt: thiefs, transaction: "76200001")),
                     errorClass: "PermanentFailure", messagePrefix: "RCV-TXN: transaction [transaction_id] is not in the app receipt")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
        XCTAssertEqual(try db.userStatus(thief), "free")
        XCTAssertEqual(try invalidReceipts("76200001", code: "RCV-TXN"), 1)

        // A receipt record whose original transaction is not the one Apple reports for the id → RCV-TXN too.
        try registerTransaction(signer, id: "76200003", original: "76200004")
        let mismatched = try fakes.admin(.apple, "POST", "apple/app_receipt", json: ["in_app": [
            ["transaction_id": "76200003", "original_transaction_id": "76200099", "product_id": ReceiptsDatabase.appleProduct]]])
        Failure.dead(try r.run("ValidateReceiptJob", args(user: thief, receipt: try XCTUnwrap(mismatched["receipt_data"] as? String),
                                                          transaction: "76200003")),
                     errorClass: "PermanentFailure",
                     messagePrefix: "RCV-TXN: the app receipt's transaction belongs to another subscription than [transaction_id]")
        XCTAssertEqual(r.logs.securityAlerts, ["RCV-TXN", "RCV-TXN"])
    }

    func testReceiptOfAnotherAppIsRefused() throws {
        let signer = try TestAppleSigner()
        let r = try runner(try configuration(signer))
        let user = try db.newUser()
        try registerTransaction(signer, id: "76300001")
        let otherApp = try appReceipt(["76300001"], bundle: "com.example.other")
        Failure.dead(try r.run("ValidateReceiptJob", args(user: user, receipt: otherApp, transaction: "76300001")),
                     errorClass: "PermanentFailure",
                     messagePrefix: "RCV-RECEIPT: the app receipt is for bundle id com.example.other, expected com.example")
        XCTAssertEqual(try db.userStatus(user), "free")
    }

    // MARK: verifyReceipt while the Server API cannot answer

    func testServerAPIOutageFallsBackToVerifyReceiptForAVerifiedReceipt() throws {
        let signer = try TestAppleSigner()
        let r = try runner(try configuration(signer))
        let user = try db.newUser(), thief = try db.newUser()
        try registerTransaction(signer, id: "76400001")
        try fakes.script(.apple, ["match": ["path": "/inApps/v1/transactions/76400001"], "status": 503, "body": "", "times": 2])
        // A forged receipt gets no fallback: the outage is retried, nothing granted.
        Failure.retry(try r.run("ValidateReceiptJob", args(user: thief, receipt: try appReceipt(["76400001"], signer: "forged"),
                                                           transaction: "76400001")),
                      errorClass: Failure.className(of: StoreUnavailable.self),
                      messagePrefix: "App Store Server API (Production) temporarily unavailable: HTTP 503")
        XCTAssertEqual(try db.userStatus(thief), "free")
        // The genuine receipt: validated with verifyReceipt in the same attempt.
        XCTAssertAck(try r.run("ValidateReceiptJob", args(user: user, receipt: try appReceipt(["76400001"]), transaction: "76400001")))
        XCTAssertEqual(try owner(key: "76400001"), user.uuidString.lowercased())
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try fakes.requests(.apple).map(\.path),
                       ["/inApps/v1/transactions/76400001", "/inApps/v1/transactions/76400001", "/verifyReceipt"])
        XCTAssertEqual(r.logs.securityAlerts, [])
    }
}
