import Foundation
import WorkersHTTP
import WorkersAppJobs
import WorkersQueue
import Synchronization
import WorkersTestServices
import Workers
import WorkersClient
import XCTest

/// What the typed-contract tests share: a probe job that stands in for a domain class with that class's own
/// `Arguments` type and name (`J.Arguments`, `J.className`), so the real registry and the real runner decode a
/// payload exactly as they do for the real job, and the test reads back the value the job received.
final class DecodedArguments: Sendable {
    private let values = Mutex<[String: any Sendable]>([:])
    func record(_ jid: String, _ value: any Sendable) { values.withLock { $0[jid] = value } }
    func value(_ jid: String) -> (any Sendable)? { values.withLock { $0[jid] } }
}

/// Registered under `J.className`; decodes `J.Arguments` through the registry like `J` itself; records them.
struct ArgumentsProbe<J: Job>: Job {
    typealias Arguments = J.Arguments
    static var className: String { J.className }
    let decoded: DecodedArguments
    func perform(_ arguments: J.Arguments, context: JobContext) throws { decoded.record(context.jid, arguments) }
}

/// One domain class and a typed value of its arguments.
struct TypedCase: Sendable {
    let className: String
    /// Registers the class's probe.
    let register: @Sendable (inout JobRegistry, DecodedArguments) -> Void
    /// The typed value encoded as the payload's `args` (`JobArguments.sidekiqArgs()`).
    let encoded: @Sendable () throws -> [JSONValue]
    /// Whether what a run of `jid` decoded equals the typed value.
    let matches: @Sendable (DecodedArguments, String) -> Bool
    /// The typed value, for messages.
    let valueDescription: String
    /// Enqueues the typed value through the async client (the typed API when the class is its arguments' own;
    /// the string form with the typed `args` for a class sharing another's arguments type).
    let enqueue: @Sendable (WorkersClient) async throws -> String

    static func of<J: Job>(_ job: J.Type, _ value: J.Arguments) -> TypedCase where J.Arguments: Equatable {
        TypedCase(
            className: J.className,
            register: { registry, decoded in registry.register(ArgumentsProbe<J>(decoded: decoded)) },
            encoded: { try value.sidekiqArgs() },
            matches: { decoded, jid in (decoded.value(jid) as? J.Arguments) == value },
            valueDescription: "\(value)",
            enqueue: { client in
                if J.className == J.Arguments.className { return try await client.enqueue(value) }
                return try await client.enqueue(NewJob(J.className, args: try value.sidekiqArgs(), queue: J.Arguments.queue))
            })
    }
}

/// A typed value of every domain class's arguments (more than one for a class whose arguments have variants). A
/// class registered by `DomainJobs` without a case here fails `TypedRoundTripTests.testEveryDomainClassHasATypedCase`.
enum DomainTypedCases {
    static let user = UUID(uuidString: "5f0c6a1e-8a2b-4c3d-9e4f-0a1b2c3d4e5f")!
    static let app = UUID(uuidString: "7d9e3b21-4c5a-4f6e-8b7c-1d2e3f4a5b6c")!
    static let plan = UUID(uuidString: "0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b")!
    static let other = UUID(uuidString: "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f")!
    static let jws = "eyJhbGciOiJFUzI1NiJ9.eyJub3RpZmljYXRpb25UeXBlIjoiVEVTVCJ9.c2lnbmF0dXJl"
    /// base64 of a `DeveloperNotification` (a SUBSCRIPTION_RENEWED of `tok-abc123`).
    static let rtdnData = "eyJ2ZXJzaW9uIjoiMS4wIiwicGFja2FnZU5hbWUiOiJjb20uZXhhbXBsZS5hcHAiLCJldmVudFRpbWVNaWxsaXMiOiIxNzk1MzMwMjkzNDcyIiwic3Vic2NyaXB0aW9uTm90aWZpY2F0aW9uIjp7InZlcnNpb24iOiIxLjAiLCJub3RpZmljYXRpb25UeXBlIjo0LCJwdXJjaGFzZVRva2VuIjoidG9rLWFiYzEyMyIsInN1YnNjcmlwdGlvbklkIjoicHJlbWl1bS5tb250aGx5In19"

