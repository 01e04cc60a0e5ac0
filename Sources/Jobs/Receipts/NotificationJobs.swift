import Foundation
import WorkersHTTP
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// `AppStoreNotificationJob` arguments: `[{"signedPayload": JWS}]`, the App Store Server Notifications V2 POST body
/// exactly as Apple sends it (`ResponseBodyV2` in apple/app-store-server-library-swift,
/// `Sources/AppStoreServerLibrary/Models/ResponseBodyV2.swift`). `signed_payload` is accepted as an alias for
/// producers written against the earlier contract; when both are present they must be equal.
/// A value is valid by construction (a compact JWS of at most 1 MB; otherwise `JobError.badInput`).
public struct AppStoreNotificationArguments: JobArguments, Equatable {
    public static let className = "AppStoreNotificationJob"
    /// The notification's JWS (`signedPayload`).
    public let signedPayload: String
    public init(signedPayload: String) throws(JobError) {
        guard signedPayload.split(separator: ".", omittingEmptySubsequences: false).count == 3,
              signedPayload.count <= 1_000_000 else {
            throw .badInput("signedPayload is not a compact JWS")
        }
        self.signedPayload = signedPayload
    }

    enum CodingKeys: String, CodingKey {
        case signedPayload, signed_payload
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let apple = try c.decodeIfPresent(String.self, forKey: .signedPayload)
        let alias = try c.decodeIfPresent(String.self, forKey: .signed_payload)
        switch (apple, alias) {
        case let (a?, b?) where a != b:
            throw DecodingError.dataCorruptedError(forKey: .signed_payload, in: c,
                                                   debugDescription: "signedPayload and signed_payload differ")
        case let (a?, _), let (nil, a?):
            try self.init(signedPayload: a)
        case (nil, nil):
            throw DecodingError.keyNotFound(CodingKeys.signedPayload, .init(
                codingPath: c.codingPath, debugDescription: "the body has no signedPayload (Apple's key) nor signed_payload"))
        }
    }

    /// Apple's key only (`signedPayload`), as Apple sends it.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(signedPayload, forKey: .signedPayload)
    }
}

/// Applies an App Store Server Notification V2: verified (chain, signature, bundle id, environment), de-duplicated
/// by `notificationUUID`, then the subscription it names is upserted like a validation (renewal, expiry, grace
/// period, billing retry, refund, revocation) from the notification's transaction or from Get All Subscription
/// Statuses; a notification about a transaction older than the period the row holds only records its event
/// (`AppleNotificationRecency`).
///
/// A notification whose subscription we do not know yet (`original_transaction_id` never validated) is recorded as
/// `unmatched` and changes nothing: without a validated receipt we do not know the user. Signed data that does not
/// verify goes to `dead` with the reason.
public struct AppStoreNotificationJob: Job {
    public static let options = StoreCallLimits.options(
        JobOptions(maxRetries: 25, backoff: .sidekiq, timeout: .seconds(60), usesLedger: true), store: "apple")
    let services: ReceiptServices

    public init(services: ReceiptServices) { self.services = services }

