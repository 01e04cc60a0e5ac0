import _CryptoExtras
import Foundation
@testable import WorkersAppJobs
import WorkersTestServices
import XCTest

/// `ReceiptsConfiguration.fromEnvironment`, secrets, and the pure status mappings.
final class ReceiptsConfigurationTests: XCTestCase {
    func temporaryFile(_ text: String) throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("receipts-\(UUID().uuidString)")
        try text.write(to: url, atomically: true, encoding: .utf8)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url.path
    }

    func testDefaultsAreTheProductionEndpoints() throws {
        let c = try ReceiptsConfiguration.fromEnvironment([:])
        XCTAssertEqual(c.appleVerifyReceiptProductionURL, "https://buy.itunes.apple.com/verifyReceipt")
        XCTAssertEqual(c.appleVerifyReceiptSandboxURL, "https://sandbox.itunes.apple.com/verifyReceipt")
        XCTAssertEqual(c.appleServerAPIProductionURL, "https://api.storekit.apple.com")
        XCTAssertEqual(c.googlePlayAPIURL, "https://androidpublisher.googleapis.com")
        XCTAssertEqual(c.effectiveGoogleTokenURL, "https://oauth2.googleapis.com/token")
        XCTAssertEqual(c.appleRootCertificates, [AppleRootCertificates.appleRootCAG3])
        XCTAssertEqual(c.appleGracePeriodDays, 16)
        XCTAssertEqual(c.googleGracePeriodDays, 3)
        XCTAssertEqual(c.googleAcknowledgementRetry, .seconds(60))
        XCTAssertFalse(c.usesAppStoreServerAPI)
    }

    func testGoogleAcknowledgementRetryDelay() throws {
        XCTAssertEqual(try ReceiptsConfiguration.fromEnvironment(["RECEIPTS_GOOGLE_ACK_RETRY_SECONDS": "5"]).googleAcknowledgementRetry,
                       .seconds(5))
        XCTAssertThrowsError(try ReceiptsConfiguration.fromEnvironment(["RECEIPTS_GOOGLE_ACK_RETRY_SECONDS": "0"]))
    }

    func testSecretsFromFilesAndNeverPrinted() throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let account = jsonString(["type": "service_account", "client_email": "w@x.iam.gserviceaccount.com",
                                  "private_key": key.pkcs8PEMRepresentation, "token_uri": "http://127.0.0.1:1/token"])
        let env = [
            "RECEIPTS_APPLE_SHARED_SECRET_FILE": try temporaryFile("top-secret\n"),
            "RECEIPTS_APPLE_ISSUER_ID": "issuer", "RECEIPTS_APPLE_KEY_ID": "KEY",
            "RECEIPTS_APPLE_PRIVATE_KEY_FILE": AppleFixtures.directory.appendingPathComponent("certs/testSigningKey.p8").path,
            "RECEIPTS_APPLE_BUNDLE_ID": "com.example",
            "RECEIPTS_APPLE_ROOT_CA_FILES": AppleFixtures.directory.appendingPathComponent("certs/testCA.der").path,
            "RECEIPTS_APPLE_ENVIRONMENTS": "Sandbox",
            "RECEIPTS_GOOGLE_SERVICE_ACCOUNT_FILE": try temporaryFile(account),
            "RECEIPTS_GOOGLE_PACKAGE_NAMES": "a.b, c.d",
            "RECEIPTS_SWEEP_BATCH_SIZE": "10",
        ]
        let c = try ReceiptsConfiguration.fromEnvironment(env)
        XCTAssertEqual(c.appleSharedSecret?.value, "top-secret")
        XCTAssertTrue(c.usesAppStoreServerAPI)
        XCTAssertEqual(c.appleRootCertificates, [try AppleFixtures.testCA()])
        XCTAssertEqual(c.appleAllowedEnvironments, ["Sandbox"])
        XCTAssertEqual(c.googlePackageNames, ["a.b", "c.d"])
        XCTAssertEqual(c.effectiveGoogleTokenURL, "http://127.0.0.1:1/token")
        XCTAssertEqual(c.sweepBatchSize, 10)
        let printed = "\(c) \(String(reflecting: c))"
        XCTAssertFalse(printed.contains("top-secret"))
        XCTAssertFalse(printed.contains("PRIVATE KEY"))
        XCTAssertFalse(printed.contains(String(key.pkcs8PEMRepresentation.dropFirst(40).prefix(30))))
    }

    func testMalformedVariablesAreNamedNotQuoted() {
        let cases: [([String: String], String)] = [
            (["RECEIPTS_APPLE_ISSUER_ID": "only-this"], "RECEIPTS_APPLE_ISSUER_ID/KEY_ID/PRIVATE_KEY"),
            (["RECEIPTS_APPLE_ISSUER_ID": "i", "RECEIPTS_APPLE_KEY_ID": "k", "RECEIPTS_APPLE_PRIVATE_KEY": "secret-garbage"],
             "RECEIPTS_APPLE_PRIVATE_KEY"),
            (["RECEIPTS_GOOGLE_SERVICE_ACCOUNT": "{not json secret-garbage"], "RECEIPTS_GOOGLE_SERVICE_ACCOUNT"),
            (["RECEIPTS_APPLE_SHARED_SECRET_FILE": "/nonexistent/secret"], "RECEIPTS_APPLE_SHARED_SECRET_FILE"),
            (["RECEIPTS_APPLE_SHARED_SECRET": "a", "RECEIPTS_APPLE_SHARED_SECRET_FILE": "/x"], "not both"),
            (["RECEIPTS_APPLE_VALIDATION": "server_api"], "server_api needs"),
            (["RECEIPTS_SWEEP_BATCH_SIZE": "0"], "RECEIPTS_SWEEP_BATCH_SIZE"),
        ]
        for (env, text) in cases {
            XCTAssertThrowsError(try ReceiptsConfiguration.fromEnvironment(env)) { error in
                XCTAssertTrue("\(error)".contains(text), "\(error)")
                XCTAssertFalse("\(error)".contains("secret-garbage"), "\(error)")
            }
        }
    }

    func testVerifyReceiptStatusTable() {
        func kind(_ s: Int, _ retryable: Bool = false) -> String {
            switch VerifyReceiptStatus(status: s, isRetryable: retryable) {
            case .valid: return "valid"
            case .sandboxReceipt: return "sandbox"
            case .productionReceipt: return "production"
            case .temporary: return "retry"
            case .ourFault: return "ours"
            case .invalid: return "invalid"
            }
        }
        XCTAssertEqual([0, 21006].map { kind($0) }, ["valid", "valid"])
        XCTAssertEqual(kind(21007), "sandbox")
        XCTAssertEqual(kind(21008), "production")
        XCTAssertEqual([21002, 21005, 21009].map { kind($0) }, ["retry", "retry", "retry"])
        XCTAssertEqual(kind(21150, true), "retry")
        XCTAssertEqual(kind(21150, false), "invalid")
        XCTAssertEqual([21003, 21010, 12345].map { kind($0) }, Array(repeating: "invalid", count: 3))
        XCTAssertEqual([21000, 21004].map { kind($0) }, ["ours", "ours"])
    }

    func testRedactionNeverShowsTheWholeValue() {
        let token = String(repeating: "abcdef", count: 30)
        XCTAssertFalse(Redact.token(token).contains(String(token.prefix(10))))
        XCTAssertTrue(Redact.fingerprint(token).hasPrefix("sha256:"))
        XCTAssertEqual("\(Secret("x"))", "<redacted>")
    }
}
