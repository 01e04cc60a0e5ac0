import Crypto
import Foundation
@testable import Jobs
import TestSupport
import XCTest

/// Signed App Store data: Apple's fixture JWS against its test CA, our own chains, and the rejections.
final class ReceiptsJWSTests: XCTestCase {
    func verifier(roots: [[UInt8]], bundle: String = "com.example",
                  environments: Set<String> = ["Sandbox", "Production"]) throws -> AppleSignedDataVerifier {
        try AppleSignedDataVerifier(rootCertificatesDER: roots, bundleID: bundle, allowedEnvironments: environments)
    }

    func testEmbeddedAppleRootMatchesPublishedFingerprint() {
        let hex = SHA256.hash(data: AppleRootCertificates.appleRootCAG3).map { String(format: "%02X", $0) }.joined(separator: ":")
        XCTAssertEqual(hex, "63:34:3A:BF:B8:9A:6A:03:EB:B5:7E:9B:3F:5F:A7:BE:7C:4F:5C:75:6F:30:17:B3:A8:C4:88:C3:65:3E:91:79")
    }

    func testAppleFixtureTransactionVerifiesAgainstTheTestCA() throws {
        let v = try verifier(roots: [try AppleFixtures.testCA()])
        let t = try v.verifyTransaction(try AppleFixtures.text("mock_signed_data/transactionInfo"))
        XCTAssertEqual(t.bundleId, "com.example")
        XCTAssertEqual(t.environment, "Sandbox")
        let r = try v.verifyRenewalInfo(try AppleFixtures.text("mock_signed_data/renewalInfo"))
        XCTAssertEqual(r.environment, "Sandbox")
        let n = try v.verifyNotification(try AppleFixtures.text("mock_signed_data/testNotification"))
        XCTAssertEqual(n.notificationType, "TEST")
        XCTAssertEqual(n.notificationUUID, "9ad56bd2-0bc6-42e0-af24-fd996d87a1e6")
    }

    func testWrongBundleIdFixtureIsRejectedWithTheReason() throws {
        let v = try verifier(roots: [try AppleFixtures.testCA()])
        XCTAssertThrowsError(try v.verifyNotification(try AppleFixtures.text("mock_signed_data/wrongBundleId"))) { error in
            XCTAssertEqual(error as? AppleJWSError, .wrongBundleID(expected: "com.example", found: "com.example.wrong"))
            XCTAssertTrue("\(error)".contains("com.example.wrong"))
        }
    }

    func testMissingX5CFixtureIsRejectedWithTheReason() throws {
        let v = try verifier(roots: [try AppleFixtures.testCA()])
        XCTAssertThrowsError(try v.verifyNotification(try AppleFixtures.text("mock_signed_data/missingX5CHeaderClaim"))) { error in
            XCTAssertEqual(error as? AppleJWSError, .missingCertificateChain("header has no x5c claim"))
        }
    }

    func testFixtureIsNotTrustedUnderTheProductionAppleRoot() throws {
        let v = try verifier(roots: [AppleRootCertificates.appleRootCAG3])
        XCTAssertThrowsError(try v.verifyTransaction(try AppleFixtures.text("mock_signed_data/transactionInfo"))) { error in
            guard case .untrustedChain = error as? AppleJWSError else { return XCTFail("\(error)") }
        }
    }

    func testEnvironmentOutsideTheAllowedSetIsRejected() throws {
        let v = try verifier(roots: [try AppleFixtures.testCA()], environments: ["Production"])
        XCTAssertThrowsError(try v.verifyTransaction(try AppleFixtures.text("mock_signed_data/transactionInfo"))) { error in
            XCTAssertEqual(error as? AppleJWSError, .wrongEnvironment(allowed: ["Production"], found: "Sandbox"))
        }
        let both = try verifier(roots: [try AppleFixtures.testCA()])
        XCTAssertThrowsError(try both.verifyTransaction(try AppleFixtures.text("mock_signed_data/transactionInfo"),
                                                        expectedEnvironment: "Production"))
    }

