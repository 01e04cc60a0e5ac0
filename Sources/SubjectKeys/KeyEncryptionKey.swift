import Crypto
import Foundation

/// A key-encryption key (KEK): the AES-256 key that wraps every subject's data key in PostgreSQL, and its id
/// (`kek_id` on each wrapped row). It comes from configuration only (`SubjectKeysConfiguration`), never from the
/// database. Immutable; any thread.
public struct KeyEncryptionKey: Sendable {
    /// 1 to 64 characters, letters, digits, `-`, `_`, `.` (e.g. `2026-11`).
    public let id: String
    /// The key bytes (`SymmetricKey` is not `Sendable`; one is built per use).
    private let bytes: Data
    var key: SymmetricKey { SymmetricKey(data: bytes) }

    /// `text` is `<id>:<base64 of 32 bytes>` (surrounding white space ignored, e.g. a file's trailing newline).
    /// The error names the problem, never the key.
    public init(parsing text: String) throws(SubjectKeysConfigurationError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let colon = trimmed.firstIndex(of: ":") else {
            throw .invalid("a KEK is written <id>:<base64 of 32 random bytes>")
        }
        let id = String(trimmed[..<colon])
        guard (1...64).contains(id.count),
              id.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "-_.".unicodeScalars.contains($0)) })
        else { throw .invalid("a KEK id is 1 to 64 letters, digits, '-', '_' or '.'") }
        guard let bytes = Data(base64Encoded: String(trimmed[trimmed.index(after: colon)...])), bytes.count == 32 else {
            throw .invalid("KEK \(id): the key must be 32 bytes in base64 (openssl rand -base64 32)")
        }
        self.id = id
        self.bytes = bytes
    }

    /// A new random KEK (tests, and `workerctl keys new-kek`).
    public static func random(id: String) -> KeyEncryptionKey {
        // swiftlint:disable:next force_try
        try! KeyEncryptionKey(parsing: id + ":" + SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() })
    }

    /// `<id>:<base64>`, the form `init(parsing:)` reads (a test's or an operator's configuration value).
    public var configurationText: String { id + ":" + bytes.base64EncodedString() }

    /// AES-256-GCM of `plaintext` bound to `context` (associated data): nonce ‖ ciphertext ‖ tag.
    func wrap(_ plaintext: Data, context: String) throws -> Data {
        try AES.GCM.seal(plaintext, using: key, authenticating: Data(context.utf8)).combined!
    }

    /// The inverse of `wrap`; throws when the key or the context is not the one it was wrapped with.
    func unwrap(_ wrapped: Data, context: String) throws -> Data {
        try AES.GCM.open(AES.GCM.SealedBox(combined: wrapped), using: key, authenticating: Data(context.utf8))
    }
}

/// Configuration a key store cannot start with. Never holds key material.
public enum SubjectKeysConfigurationError: Error, Sendable, CustomStringConvertible, Equatable {
    case invalid(String)
    public var description: String {
        switch self { case .invalid(let why): return "subject keys: \(why)" }
    }
}

/// How the key store is configured (docs/jobs-privacy.md, "Encrypted arguments"):
///
/// | variable | meaning |
/// |---|---|
/// | `WORKERS_KEK` / `WORKERS_KEK_FILE` | the current KEK, `<id>:<base64 of 32 bytes>` |
/// | `WORKERS_KEK_PREVIOUS` / `WORKERS_KEK_PREVIOUS_FILE` | the KEK being rotated out (only while rotating) |
/// | `WORKERS_PERSONAL_ARGS_STRICT` | `1`/`true`: a clear value in a personal field sends the job to dead |
/// | `WORKERS_SUBJECT_KEY_CACHE_SECONDS` | how long an unwrapped data key stays cached (default 60, 0…3600) |
/// | `WORKERS_ENVELOPE_VERSION` | what producers seal: `v2` (default: bound to the class) or `v1` (what workers of the previous release read, for the length of a rolling deploy) |
public struct SubjectKeysConfiguration: Sendable {
    public var current: KeyEncryptionKey
    public var previous: KeyEncryptionKey?
    public var strict: Bool
    public var cacheTTL: Duration
    /// The envelope version producers seal (`PersonalEnvelope.version`, or `legacyVersion` during a rolling deploy).
    public var envelopeVersion = PersonalEnvelope.version
    /// What an operator should change, though it works (a KEK given inline in the environment): logged at start.
    public var warnings: [String] = []

