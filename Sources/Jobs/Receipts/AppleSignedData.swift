import Crypto
import Foundation
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// Why a signed App Store payload (JWS) was rejected. Always permanent: the same bytes fail the same way.
public enum AppleJWSError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case unsupportedAlgorithm(String)
    /// The header has no `x5c` array of exactly three certificates (leaf, intermediate, root).
    case missingCertificateChain(String)
    case invalidCertificate(String)
    /// The chain does not lead to a configured root at the validation time, or lacks Apple's OIDs.
    case untrustedChain(String)
    case invalidSignature
    case wrongBundleID(expected: String, found: String?)
    case wrongEnvironment(allowed: [String], found: String?)
    case wrongAppAppleID(expected: Int64, found: Int64?)
    case invalidPayload(String)

    public var description: String {
        switch self {
        case .malformed(let why): return "signed data is not a compact JWS: \(why)"
        case .unsupportedAlgorithm(let alg): return "signed data uses alg \(alg), only ES256 is accepted"
        case .missingCertificateChain(let why): return "signed data has no usable x5c certificate chain: \(why)"
        case .invalidCertificate(let why): return "a certificate of the x5c chain cannot be parsed: \(why)"
        case .untrustedChain(let why): return "the x5c chain is not trusted: \(why)"
        case .invalidSignature: return "the JWS signature does not verify with the leaf certificate's key"
        case .wrongBundleID(let expected, let found):
            return "signed data is for bundle id \(found ?? "<none>"), expected \(expected)"
        case .wrongEnvironment(let allowed, let found):
            return "signed data is from environment \(found ?? "<none>"), accepted: \(allowed.joined(separator: ", "))"
        case .wrongAppAppleID(let expected, let found):
            return "signed data is for appAppleId \(found.map(String.init) ?? "<none>"), expected \(expected)"
        case .invalidPayload(let why): return "signed payload cannot be decoded: \(why)"
        }
    }
}

/// Verifies JWS signed by the App Store (transactions, renewal info, server notifications), like Apple's
/// `SignedDataVerifier` with online (OCSP) checks off:
///
/// 1. compact JWS, header `alg` = ES256, `x5c` = exactly three base64 DER certificates;
/// 2. leaf → intermediate → one of `rootCertificates` (X509 `Verifier`, RFC 5280 rules), the leaf carrying
///    OID 1.2.840.113635.100.6.11.1 and the intermediate 1.2.840.113635.100.6.2.1;
///    **validation time = the payload's `signedDate`** (now when absent), as Apple's library does offline, so a
///    payload signed while its certificates were valid stays verifiable after they expire;
/// 3. the ES256 signature with the leaf's public key;
/// 4. `bundleId`, `environment` (and `appAppleId` for Production notifications, when configured).
///
/// Immutable and `Sendable`; safe to share between threads. Chain validation runs swift-certificates' async
/// verifier and blocks the calling thread until it finishes (worker threads are plain threads, never the
/// concurrency pool). A chain validated once is remembered for its validity window (`AppleChainCache`): a JWS
/// under the same three certificates, signed at a time inside that window, skips step 2; step 3 always runs.
public struct AppleSignedDataVerifier: Sendable {
    public let rootCertificates: [Certificate]
    public let bundleID: String
    public let allowedEnvironments: Set<String>
    public let appAppleID: Int64?
    /// Chains validated against `rootCertificates` (shared by the copies of this verifier).
    let chainCache = AppleChainCache()

    public init(rootCertificatesDER: [[UInt8]], bundleID: String, allowedEnvironments: Set<String>,
                appAppleID: Int64? = nil) throws(AppleJWSError) {
        var roots: [Certificate] = []
        for der in rootCertificatesDER {
            do { roots.append(try Certificate(derEncoded: der)) } catch {
                throw .invalidCertificate("configured root: \(error)")
            }
        }
        self.rootCertificates = roots
        self.bundleID = bundleID
        self.allowedEnvironments = allowedEnvironments
        self.appAppleID = appAppleID
    }

