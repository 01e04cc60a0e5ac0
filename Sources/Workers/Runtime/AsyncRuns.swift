import CoreMetrics
import Foundation
import WorkersQueue
import Synchronization

/// The in-flight places of async jobs (`AsyncJob`): at most `limit` (`WorkerConfiguration.asyncConcurrency`) runs,
/// each a Swift task, apart from the pool's threads. A pool thread that takes an async job asks for a place
/// (`acquire`, waiting while all are taken: the back-pressure that keeps the fetch bounded), starts the run's task
/// (`JobPool.startTask`) and goes back to the buffer; the task gives its place back when it ends (`release`) — not
/// when the watchdog times its run out or shutdown abandons it, which only cancel it: a task that ignores its
/// cancellation keeps its place until it returns.
///
/// Thread rules: `acquire` on pool threads; `release` at a task's end (any thread of the cooperative pool); `close`
/// by the life cycle (quiet, shutdown); the counts from any thread. One condition guards the counts.
final class AsyncRuns: @unchecked Sendable {
    let limit: Int
    private let condition = NSCondition()
    private var running = 0
    private var closed = false
    /// The most tasks in flight at once since the process started (tests, the bench).
    private var peak = 0
    private let serial = Atomic<Int>(0)
    private let outlived = Atomic<Int>(0)
    /// Tasks that ended after their run had been abandoned: their timeout passed (or a hard shutdown) while they
    /// ran, so they held their place past it.
    let outlivedTimeout = Counter(label: "workers_async_tasks_outlived_timeout_total")
    let inFlightGauge = Gauge(label: "workers_async_tasks_in_flight")

    init(limit: Int) { self.limit = max(1, limit) }

    /// Waits for a free place and takes it; false once closed (quiet or shutdown): the caller gives its job back.
    func acquire() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while running >= limit && !closed { condition.wait() }
        guard !closed else { return false }
        running += 1
        peak = max(peak, running)
        inFlightGauge.record(running)
        return true
    }

    /// A task ended: its place is free.
    func release() {
        condition.lock()
        running -= 1
        inFlightGauge.record(running)
        condition.signal()
        condition.unlock()
    }

    /// No more places are given (quiet, shutdown): every waiting `acquire` returns false. Running tasks go on.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// A task id for `RunningJobs` and the workers hash: "task-<n>" (base 36).
    func nextTaskID() -> String { "task-" + String(serial.wrappingAdd(1, ordering: .relaxed).newValue, radix: 36) }

    /// A task ended after its run was abandoned (timeout or hard shutdown).
    func noteOutlived() {
        outlived.wrappingAdd(1, ordering: .relaxed)
        outlivedTimeout.increment()
    }

    /// Tasks in flight now.
    var inFlight: Int { condition.withLock { running } }
    /// The most tasks in flight at once so far.
    var peakInFlight: Int { condition.withLock { peak } }
    /// Tasks that ended after their run was abandoned, so far (`outlivedTimeout`).
    var outlivedCount: Int { outlived.load(ordering: .relaxed) }
}

extension JobPool {
    /// Runs an async job in a task of `asyncRuns`: waits for a place (or gives the job back once the process is
    /// quieting), moves the job from the pool thread's slot to the task's own (`RunningJobs`, so a reconciliation,
    /// the heartbeat's workers hash and cancel lookups and the watchdog see it as any run), and starts the task. The
    /// task runs `JobRunner.runAsync` and settles through `settle(_:after:heldIn:)` — the pool threads' path — unless
    /// the watchdog or shutdown won `abandon()` first (they settled it); then it only counts itself as outlived.
    ///
    /// Invariant: the job is listed in a slot's `held` from its take until its settlement is queued (first the
    /// thread's, then the task's, which lists it before the thread drops it); the place is released only when the
    /// task's body has returned. Cancelling the run's `CancellationFlag` (timeout, shutdown, an operator's cancel)
    /// cancels the task.
    func startTask(_ taken: TakenJob, payload: JobPayload, heldIn slot: RunningJobs.Slot,
                   metricHandles: inout [String: RuntimeMetrics.JobHandles]) {
        guard asyncRuns.acquire() else {
            giveBack([taken.job], heldIn: slot)
            return
        }
        let taskID = asyncRuns.nextTaskID()
        let taskSlot = running.slot(for: taskID)
        taskSlot.hold(taken.job)
        slot.release(taken.job)
        let execution = Execution(job: taken.job, payload: payload, threadID: taskID, startedAt: Clock.now(),
                                  timeout: runner.timeout(for: payload), isTask: true)
        taskSlot.set(execution)
        let handles = metrics.job(className: payload.className, queue: taken.job.queue, cache: &metricHandles)
        recordPickup(payload, startedAt: execution.startedAt, handles: handles)
        tasksEnter()
        let task = Task { [self, runner, asyncRuns, running] in
            defer {
                running.retire(taskID)
                asyncRuns.release()
                tasksLeave()
            }
            let result = await runner.runAsync(taken.job, payload: payload, execution: execution)
            let seconds = Clock.now() - execution.startedAt
            runTimes.record(seconds: seconds)
            let runMetrics = RunMetrics(handles: handles, seconds: seconds)
            guard execution.finish() else {
                runMetrics.record(failed: true)  // the watchdog settled it as timed out (or shutdown put it back)
                asyncRuns.noteOutlived()
                return
            }
            taskSlot.clear(execution)
            settle(taken, after: (result, runMetrics), heldIn: taskSlot)
        }
        execution.cancellation.whenCancelled { task.cancel() }
    }
}
