import Foundation
import WorkersQueue
import CoreMetrics

/// The watchdog: ten times a second, fails every run that passed its deadline (a timeout
/// settlement, retried as Sidekiq would) and starts a pool thread in place of the one still stuck
/// in it (an async job's run instead has its task cancelled, by `Execution.abandon()`).
///
/// Thread rules: owns the `watchdog` thread and no connection. Reads `running`; settles only runs
/// whose `Execution.abandon()` it won (so the pool thread, on return, neither settles nor reuses
/// its slot); adds to `settlements`; asks `pool` for a replacement thread unless the process is
/// stopping.
final class Watchdog: Sendable {
    private let running: RunningJobs
    private let settlements: SettlementQueue
    private let pool: JobPool
    private let flags: LifeCycleFlags
    private let metrics: RuntimeMetrics
    private let thread = RuntimeThread(name: "watchdog")

    init(_ parts: RuntimeParts, pool: JobPool) {
        running = parts.running
        settlements = parts.settlements
        self.pool = pool
        flags = parts.flags
        metrics = parts.metrics
    }

    func start() { thread.start { [self] in loop() } }
    func requestStop() { thread.requestStop() }
    func wait() { thread.wait() }
    /// Waits at most `timeout` seconds for the thread to return; true if it did.
    func wait(timeout: Double) -> Bool { thread.wait(timeout: timeout) }

    private func loop() {
        while !thread.shouldStop {
            Thread.sleep(forTimeInterval: 0.1)
            let now = Clock.now()
            for execution in running.all where now > execution.deadline && execution.abandon() {
                let settlement = pool.runner.timedOut(execution)
                metrics.jobTimeouts.increment()
                // Queued before `remove` drops it from its thread's held list: a reconciliation reading in between
                // sees it in one of them. Counted as a failed run.
                settlements.add(pool.runner.withCompletionRecord(
                    .init(job: execution.job, settlement: settlement, counts: [.processed, .failed]), payload: execution.payload))
                running.remove(execution)
                // A pool thread stuck in its run is replaced; an async job's task was cancelled by `abandon()` and
                // keeps its place in `AsyncRuns` until it returns (no thread to replace).
                if !execution.isTask && !flags.isStopping { pool.spawnThread() }
            }
        }
    }
}
