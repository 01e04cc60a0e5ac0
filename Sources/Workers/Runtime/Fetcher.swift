import Foundation
import Logging
import WorkersQueue

/// The fetcher: moves jobs from the queues into this process's in-flight lists
/// (`ReliableQueue.fetch`, one script call per batch) and hands them to the pool through `buffer`. Each pass of its
/// loop makes one round trip, by mode (`FetchStep`, FetchStep.swift).
///
/// Thread rules: owns the `fetcher` thread and its Redis connections — the one it fetches on, and a second one for
/// the unique check of jobs that arrive while the first waits in `BLMOVE` (only that thread touches them) — and,
/// when one queue is served, `blockingWaiters` waiter threads (`fetcher-wait-N`), each with its own connection
/// (`waitLoop`). The fetcher and its waiters share `gate` (slots, caught-up/paused state, reconciliation). They share
/// with the rest only the hand-offs: put into `buffer`; the fetcher reads `buffer`, `running` and `settlements` to
/// reconcile after a lost reply; they give jobs back through `settlements` when quiet arrives mid-fetch (or when a
/// wait took a job from a queue found paused), and hand duplicates of live unique jobs to it as drops (`UniqueGate`,
/// on one of the calling thread's connections); they read the pool's `runTime` estimate to size the prefetch.
///
/// Invariants: the buffer never holds more than `concurrency + allowedPrefetch()` jobs (slots are reserved in `gate`
/// before a call is sent); no fetch or wait starts while `settleBacklog` or more settlements wait for the settler
/// (so finished jobs cannot pile up). A fetch or wait whose reply was lost (the script or `BLMOVE` may have moved
/// jobs) is followed by a reconciliation before the next fetch, once no wait is in flight, which puts back every
/// in-flight job this process does not hold in memory.
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
    /// Cancel marks: the fetch-time check of each batch while the shard has one (RunSteering.swift).
    private let steering: RunSteering
    private let logger: Logger
    /// The shard this fetcher reads (index in the process's `ShardMap`; 0 with one Redis) and the
    /// process's queues that live there, in configured order. Every job it fetches carries `shard`.
    private let shard: Int
    private let queues: [QueueWeight]
    private let thread: RuntimeThread
    /// Slots, caught-up state and reconciliation shared with the waiters.
    private let gate: FetchGate
    /// Waiter threads (`waitLoop`): `WorkerConfiguration.blockingWaiters` when one queue is served, else none.
    private let waiterCount: Int
    private let waitersDone = DispatchGroup()
    /// Whether this shard's Redis has room: while it is full, no blocking wait (`BLMOVE` is refused at `maxmemory`;
    /// the fetch script is not, docs/redis-full.md).
    private let room: RedisRoom

    /// `shard`: the index in `parts.shardMap` of the Redis it reads; `queues`: the process's queues there (all of
    /// them by default).
    init(_ parts: RuntimeParts, shard: Int = 0, queues: [QueueWeight]? = nil, unique: UniqueGate) {
        identity = parts.identity
        configuration = parts.configuration
        endpoint = parts.shardMap.shards[shard].endpoint
        buffer = parts.buffer
        running = parts.running
        settlements = parts.settlements
        runTime = parts.runTime
        outages = parts.outages
        self.unique = unique
        steering = parts.steering
        logger = parts.logger
        self.shard = shard
        self.queues = queues ?? configuration.queues
        thread = RuntimeThread(name: shard == 0 ? "fetcher" : "fetcher-\(shard)")
        gate = FetchGate(buffer: buffer)
        room = parts.room
        waiterCount = self.queues.count == 1 ? configuration.blockingWaiters : 0
    }

    func start() {
        thread.start { [self] in loop() }
        for index in 0..<waiterCount {
            RuntimeThread.spawn("\(thread.name)-wait-\(index + 1)", group: waitersDone) { [self] in waitLoop() }
        }
    }

    /// Stops fetching and waits for the thread and its waiters: a fetch or wait in flight completes and, if it
    /// brought jobs, gives them back. Called by the life cycle when the process goes quiet.
    func stopAndWait() {
        requestStop()
        waitUntilStopped()
    }

    /// Asks the fetcher and its waiters to stop (each notices between round trips); `waitUntilStopped` waits.
    func requestStop() { thread.requestStop() }

    func waitUntilStopped() {
        thread.wait()
        waitersDone.wait()
    }

    /// The fetcher thread: one pass at a time, each a fixed sequence — hold back while the settler is behind,
    /// reconcile after a lost reply, reserve slots, then one `FetchStep` — with the thread's mutable state in
    /// `LoopState`. A failed pass asks for a reconciliation and reconnects (`reconnect`).
    private func loop() {
        var state = LoopState(endpoint: endpoint)
        let names = queues.map(\.name)
        let single = names.count == 1 ? names[0] : nil
        while !thread.shouldStop {
            if waitWhileSettlerIsBehind() { continue }
            do throws(RedisError) {
                let conn = try state.link.connected()
                try reconcileIfAsked(conn, queues: names, state: &state)
                let limit = configuration.concurrency + allowedPrefetch()
                // The fetch's slots, and one for the wait that follows it when one queue is served.
                var held = gate.reserve(upTo: configuration.fetchBatch + (single == nil ? 0 : 1), limit: limit)
                if held == 0 {
                    gate.waitForRoom(limit: limit, timeout: 0.1)
                    continue
                }
                defer { gate.release(held) }
                switch FetchStep(single: single, pausedSeen: state.pausedSeen, held: held, redisFull: room.isFull(shard: shard)) {
                case .fetchThenWait(let queue): try fetchThenWait(conn, queue: queue, held: &held, state: &state)
                case .fetch: try fetch(conn, single: single, held: &held, state: &state)
                }
            } catch where error.isOutOfMemory {
                // A wait refused by a full Redis moved nothing; the link is fine. Fetch without waits from now on.
                room.noteRefused(shard: shard, error)
                state.mustReconcile = true
            } catch {
                state.mustReconcile = true
                state.checkLink.drop()
                reconnect(&state.link, after: error, backoff: &state.backoff)
            }
        }
    }

    /// The fetcher thread's state between passes (`loop`; only that thread touches it).
    private struct LoopState {
        var link: RedisLink
        /// For the unique-job check of jobs a `fetchThenWait` brought while `link` still waits in `BLMOVE`.
        var checkLink: RedisLink
        var backoff = ReconnectBackoff()
        /// Set when the single queue was last seen paused: the plain fetch, with the paused check before any wait, is
        /// used until it is seen unpaused (so a paused queue has no job taken and given back on every pass).
        var pausedSeen = false
        /// The pause after an empty fetch of several queues: 1 ms, doubling to `idlePollMax` while fetches stay empty.
        var idleWait = 0.001
        /// Set when a fetch failed: its reply may have been lost after Redis moved jobs.
        var mustReconcile = false

        init(endpoint: RedisEndpoint) {
            link = RedisLink(endpoint: endpoint)
            checkLink = RedisLink(endpoint: endpoint)
        }
    }

    /// Back-pressure: while `settleBacklog` or more settlements wait for the settler, waits (up to 0.1 s) for it to
    /// catch up and returns true — more jobs now would only wait, finished, in memory and in flight. Fetcher and
    /// waiter threads, before each fetch or wait.
    private func waitWhileSettlerIsBehind() -> Bool {
        guard settlements.unwrittenCount >= configuration.settleBacklog else { return false }
        settlements.waitUntilBelow(configuration.settleBacklog, timeout: 0.1)
        return true
    }

    /// After a lost reply (this thread's, or a waiter's through `gate`): puts back every in-flight job this process
    /// does not hold in memory, once no waiter has a wait in flight (`FetchGate`).
    private func reconcileIfAsked(_ conn: RedisConnection, queues names: [String],
                                  state: inout LoopState) throws(RedisError) {
        if gate.takeReconciliationRequest() { state.mustReconcile = true }
        guard state.mustReconcile else { return }
        // Once no waiter has a wait in flight (FetchGate): a job whose reply is still on its way is not "unknown".
        var unknown = try gate.reconcile { () throws(RedisError) in
            try ReliableQueue.unknownInFlight(conn, identity: identity, queues: names, known: knownInFlight)
        }
        if !unknown.isEmpty {
            for index in unknown.indices { unknown[index].shard = shard }
            logger.notice("putting back jobs a lost fetch reply had left in flight", metadata: ["count": "\(unknown.count)"])
            // Through the settler, the one writer of our list's tail (`ReliableQueue.acknowledge`).
            settlements.giveBack(unknown, logger: logger)
        }
        state.mustReconcile = false
    }

    /// `FetchStep.fetchThenWait`: one round trip — the fetch, the paused check and a wait for the next job, whose
    /// jobs go to the pool as soon as the fetch's reply is read (docs/architecture.md, "A job's bytes", step 2).
    /// `held` (≥ 2) drops by each hand-over's slots.
    private func fetchThenWait(_ conn: RedisConnection, queue single: String, held: inout Int,
                               state: inout LoopState) throws(RedisError) {
        var checkFailure: RedisError?
        let asked = held - 1
        var brought = 0
        let (waited, paused) = try ReliableQueue.fetchThenWait(
            conn, identity: identity, queue: single, limit: asked, limits: configuration.fetchLimits,
            timeout: configuration.blockingFetchTimeout.inSeconds) { reply in
            brought = reply.jobs.count + reply.buried.count
            logBuried(reply.buried)
            do throws(RedisError) {
                try deliver(reply.jobs, checkingOn: state.checkLink.connected(), releasing: asked)
                held -= asked
            } catch {
                checkFailure = error
            }
        }
        if let checkFailure { throw checkFailure }
        redisAnswered(&state.backoff)
        state.pausedSeen = paused
        // Waiters wait while this fetch found the queue drained; a full fetch means a backlog, which
        // batched fetches move at a fraction of the cost of one wait per job.
        gate.noteFetch(caughtUp: brought < asked, paused: paused)
        if let waited {
            // Taken from a paused queue (the wait was sent before the answer was known): it goes back.
            if paused {
                settlements.giveBack([waited], logger: logger)
            } else {
                try deliver([waited], checkingOn: conn, releasing: 1)
                held -= 1
            }
        }
    }

    /// `FetchStep.fetch`: one batched fetch of up to `held` jobs in `queueOrder()`. With one queue, a fetch that
    /// brought nothing goes on to the paused probe and, unless that ends the pass, a blocking fetch. With several,
    /// an empty fetch backs off (`idleWait`). `held` drops to 0 once the jobs are handed over.
    private func fetch(_ conn: RedisConnection, single: String?, held: inout Int,
                       state: inout LoopState) throws(RedisError) {
        let reply = try ReliableQueue.fetch(conn, identity: identity, queues: queueOrder(), limit: held,
                                            limits: configuration.fetchLimits)
        logBuried(reply.buried)
        var jobs = reply.jobs
        let full = room.isFull(shard: shard)
        // A fetch that only buried oversized payloads found the queue not empty: fetch again at once.
        if jobs.isEmpty, !reply.buried.isEmpty {
            redisAnswered(&state.backoff)
            return
        }
        if jobs.isEmpty, !full, let single, try !probePaused(conn, queue: single, state: &state) {
            if let job = try fetchBlocking(conn, queue: single) { jobs = [job] }
        }
        redisAnswered(&state.backoff)
        if jobs.isEmpty {
            if single == nil || full {
                Thread.sleep(forTimeInterval: state.idleWait)
                state.idleWait = min(state.idleWait * 2, configuration.idlePollMax.inSeconds)
            }
            return
        }
        state.idleWait = 0.001
        try deliver(jobs, checkingOn: conn, releasing: held)
        held = 0
    }

    /// The paused probe, after an empty fetch of the one queue served: true when it ends the pass — the queue is
    /// paused (noted in `gate`; look again shortly) or was just seen unpaused (the next pass fetches and waits in one
    /// round trip); false when a blocking fetch should follow.
    private func probePaused(_ conn: RedisConnection, queue single: String,
                             state: inout LoopState) throws(RedisError) -> Bool {
        if try conn.command("SISMEMBER", Keys.paused, single).integer != 0 {
            state.pausedSeen = true
            gate.notePaused()
            Thread.sleep(forTimeInterval: 0.05)  // paused: look again shortly
            return true
        }
        if state.pausedSeen {
            state.pausedSeen = false  // unpaused: the next pass fetches and waits in one round trip
            gate.noteFetch(caughtUp: false, paused: false)
            return true
        }
        return false
    }

    /// The blocking fetch (`BLMOVE`, up to `blockingFetchTimeout`) of the one queue served, after an empty fetch of an
    /// unpaused queue. A wait that timed out loops straight into the next fetch: no sleep, during which a job pushed
    /// meanwhile would wait up to 50 ms.
    private func fetchBlocking(_ conn: RedisConnection, queue single: String) throws(RedisError) -> FetchedJob? {
        try ReliableQueue.fetchBlocking(conn, identity: identity, queue: single, timeout: configuration.blockingFetchTimeout.inSeconds)
    }

    /// A waiter (one queue served, `WorkerConfiguration.blockingWaiters` of them): its own connection waits in
    /// `BLMOVE` whenever the fetcher found the queue drained, so that jobs pushed in the same Redis event-loop
    /// iteration as the one the fetcher's wait took (or while the fetcher's next round trip is on its way) are
    /// handed over in that iteration too, instead of waiting for the next fetch and its disk sync. A failure asks the
    /// fetcher to reconcile (`FetchGate`).
    private func waitLoop() {
        var link = RedisLink(endpoint: endpoint)
        var backoff = ReconnectBackoff()
        let queue = queues[0].name
        while !thread.shouldStop {
            guard gate.waitUntilWaitingPays(timeout: 0.1) else { continue }
            if waitWhileSettlerIsBehind() { continue }
            if room.isFull(shard: shard) {  // no waits on a full Redis: the fetcher fetches alone
                Thread.sleep(forTimeInterval: 0.1)
                continue
            }
            let limit = configuration.concurrency + allowedPrefetch()
            // The last free slot stays the fetcher's: waiters never leave it without room to fetch.
            var held = gate.reserve(upTo: 1, limit: limit, keepFree: 1)
            if held == 0 {
                gate.waitForRoom(limit: limit - 1, timeout: 0.1)
                continue
            }
            defer { gate.release(held) }
            do throws(RedisError) {
                let conn = try link.connected()
                let (job, paused) = try ReliableQueue.waitForJob(conn, identity: identity, queue: queue,
                                                                 timeout: configuration.blockingFetchTimeout.inSeconds)
                redisAnswered(&backoff)
                if paused { gate.notePaused() }
                guard let job else { continue }
                if paused {
                    settlements.giveBack([job], logger: logger)
                } else {
                    try deliver([job], checkingOn: conn, releasing: 1)
                    held = 0
                }
            } catch where error.isOutOfMemory {
                room.noteRefused(shard: shard, error)
                gate.release(held)
                held = 0
            } catch {
                // The wait's reply may be lost after BLMOVE moved a job: the fetcher reconciles once this slot is free
                // (released now, not after the backoff, so the fetcher is not held up by it).
                gate.requestReconciliation()
                gate.release(held)
                held = 0
                reconnect(&link, after: error, backoff: &backoff)
            }
        }
    }

    /// A round trip on this thread's link succeeded: ends a reported Redis outage and resets the back-off.
    private func redisAnswered(_ backoff: inout ReconnectBackoff) {
        outages.succeeded("Redis")
        backoff.reset()
    }

    /// After a failed round trip on `link` (fetcher and waiters): drops the link. A link that broke while idle or
    /// waiting (e.g. Redis restarted) is not an outage: it is reopened at once. Otherwise the outage is reported and
    /// the back-off waited out (cut short by a stop request).
    private func reconnect(_ link: inout RedisLink, after error: RedisError, backoff: inout ReconnectBackoff) {
        let wasConnected = link.isOpen
        link.drop()
        if wasConnected, error.isConnectionFailure, (try? link.connected()) != nil { return }
        outages.failed("Redis", error)
        backoff.wait { !thread.shouldStop }
    }

    /// Hands fetched jobs to the pool, giving back `slots` reserved slots (`FetchGate.handOver`): duplicates of live
    /// unique jobs are dropped first (`UniqueGate`, a round trip on `connection` only when a job may be unique). Once
    /// quiet has arrived (a fetch was in flight) they go back to their queue untouched instead. Fetcher and waiter
    /// threads; throws before handing anything over.
    private func deliver(_ fetched: [FetchedJob], checkingOn connection: @autoclosure () throws(RedisError) -> RedisConnection,
                         releasing slots: Int) throws(RedisError) {
        var jobs = fetched
        if shard != 0 { for index in jobs.indices { jobs[index].shard = shard } }
        // A payload over the size limit that a blocking wait brought (the fetch script buries its own; this check
        // stands behind it too): dead as a stub through the settler, never to the pool.
        let measured = OversizedWaits.split(jobs, limit: configuration.fetchMaxPayloadBytes)
        if !measured.buried.isEmpty {
            for (item, jid) in measured.buried {
                settlements.add(item)
                logBuried([BuriedPayload(queue: item.job.queue, jid: jid, bytes: Int64(item.job.raw.count))])
            }
            jobs = measured.run
        }
        if thread.shouldStop {
            settlements.giveBack(jobs, logger: logger)
            gate.release(slots)
            return
        }
        // While the shard has a live cancel mark: one ZMSCORE of the batch's jids (`RunSteering.markFetched`).
        try steering.markFetched(&jobs, shard: shard) { () throws(RedisError) in try connection() }
        let sorted = try unique.check(try connection(), jobs)
        for duplicate in sorted.duplicates {
            settlements.add(.init(job: duplicate.job, settlement: .drop, counts: []))
            unique.reportDropped(jid: duplicate.jid, className: duplicate.className, queue: duplicate.job.queue,
                                 holder: duplicate.holder, logger: logger)
        }
        gate.handOver(sorted.run, releasing: slots)
    }

    /// One line per payload buried for its size (the fetch script's, or `deliver`'s): queue, jid and size, never
    /// content.
    private func logBuried(_ buried: [BuriedPayload]) {
        for payload in buried {
            logger.warning("a payload over the fetch size limit went to dead without running", metadata: [
                "queue": "\(payload.queue)", "jid": "\(payload.jid)", "bytes": "\(payload.bytes)",
                "limit": "\(configuration.fetchMaxPayloadBytes)"])
        }
    }

    /// How many jobs may wait for a thread now: enough to cover the fetch round trip for fast jobs,
    /// few for slow ones (expected wait of a buffered job ≤ `prefetchWait`).
    private func allowedPrefetch() -> Int {
        let average = max(1e-6, runTime.seconds)
        let allowed = Double(configuration.concurrency) * configuration.prefetchWait.inSeconds / average
        return Int(min(Double(configuration.prefetch), allowed))
    }

    /// Every raw job this process holds in memory, read downstream-last (buffer, then what the pool threads hold,
    /// then unwritten settlements) so a job moving along the pipeline during the read is seen: each step lists a
    /// job in the next place before it leaves the previous one (`RunningJobs.Slot.held`).
    private func knownInFlight() -> [[UInt8]] {
        // A run the watchdog or shutdown abandoned is in `held` too until its settlement is queued: its thread's slot
        // outlives the thread's retirement until then (`RunningJobs.retire`, `remove`).
        buffer.snapshot() + running.held.map(\.raw) + settlements.snapshot()
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
