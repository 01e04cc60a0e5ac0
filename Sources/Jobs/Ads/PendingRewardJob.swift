import Foundation
import WorkersHTTP
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// `PendingRewardJob` `[{"pending_reward_id": "<uuid>"}]`: credits a reward the Ads Service
/// could not credit, through the Subscription Service, under the reward contract of docs/jobs-geo-ads.md.
///
/// - The request is the seed's, byte for byte in meaning (`SubscriptionCreditsClient`): the row's
///   `idempotency_key`, derived from the reward's identity (`ad_reward:<ad_request_id>`,
///   `campaign:<campaign_id>:<user_id>`; 0012_pending_reward_keys.sql), sent as an sf-string — the key the Ads
///   Service's own first call used too, for the same user and the same body. So the user is credited once however
///   many times (from however many duplicate jobs, and after however lost an original call) it is sent.
/// - On success — a 2xx, a replay included — in one ledger transaction: the reward becomes
///   `credited` (from `pending`, or from `failed`: the service's answer is the truth, so a
///   credited user never keeps a `failed` row); for a campaign reward
///   `campaign_participations.reward_claimed = true, reward_claimed_at`; one "credits added"
///   notification (`dedup_key = 'reward:<id>'`, so a duplicate job writes none).
/// - Counted attempts (`attempts`): only answers about the request itself (`CreditOutcome.rejected`: 400, 422, …).
///   After the n-th the next waits `AdsConfiguration.attemptDelays[n-1]` (1 min, 10 min, 1 h, 6 h, 24 h).
///   Campaign rewards: after `max_attempts` (5) the reward is `failed` with an alert. Ad rewards have no count
///   limit ("retry until success").
/// - Not counted: 409 (the same key in flight: retried after Retry-After or 5 s), 429 (Retry-After or 30 s),
///   timeouts, 5xx, 401/403, 404/405 (10 s × 2ⁿ, at most 1 h, ±20 %).
/// - One time cap over all of them: no request is sent later than `ADS_REWARD_RETRY_HORIZON_SECONDS` (72 h) after
///   the reward's `created_at`, which ends an hour or more before the key lifetime the contract promises (7 days);
///   a retry that would fall after it fails the reward now, with the alert.
/// - A missing, credited or failed reward is a no-op.
/// - A unique job per reward (docs/unique-jobs.md): its lock `unique:<digest of the reward id>` says "a
///   job for this reward is live" (queued, scheduled, running or waiting in `retry`); the sweep pushes
///   through it and the runtime releases it when the job succeeds or dies.
///
/// Time (`now`) is injected: the horizon and `next_attempt_at` are reckoned from it (tests move it).
public struct PendingRewardJob: Job {
    /// The time cap (`retryHorizon`), not the count, ends the retries: 100 000 is more than 72 h of 409s every
    /// 5 s. The backoff is the delay after a failure that does not count (10 s × 2ⁿ, at most 1 h, ±20 %); every
    /// retry is a `JobError.retryAfter` with the delay this job chose. Unique per reward.
    public static let options: JobOptions = {
        var options = JobOptions(maxRetries: 100_000, backoff: .exponential(base: .seconds(10), cap: .seconds(3600), jitter: 0.2),
                                 timeout: .seconds(120), usesLedger: true)
        options.unique = uniquePolicy(seconds: 7200)
        return options
    }()

    /// One live job per reward: the key is the lower-cased `pending_reward_id`. `seconds` is only the
    /// lock's safety-net TTL (the sweep passes `ADS_REWARD_MARKER_TTL_SECONDS`).
    public static func uniquePolicy(seconds: Double) -> UniquePolicy {
        UniquePolicy(for: Bounded.duration(seconds: seconds), until: .success, arguments: Arguments.self) { $0.pendingRewardID.uuidString.lowercased() }
    }

