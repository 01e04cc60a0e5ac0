import Foundation
import Logging
import WorkersQueue
import WorkersStorage
@testable import Workers
import XCTest

/// How one delivery of a job settled, as the worker would write it: the outcome of `JobRunnerDriver` (in process)
/// and of `SettlingWorker` (a real worker through Redis) alike, so one set of assertions (`Failure`) serves both.
/// An `Error`, so that `JobRunnerDriver.run` can throw a delivery that did not succeed.
enum Delivery: Error, Sendable, CustomStringConvertible {
    /// Done (succeeded, or already applied according to the ledger).
    case ack
    /// Failed; `next` is the payload the worker puts in `retry` (retry_count, error fields), due `delay` seconds
    /// after the failure was recorded.
    case retry(next: JobPayload, delay: Double)
    /// Failed for good; `payload` is what the worker puts in `dead`.
    case dead(payload: JobPayload)
    /// Dropped (retry disabled).
    case drop
    /// Given back to `schedule` without spending a retry, to run at `at` (waiting for the key store: `next` carries
    /// `key_store_waits`). Limits' reschedules stay an error of the driver.
    case waited(next: JobPayload, at: Double)

    /// `error_class` of a failed delivery.
    var errorClass: String? { failedPayload?.fields["error_class"]?.stringValue }
    /// `error_message` of a failed delivery.
    var errorMessage: String? { failedPayload?.fields["error_message"]?.stringValue }

    var failedPayload: JobPayload? {
        switch self {
        case .retry(let next, _): return next
        case .dead(let payload): return payload
        case .ack, .drop, .waited: return nil
        }
    }

    var description: String {
        switch self {
        case .ack: return "ack"
        case .retry(_, let delay): return "retry in \(delay) s (\(errorClass ?? "?"): \(errorMessage ?? "?"))"
        case .dead: return "dead (\(errorClass ?? "?"): \(errorMessage ?? "?"))"
        case .drop: return "drop"
        case .waited(let next, _): return "waited (key_store_waits \(next.fields["key_store_waits"]?.intValue ?? 0))"
        }
    }

    /// The time the failure was recorded in the payload (`retried_at` of a retry, else `failed_at`).
    static func failedAt(_ payload: JobPayload) -> Double? {
        payload.retriedAt ?? payload.failedAt
    }
}

/// The one in-process job driver of JobsTests. Delivers jobs through the worker's own `JobRunner` — payload
/// parsing, registry and argument validation, the ledger check of a redelivery, the run, Sidekiq's retry and dead
/// rules — against the test database, and hands back what the worker would do with the job (`Delivery`), without
/// Redis in between: the fetch and the settlement's Redis write are the only parts left out. A test drives
/// retries by delivering the payload of a `.retry` again (`retry(_:)`; its `retry_count` then makes the runner
/// consult the ledger, as a real redelivery does), and a crash by `redeliverInterrupted(_:)`.
/// For a real worker process (threads, Redis, orphan recovery) use `TestWorker` / `SettlingWorker`.
///
/// Stateless; any thread may call it.
struct JobRunnerDriver {
    let runner: JobRunner

    /// `logger`: the runner's and the jobs' (`context.logger`), e.g. `CapturedLogs.logger` to assert an alert;
    /// nil = critical only.
    init(registry: JobRegistry, database: JobDatabase, logger: Logger? = nil) {
        var quiet = Logger(label: "job-runner-driver")
        quiet.logLevel = .critical
        runner = JobRunner(registry: registry, configuration: WorkerConfiguration(), database: database,
                           logger: logger ?? quiet)
    }

