import Crypto
import _CryptoExtras
import Foundation
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// A StoreKit 1 app receipt (`Bundle.main.appStoreReceiptURL`, sent base64 as `receipt_data`) whose signature has
/// been verified: the fields `ValidateReceiptJob` uses.
///
/// Field types are Apple's "App Store receipt fields" (archived *Receipt Validation Programming Guide*, "Receipt
/// Fields"; developer.apple.com/documentation/appstorereceipts): payload `SET OF ReceiptAttribute {type INTEGER,
/// version INTEGER, value OCTET STRING}`; 2 bundle id (UTF8String), 12 creation date (IA5String, RFC 3339),
/// 17 one in-app purchase (its value is again a `SET OF ReceiptAttribute`: 1702 product id, 1703 transaction id,
/// 1705 original transaction id, UTF8Strings).
public struct AppleAppReceipt: Sendable, Equatable {
    public struct InAppPurchase: Sendable, Equatable {
        public var productID: String?
        public var transactionID: String?
        public var originalTransactionID: String?
    }
    public var bundleID: String?
    public var creationDate: Date?
    public var purchases: [InAppPurchase]

    /// The purchase whose transaction id (1703) or original transaction id (1705) is `transactionID`.
    public func purchase(_ transactionID: String) -> InAppPurchase? {
        purchases.first { $0.transactionID == transactionID } ?? purchases.first { $0.originalTransactionID == transactionID }
    }
}

/// Why an app receipt is not accepted as proof. Permanent: the same bytes fail the same way.
public enum AppleAppReceiptError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not base64, not a CMS/PKCS#7 SignedData with attached content, or a payload that is not Apple's format.
    case malformed(String)
    /// A signature or digest algorithm this verifier does not accept.
    case unsupportedAlgorithm(String)
    case invalidSignature(String)
    /// The signer's certificate does not lead to a configured root, or lacks Apple's receipt-signing OIDs.
    case untrustedChain(String)
    case wrongBundleID(expected: String, found: String?)
    /// No trusted root is configured (`RECEIPTS_APPLE_RECEIPT_ROOT_CA_FILES` set to nothing usable).
    case noTrustedRoot

    public var description: String {
        switch self {
        case .malformed(let why): return "the app receipt is malformed: \(why)"
        case .unsupportedAlgorithm(let what): return "the app receipt uses an unsupported algorithm: \(what)"
        case .invalidSignature(let why): return "the app receipt's signature does not verify: \(why)"
        case .untrustedChain(let why): return "the app receipt's certificate chain is not trusted: \(why)"
        case .wrongBundleID(let expected, let found):
            return "the app receipt is for bundle id \(found ?? "<none>"), expected \(expected)"
        case .noTrustedRoot: return "no trusted root certificate is configured for app receipts"
        }
    }
}

/// Verifies StoreKit 1 app receipts, then reads them the way Apple's App Store Server Library reads them.
///
/// 1. base64 → CMS `ContentInfo` (BER: Apple encodes receipts with indefinite lengths) of type `signedData`, with
///    attached `id-data` content and exactly one `SignerInfo`;
/// 2. the signer certificate (by `issuerAndSerialNumber`, among the certificates the receipt carries) signed the
///    content (or, when present, the DER of the signed attributes, whose `messageDigest` must be the content's):
///    RSA PKCS#1 v1.5 with SHA-256 (current receipts; `rsaEncryption` or `sha256WithRSAEncryption` as signature
///    OID, RFC 3370 §3.2), SHA-384/512, legacy SHA-1, or ECDSA P-256/SHA-256. Nothing else;
/// 3. the payload is parsed (the traversal of `ReceiptUtility.extractTransactionId(appReceipt:)`,
///    apple/app-store-server-library-swift `Sources/AppStoreServerLibrary/ReceiptUtility.swift`, which itself
///    verifies nothing, hence step 2 comes first);
/// 4. signer → intermediate → one of `rootCertificates` (X509 `Verifier`, RFC 5280) at the receipt's creation
///    date (now when absent; like `signedDate` for JWS, the date is read from content whose signature verified),
///    the leaf carrying Apple's receipt-signing OID 1.2.840.113635.100.6.11.1 and the intermediate the WWDR OID
///    1.2.840.113635.100.6.2.1 (`AppleReceiptSigningPolicy`, shared with the JWS verifier);
/// 5. the bundle id (type 2) is the configured one.
///
/// swift-certificates' `CMS.isValidSignature` is not used: it refuses a `SignerInfo` whose signature algorithm is
/// `rsaEncryption` (it needs a `sha…WithRSAEncryption` OID), the form RFC 3370 §3.2 prescribes and signers emit,
/// and its CMS types are internal. The structures are read with swift-asn1 instead, the signature checked with
/// swift-crypto keys taken from swift-certificates' `Certificate`.
///
/// Immutable and `Sendable`. Chain validation blocks the calling thread (`Blocking`): call it from worker threads.
public struct AppleAppReceiptVerifier: Sendable {
    public let rootCertificates: [Certificate]
    public let bundleID: String

