import Foundation
import Logging
import Queue
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

    /// One connection per shard of `parts.shardMap`; dead-set limits and the replica wait from the configuration.
    init(_ parts: RuntimeParts) {
        settlements = parts.settlements
        flags = parts.flags
        endpoints = parts.shardMap.shards.map(\.endpoint)
        precondition(!endpoints.isEmpty, "a settler needs at least one Redis")
        deadLimits = parts.configuration.deadLimits
        replicaWait = parts.configuration.replicaWait
        outages = parts.outages
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
        while true {
            let batch = settlements.takeBatch(limit: 1000, timeout: 0.05)
            if batch.isEmpty {
                if thread.shouldStop { return }
                continue
            }
            let processed = batch.reduce(0) { $0 + ($1.counts.contains(.processed) ? 1 : 0) }
            let failed = batch.reduce(0) { $0 + ($1.counts.contains(.failed) ? 1 : 0) }
            if links.count == 1 {
                // One Redis: the whole batch in one `settle` (no grouping on the hot path).
                guard write(batch, on: &links[0], backoff: &backoff) else { return }
            } else {
                // Each job settles on the shard it was fetched from (its in-flight list is there).
                // The batch counts as written only once every shard has its part.
                var byShard = [[SettlementQueue.Item]](repeating: [], count: links.count)
                for item in batch { byShard[item.job.shard].append(item) }
                for shard in byShard.indices where !byShard[shard].isEmpty {
                    guard write(byShard[shard], on: &links[shard], backoff: &backoff) else { return }
                }
            }
            processedTotal.wrappingAdd(processed, ordering: .relaxed)
            failedTotal.wrappingAdd(failed, ordering: .relaxed)
            settlements.markWritten(batch.count)
        }
    }

    /// Writes `items` on `link` in one `settle`, retrying with backoff until it succeeds. False
    /// when it gave up past the shutdown deadline (the items stay unwritten).
    private func write(_ items: [SettlementQueue.Item], on link: inout RedisLink, backoff: inout ReconnectBackoff) -> Bool {
        while true {
            do {
                _ = try link.withRetryOnStaleLink { conn in
                    try ReliableQueue.settle(conn, items.map { ($0.job, $0.settlement, $0.counts) }, deadLimits: deadLimits)
                }
                outages.succeeded("Redis")
                backoff.reset()
                if let replicaWait { confirm(replicaWait, on: &link) }
                return true
            } catch {
                link.drop()
                outages.failed("Redis", error)
                // Past the shutdown deadline: give up; this batch and the rest stay unwritten.
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
