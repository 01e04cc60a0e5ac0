import Foundation

/// Settings of the Ads jobs (pending rewards, revenue aggregation). Immutable after start-up.
public struct AdsConfiguration: Sendable {
    /// Base URL of the Subscription Service (`/subscription/v1/credits/earn` is appended).
    public var subscriptionServiceURL: String
    /// Bearer token for the Subscription Service; nil sends no Authorization header.
    public var subscriptionAPIKey: String?
    /// Per-request timeout for the Subscription Service.
    public var requestTimeout: Double
    /// Queue the sweep enqueues `PendingRewardJob`s on.
    public var rewardQueue: String
    /// Attempts of a campaign reward when its row does not say (`max_attempts` NULL).
    public var campaignMaxAttempts: Int
    /// Delay before asking again when the service answered 409 (the same idempotency key in
    /// flight) without a Retry-After.
    public var inFlightRetrySeconds: Double
    /// `unique_for` of the sweep's `PendingRewardJob`s: the safety-net TTL of the per-reward unique
    /// lock ("a job is live", docs/unique-jobs.md). The lock is released when the job succeeds or dies
    /// and extended past each retry by this much, so only a lost job waits for it.
    public var rewardMarkerTTL: Int
    /// The sweep leaves rewards younger than this alone: the job the Ads Service enqueued with
    /// them has not necessarily been fetched (and taken its lock) yet.
    public var sweepGracePeriod: Int
    /// Rewards re-enqueued per sweep batch.
    public var sweepBatchSize: Int
    /// `ad_views` (and `ad_requests`) older than this many years are purged.
    public var retentionYears: Int
    /// Rows deleted per purge transaction.
    public var purgeBatchSize: Int
    /// Days before the aggregated day whose reported revenue per view (eCPM / 1000) estimates a
    /// group that has no reported revenue on the day itself.
    public var revenueEstimateDays: Int

    public static let defaultSubscriptionServiceURL = "http://subscription-service:8080"

    public init(subscriptionServiceURL: String = AdsConfiguration.defaultSubscriptionServiceURL,
                subscriptionAPIKey: String? = nil, requestTimeout: Double = 10, rewardQueue: String = "default",
                campaignMaxAttempts: Int = 5, inFlightRetrySeconds: Double = 5, rewardMarkerTTL: Int = 7200, sweepGracePeriod: Int = 300,
                sweepBatchSize: Int = 500, retentionYears: Int = 2, purgeBatchSize: Int = 10_000,
                revenueEstimateDays: Int = 7) {
        self.subscriptionServiceURL = subscriptionServiceURL
        self.subscriptionAPIKey = subscriptionAPIKey
        self.requestTimeout = requestTimeout
        self.rewardQueue = rewardQueue
        self.campaignMaxAttempts = campaignMaxAttempts
        self.inFlightRetrySeconds = inFlightRetrySeconds
        self.rewardMarkerTTL = rewardMarkerTTL
        self.sweepGracePeriod = sweepGracePeriod
        self.sweepBatchSize = sweepBatchSize
        self.retentionYears = retentionYears
        self.purgeBatchSize = purgeBatchSize
        self.revenueEstimateDays = revenueEstimateDays
    }

    /// Every variable is optional; see docs/jobs-geo-ads.md.
    public static func fromEnvironment(_ environment: [String: String]) throws -> AdsConfiguration {
        let env = GeoAdsEnvironment(environment)
        let queue = env.string("ADS_REWARD_QUEUE", default: "default")
        guard !queue.isEmpty, queue.allSatisfy({ $0.isLetter || $0.isNumber || "-_.:".contains($0) }) else {
            throw GeoAdsConfigurationError(variable: "ADS_REWARD_QUEUE", reason: "not a valid queue name")
        }
        return AdsConfiguration(
            subscriptionServiceURL: try env.url("ADS_SUBSCRIPTION_SERVICE_URL", default: defaultSubscriptionServiceURL),
            subscriptionAPIKey: try env.secret("ADS_SUBSCRIPTION_API_KEY"),
            requestTimeout: try env.double("ADS_REQUEST_TIMEOUT_SECONDS", default: 10, range: 0.1...120),
            rewardQueue: queue,
            campaignMaxAttempts: try env.int("ADS_CAMPAIGN_MAX_ATTEMPTS", default: 5, range: 1...100),
            inFlightRetrySeconds: try env.double("ADS_IN_FLIGHT_RETRY_SECONDS", default: 5, range: 0.1...3600),
            rewardMarkerTTL: try env.int("ADS_REWARD_MARKER_TTL_SECONDS", default: 7200, range: 60...604_800),
            sweepGracePeriod: try env.int("ADS_SWEEP_GRACE_SECONDS", default: 300, range: 0...86_400),
            sweepBatchSize: try env.int("ADS_SWEEP_BATCH_SIZE", default: 500, range: 1...10_000),
            retentionYears: try env.int("ADS_RETENTION_YEARS", default: 2, range: 1...20),
            purgeBatchSize: try env.int("ADS_PURGE_BATCH_SIZE", default: 10_000, range: 1...1_000_000),
            revenueEstimateDays: try env.int("ADS_REVENUE_ESTIMATE_DAYS", default: 7, range: 1...90))
    }
}
