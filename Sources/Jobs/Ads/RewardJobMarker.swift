import Foundation
import Queue

/// "A job for this reward is live" (queued, scheduled, running or waiting in `retry`), kept as one
/// Redis key per pending reward with a TTL: `rewards:live:<pending_reward_id>`.
///
/// Chosen over scanning the queue, schedule and retry sets (cost grows with the backlog) and over
/// deterministic jids (Sidekiq has no unique-jid guarantee, and a retried job keeps its jid while
/// sitting in `retry`, which a jid lookup would have to search). The marker is:
/// - set with NX by the sweep before it enqueues (so two sweeps enqueue one job);
/// - refreshed by the job at the start of every run and before every retry, with a TTL longer
///   than the next retry delay plus the job timeout;
/// - deleted by the job when the reward is settled (credited or failed).
/// If a job vanishes (dead set cleared, Redis data lost), its marker expires and the next sweep
/// enqueues a new job. A marker can outlive its job by at most its TTL: the reward then waits one
/// TTL longer. The worst case is a duplicate job, which is harmless (idempotency key + status check).
public struct RewardJobMarker: Sendable {
    public let redis: RedisPool
    public let ttl: Int

    public init(redis: RedisPool, ttl: Int) {
        self.redis = redis
        self.ttl = ttl
    }

    public static func key(_ rewardID: String) -> String { "rewards:live:\(rewardID.lowercased())" }

    /// Claims the marker if no live job holds it; true when the caller now owns it.
    public func claim(_ rewardID: String, owner: String) throws -> Bool {
        let reply = try redis.withConnection { try $0.command("SET", Self.key(rewardID), owner, "NX", "EX", ttl).checked() }
        return !reply.isNull
    }

    /// Sets (or extends) the marker for a job that is alive and will run again within `seconds`.
    public func refresh(_ rewardID: String, owner: String, atLeast seconds: Double = 0) throws {
        let lifetime = max(ttl, Int(seconds.rounded(.up)) + 600)
        _ = try redis.withConnection { try $0.command("SET", Self.key(rewardID), owner, "EX", lifetime).checked() }
    }

    public func clear(_ rewardID: String) throws {
        _ = try redis.withConnection { try $0.command("DEL", Self.key(rewardID)).checked() }
    }

    public func isLive(_ rewardID: String) throws -> Bool {
        try redis.withConnection { try $0.command("EXISTS", Self.key(rewardID)).checked().integer == 1 }
    }
}
