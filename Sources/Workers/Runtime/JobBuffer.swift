import Foundation
import WorkersQueue

// The hand-offs between the runtime's threads. Besides the running set (`RunningJobs`,
// Execution.swift) these are the only state the threads share:
//
//   fetcher --JobBuffer--> pool threads --SettlementQueue--> settler
//                              |                               ^
//                              +--RunningJobs--> watchdog -----+
//                                     |
//                                     +--> heartbeat (workers hash), fetcher (reconciliation)

/// Fetched jobs waiting for a pool thread. Bounded: the fetcher and its waiters reserve room first
/// (`FetchGate`) and never overfill. Any thread may call any method (guarded by one condition variable); in practice the
/// fetcher puts, pool threads take, and shutdown closes.
final class JobBuffer: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [FetchedJob] = []
    private var head = 0
    private var closed = false
    let capacity: Int
    private var idleThreads = 0
    /// Fetcher and waiter threads waiting in `waitForRoom`.
    private var roomWaiters = 0

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Slots the fetcher may fill now: free room, but never more than the threads that will be
    /// idle plus the prefetch allowance.
    var freeSlots: Int {
        condition.lock()
        defer { condition.unlock() }
        return capacity - (jobs.count - head)
    }

    /// Jobs waiting for a pool thread now.
    var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count - head
    }

    func put(_ new: [FetchedJob]) {
        condition.lock()
        jobs.append(contentsOf: new)
        // Wake only as many idle threads as there are new jobs (a broadcast would wake them all
        // to fight over a single job).
        if new.count >= idleThreads { condition.broadcast() } else { for _ in new { condition.signal() } }
        condition.unlock()
    }

    /// Waits for a job; nil once the buffer is closed and empty (the thread should exit). A pool thread passes its
    /// slot: the job joins what the slot holds, under this lock (`RunningJobs.Slot.held`).
    func take(holdingIn slot: RunningJobs.Slot? = nil) -> FetchedJob? {
        condition.lock()
        defer { condition.unlock() }
        while head == jobs.count && !closed {
            idleThreads += 1
            condition.wait()
            idleThreads -= 1
        }
        guard head < jobs.count else { return nil }
        let job = jobs[head]
        slot?.hold(job)
        head += 1
        if head > 1024 && head * 2 > jobs.count {
            jobs.removeFirst(head)
            head = 0
        }
        if roomWaiters > 0 { condition.broadcast() }
        return job
    }

    /// A job that is already waiting, or nil at once (also once closed). A pool thread passes its slot: the job
    /// joins what the slot holds, under this lock.
    func tryTake(holdingIn slot: RunningJobs.Slot? = nil) -> FetchedJob? {
        condition.lock()
        defer { condition.unlock() }
        guard head < jobs.count, !closed else { return nil }
        let job = jobs[head]
        slot?.hold(job)
        head += 1
        if roomWaiters > 0 { condition.broadcast() }
        return job
    }

    /// Waits until fewer than `limit` jobs are buffered, or `timeout` passes.
    func waitForRoom(limit: Int, timeout: Double) {
        condition.lock()
        defer { condition.unlock() }
        if jobs.count - head < limit { return }
        roomWaiters += 1
        _ = condition.wait(until: Date(timeIntervalSinceNow: timeout))
        roomWaiters -= 1
    }

    /// The raw jobs waiting in the buffer (for reconciliation).
    func snapshot() -> [[UInt8]] {
        condition.lock()
        defer { condition.unlock() }
        return jobs[head...].map(\.raw)
    }

    /// The jobs waiting in the buffer (for the heartbeats' cancel lookups, RunSteering.swift).
    func waiting() -> [FetchedJob] {
        condition.lock()
        defer { condition.unlock() }
        return Array(jobs[head...])
    }

    /// Stops handing out jobs and returns the ones nobody took.
    func close() -> [FetchedJob] {
        condition.lock()
        defer { condition.unlock() }
        closed = true
        let left = Array(jobs[head...])
        jobs.removeAll()
        head = 0
        condition.broadcast()
        return left
    }
}
