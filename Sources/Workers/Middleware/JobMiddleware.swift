import WorkersQueue

// The job-run middleware seam (docs/writing-jobs.md, "Middleware"): what a service adds around each run of its jobs
// (an error tracker, a tenant tag, its own metrics), as Sidekiq's server middleware, River's worker middleware and
// swift-jobs' `JobMiddleware` offer. Given once to `WorkerProcess.init(…, middleware:)`.

/// Code wrapped around each run of every job a `WorkerProcess` runs: `run(_:next:)` is called with this run's
/// `JobContext` and calls `next` to run the rest of the chain and, at its end, the job's `perform`.
///
/// What a middleware may do:
/// - call `next` **at most once**, with the context it received or a copy changed through its mutating members
///   (e.g. `context[loggerMetadataKey: "tenant"] = "acme"`, which every line the job logs then carries). The runtime's
///   own run state (a group commit's shared transaction, the limits' admission time) is kept whatever the copy says.
///   A second call throws `JobMiddlewareError.nextCalledTwice` without running the job again;
/// - see the error the job (or an inner middleware) throws, report it, and rethrow it or throw another one: the error
///   that leaves the chain is the run's failure, settled by the normal retry rules (`JobOptions`, `JobError`);
/// - throw without calling `next`: the job does not run, and the run fails with that error (retried as any failure);
/// - return without calling `next`: the job does not run and is acknowledged as done (as Sidekiq's server
///   middleware that does not `yield`).
///
/// What the chain does not see: a payload that cannot be read or decoded (bad input, sent to `dead` before any
/// middleware), a redelivery the exactly-once ledger finds already applied (acknowledged without running), and a
/// job over its class's limits (rescheduled without running, docs/limiters.md): the chain wraps only runs that call
/// the job. On group commit's fast path (`JobOptions.groupCommit`) a job that throws is run again in a savepoint
/// (`GroupCommit`), so the chain sees that attempt twice; the first run's effects were rolled back.
///
/// Thread rules: called on the pool thread that runs the job, synchronously, inside the run's timeout (a middleware
/// that blocks holds the thread and counts against the job's timeout: keep it short, hand slow reporting to your own
/// queue or thread). Called concurrently from every pool thread: an implementation must be thread-safe (`Sendable`).
/// The runtime's tracing span (docs/tracing.md) is already bound while the chain runs.
public protocol JobMiddleware: Sendable {
    /// Runs around one run of a job; `next` runs the rest of the chain, then the job. See the protocol's rules.
    func run(_ context: JobContext, next: (JobContext) throws -> Void) throws
}

/// A `JobMiddleware` that also wraps the runs of `AsyncJob`s: `run(async:next:)` is called, in the run's task, with
/// the same rules as `run(_:next:)` (at most one `next`; throw to fail the run; return without `next` to acknowledge
/// it unrun). Sync jobs still go through `run(_:next:)`, so one middleware wraps every job of the process.
///
/// Why not the sync seam around async jobs: a synchronous `next` cannot await the job without blocking the task's
/// thread. A process whose registry holds async jobs refuses (`WorkerProcess.init` throws
/// `ConfigurationError`) a middleware that is not an `AsyncJobMiddleware`: it would silently skip those jobs.
///
/// Thread rules: called in the run's task, concurrently for every async run (`Sendable`), inside the run's timeout.
public protocol AsyncJobMiddleware: JobMiddleware {
    /// Runs around one run of an async job; `next` runs the rest of the chain, then the job.
    func run(async context: JobContext, next: (JobContext) async throws -> Void) async throws
}

/// A misuse of the chain by a middleware.
public enum JobMiddlewareError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The middleware (named by its Swift type) called `next` a second time in one run; the job was not run again.
    case nextCalledTwice(middleware: String)

    public var description: String {
        switch self {
        case .nextCalledTwice(let name): return "middleware \(name) called next twice; the job was not run again"
        }
    }
}

/// The process's job-run middleware, outermost first (registration order), built once by `WorkerProcess.init` and
/// read by every pool thread (`JobRunner`).
///
/// Immutable; any thread. Invariant: an empty chain is never entered — `JobRunner` calls the job's body directly
/// when `isEmpty` (one stored-count check: no allocation, no existential call per job).
struct JobMiddlewareChain: Sendable {
    let middlewares: [any JobMiddleware]

    init(_ middlewares: [any JobMiddleware] = []) {
        self.middlewares = middlewares
    }

    var isEmpty: Bool { middlewares.isEmpty }

    /// The middlewares that do not wrap async jobs (not `AsyncJobMiddleware`), by Swift type name: a process with
    /// async jobs refuses them (`WorkerProcess.init`).
    var syncOnly: [String] {
        middlewares.filter { !($0 is any AsyncJobMiddleware) }.map { String(reflecting: type(of: $0)) }
    }

    /// Runs `job` with `context` through every middleware, outermost first.
    func run(_ context: JobContext, _ job: PreparedJob) throws {
        try run(from: 0, context, runtime: context, job)
    }

    /// `runtime` is the runner's own context, whose run state is restored on whatever a middleware passes on.
    private func run(from index: Int, _ context: JobContext, runtime: JobContext, _ job: PreparedJob) throws {
        guard index < middlewares.count else {
            var context = context
            context.sharedTransaction = runtime.sharedTransaction
            context.limitsAdmittedAt = runtime.limitsAdmittedAt
            return try job.run(context)
        }
        let middleware = middlewares[index]
        var called = false
        try middleware.run(context) { passed in
            guard !called else {
                throw JobMiddlewareError.nextCalledTwice(middleware: String(reflecting: type(of: middleware)))
            }
            called = true
            try run(from: index + 1, passed, runtime: runtime, job)
        }
    }

    /// Runs an async job with `context` through every middleware's `run(async:next:)`, outermost first. A middleware
    /// that is not an `AsyncJobMiddleware` is passed through (`WorkerProcess.init` refuses such a chain when the
    /// registry holds async jobs).
    func runAsync(_ context: JobContext, _ job: PreparedJob) async throws {
        try await runAsync(from: 0, context, runtime: context, job)
    }

    private func runAsync(from index: Int, _ context: JobContext, runtime: JobContext, _ job: PreparedJob) async throws {
        guard index < middlewares.count else {
            var context = context
            context.sharedTransaction = runtime.sharedTransaction
            context.limitsAdmittedAt = runtime.limitsAdmittedAt
            return try await job.runAsync(context)
        }
        guard let middleware = middlewares[index] as? any AsyncJobMiddleware else {
            return try await runAsync(from: index + 1, context, runtime: runtime, job)
        }
        var called = false
        try await middleware.run(async: context) { passed in
            guard !called else {
                throw JobMiddlewareError.nextCalledTwice(middleware: String(reflecting: type(of: middleware)))
            }
            called = true
            try await runAsync(from: index + 1, passed, runtime: runtime, job)
        }
    }
}
