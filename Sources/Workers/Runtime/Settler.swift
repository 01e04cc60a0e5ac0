import Foundation
import Logging
import WorkersQueue
import Synchronization

/// The settler: writes settlements (ack, retry, dead, requeue) and the `stat:*` counters to Redis
/// in batches (`ReliableQueue.settle`: per batch, a transaction cutting the successes off the in-flight list's tail,
/// watching this process's fetcher heartbeat, and one script call for the rest).
///
/// Thread rules: owns the `settler` thread and its Redis connection (only that thread touches
/// them). Takes from `settlements`, which every other thread feeds. `processedCount` /
/// `failedCount` may be read from any thread.
///
/// Invariant: a job leaves this process's in-flight list only through this type (or another
/// process's orphan sweep once our heartbeat has expired). A batch that cannot be written is
/// retried with backoff, never dropped, so a crash at any point loses nothing. Past the shutdown
/// deadline (`LifeCycleFlags.isPastShutdownDeadline`) the settler stops retrying and returns,
/// leaving the unwritten settlements counted in `SettlementQueue.unwrittenCount`: their jobs are
/// still in the working list, and another process's orphan sweep takes them back.
final class Settler: Sendable {
    private let settlements: SettlementQueue
    private let flags: LifeCycleFlags
    /// One Redis per shard (index = `FetchedJob.shard`); one element with one Redis.
    private let endpoints: [RedisEndpoint]
    private let deadLimits: DeadSetLimits
    /// Optional `WAIT` after each batch; an unconfirmed batch stays written (it is on the master)
    /// and is reported once per episode as the dependency "Redis replica".
    private let replicaWait: ReplicaWait?
    private let outages: OutageLog
    private let thread = RuntimeThread(name: "settler")
    private let processedTotal = Atomic<Int>(0)
    private let failedTotal = Atomic<Int>(0)
    /// Whether each shard's Redis has room to grow (`RedisRoom`).
    private let room: RedisRoom

    /// One connection per shard of `parts.shardMap`; dead-set limits and the replica wait from the configuration.
    init(_ parts: RuntimeParts) {
        settlements = parts.settlements
        flags = parts.flags
        endpoints = parts.shardMap.shards.map(\.endpoint)
        precondition(!endpoints.isEmpty, "a settler needs at least one Redis")
        deadLimits = parts.configuration.deadLimits
        replicaWait = parts.configuration.replicaWait
        outages = parts.outages
        room = parts.room
    }

    /// Runs written so far (successes and failures), and failures, in this process.
    var processedCount: Int { processedTotal.load(ordering: .relaxed) }
    var failedCount: Int { failedTotal.load(ordering: .relaxed) }

    func start() { thread.start { [self] in loop() } }

    /// Stops once the queue is empty (call after `SettlementQueue.waitUntilDrained`), or at once
    /// if Redis cannot be written past the shutdown deadline, and waits.
    func stopAndWait() { thread.stopAndWait() }

    private func loop() {
        var links = endpoints.map { RedisLink(endpoint: $0) }
        var backoff = ReconnectBackoff()
        /// Counts of runs a full Redis settled without them, by shard: written once it has room (settler thread only).
        var uncounted = [RunTally](repeating: RunTally(), count: links.count)
        while true {
            let batch = settlements.takeBatch(limit: 1000, timeout: 0.05) { [room] in !room.isFull(shard: $0.job.shard) }
            for shard in uncounted.indices where !uncounted[shard].isEmpty && !room.isFull(shard: shard) {
                guard writeCounts(&uncounted[shard], on: &links[shard], shard: shard, backoff: &backoff) else { return }
            }
            if batch.isEmpty {
                if thread.shouldStop && settlements.heldCount == 0 { return }
                if thread.shouldStop && flags.isPastShutdownDeadline { return }
                continue
            }
            var held: [SettlementQueue.Item] = []
            if links.count == 1 {
                // One Redis: the whole batch in one `settle` (no grouping on the hot path).
                guard write(batch, on: &links[0], shard: 0, backoff: &backoff, held: &held, uncounted: &uncounted[0]) else { return }
            } else {
                // Each job settles on the shard it was fetched from (its in-flight list is there).
                // The batch counts as written only once every shard has its part.
                var byShard = [[SettlementQueue.Item]](repeating: [], count: links.count)
                for item in batch { byShard[item.job.shard].append(item) }
                for shard in byShard.indices where !byShard[shard].isEmpty {
                    guard write(byShard[shard], on: &links[shard], shard: shard, backoff: &backoff, held: &held,
                                uncounted: &uncounted[shard]) else { return }
                }
            }
            var processed = 0, failed = 0
            for item in batch {
                if item.counts.contains(.processed) { processed += 1 }
                if item.counts.contains(.failed) { failed += 1 }
            }
            for item in held {
                if item.counts.contains(.processed) { processed -= 1 }
                if item.counts.contains(.failed) { failed -= 1 }
            }
            processedTotal.wrappingAdd(processed, ordering: .relaxed)
            failedTotal.wrappingAdd(failed, ordering: .relaxed)
            settlements.markWritten(batch.count - held.count, held: held)
        }
    }

