import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Synchronization

/// A flag set from another thread to ask a running job to stop (its timeout passed, the process is
/// shutting down hard, or an operator cancelled the job: `workerctl jobs cancel`). Jobs that loop or wait
/// should check it (`JobContext.checkCancellation()`); HTTP calls pass it to curl's progress callback.
/// It also carries the run's last reported progress (`JobContext.progress(_:note:)`) to the heartbeat
/// (JobSteering.swift), stored inline: a run that never reports costs nothing more.
public final class CancellationFlag: Sendable {
    /// 0: not cancelled; 1: cancelled (timeout, shutdown, `cancel()`); 2: cancelled by an operator.
    let reason = Atomic<Int>(0)
    /// The run's last reported progress and whether the heartbeat wrote it (`ReportedProgress`).
    let reported = Mutex<ReportedProgress>(ReportedProgress())
    /// Called once the flag is set (any reason): an async job's run cancels its task here (`AsyncRuns`). Set once,
    /// by the task's starter; called on the thread that set the flag (watchdog, heartbeat, shutdown) or, if the flag
    /// was already set, on the one that sets the hook.
    private let onCancel = Mutex<(@Sendable () -> Void)?>(nil)
    public init() {}
    public var isCancelled: Bool { reason.load(ordering: .acquiring) != 0 }
    public func cancel() {
        if reason.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged { cancelled() }
    }

    /// Runs `hook` when the flag is set, or at once if it already is (at least once; a task's cancel is idempotent).
    func whenCancelled(_ hook: @escaping @Sendable () -> Void) {
        onCancel.withLock { $0 = hook }
        if isCancelled { hook() }
    }

    /// The flag was just set: tells the hook, if any.
    func cancelled() {
        onCancel.withLock { $0 }?()
    }
}

/// What a running job knows about its run. Created by the runtime for one run on one pool
/// thread; not shared.
public struct JobContext: Sendable {
    public let jid: String
    public let className: String
    public let queue: String
    /// 1 for the first run, 2 after the first failure, …
    public let attempt: Int
    public let payload: JobPayload
    public let deadline: Date
    public let cancellation: CancellationFlag
    /// The process's logger, without this run's fields (`logger` adds them); carries the metadata a middleware
    /// set (`subscript(loggerMetadataKey:)`).
    private var processLogger: Logger
    /// Carries jid, class, queue and attempt in its metadata. Built on each access from the process's logger, so
    /// that a run that logs nothing (most successful runs) pays nothing for it; a job that logs often may keep a copy.
    public var logger: Logger {
        Self.runLogger(processLogger, jid: jid, className: className, queue: queue, attempt: attempt)
    }
    /// Access to PostgreSQL through the exactly-once ledger (nil when the process has no database).
    public let database: JobDatabase?
    /// Set by the runtime for a group-commit job (`JobOptions.groupCommit`): the pool thread's open
    /// transaction, shared with the other jobs of its group. `transaction` and `withConnection` use it
    /// (the job's work runs directly in it when the group claimed its ledger row, else in a savepoint);
    /// only this run's thread touches it, and only during the run.
    var sharedTransaction: SharedTransaction?
    /// When this run was admitted through its class's limits (Redis server time); nil for a class without
    /// limits (docs/limiters.md).
    public internal(set) var limitsAdmittedAt: Date?

    /// `logger` is the process's logger; this run's fields are added by `logger` when it is read.
    public init(jid: String, className: String, queue: String, attempt: Int, payload: JobPayload, deadline: Date,
                cancellation: CancellationFlag, logger: Logger, database: JobDatabase?) {
        self.jid = jid
        self.className = className
        self.queue = queue
        self.attempt = attempt
        self.payload = payload
        self.deadline = deadline
        self.cancellation = cancellation
        self.processLogger = logger
        self.database = database
    }

    /// `logger` with a run's fields in its metadata: the one place that says which fields a job's log lines carry
    /// (the runner's own lines about a run use it too).
    static func runLogger(_ logger: Logger, jid: String, className: String, queue: String, attempt: Int) -> Logger {
        var runLogger = logger
        var metadata = logger.handler.metadata
        metadata.reserveCapacity(metadata.count + 4)
        metadata["jid"] = .string(jid)
        metadata["class"] = .string(className)
        metadata["queue"] = .string(queue)
        metadata["attempt"] = .string(String(attempt))
        runLogger.handler.metadata = metadata
        return runLogger
    }

    /// True once the run was asked to stop: its timeout, a hard shutdown, an operator's cancel — or, for an
    /// async job, the cancellation of the task it runs in (every one of those cancels that task).
    public var isCancelled: Bool { cancellation.isCancelled || withUnsafeCurrentTask { $0?.isCancelled ?? false } }

    /// Metadata that every line logged through `logger` in this run carries besides jid, class, queue and attempt,
    /// e.g. a tenant tag set by a `JobMiddleware` on the copy it passes to `next`. The runtime's own lines about the
    /// run (retry, dead) do not carry it. Same thread rules as the context: this run's thread only.
    public subscript(loggerMetadataKey key: String) -> Logger.Metadata.Value? {
        get { processLogger[metadataKey: key] }
        set { processLogger[metadataKey: key] = newValue }
    }
}
