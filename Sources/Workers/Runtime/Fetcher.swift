import Foundation
import Logging
import Queue

/// The fetcher: moves jobs from the queues into this process's in-flight lists
/// (`ReliableQueue.fetch`, one script call per batch) and hands them to the pool through `buffer`.
///
/// Thread rules: owns the `fetcher` thread and its Redis connections — the one it fetches on, and a second one for
/// the unique check of jobs that arrive while the first waits in `BLMOVE` (only that thread touches them). Shares
/// only the hand-offs: puts into `buffer`; reads `buffer`, `running` and `settlements` to reconcile after a lost
/// reply; gives jobs back through `settlements` when quiet arrives mid-fetch (or when a wait took a job from a queue
/// found paused), and hands duplicates of live unique jobs to it as drops (`UniqueGate`, on one of this thread's
/// connections); reads the pool's `runTime` estimate to size its prefetch.
///
/// Invariants: the buffer never holds more than `concurrency + allowedPrefetch()` jobs; no fetch starts while
/// `settleBacklog` or more settlements wait for the settler (so finished jobs cannot pile up). A fetch whose
/// reply was lost (the script may have moved jobs) is followed by a reconciliation before the next
/// fetch, which puts back every in-flight job this process does not hold in memory.
final class Fetcher: Sendable {
    private let identity: String
    private let configuration: WorkerConfiguration
    private let endpoint: RedisEndpoint
    private let buffer: JobBuffer
    private let running: RunningJobs
    private let settlements: SettlementQueue
    private let runTime: RunTimeEstimate
    private let outages: OutageLog
    /// Drops duplicates of live unique jobs before they reach the buffer (docs/unique-jobs.md).
    private let unique: UniqueGate
    private let logger: Logger
    /// The shard this fetcher reads (index in the process's `ShardMap`; 0 with one Redis) and the
    /// process's queues that live there, in configured order. Every job it fetches carries `shard`.
    private let shard: Int
    private let queues: [QueueWeight]
    private let thread: RuntimeThread

    init(identity: String, configuration: WorkerConfiguration, shard: Int = 0, queues: [QueueWeight]? = nil,
         endpoint: RedisEndpoint, buffer: JobBuffer,
         running: RunningJobs, settlements: SettlementQueue, runTime: RunTimeEstimate, outages: OutageLog,
         unique: UniqueGate, logger: Logger) {
        self.identity = identity
        self.configuration = configuration
        self.endpoint = endpoint
        self.buffer = buffer
        self.running = running
        self.settlements = settlements
        self.runTime = runTime
        self.outages = outages
        self.unique = unique
        self.logger = logger
        self.shard = shard
        self.queues = queues ?? configuration.queues
        thread = RuntimeThread(name: shard == 0 ? "fetcher" : "fetcher-\(shard)")
    }

    func start() { thread.start { [self] in loop() } }

    /// Stops fetching and waits for the thread: a fetch in flight completes and, if it brought
    /// jobs, gives them back. Called by the life cycle when the process goes quiet.
    func stopAndWait() { thread.stopAndWait() }

