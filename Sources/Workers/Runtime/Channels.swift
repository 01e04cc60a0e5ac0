import Foundation
import Logging
import Queue

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

/// Settlements waiting to be written to Redis in batches by the settler thread.
///
/// Thread rules: pool threads, the watchdog, the fetcher and shutdown `add`; only the settler
/// takes (`takeBatch`, `markWritten`); any thread may `snapshot` or `waitUntilDrained`. Invariant:
/// an item is counted `pending` from `add` until the settler has written it, so a drained queue
/// means Redis has every settlement.
final class SettlementQueue: @unchecked Sendable {
    struct Item {
        let job: FetchedJob
        let settlement: Settlement
        let failed: Bool
        /// Counts as a processed run (bad input and failures count too, as in Sidekiq).
        let processed: Bool
    }

    private let condition = NSCondition()
    private var items: [Item] = []
    private var pending = 0
    /// The batch the settler took and has not yet marked written.
    private var writing: [Item] = []

    func add(_ item: Item) {
        condition.lock()
        items.append(item)
        pending += 1
        condition.signal()
        condition.unlock()
    }

    /// Waits up to `timeout` for items, then takes at most `limit` of them.
    func takeBatch(limit: Int, timeout: Double) -> [Item] {
        condition.lock()
        defer { condition.unlock() }
        if items.isEmpty { _ = condition.wait(until: Date(timeIntervalSinceNow: timeout)) }
        let count = min(limit, items.count)
        let batch = Array(items.prefix(count))
        items.removeFirst(count)
        writing = batch
        return batch
    }

    /// Marks taken items as written (so `waitUntilDrained` can return).
    func markWritten(_ count: Int) {
        condition.lock()
        writing = []
        pending -= count
        condition.broadcast()
        condition.unlock()
    }

    /// The raw jobs of every settlement not yet written (queued or being written).
    func snapshot() -> [[UInt8]] {
        condition.lock()
        defer { condition.unlock() }
        return (writing + items).map(\.job.raw)
    }

    /// Puts fetched jobs that never started back at the front of their queues, unchanged (not a
    /// processed run).
    func giveBack(_ jobs: [FetchedJob], logger: Logger) {
        for job in jobs {
            add(.init(job: job, settlement: .requeue(payload: String(decoding: job.raw, as: UTF8.self)),
                      failed: false, processed: false))
        }
        if !jobs.isEmpty { logger.info("put back \(jobs.count) fetched jobs that had not started") }
    }

    /// Settlements added and not written (queued, or taken by a settler that gave up at the
    /// shutdown deadline). Their jobs are still in the working list.
    var unwrittenCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return pending
    }

    /// Waits until fewer than `limit` settlements are unwritten, or `timeout` passes (the fetcher's back-pressure:
    /// `WorkerConfiguration.settleBacklog`).
    func waitUntilBelow(_ limit: Int, timeout: Double) {
        condition.lock()
        defer { condition.unlock() }
        if pending < limit { return }
        _ = condition.wait(until: Date(timeIntervalSinceNow: timeout))
    }

    /// Waits until every added item has been written, or `timeout` passes. Returns true if drained.
    @discardableResult
    func waitUntilDrained(timeout: Double) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while pending > 0 {
            if !condition.wait(until: deadline) { return pending == 0 }
        }
        return true
    }
}