    func testOwnChainVerifiesAndATamperedPayloadDoesNot() throws {
        let signer = try TestAppleSigner()
        let v = try verifier(roots: [signer.rootDER])
        let jws = try signer.sign(["bundleId": "com.example", "environment": "Sandbox", "transactionId": "42",
                                   "productId": "p", "signedDate": TestAppleSigner.ms(Date())])
        XCTAssertEqual(try v.verifyTransaction(jws).transactionId, "42")
        var parts = jws.split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(Data(#"{"bundleId":"com.example","environment":"Sandbox","transactionId":"43"}"#.utf8))
        XCTAssertThrowsError(try v.verifyTransaction(parts.joined(separator: "."))) { error in
            XCTAssertEqual(error as? AppleJWSError, .invalidSignature)
        }
        // Another root: not trusted.
        XCTAssertThrowsError(try verifier(roots: [try AppleFixtures.testCA()]).verifyTransaction(jws))
    }

    func testLeafWithoutAppleOIDIsRejected() throws {
        let signer = try TestAppleSigner(leafOID: false)
        let jws = try signer.sign(["bundleId": "com.example", "environment": "Sandbox", "signedDate": TestAppleSigner.ms(Date())])
        XCTAssertThrowsError(try verifier(roots: [signer.rootDER]).verifyTransaction(jws)) { error in
            XCTAssertTrue("\(error)".contains("1.2.840.113635.100.6.11.1"), "\(error)")
        }
    }

    /// Apple's library validates the chain at the payload's signedDate when online checks are off: a payload signed
    /// while its certificates were valid stays verifiable after they expired; one signed after expiry does not.
    func testChainIsValidatedAtSignedDate() throws {
        let start = Date().addingTimeInterval(-400 * 86400), end = Date().addingTimeInterval(-30 * 86400)
        let signer = try TestAppleSigner(notBefore: start, notAfter: end)
        let v = try verifier(roots: [signer.rootDER])
        let old = try signer.sign(["bundleId": "com.example", "environment": "Sandbox",
                                   "signedDate": TestAppleSigner.ms(end.addingTimeInterval(-86400))])
        XCTAssertNoThrow(try v.verifyTransaction(old))
        let late = try signer.sign(["bundleId": "com.example", "environment": "Sandbox", "signedDate": TestAppleSigner.ms(Date())])
        XCTAssertThrowsError(try v.verifyTransaction(late)) { error in
            guard case .untrustedChain = error as? AppleJWSError else { return XCTFail("\(error)") }
        }
    }

    func testAppStoreJWTHasApplesClaimsAndVerifiesWithTheP8Key() throws {
        let pem = try AppleFixtures.signingKeyPEM()
        let creds = AppStoreServerAPICredentials(issuerID: "issuer-1", keyID: "KEY123", privateKey: Secret(pem))
        let jwt = try AppStoreJWT.make(credentials: creds, bundleID: "com.example", now: Date(timeIntervalSince1970: 1_700_000_000))
        let parts = jwt.split(separator: ".")
        XCTAssertEqual(parts.count, 3)
        let header = try JSONSerialization.jsonObject(with: Base64URL.decode(parts[0])!) as! [String: Any]
        let claims = try JSONSerialization.jsonObject(with: Base64URL.decode(parts[1])!) as! [String: Any]
        XCTAssertEqual(header["alg"] as? String, "ES256")
        XCTAssertEqual(header["kid"] as? String, "KEY123")
        XCTAssertEqual(claims["aud"] as? String, "appstoreconnect-v1")
        XCTAssertEqual(claims["bid"] as? String, "com.example")
        XCTAssertEqual((claims["exp"] as? Int).map { $0 - 1_700_000_000 }, 300)
        let key = try P256.Signing.PrivateKey(pemRepresentation: pem).publicKey
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: Base64URL.decode(parts[2])!)
        XCTAssertTrue(key.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)))
    }
}