    public func verifyTransaction(_ jws: String, expectedEnvironment: String? = nil) throws(AppleJWSError) -> AppleTransaction {
        let t: AppleTransaction = try decode(try verifiedPayload(jws))
        try check(bundleID: t.bundleId)
        try check(environment: t.environment, expected: expectedEnvironment)
        return t
    }

    public func verifyRenewalInfo(_ jws: String, expectedEnvironment: String? = nil) throws(AppleJWSError) -> AppleRenewalInfo {
        let r: AppleRenewalInfo = try decode(try verifiedPayload(jws))
        try check(environment: r.environment, expected: expectedEnvironment)
        return r
    }

    public func verifyNotification(_ jws: String) throws(AppleJWSError) -> AppleNotification {
        let n: AppleNotification = try decode(try verifiedPayload(jws))
        let bundle = n.data?.bundleId ?? n.summary?.bundleId
        let environment = n.data?.environment ?? n.summary?.environment
        try check(bundleID: bundle)
        try check(environment: environment, expected: nil)
        if let appAppleID, environment == "Production" {
            let found = n.data?.appAppleId ?? n.summary?.appAppleId
            guard found == appAppleID else { throw .wrongAppAppleID(expected: appAppleID, found: found) }
        }
        return n
    }

    // MARK: - Steps

    private func check(bundleID found: String?) throws(AppleJWSError) {
        guard found == bundleID else { throw .wrongBundleID(expected: bundleID, found: found) }
    }

    private func check(environment found: String?, expected: String?) throws(AppleJWSError) {
        if let expected {
            guard found == expected else { throw .wrongEnvironment(allowed: [expected], found: found) }
        }
        guard let found, allowedEnvironments.contains(found) else {
            throw .wrongEnvironment(allowed: allowedEnvironments.sorted(), found: found)
        }
    }

    private func decode<T: Decodable>(_ payload: Data) throws(AppleJWSError) -> T {
        do { return try JSONDecoder().decode(T.self, from: payload) } catch {
            throw .invalidPayload("\(T.self): \(error)")
        }
    }

