import Foundation
import WorkersQueue

/// What one fetcher shares with its waiters (`Fetcher`, one queue served): the buffer slots their Redis calls in
/// flight may still fill, whether the queue was last seen caught up or paused, and the exclusion between those calls
/// and a reconciliation after a lost reply.
///
/// Thread rules: the fetcher thread and its waiter threads call every method; nothing else touches it. One lock
/// (`condition`); `reserve` and `handOver` take the buffer's lock inside it (never the other way round).
///
/// Invariants:
/// - Slots: jobs buffered + slots reserved ≤ the `limit` a caller passes, so however many connections wait, the buffer
///   never holds more than the fetcher's limit (`concurrency + allowedPrefetch()`). A caller reserves the slots of a
///   call before sending it and gives each back with the jobs that filled it (`handOver`) or unused (`release`).
/// - Reconciliation: a job a call moved into the in-flight list is, from before the call is sent until it is in the
///   buffer or the settlement queue (where `Fetcher.knownInFlight` sees it), covered by a reservation. `reconcile`
///   runs only once no slot is reserved, and no slot is granted while it runs, so it cannot take back a job whose
///   reply is still on its way to a waiter.
final class FetchGate: @unchecked Sendable {
    private let condition = NSCondition()
    private let buffer: JobBuffer
    private var reserved = 0
    private var reconciling = false
    private var reconciliationRequested = false
    private var caughtUp = false
    private var paused = false
    /// Threads waiting for a release (`reconcile`, `waitForRoom`): `handOver` wakes them only when there are any, so
    /// that the thousands of hand-overs a second of a busy worker wake no one.
    private var releaseWaiters = 0
    /// Waiters waiting in `waitUntilWaitingPays`: woken only when waiting starts to pay.
    private var idleWaiters = 0

    init(buffer: JobBuffer) { self.buffer = buffer }

    /// Reserves up to `wanted` slots such that buffered + reserved stays ≤ `limit`, keeping `keepFree` slots unreserved
    /// (a waiter keeps one for the fetcher). 0 while a reconciliation runs, or when there is no such room.
    func reserve(upTo wanted: Int, limit: Int, keepFree: Int = 0) -> Int {
        condition.lock()
        defer { condition.unlock() }
        if reconciling { return 0 }
        let room = min(buffer.capacity, limit) - buffer.count - reserved - keepFree
        let granted = max(0, min(wanted, room))
        reserved += granted
        return granted
    }

    /// Puts `jobs` into the buffer and gives back `slots` reserved slots, in one step (so a concurrent `reserve`
    /// counts them either as buffered or as reserved, never as neither). `slots` ≥ `jobs.count`.
    func handOver(_ jobs: [FetchedJob], releasing slots: Int) {
        condition.lock()
        if !jobs.isEmpty { buffer.put(jobs) }
        reserved -= slots
        precondition(reserved >= 0, "more slots released than reserved")
        if releaseWaiters > 0 { condition.broadcast() }
        condition.unlock()
    }

    /// Waits up to `timeout` seconds for room under `limit` that no reservation holds: on the buffer when it is what
    /// fills the limit (a pool thread taking a job wakes it), else for a release.
    func waitForRoom(limit: Int, timeout: Double) {
        condition.lock()
        let unreserved = min(buffer.capacity, limit) - reserved
        if unreserved > 0 {
            condition.unlock()
            buffer.waitForRoom(limit: unreserved, timeout: timeout)
            return
        }
        releaseWaiters += 1
        _ = condition.wait(until: Date(timeIntervalSinceNow: timeout))
        releaseWaiters -= 1
        condition.unlock()
    }

    /// Gives back reserved slots no job filled.
    func release(_ slots: Int) {
        guard slots > 0 else { return }
        handOver([], releasing: slots)
    }

    /// Whether a waiter should wait now: the queue was last seen caught up (a fetch brought fewer jobs than it
    /// asked for) and not paused. Set by the fetcher after each fetch; a waiter sets `paused` when it sees it.
    func noteFetch(caughtUp: Bool, paused: Bool) {
        condition.lock()
        let paidBefore = self.caughtUp && !self.paused
        self.caughtUp = caughtUp
        self.paused = paused
        if idleWaiters > 0, !paidBefore, caughtUp, !paused { condition.broadcast() }
        condition.unlock()
    }

    func notePaused() { noteFetch(caughtUp: false, paused: true) }

    /// Waits up to `timeout` seconds until waiting is worthwhile (caught up, not paused, no reconciliation);
    /// true if it is.
    func waitUntilWaitingPays(timeout: Double) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: timeout)
        idleWaiters += 1
        defer { idleWaiters -= 1 }
        while !caughtUp || paused || reconciling {
            if !condition.wait(until: deadline) { return caughtUp && !paused && !reconciling }
        }
        return true
    }

    /// Asks the fetcher to reconcile before its next fetch (a waiter's reply was lost).
    func requestReconciliation() {
        condition.lock()
        reconciliationRequested = true
        condition.unlock()
    }

    /// True once if a reconciliation was requested since the last call.
    func takeReconciliationRequest() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        defer { reconciliationRequested = false }
        return reconciliationRequested
    }

    /// Runs `body` once no slot is reserved; no slot is granted until it returns. The caller must hold none itself.
    func reconcile<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        condition.lock()
        reconciling = true
        releaseWaiters += 1
        while reserved > 0 { condition.wait() }
        releaseWaiters -= 1
        condition.unlock()
        defer {
            condition.lock()
            reconciling = false
            condition.broadcast()
            condition.unlock()
        }
        return try body()
    }
}