    public init(rootCertificatesDER: [[UInt8]], bundleID: String) throws(AppleAppReceiptError) {
        var roots: [Certificate] = []
        for der in rootCertificatesDER {
            do { roots.append(try Certificate(derEncoded: der)) } catch {
                throw .untrustedChain("a configured root certificate cannot be parsed: \(error)")
            }
        }
        rootCertificates = roots
        self.bundleID = bundleID
    }

    /// Steps 1-5 on the base64 `receipt_data`.
    public func verify(base64 receipt: String) throws(AppleAppReceiptError) -> AppleAppReceipt {
        guard !rootCertificates.isEmpty else { throw .noTrustedRoot }
        let compact = receipt.filter { !$0.isWhitespace }
        guard let data = Data(base64Encoded: compact) else { throw .malformed("receipt_data is not base64") }
        let signed = try SignedReceipt(der: Array(data))
        let signer = try signed.verifySignature()
        let receipt = try Self.payload(signed.content)
        try verifyChain(signer: signer, intermediates: signed.certificates, at: receipt.creationDate ?? Date())
        guard receipt.bundleID == bundleID else { throw .wrongBundleID(expected: bundleID, found: receipt.bundleID) }
        return receipt
    }

    private func verifyChain(signer: Certificate, intermediates: [Certificate], at time: Date) throws(AppleAppReceiptError) {
        let roots = rootCertificates
        let result: CertificateValidationResult = Blocking.run {
            var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
                RFC5280Policy(fixedExpiryValidationTime: time)
                AppleReceiptSigningPolicy()
            }
            return await verifier.validate(leaf: signer, intermediates: CertificateStore(intermediates))
        }
        if case .couldNotValidate(let failures) = result {
            let reasons = failures.map { "\($0.policyFailureReason)" }
            let why = reasons.isEmpty ? "no path from the signer to a configured root certificate" : reasons.joined(separator: "; ")
            throw .untrustedChain(why + " (validation time \(ISO8601DateFormatter().string(from: time)))")
        }
    }

    // MARK: - Payload (ReceiptUtility's traversal)

    static let bundleIDType = 2, creationDateType = 12, inAppType = 17
    static let productIDType = 1702, transactionIDType = 1703, originalTransactionIDType = 1705

    /// The receipt attributes (type, value octets) of a `SET OF ReceiptAttribute`.
    static func attributes(_ bytes: ArraySlice<UInt8>) throws(AppleAppReceiptError) -> [(type: Int, value: ArraySlice<UInt8>)] {
        do {
            let root = try BER.parse(bytes)
            return try BER.sequence(root, identifier: .set) { nodes in
                var out: [(type: Int, value: ArraySlice<UInt8>)] = []
                while let node = nodes.next() {
                    out.append(try BER.sequence(node, identifier: .sequence) { fields in
                        let type = try Int(berEncoded: &fields)
                        _ = try Int(berEncoded: &fields)   // version: unused, as in ReceiptUtility
                        let value = try ASN1OctetString(berEncoded: &fields)
                        return (type, value.bytes)
                    })
                }
                return out
            }
        } catch let error as AppleAppReceiptError {
            throw error
        } catch {
            throw .malformed("receipt attributes: \(error)")
        }
    }

    /// A UTF8String or IA5String attribute value.
    static func string(_ value: ArraySlice<UInt8>) -> String? {
        guard let node = try? BER.parse(value) else { return nil }
        if let s = try? ASN1UTF8String(berEncoded: node) { return String(s) }
        if let s = try? ASN1IA5String(berEncoded: node) { return String(s) }
        return nil
    }

    static func payload(_ content: ArraySlice<UInt8>) throws(AppleAppReceiptError) -> AppleAppReceipt {
        var receipt = AppleAppReceipt(bundleID: nil, creationDate: nil, purchases: [])
        for attribute in try attributes(content) {
            switch attribute.type {
            case bundleIDType: receipt.bundleID = string(attribute.value)
            case creationDateType:
                receipt.creationDate = string(attribute.value).flatMap { ISO8601DateFormatter().date(from: $0) }
            case inAppType:
                var purchase = AppleAppReceipt.InAppPurchase()
                for field in try attributes(attribute.value) {
                    switch field.type {
                    case productIDType: purchase.productID = string(field.value)
                    case transactionIDType: purchase.transactionID = string(field.value)
                    case originalTransactionIDType: purchase.originalTransactionID = string(field.value)
                    default: break
                    }
                }
                receipt.purchases.append(purchase)
            default: break
            }
        }
        return receipt
    }
}

