import Foundation
import Logging
import WorkersQueue

/// A kind of job: a Sidekiq class name, the arguments it decodes, and what it does.
///
/// Instances are shared by every pool thread, so they must be `Sendable` and keep no
/// per-run state; per-run state lives in `JobContext`. `Arguments` is the class's typed contract
/// (`JobArguments`), the same type producers enqueue (`WorkersClient.enqueue(_:)`): the registry decodes the
/// payload's `args` with it (its `layout`, its `init(from:)`), so a value `perform` receives has passed every
/// check `init(from:)` makes. A payload whose `args` do not decode is bad input and goes to `dead` at once with
/// the decoder's explanation; `init(from:)` may also throw `JobError.badInput(reason)` for a value of the right
/// type that is out of range or malformed (dead at once as "invalid arguments for <class>: <reason>").
public protocol Job: Sendable {
    associatedtype Arguments: JobArguments

    /// The `class` field this job answers to (e.g. `"ValidateReceiptJob"`). Default: `Arguments.className`;
    /// a job sharing its arguments' type with another class names its own (aliases: `JobRegistry.register(_:as:)`).
    static var className: String { get }
    /// Retries, backoff and timeout for this class (payload fields override retries).
    static var options: JobOptions { get }

    /// Runs the job. Throw `JobError.badInput` for input that can never succeed (dead at once),
    /// `JobError.retryAfter` to ask for a given delay, anything else to be retried with backoff.
    func perform(_ arguments: Arguments, context: JobContext) throws
}

extension Job {
    public static var className: String { Arguments.className }
    public static var options: JobOptions { JobOptions() }
}

/// Arguments a job never reads: any `args` is accepted without being decoded. The registry asks once, when the
/// job is registered, and then hands every run the same `init()` value: no decoding and no cast per job (the
/// benchmark's `Noop` runs on this path). `init(from:)` accepts anything too (for code that decodes anyway);
/// encoding writes `args: []`.
public protocol IgnoredJobArguments: JobArguments {
    init()
}

extension IgnoredJobArguments {
    public static var layout: JobArgumentsLayout { .positional }
    public init(from decoder: any Decoder) throws { self.init() }
    public func encode(to encoder: any Encoder) throws { _ = encoder.unkeyedContainer() }
}

/// Errors a job throws to say how its failure must be handled.
public enum JobError: Error, Sendable, CustomStringConvertible {
    /// The input can never succeed (wrong types, out-of-range values, unknown ids): `dead` now.
    case badInput(String)
    /// Failed for a reason retrying cannot fix (e.g. configuration): `dead` now.
    case permanent(String)
    /// Failed for now; try again after the given delay (e.g. a 429's Retry-After). Counts as an attempt.
    /// The runner waits at most `maxRetryAfter` (a longer delay is clamped, a negative one is zero). Build a
    /// delay read from outside (a header, a payload) with `Bounded.duration(seconds:max:)`, never
    /// `Duration.seconds(_: Double)`, which traps on NaN and infinity.
    case retryAfter(Duration, reason: String)

    /// The longest wait a `retryAfter` gets: one day (a provider's 20-digit `Retry-After` must not park a job
    /// for centuries, review M9).
    public static let maxRetryAfter: Duration = .seconds(86_400)

    public var description: String {
        switch self {
        case .badInput(let why): return "bad input: \(why)"
        case .permanent(let why): return why
        case .retryAfter(let delay, let why):
            return "\(why) (retry after \(Bounded.int(Bounded.seconds(delay.inSeconds, max: Self.maxRetryAfter.inSeconds), in: 0...Int.max)) s)"
        }
    }
}

/// Whether a class's jobs leave a completion record (`JobCompletion`: state, class, queue, finish time, runs; no
/// arguments, no error text) in Redis at `completion:<jid>` when they settle for good. Pure value; any thread.
public enum CompletionRecordPolicy: Sendable, Equatable {
    /// No record (the default).
    case off
    /// A record that expires `ttl` after the job settled; a TTL outside `JobCompletion.ttlRange` (a minute to 30 days)
    /// is clamped into it.
    case keep(ttl: Duration)
}

/// How a job class wants failures handled.
public struct JobOptions: Sendable {
    /// Retries when the payload says `retry: true` or nothing (Sidekiq's default: 25).
    public var maxRetries: Int
    public var backoff: Backoff
    /// How long a run may take before it fails with `JobTimeout` (and is retried).
    public var timeout: Duration
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
    /// Whether the runtime keeps a completion record of each job of the class once it settles for good — done, dead
    /// or cancelled — so that `WorkersClient.status(jid:)` answers without a ledger (docs/writing-jobs.md, "What
    /// became of my job"). Off by default: nothing is written.
    public var completionRecord: CompletionRecordPolicy = .off

    public init(maxRetries: Int = 25, backoff: Backoff = .sidekiq, timeout: Duration = .seconds(1800), usesLedger: Bool = false,
                groupCommit: Bool = false) {
        self.maxRetries = maxRetries
        self.backoff = backoff
        self.timeout = timeout
        self.usesLedger = usesLedger || groupCommit
        self.groupCommit = groupCommit
    }
}
