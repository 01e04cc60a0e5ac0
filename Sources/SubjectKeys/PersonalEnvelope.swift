import Crypto
import Foundation
import Queue

/// One personal argument value on the wire: `{"enc":"v1","kid":"<key id>","ct":"<base64 nonce‖ciphertext‖tag>"}`.
/// `ct` is AES-256-GCM, under the subject's data key, of the value's JSON text; the associated data is
/// `v1|<kid>|<field name>`, so a ciphertext moved to another field or paired with another key id does not open.
/// The key id is random (`SubjectKeyStore`): it names no person.
public struct PersonalEnvelope: Sendable, Equatable {
    public static let version = "v1"
    public let keyID: String
    public let ciphertext: Data

    /// The envelope `value` is, or nil when it is not one (a clear value).
    public init?(_ value: JSONValue) {
        guard let object = value.objectValue, object.count == 3, object["enc"]?.stringValue == Self.version,
              let kid = object["kid"]?.stringValue, let ct = object["ct"]?.stringValue,
              let data = Data(base64Encoded: ct) else { return nil }
        self.keyID = kid
        self.ciphertext = data
    }

    /// True when `value` looks like an envelope of any version (an object with `enc`), readable or not.
    public static func isEnvelopeLike(_ value: JSONValue) -> Bool { value.objectValue?["enc"] != nil }

    init(keyID: String, ciphertext: Data) {
        self.keyID = keyID
        self.ciphertext = ciphertext
    }

    /// `value` sealed for `field` under `key`.
    static func seal(_ value: JSONValue, field: String, keyID: String, key: SymmetricKey) throws -> PersonalEnvelope {
        let box = try AES.GCM.seal(Data(value.serialized().utf8), using: key,
                                   authenticating: Data("\(version)|\(keyID)|\(field)".utf8))
        return PersonalEnvelope(keyID: keyID, ciphertext: box.combined!)
    }

    /// The value, or nil when `key` or `field` is not the one it was sealed with (or the bytes were changed).
    func open(field: String, key: SymmetricKey) -> JSONValue? {
        guard let box = try? AES.GCM.SealedBox(combined: ciphertext),
              let plain = try? AES.GCM.open(box, using: key, authenticating: Data("\(Self.version)|\(keyID)|\(field)".utf8))
        else { return nil }
        return try? JSONValue.parse(data: plain)
    }

    public var json: JSONValue {
        .object(["enc": .string(Self.version), "kid": .string(keyID), "ct": .string(ciphertext.base64EncodedString())])
    }
}
