import Foundation
import WorkersQueue

/// The key store of a worker that could not open it at start (a wrong or unknown KEK — e.g. PostgreSQL restored from
/// before the last rotation —, or its tables unreadable): the worker starts anyway and serves every class without
/// personal arguments (the acknowledgement sweep, the privacy jobs), while
/// - as the registry's opener, every job with personal arguments waits in `schedule` without spending a retry
///   (`open` throws a temporary error, `DispatchError.keyStoreUnavailable`);
/// - as the outbox relay's middleware, a row of such a class holds its batch back (never pushed in clear);
/// - the account deletion, which finds keys by their keyed digest, waits too (`SubjectKeyErasureWait`).
/// `reason` is what the start's error said (it names KEK ids, never key material); `/readyz` reports it as
/// `key_store` degraded (docs/metrics-and-health.md). A restart with the fixed configuration ends it.
/// Thread rules: immutable; any thread.
public struct UnusableKeyStore: PersonalArgumentsOpener, EnqueueMiddleware, Sendable {
    public let reason: String
    /// The classes whose rows the relay holds back.
    let classNames: Set<String>

    public init(reason: String, classes: [any JobArguments.Type]) {
        self.reason = reason
        self.classNames = Set(classes.filter { !$0.personalFields.isEmpty }.map { $0.className })
    }

    /// The error each use throws: temporary (not a `PersonalArgumentsRefusal`), so the job waits.
    public struct Unusable: Error, CustomStringConvertible, Sendable {
        public let reason: String
        public var description: String { "the key store could not be opened at start: \(reason)" }
    }

    public func open(_ args: [JSONValue], className: String, jid: String, fields: Set<String>, subjectField: String?) throws -> [JSONValue] {
        throw Unusable(reason: reason)
    }

    public func prepare(_ job: inout NewJob) throws {
        if classNames.contains(job.className) { throw Unusable(reason: reason) }
    }
}