    public func perform(_ arguments: AppStoreNotificationArguments, context: JobContext) throws {
        let verifier = try services.requireVerifier()
        let notification: AppleNotification
        do { notification = try verifier.verifyNotification(arguments.signedPayload) } catch {
            context.logger.warning("security alert RCV-JWS: App Store notification rejected: \(error.description)",
                                   metadata: ["alert": "RCV-JWS", "security": "true"])
            throw JobError.permanent("App Store notification rejected: \(error.description)")
        }
        var logger = context.logger
        logger[metadataKey: "notification"] = "\(notification.notificationUUID)"
        logger[metadataKey: "type"] = "\(notification.notificationType)"
        let id = notification.notificationUUID
        if try context.withConnection({ try SubscriptionStore.notificationSeen(store: .apple, id: id, on: $0) }) {
            logger.info("duplicate App Store notification skipped")
            return
        }
        let environment = notification.data?.environment
        var transaction: AppleTransaction?
        var renewal: AppleRenewalInfo?
        do {
            if let s = notification.data?.signedTransactionInfo {
                transaction = try verifier.verifyTransaction(s, expectedEnvironment: environment)
            }
            if let s = notification.data?.signedRenewalInfo {
                renewal = try verifier.verifyRenewalInfo(s, expectedEnvironment: environment)
            }
        } catch {
            throw JobError.permanent("App Store notification \(id): embedded signed data rejected: \(error.description)")
        }
        let now = services.now()
        let signedAt = notification.signedDate?.millisecondsDate ?? now
        let type = notification.notificationType, subtype = notification.subtype
        let state = transaction.flatMap {
            AppleStateDerivation.state(transaction: $0, renewal: renewal, statusCode: notification.data?.status,
                                       notificationType: type, subtype: subtype, stateAt: signedAt, now: now)
        }
        // Which transaction the row follows (AppleNotificationRecency): decided on the row as read here, and again on
        // the row locked in the transaction below; Apple is asked (outside the transaction) only when it decides so.
        var latest: AppleLatestStatus?
        if let state, let t = transaction, Self.changesState(type), let api = services.appStoreAPI,
           let held = try context.withConnection({ c in
               try SubscriptionStore.subscription(store: .apple, key: state.key, on: c).map { try SubscriptionStore.periodEnd($0.id, on: c) }
           }),
           AppleNotificationRecency.decide(type: type, subtype: subtype, transaction: t, statusCode: notification.data?.status,
                                           heldPeriodEnd: held, statusesAvailable: true) == .fromStatuses {
            latest = try AppleLatestStatus.read(api, verifier: verifier, originalTransactionID: state.key,
                                                environment: environment ?? "Production", cancellation: context.cancellation)
        }
        let fromStatuses = latest.flatMap { l in
            AppleStateDerivation.state(transaction: l.transaction, renewal: l.renewal, statusCode: l.status,
                                       notificationType: type == "REVOKE" ? type : nil,
                                       stateAt: l.transaction.signedDate?.millisecondsDate ?? signedAt, now: now)
        }
        var outcomeText = "ignored"
        var unknownKindCount: Int64?
        var detachedRenewal: UUID?  // a renewal on a row an erasure detached, alerted after the commit (once per row)
        try context.transaction { c in
            guard try SubscriptionStore.claimNotification(store: .apple, id: id, type: type, subtype: subtype, on: c) else { return }
            if !UnknownNotificationKind.appleTypes.contains(type) {
                unknownKindCount = try UnknownNotificationKind.count(store: .apple, kind: type, on: c)
            }
            guard let state, let t = transaction else { outcomeText = "ignored"; return }
            guard let existing = try SubscriptionStore.subscription(store: .apple, key: state.key, on: c) else {
                guard Self.changesState(type) else { outcomeText = "ignored"; return }
                try NotificationReplay.keep(store: .apple, id: id, key: state.key,
                                            arguments: [["signedPayload": arguments.signedPayload]], on: c)
                try SubscriptionStore.finishNotification(store: .apple, id: id, outcome: "unmatched", subscriptionID: nil, on: c)
                outcomeText = "unmatched"
                return
            }
            let heldEnd = try SubscriptionStore.periodEnd(existing.id, on: c)
            let recency = AppleNotificationRecency.decide(type: type, subtype: subtype, transaction: t,
                                                          statusCode: notification.data?.status, heldPeriodEnd: heldEnd,
                                                          statusesAvailable: services.appStoreAPI != nil)
            var eventData = ["source": "app_store_notification", "notification_type": type, "subtype": subtype ?? "",
                             "transaction_id": state.transactionID, "status": state.status.rawValue,
                             "applied_from": recency == .older ? "none" : (fromStatuses == nil ? "notification" : recency.rawValue)]
            if recency == .older { eventData["scope"] = AppleRefundScope.pastTransaction.rawValue }
            let recordOnly = { (eventType: String, outcome: String) in
                try SubscriptionStore.event(existing.id, type: eventType, data: eventData, idempotencyKey: "apple:notification:\(id)", on: c)
                outcomeText = outcome
                try SubscriptionStore.finishNotification(store: .apple, id: id, outcome: outcome, subscriptionID: existing.id, on: c)
            }
            // Types that say nothing about the subscription's state (CONSUMPTION_REQUEST, PRICE_INCREASE,
            // REFUND_DECLINED…): their event is recorded, nothing else.
            guard Self.changesState(type) else {
                try recordOnly(Self.eventType(type, subtype: subtype, status: state.status), "ignored")
                return
            }
            // A refund names one transaction; Apple's status (the notification's, else Get All Subscription
            // Statuses') decides whether it is the period the user holds (AppleRefund.swift).
            let statusCode = notification.data?.status ?? latest?.status
            if type == "REFUND" {
                let scope = recency == .older || (latest.map { $0.transaction.transactionId != t.transactionId } ?? false)
                    ? AppleRefundScope.pastTransaction
                    : AppleRefundScope.decide(statusCode: statusCode, refunded: t, heldPeriodEnd: heldEnd)
                eventData.merge(AppleRefundScope.eventData(t, scope: scope, statusCode: statusCode)) { _, new in new }
                if scope == .pastTransaction {
                    // An earlier transaction refunded: the event records it; the period the user holds stands.
                    try recordOnly("transaction_refunded", recency == .older ? "stale" : "applied")
                    return
                }
            }
            // An older transaction (a past renewal, a late delivery): its event, and the row as it is.
            if recency == .older {
                try recordOnly(Self.eventType(type, subtype: subtype, status: state.status), "stale")
                return
            }
            let applied = recency == .fromStatuses ? fromStatuses ?? state : state
            let outcome = try SubscriptionStore.upsert(applied, owner: existing.owner, on: c)
            if outcome.applied {
                try SubscriptionStore.applyEntitlement(subscriptionID: outcome.subscriptionID, userID: existing.userID,
                                                       entitled: applied.status.isEntitled, on: c)
            }
            eventData["status"] = applied.status.rawValue
            if applied.transactionID != state.transactionID { eventData["latest_transaction_id"] = applied.transactionID }
            let appliedEvent = Self.eventType(type, subtype: subtype, status: applied.status)
            try SubscriptionStore.event(outcome.subscriptionID, type: appliedEvent,
                                        data: eventData, idempotencyKey: "apple:notification:\(id)", on: c)
            if try DetachedRenewal.markFirst(subscriptionID: outcome.subscriptionID, eventType: appliedEvent, on: c) {
                detachedRenewal = outcome.subscriptionID
            }
            outcomeText = outcome.applied ? "applied" : "stale"
            try SubscriptionStore.finishNotification(store: .apple, id: id, outcome: outcomeText,
                                                     subscriptionID: outcome.subscriptionID, on: c)
        }
        if let unknownKindCount { UnknownNotificationKind.raise(store: .apple, kind: type, count: unknownKindCount, logger: logger) }
        logger.info("App Store notification handled", metadata: ["outcome": "\(outcomeText)"])
        if let detachedRenewal { DetachedRenewal.raise(store: "apple", subscriptionID: detachedRenewal, logger: logger) }
    }

