import Foundation

/// The worker's side of encrypted personal arguments (docs/jobs-privacy.md): turns the envelopes
/// (`{"enc":"v2","kid":…,"ct":…}`) of a job's declared personal fields back into their values, right before the
/// registry decodes the arguments. The original payload (envelopes) is what stays in Redis: a retry or a dead entry
/// never holds the clear values.
///
/// Implemented by `SubjectKeys.SubjectArgumentsOpener`; declared here so the runtime (Workers) and the key store
/// (SubjectKeys) need not know each other. Called from any pool thread at once: implementations are thread-safe.
public protocol PersonalArgumentsOpener: Sendable {
    /// `args` of the job `jid` (the payload's; "" when it has none) with every field of `fields` in `args[0]` opened.
    /// Throws `PersonalArgumentsRefusal` for a job that can never run (dead at once with its `errorClass`); any other
    /// error is temporary (the job is retried).
    func open(_ args: [JSONValue], className: String, jid: String, fields: Set<String>, subjectField: String?) throws -> [JSONValue]
}

/// A job whose personal arguments can never be opened: dead at once, `error_class` = `errorClass`
/// (`SubjectErased`, `PersonalDataInClear`, `UnreadableEnvelope`). `reason` never holds a personal value.
public struct PersonalArgumentsRefusal: Error, Sendable, CustomStringConvertible, Equatable {
    public let errorClass: String
    public let reason: String
    public init(errorClass: String, reason: String) {
        self.errorClass = errorClass
        self.reason = reason
    }
    public var description: String { reason }
}

/// An error a job throws when it cannot go on without the key store of personal arguments, which this worker lacks
/// or cannot use now (e.g. an erasure that must find a person's data keys by their keyed digest). Not the job's
/// fault: the runner gives it back to `schedule` without spending a retry, as it does a job whose personal arguments
/// cannot be opened now (`KeyStoreWait`), until a worker with the key store runs it. `description` names no value.
public protocol WaitsForKeyStore: Error, CustomStringConvertible {}
