import Crypto
import _CryptoExtras
import Foundation
import Jobs
import Logging
import Queue
import Storage
import SwiftASN1
import TestSupport
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

/// A database with the schema, one app, one plan (Apple + Google products) and helpers to add users and read rows.
final class ReceiptsDatabase {
    static let appleProduct = "com.example.premium.monthly"
    static let googleProduct = "premium_monthly"
    let database: PostgresTestDatabase
    let pool: PostgresPool
    let appID = UUID()
    let planID: UUID

    init() throws {
        database = try PostgresTestDatabase.create(prefix: "receipts_test")
        pool = PostgresPool(url: database.url, maxConnections: 8)
        _ = try Migrator.bundled().migrate(pool: pool)
        let app = appID
        planID = try pool.withConnection { c in
            try c.queryFirst("""
                INSERT INTO subscription_plans (app_id, name, plan_type, apple_product_id, google_product_id, price)
                VALUES ($1, 'Premium', 'monthly', $2, $3, 4.99) RETURNING id
                """, [app, Self.appleProduct, Self.googleProduct])!.uuid("id")
        }
    }

    func close() {
        pool.shutdown()
        database.drop()
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

/// How the worker's `JobRunner` settled a delivery that did not succeed (thrown by `RunnerDriver`).
enum RunnerSettlement: Error, CustomStringConvertible {
    /// Scheduled for a retry: the payload as it went into `retry` (error fields, `retry_count`), due at `at`.
    case retry(JobPayload, at: Double)
    /// Sent to `dead`.
    case dead(JobPayload)
    /// Dropped (`retry: false`) or put back on the queue: not expected by these tests.
    case other(Settlement)

    var payload: JobPayload? {
        switch self {
        case .retry(let p, _), .dead(let p): return p
        case .other: return nil
        }
    }

    var description: String {
        switch self {
        case .retry(let p, _): return "retry: \(p.errorClass ?? "?"): \(p.errorMessage ?? "")"
        case .dead(let p): return "dead: \(p.errorClass ?? "?"): \(p.errorMessage ?? "")"
        case .other(let s): return "\(s)"
        }
    }
}

/// Runs jobs through the worker's own `JobRunner` — parse, look-up, decode, validate, the ledger check for a
/// delivery that may have run before, the run, and Sidekiq's retry/dead rules — against the test database, without
/// Redis: the fetch and the settlement's Redis write are the only parts left out. A delivery that ends in `retry`
/// or `dead` throws `RunnerSettlement`; `retry(_:)` hands a retried payload back as the retry poller does when it is
/// due, `redeliverInterrupted(_:)` as orphan recovery does after a crash.
///
/// Thread rules: a value; use it from the test's thread.
struct RunnerDriver {
    let runner: JobRunner

    init(registry: JobRegistry, database: JobDatabase) {
        var logger = Logger(label: "receipts-test")
        logger.logLevel = .critical
        runner = JobRunner(registry: registry, configuration: WorkerConfiguration(), database: database, logger: logger)
    }

    /// First delivery of `className` with `args` as `jid`; returns the payload delivered.
    @discardableResult
    func run(_ className: String, _ argsJSON: String, jid: String = Identifiers.jid()) throws -> JobPayload {
        guard case .array(let args) = try JSONValue.parse(argsJSON) else { throw JobError.badInput("args must be an array") }
        let payload = try JobClient.payload(for: NewJob(className, args: args), jid: jid, createdAt: Clock.now(), enqueuedAt: Clock.now())
        try deliver(payload)
        return payload
    }

    /// Delivers the payload of a `.retry` settlement again (what the retry poller does once it is due).
    func retry(_ settlement: RunnerSettlement) throws {
        guard case .retry(let payload, _) = settlement else { throw settlement }
        try deliver(payload)
    }

    /// Delivers `payload` again as recovered from a crashed worker (`interrupted_count` + 1).
    func redeliverInterrupted(_ payload: JobPayload) throws {
        var p = payload
        p.fields["interrupted_count"] = .int(Int64(p.interruptedCount + 1))
        try deliver(p)
    }

    /// One delivery through `JobRunner.run`: returns on `.ack` (done, or already applied), throws otherwise.
    func deliver(_ payload: JobPayload) throws {
        let raw = Array(payload.serialized().utf8)
        let job = FetchedJob(queue: "default", raw: raw, workingKey: "working:test")
        let parsed = JobRunner.parse(job)
        let execution = Execution(job: job, payload: try? parsed.get(), threadID: "test", startedAt: Clock.now(),
                                  timeout: runner.timeout(for: try? parsed.get()))
        switch runner.run(job, payload: parsed, execution: execution).settlement {
        case .ack: return
        case .retry(let text, let at): throw RunnerSettlement.retry(try JobPayload(parsing: text), at: at)
        case .dead(let text): throw RunnerSettlement.dead(try JobPayload(parsing: text))
        case let other: throw RunnerSettlement.other(other)
        }
    }
}

/// Test assertions on how the runner settled a failed delivery (`RunnerSettlement`): each names the exact failure
/// it expects, and anything else — a SQL error, a decoding bug, another service's failure — fails the assertion.
enum Failure {
    /// Sent to `dead` with an `error_message` containing `text`.
    static func isPermanent(_ error: any Error, containing text: String, file: StaticString = #filePath, line: UInt = #line) {
        guard case RunnerSettlement.dead(let payload) = error else {
            return XCTFail("expected dead with '\(text)', got \(error)", file: file, line: line)
        }
        let why = payload.errorMessage ?? ""
        XCTAssertTrue(why.contains(text), "dead with '\(why)', which lacks '\(text)'", file: file, line: line)
    }

    /// Retried because the store could not answer now: error class `StoreUnavailable`, message
    /// "<service> temporarily unavailable: <reason>" with `reason` in it.
    static func isUnavailable(_ error: any Error, service: String, containing reason: String,
                              file: StaticString = #filePath, line: UInt = #line) {
        guard case RunnerSettlement.retry(let payload, _) = error else {
            return XCTFail("expected a retry, \(service) unavailable (\(reason)), got \(error)", file: file, line: line)
        }
        XCTAssertEqual(payload.errorClass, "StoreUnavailable", "\(error)", file: file, line: line)
        let message = payload.errorMessage ?? ""
        XCTAssertTrue(message.hasPrefix("\(service) temporarily unavailable: ") && message.contains(reason),
                      "retry with '\(message)', expected \(service) unavailable with '\(reason)'", file: file, line: line)
    }

    /// Retried after the store's `Retry-After` (`JobError.retryAfter`, e.g. a 429): due `seconds` from now.
    static func isRetryAfter(_ error: any Error, seconds: Double, file: StaticString = #filePath, line: UInt = #line) {
        guard case RunnerSettlement.retry(let payload, let at) = error else {
            return XCTFail("expected a retry after \(seconds) s, got \(error)", file: file, line: line)
        }
        XCTAssertEqual(payload.errorClass, "RetryLater", "\(error)", file: file, line: line)
        // Measured from the failure's own timestamp (set with the due time), not from the test's clock.
        let failedAt = payload.fields["retried_at"]?.doubleValue ?? payload.fields["failed_at"]?.doubleValue ?? 0
        XCTAssertEqual(at - failedAt, seconds, accuracy: 0.5, "the retry is due after the store's Retry-After", file: file, line: line)
    }
}

func jsonString(_ object: Any) -> String {
    String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
}