/// The parts of a CMS `SignedData` (RFC 5652 §5) a receipt check needs, read with swift-asn1.
struct SignedReceipt {
    static let signedDataOID: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 7, 2]
    static let dataOID: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 7, 1]
    static let messageDigestOID: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 9, 4]

    var content: ArraySlice<UInt8>
    var certificates: [Certificate]
    var digestAlgorithm: ASN1ObjectIdentifier
    var signatureAlgorithm: ASN1ObjectIdentifier
    var signature: ArraySlice<UInt8>
    var signerIssuer: DistinguishedName
    var signerSerial: Certificate.SerialNumber
    /// DER of the signed attributes re-tagged as `SET OF` (what is signed when they are present), and their
    /// `messageDigest`.
    var signedAttributes: (der: [UInt8], messageDigest: ArraySlice<UInt8>?)?

    init(der bytes: [UInt8]) throws(AppleAppReceiptError) {
        do {
            let root = try BER.parse(bytes)
            self = try BER.sequence(root, identifier: .sequence) { nodes in
                let type = try ASN1ObjectIdentifier(berEncoded: &nodes)
                guard type == Self.signedDataOID else { throw AppleAppReceiptError.malformed("not a CMS SignedData (\(type))") }
                return try BER.explicitlyTagged(&nodes, tagNumber: 0, tagClass: .contextSpecific) { node in
                    try Self.signedData(node)
                }
            }
        } catch let error as AppleAppReceiptError {
            throw error
        } catch {
            throw .malformed("\(error)")
        }
    }

    private init(content: ArraySlice<UInt8>, certificates: [Certificate], digestAlgorithm: ASN1ObjectIdentifier,
                 signatureAlgorithm: ASN1ObjectIdentifier, signature: ArraySlice<UInt8>, signerIssuer: DistinguishedName,
                 signerSerial: Certificate.SerialNumber, signedAttributes: (der: [UInt8], messageDigest: ArraySlice<UInt8>?)?) {
        self.content = content
        self.certificates = certificates
        self.digestAlgorithm = digestAlgorithm
        self.signatureAlgorithm = signatureAlgorithm
        self.signature = signature
        self.signerIssuer = signerIssuer
        self.signerSerial = signerSerial
        self.signedAttributes = signedAttributes
    }

    /// The OID of an `AlgorithmIdentifier` (parameters ignored).
    private static func algorithm(_ nodes: inout ASN1NodeCollection.Iterator) throws -> ASN1ObjectIdentifier {
        guard let node = nodes.next() else { throw AppleAppReceiptError.malformed("missing algorithm identifier") }
        return try BER.sequence(node, identifier: .sequence) { inner in
            let oid = try ASN1ObjectIdentifier(berEncoded: &inner)
            while inner.next() != nil {}
            return oid
        }
    }

    private static func signedData(_ node: ASN1Node) throws -> SignedReceipt {
        try BER.sequence(node, identifier: .sequence) { nodes in
            _ = try Int(berEncoded: &nodes)   // version
            guard nodes.next() != nil else { throw AppleAppReceiptError.malformed("missing digestAlgorithms") }
            // encapContentInfo: the receipt payload, attached (eContent) and of type id-data.
            guard let encapsulated = nodes.next() else { throw AppleAppReceiptError.malformed("missing encapContentInfo") }
            let content: ArraySlice<UInt8> = try BER.sequence(encapsulated, identifier: .sequence) { inner in
                let type = try ASN1ObjectIdentifier(berEncoded: &inner)
                guard type == Self.dataOID else { throw AppleAppReceiptError.malformed("content type is \(type), not id-data") }
                guard let octets = try BER.optionalExplicitlyTagged(&inner, tagNumber: 0, tagClass: .contextSpecific, { n in
                    try ASN1OctetString(berEncoded: n)
                }) else { throw AppleAppReceiptError.malformed("no attached content") }
                return octets.bytes
            }
            // certificates [0] IMPLICIT CertificateSet OPTIONAL; crls [1] IMPLICIT OPTIONAL.
            var certificates: [Certificate] = []
            var next = nodes.next()
            if let n = next, n.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                guard case .constructed(let children) = n.content else { throw AppleAppReceiptError.malformed("certificates not constructed") }
                for child in children {
                    certificates.append(try Certificate(derEncoded: Array(child.encodedBytes)))
                }
                next = nodes.next()
            }
            if let n = next, n.identifier == ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific) {
                next = nodes.next()
            }
            guard let signerInfos = next else { throw AppleAppReceiptError.malformed("missing signerInfos") }
            let infos: [ASN1Node] = try BER.sequence(signerInfos, identifier: .set) { set in
                var all: [ASN1Node] = []
                while let info = set.next() { all.append(info) }
                return all
            }
            guard infos.count == 1 else { throw AppleAppReceiptError.malformed("\(infos.count) signers, expected 1") }
            return try BER.sequence(infos[0], identifier: .sequence) { fields in
                _ = try Int(berEncoded: &fields)   // version 1: issuerAndSerialNumber
                guard let sid = fields.next() else { throw AppleAppReceiptError.malformed("missing signer identifier") }
                let (issuer, serial): (DistinguishedName, Certificate.SerialNumber) = try BER.sequence(sid, identifier: .sequence) { s in
                    guard let issuerNode = s.next() else { throw AppleAppReceiptError.malformed("missing signer issuer") }
                    let issuer = try DistinguishedName(derEncoded: issuerNode)
                    let serial = try ArraySlice<UInt8>(berEncoded: &s)
                    return (issuer, Certificate.SerialNumber(bytes: serial))
                }
                let digest = try algorithm(&fields)
                var signedAttributes: (der: [UInt8], messageDigest: ArraySlice<UInt8>?)?
                let attributesTag = ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)
                var afterDigest = fields.next()
                if let n = afterDigest, n.identifier == attributesTag {
                    // RFC 5652 §5.4: the signature covers the DER of the attributes with the SET OF tag (0x31).
                    var der = Array(n.encodedBytes)
                    der[0] = 0x31
                    var messageDigest: ArraySlice<UInt8>?
                    if case .constructed(let attributes) = n.content {
                        for attribute in attributes {
                            try BER.sequence(attribute, identifier: .sequence) { a in
                                let type = try ASN1ObjectIdentifier(berEncoded: &a)
                                guard let values = a.next() else { return }
                                if type == Self.messageDigestOID, case .constructed(let v) = values.content,
                                   let first = v.first(where: { _ in true }) {
                                    messageDigest = try ASN1OctetString(berEncoded: first).bytes
                                }
                            }
                        }
                    }
                    signedAttributes = (der, messageDigest)
                    afterDigest = fields.next()
                }
                guard let signatureAlgorithmNode = afterDigest else { throw AppleAppReceiptError.malformed("missing signature algorithm") }
                let signatureAlgorithm: ASN1ObjectIdentifier = try BER.sequence(signatureAlgorithmNode, identifier: .sequence) { inner in
                    let oid = try ASN1ObjectIdentifier(berEncoded: &inner)
                    while inner.next() != nil {}
                    return oid
                }
                let signature = try ASN1OctetString(berEncoded: &fields).bytes
                while fields.next() != nil {}   // unsignedAttrs
                return SignedReceipt(content: content, certificates: certificates, digestAlgorithm: digest,
                                     signatureAlgorithm: signatureAlgorithm, signature: signature, signerIssuer: issuer,
                                     signerSerial: serial, signedAttributes: signedAttributes)
            }
        }
    }

    // MARK: Signature

    enum Hash { case sha1, sha256, sha384, sha512 }

    static func hash(of digestOID: ASN1ObjectIdentifier) -> Hash? {
        switch digestOID {
        case [1, 3, 14, 3, 2, 26]: return .sha1
        case [2, 16, 840, 1, 101, 3, 4, 2, 1]: return .sha256
        case [2, 16, 840, 1, 101, 3, 4, 2, 2]: return .sha384
        case [2, 16, 840, 1, 101, 3, 4, 2, 3]: return .sha512
        default: return nil
        }
    }

    static func digest(_ hash: Hash, _ bytes: some DataProtocol) -> [UInt8] {
        switch hash {
        case .sha1: return Array(Insecure.SHA1.hash(data: bytes))
        case .sha256: return Array(SHA256.hash(data: bytes))
        case .sha384: return Array(SHA384.hash(data: bytes))
        case .sha512: return Array(SHA512.hash(data: bytes))
        }
    }

    /// Step 2: the signer certificate, once its key is shown to have signed this receipt.
    func verifySignature() throws(AppleAppReceiptError) -> Certificate {
        guard let hash = Self.hash(of: digestAlgorithm) else { throw .unsupportedAlgorithm("digest \(digestAlgorithm)") }
        guard let signer = certificates.first(where: { $0.serialNumber == signerSerial && $0.issuer == signerIssuer }) else {
            throw .invalidSignature("the signer's certificate is not in the receipt")
        }
        let signedBytes: [UInt8]
        if let signedAttributes {
            guard let messageDigest = signedAttributes.messageDigest else {
                throw .malformed("signed attributes without messageDigest")
            }
            guard Array(messageDigest) == Self.digest(hash, content) else {
                throw .invalidSignature("the content does not match the signed message digest")
            }
            signedBytes = signedAttributes.der
        } else {
            signedBytes = Array(content)
        }
        let valid: Bool
        switch signatureAlgorithm {
        case [1, 2, 840, 113549, 1, 1, 1], [1, 2, 840, 113549, 1, 1, 5], [1, 2, 840, 113549, 1, 1, 11],
             [1, 2, 840, 113549, 1, 1, 12], [1, 2, 840, 113549, 1, 1, 13]:
            // rsaEncryption (hash from digestAlgorithm) or sha1/256/384/512WithRSAEncryption, which must agree.
            let implied: Hash?
            switch signatureAlgorithm {
            case [1, 2, 840, 113549, 1, 1, 5]: implied = .sha1
            case [1, 2, 840, 113549, 1, 1, 11]: implied = .sha256
            case [1, 2, 840, 113549, 1, 1, 12]: implied = .sha384
            case [1, 2, 840, 113549, 1, 1, 13]: implied = .sha512
            default: implied = nil
            }
            if let implied, implied != hash { throw .unsupportedAlgorithm("signature \(signatureAlgorithm) with digest \(digestAlgorithm)") }
            guard let key = _RSA.Signing.PublicKey(signer.publicKey) else { throw .invalidSignature("the signer's key is not RSA") }
            let signature = _RSA.Signing.RSASignature(rawRepresentation: Array(signature))
            switch hash {
            case .sha1: valid = key.isValidSignature(signature, for: Insecure.SHA1.hash(data: signedBytes), padding: .insecurePKCS1v1_5)
            case .sha256: valid = key.isValidSignature(signature, for: SHA256.hash(data: signedBytes), padding: .insecurePKCS1v1_5)
            case .sha384: valid = key.isValidSignature(signature, for: SHA384.hash(data: signedBytes), padding: .insecurePKCS1v1_5)
            case .sha512: valid = key.isValidSignature(signature, for: SHA512.hash(data: signedBytes), padding: .insecurePKCS1v1_5)
            }
        case [1, 2, 840, 10045, 4, 3, 2]:
            guard hash == .sha256 else { throw .unsupportedAlgorithm("ecdsa-with-SHA256 with digest \(digestAlgorithm)") }
            guard let key = P256.Signing.PublicKey(signer.publicKey),
                  let signature = try? P256.Signing.ECDSASignature(derRepresentation: Array(signature)) else {
                throw .invalidSignature("the signer's key or signature is not P-256 ECDSA")
            }
            valid = key.isValidSignature(signature, for: SHA256.hash(data: signedBytes))
        default:
            throw .unsupportedAlgorithm("signature \(signatureAlgorithm)")
        }
        guard valid else { throw .invalidSignature("the signer's key did not sign this content") }
        return signer
    }
}
