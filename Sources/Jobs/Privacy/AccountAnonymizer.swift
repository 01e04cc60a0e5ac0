import Foundation
import WorkersStorage
import WorkersSubjectKeys
import Workers

/// The deletion policy: what happens to every table that references `users`, as SQL run inside the
/// deletion transaction (`$1` = user id).
///
/// Invariant: `coveredReferences` lists every foreign key to `users(id)`; `verifyCoverage` refuses to run
/// when the schema holds a reference the policy does not know (a table added later could otherwise keep
/// personal data after a "successful" deletion).
public enum DeletionPolicy {
    /// `table.column` of every foreign key to `users(id)` this policy handles.
    public static let coveredReferences: Set<String> = [
        "privacy_settings.user_id", "oauth_connections.user_id", "game_center_connections.user_id",
        "refresh_tokens.user_id", "audit_logs.user_id", "privacy_exports.user_id", "deletion_requests.user_id",
        "subscriptions.user_id", "iap_receipts.user_id", "credit_transactions.user_id", "user_locations.user_id",
        "quiz_history.user_id", "user_achievements.user_id", "ad_requests.user_id", "ad_views.user_id",
        "campaign_participations.user_id", "pending_rewards.user_id", "notifications.user_id",
    ]

    /// Tables that hold personal data without a foreign key to `users`, so that `verifyCoverage` cannot see them;
    /// the anonymisation handles each by content: `job_outbox` (job args naming the user; `OutboxJobPurger`).
    public static let matchedByContent: Set<String> = ["job_outbox.args"]

    /// Rows that only describe the person: deleted.
    static let deletedTables = [
        "privacy_settings", "oauth_connections", "game_center_connections", "refresh_tokens", "user_locations",
        "quiz_history", "user_achievements", "campaign_participations", "pending_rewards", "notifications",
    ]

    /// Statements after the deletions (order matters only for readability; all run in one transaction).
    static let statements: [String] = [
        // Accounting records are kept, detached from the person; the raw store receipts go (data
        // minimisation: transaction ids, product, price and dates are what accounting needs).
        // `detached_at` marks the erasure (a renewal landing on the row later is alerted once: `DetachedRenewal`).
        "UPDATE subscriptions SET user_id = NULL, store_receipt = NULL, detached_at = now(), updated_at = now() WHERE user_id = $1",
        "UPDATE iap_receipts SET user_id = NULL, receipt_data = NULL WHERE user_id = $1",
        "UPDATE credit_transactions SET user_id = NULL WHERE user_id = $1",
        // Ad statistics are kept for revenue aggregation, detached.
        "UPDATE ad_requests SET user_id = NULL WHERE user_id = $1",
        "UPDATE ad_views SET user_id = NULL WHERE user_id = $1",
        // The audit trail stays (security, Art. 17(3)(e)), without network identifiers or free-form details.
        "UPDATE audit_logs SET ip_address = NULL, user_agent = NULL, details = NULL WHERE user_id = $1",
        // Exports: links die now; files are removed after the commit, then the rows.
        """
        UPDATE privacy_exports SET status = 'expired', url = NULL, expires_at = LEAST(expires_at, now())
        WHERE user_id = $1
        """,
        // Request history stays as proof of erasure, without the free-text reason; tokens are rotated.
        """
        UPDATE deletion_requests
        SET reason = NULL, token = gen_random_uuid(),
            completed_at = CASE WHEN cancelled_at IS NULL THEN COALESCE(completed_at, now()) ELSE completed_at END
        WHERE user_id = $1
        """,
        """
        UPDATE users
        SET email = NULL, email_verified = false, password_hash = NULL, first_name = NULL, last_name = NULL,
            display_name = NULL, google_id = NULL, apple_id = NULL, subscription_id = NULL,
            guest_expires_at = NULL, login_attempts = 0, locked_until = NULL, last_login = NULL,
            delete_cancellation_token = NULL, anonymized_at = now(), updated_at = now()
        WHERE id = $1
        """,
    ]

    /// Throws `DeletionPolicyError.uncovered` naming every foreign key to `users` not in `coveredReferences`.
    public static func verifyCoverage(_ conn: PostgresConnection) throws {
        let rows = try conn.query("""
            SELECT c.conrelid::regclass::text AS tbl, a.attname::text AS col
            FROM pg_constraint c
            CROSS JOIN LATERAL unnest(c.conkey) AS k(attnum)
            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
            WHERE c.contype = 'f' AND c.confrelid = 'users'::regclass
            """)
        var unknown: [String] = []
        for row in rows {
            let reference = "\(try row.string("tbl")).\(try row.string("col"))"
            if !coveredReferences.contains(reference) { unknown.append(reference) }
        }
        if !unknown.isEmpty { throw DeletionPolicyError.uncovered(unknown.sorted()) }
    }
}

