import Crypto
import _CryptoExtras
import Foundation
import WorkersHTTP
import WorkersAppJobs
import Logging
import WorkersQueue
import WorkersStorage
import SwiftASN1
import WorkersTestServices
@testable import Workers
import X509
import XCTest

/// Apple's published test data (`Tests/Fixtures/apple-app-store-server`, MIT, copied from `shared/fixtures`).
enum AppleFixtures {
    static var directory: URL { TestServices.fixturesDirectory.appendingPathComponent("apple-app-store-server") }
    static func text(_ relative: String) throws -> String {
        try String(contentsOf: directory.appendingPathComponent(relative), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
    static func testCA() throws -> [UInt8] { Array(try Data(contentsOf: directory.appendingPathComponent("certs/testCA.der"))) }
    static func signingKeyPEM() throws -> String { try text("certs/testSigningKey.p8") }
}

/// A root → intermediate → leaf chain made in the test with swift-certificates, carrying Apple's marker OIDs, and
/// a signer of App Store-style JWS with it. The fixtures' test CA key is not published, so JWS with our own
/// payloads are signed under this root (configured as the trusted root in those tests).
struct TestAppleSigner {
    let rootDER: [UInt8]
    let chain: [String]   // x5c: leaf, intermediate, root (base64 DER)
    let leafKey: P256.Signing.PrivateKey

    /// `validity`: the certificates' lifetime (to test validation at `signedDate`).
    init(notBefore: Date = Date().addingTimeInterval(-86400), notAfter: Date = Date().addingTimeInterval(365 * 86400),
         leafOID: Bool = true) throws {
        let rootKey = P256.Signing.PrivateKey(), intermediateKey = P256.Signing.PrivateKey(), leafKey = P256.Signing.PrivateKey()
        let rootName = try DistinguishedName { CommonName("Receipts Test Root") }
        let intermediateName = try DistinguishedName { CommonName("Receipts Test WWDR") }
        let leafName = try DistinguishedName { CommonName("Receipts Test Signing") }
        let root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey),
            notValidBefore: notBefore.addingTimeInterval(-86400), notValidAfter: notAfter.addingTimeInterval(86400),
            issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(rootKey))
        let intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey),
            notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: rootName, subject: intermediateName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                Certificate.Extension(oid: [1, 2, 840, 113635, 100, 6, 2, 1], critical: false, value: [0x05, 0x00])
            },
            issuerPrivateKey: .init(rootKey))
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey),
            notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: intermediateName, subject: leafName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                if leafOID {
                    Certificate.Extension(oid: [1, 2, 840, 113635, 100, 6, 11, 1], critical: false, value: [0x05, 0x00])
                }
            },
            issuerPrivateKey: .init(intermediateKey))
        func der(_ c: Certificate) throws -> [UInt8] { var s = DER.Serializer(); try s.serialize(c); return s.serializedBytes }
        rootDER = try der(root)
        chain = [try der(leaf), try der(intermediate), rootDER].map { Data($0).base64EncodedString() }
        self.leafKey = leafKey
    }

    /// A compact JWS of `payload` with this chain in `x5c`.
    func sign(_ payload: [String: Any]) throws -> String {
        let header: [String: Any] = ["alg": "ES256", "x5c": chain]
        let h = Base64URL.encode(try JSONSerialization.data(withJSONObject: header))
        let p = Base64URL.encode(try JSONSerialization.data(withJSONObject: payload))
        let signature = try leafKey.signature(for: Data("\(h).\(p)".utf8))
        return "\(h).\(p).\(Base64URL.encode(signature.rawRepresentation))"
    }

    static func ms(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970 * 1000) }
}

extension TestAppleSigner {
    /// A signed transaction (JWS) of subscription `original` to `ReceiptsDatabase.appleProduct`, bought a day ago,
    /// expiring in 29 days; `accountToken`, when given, as its `appAccountToken`.
    func subscriptionTransaction(id: String, original: String, accountToken: UUID? = nil,
                                 environment: String = "Production") throws -> String {
        let now = Date()
        var tx: [String: Any] = [
            "transactionId": id, "originalTransactionId": original, "bundleId": "com.example",
            "productId": ReceiptsDatabase.appleProduct, "type": "Auto-Renewable Subscription",
            "purchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-86400)),
            "originalPurchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-86400)),
            "expiresDate": TestAppleSigner.ms(now.addingTimeInterval(29 * 86400)), "environment": environment,
            "signedDate": TestAppleSigner.ms(now)]
        if let accountToken { tx["appAccountToken"] = accountToken.uuidString.lowercased() }
        return try sign(tx)
    }

    /// Makes the Apple fake answer for subscription `id` (its own original): Get Transaction Info with `jws`, Get All
    /// Subscription Statuses with `jws` as the last transaction (status 1) and a renewal info signed by this signer.
    func register(_ jws: String, id: String, with fakes: FakeServers) throws {
        try fakes.admin(.apple, "POST", "apple/transactions", json: ["transaction_id": id, "signedTransactionInfo": jws])
        try fakes.admin(.apple, "POST", "apple/subscriptions", json: ["transaction_id": id, "response": [
            "environment": "Production", "bundleId": "com.example", "appAppleId": 1234,
            "data": [["subscriptionGroupIdentifier": "g", "lastTransactions": [[
                "originalTransactionId": id, "status": 1, "signedTransactionInfo": jws,
                "signedRenewalInfo": try sign(["originalTransactionId": id, "autoRenewStatus": 1,
                                               "environment": "Production", "signedDate": TestAppleSigner.ms(Date())]),
            ]]]]]])
    }
}

