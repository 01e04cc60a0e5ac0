import Foundation
import Logging
import Queue
import Storage
import Workers

/// `PendingRewardSweepJob` `[]` (periodic): enqueues a `PendingRewardJob` for every pending reward
/// older than the grace period that has no live job (no `RewardJobMarker`). The marker is claimed
/// with SET NX before the enqueue, so overlapping sweeps enqueue one job per reward; a failed
/// enqueue releases it. Cost: one indexed query per batch and one SET per pending reward.
public struct PendingRewardSweepJob: Job {
    public static let className = "PendingRewardSweepJob"
    public static let options = JobOptions(maxRetries: 3, backoff: .sidekiq, timeout: 600, usesLedger: false)

    let client: JobClient
    let marker: RewardJobMarker
    let configuration: AdsConfiguration

    public init(client: JobClient, marker: RewardJobMarker, configuration: AdsConfiguration) {
        self.client = client
        self.marker = marker
        self.configuration = configuration
    }

    public func perform(_ arguments: NoArguments, context: JobContext) throws {
        guard let database = context.database else { throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database") }
        let enqueued = try sweep(pool: database.pool, isCancelled: { context.isCancelled })
        context.logger.info("pending rewards re-enqueued", metadata: ["jobs": "\(enqueued)"])
    }

    /// Walks the pending rewards in id order, batch by batch; returns how many jobs it enqueued.
    public func sweep(pool: PostgresPool, isCancelled: () -> Bool = { false }) throws -> Int {
        var after = "00000000-0000-0000-0000-000000000000"
        var enqueued = 0
        while true {
            if isCancelled() { throw GeoAdsCancelled(job: Self.className) }
            let ids = try pool.withConnection { connection in
                try connection.query("""
                    SELECT id::text AS id FROM pending_rewards
                    WHERE status = 'pending' AND created_at < now() - make_interval(secs => $1::int) AND id > $2::uuid
                    ORDER BY id LIMIT $3::int
                    """, [configuration.sweepGracePeriod, after, configuration.sweepBatchSize]).map { try $0.string("id") }
            }
            guard let last = ids.last else { break }
            after = last
            var claimed: [String] = []
            for id in ids where try marker.claim(id, owner: "sweep") { claimed.append(id) }
            if !claimed.isEmpty {
                let jobs = claimed.map {
                    NewJob(PendingRewardJob.className, args: [.object(["pending_reward_id": .string($0)])],
                           queue: configuration.rewardQueue)
                }
                do {
                    _ = try client.enqueueMany(jobs)
                } catch {
                    for id in claimed { try? marker.clear(id) }
                    throw error
                }
                enqueued += claimed.count
            }
            if ids.count < configuration.sweepBatchSize { break }
        }
        return enqueued
    }
}
