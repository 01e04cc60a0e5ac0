import Foundation
import Logging
import WorkersQueue

// The hand-off from the pool threads (and the watchdog, the fetcher, shutdown) to the settler thread; the map of
// all hand-offs is in JobBuffer.swift.

/// Settlements waiting to be written to Redis in batches by the settler thread.
///
/// Thread rules: pool threads, the watchdog, the fetcher and shutdown `add`; only the settler
/// takes (`takeBatch`, `markWritten`); any thread may `snapshot` or `waitUntilDrained`. Invariant:
/// an item is counted `pending` from `add` until the settler has written it, so a drained queue
/// means Redis has every settlement.
final class SettlementQueue: @unchecked Sendable {
    /// A job and what its run came to (`RunResult.settled`): its settlement and the `stat:*` counters it moves.
    struct Item {
        let job: FetchedJob
        let settlement: Settlement
        /// `.processed` for a run that ended (bad input and failures count too, as in Sidekiq), with `.failed` for a
        /// failure; none for a job that did not run (given back, dropped as a duplicate, over a limit).
        let counts: RunCounts
    }

    private let condition = NSCondition()
    private var items: [Item] = []
    private var pending = 0
    /// The batch the settler took and has not yet marked written.
    private var writing: [Item] = []
    /// Settlements the settler holds until their Redis has room (docs/redis-full.md): still pending, their jobs
    /// still in the in-flight list (so in `snapshot`).
    private var held: [Item] = []

    func add(_ item: Item) {
        condition.lock()
        items.append(item)
        pending += 1
        condition.signal()
        condition.unlock()
    }

    /// Waits up to `timeout` for items, then takes at most `limit` of them, after the held ones `releasing` lets go
    /// (those whose Redis has room again), which come first, in their order.
    func takeBatch(limit: Int, timeout: Double, releasing: (Item) -> Bool = { _ in false }) -> [Item] {
        condition.lock()
        defer { condition.unlock() }
        var released: [Item] = []
        if !held.isEmpty {
            var kept: [Item] = []
            for item in held { if releasing(item) { released.append(item) } else { kept.append(item) } }
            held = kept
        }
        if items.isEmpty && released.isEmpty { _ = condition.wait(until: Date(timeIntervalSinceNow: timeout)) }
        let count = min(limit, items.count)
        let batch = released + items.prefix(count)
        items.removeFirst(count)
        writing = batch
        return batch
    }

    /// Marks taken items as written (so `waitUntilDrained` can return), and `held` of them as held: still
    /// pending, given again by `takeBatch` once `releasing` lets them go.
    func markWritten(_ count: Int, held newlyHeld: [Item] = []) {
        condition.lock()
        writing = []
        pending -= count
        held += newlyHeld
        condition.broadcast()
        condition.unlock()
    }

    /// Settlements held until their Redis has room.
    var heldCount: Int { condition.withLock { held.count } }

    /// The raw jobs of every settlement not yet written (queued, being written or held).
    func snapshot() -> [[UInt8]] {
        condition.lock()
        defer { condition.unlock() }
        return (writing + held + items).map(\.job.raw)
    }

    /// Puts fetched jobs that never started back at the front of their queues, unchanged (not a
    /// processed run).
    func giveBack(_ jobs: [FetchedJob], logger: Logger) {
        for job in jobs {
            add(.init(job: job, settlement: .requeue(payload: String(decoding: job.raw, as: UTF8.self)), counts: []))
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
