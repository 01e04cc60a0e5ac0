import Crypto
import Foundation
import Queue
import Synchronization

/// The producer's side (docs/jobs-privacy.md): an `EnqueueMiddleware` that replaces the declared personal fields
/// (`JobArguments.personalFields`) of the classes it was given by `PersonalEnvelope`s under the subject's data key
/// (`subjectField`'s clear value selects it), before the payload is built, so the size limit applies to the
/// encrypted payload. Class, queue, jid and the other arguments stay readable. A job whose personal fields are
/// already envelopes (encrypted by the caller) is left as it is.
///
/// Use: `JobClient(pool: pool, middleware: [sealer])` (or `WorkersClient`'s middleware); `sealed(_:)` for one job.
/// Thread rules: any thread; data keys are cached for `cacheTTL` (a key erased meanwhile is made anew on the
/// next enqueue after expiry: that job then belongs to an erased person's new key, and runs as a no-op).
public final class SubjectArgumentsSealer: EnqueueMiddleware {
    let store: SubjectKeyStore
    let declarations: [String: (fields: Set<String>, subject: String)]
    let cacheTTL: Duration
    private let cache = Mutex<[String: (key: SubjectDataKey, until: Date)]>([:])

    /// `classes`: the argument types whose personal fields this sealer encrypts (each must declare a
    /// `subjectField`, and use the `.singleHash` layout).
    public init(store: SubjectKeyStore, classes: [any JobArguments.Type], cacheTTL: Duration = .seconds(60)) {
        self.store = store
        var declarations: [String: (Set<String>, String)] = [:]
        for type in classes where !type.personalFields.isEmpty {
            precondition(type.layout == .singleHash, "\(type.className): personal arguments need the singleHash layout")
            guard let subject = type.subjectField else { preconditionFailure("\(type.className) declares personal fields without a subjectField") }
            declarations[type.className] = (type.personalFields, subject)
        }
        self.declarations = declarations
        self.cacheTTL = cacheTTL
    }

    /// The class names this sealer encrypts.
    public var classNames: [String] { declarations.keys.sorted() }

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
        let dataKey: SubjectDataKey
        do {
            dataKey = try key(forSubject: subject)
        } catch SubjectKeyStoreError.damagedKey(let keyID) {
            // That one subject's fault, not the store's: the job is refused (an outbox row is marked with it and the
            // relay's batch goes on), and the next job of another subject seals as usual.
            throw EnqueueError.invalidArguments("\(job.className): the subject's data key \(keyID) does not unwrap (its row in subject_keys was changed); restore the row from a backup or erase the subject (docs/jobs-privacy.md)")
        }
        for field in pending {
            object[field] = try PersonalEnvelope.seal(object[field]!, field: field, keyID: dataKey.id, key: dataKey.key).json
        }
        job.args = [.object(object)]
    }

    /// `job` with its personal fields sealed (what the middleware does).
    public func sealed(_ job: NewJob) throws -> NewJob {
        var job = job
        try prepare(&job)
        return job
    }

    private func key(forSubject subject: String) throws -> SubjectDataKey {
        let digest = store.digest(ofSubject: subject).base64EncodedString()
        let time = Date()
        if let hit = cache.withLock({ $0[digest].flatMap { $0.until > time ? $0.key : nil } }) { return hit }
        let made = try store.dataKey(forSubject: subject)
        let seconds = Double(cacheTTL.components.seconds)
        if seconds > 0 { cache.withLock { $0[digest] = (made, time.addingTimeInterval(seconds)) } }
        return made
    }
}
