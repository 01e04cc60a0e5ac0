import Crypto
import _CryptoExtras
import Foundation

/// RFC 4648 §5 base64url without padding (JWS/JWT encoding).
///
/// Both directions work on the UTF-8 bytes, one pass each: a JWS of Apple's carries three certificates (~2.5 kB of
/// base64url), and Foundation's `replacingOccurrences` / Character-wise checks over it were a third of a receipts
/// job's CPU (bench/receipts-cpu.sh, issue 38).
public enum Base64URL {
    public static func encode(_ data: some DataProtocol) -> String {
        var bytes = Array(Data(data).base64EncodedData())
        while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
        for index in bytes.indices {
            switch bytes[index] {
            case UInt8(ascii: "+"): bytes[index] = UInt8(ascii: "-")
            case UInt8(ascii: "/"): bytes[index] = UInt8(ascii: "_")
            default: break
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Nil when `text` is not base64url. Tolerated, as before: padding (`=` is skipped wherever it stands) and the
    /// standard alphabet's `+` and `/`.
    public static func decode(_ text: some StringProtocol) -> Data? { decode(utf8: text.utf8) }

    /// `decode` of text given as its UTF-8 bytes (a slice of a JWS's bytes).
    public static func decode(utf8 text: some Collection<UInt8>) -> Data? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.count + 3)
        for byte in text {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "+"), UInt8(ascii: "/"):
                bytes.append(byte)
            case UInt8(ascii: "-"): bytes.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): bytes.append(UInt8(ascii: "/"))
            case UInt8(ascii: "="): continue
            default: return nil
            }
        }
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "="), count: (4 - bytes.count % 4) % 4))
        return Data(base64Encoded: Data(bytes))
    }
}

/// Compact JWT/JWS signing (RFC 7515/7519) with swift-crypto keys; no cryptography of our own.
///
/// Header and claims are JSON-encoded with sorted keys; the signature covers `base64url(header).base64url(claims)`.
public enum JWTSigner {
    /// ES256: ECDSA P-256 with SHA-256, signature as raw `r || s` (64 bytes) as JWS requires.
    public static func es256(header: some Encodable, claims: some Encodable, key: P256.Signing.PrivateKey) throws -> String {
        let input = try signingInput(header: header, claims: claims)
        let signature = try key.signature(for: Data(input.utf8))
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    /// RS256: RSASSA-PKCS1-v1_5 with SHA-256.
    public static func rs256(header: some Encodable, claims: some Encodable, key: _RSA.Signing.PrivateKey) throws -> String {
        let input = try signingInput(header: header, claims: claims)
        let signature = try key.signature(for: Data(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    static func signingInput(header: some Encodable, claims: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Base64URL.encode(try encoder.encode(header)) + "." + Base64URL.encode(try encoder.encode(claims))
    }
}

/// The bearer JWT of the App Store Server API: ES256, `kid` = key id, claims iss/iat/exp/aud/bid.
///
/// A new token is made for each request (Apple's advice); lifetime 5 minutes (Apple allows up to 60).
public enum AppStoreJWT {
    struct Header: Encodable { let alg = "ES256"; let kid: String; let typ = "JWT" }
    struct Claims: Encodable { let iss: String; let iat: Int64; let exp: Int64; let aud = "appstoreconnect-v1"; let bid: String }

    public static func signingKey(_ pem: Secret) throws -> P256.Signing.PrivateKey {
        try P256.Signing.PrivateKey(pemRepresentation: pem.value)
    }

    public static func make(credentials: AppStoreServerAPICredentials, bundleID: String, now: Date = Date()) throws -> String {
        let iat = Int64(now.timeIntervalSince1970)
        return try JWTSigner.es256(header: Header(kid: credentials.keyID),
                                   claims: Claims(iss: credentials.issuerID, iat: iat, exp: iat + 300, bid: bundleID),
                                   key: try signingKey(credentials.privateKey))
    }
}