    /// Steps 1-3; returns the payload bytes. Works on the JWS's UTF-8 bytes (split, base64url, signing input).
    func verifiedPayload(_ jws: String) throws(AppleJWSError) -> Data {
        let compact = Self.trimmed(jws).utf8
        let parts = compact.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("expected 3 dot-separated parts, got \(parts.count)") }
        guard let headerData = Base64URL.decode(utf8: parts[0]),
              let header = try? JSONSerialization.jsonObject(with: headerData) as? [String: Any] else {
            throw .malformed("header is not base64url JSON")
        }
        guard let payload = Base64URL.decode(utf8: parts[1]) else { throw .malformed("payload is not base64url") }
        guard let signatureBytes = Base64URL.decode(utf8: parts[2]) else { throw .malformed("signature is not base64url") }
        let alg = header["alg"] as? String ?? "<none>"
        guard alg == "ES256" else { throw .unsupportedAlgorithm(alg) }
        guard let x5c = header["x5c"] as? [String] else { throw .missingCertificateChain("header has no x5c claim") }
        guard x5c.count == 3 else { throw .missingCertificateChain("x5c holds \(x5c.count) certificates, expected 3") }
        let validationTime = Self.signedDate(in: payload) ?? Date()
        let cacheKey = x5c.joined(separator: ".")
        let publicKey: P256.Signing.PublicKey
        if let cached = chainCache.leafKey(for: cacheKey, at: validationTime) {
            publicKey = cached
        } else {
            var chain: [Certificate] = []
            for (index, encoded) in x5c.enumerated() {
                guard let der = Data(base64Encoded: encoded) else { throw .invalidCertificate("x5c[\(index)] is not base64") }
                do { chain.append(try Certificate(derEncoded: Array(der))) } catch {
                    throw .invalidCertificate("x5c[\(index)]: \(error)")
                }
            }
            let validated = try verifyChain(leaf: chain[0], intermediate: chain[1], at: validationTime)
            guard let leafKey = P256.Signing.PublicKey(chain[0].publicKey) else {
                throw .invalidCertificate("leaf key is not P-256")
            }
            publicKey = leafKey
            chainCache.insert(cacheKey, leafKey: leafKey, validFrom: validated.map(\.notValidBefore).max()!,
                              validUntil: validated.map(\.notValidAfter).min()!)
        }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes) else {
            throw .invalidSignature
        }
        let signingInput = Data(compact[compact.startIndex..<parts[1].endIndex])
        guard publicKey.isValidSignature(signature, for: signingInput) else { throw .invalidSignature }
        return payload
    }

    /// `jws` without surrounding white space (Foundation's `trimmingCharacters` only when an end is not plain ASCII:
    /// the usual JWS is passed through untouched).
    static func trimmed(_ jws: String) -> Substring {
        let utf8 = jws.utf8
        if let first = utf8.first, let last = utf8.last, (0x21...0x7E).contains(first), (0x21...0x7E).contains(last) {
            return jws[...]
        }
        return Substring(jws.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// `signedDate` (ms since 1970) of a JSON payload, if it has one.
    static func signedDate(in payload: Data) -> Date? {
        guard let object = try? JSONSerialization.jsonObject(with: payload) as? [String: Any],
              let ms = (object["signedDate"] as? NSNumber)?.doubleValue else { return nil }
        return Date(timeIntervalSince1970: ms / 1000)
    }

    /// The validated chain (leaf, intermediate, root).
    private func verifyChain(leaf: Certificate, intermediate: Certificate, at time: Date) throws(AppleJWSError) -> [Certificate] {
        let roots = rootCertificates
        let result: CertificateValidationResult = Blocking.run {
            var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
                RFC5280Policy(fixedExpiryValidationTime: time)
                AppleReceiptSigningPolicy()
            }
            return await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        }
        switch result {
        case .validCertificate(let validated):
            guard Array(validated).count == 3 else {
                throw .untrustedChain("validated chain has \(Array(validated).count) certificates, expected 3")
            }
            return Array(validated)
        case .couldNotValidate(let failures):
            let reasons = failures.map { "\($0.policyFailureReason)" }
            let why = reasons.isEmpty ? "no path from the leaf to a configured root certificate" : reasons.joined(separator: "; ")
            throw .untrustedChain(why + " (validation time \(ISO8601DateFormatter().string(from: time)))")
        }
    }
}

/// Apple's marker OIDs: leaf = App Store receipt signing, intermediate = Apple WWDR.
struct AppleReceiptSigningPolicy: VerifierPolicy {
    static let leafOID = "1.2.840.113635.100.6.11.1"
    static let intermediateOID = "1.2.840.113635.100.6.2.1"
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []

    mutating func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        let certificates = Array(chain)
        guard certificates.count == 3 else {
            return .failsToMeetPolicy(reason: "chain has \(certificates.count) certificates, expected 3")
        }
        func has(_ certificate: Certificate, _ oid: String) -> Bool {
            certificate.extensions.contains { $0.oid.description == oid }
        }
        guard has(certificates[0], Self.leafOID) else {
            return .failsToMeetPolicy(reason: "leaf certificate lacks the App Store signing OID \(Self.leafOID)")
        }
        guard has(certificates[1], Self.intermediateOID) else {
            return .failsToMeetPolicy(reason: "intermediate certificate lacks the Apple WWDR OID \(Self.intermediateOID)")
        }
        return .meetsPolicy
    }
}

