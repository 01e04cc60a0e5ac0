import Crypto
import Foundation

/// What `ExportURLSigner.verify` concluded about a link.
public enum ExportURLVerification: String, Sendable, Equatable {
    /// Signed with our key, for this base, and not yet expired.
    case valid
    /// Signed with our key, but `now` is at or past its `expires`.
    case expired
    /// Not a link we signed: wrong base, missing/garbled parameters, or a signature that does not match.
    case forged
}

/// Signs and verifies export download links.
///
/// A link is `<base>/<export_id>.json?expires=<unix seconds>&signature=<hex>` where
/// `signature = hex(HMAC-SHA256(secret, "<percent-encoded path>\n<expires>"))`. The path includes the base's
/// own path (e.g. `/privacy/exports/<id>.json`), so a signature is valid for one file and one expiry only.
/// Comparison is constant-time (swift-crypto). A value type without shared state: thread-safe.
public struct ExportURLSigner: Sendable {
    public let base: String
    /// The key bytes (`SymmetricKey` is not `Sendable`; one is built per call).
    private let secret: Data

    public init(base: String, secret: Data) {
        self.base = base.hasSuffix("/") ? String(base.dropLast()) : base
        self.secret = secret
    }

    private var key: SymmetricKey { SymmetricKey(data: secret) }

    public init(configuration: PrivacyConfiguration) {
        self.init(base: configuration.urlBase, secret: configuration.signingSecret)
    }

    /// The signed link to `<exportID>.json`, valid until `expires` (rounded down to whole seconds).
    public func sign(exportID: UUID, expires: Date) -> String {
        let unsigned = "\(base)/\(exportID.uuidString.lowercased()).json"
        let path = URLComponents(string: unsigned)?.percentEncodedPath ?? ""
        let epoch = Int64(expires.timeIntervalSince1970.rounded(.down))
        return "\(unsigned)?expires=\(epoch)&signature=\(Self.hex(mac(path: path, expires: epoch)))"
    }

    /// `.valid`, `.expired` (authentic but `now >= expires`) or `.forged` (anything else). Authenticity is
    /// checked first: a forged link is `.forged` whatever its expiry says.
    public func verify(url: String, now: Date = Date()) -> ExportURLVerification {
        guard let components = URLComponents(string: url), url.hasPrefix(base + "/"),
              let items = components.queryItems, items.count == 2,
              let expiresText = items.first(where: { $0.name == "expires" })?.value,
              let expires = Int64(expiresText), expires > 0, String(expires) == expiresText,
              let signatureText = items.first(where: { $0.name == "signature" })?.value,
              let signature = Self.bytes(hex: signatureText), signature.count == SHA256.byteCount,
              components.fragment == nil else {
            return .forged
        }
        let path = components.percentEncodedPath
        guard HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: Self.message(path: path, expires: expires),
                                                     using: key) else {
            return .forged
        }
        return now.timeIntervalSince1970 >= Double(expires) ? .expired : .valid
    }

    /// `verify` for a `URL` value.
    public func verify(url: URL, now: Date = Date()) -> ExportURLVerification {
        verify(url: url.absoluteString, now: now)
    }

    private func mac(path: String, expires: Int64) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Self.message(path: path, expires: expires), using: key))
    }

    private static func message(path: String, expires: Int64) -> Data { Data("\(path)\n\(expires)".utf8) }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        var out = ""
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return out
    }

    static func bytes(hex: String) -> [UInt8]? {
        let chars = Array(hex.utf8)
        guard chars.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 97...102: return c - 87
            default: return nil   // lowercase only: one canonical spelling per signature
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = nibble(chars[i]), let lo = nibble(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}