    /// Types that say something about the subscription's state; others (CONSUMPTION_REQUEST, PRICE_INCREASE,
    /// REFUND_DECLINED, …) record their event on a known subscription and change nothing (TEST: nothing at all).
    static func changesState(_ type: String) -> Bool {
        ["SUBSCRIBED", "DID_RENEW", "DID_CHANGE_RENEWAL_STATUS", "DID_CHANGE_RENEWAL_PREF", "OFFER_REDEEMED", "EXPIRED",
         "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED", "REFUND", "REVOKE", "REFUND_REVERSED", "RENEWAL_EXTENDED"].contains(type)
    }

    static func eventType(_ type: String, subtype: String?, status: SubscriptionStatus) -> String {
        switch type {
        case "SUBSCRIBED": return status.validationEvent
        case "DID_RENEW": return "renewed"
        case "EXPIRED", "GRACE_PERIOD_EXPIRED": return "expired"
        case "DID_FAIL_TO_RENEW": return subtype == "GRACE_PERIOD" ? "grace_period" : "billing_retry"
        case "REFUND": return "refunded"
        case "REVOKE": return "revoked"
        case "DID_CHANGE_RENEWAL_STATUS": return subtype == "AUTO_RENEW_DISABLED" ? "auto_renew_disabled" : "auto_renew_enabled"
        default: return type.lowercased()
        }
    }
}

