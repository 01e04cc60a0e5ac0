import Foundation
import WorkersHTTP
import WorkersQueue
import Workers

/// Registers the Ads jobs: `PendingRewardJob`, `PendingRewardSweepJob`, `AdRevenueAggregationJob`, and the nightly
/// run's batch jobs `AdRevenueNightlyJob`, `AdRevenueDayCompleteJob`, `AdRevenueDayCheckJob` (AdRevenueDayBatch.swift).
///
/// `redis` is where the sweep enqueues (unique pushes through `JobClient`, whose locks say which
/// rewards have a live job); jobs get no Redis connection from the runtime. `now` is `PendingRewardJob`'s clock (its
/// retry horizon); tests move it.
public enum AdsJobs {
    package static func register(into registry: inout JobRegistry, configuration: AdsConfiguration, http: HTTPClient,
                                redis: RedisPool, shards: ShardPools? = nil,
                                now: @escaping @Sendable () -> Date = { Date() }) {
        // With several shards each enqueue goes to its queue's shard (docs/sharding.md).
        let client = shards.map { JobClient(shards: $0) } ?? JobClient(pool: redis)
        registry.register(PendingRewardJob(client: SubscriptionCreditsClient(http: http, configuration: configuration),
                                           configuration: configuration, now: now))
        registry.register(PendingRewardSweepJob(client: client, configuration: configuration))
        registry.register(AdRevenueAggregationJob(configuration: configuration))
        registry.register(AdRevenueNightlyJob(client: client))
        registry.register(AdRevenueDayCompleteJob())
        registry.register(AdRevenueDayCheckJob(redis: redis))
    }

    public static let classNames = [PendingRewardJob.className, PendingRewardSweepJob.className,
                                    AdRevenueAggregationJob.className, AdRevenueNightlyJob.className,
                                    AdRevenueDayCompleteJob.className, AdRevenueDayCheckJob.className]
}
