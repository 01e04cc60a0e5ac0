import Foundation
import WorkersQueue
import Synchronization

/// One run of one job on one pool thread, or in one task of `AsyncRuns` (`isTask`).
///
/// `state` decides, exactly once, who settles the job: the pool thread when the run returns
/// (`finish`), or the watchdog / shutdown when the run took too long (`abandon`). Whoever loses
/// the race does nothing, so a job is never settled twice.
final class Execution: Sendable {
    let job: FetchedJob
    /// The pool thread's id, or the task's (`AsyncRuns`: "task-…"): its `RunningJobs` slot.
    let threadID: String
    /// True for an async job's run (a task of `AsyncRuns`): the watchdog does not replace a thread for it.
    let isTask: Bool
    let startedAt: Double
    let deadline: Double
    let cancellation = CancellationFlag()
    /// The raw payload as text for the process's workers hash (what `Sidekiq::Workers` shows).
    var payloadText: String { String(decoding: job.raw, as: UTF8.self) }
    let payload: JobPayload?
    private let state = Atomic<State>(.running)

    /// Who has claimed the run: nobody yet (`running`), the pool thread (`finished`) or the watchdog / shutdown
    /// (`abandoned`). Leaves `running` once, by one compare-and-exchange. Raw values: the `Atomic`'s storage.
    enum State: Int, AtomicRepresentable {
        case running = 0
        case finished = 1
        case abandoned = 2
    }

    init(job: FetchedJob, payload: JobPayload?, threadID: String, startedAt: Double, timeout: Double, isTask: Bool = false) {
        self.job = job
        self.payload = payload
        self.threadID = threadID
        self.isTask = isTask
        self.startedAt = startedAt
        self.deadline = startedAt + timeout
    }

    /// True once the watchdog or shutdown won `abandon()`.
    var isAbandoned: Bool { state.load(ordering: .acquiring) == .abandoned }

    /// The pool thread's claim when the run returns. False if the run was abandoned meanwhile.
    func finish() -> Bool {
        state.compareExchange(expected: .running, desired: .finished, ordering: .acquiringAndReleasing).exchanged
    }

    /// The watchdog's (or shutdown's) claim on a run that overran. False if it finished first.
    func abandon() -> Bool {
        let won = state.compareExchange(expected: .running, desired: .abandoned,
                                        ordering: .acquiringAndReleasing).exchanged
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
        /// Exactly the jobs this thread took from the buffer and whose settlement is not queued yet: listed by the
        /// buffer under its own lock as the job leaves it (`JobBuffer.take(holdingIn:)`, `tryTake(holdingIn:)`), and
        /// dropped only after its settlement (or give-back) is queued — by the pool thread (`JobPool`), or by the
        /// watchdog or shutdown when they settle an abandoned run (`RunningJobs.remove`). So from the buffer to the
        /// settlement queue a job is always in one of the places a reconciliation reads (`Fetcher.knownInFlight`) —
        /// parsing it, running, finished in a group awaiting its COMMIT, or carried out of one included — and a
        /// settled job is never listed here (it would keep a reconciliation from putting back a job whose
        /// acknowledgement a failover lost).
        fileprivate let held = Mutex<[FetchedJob]>([])
        /// Set (under the registry lock) when the thread retired while the watchdog or shutdown still had its
        /// abandoned run to settle: the slot is forgotten once they have (`RunningJobs.remove`).
        fileprivate let retired = Atomic<Bool>(false)

        func set(_ execution: Execution) { current.withLock { $0 = execution } }

        /// Called by `JobBuffer` under its lock as `job` leaves it for this thread.
        func hold(_ job: FetchedJob) { held.withLock { $0.append(job) } }

        /// Called once `job`'s settlement is queued: the thread no longer holds it. (Equal payloads are the same job
        /// to a reconciliation, so the first equal entry goes; the same array's bytes compare in one step.)
        func release(_ job: FetchedJob) {
            held.withLock { held in
                if let index = held.firstIndex(where: { $0.raw == job.raw }) { held.remove(at: index) }
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

    /// Forgets a retired thread's slot — once nothing is left in it: a thread retires after the watchdog (or
    /// shutdown) won its run's `abandon()`, possibly before they queued that run's settlement, and until then the
    /// slot is where a reconciliation sees the job (`remove` forgets the slot after it).
    func retire(_ threadID: String) {
        slots.withLock { slots in
            guard let slot = slots[threadID] else { return }
            if slot.current.withLock({ $0 == nil }) {
                slots.removeValue(forKey: threadID)
            } else {
                slot.retired.store(true, ordering: .relaxed)
            }
        }
    }

    /// Called by the watchdog or shutdown after queuing the settlement of `execution`, a run whose `abandon()` they
    /// won: clears it from its slot and drops its job from the slot's held list (forgetting the slot if its thread
    /// has retired meanwhile).
    func remove(_ execution: Execution) {
        slots.withLock { slots in
            guard let slot = slots[execution.threadID] else { return }
            slot.clear(execution)
            slot.release(execution.job)
            if slot.retired.load(ordering: .relaxed) { slots.removeValue(forKey: execution.threadID) }
        }
    }

    var all: [Execution] {
        slots.withLock { Array($0.values) }.compactMap { slot in slot.current.withLock { $0 } }
    }

    var count: Int { all.count }

    /// Jobs the pool threads took from the buffer and whose settlement is not queued yet (`Slot.held`), on every thread.
    var held: [FetchedJob] {
        slots.withLock { Array($0.values) }.flatMap { slot in slot.held.withLock { $0 } }
    }
}
