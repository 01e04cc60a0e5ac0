import WorkersQueue

// The runtime's own middleware: what the worker process wraps around a whole run of a job — the ledger's redelivery
// check, the limits' admission, the service's `JobMiddleware` chain and the job — and that sees how the run came out
// (`RunResult`). The runtime's tracing span (`TracingRunMiddleware`) and per-class execution metrics
// (`ClassMetricsMiddleware`) are written as such middlewares; the service's own middleware (an error tracker, a
// tenant tag) is the public `JobMiddleware`, which runs inside them, around the job only.
//
// What stays outside the chain, and why: the Prometheus run figures and the `stat:*` counters follow the
// settlement, which for a group-commit job is final only after its group's COMMIT (`JobPool.settle`, `GroupCommit`);
// the failure log line is the retry policy's record of its own decision (`RetryPolicy.settlement`). A payload that
// cannot be parsed never enters the chain (it goes to `dead` in an `UnreadableJob` envelope).

/// One run as the runtime's middleware sees it: the fetched job, its parsed payload and its execution (deadline,
/// cancellation). Pure value; the pool thread that runs the job.
struct RunRequest {
    let job: FetchedJob
    let payload: JobPayload
    let execution: Execution
}

/// Code the runtime wraps around a whole run of a job. `next` runs the rest of the chain and the run itself; a
/// middleware calls it exactly once and returns its result (it observes, it does not decide the settlement).
///
/// Thread rules: called on the pool thread that runs the job, concurrently from every pool thread (`Sendable`).
/// `run(async:next:)` is the same around an async job's run, in its task (`AsyncRuns`).
protocol RunMiddleware: Sendable {
    func run(_ request: RunRequest, next: (RunRequest) -> RunResult) -> RunResult
    func run(async request: RunRequest, next: (RunRequest) async -> RunResult) async -> RunResult
}

/// The runtime's middleware, outermost first, built once by `WorkerProcess.init` (or the test driver) and read by
/// every pool thread (`JobRunner`).
///
/// Immutable; any thread. Invariant: every run of a readable payload passes through each middleware exactly once.
struct RunMiddlewareChain: Sendable {
    let middlewares: [any RunMiddleware]

    init(_ middlewares: [any RunMiddleware]) {
        self.middlewares = middlewares
    }

    /// The chain of a process without per-class metrics (tests driving the runner directly): tracing only.
    static let tracingOnly = RunMiddlewareChain([TracingRunMiddleware()])

    func run(_ request: RunRequest, _ body: (RunRequest) -> RunResult) -> RunResult {
        run(from: 0, request, body)
    }

    private func run(from index: Int, _ request: RunRequest, _ body: (RunRequest) -> RunResult) -> RunResult {
        guard index < middlewares.count else { return body(request) }
        return middlewares[index].run(request) { run(from: index + 1, $0, body) }
    }

    /// `run(_:_:)` for an async job's run, in its task.
    func runAsync(_ request: RunRequest, _ body: (RunRequest) async -> RunResult) async -> RunResult {
        await runAsync(from: 0, request, body)
    }

    private func runAsync(from index: Int, _ request: RunRequest, _ body: (RunRequest) async -> RunResult) async -> RunResult {
        guard index < middlewares.count else { return await body(request) }
        return await middlewares[index].run(async: request) { await runAsync(from: index + 1, $0, body) }
    }
}
