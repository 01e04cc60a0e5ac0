import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// `PendingRewardSweepJob` `[]` (periodic): enqueues a `PendingRewardJob` for every pending reward
/// older than the grace period that has no live job. Each push is a unique push
/// (`JobClient.enqueueUnique`, key = the reward id, docs/unique-jobs.md): the check and the push are one
/// script, so overlapping sweeps — and a live job queued, running or retrying — leave one job per
/// reward. Cost: one indexed query per batch and one script call per pending reward.
public struct PendingRewardSweepJob: Job {
    /// `args: []`.
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "PendingRewardSweepJob"
        public init() {}
    }
    public static let options = JobOptions(maxRetries: 3, backoff: .sidekiq, timeout: .seconds(600), usesLedger: false)

    let client: JobClient
    let configuration: AdsConfiguration

    public init(client: JobClient, configuration: AdsConfiguration) {
        self.client = client
        self.configuration = configuration
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let database = context.database else { throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database") }
        let enqueued = try sweep(pool: database.pool, isCancelled: { context.isCancelled })
        context.logger.info("pending rewards re-enqueued", metadata: ["jobs": "\(enqueued)"])
    }

    /// Walks the pending rewards in id order, batch by batch; returns how many jobs it enqueued.
    public func sweep(pool: PostgresPool, isCancelled: () -> Bool = { false }) throws -> Int {
        var after = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        var enqueued = 0
        while true {
            if isCancelled() { throw GeoAdsCancelled(job: Self.className) }
            let ids = try pool.withConnection { connection in
                try connection.query("""
                    SELECT id FROM pending_rewards
                    WHERE status = 'pending' AND created_at < now() - make_interval(secs => $1::int) AND id > $2::uuid
                    ORDER BY id LIMIT $3::int
                    """, [configuration.sweepGracePeriod, after, configuration.sweepBatchSize]).map { try $0.uuid("id") }
            }
            guard let last = ids.last else { break }
            after = last
            let policy = PendingRewardJob.uniquePolicy(seconds: Double(configuration.rewardMarkerTTL))
            for id in ids {
                let job = try NewJob(PendingRewardJob.Arguments(pendingRewardID: id), queue: configuration.rewardQueue)
                if case .enqueued = try client.enqueueUnique(job, policy: policy) { enqueued += 1 }
            }
            if ids.count < configuration.sweepBatchSize { break }
        }
        return enqueued
    }
}