    /// One delivery of `payload`.
    func deliver(_ payload: JobPayload) throws -> Delivery {
        let job = FetchedJob(queue: payload.fields["queue"]?.stringValue ?? "default", raw: Array(payload.serialized().utf8),
                             workingKey: "driver")
        let parsed = JobRunner.parse(job)
        let started = Clock.now()
        let execution = Execution(job: job, payload: try? parsed.get(), threadID: "driver", startedAt: started,
                                  timeout: runner.timeout(for: try? parsed.get()))
        guard case .settled(let settlement, _) = runner.run(job, payload: parsed, execution: execution) else {
            throw DriverError("the runner asked for a redo, which only group commit's fast path does")
        }
        switch settlement {
        case .ack: return .ack
        case .drop: return .drop
        case .retry(let text, let at):
            let next = try JobPayload(parsing: text)
            return .retry(next: next, delay: at - (Delivery.failedAt(next) ?? started))
        case .dead(let text): return .dead(payload: try JobPayload(parsing: text))
        case .requeue(let text): throw DriverError("the runner requeued the job: \(text)")
        case .schedule(let text, let at):
            let next = try JobPayload(parsing: text)
            guard next.fields["key_store_waits"] != nil else { throw DriverError("the runner rescheduled the job (over a limit): \(text)") }
            return .waited(next: next, at: at)
        }
    }

    /// A first delivery of a new job of `className` with `args`.
    func deliver(_ className: String, _ args: [JSONValue]) throws -> Delivery {
        try deliver(try Self.payload(className, args))
    }

    /// A first delivery of `job` as an enqueue would push it: under its own jid when it has one (a sealed job's
    /// envelopes are bound to it).
    func deliver(_ job: NewJob) throws -> Delivery {
        try deliver(try JobClient.payload(for: job, createdAt: Clock.now(), enqueuedAt: Clock.now()))
    }

    /// `run` of a first delivery of `job` (under its own jid when it has one).
    @discardableResult
    func run(_ job: NewJob) throws -> JobPayload {
        let payload = try JobClient.payload(for: job, createdAt: Clock.now(), enqueuedAt: Clock.now())
        try run(payload)
        return payload
    }

    /// Delivers `payload` and requires it to succeed: returns on `.ack` (done, or already applied), throws the
    /// `Delivery` otherwise (assert on it with `Failure`).
    func run(_ payload: JobPayload) throws {
        let delivery = try deliver(payload)
        guard case .ack = delivery else { throw delivery }
    }

    /// `run` of a first delivery of `className` with `args` as `jid` (`retryCount`: as a delivery out of the
    /// retry set); returns the payload delivered.
    @discardableResult
    func run(_ className: String, _ args: [JSONValue], jid: String = Identifiers.jid(), retryCount: Int? = nil) throws
        -> JobPayload {
        let payload = try Self.payload(className, args, jid: jid, retryCount: retryCount)
        try run(payload)
        return payload
    }

    /// The same with the arguments as JSON text (an array).
    @discardableResult
    func run(_ className: String, _ argsJSON: String, jid: String = Identifiers.jid()) throws -> JobPayload {
        try run(className, try Self.arguments(argsJSON), jid: jid)
    }

    /// Delivers the payload of a `.retry` again (what the retry poller does once it is due); `run` rules.
    func retry(_ delivery: Delivery) throws {
        guard case .retry(let next, _) = delivery else { throw delivery }
        try run(next)
    }

    /// Delivers `payload` again as orphan recovery does after a crashed worker (`interrupted_count` + 1); `run` rules.
    func redeliverInterrupted(_ payload: JobPayload) throws {
        var p = payload
        p.fields["interrupted_count"] = .int(Int64(p.interruptedCount + 1))
        try run(p)
    }

    /// A payload for `className` with `args`, as `JobClient` enqueues it; `retryCount` makes it a delivery out of
    /// the retry set (attempt = retryCount + 2, as the runtime counts).
    static func payload(_ className: String, _ args: [JSONValue], jid: String = Identifiers.jid(),
                        retryCount: Int? = nil) throws -> JobPayload {
        var payload = try JobClient.payload(for: NewJob(className, args: args), jid: jid, createdAt: Clock.now(),
                                            enqueuedAt: Clock.now())
        if let retryCount { payload.fields["retry_count"] = .int(Int64(retryCount)) }
        return payload
    }

    /// `argsJSON` (a JSON array) as arguments.
    static func arguments(_ argsJSON: String) throws -> [JSONValue] {
        guard case .array(let args) = try JSONValue.parse(argsJSON) else { throw JobError.badInput("args must be an array") }
        return args
    }

    struct DriverError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
