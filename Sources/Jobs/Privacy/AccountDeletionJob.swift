import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import WorkersSubjectKeys
import Workers

/// GDPR Art. 17 erasure: `AccountDeletionJob` with args `[{"user_id": UUID, "request_id": UUID}]`, enqueued by
/// the Auth Service with `at` = `PrivacyJobs.deletionDate(requestedAt:)` (one month minus a 2-day margin), and by
/// `DueDeletionSweepJob` as a safety net.
///
/// 1. One ledger transaction: lock request and user, re-check (exists and belongs to the user → else dead;
///    cancelled or `users.delete_requested` false → no-op; not due → no-op; already completed → skip to 2),
///    refuse if a foreign key to `users` is not covered by `DeletionPolicy`, then remove PII, detach
///    accounting rows, delete the user's `job_outbox` rows (`OutboxJobPurger`), mark the request completed
///    and write an `account_deleted` audit entry.
///    The transaction also keeps the user's e-mail address in `deletion_requests.purge_email`, for step 2.
/// 2. After the commit (also on every later run of a completed request): delete the user's export files,
///    then their `privacy_exports` rows; purge every job naming the user by id or by that address from the
///    in-flight lists of dead processes, `schedule`, `retry`, `dead` and the queues (`RedisJobPurger`);
///    then set `purge_email` to NULL. Once the job succeeds, the address is gone from PostgreSQL and Redis:
///    the job's own args hold only ids, and its audit entry ids and row counts. The outbox rows went in step 1,
///    before this purge, so neither the relay nor the lost-job finder can push a purged job again; a domain job
///    that still runs for the user afterwards changes nothing (`ErasedUser`).
///
/// Idempotent: a second run finds the request completed and step 2 finds nothing left to remove.
public struct AccountDeletionJob: Job {
    public static let options = JobOptions(maxRetries: 25, backoff: .sidekiq, timeout: .seconds(600), usesLedger: false)

