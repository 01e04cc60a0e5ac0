import WorkersStorage
import Synchronization

/// A group-commit job's view of its pool thread's open transaction (`JobOptions.groupCommit`,
/// `GroupCommit.runGroup`).
///
/// Thread rules: made by the pool thread for one run and used only by that run, on that thread, while
/// the run lasts; the pool thread owns `connection` (checked out of the pool) for the whole group.
struct SharedTransaction: Sendable {
    /// The connection whose transaction the group's jobs share.
    let connection: PostgresConnection
    /// Fast path: the group's claim statement has already inserted this job's ledger row in the open
    /// transaction, so `context.transaction` runs its body directly — no savepoint, no ledger statement.
    /// Nil: the job's ledger row and its work go in a savepoint of their own (`JobLedger.runOnce` nested).
    let claimedRow: ClaimedLedgerRow?
}

/// The ledger row a group's claim statement inserted for one run (fast path of group commit).
///
/// The run's first `context.transaction` uses it and runs its body; a later one in the same run returns
/// `.alreadyApplied` without running (as the savepoint path would, finding the row its first call
/// inserted). The pool thread reads `bodyFailed` after the run: a body that threw may have left part of
/// its work in the transaction (no savepoint undoes it), so the group must not commit even if the job
/// caught the error and returned normally.
///
/// Thread rules: written by the run and read by the pool thread after it, both on the same pool
/// thread; atomics only so that the type is `Sendable` like the `JobContext` that carries it.
final class ClaimedLedgerRow: Sendable {
    private let state = Atomic<Int>(0)  // 0 unused, 1 used by a body, 2 a body threw

    /// True for the first caller (its body may run), false afterwards.
    func use() -> Bool { state.compareExchange(expected: 0, desired: 1, ordering: .relaxed).exchanged }

    /// Records that the body using this row threw.
    func markBodyFailed() { state.store(2, ordering: .relaxed) }

    /// True when a body that used this row threw.
    var bodyFailed: Bool { state.load(ordering: .relaxed) == 2 }
}
