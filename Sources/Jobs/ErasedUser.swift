import Foundation
import WorkersStorage
import Workers
import Logging

/// Erasure stays erased (GDPR Art. 17; docs/jobs-privacy.md, "After the erasure"): a domain job that names a
/// user whose account was anonymised (`users.anonymized_at IS NOT NULL`) changes nothing.
///
/// Every domain job that writes something about a user calls `skips` first thing inside its ledger transaction
/// and returns when it answers true: the transaction then commits only the ledger row, so the job succeeds once
/// as a no-op (no retry, no dead job, and a redelivery finds the ledger row). Callers: `ValidateReceiptJob`
/// (`apply`), `PendingRewardJob` (`settleCredited`; it also deletes a reward row written after the erasure, as the
/// erasure deletes those, so that the sweep does not send it again and again), `ReverseGeocodeJob` (the update after
/// the lookup). The privacy jobs do not call it: they are idempotent on an anonymised user by themselves. Store
/// notification jobs name no user (they reach one through `subscriptions.user_id`, which the erasure clears).
///
/// Invariant: the check and the job's writes are one transaction, and the check locks the user's row
/// `FOR KEY SHARE`. The erasure (`AccountAnonymizer`) locks the same row `FOR UPDATE`, which conflicts with it:
/// a job that checked first commits before the erasure starts (which then detaches or deletes what it wrote);
/// a job that checks after the erasure began waits for its commit and then sees `anonymized_at`. `KEY SHARE`
/// rather than `SHARE`: it does not conflict with the job's own `UPDATE users` (two jobs for the same user
/// holding `SHARE` and both updating the row would deadlock).
///
/// Stateless; runs on the caller's connection (the caller's thread).
public enum ErasedUser {
    /// True when `userID` names an anonymised account: the caller returns from its transaction closure without
    /// writing anything. Logs the no-op on `context.logger` with the job's own metadata and no personal data.
    /// A user id with no row answers false (the caller's own checks decide about it).
    public static func skips(_ userID: UUID?, on connection: PostgresConnection, _ context: JobContext) throws -> Bool {
        guard let userID else { return false }
        let row = try connection.queryFirst(
            "SELECT anonymized_at IS NOT NULL AS erased FROM users WHERE id = $1 FOR KEY SHARE", [userID])
        guard try row?.bool("erased") == true else { return false }
        context.logger.info("user account erased: the job changes nothing", metadata: ["erased_user": "true"])
        return true
    }
}