    /// `[{"user_id": UUID, "request_id": UUID}]` (a value that is not a UUID: `JobError.badInput`, dead at once).
    public struct Arguments: JobArguments, Equatable {
        public static let className = "AccountDeletionJob"
        public let userID: UUID
        public let requestID: UUID
        public init(userID: UUID, requestID: UUID) {
            self.userID = userID
            self.requestID = requestID
        }
        enum CodingKeys: String, CodingKey { case user_id, request_id }
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            // Both keys first (a missing key is "do not fit"), then the UUID checks.
            let (userIDText, requestIDText) = (try c.decode(String.self, forKey: .user_id), try c.decode(String.self, forKey: .request_id))
            userID = try ArgumentUUID.parse(userIDText, field: "user_id")
            requestID = try ArgumentUUID.parse(requestIDText, field: "request_id")
        }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeUUID(userID, forKey: .user_id)
            try c.encodeUUID(requestID, forKey: .request_id)
        }
    }

    let store: ExportFileStore
    let purger: RedisJobPurger
    /// The key store of encrypted arguments: finds an e-mail subject's key by its digest. Nil: no KEK on this worker.
    let subjectKeys: SubjectKeyStore?

    /// `shards`: with several Redis shards, the purge covers every one (docs/sharding.md). `subjectKeys`: see
    /// `eraseEmailSubjectKeys`.
    package init(configuration: PrivacyConfiguration, redis: RedisPool, shards: ShardPools? = nil,
                 subjectKeys: SubjectKeyStore? = nil) {
        self.store = ExportFileStore(directory: configuration.storageDirectory)
        self.purger = shards.map { RedisJobPurger(shards: $0) } ?? RedisJobPurger(pool: redis)
        self.subjectKeys = subjectKeys
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let userID = arguments.userID
        let requestID = arguments.requestID

        var decision = DeletionDecision.alreadyCompleted
        let outcome = try context.transaction { conn in
            decision = try AccountAnonymizer(subjectKeys: subjectKeys).run(requestID: requestID, userID: userID, jid: context.jid, conn: conn)
        }
        if outcome == .alreadyApplied {
            // This jid committed before (crash between commit and acknowledge): look at the request as it is now.
            let completed = try context.withConnection { conn in
                try conn.queryFirst("SELECT completed_at FROM deletion_requests WHERE id = $1", [requestID])?
                    .optionalDate("completed_at")
            }
            decision = completed != nil ? .alreadyCompleted : .cancelled
        }
        switch decision {
        case .cancelled:
            context.logger.info("deletion request cancelled: nothing done")
            return
        case .notDue:
            context.logger.info("deletion request not due yet: nothing done (the daily sweep enqueues it when due)")
            return
        case .anonymised:
            context.logger.info("account anonymised")
        case .alreadyCompleted:
            break
        }
        // Any request of this user may hold the address (another request may have done the anonymisation).
        let emails = try context.withConnection { conn in
            try conn.query("SELECT DISTINCT purge_email FROM deletion_requests WHERE user_id = $1 AND purge_email IS NOT NULL",
                           [userID]).map { try $0.string("purge_email") }
        }
        let emailKeys = try eraseEmailSubjectKeys(emails, context: context)
        // The erasure deleted the user's data keys: every worker drops its cached copies now (again on a later run,
        // so a crash between the commit and this line is repaired by the redelivery).
        try SubjectKeyInvalidation.announce(on: purger.pools)
        // Journaled where a PostgreSQL backup does not reach, as a digest only the KEK can match to the person, so a
        // restore from before today cannot bring the keys back unnoticed (`ErasureRecovery`, `workerctl keys recover`).
        if let subjectKeys {
            try SubjectKeyErasureJournal(pools: purger.pools).record(personDigest: subjectKeys.personDigest(userID))
        }
        let files = try removeExportFiles(userID: userID, context: context)
        var report = try purger.purge(userID: userID, email: emails.first)
        for email in emails.dropFirst() {
            for (key, count) in try purger.purge(userID: userID, email: email).removedByKey {
                report.removedByKey[key, default: 0] += count
            }
        }
        // The purge succeeded: the last copy of the address goes.
        _ = try context.withConnection { conn in
            try conn.execute("UPDATE deletion_requests SET purge_email = NULL WHERE user_id = $1 AND purge_email IS NOT NULL",
                             [userID])
        }
        context.logger.info("deletion cleanup done", metadata: ["export_files_removed": "\(files)",
                                                              "redis_jobs_purged": "\(report.total)",
                                                              "email_subject_keys_erased": "\(emailKeys)"])
    }

    /// Deletes the data keys of the person's e-mail addresses (`purge_email`) used as subjects of encrypted arguments
    /// by jobs that know only the address (docs/jobs-privacy.md): a key linked to the person went with
    /// `SubjectKeyStore.erase(personID:)` in the transaction; one a producer made for the bare address is found only
    /// by its digest, which needs the key store. Runs before the invalidation is announced and before `purge_email`
    /// is cleared, so a failure is retried with the address still known. Without a key store on this worker:
    /// nothing to do when no unlinked key exists at all, else `SubjectKeyErasureWait` (the job waits, spending no
    /// retry, until a worker with the KEK completes it) — never a silent success that would leave an address's key.
    private func eraseEmailSubjectKeys(_ emails: [String], context: JobContext) throws -> Int {
        if emails.isEmpty { return 0 }
        return try context.withConnection { conn in
            guard let subjectKeys else {
                let unlinked = try conn.queryFirst("""
                    SELECT EXISTS (SELECT 1 FROM subject_keys WHERE person_id IS NULL AND person_digest IS NULL) AS found
                    """)?.bool("found") ?? false
                if unlinked { throw SubjectKeyErasureWait.noKeyStore }
                return 0
            }
            var erased = 0
            for email in emails { erased += try subjectKeys.erase(subject: email, on: conn) }
            return erased
        }
    }

    /// Deletes the files of the user's exports, then the rows (each row only after its file is gone, so a
    /// crash in between leaves a row that the next run still finds).
    private func removeExportFiles(userID: UUID, context: JobContext) throws -> Int {
        let rows = try context.withConnection { conn in
            try conn.query("SELECT id, file_path FROM privacy_exports WHERE user_id = $1", [userID])
        }
        var removed = 0
        for row in rows {
            if let path = try row.optionalString("file_path"), try store.remove(path: path) { removed += 1 }
            // A file for this export id written under the standard name (e.g. an export that was mid-flight).
            if try store.remove(path: store.finalPath(exportID: try row.uuid("id"))) { removed += 1 }
            _ = try context.withConnection { conn in
                try conn.execute("DELETE FROM privacy_exports WHERE id = $1 AND user_id = $2", [try row.uuid("id"), userID])
            }
        }
        return removed
    }
}
