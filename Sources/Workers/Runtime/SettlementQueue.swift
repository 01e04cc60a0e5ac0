import Foundation
import Logging
import Queue

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
