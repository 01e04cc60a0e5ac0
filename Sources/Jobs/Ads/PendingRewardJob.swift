import Foundation
import HTTP
import Logging
import Queue
import Storage
import Workers

/// `PendingRewardJob` `[{"pending_reward_id": "<uuid>"}]`: credits a reward the Ads Service
/// could not credit, through the Subscription Service.
///
/// - The request carries the row's `idempotency_key`, derived from the reward's identity
///   (`ad_reward:<ad_request_id>`, `campaign:<campaign_id>:<user_id>`; 0012_pending_reward_keys.sql),
///   the key the Ads Service's own first call used too. So the user is credited once however many
///   times (from however many duplicate jobs, and after however lost an original call) it is sent.
/// - On success — a 2xx, a replay included — in one ledger transaction: the reward becomes
///   `credited` (from `pending`, or from `failed`: the service's answer is the truth, so a
///   credited user never keeps a `failed` row); for a campaign reward
///   `campaign_participations.reward_claimed = true, reward_claimed_at`; one "credits added"
///   notification (`dedup_key = 'reward:<id>'`, so a duplicate job writes none).
/// - 409 (the same key is in flight elsewhere) is not a failure: the job retries later
///   (`JobError.retryAfter`) without counting an attempt.
/// - On failure `attempts` grows (in the row, so it counts across jobs and sweeps). Campaign
///   rewards: after `max_attempts` (5) the reward is `failed` and an alert is logged. Ad rewards
///   retry until success with capped exponential backoff (10 s doubling to 1 h). A request the
///   service rejects as invalid (4xx other than 401/403/408/409/429) fails the reward at once, with
///   an alert: repeating it cannot succeed.
/// - A missing, credited or failed reward is a no-op.
/// - A unique job per reward (docs/unique-jobs.md): its lock `unique:<digest of the reward id>` says "a
///   job for this reward is live" (queued, scheduled, running or waiting in `retry`); the sweep pushes
///   through it and the runtime releases it when the job succeeds or dies.
public struct PendingRewardJob: Job {
    public static let className = "PendingRewardJob"
    /// Effectively unlimited retries: ad rewards retry until success; campaign rewards stop
    /// themselves after their attempts. Capped backoff: 10 s × 2ⁿ, at most 1 h. Unique per reward.
    public static let options: JobOptions = {
        var options = JobOptions(maxRetries: 100_000, backoff: .exponential(base: 10, cap: 3600, jitter: 0.2),
                                 timeout: 120, usesLedger: true)
        options.unique = uniquePolicy(seconds: 7200)
        return options
    }()

    /// One live job per reward: the key is the lower-cased `pending_reward_id`. `seconds` is only the
    /// lock's safety-net TTL (the sweep passes `ADS_REWARD_MARKER_TTL_SECONDS`).
    public static func uniquePolicy(seconds: Double) -> UniquePolicy {
        UniquePolicy(for: seconds, until: .success) { args in
            args.first?.objectValue?["pending_reward_id"]?.stringValue?.lowercased() ?? ""
        }
    }

    public struct Args: Decodable, Sendable, ValidatedArguments {
        public let pending_reward_id: String
        public init(pending_reward_id: String) { self.pending_reward_id = pending_reward_id }
        public func validate() throws(JobError) {
            guard GeoAdsIdentifier.uuid(pending_reward_id) != nil else { throw .badInput("pending_reward_id must be a UUID") }
        }
    }

    let client: SubscriptionCreditsClient
    let configuration: AdsConfiguration

    public init(client: SubscriptionCreditsClient, configuration: AdsConfiguration) {
        self.client = client
        self.configuration = configuration
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
    }

    public func perform(_ arguments: SingleArgument<Args>, context: JobContext) throws {
        let id = GeoAdsIdentifier.uuid(arguments.value.pending_reward_id)!
        guard let reward = try context.withConnection({ try Self.load(id, $0) }) else {
            context.logger.info("pending reward no longer exists; nothing to credit")
            return
        }
        guard reward.status == "pending" else {
            context.logger.info("reward already settled", metadata: ["status": "\(reward.status)"])
            return
        }
        let body = SubscriptionCreditsClient.EarnRequest(
            user_id: reward.userID.uuidString.lowercased(), amount: reward.amount,
            source: reward.source == "campaign" ? .promo : .adReward, reference_id: reward.reference)
        let cancellation = context.cancellation
        let outcome = client.earn(body, idempotencyKey: reward.idempotencyKey,
                                  cancellation: HTTPCancellation(isCancelled: { cancellation.isCancelled }))
        switch outcome {
        case .credited(let replayed):
            try settleCredited(reward, context: context)
            context.logger.info("reward credited", metadata: ["replayed": "\(replayed)", "source": "\(reward.source)"])
        case .rejected(let status, let why):
            try fail(reward, reason: "Subscription Service rejected the credit (HTTP \(status)): \(why)", context: context)
        case .inFlight(let after):
            try retryLater(reward, reason: "a request with the same idempotency key is in flight (HTTP 409)",
                           retryAfter: after ?? configuration.inFlightRetrySeconds, countsAsAttempt: false, context: context)
        case .rateLimited(let after):
            try retryLater(reward, reason: "Subscription Service answered 429", retryAfter: after ?? 30, context: context)
        case .transient(let why):
            try retryLater(reward, reason: why, retryAfter: nil, context: context)
        }
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

    /// Records why the credit is not applied yet, and retries by throwing. A failed attempt
    /// (`countsAsAttempt`) grows `attempts`, and a campaign reward out of attempts becomes `failed`
    /// (alert); a request that merely found the same key in flight (409) counts nothing.
    func retryLater(_ reward: Reward, reason: String, retryAfter: Double?, countsAsAttempt: Bool = true,
                    context: JobContext) throws {
        let attempts = try context.withConnection { connection in
            try connection.queryFirst("""
                UPDATE pending_rewards SET attempts = attempts + $4::int, last_error = $2, updated_at = now(),
                       next_attempt_at = now() + make_interval(secs => $3::double precision)
                WHERE id = $1 AND status = 'pending' RETURNING attempts
                """, [reward.id, String(reason.prefix(500)), retryAfter ?? 10, countsAsAttempt ? 1 : 0])
                .map { try $0.int("attempts") }
        }
        guard let attempts else { return }  // settled meanwhile by another job
        let limit = reward.maxAttempts ?? (reward.source == "campaign" ? configuration.campaignMaxAttempts : nil)
        if countsAsAttempt, let limit, attempts >= limit {
            try fail(reward, reason: "gave up after \(attempts) attempts: \(reason)", context: context)
            return
        }
        if let retryAfter { throw JobError.retryAfter(seconds: retryAfter, reason: reason) }
        throw RewardCreditUnavailable(reason: reason, attempts: attempts)
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
            SELECT id, user_id, amount, source, reference, campaign_id, status, max_attempts, idempotency_key
            FROM pending_rewards WHERE id = $1
            """, [id]) else { return nil }
        return Reward(id: try row.uuid("id"), userID: try row.uuid("user_id"), amount: try row.int("amount"),
                      source: try row.string("source"), reference: try row.string("reference"),
                      campaignID: try row.optionalUUID("campaign_id"), status: try row.string("status"),
                      maxAttempts: try row.optionalInt("max_attempts"), idempotencyKey: try row.string("idempotency_key"))
    }
}

/// The Subscription Service could not be reached or failed; the reward stays pending and the job retries.
public struct RewardCreditUnavailable: Error, Sendable, CustomStringConvertible {
    public let reason: String
    public let attempts: Int
    public var description: String { "credit not applied yet (attempt \(attempts)): \(reason)" }
}
