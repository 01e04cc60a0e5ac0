import Foundation
import Logging
import WorkersQueue
import WorkersStorage

/// Turns one fetched job into a settlement (`RunResult`): parse, look up, decode, run, and on failure apply
/// Sidekiq's retry rules (`RetryPolicy`, §6 of the wire doc). Stateless apart from its configuration; any pool
/// thread may call `run`, any async job's task `runAsync` (both through the same pre-run and post-run steps).
struct JobRunner: Sendable {
    let registry: JobRegistry
    let configuration: WorkerConfiguration
    let database: JobDatabase?
    let logger: Logger
    /// Admits jobs through their class's limits (docs/limiters.md); nil: limits are not enforced.
    var limiter: JobLimiter? = nil
    /// The service's job-run middleware (`JobMiddleware`), around `PreparedJob.run` only: after the ledger's
    /// redelivery check and the limits' admission, so a skipped redelivery or an over-limit reschedule never enters
    /// it; inside the run's span. Empty: the job's body is called directly.
    var middleware = JobMiddlewareChain()
    /// The runtime's own middleware around the whole run (`RunMiddleware`): the tracing span, and the per-class
    /// metrics when the process records them.
    var runMiddleware = RunMiddlewareChain.tracingOnly
    /// Cancelled jids and progress (RunSteering.swift); nil: cancels are not checked (a runner built by a test).
    var steering: RunSteering? = nil
    /// The live processes' announced classes, for a job whose class is not registered here (`UnknownClassGiveBack`);
    /// nil: no other process is consulted (as if none served the queue).
    var classDirectory: ClassDirectory? = nil

    /// The timeout for a payload (its class's, else the process default, else 30 min).
    func timeout(for payload: JobPayload?) -> Double {
        if let payload, let options = registry.options(for: payload.className) {
            return (configuration.defaultTimeout.map { min($0, options.timeout) } ?? options.timeout).inSeconds
        }
        return configuration.defaultTimeout?.inSeconds ?? 1800
    }

    static func parse(_ job: FetchedJob) -> Result<JobPayload, PayloadError> {
        do { return .success(try JobPayload(parsing: job.raw)) } catch { return .failure(error) }
    }

    /// True when jobs of this payload's class may share a commit with their neighbours
    /// (`JobOptions.groupCommit`) and this process has a database and group commits enabled.
    func sharesCommits(_ payload: JobPayload?) -> Bool {
        guard database != nil, configuration.commitBatch > 1, let payload, !registry.isAsync(payload.className) else {
            return false
        }
        return registry.options(for: payload.className)?.groupCommit ?? false
    }

    /// Runs one job. `sharedTransaction` is the pool thread's open group-commit transaction (for jobs
    /// that `sharesCommits`): the job's ledger check and transaction use it instead of a pooled connection.
    /// When the group has claimed the job's ledger row (`SharedTransaction.claimedRow`) the redelivery
    /// check is skipped: the claim found no row, so no earlier delivery committed.
    ///
    /// A readable payload's run passes through the runtime's middleware (`runMiddleware`: the tracing span, the
    /// per-class metrics) around all of it; an unreadable one goes straight to `dead`.
    func run(_ job: FetchedJob, payload parsed: Result<JobPayload, PayloadError>, execution: Execution,
             sharedTransaction: SharedTransaction? = nil) -> RunResult {
        guard case .success(let payload) = parsed else {
            return execute(job, payload: parsed, execution: execution, sharedTransaction: sharedTransaction)
        }
        return runMiddleware.run(RunRequest(job: job, payload: payload, execution: execution)) { request in
            execute(request.job, payload: .success(request.payload), execution: request.execution,
                    sharedTransaction: sharedTransaction)
        }
    }

    /// A run that passed every pre-run step (parse, look-up and decode, the ledger's redelivery check, the cancel
    /// check, the limits): its job, context and limit leases. The pre-run and post-run steps are shared by the
    /// pool threads' runs (`execute`) and the async jobs' tasks (`executeAsync`): one settle path for both.
    struct ReadyRun {
        let job: FetchedJob
        let payload: JobPayload
        let prepared: PreparedJob
        let context: JobContext
        let leases: [LimitLease]
        let opened: OpenedValues
        let sharedTransaction: SharedTransaction?
        let started: Double
    }

