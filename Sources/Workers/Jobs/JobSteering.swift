import Foundation
import WorkersQueue
import Synchronization

// What a job author uses to be steered while it runs (docs/writing-jobs.md "Progress and cancellation"): report
// progress that operators read by jid (`context.progress`), and stop when an operator cancels the job
// (`context.isCancelled`, `context.checkCancellation()`). The runtime's side is RunSteering.swift.

/// Thrown by `JobContext.checkCancellation()` when the run was asked to stop. A job may also throw it itself after
/// seeing `isCancelled`. An operator's cancel settles the job in the dead set with `error_class` `Cancelled`, never
/// retried (unless its ledger transaction had committed: then it is done); after a timeout or a hard shutdown the
/// runtime has already settled the run (timeout: retried; shutdown: put back) and this error changes nothing.
public struct JobCancelled: Error, Sendable, Equatable, CustomStringConvertible {
    public let jid: String
    public init(jid: String) { self.jid = jid }
    public var description: String { "job \(jid) was cancelled" }
}

extension JobContext {
    /// Reports how far the run is: `fraction` from 0 to 1 (clamped; NaN is ignored) and an optional short `note`
    /// (cut to `JobProgress.maxNoteBytes` bytes, control and format characters removed). Operators and services read
    /// it by jid while the job runs (`WorkersClient.progress(jid:)`, `workerctl jobs show`).
    ///
    /// Cheap enough to call in a loop: it only stores the value in memory, under a lock no other pool thread takes.
    /// The process's heartbeat writes the latest value to Redis at most once per heartbeat interval
    /// (`progress:<jid>`, TTL 24 h) and deletes it at its first beat after the run ended. Thread rules: any thread
    /// of this run, while it lasts.
    public func progress(_ fraction: Double, note: String? = nil) {
        guard !fraction.isNaN else { return }
        let now = Date()
        cancellation.reported.withLock { $0.report(fraction: fraction, note: note, at: now) }
    }

    /// Throws `JobCancelled` when the run was asked to stop (an operator's cancel, told within one heartbeat
    /// interval; the timeout; a hard shutdown): call it between steps of long work, inside or outside a
    /// `transaction` (thrown inside, the transaction rolls back). Any thread of this run.
    public func checkCancellation() throws(JobCancelled) {
        if isCancelled { throw JobCancelled(jid: jid) }
    }
}

/// A run's last reported progress, unbounded as the job gave it (`JobProgress` bounds it when the heartbeat writes
/// it, off the pool thread), and the heartbeat's bookkeeping.
///
/// Thread rules: lives in the run's `CancellationFlag.reported` mutex; the run writes it (`report`), the heartbeat
/// reads it (`takeUnwritten`).
struct ReportedProgress: Sendable {
    private var fraction = 0.0
    private var note: String?
    private var at = Date.distantPast
    /// Reports so far; `written` is the count the heartbeat last wrote.
    private var version = 0
    private var written = 0

    mutating func report(fraction: Double, note: String?, at: Date) {
        self.fraction = fraction
        self.note = note
        self.at = at
        version &+= 1
    }

    /// True once the run reported at least once.
    var hasReported: Bool { version != 0 }

    /// The value reported since the heartbeat last took one, bounded; nil if none.
    mutating func takeUnwritten() -> JobProgress? {
        guard version != written else { return nil }
        written = version
        return JobProgress(fraction: fraction, note: note, at: at)
    }
}

extension CancellationFlag {
    /// An operator cancelled the run (`workerctl jobs cancel`, seen by the heartbeat). Has no effect on a run
    /// already cancelled for another reason (timeout, shutdown): that one is settled by whoever cancelled it.
    func cancelByOperator() {
        if reason.compareExchange(expected: 0, desired: 2, ordering: .acquiringAndReleasing).exchanged { cancelled() }
    }

    /// True when the run was cancelled by an operator (and by nothing else first).
    var isCancelledByOperator: Bool { reason.load(ordering: .acquiring) == 2 }
}
