import Foundation
import HTTP
import Logging
import Queue
import Storage
import Workers

/// `PendingRewardJob` `[{"pending_reward_id": "<uuid>"}]`: credits a reward the Ads Service
/// could not credit, through the Subscription Service.
///
/// - The request carries the row's `idempotency_key`, so the user is credited once however many
///   times (and from however many duplicate jobs) it is sent.
/// - On success, in one ledger transaction: the reward becomes `credited`; for a campaign reward
///   `campaign_participations.reward_claimed = true, reward_claimed_at`; one "credits added"
///   notification (`dedup_key = 'reward:<id>'`, so a duplicate job writes none).
/// - On failure `attempts` grows (in the row, so it counts across jobs and sweeps). Campaign
///   rewards: after `max_attempts` (5) the reward is `failed` and an alert is logged. Ad rewards
///   retry until success with capped exponential backoff (10 s doubling to 1 h). A request the
///   service rejects as invalid (4xx other than 401/403/408/429) fails the reward at once, with
///   an alert: repeating it cannot succeed.
/// - A missing, credited or failed reward is a no-op.
public struct PendingRewardJob: Job {
    public static let className = "PendingRewardJob"
    /// Effectively unlimited retries: ad rewards retry until success; campaign rewards stop
    /// themselves after their attempts. Capped backoff: 10 s × 2ⁿ, at most 1 h.
    public static let options = JobOptions(maxRetries: 100_000, backoff: .exponential(base: 10, cap: 3600, jitter: 0.2),
                                           timeout: 120, usesLedger: true)

    public struct Args: Decodable, Sendable, ValidatedArguments {
        public let pending_reward_id: String
        public init(pending_reward_id: String) { self.pending_reward_id = pending_reward_id }
        public func validate() throws(JobError) {
            guard GeoAdsIdentifier.uuid(pending_reward_id) != nil else { throw .badInput("pending_reward_id must be a UUID") }
        }
    }

    let client: SubscriptionCreditsClient
    let marker: RewardJobMarker
    let configuration: AdsConfiguration

    public init(client: SubscriptionCreditsClient, marker: RewardJobMarker, configuration: AdsConfiguration) {
        self.client = client
        self.marker = marker
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
        let idText = id.uuidString.lowercased()
        guard let reward = try context.withConnection({ try Self.load(id, $0) }) else {
            try marker.clear(idText)
            context.logger.info("pending reward no longer exists; nothing to credit")
            return
        }
        guard reward.status == "pending" else {
            try marker.clear(idText)
            context.logger.info("reward already settled", metadata: ["status": "\(reward.status)"])
            return
        }
        try marker.refresh(idText, owner: context.jid)

        let body = SubscriptionCreditsClient.EarnRequest(
            user_id: reward.userID.uuidString.lowercased(), amount: reward.amount,
            source: reward.source == "campaign" ? "campaign_reward" : "ad_reward", reference: reward.reference)
        let cancellation = context.cancellation
        let outcome = client.earn(body, idempotencyKey: reward.idempotencyKey,
                                  cancellation: HTTPCancellation(isCancelled: { cancellation.isCancelled }))
        switch outcome {
        case .credited(let replayed):
            try settleCredited(reward, context: context)
            try marker.clear(idText)
            context.logger.info("reward credited", metadata: ["replayed": "\(replayed)", "source": "\(reward.source)"])
        case .rejected(let status, let why):
            try fail(reward, reason: "Subscription Service rejected the credit (HTTP \(status)): \(why)", context: context)
            try marker.clear(idText)
        case .rateLimited(let after):
            try retryLater(reward, reason: "Subscription Service answered 429", retryAfter: after ?? 30, context: context)
        case .transient(let why):
            try retryLater(reward, reason: why, retryAfter: nil, context: context)
        }
    }

    func settleCredited(_ reward: Reward, context: JobContext) throws {
        try context.transaction { connection in
            try connection.execute("""
                UPDATE pending_rewards SET status = 'credited', credited_at = now(), attempts = attempts + 1,
                       last_error = NULL, next_attempt_at = NULL, updated_at = now()
                WHERE id = $1 AND status = 'pending'
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

    /// Counts the failed attempt; a campaign reward out of attempts becomes `failed` (alert),
    /// anything else is retried by throwing.
    func retryLater(_ reward: Reward, reason: String, retryAfter: Double?, context: JobContext) throws {
        let attempts = try context.withConnection { connection in
            try connection.queryFirst("""
                UPDATE pending_rewards SET attempts = attempts + 1, last_error = $2, updated_at = now(),
                       next_attempt_at = now() + make_interval(secs => $3::double precision)
                WHERE id = $1 AND status = 'pending' RETURNING attempts
                """, [reward.id, String(reason.prefix(500)), retryAfter ?? 10]).map { try $0.int("attempts") }
        }
        guard let attempts else { return }  // settled meanwhile by another job
        let limit = reward.maxAttempts ?? (reward.source == "campaign" ? configuration.campaignMaxAttempts : nil)
        if let limit, attempts >= limit {
            try fail(reward, reason: "gave up after \(attempts) attempts: \(reason)", context: context)
            try marker.clear(reward.id.uuidString.lowercased())
            return
        }
        let nextDelay = retryAfter ?? 3600 * 1.2
        try marker.refresh(reward.id.uuidString.lowercased(), owner: context.jid,
                           atLeast: nextDelay + Self.options.timeout)
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
