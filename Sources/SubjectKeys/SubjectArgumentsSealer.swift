import Crypto
import Foundation
import WorkersQueue
import WorkersStorage

/// The producer's side (docs/jobs-privacy.md): an `EnqueueMiddleware` that replaces the declared personal fields
/// (`JobArguments.personalFields`) of the classes it was given by `PersonalEnvelope`s under the subject's data key
/// (`subjectField`'s clear value selects it), before the payload is built, so the size limit applies to the
/// encrypted payload. Class, queue, jid and the other arguments stay readable. A job whose personal fields are
/// already envelopes (encrypted by the caller) is left as it is.
///
/// Use: `JobClient(pool: pool, middleware: [sealer])` (or `WorkersClient`'s middleware); `sealed(_:)` for one job.
/// Thread rules: any thread; data keys are cached in a `SubjectKeyCache` (at most `cacheCapacity`, each for at most
/// `cacheTTL`). Given `redis`, the cache hears of erasures as the opener's does (the erasure epoch, read at most once
/// a second): a key erased meanwhile is not used to seal; without it, only `cacheTTL` bounds that (a job sealed under
/// an erased key runs as a no-op, `SubjectErased`).
public final class SubjectArgumentsSealer: EnqueueMiddleware {
    let store: SubjectKeyStore
    let declarations: [String: (fields: Set<String>, subject: String)]
    let cache: SubjectKeyCache
    /// The envelope version sealed (`PersonalEnvelope.version`; `legacyVersion` during a rolling deploy).
    let envelopeVersion: String

    /// `classes`: the argument types whose personal fields this sealer encrypts (each must declare a
    /// `subjectField`, and use the `.singleHash` layout); `redis`: where the erasure epoch is read (the producer's
    /// Redis, default shard).
    public init(store: SubjectKeyStore, classes: [any JobArguments.Type], cacheTTL: Duration = .seconds(60),
                cacheCapacity: Int = SubjectArgumentsOpener.defaultCacheCapacity, redis: RedisPool? = nil,
                envelopeVersion: String = PersonalEnvelope.version) {
        self.store = store
        var declarations: [String: (Set<String>, String)] = [:]
        for type in classes where !type.personalFields.isEmpty {
            precondition(type.layout == .singleHash, "\(type.className): personal arguments need the singleHash layout")
            guard let subject = type.subjectField else { preconditionFailure("\(type.className) declares personal fields without a subjectField") }
            declarations[type.className] = (type.personalFields, subject)
        }
        self.declarations = declarations
        cache = SubjectKeyCache(capacity: cacheCapacity, ttl: cacheTTL, redis: redis)
        self.envelopeVersion = envelopeVersion
    }

    /// The class names this sealer encrypts.
    public var classNames: [String] { declarations.keys.sorted() }

    /// Writes the declared personal fields of this sealer's classes to `workers_personal_fields` (migration 0021), so
    /// `workers_enqueue` checks an outbox row at the size it will have once this sealer sealed it: a row that would
    /// grow past the payload limit is refused where it is accepted, not marked by the relay later. A relay calls it
    /// when it starts. Field names only.
    public func publishPersonalFields() throws {
        try store.pool.withConnection { conn in
            try conn.transaction { conn in
                for (className, declaration) in declarations.sorted(by: { $0.key < $1.key }) {
                    let fields = "{" + declaration.fields.sorted().map { "\"\($0)\"" }.joined(separator: ",") + "}"
                    try conn.write("""
                        INSERT INTO workers_personal_fields (class, fields) VALUES ($1, $2::text[])
                        ON CONFLICT (class) DO UPDATE SET fields = EXCLUDED.fields, updated_at = now()
                        """, [className, fields])
                }
            }
        }
    }

    public func prepare(_ job: inout NewJob) throws {
        guard let declaration = declarations[job.className] else { return }
        guard job.args.count == 1, var object = job.args[0].objectValue else {
            throw EnqueueError.invalidArguments("\(job.className) carries personal arguments: expected one hash argument")
        }
        let pending = declaration.fields.sorted().filter { field in
            guard let value = object[field], value != .null else { return false }
            return !PersonalEnvelope.isEnvelopeLike(value)
        }
        if pending.isEmpty { return }
        guard let subject = object[declaration.subject]?.stringValue, !subject.isEmpty else {
            throw EnqueueError.invalidArguments("\(job.className): \(declaration.subject) (the subject of its personal arguments) must be a non-empty string")
        }
        let dataKey: (keyID: String, key: SymmetricKey)
        do {
            dataKey = try key(forSubject: subject)
        } catch SubjectKeyStoreError.damagedKey(let keyID) {
            // That one subject's fault, not the store's: the job is refused (an outbox row is marked with it and the
            // relay's batch goes on), and the next job of another subject seals as usual.
            throw EnqueueError.invalidArguments("\(job.className): the subject's data key \(keyID) does not unwrap (its row in subject_keys was changed); restore the row from a backup or erase the subject (docs/jobs-privacy.md)")
        } catch SubjectKeyStoreError.personErased {
            // A job for a person erased before it was sealed: it would run as a no-op at best; refused here instead.
            throw EnqueueError.invalidArguments("\(job.className): the subject's person was erased; no key is made for an erased person, so the job is refused (docs/jobs-privacy.md)")
        }
        // Bound to its job: the jid is chosen here when the producer did not choose it, and the enqueue uses it.
        let jid = job.jid ?? Identifiers.jid()
        job.jid = jid
        for field in pending {
            object[field] = try PersonalEnvelope.seal(object[field]!, field: field, className: job.className, jid: jid,
                                                      keyID: dataKey.keyID, key: dataKey.key, version: envelopeVersion).json
        }
        job.args = [.object(object)]
    }

    /// `job` with its personal fields sealed (what the middleware does).
    public func sealed(_ job: NewJob) throws -> NewJob {
        var job = job
        try prepare(&job)
        return job
    }

    /// Cached keys right now (tests).
    public var cachedKeyCount: Int { cache.count }

    private func key(forSubject subject: String) throws -> (keyID: String, key: SymmetricKey) {
        let digest = store.digest(ofSubject: subject).base64EncodedString()
        if let hit = cache.entry(digest) { return (hit.keyID, hit.key) }
        let made = try store.dataKey(forSubject: subject)
        let key = made.key
        cache.insert(digest, keyID: made.id, key: key)
        return (made.id, key)
    }
}
