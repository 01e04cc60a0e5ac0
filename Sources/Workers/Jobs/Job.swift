import Foundation
import Logging
import Queue

/// A kind of job: a Sidekiq class name, the arguments it decodes, and what it does.
///
/// Instances are shared by every pool thread, so they must be `Sendable` and keep no
/// per-run state; per-run state lives in `JobContext`. Arguments are decoded from the payload's
/// `args` array with `JSONDecoder`: a payload whose `args` do not decode is bad input and goes to
/// `dead` at once with the decoder's explanation.
public protocol Job: Sendable {
    associatedtype Arguments: Decodable & Sendable

    /// The `class` field this job answers to (e.g. `"ValidateReceiptJob"`).
    static var className: String { get }
    /// Retries, backoff and timeout for this class (payload fields override retries).
    static var options: JobOptions { get }

    /// Runs the job. Throw `JobError.badInput` for input that can never succeed (dead at once),
    /// `JobError.retryAfter` to ask for a given delay, anything else to be retried with backoff.
    func perform(_ arguments: Arguments, context: JobContext) throws
}

extension Job {
    public static var options: JobOptions { JobOptions() }
}

/// Arguments a job can check beyond their types (ranges, formats). A failed check is bad input.
public protocol ValidatedArguments {
    func validate() throws(JobError)
}

/// `args: []`.
public struct NoArguments: Decodable, Sendable, Equatable {
    public init() {}
    public init(from decoder: any Decoder) throws {
        let container = try decoder.unkeyedContainer()
        if let count = container.count, count > 0 {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected no arguments, got \(count)")
        }
    }
}

/// `args: [value]` — the common shape `[{"user_id": …}]`.
public struct SingleArgument<Value: Decodable & Sendable>: Decodable, Sendable {
    public let value: Value
    public init(_ value: Value) { self.value = value }
    public init(from decoder: any Decoder) throws {
        var container = try decoder.unkeyedContainer()
        if let count = container.count, count != 1 {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected exactly one argument, got \(count)")
        }
        value = try container.decode(Value.self)
    }
}

extension SingleArgument: ValidatedArguments where Value: ValidatedArguments {
    public func validate() throws(JobError) { try value.validate() }
}

/// Errors a job throws to say how its failure must be handled.
public enum JobError: Error, Sendable, CustomStringConvertible {
    /// The input can never succeed (wrong types, out-of-range values, unknown ids): `dead` now.
    case badInput(String)
    /// Failed for a reason retrying cannot fix (e.g. configuration): `dead` now.
    case permanent(String)
    /// Failed for now; try again after `seconds` (e.g. a 429's Retry-After). Counts as an attempt.
    /// The runner waits at most `maxRetryAfterSeconds` (a larger or non-finite value is clamped).
    case retryAfter(seconds: Double, reason: String)

    /// The longest wait a `retryAfter` gets: one day (a provider's 20-digit `Retry-After` must not park a job
    /// for centuries, review M9).
    public static let maxRetryAfterSeconds: Double = 86_400

    public var description: String {
        switch self {
        case .badInput(let why): return "bad input: \(why)"
        case .permanent(let why): return why
        case .retryAfter(let seconds, let why):
            return "\(why) (retry after \(Bounded.int(Bounded.seconds(seconds, max: Self.maxRetryAfterSeconds), in: 0...Int.max)) s)"
        }
    }
}

/// How a job class wants failures handled.
public struct JobOptions: Sendable {
    /// Retries when the payload says `retry: true` or nothing (Sidekiq's default: 25).
    public var maxRetries: Int
    public var backoff: Backoff
    /// Seconds a run may take before it fails with `JobTimeout` (and is retried).
    public var timeout: Double
    /// Whether the runtime checks the ledger before running a job that may have run before
    /// (interrupted or retried), skipping it when an earlier delivery committed.
    public var usesLedger: Bool
    /// Group commit: the job's only effects are its ledger transaction (`context.transaction`), and it is
    /// short. A pool thread may then run several such jobs one after another inside one PostgreSQL
    /// transaction and commit them together (at most `WorkerConfiguration.commitBatch` jobs, open at most
    /// `commitWindow` seconds, and only while more jobs are already waiting in this process). Their ledger
    /// rows are inserted together in one statement, and each job's work runs directly in the shared
    /// transaction, without a savepoint. If one job fails (or throws inside `context.transaction`, even if it
    /// catches the error), the whole transaction is rolled back and the group runs again with each job in its
    /// own savepoint, so the failing job undoes only its own work and the others commit: a job of the group
    /// may therefore run twice, the first run rolled back — safe only because its sole effects are its
    /// ledger transaction. A job that returns without calling `context.transaction` still gets its ledger
    /// row (a redelivery is then acknowledged without running). Acknowledgements wait for the commit; if it
    /// fails, every job of the group is retried and the ledger keeps them exactly-once.
    /// Leave it off for jobs that call other services or hold row locks other jobs wait for.
    public var groupCommit: Bool
    /// Unique jobs (docs/unique-jobs.md): at most one live job per lock key; nil = not unique. A
    /// payload's own `unique_for` wins over this. Set it with `JobOptions(…).unique(…)`.
    public var unique: UniquePolicy? = nil
    /// Fleet-wide limits a job must pass before it runs, and what happens when it is over one
    /// (docs/limiters.md, Workers/Limits/).
    public var limits: JobLimits = []

    public init(maxRetries: Int = 25, backoff: Backoff = .sidekiq, timeout: Double = 1800, usesLedger: Bool = false,
                groupCommit: Bool = false) {
        self.maxRetries = maxRetries
        self.backoff = backoff
        self.timeout = timeout
        self.usesLedger = usesLedger || groupCommit
        self.groupCommit = groupCommit
    }
}
