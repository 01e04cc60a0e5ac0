import Foundation
import WorkersHTTP
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// The acknowledgements we owe Google (`google_acknowledgements`), as SQL.
///
/// Invariant: a purchase we grant while Google says `ACKNOWLEDGEMENT_STATE_PENDING` has an unsettled row written in
/// the granting transaction (`owe`), so the debt commits with the grant and the job's ledger row or not at all. A
/// row is settled only by Google's answer or state (`settle`). Every function runs on the connection it is given.
enum GoogleAcknowledgementStore {
    /// Records the debt (inside the granting transaction). A row settled earlier is reopened: Google says again
    /// that the purchase is pending.
    static func owe(purchaseToken: String, packageName: String, productID: String, subscriptionID: UUID?,
                    on c: PostgresConnection) throws {
        try c.execute("""
            INSERT INTO google_acknowledgements (purchase_token, package_name, product_id, subscription_id)
            VALUES ($1, $2, $3, $4)
            ON CONFLICT (purchase_token) DO UPDATE SET
                settled_at = NULL, outcome = NULL, next_attempt_at = now(),
                subscription_id = COALESCE(EXCLUDED.subscription_id, google_acknowledgements.subscription_id)
            WHERE google_acknowledgements.settled_at IS NOT NULL
            """, [purchaseToken, packageName, productID, subscriptionID])
    }

    /// One owed acknowledgement, claimed for one attempt.
    struct Claim: Sendable {
        let purchaseToken: String
        let packageName: String
        let productID: String
        let attempt: Int
    }

    /// Claims the row for one attempt when it is unsettled and due: moves `next_attempt_at` to now + `retry` ×
    /// 2^(attempts, at most 6), so a concurrent attempt (the job's own and the sweep's) finds it not due. Nil when
    /// settled, not due, or taken by someone else meanwhile.
    static func claim(purchaseToken: String, retry: Duration, on c: PostgresConnection) throws -> Claim? {
        try c.queryFirst("""
            UPDATE google_acknowledgements
               SET attempts = attempts + 1,
                   next_attempt_at = now() + make_interval(secs => $2::float8 * power(2, LEAST(attempts, 6)))
             WHERE purchase_token = $1 AND settled_at IS NULL AND next_attempt_at <= now()
            RETURNING package_name, product_id, attempts
            """, [purchaseToken, Double(retry.components.seconds)]).map {
            Claim(purchaseToken: purchaseToken, packageName: try $0.string("package_name"),
                  productID: try $0.string("product_id"), attempt: Int(try $0.int64("attempts")))
        }
    }

    /// Up to `limit` unsettled rows that are due, oldest first.
    static func due(limit: Int, on c: PostgresConnection) throws -> [String] {
        try c.query("""
            SELECT purchase_token FROM google_acknowledgements
            WHERE settled_at IS NULL AND next_attempt_at <= now() ORDER BY next_attempt_at LIMIT $1
            """, [limit]).map { try $0.string("purchase_token") }
    }

    static func settle(purchaseToken: String, outcome: GoogleAcknowledger.Outcome, on c: PostgresConnection) throws {
        try c.execute("""
            UPDATE google_acknowledgements SET settled_at = now(), outcome = $2, last_error = NULL
            WHERE purchase_token = $1 AND settled_at IS NULL
            """, [purchaseToken, outcome.rawValue])
    }

    /// Keeps the row owed and notes why this attempt failed (`reason` carries no token).
    static func failed(purchaseToken: String, reason: String, on c: PostgresConnection) throws {
        try c.execute("UPDATE google_acknowledgements SET last_error = $2 WHERE purchase_token = $1",
                      [purchaseToken, String(reason.prefix(1000))])
    }
}

/// Pays one owed acknowledgement: claim, `acknowledge`, and settle by Google's answer or state.
///
/// Google's answers: 200 → `acknowledged`. A refusal (400 `invalidPurchaseState`, 404, 410) is not taken at its
/// word: the subscription is read again and `acknowledgementState == ACKNOWLEDGED` settles it as
/// `already_acknowledged` (an earlier attempt went through, its answer was lost), a state that no longer entitles
/// (expired, revoked, refunded, unknown token) as `not_needed`; otherwise it stays owed. 409 `concurrentUpdate`,
/// 5xx, 429, timeouts and transport failures leave it owed and due again after the retry delay.
///
/// Thread rules: a value; safe from any thread. Never holds a database connection during an HTTP call.
struct GoogleAcknowledger: Sendable {
    enum Outcome: String, Sendable {
        case acknowledged
        case alreadyAcknowledged = "already_acknowledged"
        case notNeeded = "not_needed"
    }

    /// What one call did.
    enum Result: Sendable, Equatable {
        case settled(Outcome)
        /// Still owed (the reason carries no token).
        case owed(reason: String)
        /// Settled already, not due, or claimed by a concurrent attempt.
        case notClaimed
    }

    let play: GooglePlayClient
    let pool: PostgresPool
    let retry: Duration