/// Runs async work to completion from a synchronous caller.
///
/// Thread rule: call only from threads outside Swift's cooperative pool (worker pool threads, test threads);
/// blocking a cooperative thread could starve the task this waits for.
enum Blocking {
    private final class Box<T>: @unchecked Sendable {
        var value: T?  // written once by the task before `done` is signalled, read after
        let done = DispatchSemaphore(value: 0)
    }

    static func run<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let box = Box<T>()
        Task.detached {
            box.value = await body()
            box.done.signal()
        }
        box.done.wait()
        return box.value!
    }
}

// MARK: - Decoded payloads (fields we use; Apple's models have more)

/// `JWSTransactionDecodedPayload`. Dates are milliseconds since 1970.
public struct AppleTransaction: Decodable, Sendable, Equatable {
    public var transactionId: String?
    public var originalTransactionId: String?
    public var bundleId: String?
    public var productId: String?
    public var purchaseDate: Int64?
    public var originalPurchaseDate: Int64?
    public var expiresDate: Int64?
    public var type: String?
    /// 1 introductory offer, 2 promotional, 3 offer code, 4 win-back.
    public var offerType: Int?
    /// `FREE_TRIAL`, `PAY_AS_YOU_GO`, `PAY_UP_FRONT`.
    public var offerDiscountType: String?
    public var revocationDate: Int64?
    public var revocationReason: Int?
    /// `REFUND_FULL`, `REFUND_PRORATED` (see `revocationPercentage`) or `FAMILY_REVOKE`
    /// (developer.apple.com/documentation/appstoreservernotifications/revocationtype).
    public var revocationType: String?
    /// The refunded share of a `REFUND_PRORATED` transaction, in thousandths of a percent (Apple's unit).
    public var revocationPercentage: Int?
    public var environment: String?
    public var signedDate: Int64?
    public var appAccountToken: String?
    /// True on a transaction the customer upgraded away from (its period was replaced by the upgrade's transaction):
    /// never the subscription's current period (JWSTransactionDecodedPayload `isUpgraded`,
    /// developer.apple.com/documentation/appstoreserverapi/jwstransactiondecodedpayload).
    public var isUpgraded: Bool?
    /// PURCHASED or FAMILY_SHARED (developer.apple.com/documentation/appstoreserverapi/inappownershiptype).
    public var inAppOwnershipType: String?

    /// A free trial: an introductory offer that is free (or, for older payloads without `offerDiscountType`,
    /// any introductory offer).
    public var isTrial: Bool { offerType == 1 && (offerDiscountType == nil || offerDiscountType == "FREE_TRIAL") }
}

/// `JWSRenewalInfoDecodedPayload`.
public struct AppleRenewalInfo: Decodable, Sendable, Equatable {
    public var originalTransactionId: String?
    public var productId: String?
    public var autoRenewProductId: String?
    /// 1 on, 0 off.
    public var autoRenewStatus: Int?
    public var expirationIntent: Int?
    public var isInBillingRetryPeriod: Bool?
    public var gracePeriodExpiresDate: Int64?
    public var environment: String?
    public var signedDate: Int64?
}

/// `ResponseBodyV2DecodedPayload` (App Store Server Notifications V2).
public struct AppleNotification: Decodable, Sendable, Equatable {
    public struct Payload: Decodable, Sendable, Equatable {
        public var appAppleId: Int64?
        public var bundleId: String?
        public var environment: String?
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?
        public var status: Int?
    }
    public struct Summary: Decodable, Sendable, Equatable {
        public var appAppleId: Int64?
        public var bundleId: String?
        public var environment: String?
    }
    public var notificationType: String
    public var subtype: String?
    public var notificationUUID: String
    public var data: Payload?
    public var summary: Summary?
    public var version: String?
    public var signedDate: Int64?
}

extension Int64 {
    /// Milliseconds since 1970 as a `Date`.
    var millisecondsDate: Date { Date(timeIntervalSince1970: Double(self) / 1000) }
}
