import Crypto
import Foundation
import Queue

/// One personal argument value on the wire: `{"enc":"v2","kid":"<key id>","ct":"<base64 nonce‖ciphertext‖tag>"}`.
/// `ct` is AES-256-GCM, under the subject's data key, of the value's JSON text.
///
/// The associated data binds the ciphertext to where it belongs (`associatedData`):
/// - **v2** (sealed since issue 50): the length-prefixed encoding — each part as a 4-byte big-endian byte count and
///   its UTF-8 bytes, no separator a name could contain — of `v2`, the key id, the field name and the job's class. A
///   ciphertext moved to another field, paired with another key id or pasted into a job of another class does not open.
/// - **v1** (sealed before): `v1|<kid>|<field>`: bound to its key and field, not to its class. Opened only as the
///   opener's rules for it say (`SubjectArgumentsOpener`: not in strict mode, not after `legacyAcceptedUntil`).
/// Binding to the person is the opener's rule: every personal field of a job must be sealed under its subject's key.
/// The key id is random (`SubjectKeyStore`): it names no person.
public struct PersonalEnvelope: Sendable, Equatable {
    /// The version new envelopes are sealed with.
    public static let version = "v2"
    /// The version sealed before jobs' envelopes were bound to their class.
    public static let legacyVersion = "v1"
    /// After this time no v1 envelope is opened: this release's date (2026-12-07) plus the longest retry window (25
    /// retries, about 21 days) and the dead set's retention (180 days), so every v1 job enqueued before the upgrade
    /// has run or aged out of `dead` by then.
    public static let legacyAcceptedUntil = Date(timeIntervalSince1970: 1_813_968_000)  // 2026-12-07 + 201 days: 2027-06-26T00:00Z

    public let version: String
    public let keyID: String
    public let ciphertext: Data

    /// The envelope `value` is (v1 or v2), or nil when it is not one (a clear value, or an unknown version: see
    /// `isEnvelopeLike`).
    public init?(_ value: JSONValue) {
        guard let object = value.objectValue, object.count == 3, let version = object["enc"]?.stringValue,
              version == Self.version || version == Self.legacyVersion,
              let kid = object["kid"]?.stringValue, let ct = object["ct"]?.stringValue,
              let data = Data(base64Encoded: ct) else { return nil }
        self.version = version
        self.keyID = kid
        self.ciphertext = data
    }

    /// True when `value` looks like an envelope of any version (an object with `enc`), readable or not.
    public static func isEnvelopeLike(_ value: JSONValue) -> Bool { value.objectValue?["enc"] != nil }

    init(version: String, keyID: String, ciphertext: Data) {
        self.version = version
        self.keyID = keyID
        self.ciphertext = ciphertext
    }

    /// The associated data of an envelope of `version` (v1: `v1|kid|field`; v2: the length-prefixed parts).
    static func associatedData(version: String, keyID: String, field: String, className: String) -> Data {
        guard version == Self.version else { return Data("\(version)|\(keyID)|\(field)".utf8) }
        var data = Data()
        for part in [version, keyID, field, className] {
            let bytes = Array(part.utf8)
            withUnsafeBytes(of: UInt32(clamping: bytes.count).bigEndian) { data.append(contentsOf: $0) }
            data.append(contentsOf: bytes)
        }
        return data
    }

    /// `value` sealed for `field` of a job of `className` under `key`, as `version` (v2; v1 only while workers of
    /// the previous release may fetch the job: `SubjectKeysConfiguration.envelopeVersion`).
    static func seal(_ value: JSONValue, field: String, className: String, keyID: String, key: SymmetricKey,
                     version: String = PersonalEnvelope.version) throws -> PersonalEnvelope {
        let version = version == legacyVersion ? legacyVersion : Self.version
        let box = try AES.GCM.seal(Data(value.serialized().utf8), using: key,
                                   authenticating: associatedData(version: version, keyID: keyID, field: field, className: className))
        return PersonalEnvelope(version: version, keyID: keyID, ciphertext: box.combined!)
    }

    /// The value, or nil when `key`, `field` or `className` is not the one it was sealed with (or the bytes changed).
    func open(field: String, className: String, key: SymmetricKey) -> JSONValue? {
        guard let box = try? AES.GCM.SealedBox(combined: ciphertext),
              let plain = try? AES.GCM.open(box, using: key, authenticating: Self.associatedData(
                  version: version, keyID: keyID, field: field, className: className))
        else { return nil }
        return try? JSONValue.parse(data: plain)
    }

    public var json: JSONValue {
        .object(["enc": .string(version), "kid": .string(keyID), "ct": .string(ciphertext.base64EncodedString())])
    }
}
