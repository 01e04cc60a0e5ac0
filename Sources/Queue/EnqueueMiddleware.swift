// The enqueue-side middleware seam (docs/writing-jobs.md, "Middleware"), as Sidekiq's client middleware: what a
// service changes on, or refuses of, every job it enqueues through one `JobClient` / `WorkersClient`.

/// Code applied by a `JobClient` (and so a `WorkersClient`) to every job it enqueues — `enqueue`, `enqueueMany`,
/// scheduled (`at`/`in`), `enqueueUnique` and a batch's jobs — in registration order, before the job is validated
/// and turned into its payload.
///
/// What a middleware may do: change the job (`extra` fields such as a tenant tag, `queue`, `retry`, even `args`), or
/// refuse it by throwing: the call then throws that error and writes nothing (for `enqueueMany` and batches: none of
/// its jobs). Because validation comes after the chain, a middleware cannot set a field only the runtime writes
/// (`NewJob.runtimeOwnedFields`: `EnqueueError.runtimeField`) or push a payload over `JobClient.maxPayloadBytes`
/// (`EnqueueError.tooLarge`). Not applied: jobs written by other paths (the outbox relay, the scheduler's cron ticks,
/// `workers_enqueue` in SQL, a batch's callbacks, admin moves and retries of payloads already in Redis).
///
/// Thread rules: called synchronously on the thread making the enqueue (one of `WorkersClient`'s own threads, or a
/// pool thread when a job enqueues), concurrently from many threads: an implementation must be thread-safe and must
/// not block (it delays the push).
public protocol EnqueueMiddleware: Sendable {
    /// Changes `job` in place, or throws to refuse it.
    func prepare(_ job: inout NewJob) throws
}
