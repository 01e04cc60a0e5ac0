import Foundation
import Logging
import Queue
import Storage
import Synchronization

/// The pool: `concurrency` threads that take jobs from `buffer`, run them through the `JobRunner`
/// and queue their settlements; group-commit jobs share one PostgreSQL transaction per thread.
///
/// Thread rules: each pool thread owns its `RunningJobs.Slot` (sets and clears its execution)
/// and, during a group, its pooled PostgreSQL connection; pool threads hold no Redis connection.
/// They share only the hand-offs: take from `buffer`, publish in `running`, add to `settlements`,
/// record in `runTime`. `spawnThread` may be called from any thread (the life cycle at start, the
/// watchdog to replace a retired thread); `waitForThreads` from the life cycle.
///
/// Invariant: a pool thread settles a run only after winning `Execution.finish()`; when the watchdog
/// or shutdown won `abandon()` instead, they settled it and the pool thread retires without settling.
final class JobPool: Sendable {
    let runner: JobRunner
    private let configuration: WorkerConfiguration
    private let buffer: JobBuffer
    private let running: RunningJobs
    private let settlements: SettlementQueue
    private let runTime: RunTimeEstimate
    private let metrics: RuntimeMetrics
    /// Time from `enqueued_at` to the start of the run, for every job this process ran.
    let pickupLatency: LatencyHistogram
    /// Run time of every job this process ran.
    let runTimes: LatencyHistogram
    private let logger: Logger
    private let threadSerial = Atomic<Int>(0)
    private let threadsDone = DispatchGroup()

    init(runner: JobRunner, configuration: WorkerConfiguration, buffer: JobBuffer, running: RunningJobs,
         settlements: SettlementQueue, runTime: RunTimeEstimate, metrics: RuntimeMetrics,
         pickupLatency: LatencyHistogram, runTimes: LatencyHistogram, logger: Logger) {
        self.runner = runner
        self.configuration = configuration
        self.buffer = buffer
        self.running = running
        self.settlements = settlements
        self.runTime = runTime
        self.metrics = metrics
        self.pickupLatency = pickupLatency
        self.runTimes = runTimes
        self.logger = logger
    }

    /// Starts one more pool thread. It exits once the buffer is closed and empty, or retires after
    /// the watchdog abandoned its run.
    func spawnThread() {
        let serial = threadSerial.wrappingAdd(1, ordering: .relaxed).newValue
        let threadID = String(serial, radix: 36)
        RuntimeThread.spawn("pool-\(threadID)", group: threadsDone) { [self] in loop(threadID: threadID) }
    }

    /// Waits until every pool thread has exited, or `timeout` passes. True if they all exited.
    func waitForThreads(timeout: Double) -> Bool {
        threadsDone.wait(timeout: .now() + timeout) == .success
    }

    private func loop(threadID: String) {
        let slot = running.slot(for: threadID)
        var metricHandles: [String: RuntimeMetrics.JobHandles] = [:]
        defer { running.retire(threadID) }
        var carried: TakenJob?
        while let taken = carried ?? buffer.take().map(TakenJob.init) {
            carried = nil
            if runner.sharesCommits(taken.payload), let database = runner.database {
                let group = runGroup(first: taken, database: database, slot: slot, threadID: threadID,
                                     metricHandles: &metricHandles)
                if group.retire {
                    if let carried = group.carried { settlements.giveBack([carried.job], logger: logger) }
                    return
                }
                carried = group.carried
                continue
            }
            guard let ran = runOne(taken, slot: slot, threadID: threadID, metricHandles: &metricHandles) else {
                return
            }
            if ran.outcome.counted { ran.metrics.record(failed: ran.outcome.failed) }
            settlements.add(.init(job: taken.job, settlement: ran.outcome.settlement, failed: ran.outcome.failed,
                                  processed: ran.outcome.counted))
        }
    }

    /// A job taken from the buffer, parsed once.
    private struct TakenJob {
        let job: FetchedJob
        let parsed: Result<JobPayload, PayloadError>
        var payload: JobPayload? { try? parsed.get() }
        init(_ job: FetchedJob) {
            self.job = job
            self.parsed = JobRunner.parse(job)
        }
    }

    /// A finished run's Prometheus figures, recorded by the caller once the outcome is final (a
    /// group-commit job's success is final only after its group's COMMIT).
    private struct RunMetrics {
        let handles: RuntimeMetrics.JobHandles
        let seconds: Double
        func record(failed: Bool) { RuntimeMetrics.finished(handles, failed: failed, runSeconds: seconds) }
    }