/// `PlayNotificationJob` arguments: `[{"message": {"data", "messageId", "attributes"}}]`, the Pub/Sub push body
/// of a Real-time Developer Notification (`data` = base64 of the DeveloperNotification JSON).
///
/// A value is valid by construction: a `messageId` of 1...256 characters and `data` that decodes to a
/// `DeveloperNotification` (otherwise `JobError.badInput`).
public struct PlayNotificationArguments: JobArguments, Equatable {
    public static let className = "PlayNotificationJob"
    public struct Message: Codable, Sendable, Equatable {
        public let data: String
        public let messageId: String
        public let attributes: [String: String]?
        public init(data: String, messageId: String, attributes: [String: String]? = nil) {
            self.data = data
            self.messageId = messageId
            self.attributes = attributes
        }
    }
    public let message: Message
    public let subscription: String?

    enum CodingKeys: String, CodingKey { case message, subscription }

    public init(message: Message, subscription: String? = nil) throws(JobError) {
        guard !message.messageId.isEmpty, message.messageId.count <= 256 else { throw .badInput("message.messageId is empty or too long") }
        _ = try Self.notification(message)
        self.message = message
        self.subscription = subscription
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        try self.init(message: try c.decode(Message.self, forKey: .message),
                      subscription: try c.decodeIfPresent(String.self, forKey: .subscription))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(message, forKey: .message)
        try c.encodeIfPresent(subscription, forKey: .subscription)
    }

    /// The decoded `DeveloperNotification`.
    public func notification() throws(JobError) -> DeveloperNotification { try Self.notification(message) }

    private static func notification(_ message: Message) throws(JobError) -> DeveloperNotification {
        guard let bytes = Data(base64Encoded: message.data) ?? Base64URL.decode(message.data) else {
            throw .badInput("message.data is not base64")
        }
        do { return try JSONDecoder().decode(DeveloperNotification.self, from: bytes) } catch {
            throw .badInput("message.data is not a DeveloperNotification: \(error)")
        }
    }
}

/// Google's RTDN payload (one of the notification kinds is set).
public struct DeveloperNotification: Decodable, Sendable {
    public struct SubscriptionNotification: Decodable, Sendable {
        public let notificationType: Int
        public let purchaseToken: String
        public let subscriptionId: String?
    }
    public struct VoidedPurchaseNotification: Decodable, Sendable {
        public let purchaseToken: String
        public let orderId: String?
    }
    public struct TestNotification: Decodable, Sendable { public let version: String? }
    public let version: String?
    public let packageName: String
    /// Google's reference types it `long` while its examples send a string: either is accepted; a value that is
    /// neither a number nor a numeric string is nil (the job's clock is used instead).
    public let eventTimeMillis: Int64?
    public let subscriptionNotification: SubscriptionNotification?
    public let voidedPurchaseNotification: VoidedPurchaseNotification?
    public let testNotification: TestNotification?
    /// The notification kinds the message carries (its keys other than `version`, `packageName`, `eventTimeMillis`),
    /// sorted: known ones and any Google adds later (`UnknownNotificationKind`).
    public let kinds: [String]

    enum CodingKeys: String, CodingKey {
        case version, packageName, eventTimeMillis, subscriptionNotification, voidedPurchaseNotification, testNotification
    }

    private struct AnyKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        version = try c.decodeIfPresent(String.self, forKey: .version)
        packageName = try c.decode(String.self, forKey: .packageName)
        if let number = try? c.decodeIfPresent(Int64.self, forKey: .eventTimeMillis) {
            eventTimeMillis = number
        } else {
            eventTimeMillis = (try? c.decodeIfPresent(String.self, forKey: .eventTimeMillis)).flatMap { Int64($0) }
        }
        subscriptionNotification = try c.decodeIfPresent(SubscriptionNotification.self, forKey: .subscriptionNotification)
        voidedPurchaseNotification = try c.decodeIfPresent(VoidedPurchaseNotification.self, forKey: .voidedPurchaseNotification)
        testNotification = try c.decodeIfPresent(TestNotification.self, forKey: .testNotification)
        kinds = try decoder.container(keyedBy: AnyKey.self).allKeys.map(\.stringValue)
            .filter { !["version", "packageName", "eventTimeMillis"].contains($0) }.sorted()
    }
}