    func pay(purchaseToken: String, cancellation: HTTPCancellation?, logger: Logger) -> Result {
        do {
            guard let claim = try pool.withConnection({
                try GoogleAcknowledgementStore.claim(purchaseToken: purchaseToken, retry: retry, on: $0)
            }) else { return .notClaimed }
            let outcome = try attempt(claim, cancellation: cancellation)
            if let outcome {
                try pool.withConnection { try GoogleAcknowledgementStore.settle(purchaseToken: purchaseToken, outcome: outcome, on: $0) }
                logger.info("purchase acknowledgement settled", metadata: ["outcome": "\(outcome.rawValue)", "attempt": "\(claim.attempt)"])
                return .settled(outcome)
            }
            let reason = "Google refuses the acknowledgement while the purchase is still pending and entitled"
            try? pool.withConnection { try GoogleAcknowledgementStore.failed(purchaseToken: purchaseToken, reason: reason, on: $0) }
            logger.warning("purchase acknowledgement still owed: \(reason)")
            return .owed(reason: reason)
        } catch {
            let reason = "\(error)"
            try? pool.withConnection { try GoogleAcknowledgementStore.failed(purchaseToken: purchaseToken, reason: reason, on: $0) }
            logger.warning("purchase acknowledgement still owed; retried by GoogleAcknowledgementSweepJob",
                           metadata: ["error": "\(reason)"])
            return .owed(reason: reason)
        }
    }

    /// The outcome that settles the claim, or nil when it stays owed; throws when Google cannot answer now.
    private func attempt(_ claim: GoogleAcknowledgementStore.Claim, cancellation: HTTPCancellation?) throws -> Outcome? {
        switch try play.acknowledge(packageName: claim.packageName, productID: claim.productID,
                                    purchaseToken: claim.purchaseToken, cancellation: cancellation) {
        case .acknowledged:
            return .acknowledged
        case .refused:
            switch try play.subscription(packageName: claim.packageName, purchaseToken: claim.purchaseToken,
                                         cancellation: cancellation) {
            case .notFound:
                return .notNeeded
            case .found(let purchase):
                if purchase.isAcknowledged { return .alreadyAcknowledged }
                if !purchase.entitles(productID: claim.productID, now: Date()) { return .notNeeded }
                return nil
            }
        }
    }
}

/// Pays every owed Google acknowledgement that is due (`google_acknowledgements`), `sweepBatchSize` per batch
/// until none is due, then every owed cancellation of a deleted or deleting account (`google_cancellations`,
/// `GoogleCanceller`, due by `ReceiptServices.now`). Scheduled every minute (`config/schedule.yaml`); safe to run twice or concurrently (each row
/// is claimed before its call). Runs without the ledger: its effects are the rows' own settlement. Then raises the
/// late `RCV-GOOGLE-UNATTRIBUTED` alert, once per purchase, for out-of-app purchases still unattributed 24 h after
/// their RTDN (`alertLateUnattributed`, by `ReceiptServices.now`).
public struct GoogleAcknowledgementSweepJob: Job {
    /// `args: []`.
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "GoogleAcknowledgementSweepJob"
        public init() {}
    }
    public static let options = JobOptions(maxRetries: 3, backoff: .sidekiq, timeout: .seconds(600), usesLedger: false)
    let services: ReceiptServices

    public init(services: ReceiptServices) { self.services = services }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        guard let database = context.database else {
            throw JobError.permanent("this job needs PostgreSQL but the worker runs without a database")
        }
        guard services.googlePlay != nil else { return }  // no Google account configured: nothing can be owed
        let acknowledger = try services.acknowledger(pool: database.pool)
        let cancellation = HTTPCancellation(isCancelled: { [cancellation = context.cancellation] in cancellation.isCancelled })
        var settled = 0, owed = 0
        var seen = Set<String>()
        while !context.isCancelled {
            let batch = try database.pool.withConnection {
                try GoogleAcknowledgementStore.due(limit: services.configuration.sweepBatchSize, on: $0)
            }.filter { !seen.contains($0) }
            if batch.isEmpty { break }
            for token in batch where !context.isCancelled {
                seen.insert(token)
                var logger = context.logger
                logger[metadataKey: "purchase_token"] = "\(Redact.token(token))"
                switch acknowledger.pay(purchaseToken: token, cancellation: cancellation, logger: logger) {
                case .settled: settled += 1
                case .owed: owed += 1
                case .notClaimed: break
                }
            }
        }
        context.logger.info("Google acknowledgement sweep done", metadata: ["settled": "\(settled)", "still_owed": "\(owed)"])
        let (cancelled, cancelOwed) = try payCancellations(pool: database.pool, context: context, cancellation: cancellation)
        if cancelled + cancelOwed > 0 {
            context.logger.info("Google cancellations paid", metadata: ["settled": "\(cancelled)", "still_owed": "\(cancelOwed)"])
        }
        try alertLateUnattributed(pool: database.pool, logger: context.logger)
    }

    /// The second alert for a Google purchase still unattributed (and so unacknowledged)
    /// `PlayNotificationJob.unattributedAlertDelay` after its RTDN, by the receipt services' clock; once per purchase.
    func alertLateUnattributed(pool: PostgresPool, logger: Logger) throws {
        let now = services.now()
        let late = try pool.withConnection {
            try NotificationReplay.lateUnattributed(before: now.addingTimeInterval(-PlayNotificationJob.unattributedAlertDelay),
                                                    now: now, on: $0)
        }
        for (id, since) in late {
            let hours = Int(now.timeIntervalSince(since) / 3600)
            let message = "alert \(PlayNotificationJob.unattributedAlert): a Google purchase made outside the app is still not "
                + "attributed to a user \(hours) h after its notification; Google refunds it 3 days after the purchase "
                + "unless a validation of it (the user's app posting it) grants and acknowledges it"
            logger.error("\(message)", metadata: ["alert": "\(PlayNotificationJob.unattributedAlert)", "message_id": "\(id)",
                                    "unattributed_hours": "\(hours)"])
        }
    }
}
