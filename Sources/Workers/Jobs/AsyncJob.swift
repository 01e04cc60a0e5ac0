import WorkersQueue

/// A kind of job whose `perform` is async: for work done through a Swift service's async clients (AsyncHTTPClient,
/// PostgresNIO, valkey-swift) without holding a pool thread while it waits (docs/writing-jobs.md, "Async jobs").
///
/// Registered like a `Job` (`JobRegistry.register(_:as:argumentVersions:)`: the same registry, class names, typed
/// `Arguments` and `JobOptions`); fetched by the same fetcher and settled by the same path (ledger check, limits,
/// retries, dead, progress, cancel). Each run is a task of the worker's `AsyncRuns`, at most
/// `WorkerConfiguration.asyncConcurrency` at a time, apart from the `concurrency` pool threads.
///
/// - Timeout: past `options.timeout` the run fails with `JobTimeout` (retried like a sync job's) and its task is
///   cancelled; the task keeps its in-flight place until it actually returns (cooperative cancellation).
/// - Cancellation: `context.isCancelled` is true once the task is cancelled (timeout, hard shutdown, an operator's
///   `workerctl jobs cancel`), and each of those cancels the task (`Task.isCancelled`, `Task.checkCancellation()`,
///   and the cancellation handlers of the async clients the job awaits).
/// - Group commit does not apply (`JobOptions.groupCommit` is ignored): each run's `context.transaction` commits alone.
///
/// Instances are shared by every run, so they must be `Sendable` and keep no per-run state.
public protocol AsyncJob: Sendable {
    associatedtype Arguments: JobArguments

    /// The `class` field this job answers to. Default: `Arguments.className`.
    static var className: String { get }
    /// Retries, backoff and timeout for this class (payload fields override retries).
    static var options: JobOptions { get }

    /// Runs the job in a task. Throw `JobError.badInput` for input that can never succeed (dead at once),
    /// `JobError.retryAfter` to ask for a given delay, anything else to be retried with backoff.
    func perform(_ arguments: Arguments, context: JobContext) async throws
}

extension AsyncJob {
    public static var className: String { Arguments.className }
    public static var options: JobOptions { JobOptions() }
}