/// Applies a Google Play RTDN: de-duplicated by Pub/Sub `messageId`; the notification only says "something
/// changed", so the state is read again with `subscriptionsv2.get` and upserted; a `linkedPurchaseToken` ends the
/// replaced subscription; a voided order revokes the period only when Google no longer entitles (`applyVoided`). Purchases
/// still unacknowledged and entitled owe an acknowledgement, recorded in the commit and paid after it (here or by
/// `GoogleAcknowledgementSweepJob`). A purchase token we never saw is read from Google too and attributed to a user
/// (`applyOutOfApp`, `GoogleAttribution`); one Google does not know either is recorded `unmatched`. Both kinds are
/// kept for a replay when a validation of the token commits (`NotificationReplay`).
public struct PlayNotificationJob: Job {
    public static let options = StoreCallLimits.options(
        JobOptions(maxRetries: 25, backoff: .sidekiq, timeout: .seconds(60), usesLedger: true), store: "google")
    let services: ReceiptServices

    public init(services: ReceiptServices) { self.services = services }

    public func perform(_ arguments: PlayNotificationArguments, context: JobContext) throws {
        let args = arguments
        let notification = try args.notification()
        let id = args.message.messageId
        var logger = context.logger
        logger[metadataKey: "message_id"] = "\(id)"
        try services.checkPackage(notification.packageName)
        if try context.withConnection({ try SubscriptionStore.notificationSeen(store: .google, id: id, on: $0) }) {
            logger.info("duplicate Play notification skipped")
            return
        }
        // Outside 1970–9999 (a hostile or broken eventTimeMillis) PostgreSQL could not store it: our clock instead.
        let eventTime = Bounded.epochSeconds(notification.eventTimeMillis.map { Double($0) / 1000 })
            .map(Date.init(timeIntervalSince1970:)) ?? services.now()
        let cancellation = HTTPCancellation(isCancelled: { [cancellation = context.cancellation] in cancellation.isCancelled })

        if let voided = notification.voidedPurchaseNotification {
            try applyVoided(voided, packageName: notification.packageName, id: id, eventTime: eventTime,
                            replay: [["message": ["data": args.message.data, "messageId": id]]], context: context,
                            cancellation: cancellation, logger: logger)
            return
        }
        guard let sub = notification.subscriptionNotification else {
            let kind = notification.testNotification != nil ? "test"
                : notification.kinds.first.map(UnknownNotificationKind.shown) ?? "other"
            try record(id: id, type: kind, context: context) { _ in ("ignored", nil) }
            if let unknown = notification.kinds.first(where: { !UnknownNotificationKind.googleKinds.contains($0) }) {
                try alertUnknown(UnknownNotificationKind.shown(unknown), context: context, logger: logger)
            }
            return
        }
        defer {
            if !UnknownNotificationKind.googleSubscriptionTypes.contains(sub.notificationType) {
                try? alertUnknown("subscription_\(sub.notificationType)", context: context, logger: logger)
            }
        }
        logger[metadataKey: "purchase_token"] = "\(Redact.token(sub.purchaseToken))"
        let known = try context.withConnection({
            try SubscriptionStore.subscription(store: .google, key: sub.purchaseToken, on: $0)
        })
        let type = "subscription_\(sub.notificationType)"
        // What a replay needs when the purchase cannot be applied now (NotificationReplay): the RTDN itself.
        let replay: [[String: Any]] = [["message": ["data": args.message.data, "messageId": id]]]
        let play = try services.requireGoogle()
        let purchase: GoogleSubscriptionPurchase
        switch try play.subscription(packageName: notification.packageName, purchaseToken: sub.purchaseToken, cancellation: cancellation) {
        case .found(let p): purchase = p
        case .notFound(let status, let reason):
            guard let known else {
                try record(id: id, type: type, context: context) { c in
                    try NotificationReplay.keep(store: .google, id: id, key: sub.purchaseToken, arguments: replay, on: c)
                    return ("unmatched", nil)
                }
                logger.info("Play notification for a purchase token neither we nor Google know recorded as unmatched",
                            metadata: ["status": "\(status)"])
                return
            }
            try record(id: id, type: type, context: context) { _ in ("ignored", known.id) }
            logger.warning("Play notification: purchase no longer readable (HTTP \(status)): \(reason)")
            return
        }
        guard let existing = known else {
            try applyOutOfApp(purchase, notification: notification, sub: sub, id: id, eventTime: eventTime, replay: replay,
                              context: context, cancellation: cancellation, logger: logger)
            return
        }
        guard var state = GoogleStateDerivation.state(purchase, purchaseToken: sub.purchaseToken, productID: existing.productID,
                                                      now: services.now()) else {
            throw StoreUnavailable("Google Play API", "state \(purchase.subscriptionState ?? "<none>") or product not readable")
        }
        if sub.notificationType == 12 { state.revoke(at: eventTime) }  // REVOKED: refunded and revoked before it expired
        let finalState = state
        // Owed with the commit, paid after it (here or by GoogleAcknowledgementSweepJob): see ValidateReceiptJob.
        let owesAcknowledgement = purchase.needsAcknowledgement && finalState.status.isEntitled
        var detachedRenewal = false  // a renewal on a row an erasure detached, alerted after the commit (once per row)
        try record(id: id, type: "subscription_\(sub.notificationType)", context: context) { c in
            if try GooglePurchaseEffects.wasReplaced(existing.id, on: c) {
                // An older token of a linkedPurchaseToken chain: its event, and the row and the user as they are.
                try SubscriptionStore.event(existing.id, type: Self.eventType(sub.notificationType),
                                            data: ["source": "play_notification", "notification_type": "\(sub.notificationType)",
                                                   "status": finalState.status.rawValue, "scope": "replaced_token"],
                                            idempotencyKey: "google:notification:\(id)", on: c)
                return ("stale", existing.id)
            }
            try GooglePurchaseEffects.endReplaced(by: purchase, token: sub.purchaseToken, at: eventTime, on: c)
            if owesAcknowledgement {
                try GoogleAcknowledgementStore.owe(purchaseToken: sub.purchaseToken, packageName: notification.packageName,
                                                   productID: existing.productID, subscriptionID: existing.id, on: c)
            }
            let outcome = try SubscriptionStore.upsert(finalState, owner: existing.owner, on: c)
            if outcome.applied {
                try SubscriptionStore.applyEntitlement(subscriptionID: outcome.subscriptionID, userID: existing.userID,
                                                       entitled: finalState.status.isEntitled, on: c)
            }
            try SubscriptionStore.event(outcome.subscriptionID, type: Self.eventType(sub.notificationType),
                                        data: ["source": "play_notification", "notification_type": "\(sub.notificationType)",
                                               "status": finalState.status.rawValue],
                                        idempotencyKey: "google:notification:\(id)", on: c)
            detachedRenewal = try DetachedRenewal.markFirst(subscriptionID: outcome.subscriptionID, eventType: Self.eventType(sub.notificationType), on: c)
            return (outcome.applied ? "applied" : "stale", outcome.subscriptionID)
        }
        logger.info("Play notification handled", metadata: ["status": "\(finalState.status.rawValue)"])
        if detachedRenewal { DetachedRenewal.raise(store: "google", subscriptionID: existing.id, logger: logger) }
        if owesAcknowledgement, let database = context.database {
            _ = try services.acknowledger(pool: database.pool).pay(purchaseToken: sub.purchaseToken, cancellation: cancellation,
                                                                   logger: logger)
        }
    }