    /// Writes `items` on `link` (shard `shard`) in one `settle`, retrying with backoff until it succeeds. False
    /// when it gave up past the shutdown deadline (the items stay unwritten).
    ///
    /// While the shard's Redis is full (`RedisRoom`; a `-OOM` reply makes it so), only settlements that free memory
    /// are written, without their counts (added to `uncounted`); the others are appended to `held`, their jobs left
    /// in the in-flight list, for a later batch once the Redis has room (docs/redis-full.md).
    private func write(_ items: [SettlementQueue.Item], on link: inout RedisLink, shard: Int, backoff: inout ReconnectBackoff,
                       held: inout [SettlementQueue.Item], uncounted: inout RunTally) -> Bool {
        while true {
            let full = room.isFull(shard: shard)
            var writing: [(job: FetchedJob, settlement: Settlement, counts: RunCounts)] = []
            var holding: [SettlementQueue.Item] = []
            var tally = RunTally()
            if full {
                for item in items {
                    if ReliableQueue.freesMemory(item.job, item.settlement) {
                        writing.append((item.job, item.settlement, []))
                        tally.add(item.counts)
                    } else {
                        holding.append(item)
                    }
                }
            } else {
                writing = items.map { ($0.job, $0.settlement, $0.counts) }
            }
            do {
                _ = try link.withRetryOnStaleLink { conn in
                    try ReliableQueue.settle(conn, writing, deadLimits: deadLimits, redisHasRoom: !full)
                }
                outages.succeeded("Redis")
                backoff.reset()
                held += holding
                uncounted.processed += tally.processed
                uncounted.failed += tally.failed
                if !full, deadLimits.maxBytes > 0, writing.contains(where: { if case .dead = $0.settlement { true } else { false } }) {
                    // By bytes too (`DeadSetLimits.maxBytes`); a failure here is not the batch's: the next sweep trims.
                    _ = try? link.withRetryOnStaleLink { try ReliableQueue.trimDead($0, maxBytes: deadLimits.maxBytes) }
                }
                if let replicaWait { confirm(replicaWait, on: &link) }
                return true
            } catch let error as RedisError where error.isOutOfMemory && !full {
                // Nothing of it was written (a refused transaction, or the script's first write refused): again, full.
                room.noteRefused(shard: shard, error)
            } catch {
                link.drop()
                outages.failed("Redis", error)
                // Past the shutdown deadline: give up; this batch and the rest stay unwritten.
                if flags.isPastShutdownDeadline { return false }
                backoff.wait { !flags.isPastShutdownDeadline }
            }
        }
    }

    /// Adds the runs a full Redis settled without counting to the `stat:*` counters, now that it has room. Retried
    /// with backoff like a batch; false past the shutdown deadline (the counts are lost: they are statistics only).
    private func writeCounts(_ tally: inout RunTally, on link: inout RedisLink, shard: Int, backoff: inout ReconnectBackoff) -> Bool {
        while true {
            do {
                let counts = tally
                try link.withRetryOnStaleLink { conn in
                    try ReliableQueue.addCounters(conn, processed: counts.processed, failed: counts.failed)
                }
                tally = RunTally()
                return true
            } catch let error as RedisError where error.isOutOfMemory {
                room.noteRefused(shard: shard, error)
                return true  // kept for the next time the Redis has room
            } catch {
                link.drop()
                outages.failed("Redis", error)
                if flags.isPastShutdownDeadline { return false }
                backoff.wait { !flags.isPastShutdownDeadline }
            }
        }
    }

    /// `WAIT` after a written batch. Not retried: the batch is on the master either way; a failure
    /// (too few replicas, or the link broke) is logged once per episode and the link re-opened.
    private func confirm(_ replicaWait: ReplicaWait, on link: inout RedisLink) {
        do {
            let connection = try link.connected()
            try replicaWait.check(try connection.send(replicaWait.command), on: connection)
            outages.succeeded("Redis replica")
        } catch {
            link.drop()
            outages.failed("Redis replica", error)
        }
    }
}

/// Runs settled and not yet added to the `stat:*` counters (the settler's, while a Redis is full).
struct RunTally {
    var processed = 0
    var failed = 0
    var isEmpty: Bool { processed == 0 && failed == 0 }
    mutating func add(_ counts: RunCounts) {
        if counts.contains(.processed) { processed += 1 }
        if counts.contains(.failed) { failed += 1 }
    }
}
