import Crypto
import Foundation

/// A secret value (shared secret, private key, service-account JSON) that never prints itself.
///
/// `description`, `debugDescription` and string interpolation give `<redacted>`; only `value` exposes it.
public struct Secret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    public let value: String
    public init(_ value: String) { self.value = value }
    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
}

/// How receipts, purchase tokens and transaction ids appear in logs: never in full.
public enum Redact {
    /// `sha256:<first 12 hex digits>` of `value` (lets operators correlate log lines without the value).
    public static func fingerprint(_ value: String) -> String {
        let digest = SHA256.hash(data: Data(value.utf8))
        return "sha256:" + digest.prefix(6).map { String(format: "%02x", $0) }.joined()
    }

    /// The first 4 characters, an ellipsis and the length: `abcd…(812)`.
    public static func token(_ value: String) -> String {
        value.count <= 8 ? "…(\(value.count))" : "\(value.prefix(4))…(\(value.count))"
    }
}