    /// The alert of a Google purchase no user of ours could be found for while Google waits for its acknowledgement
    /// (Google refunds it 3 days after the purchase): raised at once by the RTDN, and again by
    /// `GoogleAcknowledgementSweepJob` when it is still unattributed `unattributedAlertDelay` later.
    static let unattributedAlert = "RCV-GOOGLE-UNATTRIBUTED"
    /// 24 hours: the second alert leaves two of Google's three days to attribute the purchase.
    static let unattributedAlertDelay: TimeInterval = 86_400

    /// A purchase token we never saw (N1: a resubscribe in the Play Store, a promo code, a purchase the app never
    /// posted): attributed by `GoogleAttribution`, then granted like a validation (subscription, entitlement, event,
    /// receipt row, `GooglePurchaseEffects.endReplaced`) with its acknowledgement owed, all in the ledger transaction;
    /// or, when no user can be found, recorded `unattributed` (kept for a replay) and alerted.
    private func applyOutOfApp(_ purchase: GoogleSubscriptionPurchase, notification: DeveloperNotification,
                               sub: DeveloperNotification.SubscriptionNotification, id: String, eventTime: Date,
                               replay: [[String: Any]], context: JobContext, cancellation: HTTPCancellation,
                               logger: Logger) throws {
        let token = sub.purchaseToken, package = notification.packageName, type = "subscription_\(sub.notificationType)"
        let now = services.now()
        let attribution = try context.withConnection { try GoogleAttribution.attribute(purchase, token: token, on: $0) }
        let found: GoogleAttribution
        switch attribution {
        case .success(let a): found = a
        case .failure(let why):
            let entitled = (purchase.lineItems ?? []).contains { line in
                line.productId.map { purchase.entitles(productID: $0, now: now) } ?? false
            }
            let owes = purchase.needsAcknowledgement && entitled
            try record(id: id, type: type, context: context) { c in
                try NotificationReplay.keep(store: .google, id: id, key: token, arguments: replay,
                                            owesAcknowledgementSince: owes ? now : nil, on: c)
                return ("unattributed", nil)
            }
            if owes {
                let message = "alert \(Self.unattributedAlert): a Google purchase made outside the app cannot be attributed to a user "
                    + "and Google refunds it unless it is acknowledged within 3 days: \(why.reason)"
                logger.error("\(message)", metadata: ["alert": "\(Self.unattributedAlert)", "notification_type": "\(sub.notificationType)"])
            } else {
                logger.info("Play notification for an unattributable purchase that owes no acknowledgement recorded",
                            metadata: ["reason": "\(why.reason)"])
            }
            return
        }
        guard var state = GoogleStateDerivation.state(purchase, purchaseToken: token, productID: found.productID, now: now) else {
            throw StoreUnavailable("Google Play API", "unknown subscriptionState \(purchase.subscriptionState ?? "<none>")")
        }
        if sub.notificationType == 12 { state.revoke(at: eventTime) }  // REVOKED
        let finalState = state
        let owesAcknowledgement = purchase.needsAcknowledgement && finalState.status.isEntitled
        try record(id: id, type: type, context: context) { c in
            // A validation of the same token may have committed since the lookup: its owner stands.
            let owner = try SubscriptionStore.subscription(store: .google, key: token, on: c)?.owner ?? found.owner
            try GooglePurchaseEffects.endReplaced(by: purchase, token: token, at: eventTime, on: c)
            let outcome = try SubscriptionStore.upsert(finalState, owner: owner, on: c)
            if owesAcknowledgement {
                try GoogleAcknowledgementStore.owe(purchaseToken: token, packageName: package, productID: found.productID,
                                                   subscriptionID: outcome.subscriptionID, on: c)
            }
            if outcome.applied {
                try SubscriptionStore.applyEntitlement(subscriptionID: outcome.subscriptionID, userID: owner.userID,
                                                       entitled: finalState.status.isEntitled, on: c)
            }
            try SubscriptionStore.event(outcome.subscriptionID, type: Self.eventType(sub.notificationType),
                                        data: ["source": "play_notification", "notification_type": "\(sub.notificationType)",
                                               "status": finalState.status.rawValue, "attributed_by": found.source.rawValue],
                                        idempotencyKey: "google:notification:\(id)", on: c)
            try SubscriptionStore.validatedReceipt(finalState, owner: owner, subscriptionID: outcome.subscriptionID,
                                                   receiptData: token, on: c)
            return (outcome.applied ? "applied" : "stale", outcome.subscriptionID)
        }
        logger.info("Play notification for a purchase made outside the app granted",
                    metadata: ["status": "\(finalState.status.rawValue)", "attributed_by": "\(found.source.rawValue)"])
        if owesAcknowledgement, let database = context.database {
            _ = try services.acknowledger(pool: database.pool).pay(purchaseToken: token, cancellation: cancellation, logger: logger)
        }
    }

