import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Synchronization
import CoreMetrics

/// The pool: `concurrency` threads that take jobs from `buffer`, run them through the `JobRunner`
/// and queue their settlements; group-commit jobs share one PostgreSQL transaction per thread
/// (`GroupCommit`, in GroupCommit.swift: each thread hands such a job to its own `GroupCommit`); async jobs
/// (`AsyncJob`) run as tasks, at most `asyncConcurrency` at once (`AsyncRuns`, `startTask`), settled the same way.
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
    let running: RunningJobs
    private let settlements: SettlementQueue
    private let runTime: RunTimeEstimate
    let metrics: RuntimeMetrics
    /// The async jobs' tasks in flight and their limit (`startTask`).
    let asyncRuns: AsyncRuns
    /// Time from `enqueued_at` to the start of the run, for every job this process ran.
    let pickupLatency: LatencyHistogram
    /// Run time of every job this process ran.
    let runTimes: LatencyHistogram
    private let logger: Logger
    private let threadSerial = Atomic<Int>(0)
    private let threadsDone = DispatchGroup()

    /// `pickupLatency` and `runTimes`: the process's histograms (`WorkerProcess.pickupLatency`, `.runTime`).
    init(_ parts: RuntimeParts, runner: JobRunner, pickupLatency: LatencyHistogram, runTimes: LatencyHistogram) {
        self.runner = runner
        configuration = parts.configuration
        buffer = parts.buffer
        running = parts.running
        settlements = parts.settlements
        runTime = parts.runTime
        metrics = parts.metrics
        asyncRuns = AsyncRuns(limit: parts.configuration.asyncConcurrency)
        self.pickupLatency = pickupLatency
        self.runTimes = runTimes
        logger = parts.logger
    }

    /// Starts one more pool thread. It exits once the buffer is closed and empty, or retires after
    /// the watchdog abandoned its run.
    func spawnThread() {
        let serial = threadSerial.wrappingAdd(1, ordering: .relaxed).newValue
        let threadID = String(serial, radix: 36)
        RuntimeThread.spawn("pool-\(threadID)", group: threadsDone) { [self] in loop(threadID: threadID) }
    }

    /// An async job's task started (`startTask`): `waitForThreads` waits for it too.
    func tasksEnter() { threadsDone.enter() }
    /// That task ended.
    func tasksLeave() { threadsDone.leave() }

    /// Waits until every pool thread and async job's task has exited, or `timeout` passes. True if they all exited.
    func waitForThreads(timeout: Double) -> Bool {
        threadsDone.wait(timeout: .now() + timeout) == .success
    }

    private func loop(threadID: String) {
        let slot = running.slot(for: threadID)
        var metricHandles: [String: RuntimeMetrics.JobHandles] = [:]
        defer { running.retire(threadID) }
        let groupCommit = runner.database.map {
            GroupCommit(jobPool: self, runner: runner, configuration: configuration, buffer: buffer, metrics: metrics,
                        logger: logger, database: $0, slot: slot, threadID: threadID)
        }
        var carried: TakenJob?
        while let taken = carried ?? buffer.take(holdingIn: slot).map(TakenJob.init) {
            carried = nil
            if let payload = taken.payload, runner.registry.isAsync(payload.className) {
                startTask(taken, payload: payload, heldIn: slot, metricHandles: &metricHandles)
                continue
            }
            if runner.sharesCommits(taken.payload), let groupCommit {
                let group = groupCommit.runGroup(first: taken, metricHandles: &metricHandles)
                if group.retire {
                    if let carried = group.carried { giveBack([carried.job], heldIn: slot) }
                    return
                }
                carried = group.carried
                continue
            }
            guard let ran = runOne(taken, slot: slot, threadID: threadID, metricHandles: &metricHandles) else {
                return
            }
            settle(taken, after: ran, heldIn: slot)
        }
    }

    /// Records a finished run's figures (none for a job that did not run: over a limit) and queues its settlement
    /// (`settle(_:heldIn:)`). A `.redo` comes only from a run in a group's claimed transaction, which `GroupCommit`
    /// handles before; were one to reach here, its job goes back to its queue rather than being lost. Internal for
    /// this thread's `GroupCommit`.
    func settle(_ taken: TakenJob, after ran: (result: RunResult, metrics: RunMetrics), heldIn slot: RunningJobs.Slot) {
        guard case .settled(let settlement, let counts) = ran.result else {
            giveBack([taken.job], heldIn: slot)
            return
        }
        if counts.contains(.processed) { ran.metrics.record(failed: counts.contains(.failed)) }
        settle(.init(job: taken.job, settlement: settlement, counts: counts), of: taken, heldIn: slot)
    }

    /// Queues `item`, then drops its job from the slot's `held` list — in that order: a reconciliation reads `held`
    /// before the settlement queue (`Fetcher.knownInFlight`), so it sees the job in one of them. Every settlement a
    /// pool thread makes goes through here or `giveBack(_:heldIn:)`, with the completion record its class keeps
    /// (`JobRunner.withCompletionRecord`). Internal for this thread's `GroupCommit`.
    func settle(_ item: SettlementQueue.Item, of taken: TakenJob, heldIn slot: RunningJobs.Slot) {
        let item = runner.withCompletionRecord(item, payload: taken.payload)
        settlements.add(item)
        slot.release(item.job)
    }

    /// Puts jobs this thread took and did not run back at the front of their queues (`SettlementQueue.giveBack`),
    /// then drops them from the slot's `held` list (as `settle`). Internal for this thread's `GroupCommit`.
    func giveBack(_ jobs: [FetchedJob], heldIn slot: RunningJobs.Slot) {
        settlements.giveBack(jobs, logger: logger)
        for job in jobs { slot.release(job) }
    }

    /// A job taken from the buffer, parsed once. Internal for `GroupCommit`.
    struct TakenJob {
        let job: FetchedJob
        let parsed: Result<JobPayload, PayloadError>
        var payload: JobPayload? { try? parsed.get() }
        init(_ job: FetchedJob) {
            self.job = job
            self.parsed = JobRunner.parse(job)
        }
    }

    /// A finished run's Prometheus figures, recorded by the caller once the result is final (a
    /// group-commit job's success is final only after its group's COMMIT). Internal for `GroupCommit`.
    struct RunMetrics {
        let handles: RuntimeMetrics.JobHandles
        let seconds: Double
        func record(failed: Bool) { RuntimeMetrics.finished(handles, failed: failed, runSeconds: seconds) }
    }

    /// Records the time from the payload's `enqueued_at` to the start of its run (pool threads and tasks).
    func recordPickup(_ payload: JobPayload?, startedAt: Double, handles: RuntimeMetrics.JobHandles) {
        guard let enqueuedAt = payload?.enqueuedAt else { return }
        let waited = startedAt - enqueuedAt
        pickupLatency.record(seconds: waited)
        handles.pickup.recordNanoseconds(Int64(max(0, waited) * 1e9))
    }

    /// Runs one job on this pool thread; the caller records `metrics`. Nil when the watchdog abandoned
    /// (and settled) the run meanwhile (its metrics are recorded here): the thread must retire, a
    /// replacement is already running. Internal for `GroupCommit`, which runs a group's jobs in `sharedTransaction`.
    func runOne(_ taken: TakenJob, slot: RunningJobs.Slot, threadID: String,
                metricHandles: inout [String: RuntimeMetrics.JobHandles],
                sharedTransaction: SharedTransaction? = nil) -> (result: RunResult, metrics: RunMetrics)? {
        let job = taken.job
        let payload = taken.payload
        let execution = Execution(job: job, payload: payload, threadID: threadID, startedAt: Clock.now(),
                                  timeout: runner.timeout(for: payload))
        slot.set(execution)
        let metricClass = payload.map { runner.registry.options(for: $0.className) == nil ? "_unregistered" : $0.className }
            ?? "_unreadable"
        let handles = metrics.job(className: metricClass, queue: job.queue, cache: &metricHandles)
        recordPickup(payload, startedAt: execution.startedAt, handles: handles)
        let result = runner.run(job, payload: taken.parsed, execution: execution, sharedTransaction: sharedTransaction)
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
        return (result, runMetrics)
    }
}
