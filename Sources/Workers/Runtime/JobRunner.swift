import Foundation
import Logging
import Queue
import Storage
import Telemetry
import Tracing

/// Turns one fetched job into a settlement: parse, look up, decode, run, and on failure apply
/// Sidekiq's retry rules (§6 of the wire doc). Stateless apart from its configuration; any pool
/// thread may call it.
struct JobRunner: Sendable {
    let registry: JobRegistry
    let configuration: WorkerConfiguration
    let database: JobDatabase?
    let logger: Logger
    /// Admits jobs through their class's limits (docs/limiters.md); nil: limits are not enforced.
    var limiter: JobLimiter? = nil

    /// What a run produced.
    struct Outcome {
        let settlement: Settlement
        let failed: Bool
        /// False when the job did not run at all (over a limit): no `stat:*` counter, no run metrics.
        var counted: Bool = true
    }

    /// The timeout for a payload (its class's, else the process default, else 30 min).
    func timeout(for payload: JobPayload?) -> Double {
        if let payload, let options = registry.options(for: payload.className) {
            return configuration.defaultTimeout.map { min($0, options.timeout) } ?? options.timeout
        }
        return configuration.defaultTimeout ?? 1800
    }

    static func parse(_ job: FetchedJob) -> Result<JobPayload, PayloadError> {
        do { return .success(try JobPayload(parsing: job.raw)) } catch { return .failure(error) }
    }

    /// True when jobs of this payload's class may share a commit with their neighbours
    /// (`JobOptions.groupCommit`) and this process has a database and group commits enabled.
    func sharesCommits(_ payload: JobPayload?) -> Bool {
        guard database != nil, configuration.commitBatch > 1, let payload else { return false }
        return registry.options(for: payload.className)?.groupCommit ?? false
    }

    /// Runs one job. `sharedTransaction` is the pool thread's open group-commit transaction (for jobs
    /// that `sharesCommits`): the job's ledger check and transaction use it instead of a pooled connection.
    /// When the group has claimed the job's ledger row (`SharedTransaction.claimedRow`) the redelivery
    /// check is skipped: the claim found no row, so no earlier delivery committed.
    ///
    /// While tracing is on (docs/tracing.md) the run is a consumer span, child of the payload's `traceparent`,
    /// bound as the thread's `ServiceContext` around the whole run, so the job's HTTP calls, SQL transactions
    /// and enqueues are its children. While off: one atomic load, no span, nothing bound.
    func run(_ job: FetchedJob, payload parsed: Result<JobPayload, PayloadError>, execution: Execution,
             sharedTransaction: SharedTransaction? = nil) -> Outcome {
        guard JobTracing.isEnabled, case .success(let payload) = parsed else {
            return execute(job, payload: parsed, execution: execution, sharedTransaction: sharedTransaction)
        }
        let span = JobTracing.tracer.startAnySpan("perform \(payload.className)",
                                                  context: JobTraceContext.extract(from: payload), ofKind: .consumer)
        span.attributes["job.class"] = payload.className
        span.attributes["job.queue"] = job.queue
        span.attributes["job.jid"] = payload.jid ?? "-"
        span.attributes["job.attempt"] = Int64((payload.retryCount ?? -1) + 2)
        span.attributes["messaging.system"] = "sidekiq"
        let outcome = ServiceContext.withValue(span.context) {
            execute(job, payload: parsed, execution: execution, sharedTransaction: sharedTransaction)
        }
        span.attributes["job.outcome"] = Self.outcomeName(outcome)
        if outcome.failed { span.setStatus(SpanStatus(code: .error)) }
        span.end()
        return outcome
    }

    /// The `job.outcome` span attribute: how the run was settled.
    static func outcomeName(_ outcome: Outcome) -> String {
        switch outcome.settlement {
        case .ack: return outcome.failed ? "failed" : "success"
        case .retry: return "retry"
        case .dead: return "dead"
        case .drop: return "dropped"
        case .requeue: return "requeued"
        case .schedule: return "rescheduled"
        }
    }