    /// What the pre-run steps came to: settle without running the job, or run it.
    enum RunStart {
        case settle(RunResult)
        case run(ReadyRun)
    }

    private func execute(_ job: FetchedJob, payload parsed: Result<JobPayload, PayloadError>, execution: Execution,
                         sharedTransaction: SharedTransaction?) -> RunResult {
        let ready: ReadyRun
        switch begin(job, payload: parsed, execution: execution, sharedTransaction: sharedTransaction) {
        case .settle(let result): return result
        case .run(let run): ready = run
        }
        defer { limiter?.release(ready.leases) }
        do {
            if middleware.isEmpty {
                try ready.prepared.run(ready.context)
            } else {
                try middleware.run(ready.context, ready.prepared)
            }
        } catch {
            return ended(ready, execution: execution, error: error)
        }
        return ended(ready, execution: execution, error: nil)
    }

    /// Runs an async job (`AsyncJob`) in the calling task: the runtime's middleware (`RunMiddleware.run(async:)`)
    /// around the same pre-run and post-run steps as a pool thread's run, and the service's `AsyncJobMiddleware`
    /// chain around the job. The pre-run steps that need a round trip (a redelivered ledger job's check, the
    /// limits' admission) block the task's thread for it.
    func runAsync(_ job: FetchedJob, payload: JobPayload, execution: Execution) async -> RunResult {
        await runMiddleware.runAsync(RunRequest(job: job, payload: payload, execution: execution)) { request in
            await executeAsync(request.job, payload: request.payload, execution: request.execution)
        }
    }

    private func executeAsync(_ job: FetchedJob, payload: JobPayload, execution: Execution) async -> RunResult {
        let ready: ReadyRun
        switch begin(job, payload: .success(payload), execution: execution, sharedTransaction: nil) {
        case .settle(let result): return result
        case .run(let run): ready = run
        }
        defer { limiter?.release(ready.leases) }
        do {
            if middleware.isEmpty {
                try await ready.prepared.runAsync(ready.context)
            } else {
                try await middleware.runAsync(ready.context, ready.prepared)
            }
        } catch {
            return ended(ready, execution: execution, error: error)
        }
        return ended(ready, execution: execution, error: nil)
    }