    /// By payload shape (the names of the files in Tests/Fixtures/payloads without `ruby-`/`sql-` and `.json`).
    static func shapes() throws -> [String: TypedCase] {
        let appleReceipt = try ValidateReceiptArguments(
            userID: user, appID: app, planID: plan,
            proof: .apple(receiptData: "TUlJVG9RWUpLb1pJaHZjTkFRY0Nv", transactionID: "2000000123456789",
                          originalTransactionID: "2000000123450000", signedTransaction: nil))
        let appleSigned = try ValidateReceiptArguments(
            userID: user, appID: app, planID: plan,
            proof: .apple(receiptData: nil, transactionID: "2000000123456789", originalTransactionID: nil, signedTransaction: jws))
        let google = try ValidateReceiptArguments(
            userID: user, appID: app, planID: plan,
            proof: .google(packageName: "com.example.app", productID: "premium.monthly", purchaseToken: "tok-abc123"))
        let notification = try AppStoreNotificationArguments(signedPayload: jws)
        let play = try PlayNotificationArguments(
            message: .init(data: rtdnData, messageId: "1234567890", attributes: ["origin": "pubsub"]),
            subscription: "projects/example/subscriptions/rtdn")
        let playMinimal = try PlayNotificationArguments(message: .init(data: rtdnData, messageId: "1234567891"))
        let window = try AdRevenueAggregationJob.Arguments(date: "2026-11-20", days: 3)
        return [
            "validate-receipt-apple-receipt-data": .of(ValidateReceiptJob.self, appleReceipt),
            "validate-receipt-apple-signed-transaction": .of(ValidateReceiptJob.self, appleSigned),
            "validate-receipt-google": .of(ValidateReceiptJob.self, google),
            "app-store-notification": .of(AppStoreNotificationJob.self, notification),
            "app-store-notification-alias": .of(AppStoreNotificationJob.self, notification),
            "app-store-notification-both-keys": .of(AppStoreNotificationJob.self, notification),
            "play-notification": .of(PlayNotificationJob.self, play),
            "play-notification-minimal": .of(PlayNotificationJob.self, playMinimal),
            "subscription-expiry-sweep": .of(SubscriptionExpirySweepJob.self, .init()),
            "google-acknowledgement-sweep": .of(GoogleAcknowledgementSweepJob.self, .init()),
            "store-reconciliation": .of(StoreReconciliationJob.self, .init()),
            "privacy-export": .of(PrivacyExportJob.self, .init(userID: user, exportID: other)),
            "account-deletion": .of(AccountDeletionJob.self, .init(userID: user, requestID: other)),
            "account-deletion-uppercase-ids": .of(AccountDeletionJob.self, .init(userID: user, requestID: other)),
            "deletion-requested": .of(DeletionRequestedJob.self, .init(userID: user, requestID: other)),
            "due-deletion-sweep": .of(DueDeletionSweepJob.self, .init()),
            "export-cleanup": .of(ExportCleanupJob.self, .init()),
            "reverse-geocode": .of(ReverseGeocodeJob.self, .init(locationID: other)),
            "location-anonymization": .of(LocationAnonymizationJob.self, .init()),
            "pending-reward": .of(PendingRewardJob.self, .init(pendingRewardID: other)),
            "pending-reward-sweep": .of(PendingRewardSweepJob.self, .init()),
            "ad-revenue-aggregation": .of(AdRevenueAggregationJob.self,
                                          try .init(date: "2026-11-20", app_id: app.uuidString.lowercased(), days: 3)),
            "ad-revenue-aggregation-empty": .of(AdRevenueAggregationJob.self, try .init()),
            "ad-revenue-aggregation-empty-object": .of(AdRevenueAggregationJob.self, try .init()),
            "ad-revenue-aggregation-schedule-and-tick": .of(AdRevenueAggregationJob.self, window),
            "ad-revenue-nightly": .of(AdRevenueNightlyJob.self, window),
            "ad-revenue-day-complete": .of(AdRevenueDayCompleteJob.self,
                                           try .init(status: .init(bid: "b-ad-revenue-2026-11-20", total: 4, pending: 0),
                                                     options: .init(day: "2026-11-20", apps: 4))),
            "ad-revenue-day-check": .of(AdRevenueDayCheckJob.self, try .init(date: "2026-11-20")),
        ]
    }
}
