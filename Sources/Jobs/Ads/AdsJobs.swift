import HTTP
import Queue
import Workers

/// Registers the Ads jobs: `PendingRewardJob`, `PendingRewardSweepJob`, `AdRevenueAggregationJob`, and the nightly
/// run's batch jobs `AdRevenueNightlyJob`, `AdRevenueDayCompleteJob`, `AdRevenueDayCheckJob` (AdRevenueDayBatch.swift).
///
/// `redis` holds the per-reward live-job markers and is where the sweep enqueues (through
/// `JobClient`); jobs get no Redis connection from the runtime.
public enum AdsJobs {
    public static func register(into registry: inout JobRegistry, configuration: AdsConfiguration, http: HTTPClient,
                                redis: RedisPool) {
        let marker = RewardJobMarker(redis: redis, ttl: configuration.rewardMarkerTTL)
        registry.register(PendingRewardJob(client: SubscriptionCreditsClient(http: http, configuration: configuration),
                                           marker: marker, configuration: configuration))
        registry.register(PendingRewardSweepJob(client: JobClient(pool: redis), marker: marker, configuration: configuration))
        registry.register(AdRevenueAggregationJob(configuration: configuration))
        registry.register(AdRevenueNightlyJob(client: JobClient(pool: redis)))
        registry.register(AdRevenueDayCompleteJob())
        registry.register(AdRevenueDayCheckJob(redis: redis))
    }

    public static let classNames = [PendingRewardJob.className, PendingRewardSweepJob.className,
                                    AdRevenueAggregationJob.className, AdRevenueNightlyJob.className,
                                    AdRevenueDayCompleteJob.className, AdRevenueDayCheckJob.className]
}