    /// `[{"pending_reward_id": "<uuid>"}]` (a value that is not a UUID: `JobError.badInput`, dead at once).
    public struct Arguments: JobArguments, Equatable {
        public static let className = "PendingRewardJob"
        public let pendingRewardID: UUID
        public init(pendingRewardID: UUID) { self.pendingRewardID = pendingRewardID }
        enum CodingKeys: String, CodingKey { case pending_reward_id }
        public init(from decoder: any Decoder) throws {
            let text = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .pending_reward_id)
            pendingRewardID = try ArgumentUUID.parse(text, field: "pending_reward_id")
        }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeUUID(pendingRewardID, forKey: .pending_reward_id)
        }
    }

    let client: SubscriptionCreditsClient
    let configuration: AdsConfiguration
    let now: @Sendable () -> Date

    public init(client: SubscriptionCreditsClient, configuration: AdsConfiguration,
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.client = client
        self.configuration = configuration
        self.now = now
    }

    struct Reward {
        let id: UUID
        let userID: UUID
        let amount: Int
        let source: String
        let reference: String
        let campaignID: UUID?
        let status: String
        let maxAttempts: Int?
        let idempotencyKey: String
        let createdAt: Date
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let id = arguments.pendingRewardID
        guard let reward = try context.withConnection({ try Self.load(id, $0) }) else {
            context.logger.info("pending reward no longer exists; nothing to credit")
            return
        }
        guard reward.status == "pending" else {
            context.logger.info("reward already settled", metadata: ["status": "\(reward.status)"])
            return
        }
        let deadline = reward.createdAt.addingTimeInterval(configuration.retryHorizon)
        guard now() < deadline else {
            try fail(reward, reason: "not credited within the retry horizon (\(Self.hours(configuration.retryHorizon)) after "
                        + "the reward was recorded); the idempotency key expires after that", context: context)
            return
        }
        let body = SubscriptionCreditsClient.EarnRequest(
            amount: reward.amount, source: reward.source == "campaign" ? .promo : .adReward, reference: reward.reference)
        let cancellation = context.cancellation
        let outcome = client.earn(body, userID: reward.userID.uuidString.lowercased(), idempotencyKey: reward.idempotencyKey,
                                  cancellation: HTTPCancellation(isCancelled: { cancellation.isCancelled }))
        let attempt = Attempt(reward: reward, deadline: deadline)
        switch outcome {
        case .credited(let replayed):
            try settleCredited(reward, context: context)
            context.logger.info("reward credited", metadata: ["replayed": "\(replayed)", "source": "\(reward.source)"])
        case .unsendable(let why):
            try fail(reward, reason: "the request cannot be sent: \(why)", context: context)
        case .rejected(let status, let why):
            try retryLater(attempt, reason: "Subscription Service rejected the credit (HTTP \(status)): \(why)",
                           delay: nil, counts: true, context: context)
        case .inFlight(let after):
            try retryLater(attempt, reason: "a request with the same idempotency key is in flight (HTTP 409)",
                           delay: after ?? configuration.inFlightRetrySeconds, counts: false, context: context)
        case .rateLimited(let after):
            try retryLater(attempt, reason: "Subscription Service answered 429", delay: after ?? 30, counts: false,
                           context: context)
        case .transient(let why):
            let count = context.payload.retryCount.map { $0 + 1 } ?? 0
            try retryLater(attempt, reason: why, delay: Self.options.backoff.delay(retryCount: count).inSeconds, counts: false,
                           context: context)
        }
    }

    /// One send of a reward and the horizon its retries must stay within (`created_at` + `retryHorizon`).
    struct Attempt {
        let reward: Reward
        let deadline: Date
    }

    /// Records the credit the service confirmed. A `failed` row becomes `credited` too (another job
    /// may have given up on it while this one's request was being applied): the Subscription
    /// Service's answer is what happened to the user.
    func settleCredited(_ reward: Reward, context: JobContext) throws {
        try context.transaction { connection in
            // Erasure stays erased (ErasedUser); a reward row that arrived after the erasure goes as the erasure's would.
            if try ErasedUser.skips(reward.userID, on: connection, context) { try connection.execute("DELETE FROM pending_rewards WHERE id = $1", [reward.id]); return }
            try connection.execute("""
                UPDATE pending_rewards SET status = 'credited', credited_at = now(), attempts = attempts + 1,
                       last_error = NULL, next_attempt_at = NULL, updated_at = now()
                WHERE id = $1 AND status IN ('pending', 'failed')
                """, [reward.id])
            if reward.source == "campaign", let campaign = reward.campaignID {
                try connection.execute("""
                    UPDATE campaign_participations SET reward_claimed = true,
                           reward_claimed_at = coalesce(reward_claimed_at, now())
                    WHERE campaign_id = $1 AND user_id = $2
                    """, [campaign, reward.userID])
            }
            let data = "{\"pending_reward_id\":\"\(reward.id.uuidString.lowercased())\",\"amount\":\(reward.amount),\"source\":\"\(reward.source)\"}"
            try connection.execute("""
                INSERT INTO notifications (user_id, type, title, body, data, dedup_key)
                VALUES ($1, 'credits_added', 'Credits added', $2, $3::jsonb, $4)
                ON CONFLICT (dedup_key) DO NOTHING
                """, [reward.userID, reward.amount == 1 ? "1 credit was added to your account." :
                        "\(reward.amount) credits were added to your account.",
                      data, "reward:\(reward.id.uuidString.lowercased())"])
        }
    }

    /// Records why the credit is not applied yet, and retries by throwing `JobError.retryAfter`. An answer about
    /// the request (`counts`) grows `attempts`; a campaign reward out of attempts becomes `failed` (alert), and the
    /// next counted attempt waits `attemptDelays` (`delay` nil). No retry is scheduled past the horizon less
    /// `lastAttemptMargin`: when none fits, the reward becomes `failed` now (alert).
    func retryLater(_ attempt: Attempt, reason: String, delay: Double?, counts: Bool, context: JobContext) throws {
        let reward = attempt.reward
        let attempts = try context.withConnection { connection in
            try connection.queryFirst("""
                UPDATE pending_rewards SET attempts = attempts + $3::int, last_error = $2, updated_at = now()
                WHERE id = $1 AND status = 'pending' RETURNING attempts
                """, [reward.id, String(reason.prefix(500)), counts ? 1 : 0])
                .map { try $0.int("attempts") }
        }
        guard let attempts else { return }  // settled meanwhile by another job
        let limit = reward.maxAttempts ?? (reward.source == "campaign" ? configuration.campaignMaxAttempts : nil)
        if counts, let limit, attempts >= limit {
            try fail(reward, reason: "gave up after \(attempts) attempts: \(reason)", context: context)
            return
        }
        let wanted = delay ?? configuration.delayAfter(countedAttempts: attempts)
        let latest = attempt.deadline.timeIntervalSince(now()) - AdsConfiguration.lastAttemptMargin
        guard latest >= 1 else {
            try fail(reward, reason: "retry horizon reached (\(Self.hours(configuration.retryHorizon)) after the reward was "
                        + "recorded; the idempotency key expires after that): \(reason)", context: context)
            return
        }
        let wait = min(wanted, latest)
        let due = now().addingTimeInterval(wait)
        try context.withConnection { connection in
            _ = try connection.execute("""
                UPDATE pending_rewards SET next_attempt_at = $2 WHERE id = $1 AND status = 'pending'
                """, [reward.id, due])
        }
        throw JobError.retryAfter(Bounded.duration(seconds: wait), reason: "credit not applied yet (\(attempts) counted attempts): \(reason)")
    }

    static func hours(_ seconds: Double) -> String {
        seconds.truncatingRemainder(dividingBy: 3600) == 0 ? "\(Int(seconds / 3600)) h" : "\(Int(seconds)) s"
    }

    func fail(_ reward: Reward, reason: String, context: JobContext) throws {
        try context.transaction { connection in
            try connection.execute("""
                UPDATE pending_rewards SET status = 'failed', last_error = $2, next_attempt_at = NULL, updated_at = now()
                WHERE id = $1 AND status = 'pending'
                """, [reward.id, String(reason.prefix(500))])
        }
        // The alert: an operator must look at this reward (the user was promised credits).
        context.logger.error("ALERT pending reward failed", metadata: [
            "alert": "pending_reward_failed", "pending_reward_id": "\(reward.id.uuidString.lowercased())",
            "source": "\(reward.source)", "reason": "\(reason)",
        ])
    }

    static func load(_ id: UUID, _ connection: PostgresConnection) throws -> Reward? {
        guard let row = try connection.queryFirst("""
            SELECT id, user_id, amount, source, reference, campaign_id, status, max_attempts, idempotency_key, created_at
            FROM pending_rewards WHERE id = $1
            """, [id]) else { return nil }
        return Reward(id: try row.uuid("id"), userID: try row.uuid("user_id"), amount: try row.int("amount"),
                      source: try row.string("source"), reference: try row.string("reference"),
                      campaignID: try row.optionalUUID("campaign_id"), status: try row.string("status"),
                      maxAttempts: try row.optionalInt("max_attempts"), idempotencyKey: try row.string("idempotency_key"),
                      createdAt: try row.date("created_at"))
    }
}