/// One app and one plan (Apple + Google products) in a `JobsFixture`'s database, and helpers to add users and
/// read rows.
final class ReceiptsDatabase {
    static let appleProduct = "com.example.premium.monthly"
    static let googleProduct = "premium_monthly"
    let fixture: JobsFixture
    let appID = UUID()
    let planID: UUID

    var database: PostgresTestDatabase { fixture.database }
    var pool: PostgresPool { fixture.pool }

    init(_ fixture: JobsFixture) throws {
        self.fixture = fixture
        let app = appID
        planID = try fixture.pool.withConnection { c in
            try c.queryFirst("""
                INSERT INTO subscription_plans (app_id, name, plan_type, apple_product_id, google_product_id, price)
                VALUES ($1, 'Premium', 'monthly', $2, $3, 4.99) RETURNING id
                """, [app, Self.appleProduct, Self.googleProduct])!.uuid("id")
        }
    }

    func newUser() throws -> UUID {
        let app = appID
        return try pool.withConnection { c in
            try c.queryFirst("INSERT INTO users (app_id) VALUES ($1) RETURNING id", [app])!.uuid("id")
        }
    }

    func scalar(_ sql: String, _ params: [(any PostgresBindable)?] = []) throws -> Int {
        try pool.withConnection { c in Int(try c.queryFirst("SELECT (" + sql + ")::bigint AS n", params)!.int64("n")) }
    }

    func string(_ sql: String, _ params: [(any PostgresBindable)?] = []) throws -> String? {
        try pool.withConnection { c in try c.queryFirst(sql, params)?.optionalString("v") }
    }

    func userStatus(_ user: UUID) throws -> String? {
        try string("SELECT status AS v FROM users WHERE id = $1", [user])
    }

    func subscriptionStatus(key: String) throws -> String? {
        try string("SELECT status AS v FROM subscriptions WHERE store_transaction_id = $1", [key])
    }

    func events(key: String) throws -> [String] {
        try pool.withConnection { c in
            try c.query("""
                SELECT e.event_type FROM subscription_events e JOIN subscriptions s ON s.id = e.subscription_id
                WHERE s.store_transaction_id = $1 ORDER BY e."timestamp", e.event_type
                """, [key]).map { try $0.string("event_type") }
        }
    }
}

func jsonString(_ object: Any) -> String {
    String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
}

/// Base of the receipts test classes: a `JobsFixture` (each class says which, in `makeFixture()`) with
/// `ReceiptsDatabase`'s app and plan in it (`db`), and an HTTP client that names the receipts tests.
class ReceiptsTestCase: JobsTestCase {
    private(set) var db: ReceiptsDatabase!

    override func makeHTTPClient() -> HTTPClient {
        HTTPClient(configuration: HTTPClientConfiguration(userAgent: "receipts-test", timeout: .seconds(5)))
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        db = try ReceiptsDatabase(fixture)
    }

    /// `base` with the Google side against the fake Google servers: a fresh RSA service account (the fake is told
    /// its public key and checks every assertion's signature), package com.example.app, acknowledgements due at once.
    func googleConfiguration(_ base: ReceiptsConfiguration = ReceiptsConfiguration()) throws -> ReceiptsConfiguration {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let json = jsonString(["type": "service_account", "project_id": "demo", "private_key_id": "k1",
                               "private_key": key.pkcs8PEMRepresentation, "client_email": "worker@demo.iam.gserviceaccount.com",
                               "token_uri": fakes.googleTokenURL])
        try fakes.configure(.google, ["service_account": ["client_email": "worker@demo.iam.gserviceaccount.com",
                                                          "public_key_pem": key.publicKey.pemRepresentation]])
        var c = base
        c.googleServiceAccount = try GoogleServiceAccount(json: Secret(json))
        c.googlePlayAPIURL = fakes.googleAPIBaseURL
        c.googlePackageNames = ["com.example.app"]
        c.googleAcknowledgementRetry = .zero  // an owed acknowledgement is due again at once
        return c
    }

    /// The Apple side against the fake Apple servers: legacy verifyReceipt (switch `appleValidation` for the App Store
    /// Server API), shared secret "shh", bundle id com.example, app Apple ID 1234 (required with Production signed
    /// data accepted, the default environments), trust anchors `roots`, a 2 s request timeout.
    func appleConfiguration(roots: [[UInt8]] = [AppleRootCertificates.appleRootCAG3]) -> ReceiptsConfiguration {
        var c = ReceiptsConfiguration()
        c.appleVerifyReceiptProductionURL = fakes.appleVerifyReceiptProductionURL
        c.appleVerifyReceiptSandboxURL = fakes.appleVerifyReceiptSandboxURL
        c.appleServerAPIProductionURL = fakes.appleServerAPIBaseURL
        c.appleServerAPISandboxURL = fakes.appleServerAPISandboxBaseURL
        c.appleSharedSecret = Secret("shh")
        c.appleBundleID = "com.example"
        c.appleAppAppleID = 1234
        c.appleRootCertificates = roots
        c.appleValidation = .verifyReceipt
        c.requestTimeout = .seconds(2)
        return c
    }
}
