import Foundation
import Logging
import WorkersQueue
import CoreMetrics

/// The housekeeper: moves due jobs from `retry` and `schedule` to their queues (about every
/// `pollInterval`, jittered), and, holding a short fleet-wide lease (`orphanSweepLock`), takes back
/// the in-flight jobs of processes whose fetcher heartbeat expired and prunes the process set.
///
/// Thread rules: owns the `housekeeper` thread and its Redis connection; shares nothing with the
/// other threads but the outage log and the metrics. Every call it makes is idempotent, so a call
/// repeated after a lost reply does no harm.
final class Housekeeper: Sendable {
    private let identity: String
    private let configuration: WorkerConfiguration
    private let endpoint: RedisEndpoint
    private let metrics: RuntimeMetrics
    private let outages: OutageLog
    private let logger: Logger
    private let thread: RuntimeThread
    private let shard: Int
    /// The map this process uses, checked against the shard at every sweep interval (`ShardMapCheck`).
    private let shardMap: ShardMap
    /// While this shard's Redis is full the orphan sweep waits (its lease is a `SET`, refused at `maxmemory`; the
    /// jobs of a dead process stay in its in-flight list meanwhile); moving due jobs goes on (it frees as it pushes).
    private let room: RedisRoom

    /// `shard`: index in `parts.shardMap` of the shard it keeps (0 with one Redis). Each
    /// shard has its own housekeeper: its `schedule`/`retry` hold only its queues' jobs, and its
    /// in-flight lists and fetcher heartbeats are there too.
    init(_ parts: RuntimeParts, shard: Int = 0) {
        thread = RuntimeThread(name: shard == 0 ? "housekeeper" : "housekeeper-\(shard)")
        self.shard = shard
        shardMap = parts.shardMap
        identity = parts.identity
        configuration = parts.configuration
        endpoint = parts.shardMap.shards[shard].endpoint
        metrics = parts.metrics
        outages = parts.outages
        logger = parts.logger
        room = parts.room
    }

    func start() { thread.start { [self] in loop() } }
    func requestStop() { thread.requestStop() }
    func wait() { thread.wait() }
    /// Waits at most `timeout` seconds for the thread to return; true if it did.
    func wait(timeout: Double) -> Bool { thread.wait(timeout: timeout) }

    /// Rounds until stopped: a poll or a sweep when one is due; after a failed round, the reconnect backoff
    /// (`ReconnectBackoff`), which no due poll or sweep cuts short.
    private func loop() {
        var link = RedisLink(endpoint: endpoint)
        var backoff = ReconnectBackoff()
        var nextPoll = Date(timeIntervalSinceNow: Double.random(in: 0...min(1, configuration.pollInterval.inSeconds)))
        var nextSweep = Date()
        while !thread.shouldStop {
            let wake = min(nextPoll, nextSweep)
            if Date() < wake {
                Thread.sleep(forTimeInterval: min(0.1, wake.timeIntervalSinceNow))
                continue
            }
            do {
                try link.withRetryOnStaleLink { conn in try housekeeping(conn, nextPoll: &nextPoll, nextSweep: &nextSweep) }
                outages.succeeded("Redis")
                backoff.reset()
            } catch let error as RedisError where error.isOutOfMemory {
                room.noteRefused(shard: shard, error)
                nextSweep = Date(timeIntervalSinceNow: configuration.orphanSweepInterval.inSeconds)
            } catch {
                link.drop()
                outages.failed("Redis", error)
                backoff.wait { !thread.shouldStop }
            }
        }
    }

    private func housekeeping(_ conn: RedisConnection, nextPoll: inout Date, nextSweep: inout Date) throws {
        if Date() >= nextPoll {
            let moved = try ReliableQueue.moveDue(conn, from: Keys.retry)
                + ReliableQueue.moveDue(conn, from: Keys.schedule)
            if moved > 0 { logger.debug("moved due jobs to their queues", metadata: ["count": "\(moved)"]) }
            nextPoll = Date(timeIntervalSinceNow: configuration.pollInterval.inSeconds * Double.random(in: 0.5...1.5))
        }
        if Date() >= nextSweep, room.isFull(shard: shard) {
            nextSweep = Date(timeIntervalSinceNow: configuration.orphanSweepInterval.inSeconds)
        }
        if Date() >= nextSweep {
            try sweepOrphans(conn)
            try checkShardMap(conn)
            nextSweep = Date(timeIntervalSinceNow: configuration.orphanSweepInterval.inSeconds)
        }
    }

    /// Every sweep interval, whether or not this process holds the sweep lease: another map in use on this shard,
    /// or jobs stranded on it, log an alert (`shard_map_mismatch`) and set the gauge while they last.
    private func checkShardMap(_ connection: RedisConnection) throws {
        let finding = try ShardMapCheck.check(connection, map: shardMap, shard: shard,
                                              freshness: max(120, 4 * configuration.orphanSweepInterval.inSeconds))
        metrics.shardMapMismatch.record(finding.isEmpty ? 0 : 1)
        guard !finding.isEmpty else { return }
        logger.error("shard map mismatch: another map is in use on this shard, or jobs wait where this map sends no worker", metadata: [
            "alert": "shard_map_mismatch", "shard": "\(shardMap.shards[shard].name)", "map": "\(shardMap.digest)",
            "other_maps": "\(finding.otherMaps.joined(separator: ","))",
            "stranded": "\(finding.stranded.map { "\($0.queue)=\($0.jobs) (mapped to \($0.mappedTo))" }.joined(separator: ","))",
        ])
    }

    /// One process in the fleet sweeps per interval (a short lease), taking back the in-flight
    /// jobs of processes whose heartbeat expired and pruning dead entries from `processes`.
    private func sweepOrphans(_ connection: RedisConnection) throws {
        let lease = try connection.command("SET", Keys.orphanSweepLock, identity, "NX", "PX",
                                           max(1, Int(configuration.orphanSweepInterval.inSeconds * 1000) - 100))
        guard lease.string == "OK" else { return }
        let report = try ReliableQueue.recoverOrphans(connection, ownIdentity: identity,
                                                      interruptLimit: configuration.interruptLimit,
                                                      deadLimits: configuration.deadLimits)
        metrics.orphansRecovered.increment(by: report.requeued + report.killed)
        if !report.deadProcesses.isEmpty {
            logger.notice("recovered in-flight jobs of dead processes", metadata: [
                "processes": "\(report.deadProcesses.joined(separator: ","))",
                "requeued": "\(report.requeued)", "dead": "\(report.killed)"])
        }
        try ProcessRegistry.prune(connection)
        // The dead set by bytes, whoever added to it (Ruby Sidekiq, the API, our scripts).
        let trimmed = try ReliableQueue.trimDead(connection, maxBytes: configuration.deadLimits.maxBytes)
        if trimmed > 0 {
            logger.notice("dead set trimmed to its byte limit", metadata: [
                "removed": "\(trimmed)", "dead_max_bytes": "\(configuration.deadLimits.maxBytes)"])
        }
    }
}
