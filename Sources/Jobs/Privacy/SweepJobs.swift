import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// Daily safety net: enqueues `AccountDeletionJob` for every due, uncancelled, uncompleted request whose user
/// still asks for deletion and that has no pending job (scheduled, retry, enqueued or running). `args: []`.
/// It also owes the `stop_renewals` Google cancel (`DeletionRequestedJob`'s work) for every open request not due yet
/// whose user has a chargeable Google subscription not yet owed for that request: a request whose
/// `DeletionRequestedJob` was never enqueued, or a subscription bought after it. A request withdrawn meanwhile is
/// settled `withdrawn` by the payer, with no call.
///
/// A job moving between Redis structures during the scan can be missed by the pending check and enqueued a
/// second time: harmless, the deletion is idempotent. A request whose job died is enqueued again (daily).
public struct DueDeletionSweepJob: Job {
    /// `args: []`.
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "DueDeletionSweepJob"
        public init() {}
    }
    public static let options = JobOptions(maxRetries: 5, backoff: .sidekiq, timeout: .seconds(600), usesLedger: false)

    let purger: RedisJobPurger
    let client: JobClient
    let queue: String
    /// At most this many requests per run (the next day's run takes the rest).
    public var batchLimit = 10_000

    /// `shards`: with several Redis shards, pending requests are looked for on every shard and each job is
    /// enqueued on its queue's shard (docs/sharding.md).
    package init(configuration: PrivacyConfiguration, redis: RedisPool, shards: ShardPools? = nil) {
        self.purger = shards.map { RedisJobPurger(shards: $0) } ?? RedisJobPurger(pool: redis)
        self.client = shards.map { JobClient(shards: $0) } ?? JobClient(pool: redis)
        self.queue = configuration.queue
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let renewalsOwed = try context.withConnection { conn in
            try conn.query("""
                SELECT r.id, r.user_id FROM deletion_requests r JOIN users u ON u.id = r.user_id
                WHERE r.cancelled_at IS NULL AND r.completed_at IS NULL AND r.scheduled_at > now()
                  AND u.delete_requested AND u.anonymized_at IS NULL
                  AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.user_id = r.user_id AND s.store = 'google')
                ORDER BY r.scheduled_at LIMIT $1
                """, [batchLimit]).map { (try $0.uuid("id"), try $0.uuid("user_id")) }
                .reduce(0) { owed, request in
                    owed + (try GoogleCancellationStore.owe(.stopRenewals, userID: request.1, requestID: request.0, on: conn))
                }
        }
        if renewalsOwed > 0 { context.logger.info("deletion sweep: Google renewals to stop recorded", metadata: ["owed": "\(renewalsOwed)"]) }
        let due = try context.withConnection { conn in
            try conn.query("""
                SELECT r.id, r.user_id FROM deletion_requests r JOIN users u ON u.id = r.user_id
                WHERE r.cancelled_at IS NULL AND r.completed_at IS NULL AND r.scheduled_at <= now()
                  AND u.delete_requested AND u.anonymized_at IS NULL
                ORDER BY r.scheduled_at LIMIT $1
                """, [batchLimit]).map { (try $0.uuid("id"), try $0.uuid("user_id")) }
        }
        guard !due.isEmpty else { return }
        let pending = try purger.pendingDeletionRequestIDs()
        let jobs = try due.filter { !pending.contains($0.0.uuidString.lowercased()) }.map { request, user in
            try PrivacyJobs.deletionJob(userID: user, requestID: request, queue: queue)
        }
        try client.enqueueMany(jobs)
        context.logger.info("deletion sweep", metadata: ["due": "\(due.count)", "enqueued": "\(jobs.count)"])
    }
}

/// Daily: removes export files whose link expired (row → `expired`, `file_deleted_at`), orphaned export files
/// (no pending/processing/ready row, older than an hour) and stale temporary files (older than a day).
/// `args: []`. Idempotent: a missing file is not an error.
public struct ExportCleanupJob: Job {
    /// `args: []`.
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "ExportCleanupJob"
        public init() {}
    }
    public static let options = JobOptions(maxRetries: 5, backoff: .sidekiq, timeout: .seconds(600), usesLedger: false)

    let store: ExportFileStore
    let now: @Sendable () -> Date

    public init(configuration: PrivacyConfiguration, now: @escaping @Sendable () -> Date = { Date() }) {
        self.store = ExportFileStore(directory: configuration.storageDirectory)
        self.now = now
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        var expired = 0
        while true {
            let rows = try context.withConnection { conn in
                try conn.query("""
                    SELECT id, file_path FROM privacy_exports
                    WHERE status = 'ready' AND expires_at <= $1 ORDER BY expires_at LIMIT 1000
                    """, [now()])
            }
            for row in rows {
                if let path = try row.optionalString("file_path") { try store.remove(path: path) }
                _ = try context.withConnection { conn in
                    try conn.execute("""
                        UPDATE privacy_exports SET status = 'expired', file_deleted_at = now()
                        WHERE id = $1 AND status = 'ready'
                        """, [try row.uuid("id")])
                }
                expired += 1
            }
            if rows.count < 1000 || context.isCancelled { break }
        }
        let orphans = try removeOrphans(context: context)
        context.logger.info("export cleanup", metadata: ["expired": "\(expired)", "orphans": "\(orphans)"])
    }

    private func removeOrphans(context: JobContext) throws -> Int {
        let current = now()
        var candidates: [(UUID, String)] = []
        var removed = 0
        for (name, modified) in store.listing() {
            let path = store.directory.appendingPathComponent(name).path
            if name.hasPrefix("."), name.hasSuffix(".tmp") {
                if current.timeIntervalSince(modified) > 24 * 3600, try store.remove(path: path) { removed += 1 }
            } else if name.hasSuffix(".json"), let id = UUID(uuidString: String(name.dropLast(5))),
                      current.timeIntervalSince(modified) > 3600 {
                candidates.append((id, path))
            }
        }
        guard !candidates.isEmpty else { return removed }
        let live = try context.withConnection { conn in
            try Set(conn.query("""
                SELECT id FROM privacy_exports WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'processing', 'ready')
                """, [candidates.map(\.0)]).map { try $0.uuid("id") })
        }
        for (id, path) in candidates where !live.contains(id) {
            if try store.remove(path: path) { removed += 1 }
            try context.withConnection { conn in
                _ = try conn.execute("UPDATE privacy_exports SET file_deleted_at = now() WHERE id = $1 AND file_deleted_at IS NULL",
                                     [id])
            }
        }
        return removed
    }
}
