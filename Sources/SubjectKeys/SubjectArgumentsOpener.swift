import Crypto
import Foundation
import Queue

/// The worker's `PersonalArgumentsOpener` over a `SubjectKeyStore` (docs/jobs-privacy.md): opens the envelopes of a
/// job's declared personal fields with the subject's data key, kept unwrapped in a `SubjectKeyCache` (at most
/// `cacheCapacity` keys, each for at most `cacheTTL`, dropped fleet-wide on erasure: `SubjectKeyInvalidation`, read at
/// most once per `epochCheckInterval`).
///
/// Outcomes per field: an envelope whose key exists opens (its value replaces it); whose key is gone →
/// `SubjectErased` (dead, never retried); that does not open with its key or is of an unknown version →
/// `UnreadableEnvelope`; a clear value → accepted, or `PersonalDataInClear` in strict mode; the key store
/// unreachable → an ordinary error (the job is retried).
///
/// Thread rules: any pool thread at once; the cache is behind one mutex, never held across a round trip.
public final class SubjectArgumentsOpener: PersonalArgumentsOpener {
    let store: SubjectKeyStore
    let redis: RedisPool?
    let strict: Bool
    let cache: SubjectKeyCache

    /// The most unwrapped keys a worker keeps by default: about 2 MB (measured: bench/subject-keys-cache.sh).
    public static let defaultCacheCapacity = 10_000

    /// `redis`: where the erasure epoch is read (nil: no fleet-wide invalidation, only `cacheTTL`); `now`: the
    /// clock of the cache and the epoch checks (tests move it).
    public init(store: SubjectKeyStore, redis: RedisPool?, strict: Bool = false, cacheTTL: Duration = .seconds(60),
                cacheCapacity: Int = defaultCacheCapacity, epochCheckInterval: Duration = .seconds(1),
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.store = store
        self.redis = redis
        self.strict = strict
        cache = SubjectKeyCache(capacity: cacheCapacity, ttl: cacheTTL, redis: redis,
                                epochCheckInterval: epochCheckInterval, now: now)
    }

    public convenience init(store: SubjectKeyStore, redis: RedisPool?, configuration: SubjectKeysConfiguration) {
        self.init(store: store, redis: redis, strict: configuration.strict, cacheTTL: configuration.cacheTTL)
    }

    /// Cached keys right now (tests).
    public var cachedKeyCount: Int { cache.count }

    public func open(_ args: [JSONValue], className: String, fields: Set<String>, subjectField: String?) throws -> [JSONValue] {
        guard args.count == 1, var object = args[0].objectValue else { return args }  // decoding reports the shape
        for field in fields.sorted() {
            guard let value = object[field], value != .null else { continue }
            if let envelope = PersonalEnvelope(value) {
                guard let key = try key(id: envelope.keyID) else {
                    throw PersonalArgumentsRefusal(errorClass: "SubjectErased",
                                                   reason: "the data key of \(field) (key id \(envelope.keyID)) is erased: the subject was deleted")
                }
                guard let clear = envelope.open(field: field, key: key) else {
                    throw PersonalArgumentsRefusal(errorClass: "UnreadableEnvelope",
                                                   reason: "\(field) does not open with its key (moved from another field or changed)")
                }
                object[field] = clear
            } else if PersonalEnvelope.isEnvelopeLike(value) {
                throw PersonalArgumentsRefusal(errorClass: "UnreadableEnvelope", reason: "\(field) is an envelope this worker cannot read")
            } else if strict {
                throw PersonalArgumentsRefusal(errorClass: "PersonalDataInClear",
                                               reason: "\(field) is personal and arrived in clear (strict mode): the producer must encrypt it")
            }
        }
        return [.object(object)]
    }

    private func key(id: String) throws -> SymmetricKey? {
        if let cached = cache.entry(id) { return cached.key }
        guard let bytes = try store.dataKey(id: id) else { return nil }
        let key = SymmetricKey(data: bytes)
        cache.insert(id, keyID: id, key: key)
        return key
    }
}