    /// The pre-run steps: parse, look the class up and decode, the ledger's redelivery check, the cancel check and
    /// the limits. `.settle` when the job must not run (bad input, given back, already applied, cancelled, over a
    /// limit); `.run` with its context otherwise (the caller releases `leases` after the run).
    private func begin(_ job: FetchedJob, payload parsed: Result<JobPayload, PayloadError>, execution: Execution,
                       sharedTransaction: SharedTransaction?) -> RunStart {
        let payload: JobPayload
        switch parsed {
        case .failure(let error):
            logger.warning("bad payload sent to dead", metadata: ["queue": "\(job.queue)", "reason": "\(error)"])
            return .settle(.failed(.dead(payload: Self.wrapUnreadable(job, reason: error.description))))
        case .success(let value):
            payload = value
        }
        let jid = payload.jid ?? "-"
        let attempt = (payload.retryCount ?? -1) + 2
        // This run's logger (jid, class, queue, attempt in its metadata) is built only where a line is logged: a
        // successful run logs nothing at the default level, and building it for every run (a metadata dictionary,
        // a copy of the handler) was ~8 % of a no-op drain's worker CPU (perf).
        let className = payload.className
        /// The personal values opened for this run (none until the registry opens them): scrubbed from every line the
        /// run logs and every error text it settles with (`OpenedValues`).
        var opened = OpenedValues.none
        func jobLogger() -> Logger {
            opened.logger(JobContext.runLogger(logger, jid: jid, className: className, queue: job.queue, attempt: attempt))
        }

        // Arguments of a version this release does not decode while a live process announces it: given back to it.
        if let version = payload.fields[NewJob.argumentsVersionField]?.intValue.map({ Bounded.int($0, in: 0...Bounded.maxCount) }),
           let decoded = registry.argumentVersions[className], !decoded.contains(version),
           let knowledge = classDirectory?.knowledge(of: className, queue: job.queue, shard: job.shard, argumentsVersion: version),
           case .announced = knowledge {
            return .settle(UnknownClassGiveBack.settlement(payload: payload, queue: job.queue, knowledge: knowledge,
                                                   grace: configuration.unknownClassGrace.inSeconds, now: Clock.now(),
                                                   logger: jobLogger(), why: "arguments version \(version) not decoded here (\(decoded.lowerBound)...\(decoded.upperBound))"))
        }
        let prepared: PreparedJob
        do {
            prepared = try registry.prepare(payload)
        } catch .unknownClass {
            // A rolling deploy, or a class only Ruby knows: given back while a live process may know it.
            let knowledge = classDirectory?.knowledge(of: payload.className, queue: job.queue, shard: job.shard)
                ?? .nobody(serving: 0)
            return .settle(UnknownClassGiveBack.settlement(payload: payload, queue: job.queue, knowledge: knowledge,
                                                   grace: configuration.unknownClassGrace.inSeconds, now: Clock.now(),
                                                   logger: jobLogger()))
        } catch .keyStoreUnavailable(_, let reason) {
            return .settle(KeyStoreWait.settlement(payload: payload, reason: reason, now: Clock.now(), logger: jobLogger()))
        } catch {
            jobLogger().warning("bad input sent to dead", metadata: ["reason": "\(error.description)"])
            return .settle(.failed(.dead(payload: payload.recordingFailure(queue: job.queue, errorClass: error.errorClass,
                                                                   message: error.description))))
        }
        opened = prepared.opened

        // A job that may have run before (interrupted, or retried after a failure) is checked against the
        // ledger first, so a redelivery skips its external calls too. A first delivery skips this round
        // trip: the ledger row inside its transaction still makes a duplicate push apply once.
        let mayHaveRun = payload.interruptedCount > 0 || payload.retryCount != nil
        if prepared.options.usesLedger, mayHaveRun, sharedTransaction?.claimedRow == nil, let database,
           let jidValue = payload.jid {
            do {
                let applied = try sharedTransaction.map { try database.isApplied(jid: jidValue, on: $0.connection) }
                    ?? database.isApplied(jid: jidValue)
                if applied {
                    jobLogger().info("already applied; acknowledged without running")
                    return .settle(.acknowledged)
                }
            } catch {
                return .settle(opened.scrub(.failed(settlement(after: error, payload: payload, job: job,
                                                               options: prepared.options, logger: jobLogger()))))
            }
        }

        if let cancelled = cancelledBeforeRun(payload, job: job, logger: jobLogger) { return .settle(cancelled) }

        // Limits (docs/limiters.md): admitted through all of them or rescheduled without running.
        var leases: [LimitLease] = []
        var admittedAt: Double?
        if let limiter, !prepared.options.limits.isEmpty {
            switch admit(payload, job: job, limits: prepared.options.limits, limiter: limiter, logger: jobLogger()) {
            case .run(let held, let at): (leases, admittedAt) = (held, at)
            case .settle(let result): return .settle(result)
            }
        }
        var context = JobContext(jid: jid, className: payload.className, queue: job.queue, attempt: attempt,
                                 payload: payload, deadline: Date(timeIntervalSince1970: execution.deadline),
                                 cancellation: execution.cancellation, logger: opened.logger(logger), database: database)
        context.sharedTransaction = sharedTransaction
        context.limitsAdmittedAt = admittedAt.map { Date(timeIntervalSince1970: $0) }
        return .run(ReadyRun(job: job, payload: payload, prepared: prepared, context: context, leases: leases,
                             opened: opened, sharedTransaction: sharedTransaction, started: Clock.now()))
    }

