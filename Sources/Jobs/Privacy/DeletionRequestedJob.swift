import Foundation
import Logging
import WorkersStorage
import Workers

/// The deletion was requested: `DeletionRequestedJob` with args `[{"user_id": UUID, "request_id": UUID}]`, enqueued by
/// the Auth Service right after it records the request (`PrivacyJobs.scheduleDeletion` enqueues it with the erasure).
///
/// In one ledger transaction, after locking the request and the user (`FOR UPDATE`): when the request is still open
/// (not cancelled, not completed, `users.delete_requested`, not anonymised), every chargeable Google subscription of
/// the user owes a `stop_renewals` cancel (`google_cancellations`), paid by `GoogleAcknowledgementSweepJob` with
/// Google's USER_REQUESTED_STOP_RENEWALS: no renewal falls due between the request and the erasure, and the user
/// keeps the period paid for. A request withdrawn before the cancel was sent settles it without a call; one withdrawn
/// after it cannot be undone by us (Google re-enables auto-renew only through the user, in the Play Store).
/// Apple subscriptions: nothing to call (Apple has no server-side cancel; docs/jobs-privacy.md, "The store
/// subscription"). A request that does not exist or belongs to another user: dead at once.
public struct DeletionRequestedJob: Job {
    public static let options = JobOptions(maxRetries: 25, backoff: .sidekiq, timeout: .seconds(60), usesLedger: true)

    /// `[{"user_id": UUID, "request_id": UUID}]`, as `AccountDeletionJob`'s (a value that is not a UUID: dead at once).
    public struct Arguments: JobArguments, Equatable {
        public static let className = "DeletionRequestedJob"
        public let userID: UUID
        public let requestID: UUID
        public init(userID: UUID, requestID: UUID) {
            self.userID = userID
            self.requestID = requestID
        }
        public init(from decoder: any Decoder) throws {
            let both = try AccountDeletionJob.Arguments(from: decoder)
            self.init(userID: both.userID, requestID: both.requestID)
        }
        public func encode(to encoder: any Encoder) throws {
            try AccountDeletionJob.Arguments(userID: userID, requestID: requestID).encode(to: encoder)
        }
    }

    public init() {}

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        var owed = 0
        _ = try context.transaction { conn in
            guard let row = try conn.queryFirst("""
                SELECT r.user_id, r.cancelled_at IS NULL AND r.completed_at IS NULL AND u.delete_requested
                       AND u.anonymized_at IS NULL AS open
                FROM deletion_requests r JOIN users u ON u.id = r.user_id
                WHERE r.id = $1 FOR UPDATE OF r, u
                """, [arguments.requestID]) else {
                throw JobError.badInput("deletion request \(arguments.requestID.uuidString.lowercased()) does not exist")
            }
            guard try row.uuid("user_id") == arguments.userID else {
                throw JobError.badInput("deletion request \(arguments.requestID.uuidString.lowercased()) belongs to another user")
            }
            guard try row.bool("open") else { return }
            owed = try GoogleCancellationStore.owe(.stopRenewals, userID: arguments.userID, requestID: arguments.requestID,
                                                   on: conn)
        }
        context.logger.info("deletion requested: store renewals to stop recorded", metadata: ["google_cancellations_owed": "\(owed)"])
    }
}
