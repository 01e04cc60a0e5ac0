import Foundation
@testable import WorkersAppJobs
import WorkersMail
import WorkersQueue
import XCTest

/// ExportURLSigner (HMAC-SHA256 over path and expiry) and PrivacyConfiguration.fromEnvironment.
final class PrivacySignerTests: XCTestCase {
    let secret = Data("0123456789abcdef0123456789abcdef-signing".utf8)
    let base = "https://api.example.com/privacy/exports"
    let export = UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!
    let expires = Date(timeIntervalSince1970: 1_900_000_000)

    var signer: ExportURLSigner { ExportURLSigner(base: base, secret: secret) }

    func testSignedURLShapeAndValidity() {
        let url = signer.sign(exportID: export, expires: expires)
        XCTAssertTrue(url.hasPrefix("\(base)/6f9619ff-8b86-d011-b42d-00c04fc964ff.json?expires=1900000000&signature="))
        XCTAssertEqual(url.count, base.count + "/6f9619ff-8b86-d011-b42d-00c04fc964ff.json?expires=1900000000&signature=".count + 64)
        XCTAssertEqual(signer.verify(url: url, now: expires.addingTimeInterval(-7 * 86400)), .valid)
        XCTAssertEqual(signer.verify(url: url, now: expires.addingTimeInterval(-1)), .valid)
        XCTAssertEqual(signer.verify(url: URL(string: url)!, now: expires.addingTimeInterval(-1)), .valid)
    }

    func testSignatureIsHMACSHA256OverPathAndExpiry() {
        // Recomputed independently with openssl:
        //   printf '/privacy/exports/6f9619ff-8b86-d011-b42d-00c04fc964ff.json\n1900000000' |
        //     openssl dgst -sha256 -hmac '0123456789abcdef0123456789abcdef-signing'
        let url = signer.sign(exportID: export, expires: expires)
        XCTAssertEqual(String(url.suffix(64)), Self.expectedSignature)
    }

    func testExpiredAtAndAfterExpiry() {
        let url = signer.sign(exportID: export, expires: expires)
        XCTAssertEqual(signer.verify(url: url, now: expires), .expired)
        XCTAssertEqual(signer.verify(url: url, now: expires.addingTimeInterval(86400 * 365)), .expired)
    }

    func testForgeries() {
        let url = signer.sign(exportID: export, expires: expires)
        let now = expires.addingTimeInterval(-60)
        let other = UUID().uuidString.lowercased()
        let signature = String(url.suffix(64))
        let flipped = String(signature.dropLast()) + (signature.last == "0" ? "1" : "0")
        let forgeries = [
            String(url.dropLast()) + (url.last == "0" ? "1" : "0"),                                 // signature bit
            url.replacingOccurrences(of: "6f9619ff-8b86-d011-b42d-00c04fc964ff", with: other),     // another file
            url.replacingOccurrences(of: "expires=1900000000", with: "expires=1900000001"),        // longer life
            url.replacingOccurrences(of: "expires=1900000000", with: "expires=01900000000"),       // other spelling
            url.replacingOccurrences(of: signature, with: signature.uppercased()),                 // not canonical
            url.replacingOccurrences(of: signature, with: flipped),
            url.replacingOccurrences(of: "&signature=\(signature)", with: ""),                     // unsigned
            url.replacingOccurrences(of: "expires=1900000000&", with: ""),
            url + "&extra=1",
            url + "#fragment",
            url.replacingOccurrences(of: "https://api.example.com", with: "https://evil.example.com"),
            url.replacingOccurrences(of: "/privacy/exports/", with: "/privacy/exports/../exports/"),
            ExportURLSigner(base: base, secret: Data("another-secret-another-secret-another".utf8))
                .sign(exportID: export, expires: expires),                                          // other key
            "not a url", "",
        ]
        for forged in forgeries {
            XCTAssertEqual(signer.verify(url: forged, now: now), .forged, forged)
            // Forged stays forged after expiry too (authenticity is checked first).
            XCTAssertEqual(signer.verify(url: forged, now: expires.addingTimeInterval(1)), .forged, forged)
        }
    }

    static let expectedSignature = "d836439b5f58206490f0008b00ce11a190536cc72f4adb2891f5a0c5c6a55bf0"

    // MARK: - Configuration

    func testConfigurationFromEnvironmentWithSecretFiles() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("privacy-conf-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let secretFile = dir.appendingPathComponent("secret")
        try Data("s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t-42\n".utf8).write(to: secretFile)
        let passwordFile = dir.appendingPathComponent("smtp-password")
        try Data("mail-pass\n".utf8).write(to: passwordFile)
        let configuration = try PrivacyConfiguration.fromEnvironment([
            "PRIVACY_EXPORT_DIR": "/var/lib/workers/exports",
            "PRIVACY_EXPORT_URL_BASE": "https://api.example.com/privacy/exports/",
            "PRIVACY_EXPORT_SIGNING_SECRET_FILE": secretFile.path,
            "PRIVACY_MAIL_FROM": "privacy@example.com", "PRIVACY_MAIL_FROM_NAME": "Privacy",
            "SMTP_HOST": "smtp.example.com", "SMTP_USERNAME": "mailer", "SMTP_PASSWORD_FILE": passwordFile.path,
        ])
        XCTAssertEqual(configuration.storageDirectory.path, "/var/lib/workers/exports")
        XCTAssertEqual(configuration.urlBase, "https://api.example.com/privacy/exports")
        XCTAssertEqual(configuration.signingSecret, Data("s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t-42".utf8))
        XCTAssertEqual(configuration.linkValidity, 7 * 86400)
        XCTAssertEqual(configuration.smtp.host, "smtp.example.com")
        XCTAssertEqual(configuration.smtp.port, 587)
        XCTAssertEqual(configuration.smtp.security, .startTLS, "STARTTLS is required by default")
        XCTAssertEqual(configuration.smtp.username, "mailer")
        XCTAssertEqual(configuration.smtp.password, "mail-pass")
        XCTAssertEqual(configuration.mailFrom, EmailAddress("privacy@example.com", name: "Privacy"))
        XCTAssertEqual(configuration.mailDomain, "example.com")
        XCTAssertEqual(configuration.queue, "default")
    }

