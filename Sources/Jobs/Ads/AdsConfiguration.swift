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
    /// Attempts of a campaign reward when its row does not say (`max_attempts` NULL). Only answers about the
    /// request itself (a 4xx such as 400 or 422) count; outages (timeouts, 5xx, 429, 401/403) do not.
    public var campaignMaxAttempts: Int
    /// Seconds before the next attempt after the n-th counted attempt failed (the last value repeats): the
    /// attempts of a reward are spread over hours, so a deploy or an incident of the Subscription Service that
    /// answers 4xx for a while does not use them up in minutes. Default 1 min, 10 min, 1 h, 6 h, 24 h.
    public var attemptDelays: [Double]
    /// Every request for a reward is sent within this many seconds of the reward's `created_at` (the Ads
    /// Service's own first call failed just before): afterwards the reward becomes `failed` with an alert,
    /// whatever failed (counted or not). Must stay below `keyLifetime` by `keyLifetimeMargin`: a key the
    /// Subscription Service has forgotten would credit a second time (draft-ietf-httpapi-idempotency-key-header,
    /// "Idempotency Key Validity and Expiry"). Default 72 h.
    public var retryHorizon: Double
    /// The idempotency key lifetime the Subscription Service publishes and keeps (docs/jobs-geo-ads.md, "The
    /// reward contract"): at least this many seconds after its first use a key is still remembered. Default 7 days.
    public var keyLifetime: Double
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
    /// 1 min, 10 min, 1 h, 6 h, 24 h.
    public static let defaultAttemptDelays: [Double] = [60, 600, 3600, 21_600, 86_400]
    /// `retryHorizon` + this ≤ `keyLifetime`: room for the time between the Ads Service's first call and the
    /// row's `created_at`, the last request's own duration and clock skew between us and the service.
    public static let keyLifetimeMargin: Double = 3600
    /// No retry is scheduled later than this before the horizon: the last request is sent, and answered or
    /// timed out, before it (the retry poller may deliver a few seconds late).
    public static let lastAttemptMargin: Double = 60

    public init(subscriptionServiceURL: String = AdsConfiguration.defaultSubscriptionServiceURL,
                subscriptionAPIKey: String? = nil, requestTimeout: Double = 10, rewardQueue: String = "default",
                campaignMaxAttempts: Int = 5, attemptDelays: [Double] = AdsConfiguration.defaultAttemptDelays,
                retryHorizon: Double = 259_200, keyLifetime: Double = 604_800, inFlightRetrySeconds: Double = 5, rewardMarkerTTL: Int = 7200, sweepGracePeriod: Int = 300,
                sweepBatchSize: Int = 500, retentionYears: Int = 2, purgeBatchSize: Int = 10_000,
                revenueEstimateDays: Int = 7) {
        self.subscriptionServiceURL = subscriptionServiceURL
        self.subscriptionAPIKey = subscriptionAPIKey
        self.requestTimeout = requestTimeout
        self.rewardQueue = rewardQueue
        self.campaignMaxAttempts = campaignMaxAttempts
        self.attemptDelays = attemptDelays.isEmpty ? AdsConfiguration.defaultAttemptDelays : attemptDelays
        self.retryHorizon = retryHorizon
        self.keyLifetime = keyLifetime
        self.inFlightRetrySeconds = inFlightRetrySeconds
        self.rewardMarkerTTL = rewardMarkerTTL
        self.sweepGracePeriod = sweepGracePeriod
        self.sweepBatchSize = sweepBatchSize
        self.retentionYears = retentionYears
        self.purgeBatchSize = purgeBatchSize
        self.revenueEstimateDays = revenueEstimateDays
    }

    /// The delay before the attempt after `counted` counted attempts failed (`attemptDelays`, the last repeating).
    public func delayAfter(countedAttempts counted: Int) -> Double {
        attemptDelays[min(max(counted, 1), attemptDelays.count) - 1]
    }

    /// Refuses a retry horizon that does not end `keyLifetimeMargin` before the keys' lifetime: a retry after the
    /// Subscription Service forgot the key would credit again.
    public func validate() throws(GeoAdsConfigurationError) {
        guard retryHorizon + Self.keyLifetimeMargin <= keyLifetime else {
            throw GeoAdsConfigurationError(
                variable: "ADS_REWARD_RETRY_HORIZON_SECONDS",
                reason: "must end at least \(Int(Self.keyLifetimeMargin)) s before the idempotency key lifetime "
                    + "(ADS_SUBSCRIPTION_KEY_LIFETIME_SECONDS = \(Int(keyLifetime))): a retry after the key expired credits twice")
        }
        guard retryHorizon > Self.lastAttemptMargin else {
            throw GeoAdsConfigurationError(variable: "ADS_REWARD_RETRY_HORIZON_SECONDS",
                                           reason: "must be longer than \(Int(Self.lastAttemptMargin)) s")
        }
    }

    /// Every variable is optional; see docs/jobs-geo-ads.md.
    public static func fromEnvironment(_ environment: [String: String]) throws -> AdsConfiguration {
        let env = GeoAdsEnvironment(environment)
        let queue = env.string("ADS_REWARD_QUEUE", default: "default")
        guard !queue.isEmpty, queue.allSatisfy({ $0.isLetter || $0.isNumber || "-_.:".contains($0) }) else {
            throw GeoAdsConfigurationError(variable: "ADS_REWARD_QUEUE", reason: "not a valid queue name")
        }
        var delays = defaultAttemptDelays
        if let text = env.string("ADS_REWARD_ATTEMPT_DELAYS_SECONDS") {
            let parsed = text.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard !parsed.isEmpty, parsed.allSatisfy({ $0 != nil && $0!.isFinite && (1...86_400).contains($0!) }) else {
                throw GeoAdsConfigurationError(variable: "ADS_REWARD_ATTEMPT_DELAYS_SECONDS",
                                               reason: "expected comma-separated seconds within 1...86400, got '\(text)'")
            }
            delays = parsed.map { $0! }
        }
        let configuration = AdsConfiguration(
            subscriptionServiceURL: try env.url("ADS_SUBSCRIPTION_SERVICE_URL", default: defaultSubscriptionServiceURL),
            subscriptionAPIKey: try env.secret("ADS_SUBSCRIPTION_API_KEY"),
            requestTimeout: try env.double("ADS_REQUEST_TIMEOUT_SECONDS", default: 10, range: 0.1...120),
            rewardQueue: queue,
            campaignMaxAttempts: try env.int("ADS_CAMPAIGN_MAX_ATTEMPTS", default: 5, range: 1...100),
            attemptDelays: delays,
            retryHorizon: try env.double("ADS_REWARD_RETRY_HORIZON_SECONDS", default: 259_200, range: 600...31_536_000),
            keyLifetime: try env.double("ADS_SUBSCRIPTION_KEY_LIFETIME_SECONDS", default: 604_800, range: 3600...31_536_000),
            inFlightRetrySeconds: try env.double("ADS_IN_FLIGHT_RETRY_SECONDS", default: 5, range: 0.1...3600),
            rewardMarkerTTL: try env.int("ADS_REWARD_MARKER_TTL_SECONDS", default: 7200, range: 60...604_800),
            sweepGracePeriod: try env.int("ADS_SWEEP_GRACE_SECONDS", default: 300, range: 0...86_400),
            sweepBatchSize: try env.int("ADS_SWEEP_BATCH_SIZE", default: 500, range: 1...10_000),
            retentionYears: try env.int("ADS_RETENTION_YEARS", default: 2, range: 1...20),
            purgeBatchSize: try env.int("ADS_PURGE_BATCH_SIZE", default: 10_000, range: 1...1_000_000),
            revenueEstimateDays: try env.int("ADS_REVENUE_ESTIMATE_DAYS", default: 7, range: 1...90))
        try configuration.validate()
        return configuration
    }
}
