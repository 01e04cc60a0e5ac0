import Foundation
import HTTP
import Queue
import Workers

/// The GDPR jobs (contract with the Auth Service; see docs/jobs-privacy.md):
///
/// | class                 | args                                        | enqueued by                          |
/// |-----------------------|---------------------------------------------|--------------------------------------|
/// | `PrivacyExportJob`    | `[{"user_id": UUID, "export_id": UUID}]`    | Auth Service, now                    |
/// | `AccountDeletionJob`  | `[{"user_id": UUID, "request_id": UUID}]`   | Auth Service, `at` = request + 30 d  |
/// | `DueDeletionSweepJob` | `[]`                                        | schedule, daily                      |
/// | `ExportCleanupJob`    | `[]`                                        | schedule, daily                      |
public enum PrivacyJobs {
    public static let classNames = [PrivacyExportJob.className, AccountDeletionJob.className,
                                    DueDeletionSweepJob.className, ExportCleanupJob.className]

    /// The delay between a deletion request and its execution (GDPR's "one month", operationally 30 days).
    public static let deletionDelay: TimeInterval = 30 * 24 * 3600

    /// Registers the four privacy jobs. `redis` is the job system's own Redis (purging and enqueueing);
    /// `smtp` defaults to a sender built from `configuration.smtp`.
    public static func register(into registry: inout JobRegistry, configuration: PrivacyConfiguration,
                                redis: RedisPool, smtp: SMTPSender? = nil, shards: ShardPools? = nil) {
        let sender = smtp ?? SMTPSender(configuration: configuration.smtp)
        registry.register(PrivacyExportJob(configuration: configuration, smtp: sender))
        registry.register(AccountDeletionJob(configuration: configuration, redis: redis, shards: shards))
        registry.register(DueDeletionSweepJob(configuration: configuration, redis: redis, shards: shards))
        registry.register(ExportCleanupJob(configuration: configuration))
    }

    /// The `AccountDeletionJob` for a request (what the Auth Service enqueues).
    public static func deletionJob(userID: UUID, requestID: UUID, queue: String = "default") -> NewJob {
        NewJob(AccountDeletionJob.className,
               args: [.object(["user_id": .string(userID.uuidString.lowercased()),
                               "request_id": .string(requestID.uuidString.lowercased())])],
               queue: queue)
    }

    /// The `PrivacyExportJob` for an export (what the Auth Service enqueues).
    public static func exportJob(userID: UUID, exportID: UUID, queue: String = "default") -> NewJob {
        NewJob(PrivacyExportJob.className,
               args: [.object(["user_id": .string(userID.uuidString.lowercased()),
                               "export_id": .string(exportID.uuidString.lowercased())])],
               queue: queue)
    }

    /// Schedules the deletion at `requestedAt + 30 days`, as the Auth Service does. Returns the jid.
    @discardableResult
    public static func scheduleDeletion(client: JobClient, userID: UUID, requestID: UUID, requestedAt: Date,
                                        queue: String = "default") throws -> String {
        try client.enqueue(deletionJob(userID: userID, requestID: requestID, queue: queue),
                           at: requestedAt.timeIntervalSince1970 + deletionDelay)
    }
}