    /// The post-run step: what a run that returned (`error` nil) or threw comes to — acknowledged, cancelled,
    /// over a call limit, group commit's redo, waiting for the key store, or the retry rules' settlement.
    private func ended(_ ready: ReadyRun, execution: Execution, error: (any Error)?) -> RunResult {
        let payload = ready.payload, job = ready.job, options = ready.prepared.options
        let opened = ready.opened
        func jobLogger() -> Logger {
            opened.logger(JobContext.runLogger(logger, jid: ready.context.jid, className: payload.className,
                                               queue: job.queue, attempt: ready.context.attempt))
        }
        guard let error else {
            if logger.logLevel <= .debug {
                jobLogger().debug("done", metadata: ["ms": "\(Int((Clock.now() - ready.started) * 1000))"])
            }
            // Told of its cancel, it finished anyway: done, its mark moot (not on the fast path, whose COMMIT is to come).
            if execution.cancellation.isCancelledByOperator, ready.sharedTransaction?.claimedRow == nil {
                noteSettledMarked(payload, job: job)
            }
            return .acknowledged
        }
        if execution.cancellation.isCancelledByOperator {
            return cancelledRun(payload, job: job, options: options, sharedTransaction: ready.sharedTransaction,
                                logger: jobLogger())
        }
        if case CallLimitError.overLimit(let limit, let wait)? = error as? CallLimitError {
            // A limit on the job's calls (`CallLimiter`) refused: rescheduled like a job over its declared limits.
            return overLimit(limit, waitSeconds: wait.inSeconds, payload: payload, job: job,
                             policy: options.limits.overLimit, options: options, logger: jobLogger())
        }
        if ready.sharedTransaction?.claimedRow != nil {
            // Group commit's fast path: the pool thread rolls the group back and runs this job again in a
            // savepoint, where a failure is logged and settled; a redo is never settled.
            jobLogger().debug("failed on group commit's fast path; its group runs again with savepoints",
                              metadata: ["error": "\(Self.message(error))"])
            return .redo
        }
        if let wait = error as? any WaitsForKeyStore {
            // The job needs the key store this worker lacks (an erasure finding keys by digest): it waits, no retry spent.
            return KeyStoreWait.settlement(payload: payload, reason: wait.description, now: Clock.now(), logger: jobLogger())
        }
        return opened.scrub(.failed(settlement(after: error, payload: payload, job: job, options: options,
                                               logger: jobLogger())))
    }

    /// Settlement for a run that overran its timeout (decided by the watchdog); a failed run.
    func timedOut(_ execution: Execution) -> Settlement {
        guard let payload = execution.payload else {
            return .dead(payload: Self.wrapUnreadable(execution.job, reason: "timed out"))
        }
        let options = registry.options(for: payload.className) ?? JobOptions()
        let seconds = Int(execution.deadline - execution.startedAt)
        return settlement(after: JobTimeout(seconds: seconds), payload: payload, job: execution.job, options: options,
                          logger: logger)
    }

    struct JobTimeout: Error, CustomStringConvertible {
        let seconds: Int
        var description: String { "job ran longer than its timeout of \(seconds) s" }
    }

    /// The settlement of a run that failed with `error`: Sidekiq's retry rules (`RetryPolicy.settlement(after:…)`),
    /// the error named for this registry (`errorClassName`). Counts a lost PostgreSQL connection as a dependency error.
    func settlement(after error: any Error, payload: JobPayload, job: FetchedJob, options: JobOptions,
                    logger: Logger) -> Settlement {
        let errorClass = errorClassName(error)
        if PostgresError.isConnectionFailure(error) { RuntimeMetrics.dependencyError("PostgreSQL") }
        return RetryPolicy.settlement(after: error, errorClass: errorClass, payload: payload, queue: job.queue,
                                      options: options, logger: logger)
    }

    /// A payload that is not a job at all is kept in `dead` inside a readable envelope (`UnreadableJob`).
    static func wrapUnreadable(_ job: FetchedJob, reason: String) -> String {
        UnreadableJob.deadEntry(raw: job.raw, queue: job.queue, reason: reason)
    }

    /// The `error_class` of a failure: a fixed name for the runtime's own errors, else the error's
    /// type in Ruby's form (`ErrorClassName`), e.g. `Fail::Failure`.
    func errorClassName(_ error: any Error) -> String {
        switch error {
        case JobError.badInput: return "BadInput"
        case JobError.permanent: return "PermanentFailure"
        case JobError.retryAfter: return "RetryLater"
        case is JobTimeout: return "JobTimeout"
        default: return ErrorClassName.of(error, jobTypes: registry.classNamesByType)
        }
    }

    static func message(_ error: any Error) -> String {
        "\(error)"
    }
}
