import Crypto
import Foundation
import WorkersQueue

/// One personal argument value on the wire: `{"enc":"v2","kid":"<key id>","ct":"<base64 nonce‖ciphertext‖tag>"}`.
/// `ct` is AES-256-GCM, under the subject's data key, of the value's JSON text.
///
/// The associated data binds the ciphertext to where it belongs (`associatedData`):
/// - **v3** (sealed since issue 50 was completed): the length-prefixed encoding — each part as a 4-byte big-endian
///   byte count and its UTF-8 bytes, no separator a name could contain — of `v3`, the key id, the field name, the
///   job's class and its jid. A ciphertext moved to another field, paired with another key id, pasted into a job of
///   another class or into another job (a copy under a new jid, which the ledger would run again) does not open.
/// - **v2** (sealed by the release before): the same without the jid. **v1** (before that): `v1|<kid>|<field>`, bound
///   to its key and field only. Both are opened only as the opener's rules for them say (`SubjectArgumentsOpener`:
///   not after `legacyAcceptedUntil`; v1 never in strict mode).
/// Binding to the person is the opener's rule: every personal field of a job must be sealed under its subject's key.
/// The key id is random (`SubjectKeyStore`): it names no person.
public struct PersonalEnvelope: Sendable, Equatable {
    /// The version new envelopes are sealed with.
    public static let version = "v3"
    /// Bound to key, field and class, not to the jid: sealed by the previous release.
    public static let classBoundVersion = "v2"
    /// The version sealed before jobs' envelopes were bound to their class.
    public static let legacyVersion = "v1"
    /// The versions this release opens.
    public static let versions: Set<String> = [version, classBoundVersion, legacyVersion]
    /// After this time no v1 or v2 envelope is opened: this release's date (2026-12-07) plus the longest retry window (25
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
              Self.versions.contains(version),
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

    /// The associated data of an envelope of `version` (v1: `v1|kid|field`; v2: the length-prefixed version, key id,
    /// field and class; v3: the same and the jid).
    static func associatedData(version: String, keyID: String, field: String, className: String, jid: String) -> Data {
        if version == Self.legacyVersion { return Data("\(version)|\(keyID)|\(field)".utf8) }
        var data = Data()
        for part in [version, keyID, field, className] + (version == Self.version ? [jid] : []) {
            let bytes = Array(part.utf8)
            withUnsafeBytes(of: UInt32(clamping: bytes.count).bigEndian) { data.append(contentsOf: $0) }
            data.append(contentsOf: bytes)
        }
        return data
    }

    /// `value` sealed for `field` of the job `jid` of `className` under `key`, as `version` (v3; v2 or v1 only while
    /// workers of a previous release may fetch the job: `SubjectKeysConfiguration.envelopeVersion`).
    static func seal(_ value: JSONValue, field: String, className: String, jid: String, keyID: String, key: SymmetricKey,
                     version: String = PersonalEnvelope.version) throws -> PersonalEnvelope {
        let version = versions.contains(version) ? version : Self.version
        let box = try AES.GCM.seal(Data(value.serialized().utf8), using: key,
                                   authenticating: associatedData(version: version, keyID: keyID, field: field,
                                                                  className: className, jid: jid))
        return PersonalEnvelope(version: version, keyID: keyID, ciphertext: box.combined!)
    }

    /// The value, or nil when `key`, `field`, `className` or `jid` (v3) is not the one it was sealed with (or the
    /// bytes changed).
    func open(field: String, className: String, jid: String, key: SymmetricKey) -> JSONValue? {
        guard let box = try? AES.GCM.SealedBox(combined: ciphertext),
              let plain = try? AES.GCM.open(box, using: key, authenticating: Self.associatedData(
                  version: version, keyID: keyID, field: field, className: className, jid: jid))
        else { return nil }
        return try? JSONValue.parse(data: plain)
    }

    public var json: JSONValue {
        .object(["enc": .string(version), "kid": .string(keyID), "ct": .string(ciphertext.base64EncodedString())])
    }
}