/// The schema references `users` from a place the deletion policy does not handle: deleting now could
/// leave personal data behind, so the job refuses (dead, then retried by the daily sweep once fixed).
public enum DeletionPolicyError: Error, Sendable, CustomStringConvertible {
    case uncovered([String])
    public var description: String {
        if case .uncovered(let refs) = self {
            return "no deletion policy for \(refs.joined(separator: ", ")): extend DeletionPolicy before deleting accounts"
        }
        return "deletion policy error"
    }
}

/// What the deletion transaction found and did.
enum DeletionDecision: Equatable {
    /// PII removed now.
    case anonymised
    /// Done by an earlier run (or another request of the same user): only the post-commit cleanup remains.
    case alreadyCompleted
    case cancelled
    case notDue
}

/// Runs the re-check and the anonymisation inside the caller's transaction.
struct AccountAnonymizer {
    /// Finds the person's data keys by their keyed digest; nil on a worker without a usable key store
    /// (`SubjectKeyStore.eraseWithoutKeyStore`: the deletion waits when keys linked by digest exist).
    var subjectKeys: SubjectKeyStore?

    /// Locks the request and the user (FOR UPDATE), re-checks, and anonymises when due.
    func run(requestID: UUID, userID: UUID, jid: String, conn: PostgresConnection) throws -> DeletionDecision {
        guard let row = try conn.queryFirst("""
            SELECT r.user_id, r.cancelled_at, r.completed_at, r.scheduled_at <= now() AS due,
                   u.delete_requested, u.anonymized_at, u.app_id, u.email
            FROM deletion_requests r JOIN users u ON u.id = r.user_id
            WHERE r.id = $1 FOR UPDATE OF r, u
            """, [requestID]) else {
            throw JobError.badInput("deletion request \(requestID.uuidString.lowercased()) does not exist")
        }
        guard try row.uuid("user_id") == userID else {
            throw JobError.badInput("deletion request \(requestID.uuidString.lowercased()) belongs to another user")
        }
        if try row.optionalDate("completed_at") != nil { return .alreadyCompleted }
        if try row.optionalDate("cancelled_at") != nil || !(try row.bool("delete_requested")) { return .cancelled }
        if try row.optionalDate("anonymized_at") != nil {
            try conn.execute("UPDATE deletion_requests SET completed_at = now() WHERE id = $1", [requestID])
            return .alreadyCompleted
        }
        guard try row.bool("due") else { return .notDue }

        try DeletionPolicy.verifyCoverage(conn)
        var counts: [String: Int] = [:]
        for table in DeletionPolicy.deletedTables {
            counts[table] = try conn.execute("DELETE FROM \(table) WHERE user_id = $1", [userID])
        }
        // Jobs enqueued through PostgreSQL keep a copy of their args in job_outbox (no FK to users): removed now,
        // in this transaction, so the Redis purge after the commit is the last word (OutboxJobPurger).
        counts["job_outbox"] = try OutboxJobPurger.purge(userID: userID, email: try row.optionalString("email"), on: conn)
        // The store subscriptions, before the rows are detached: every chargeable Google one owes a cancel that stops
        // its payments (paid after the commit by GoogleAcknowledgementSweepJob); Apple ones only the user can stop.
        let googleOwed = try GoogleCancellationStore.owe(.stopPayments, userID: userID, requestID: requestID, on: conn)
        let appleLive = try GoogleCancellationStore.liveAppleSubscriptions(userID: userID, on: conn)
        for statement in DeletionPolicy.statements { try conn.execute(statement, [userID]) }
        // Crypto-shredding (docs/jobs-privacy.md): the user's data keys go, so every copy of their encrypted job
        // arguments (Redis, its AOF, backups, dead) becomes unreadable. The deletion job announces it after the commit.
        counts["subject_keys"] = try subjectKeys.map { try $0.erase(personID: userID, on: conn) }
            ?? SubjectKeyStore.eraseWithoutKeyStore(personID: userID, on: conn)
        // The address the Redis purge must look for after the commit (jobs that carry only the address); the
        // deletion job sets it to NULL once the purge succeeded (0013_deletion_purge_email.sql).
        try conn.execute("UPDATE deletion_requests SET purge_email = $2 WHERE id = $1",
                         [requestID, try row.optionalString("email")])
        let countsJSON = counts.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",")
        try conn.execute("""
            INSERT INTO audit_logs (user_id, app_id, action, result, details)
            VALUES ($1, $2, 'account_deleted', 'success',
                    jsonb_build_object('request_id', $3::text, 'jid', $4::text, 'deleted_rows', $5::jsonb,
                                       'apple_subscriptions_live', $6::int, 'google_cancellations', '{}'::jsonb))
            """, [userID, try row.uuid("app_id"), requestID, jid, "{\(countsJSON)}", appleLive])
        // `google_cancellations`: {"owed": n} now, then counts by outcome as the cancels settle.
        if googleOwed > 0 { try GoogleCancellationStore.recordOutcome(requestID: requestID, on: conn) }
        return .anonymised
    }
}
