import Foundation
import Queue
import Synchronization

/// One run of one job on one pool thread.
///
/// `state` decides, exactly once, who settles the job: the pool thread when the run returns
/// (`finish`), or the watchdog / shutdown when the run took too long (`abandon`). Whoever loses
/// the race does nothing, so a job is never settled twice.
final class Execution: Sendable {
    let job: FetchedJob
    let threadID: String
    let startedAt: Double
    let deadline: Double
    let cancellation = CancellationFlag()
    /// The raw payload as text for the process's workers hash (what `Sidekiq::Workers` shows).
    var payloadText: String { String(decoding: job.raw, as: UTF8.self) }
    let payload: JobPayload?
    private let state = Atomic<Int>(0)  // 0 running, 1 finished, 2 abandoned

    init(job: FetchedJob, payload: JobPayload?, threadID: String, startedAt: Double, timeout: Double) {
        self.job = job
        self.payload = payload
        self.threadID = threadID
        self.startedAt = startedAt
        self.deadline = startedAt + timeout
    }

    /// The pool thread's claim when the run returns. False if the run was abandoned meanwhile.
    func finish() -> Bool { state.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged }

    /// The watchdog's (or shutdown's) claim on a run that overran. False if it finished first.
    func abandon() -> Bool {
        let won = state.compareExchange(expected: 0, desired: 2, ordering: .acquiringAndReleasing).exchanged
        if won { cancellation.cancel() }
        return won
    }
}

/// The executions in progress, one slot per pool thread.
///
/// Each pool thread gets its slot once (`slot(for:)`, under the registry lock) and then sets and
/// clears its own execution through the slot's lock, which only the heartbeat, the watchdog and
/// shutdown ever contend for — so the hot path takes no lock shared between pool threads.
final class RunningJobs: Sendable {
    final class Slot: Sendable {
        fileprivate let current = Mutex<Execution?>(nil)
        /// Every job this thread took from the buffer since its last blocking take: listed by the buffer under its
        /// own lock as the job leaves it (`JobBuffer.take(holdingIn:)`, `tryTake(holdingIn:)`), and replaced only at
        /// the thread's next blocking take, by which time each of them has its settlement queued (or was given
        /// back). So from the buffer to the settlement queue a job is always in one of the places a reconciliation
        /// reads (`Fetcher.knownInFlight`) — parsing it, running, finished in a group awaiting its COMMIT, or carried
        /// out of one included.
        fileprivate let held = Mutex<[FetchedJob]>([])

        func set(_ execution: Execution) { current.withLock { $0 = execution } }

        /// Called by `JobBuffer` before a thread waits for a job: it holds none.
        func releaseHeld() { held.withLock { $0.removeAll(keepingCapacity: true) } }

        /// Called by `JobBuffer` under its lock: `job` replaces what the thread held (a blocking take) or joins it.
        func hold(_ job: FetchedJob, replacing: Bool) {
            held.withLock { held in
                if replacing { held.removeAll(keepingCapacity: true) }
                held.append(job)
            }
        }

        /// Clears the slot if it still holds `execution`.
        func clear(_ execution: Execution) {
            current.withLock { if $0 === execution { $0 = nil } }
        }
    }

    private let slots = Mutex<[String: Slot]>([:])

    func slot(for threadID: String) -> Slot {
        slots.withLock { slots in
            if let slot = slots[threadID] { return slot }
            let slot = Slot()
            slots[threadID] = slot
            return slot
        }
    }

    /// Forgets a retired thread's slot.
    func retire(_ threadID: String) { _ = slots.withLock { $0.removeValue(forKey: threadID) } }

    func remove(_ execution: Execution) { slot(for: execution.threadID).clear(execution) }

    var all: [Execution] {
        slots.withLock { Array($0.values) }.compactMap { slot in slot.current.withLock { $0 } }
    }

    var count: Int { all.count }

    /// Jobs the pool threads took from the buffer and may not have settled yet (`Slot.held`), on every thread.
    var held: [FetchedJob] {
        slots.withLock { Array($0.values) }.flatMap { slot in slot.held.withLock { $0 } }
    }

}
