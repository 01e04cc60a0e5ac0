import Crypto
import Foundation
@testable import WorkersAppJobs
import WorkersTestServices
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

    /// A validated chain is remembered (`AppleChainCache`), and used only inside the window where all its
    /// certificates are valid: a JWS of the same chain signed before or after that window is refused as it was
    /// without the cache; the JWS's own signature is checked on every use.
    func testRememberedChainIsUsedOnlyInsideItsValidityWindow() throws {
        let start = Date().addingTimeInterval(-10 * 86400), end = Date().addingTimeInterval(10 * 86400)
        let signer = try TestAppleSigner(notBefore: start, notAfter: end)
        let v = try verifier(roots: [signer.rootDER])
        func jws(_ date: Date, id: String = "1") throws -> String {
            try signer.sign(["bundleId": "com.example", "environment": "Sandbox", "transactionId": id,
                             "signedDate": TestAppleSigner.ms(date)])
        }
        XCTAssertEqual(try v.verifyTransaction(try jws(Date())).transactionId, "1")
        XCTAssertEqual(v.chainCache.count, 1)
        XCTAssertEqual(try v.verifyTransaction(try jws(end.addingTimeInterval(-3600), id: "2")).transactionId, "2")
        XCTAssertEqual(v.chainCache.count, 1, "the same chain again: no second entry")
        for outside in [end.addingTimeInterval(3600), start.addingTimeInterval(-3600)] {
            XCTAssertThrowsError(try v.verifyTransaction(try jws(outside))) { error in
                guard case .untrustedChain = error as? AppleJWSError else { return XCTFail("\(error)") }
            }
        }
        // Another chain under another root: its own validation (refused here), no entry.
        let other = try TestAppleSigner()
        XCTAssertThrowsError(try v.verifyTransaction(try other.sign(["bundleId": "com.example", "environment": "Sandbox",
                                                                       "signedDate": TestAppleSigner.ms(Date())])))
        XCTAssertEqual(v.chainCache.count, 1)
    }

    /// The cache's table stays bounded (Apple's 32) and forgets entries older than 15 minutes.
    func testChainCacheIsBoundedAndEntriesExpire() throws {
        let cache = AppleChainCache()
        let key = P256.Signing.PrivateKey().publicKey
        let now = Date(), from = now.addingTimeInterval(-86400), until = now.addingTimeInterval(86400)
        for index in 0..<(AppleChainCache.capacity + 5) {
            cache.insert("chain-\(index)", leafKey: key, validFrom: from, validUntil: until, now: now)
            XCTAssertLessThanOrEqual(cache.count, AppleChainCache.capacity)
        }
        let last = "chain-\(AppleChainCache.capacity + 4)"
        XCTAssertEqual(cache.leafKey(for: last, at: now, now: now)?.rawRepresentation, key.rawRepresentation)
        XCTAssertNil(cache.leafKey(for: last, at: now, now: now.addingTimeInterval(AppleChainCache.lifetime + 1)))
        XCTAssertNil(cache.leafKey(for: last, at: now, now: now), "an expired entry is dropped when met")
    }

    /// `Base64URL` on bytes answers as the Foundation-string version it replaced (kept here as the oracle) for
    /// every length of random bytes, in both alphabets, with and without padding, and for refused texts.
    func testBase64URLAgreesWithTheStringVersionItReplaced() throws {
        func oracle(_ text: String) -> Data? {
            var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            s = s.replacingOccurrences(of: "=", with: "")
            guard s.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "/") }) else { return nil }
            s += String(repeating: "=", count: (4 - s.count % 4) % 4)
            return Data(base64Encoded: s)
        }
        var generator = SystemRandomNumberGenerator()
        for length in 0...70 {
            let bytes = Data((0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) })
            let standard = bytes.base64EncodedString()
            let url = Base64URL.encode(bytes)
            XCTAssertFalse(url.contains("=") || url.contains("+") || url.contains("/"), url)
            XCTAssertEqual(url, standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: ""))
            for text in [url, standard, url + "==", String(url.dropLast())] {
                XCTAssertEqual(Base64URL.decode(text), oracle(text), text)
            }
            XCTAssertEqual(Base64URL.decode(url), bytes)
        }
        for text in ["", "=", "A", "AB=C", "ab cd", "ab\ncd", "abc*", "abcé", "ab.c", "a-_b", "Zm9v\u{0}", "😀😀"] {
            XCTAssertEqual(Base64URL.decode(text), oracle(text), text)
        }
    }

    /// Google's timestamps (RFC 3339, protobuf's `Timestamp` JSON) parse to what `ISO8601DateFormatter` (the parser
    /// before) gave, to the millisecond; texts outside that shape are nil, including those the formatter or
    /// swift-foundation's style stretched (a leading space, `T24:30`, `T23:59:99`, ten fractional digits).
    func testGoogleTimestampsParseAsTheFormatterDidAndOtherShapesAreRefused() {
        func oracle(_ text: String) -> Date? {
            let f = ISO8601DateFormatter()
            f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            if let d = f.date(from: text) { return d }
            f.formatOptions = [.withInternetDateTime]
            return f.date(from: text)
        }
        for text in ["2024-01-01T00:00:00.123Z", "2024-01-01T00:00:00Z", "2024-01-01T00:00:00.123456Z",
                     "2024-01-01T00:00:00.123456789Z", "2024-01-01T01:00:00+02:00", "2024-01-01T00:00:00.5+05:30",
                     "2024-02-29T23:59:59.999Z", "1970-01-01T00:00:00.1Z", "2038-01-19T03:14:08-07:00"] {
            guard let expected = oracle(text) else { XCTFail("the oracle refused \(text)"); continue }
            XCTAssertEqual(RFC3339.parse(text)?.timeIntervalSince1970 ?? .nan, expected.timeIntervalSince1970, accuracy: 0.001, text)
        }
        for text in ["2024-01-01 00:00:00Z", "20240101T000000Z", "2024-01-01T00:00:00", "garbage", "", " 2024-01-01T00:00:00Z",
                     "2024-01-01T25:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T24:30:00Z", "2024-13-01T00:00:00Z",
                     "2024-01-32T00:00:00Z", "2024-01-01T00:60:00Z", "2024-01-01T23:59:99Z", "2024-01-01T00:00:00.Z",
                     "2024-01-01T00:00:00.1234567891Z", "2024-01-01T00:00:00+25:00", "2024-01-01T00:00:00+0200",
                     "2024-01-01T00:00:00Zjunk", "2024-1-01T00:00:00Z", "2024-01-01t00:00:00z", "2024-01-01T00:00:00 Z"] {
            XCTAssertNil(RFC3339.parse(text), text)
        }
        XCTAssertNil(RFC3339.parse(nil))
    }
}