    func testConfigurationErrorsNameTheVariableAndNeverTheSecret() {
        let good: [String: String] = [
            "PRIVACY_EXPORT_DIR": "/tmp/exports", "PRIVACY_EXPORT_URL_BASE": "https://x.example/e",
            "PRIVACY_EXPORT_SIGNING_SECRET": String(repeating: "k", count: 32), "PRIVACY_MAIL_FROM": "p@x.example",
            "SMTP_HOST": "127.0.0.1", "SMTP_PORT": "2525", "SMTP_SECURITY": "none",
        ]
        XCTAssertNoThrow(try PrivacyConfiguration.fromEnvironment(good))
        func error(_ change: [String: String?]) -> String {
            var env = good
            for (k, v) in change { env[k] = v }
            do { _ = try PrivacyConfiguration.fromEnvironment(env); return "no error" } catch { return error.description }
        }
        XCTAssertEqual(error(["PRIVACY_EXPORT_DIR": nil]), "PRIVACY_EXPORT_DIR is not set")
        XCTAssertTrue(error(["PRIVACY_EXPORT_DIR": "relative/dir"]).contains("absolute"))
        XCTAssertTrue(error(["PRIVACY_EXPORT_URL_BASE": "ftp://x"]).contains("PRIVACY_EXPORT_URL_BASE"))
        XCTAssertTrue(error(["PRIVACY_EXPORT_URL_BASE": "https://x.example/e?a=1"]).contains("PRIVACY_EXPORT_URL_BASE"))
        XCTAssertTrue(error(["PRIVACY_EXPORT_SIGNING_SECRET": nil]).contains("PRIVACY_EXPORT_SIGNING_SECRET"))
        let short = error(["PRIVACY_EXPORT_SIGNING_SECRET": "short-secret"])
        XCTAssertTrue(short.contains("at least 32 bytes") && !short.contains("short-secret"), short)
        XCTAssertTrue(error(["PRIVACY_EXPORT_SIGNING_SECRET": nil, "PRIVACY_EXPORT_SIGNING_SECRET_FILE": "/nonexistent/s"])
            .contains("cannot read"))
        XCTAssertTrue(error(["SMTP_SECURITY": "ssl3"]).contains("SMTP_SECURITY"))
        XCTAssertTrue(error(["SMTP_PORT": "0"]).contains("SMTP_PORT"))
        XCTAssertTrue(error(["PRIVACY_MAIL_FROM": "nobody"]).contains("PRIVACY_MAIL_FROM"))
        XCTAssertEqual(error(["SMTP_HOST": nil]), "SMTP_HOST is not set")
        XCTAssertEqual(try PrivacyConfiguration.fromEnvironment(good.merging(["SMTP_SECURITY": "tls"]) { $1 }).smtp.security,
                       .implicitTLS)
        XCTAssertEqual(try PrivacyConfiguration.fromEnvironment(good.merging(["SMTP_SECURITY": "starttls-optional"]) { $1 })
            .smtp.security, .startTLSIfAvailable)
    }

    // MARK: - Redis glob

    func testCaseInsensitiveGlobForUUIDs() {
        XCTAssertEqual(RedisJobPurger.caseInsensitiveGlob("ab-1f"), "[aA][bB]-1[fF]")
        let id = UUID().uuidString.lowercased()
        XCTAssertTrue(RedisJobPurger.arguments(of: Array("{\"class\":\"X\",\"args\":[{\"u\":\"\(id.uppercased())\"}],\"jid\":\"0123456789abcdef01234567\"}".utf8),
                                               contain: id))
        XCTAssertFalse(RedisJobPurger.arguments(of: Array("{\"class\":\"\(id)\",\"args\":[1],\"jid\":\"0123456789abcdef01234567\"}".utf8),
                                                contain: id), "only args count")
        // E-mail needles: whole addresses only, any case; glob metacharacters escaped, or no server-side filter
        // when JSON may write the address escaped.
        func job(_ arg: String) -> [UInt8] {
            Array(JSONValue.object(["class": "M", "args": .array([.string(arg)]), "jid": "0123456789abcdef01234567"]).serialized().utf8)
        }
        XCTAssertTrue(RedisJobPurger.arguments(of: job("Bob <BOB@Example.org>"), containAnyOf: ["bob@example.org"]))
        XCTAssertFalse(RedisJobPurger.arguments(of: job("jimbob@example.org"), containAnyOf: ["bob@example.org"]))
        XCTAssertFalse(RedisJobPurger.arguments(of: job("bob@example.org.uk"), containAnyOf: ["bob@example.org"]))
        XCTAssertEqual(RedisJobPurger.caseInsensitiveGlob("a*b?"), "[aA]\\*[bB]\\?")
        XCTAssertEqual(RedisJobPurger.matchPatterns(for: [id, "a@b.io"]).count, 2)
        XCTAssertEqual(RedisJobPurger.matchPatterns(for: [id, "a/b@b.io"]), ["*"])
        XCTAssertEqual(RedisJobPurger.matchPatterns(for: [id, "jörg@b.io"]), ["*"])
    }
}