    /// A voided purchase (refund or chargeback of one order). Google's state is read again
    /// (`GooglePurchaseEffects.voidRevokesPeriod`): Google no longer entitles (revoked, expired, unknown) →
    /// `refunded`, user `free`; Google still entitles (a refund without revoke, a chargeback on an older renewal) →
    /// the period Google reports stands, its state is applied and an `order_voided` event records the order (`order`:
    /// current or older). Only a revoke (RTDN 12, or Google's state) removes the entitlement.
    private func applyVoided(_ voided: DeveloperNotification.VoidedPurchaseNotification, packageName: String, id: String,
                             eventTime: Date, replay: [[String: Any]], context: JobContext, cancellation: HTTPCancellation,
                             logger: Logger) throws {
        var logger = logger
        logger[metadataKey: "purchase_token"] = "\(Redact.token(voided.purchaseToken))"
        guard let existing = try context.withConnection({
            try SubscriptionStore.subscription(store: .google, key: voided.purchaseToken, on: $0)
        }) else {
            // Nothing to revoke yet; kept so that a validation of the token replays it (NotificationReplay).
            try record(id: id, type: "voided_purchase", context: context) { c in
                try NotificationReplay.keep(store: .google, id: id, key: voided.purchaseToken, arguments: replay, on: c)
                return ("unmatched", nil)
            }
            return
        }
        var purchase: GoogleSubscriptionPurchase?
        if case .found(let p) = try services.requireGoogle().subscription(packageName: packageName, purchaseToken: voided.purchaseToken,
                                                                          cancellation: cancellation) {
            purchase = p
        }
        let now = services.now()
        let revokes = purchase.map {
            GooglePurchaseEffects.voidRevokesPeriod(purchase: $0, productID: existing.productID, now: now)
        } ?? true
        let current = purchase.flatMap {
            GoogleStateDerivation.state($0, purchaseToken: voided.purchaseToken, productID: existing.productID, now: now)
        }
        try record(id: id, type: "voided_purchase", context: context) { c in
            if revokes {
                try SubscriptionStore.markRefunded(existing.id, at: eventTime, on: c)
                try SubscriptionStore.applyEntitlement(subscriptionID: existing.id, userID: existing.userID, entitled: false, on: c)
                try SubscriptionStore.event(existing.id, type: "refunded",
                                            data: ["source": "play_notification", "kind": "voided", "order_id": voided.orderId ?? ""],
                                            idempotencyKey: "google:notification:\(id)", on: c)
                return ("applied", existing.id)
            }
            if let current {
                let outcome = try SubscriptionStore.upsert(current, owner: existing.owner, on: c)
                if outcome.applied {
                    try SubscriptionStore.applyEntitlement(subscriptionID: existing.id, userID: existing.userID,
                                                           entitled: current.status.isEntitled, on: c)
                }
            }
            let order = purchase.map {
                GooglePurchaseEffects.voidIsCurrentOrder(voidedOrderID: voided.orderId, purchase: $0, productID: existing.productID)
                    ? "current" : "older"
            } ?? "unknown"
            try SubscriptionStore.event(existing.id, type: "order_voided",
                                        data: ["source": "play_notification", "kind": "voided", "current_period": "kept",
                                               "order_id": voided.orderId ?? "", "order": order],
                                        idempotencyKey: "google:notification:\(id)", on: c)
            return ("applied", existing.id)
        }
        logger.info("Play voided purchase handled", metadata: ["revoked": "\(revokes)"])
    }