    public init(current: KeyEncryptionKey, previous: KeyEncryptionKey? = nil, strict: Bool = false,
                cacheTTL: Duration = .seconds(60)) {
        self.current = current
        self.previous = previous
        self.strict = strict
        self.cacheTTL = cacheTTL
    }

    /// Refuses a KEK file that anyone but its owner may read or write (any group or other permission bit): the KEK
    /// opens every person's data key. The owner is the service user; mode 0600 or 0400.
    static func checkPrivate(_ path: String, variable: String) throws(SubjectKeysConfigurationError) {
        var status = stat()
        guard stat(path, &status) == 0 else { throw .invalid("\(variable) cannot be read") }
        let mode = Int(status.st_mode) & 0o777
        if mode & 0o077 != 0 {
            throw .invalid("\(variable) (\(path)) may be read or written by group or others (mode 0\(String(mode, radix: 8))): make it 0600 or 0400, owned by the service user")
        }
    }

    /// Nil when no KEK is configured (neither `WORKERS_KEK` nor `WORKERS_KEK_FILE`).
    public static func fromEnvironment(_ env: [String: String]) throws(SubjectKeysConfigurationError) -> SubjectKeysConfiguration? {
        var warnings: [String] = []
        func read(_ name: String) throws(SubjectKeysConfigurationError) -> KeyEncryptionKey? {
            let inline = env[name].flatMap { $0.isEmpty ? nil : $0 }
            let file = env[name + "_FILE"].flatMap { $0.isEmpty ? nil : $0 }
            if inline != nil && file != nil { throw .invalid("set \(name) or \(name)_FILE, not both") }
            if let inline {
                warnings.append("\(name) is set inline in the environment, where any process that can read this one's (/proc/PID/environ, a crash report, `systemctl show`) reads it: use \(name)_FILE, mode 0600 (docs/jobs-privacy.md)")
                return try KeyEncryptionKey(parsing: inline)
            }
            guard let file else { return nil }
            try checkPrivate(file, variable: name + "_FILE")
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw .invalid("\(name)_FILE cannot be read")
            }
            return try KeyEncryptionKey(parsing: text)
        }
        guard let current = try read("WORKERS_KEK") else {
            if try read("WORKERS_KEK_PREVIOUS") != nil { throw .invalid("WORKERS_KEK_PREVIOUS without WORKERS_KEK") }
            return nil
        }
        let previous = try read("WORKERS_KEK_PREVIOUS")
        if let previous, previous.id == current.id { throw .invalid("the previous KEK has the current KEK's id \(current.id)") }
        let strict: Bool
        switch env["WORKERS_PERSONAL_ARGS_STRICT"]?.lowercased() ?? "" {
        case "", "0", "false", "no": strict = false
        case "1", "true", "yes": strict = true
        default: throw .invalid("WORKERS_PERSONAL_ARGS_STRICT must be 1/true or 0/false")
        }
        var ttl = Duration.seconds(60)
        if let text = env["WORKERS_SUBJECT_KEY_CACHE_SECONDS"] {
            guard let seconds = Int(text), (0...3600).contains(seconds) else {
                throw .invalid("WORKERS_SUBJECT_KEY_CACHE_SECONDS must be 0…3600")
            }
            ttl = .seconds(seconds)
        }
        var configuration = SubjectKeysConfiguration(current: current, previous: previous, strict: strict, cacheTTL: ttl)
        switch env["WORKERS_ENVELOPE_VERSION"] ?? "" {
        case "", PersonalEnvelope.version: break
        case PersonalEnvelope.classBoundVersion:
            configuration.envelopeVersion = PersonalEnvelope.classBoundVersion
            warnings.append("WORKERS_ENVELOPE_VERSION=v2: personal arguments are sealed without their jid binding, for workers of the previous release during a rolling deploy; drop it once every worker runs this release (v2 envelopes are opened only until 2027-06-26)")
        case PersonalEnvelope.legacyVersion:
            configuration.envelopeVersion = PersonalEnvelope.legacyVersion
            warnings.append("WORKERS_ENVELOPE_VERSION=v1: personal arguments are sealed without their class binding, for workers of a release before v2 during a rolling deploy; drop it once every worker runs this release (v1 envelopes are opened only until 2027-06-26)")
        default: throw .invalid("WORKERS_ENVELOPE_VERSION must be v3, v2 or v1")
        }
        configuration.warnings = warnings
        return configuration
    }
}
