import Foundation
import WorkersMail
import WorkersQueue
import WorkersSubjectKeys
import Workers

/// The GDPR jobs (contract with the Auth Service; see docs/jobs-privacy.md):
///
/// | class                 | args                                        | enqueued by                          |
/// |-----------------------|---------------------------------------------|--------------------------------------|
/// | `PrivacyExportJob`    | `[{"user_id": UUID, "export_id": UUID}]`    | Auth Service, now                    |
/// | `AccountDeletionJob`  | `[{"user_id": UUID, "request_id": UUID}]`   | Auth Service, `at` = `deletionDate`  |
/// | `DeletionRequestedJob`| `[{"user_id": UUID, "request_id": UUID}]`   | Auth Service, now (with the above)   |
/// | `DueDeletionSweepJob` | `[]`                                        | schedule, daily                      |
/// | `ExportCleanupJob`    | `[]`                                        | schedule, daily                      |
public enum PrivacyJobs {
    public static let classNames = [PrivacyExportJob.className, AccountDeletionJob.className, DeletionRequestedJob.className,
                                    DueDeletionSweepJob.className, ExportCleanupJob.className]

    /// How long before the one-month deadline the erasure is scheduled: 2 days. The daily `DueDeletionSweepJob`
    /// (the safety net for a lost job) may find a due request up to 24 h late, and a run that fails is retried
    /// within hours; the rest covers a user whose calendar day differs from UTC's (at most 14 h).
    public static let deletionMargin: TimeInterval = 2 * 86_400

    /// When a request made at `requestedAt` is carried out: GDPR Art. 12(3) gives "one month of receipt of the
    /// request", which ends on the same calendar day of the next month, or on that month's last day when it has no
    /// such day (Regulation 1182/71 Art. 3(2)(c)); counted in UTC, minus `deletionMargin`.
    /// 31 Jan 10:00 → deadline 28 Feb 10:00 (29 Feb in a leap year) → scheduled 26 Feb 10:00; 15 Mar → 13 Apr.
    public static func deletionDate(requestedAt: Date) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        // Foundation clamps to the month's last day (31 Jan + 1 month = 28/29 Feb), as the rule says.
        let deadline = calendar.date(byAdding: .month, value: 1, to: requestedAt) ?? requestedAt.addingTimeInterval(28 * 86_400)
        return deadline.addingTimeInterval(-deletionMargin)
    }

    /// Registers the five privacy jobs. `redis` is the job system's own Redis (purging and enqueueing);
    /// `smtp` defaults to a sender built from `configuration.smtp`; `subjectKeys`: the key store of encrypted
    /// arguments, with which the deletion erases the keys of the person's e-mail subjects (nil: no KEK here).
    package static func register(into registry: inout JobRegistry, configuration: PrivacyConfiguration,
                                redis: RedisPool, smtp: SMTPSender? = nil, shards: ShardPools? = nil,
                                subjectKeys: SubjectKeyStore? = nil) {
        let sender = smtp ?? SMTPSender(configuration: configuration.smtp)
        registry.register(PrivacyExportJob(configuration: configuration, smtp: sender))
        registry.register(AccountDeletionJob(configuration: configuration, redis: redis, shards: shards, subjectKeys: subjectKeys))
        registry.register(DeletionRequestedJob())
        registry.register(DueDeletionSweepJob(configuration: configuration, redis: redis, shards: shards))
        registry.register(ExportCleanupJob(configuration: configuration))
    }

    /// The `AccountDeletionJob` for a request (what the Auth Service enqueues).
    public static func deletionJob(userID: UUID, requestID: UUID, queue: String = "default") throws(EnqueueError) -> NewJob {
        try NewJob(AccountDeletionJob.Arguments(userID: userID, requestID: requestID), queue: queue)
    }

    /// The `DeletionRequestedJob` for a request (what the Auth Service enqueues at once, beside the erasure).
    public static func deletionRequestedJob(userID: UUID, requestID: UUID, queue: String = "default") throws(EnqueueError) -> NewJob {
        try NewJob(DeletionRequestedJob.Arguments(userID: userID, requestID: requestID), queue: queue)
    }

    /// The `PrivacyExportJob` for an export (what the Auth Service enqueues).
    public static func exportJob(userID: UUID, exportID: UUID, queue: String = "default") throws(EnqueueError) -> NewJob {
        try NewJob(PrivacyExportJob.Arguments(userID: userID, exportID: exportID), queue: queue)
    }

    /// Schedules the deletion at `deletionDate(requestedAt:)`, as the Auth Service must (it records the same time
    /// in `deletion_requests.scheduled_at`, which the sweep and the job's re-check read), and enqueues
    /// `DeletionRequestedJob` now (store renewals stop at the request). Returns the erasure's jid.
    @discardableResult
    public static func scheduleDeletion(client: JobClient, userID: UUID, requestID: UUID, requestedAt: Date,
                                        queue: String = "default") throws -> String {
        _ = try client.enqueue(deletionRequestedJob(userID: userID, requestID: requestID, queue: queue))
        return try client.enqueue(deletionJob(userID: userID, requestID: requestID, queue: queue),
                                  at: deletionDate(requestedAt: requestedAt).timeIntervalSince1970)
    }
}