    /// The alert of a kind this release does not know, with how many of it are recorded (`UnknownNotificationKind`).
    private func alertUnknown(_ kind: String, context: JobContext, logger: Logger) throws {
        let count = try context.withConnection { try UnknownNotificationKind.count(store: .google, kind: kind, on: $0) }
        UnknownNotificationKind.raise(store: .google, kind: kind, count: count, logger: logger)
    }

    /// Claims the message id and runs `body` in the ledger transaction; a duplicate claim skips `body`.
    private func record(id: String, type: String, context: JobContext,
                        _ body: (PostgresConnection) throws -> (outcome: String, subscriptionID: UUID?)) throws {
        try context.transaction { c in
            guard try SubscriptionStore.claimNotification(store: .google, id: id, type: type, subtype: nil, on: c) else { return }
            let (outcome, subscriptionID) = try body(c)
            try SubscriptionStore.finishNotification(store: .google, id: id, outcome: outcome, subscriptionID: subscriptionID, on: c)
        }
    }

    /// Subscription RTDN `notificationType` → event type.
    static func eventType(_ type: Int) -> String {
        switch type {
        case 1: return "recovered"
        case 2: return "renewed"
        case 3: return "cancelled"
        case 4: return "purchased"
        case 5: return "on_hold"
        case 6: return "grace_period"
        case 7: return "restarted"
        case 9: return "deferred"
        case 10: return "paused"
        case 11: return "pause_schedule_changed"
        case 12: return "revoked"
        case 13: return "expired"
        case 20: return "pending_purchase_cancelled"
        default: return "play_notification_\(type)"
        }
    }
}
