import WorkersQueue

// What one run of a job came to, from the runner to the settler: its settlement and the `stat:*` counters it moves,
// or group commit's redo. The one spelling of a run's result (`JobRunner.run`, `JobPool`, `GroupCommit`); the
// settlement queue carries its settlement and counts (`SettlementQueue.Item`).

/// What one run of a job came to (`JobRunner.run`).
///
/// Pure value; any thread. Invariant: only a run in a group's claimed transaction (`SharedTransaction.claimedRow`,
/// group commit's fast path) comes to `.redo`; every other run comes to `.settled`.
enum RunResult: Sendable {
    /// Settle the job with `settlement`. `counts` are the `stat:*` counters it moves: `.processed` for a run that
    /// ended (success or failure, as in Sidekiq), with `.failed` for a failure; none when the job did not run (over
    /// a limit: no counter, no run metrics).
    case settled(Settlement, counts: RunCounts)
    /// Group commit's fast path: the job threw in the group's shared transaction. Never settled: the pool thread
    /// rolls the group back and runs it again with a savepoint per job (`GroupCommit.runGroup`), where this job's
    /// failure is logged and settled.
    case redo

    /// A run that ended well, or a redelivery found already applied: acknowledged, counted as processed.
    static var acknowledged: RunResult { .settled(.ack, counts: .processed) }

    /// A run that failed, settled with `settlement` (retry, dead, drop): counted as processed and failed.
    static func failed(_ settlement: Settlement) -> RunResult { .settled(settlement, counts: [.processed, .failed]) }

    /// True when the run failed (a settled failure, or a redo): its span's status is an error.
    var isFailure: Bool {
        switch self {
        case .settled(_, let counts): return counts.contains(.failed)
        case .redo: return true
        }
    }
}