    private func execute(_ job: FetchedJob, payload parsed: Result<JobPayload, PayloadError>, execution: Execution,
                         sharedTransaction: SharedTransaction?) -> Outcome {
        let payload: JobPayload
        switch parsed {
        case .failure(let error):
            logger.warning("bad payload sent to dead", metadata: ["queue": "\(job.queue)", "reason": "\(error)"])
            return Outcome(settlement: .dead(payload: Self.wrapUnreadable(job, reason: error.description)), failed: true)
        case .success(let value):
            payload = value
        }
        let jid = payload.jid ?? "-"
        let attempt = (payload.retryCount ?? -1) + 2
        // This run's logger (jid, class, queue, attempt in its metadata) is built only where a line is logged: a
        // successful run logs nothing at the default level, and building it for every run (a metadata dictionary,
        // a copy of the handler) was ~8 % of a no-op drain's worker CPU (perf).
        let className = payload.className
        func jobLogger() -> Logger {
            JobContext.runLogger(logger, jid: jid, className: className, queue: job.queue, attempt: attempt)
        }

        let prepared: PreparedJob
        do {
            prepared = try registry.prepare(payload)
        } catch {
            jobLogger().warning("bad input sent to dead", metadata: ["reason": "\(error.description)"])
            return Outcome(settlement: .dead(payload: failed(payload, queue: job.queue, errorClass: "BadInput",
                                                          message: error.description)), failed: true)
        }

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
                    return Outcome(settlement: .ack, failed: false)
                }
            } catch {
                return failure(error, payload: payload, job: job, options: prepared.options, logger: jobLogger())
            }
        }

        // Limits (docs/limiters.md): admitted through all of them or rescheduled without running.
        var leases: [LimitLease] = []
        var admittedAt: Double?
        if let limiter, !prepared.options.limits.isEmpty {
            switch admit(payload, job: job, limits: prepared.options.limits, limiter: limiter, logger: jobLogger()) {
            case .run(let held, let at): (leases, admittedAt) = (held, at)
            case .settle(let outcome): return outcome
            }
        }
        defer { limiter?.release(leases) }

        var context = JobContext(jid: jid, className: payload.className, queue: job.queue, attempt: attempt,
                                 payload: payload, deadline: Date(timeIntervalSince1970: execution.deadline),
                                 cancellation: execution.cancellation, logger: logger, database: database)
        context.sharedTransaction = sharedTransaction
        context.limitsAdmittedAt = admittedAt
        let started = Clock.now()
        do {
            try prepared.run(context)
            if logger.logLevel <= .debug {
                jobLogger().debug("done", metadata: ["ms": "\(Int((Clock.now() - started) * 1000))"])
            }
            return Outcome(settlement: .ack, failed: false)
        } catch CallLimitError.overLimit(let limit, let waitSeconds) {
            // A limit on the job's calls (`CallLimiter`) refused: rescheduled like a job over its declared limits.
            return overLimit(limit, waitSeconds: waitSeconds, payload: payload, job: job,
                             policy: prepared.options.limits.overLimit, options: prepared.options, logger: jobLogger())
        } catch where sharedTransaction?.claimedRow != nil {
            // Group commit's fast path: the pool thread rolls the group back and runs this job again in a
            // savepoint, where a failure is logged and settled; this outcome is never settled.
            jobLogger().debug("failed on group commit's fast path; its group runs again with savepoints",
                            metadata: ["error": "\(Self.message(error))"])
            return Outcome(settlement: .ack, failed: true, counted: false)
        } catch {
            return failure(error, payload: payload, job: job, options: prepared.options, logger: jobLogger())
        }
    }

    /// Settlement for a run that overran its timeout (decided by the watchdog).
    func timedOut(_ execution: Execution) -> Outcome {
        guard let payload = execution.payload else {
            return Outcome(settlement: .dead(payload: Self.wrapUnreadable(execution.job, reason: "timed out")), failed: true)
        }
        let options = registry.options(for: payload.className) ?? JobOptions()
        let seconds = Int(execution.deadline - execution.startedAt)
        return failure(JobTimeout(seconds: seconds), payload: payload, job: execution.job, options: options, logger: logger)
    }

    struct JobTimeout: Error, CustomStringConvertible {
        let seconds: Int
        var description: String { "job ran longer than its timeout of \(seconds) s" }
    }

    /// Applies Sidekiq's retry rules to a failed run.
    func failure(_ error: any Error, payload: JobPayload, job: FetchedJob, options: JobOptions, logger: Logger) -> Outcome {
        let errorClass = errorClassName(error)
        let message = Self.message(error)
        if error.isPostgresConnectionFailure { RuntimeMetrics.dependencyError("PostgreSQL") }
        switch error {
        case JobError.badInput, JobError.permanent:
            logger.warning("failed permanently; sent to dead", metadata: ["error": "\(message)"])
            return Outcome(settlement: .dead(payload: failed(payload, queue: job.queue, errorClass: errorClass, message: message)),
                           failed: true)
        default:
            break
        }
        var retryAfter: Double?
        if case JobError.retryAfter(let seconds, _) = error { retryAfter = seconds }
        let now = Clock.now()
        switch RetryDecision.decide(payload, queue: job.queue, errorClass: errorClass, message: message, options: options,
                                    retryAfter: retryAfter, now: now) {
        case .drop(let reason):
            logger.warning("failed; \(reason), dropped", metadata: ["error": "\(message)"])
            return Outcome(settlement: .drop, failed: true)
        case .retry(let updated, let delay, let count):
            logger.info("failed; retry scheduled",
                        metadata: ["error": "\(message)", "retry_count": "\(count)", "delay_s": "\(Int(delay))"])
            return Outcome(settlement: .retry(payload: updated, at: now + delay), failed: true)
        case .dead(let updated, let count):
            logger.warning("retries exhausted; sent to dead", metadata: ["error": "\(message)", "retry_count": "\(count)"])
            return Outcome(settlement: .dead(payload: updated), failed: true)
        }
    }

    /// The payload with Sidekiq's failure bookkeeping (`RetryDecision.failed`).
    func failed(_ payload: JobPayload, queue: String, errorClass: String, message: String,
                now: Double = Clock.now()) -> String {
        RetryDecision.failed(payload, queue: queue, errorClass: errorClass, message: message, now: now)
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