    /// Runs one job on this pool thread; the caller records `metrics`. Nil when the watchdog abandoned
    /// (and settled) the run meanwhile (its metrics are recorded here): the thread must retire, a
    /// replacement is already running.
    private func runOne(_ taken: TakenJob, slot: RunningJobs.Slot, threadID: String,
                        metricHandles: inout [String: RuntimeMetrics.JobHandles],
                        sharedTransaction: PostgresConnection? = nil) -> (outcome: JobRunner.Outcome, metrics: RunMetrics)? {
        let job = taken.job
        let payload = taken.payload
        let execution = Execution(job: job, payload: payload, threadID: threadID, startedAt: Clock.now(),
                                  timeout: runner.timeout(for: payload))
        slot.set(execution)
        let metricClass = payload.map { runner.registry.options(for: $0.className) == nil ? "_unregistered" : $0.className }
            ?? "_unreadable"
        let handles = metrics.job(className: metricClass, queue: job.queue, cache: &metricHandles)
        if let enqueuedAt = payload?.enqueuedAt {
            let waited = execution.startedAt - enqueuedAt
            pickupLatency.record(seconds: waited)
            handles.pickup.recordNanoseconds(Int64(max(0, waited) * 1e9))
        }
        let outcome = runner.run(job, payload: taken.parsed, execution: execution, sharedTransaction: sharedTransaction)
        let seconds = Clock.now() - execution.startedAt
        runTimes.record(seconds: seconds)
        let runMetrics = RunMetrics(handles: handles, seconds: seconds)
        runTime.record(seconds: seconds)
        guard execution.finish() else {
            runMetrics.record(failed: true)  // the watchdog settled it as timed out
            logger.info("overran job returned; thread retired", metadata: ["thread": "\(threadID)"])
            return nil
        }
        slot.clear(execution)
        return (outcome, runMetrics)
    }

    /// Group commit: runs `first` and then, while more group-commit jobs are already waiting in the
    /// buffer (at most `commitBatch` jobs, for at most `commitWindow` seconds), the next ones, all in one
    /// transaction on one pooled connection, each in its own savepoint; then commits once.
    ///
    /// Invariants: a job whose effects are in the open transaction is acknowledged only after COMMIT
    /// succeeded (until then it stays in flight in Redis and is listed in the slot's `awaitingCommit`, so a
    /// reconciliation never takes it for lost). A job that failed is settled at once: its savepoint was
    /// rolled back, so its settlement does not depend on the commit. If BEGIN, COMMIT or the connection
    /// fails, every job awaiting the commit gets a failure settlement (retry); the ledger makes the retry
    /// apply once. Only this pool thread touches the connection and the group.
    ///
    /// Returns a job it took from the buffer that cannot join a group (to run next), and whether the
    /// thread must retire (the watchdog abandoned one of the runs).
    private func runGroup(first: TakenJob, database: JobDatabase, slot: RunningJobs.Slot, threadID: String,
                          metricHandles: inout [String: RuntimeMetrics.JobHandles]) -> (carried: TakenJob?, retire: Bool) {
        var awaiting: [(taken: TakenJob, metrics: RunMetrics)] = []
        var carried: TakenJob?
        var retire = false
        var firstStarted = false
        let openedAt = Clock.now()
        defer { slot.clearAwaitingCommit() }
        do {
            try database.pool.withConnection { connection in
                try connection.execute("BEGIN")
                var next: TakenJob? = first
                while let taken = next {
                    next = nil
                    firstStarted = true
                    guard let ran = runOne(taken, slot: slot, threadID: threadID, metricHandles: &metricHandles,
                                           sharedTransaction: connection) else {
                        // The watchdog settled this run; commit what the others did, then retire.
                        retire = true
                        break
                    }
                    if case .ack = ran.outcome.settlement {
                        awaiting.append((taken, ran.metrics))
                        slot.awaitCommit(taken.job)
                    } else {
                        if ran.outcome.counted { ran.metrics.record(failed: ran.outcome.failed) }
                        settlements.add(.init(job: taken.job, settlement: ran.outcome.settlement, failed: ran.outcome.failed,
                                              processed: ran.outcome.counted))
                    }
                    guard connection.isOpen, connection.isInTransaction, !connection.isTransactionFailed else {
                        throw GroupCommitBroken()
                    }
                    guard awaiting.count < configuration.commitBatch,
                          Clock.now() - openedAt < configuration.commitWindow,
                          let candidate = buffer.tryTake().map(TakenJob.init) else { break }
                    if runner.sharesCommits(candidate.payload) { next = candidate } else { carried = candidate }
                }
                let commit = try connection.query("COMMIT")
                if commit.commandTag == "ROLLBACK" { throw GroupCommitBroken() }
            }
        } catch {
            if !awaiting.isEmpty {
                logger.warning("group commit failed; its jobs will be retried",
                               metadata: ["jobs": "\(awaiting.count)", "error": "\(error)"])
            }
            // BEGIN (or the checkout) failed before the first job ran: it fails like any job whose
            // database is unreachable.
            for waiting in awaiting { waiting.metrics.record(failed: true) }
            let unsettled = firstStarted ? awaiting.map(\.taken) : [first]
            for taken in unsettled {
                guard let payload = taken.payload else { continue }  // only parsed jobs share commits
                let options = runner.registry.options(for: payload.className) ?? JobOptions()
                let outcome = runner.failure(error, payload: payload, job: taken.job, options: options, logger: logger)
                settlements.add(.init(job: taken.job, settlement: outcome.settlement, failed: true, processed: true))
            }
            return (carried, retire)
        }
        for (taken, metrics) in awaiting {
            metrics.record(failed: false)
            settlements.add(.init(job: taken.job, settlement: .ack, failed: false, processed: true))
        }
        return (carried, retire)
    }
}

/// A group-commit transaction can no longer commit: the connection broke, or a statement failed
/// outside any job's savepoint. Every job awaiting its commit is retried.
struct GroupCommitBroken: Error, CustomStringConvertible {
    var description: String { "the shared group-commit transaction was lost before COMMIT; the jobs of the group are retried" }
}