    private func loop() {
        var link = RedisLink(endpoint: endpoint)
        /// For the unique-job check of jobs a `fetchThenWait` brought while `link` still waits in `BLMOVE`.
        var checkLink = RedisLink(endpoint: endpoint)
        var backoff = ReconnectBackoff()
        /// Set when the single queue was last seen paused: the plain fetch, with the paused check before any wait, is
        /// used until it is seen unpaused (so a paused queue has no job taken and given back on every pass).
        var pausedSeen = false
        var idleWait = 0.001
        /// Set when a fetch failed: its reply may have been lost after Redis moved jobs.
        var mustReconcile = false
        let names = queues.map(\.name)
        let single = names.count == 1 ? names[0] : nil
        while !thread.shouldStop {
            if settlements.unwrittenCount >= configuration.settleBacklog {
                // The settler is behind: more jobs now would only wait, finished, in memory and in flight.
                settlements.waitUntilBelow(configuration.settleBacklog, timeout: 0.1)
                continue
            }
            let limit = configuration.concurrency + allowedPrefetch()
            let room = min(buffer.freeSlots, limit - (buffer.capacity - buffer.freeSlots))
            if room <= 0 {
                buffer.waitForRoom(limit: limit, timeout: 0.1)
                continue
            }
            do throws(RedisError) {
                let conn = try link.connected()
                if mustReconcile {
                    let reclaimed = try ReliableQueue.reclaimUnknown(conn, identity: identity, queues: names,
                                                                    known: knownInFlight)
                    if reclaimed > 0 { logger.notice("put back jobs a lost fetch reply had left in flight", metadata: ["count": "\(reclaimed)"]) }
                    mustReconcile = false
                }
                if let single, !pausedSeen, room >= 2 {
                    // One round trip: the fetch, the paused check and a wait for the next job, whose jobs go to the
                    // pool as soon as the fetch's reply is read (docs/architecture.md, "A job's bytes", step 2).
                    var checkFailure: RedisError?
                    let (waited, paused) = try ReliableQueue.fetchThenWait(
                        conn, identity: identity, queue: single, limit: min(room - 1, configuration.fetchBatch),
                        timeout: configuration.blockingFetchTimeout) { jobs in
                        guard !jobs.isEmpty else { return }
                        do throws(RedisError) { try deliver(jobs, checkingOn: checkLink.connected()) } catch { checkFailure = error }
                    }
                    if let checkFailure { throw checkFailure }
                    outages.succeeded("Redis")
                    backoff.reset()
                    pausedSeen = paused
                    if let waited {
                        // Taken from a paused queue (the wait was sent before the answer was known): it goes back.
                        if paused { settlements.giveBack([waited], logger: logger) } else { try deliver([waited], checkingOn: conn) }
                    }
                    continue
                }
                var jobs = try ReliableQueue.fetch(conn, identity: identity, queues: queueOrder(),
                                                   limit: min(room, configuration.fetchBatch))
                if jobs.isEmpty, let single {
                    if try conn.command("SISMEMBER", Keys.paused, single).integer != 0 {
                        pausedSeen = true
                        Thread.sleep(forTimeInterval: 0.05)  // paused: look again shortly
                    } else if pausedSeen {
                        pausedSeen = false  // unpaused: the next pass fetches and waits in one round trip
                    } else if let job = try ReliableQueue.fetchBlocking(conn, identity: identity, queue: single,
                                                                        timeout: configuration.blockingFetchTimeout) {
                        jobs = [job]
                    }
                    // A blocking wait that timed out loops straight into the next fetch: no sleep, during which a
                    // job pushed meanwhile would wait up to 50 ms.
                }
                outages.succeeded("Redis")
                backoff.reset()
                if jobs.isEmpty {
                    if single == nil {
                        Thread.sleep(forTimeInterval: idleWait)
                        idleWait = min(idleWait * 2, configuration.idlePollMax)
                    }
                    continue
                }
                idleWait = 0.001
                try deliver(jobs, checkingOn: conn)
            } catch {
                mustReconcile = true
                let wasConnected = link.isOpen
                link.drop()
                checkLink.drop()
                // A link that broke while idle (e.g. Redis restarted) is not an outage: reconnect at once.
                if wasConnected, error.isConnectionFailure, (try? link.connected()) != nil {
                    continue
                }
                outages.failed("Redis", error)
                backoff.wait { !thread.shouldStop }
            }
        }
    }

    /// Hands fetched jobs to the pool: duplicates of live unique jobs are dropped first (`UniqueGate`, a round trip on
    /// `connection` only when a job may be unique). Once quiet has arrived (a fetch was in flight) they go back to
    /// their queue untouched instead. Fetcher thread only.
    private func deliver(_ fetched: [FetchedJob],
                         checkingOn connection: @autoclosure () throws(RedisError) -> RedisConnection) throws(RedisError) {
        var jobs = fetched
        if shard != 0 { for index in jobs.indices { jobs[index].shard = shard } }
        if thread.shouldStop {
            settlements.giveBack(jobs, logger: logger)
            return
        }
        let sorted = try unique.check(try connection(), jobs)
        for duplicate in sorted.duplicates {
            settlements.add(.init(job: duplicate.job, settlement: .drop, failed: false, processed: false))
            unique.reportDropped(jid: duplicate.jid, className: duplicate.className, queue: duplicate.job.queue,
                                 holder: duplicate.holder, logger: logger)
        }
        buffer.put(sorted.run)
    }

    /// How many jobs may wait for a thread now: enough to cover the fetch round trip for fast jobs,
    /// few for slow ones (expected wait of a buffered job ≤ `prefetchWait`).
    private func allowedPrefetch() -> Int {
        let average = max(1e-6, runTime.seconds)
        let allowed = Double(configuration.concurrency) * configuration.prefetchWait / average
        return Int(min(Double(configuration.prefetch), allowed))
    }

    /// Every raw job this process holds in memory, read downstream-last (buffer, then running,
    /// then unwritten settlements) so a job moving along the pipeline during the read is seen.
    private func knownInFlight() -> [[UInt8]] {
        buffer.snapshot() + running.all.map(\.job.raw) + running.awaitingCommit.map(\.raw) + settlements.snapshot()
    }

    /// Strict: the configured order. Weighted: a weighted random order, drawn per fetch.
    private func queueOrder() -> [String] {
        if configuration.strictOrder { return queues.map(\.name) }
        var pool = queues
        var order: [String] = []
        while !pool.isEmpty {
            let total = pool.reduce(0) { $0 + $1.weight }
            var pick = Int.random(in: 0..<total)
            let index = pool.firstIndex { entry in
                if pick < entry.weight { return true }
                pick -= entry.weight
                return false
            }!
            order.append(pool.remove(at: index).name)
        }
        return order
    }
}
