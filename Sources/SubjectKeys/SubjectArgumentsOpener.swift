import Crypto
import Foundation
import WorkersQueue

/// The worker's `PersonalArgumentsOpener` over a `SubjectKeyStore` (docs/jobs-privacy.md): opens the envelopes of a
/// job's declared personal fields with the subject's data key, kept unwrapped in a `SubjectKeyCache` (at most
/// `cacheCapacity` keys, each for at most `cacheTTL`, dropped fleet-wide on erasure: `SubjectKeyInvalidation`, read at
/// most once per `epochCheckInterval`).
///
/// Binding (issue 50 point 2): every envelope of a job must carry the same key id, and when the subject field is in
/// clear, the key id its subject has in the store; a v3 envelope opens only in its field of its job (class and jid,
/// `PersonalEnvelope`); a v2 envelope (bound to its class, not its jid) and a v1 envelope (bound to neither) are
/// refused after `PersonalEnvelope.legacyAcceptedUntil`, v1 also in strict mode. Each broken rule →
/// `UnreadableEnvelope`, naming fields and key ids only.
///
/// Outcomes per field: an envelope whose key exists opens (its value replaces it); whose key is gone →
/// `SubjectErased` (dead, never retried); that does not open with its key or is of an unknown version →
/// `UnreadableEnvelope`; a clear value → accepted, or `PersonalDataInClear` in strict mode; the key store
/// unreachable → an ordinary error (the job is retried).
///
/// Thread rules: any pool thread at once; the cache is behind one mutex, never held across a round trip.
public final class SubjectArgumentsOpener: PersonalArgumentsOpener {
    let store: SubjectKeyStore
    let strict: Bool
    let cache: SubjectKeyCache
    let now: @Sendable () -> Date

    /// The most unwrapped keys a worker keeps by default: about 2 MB (measured: bench/subject-keys-cache.sh).
    public static let defaultCacheCapacity = 10_000

    /// `redis`: where the erasure epoch is read (nil: no fleet-wide invalidation, only `cacheTTL`); `now`: the
    /// clock of the cache and the epoch checks (tests move it).
    public init(store: SubjectKeyStore, redis: RedisPool?, strict: Bool = false, cacheTTL: Duration = .seconds(60),
                cacheCapacity: Int = defaultCacheCapacity, epochCheckInterval: Duration = .seconds(1),
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.store = store
        self.strict = strict
        self.now = now
        cache = SubjectKeyCache(capacity: cacheCapacity, ttl: cacheTTL, redis: redis,
                                epochCheckInterval: epochCheckInterval, now: now)
    }

    public convenience init(store: SubjectKeyStore, redis: RedisPool?, configuration: SubjectKeysConfiguration) {
        self.init(store: store, redis: redis, strict: configuration.strict, cacheTTL: configuration.cacheTTL)
    }

    /// Cached keys right now (tests).
    public var cachedKeyCount: Int { cache.count }

    public func open(_ args: [JSONValue], className: String, jid: String, fields: Set<String>, subjectField: String?) throws -> [JSONValue] {
        guard args.count == 1, var object = args[0].objectValue else { return args }  // decoding reports the shape
        var envelopes: [(field: String, envelope: PersonalEnvelope)] = []
        for field in fields.sorted() {
            guard let value = object[field], value != .null else { continue }
            if let envelope = PersonalEnvelope(value) {
                envelopes.append((field, envelope))
            } else if PersonalEnvelope.isEnvelopeLike(value) {
                throw PersonalArgumentsRefusal(errorClass: "UnreadableEnvelope", reason: "\(field) is an envelope this worker cannot read")
            } else if strict {
                throw PersonalArgumentsRefusal(errorClass: "PersonalDataInClear",
                                               reason: "\(field) is personal and arrived in clear (strict mode): the producer must encrypt it")
            }
        }
        guard let first = envelopes.first else { return args }
        // Bound to the person: a job's personal fields are all sealed under its subject's key (a sealer seals no
        // other way), so a field taken from another person's job is refused whatever its bytes.
        let keyID = first.envelope.keyID
        if let other = envelopes.first(where: { $0.envelope.keyID != keyID }) {
            throw PersonalArgumentsRefusal(errorClass: "UnreadableEnvelope",
                                           reason: "\(other.field) is sealed under another key than \(first.field): a job's personal fields are all its subject's")
        }
        if let subjectField, let subject = object[subjectField]?.stringValue {  // a subject in clear names its key
            guard try subjectKeyID(subject) == keyID else {
                throw PersonalArgumentsRefusal(errorClass: "UnreadableEnvelope",
                                               reason: "\(first.field) is not sealed under the key of \(subjectField) (key id \(keyID))")
            }
        }
        if let legacy = envelopes.first(where: { $0.envelope.version != PersonalEnvelope.version }) {
            let version = legacy.envelope.version
            if strict, version == PersonalEnvelope.legacyVersion {
                throw PersonalArgumentsRefusal(errorClass: "UnreadableEnvelope",
                                               reason: "\(legacy.field) is a v1 envelope, not bound to its class: refused in strict mode")
            }
            if now() >= PersonalEnvelope.legacyAcceptedUntil {
                throw PersonalArgumentsRefusal(errorClass: "UnreadableEnvelope",
                                               reason: "\(legacy.field) is a \(version) envelope: no longer opened (docs/jobs-privacy.md)")
            }
        }
        guard let key = try key(id: keyID) else {
            throw PersonalArgumentsRefusal(errorClass: "SubjectErased",
                                           reason: "the data key of \(first.field) (key id \(keyID)) is erased: the subject was deleted")
        }
        for (field, envelope) in envelopes {
            guard let clear = envelope.open(field: field, className: className, jid: jid, key: key) else {
                throw PersonalArgumentsRefusal(errorClass: "UnreadableEnvelope",
                                               reason: "\(field) does not open with its key (moved from another field, class or job, or changed)")
            }
            object[field] = clear
        }
        return [.object(object)]
    }

    /// The key id of a subject given in clear, cached like the keys (under its digest).
    private func subjectKeyID(_ subject: String) throws -> String? {
        let name = "subject:" + store.digest(ofSubject: subject).base64EncodedString()
        if let cached = cache.entry(name) { return cached.keyID }
        guard let keyID = try store.keyID(forSubject: subject) else { return nil }
        if let key = try key(id: keyID) { cache.insert(name, keyID: keyID, key: key) }
        return keyID
    }

    private func key(id: String) throws -> SymmetricKey? {
        if let cached = cache.entry(id) { return cached.key }
        guard let bytes = try store.dataKey(id: id) else { return nil }
        let key = SymmetricKey(data: bytes)
        cache.insert(id, keyID: id, key: key)
        return key
    }
}
