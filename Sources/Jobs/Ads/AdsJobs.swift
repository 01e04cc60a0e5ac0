import HTTP
import Queue
import Workers

/// Registers the Ads jobs: `PendingRewardJob`, `PendingRewardSweepJob`, `AdRevenueAggregationJob`, and the nightly
/// run's batch jobs `AdRevenueNightlyJob`, `AdRevenueDayCompleteJob`, `AdRevenueDayCheckJob` (AdRevenueDayBatch.swift).
///
/// `redis` is where the sweep enqueues (unique pushes through `JobClient`, whose locks say which
/// rewards have a live job); jobs get no Redis connection from the runtime.
public enum AdsJobs {
    public static func register(into registry: inout JobRegistry, configuration: AdsConfiguration, http: HTTPClient,
                                redis: RedisPool) {
        registry.register(PendingRewardJob(client: SubscriptionCreditsClient(http: http, configuration: configuration),
                                           configuration: configuration))
        registry.register(PendingRewardSweepJob(client: JobClient(pool: redis), configuration: configuration))
        registry.register(AdRevenueAggregationJob(configuration: configuration))
        registry.register(AdRevenueNightlyJob(client: JobClient(pool: redis)))
        registry.register(AdRevenueDayCompleteJob())
        registry.register(AdRevenueDayCheckJob(redis: redis))
    }

    public static let classNames = [PendingRewardJob.className, PendingRewardSweepJob.className,
                                    AdRevenueAggregationJob.className, AdRevenueNightlyJob.className,
                                    AdRevenueDayCompleteJob.className, AdRevenueDayCheckJob.className]
}
