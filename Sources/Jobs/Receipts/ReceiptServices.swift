import Foundation
import WorkersHTTP
import Logging
import WorkersStorage
import Workers

/// The store clients built once from a `ReceiptsConfiguration`, shared by every receipt job and pool thread.
///
/// Immutable after `init`; the only mutable state is the Google access-token cache, which guards itself.
public final class ReceiptServices: Sendable {
    public let configuration: ReceiptsConfiguration
    let http: StoreHTTP
    let verifyReceipt: AppleVerifyReceiptClient
    let appStoreAPI: AppStoreServerAPIClient?
    /// Nil when no bundle id is configured (signed Apple data cannot be checked).
    let appleVerifier: AppleSignedDataVerifier?
    /// Verifier of StoreKit 1 app receipts (proof of possession in Server API mode); nil without a bundle id.
    let appleReceiptVerifier: AppleAppReceiptVerifier?
    public let googleTokens: GoogleAccessTokenProvider?
    let googlePlay: GooglePlayClient?
    /// The receipt jobs' clock for decisions about time (Google's grace bridge, the unattributed-purchase alert);
    /// tests set it, production uses `Date.init`.
    public let now: @Sendable () -> Date

    public init(configuration: ReceiptsConfiguration, http client: HTTPClient,
                now: @escaping @Sendable () -> Date = { Date() }) throws {
        if let problem = configuration.appleSignedDataProblem { throw problem }
        self.configuration = configuration
        self.now = now
        let http = StoreHTTP(client: client, timeout: configuration.requestTimeout)
        self.http = http
        verifyReceipt = AppleVerifyReceiptClient(http: http, productionURL: configuration.appleVerifyReceiptProductionURL,
                                                 sandboxURL: configuration.appleVerifyReceiptSandboxURL,
                                                 sharedSecret: configuration.appleSharedSecret)
        if let bundle = configuration.appleBundleID {
            appleVerifier = try AppleSignedDataVerifier(rootCertificatesDER: configuration.appleRootCertificates,
                                                        bundleID: bundle,
                                                        allowedEnvironments: configuration.appleAllowedEnvironments,
                                                        appAppleID: configuration.appleAppAppleID)
            appleReceiptVerifier = try AppleAppReceiptVerifier(rootCertificatesDER: configuration.appleReceiptRootCertificates,
                                                               bundleID: bundle)
        } else {
            appleVerifier = nil
            appleReceiptVerifier = nil
        }
        if let credentials = configuration.appleCredentials, let bundle = configuration.appleBundleID {
            appStoreAPI = AppStoreServerAPIClient(http: http, productionURL: configuration.appleServerAPIProductionURL,
                                                  sandboxURL: configuration.appleServerAPISandboxURL,
                                                  credentials: credentials, bundleID: bundle)
        } else {
            appStoreAPI = nil
        }
        if let account = configuration.googleServiceAccount {
            let tokens = GoogleAccessTokenProvider(account: account, tokenURL: configuration.effectiveGoogleTokenURL, http: http)
            googleTokens = tokens
            googlePlay = GooglePlayClient(http: http, tokens: tokens, baseURL: configuration.googlePlayAPIURL)
        } else {
            googleTokens = nil
            googlePlay = nil
        }
    }

    func requireVerifier() throws -> AppleSignedDataVerifier {
        guard let appleVerifier else {
            // A configuration fault on our side: retried (a configured worker may take it), never dead.
            throw UnconfiguredJob.NotConfigured(area: "receipts",
                                                problem: "RECEIPTS_APPLE_BUNDLE_ID is not set: signed App Store data cannot be verified")
        }
        return appleVerifier
    }

    func requireGoogle() throws -> GooglePlayClient {
        guard let googlePlay else {
            throw UnconfiguredJob.NotConfigured(area: "receipts",
                                                problem: "RECEIPTS_GOOGLE_SERVICE_ACCOUNT is not set: Google purchases cannot be checked")
        }
        return googlePlay
    }

    /// The payer of owed Google acknowledgements on `pool` (throws like `requireGoogle` when Google is not configured).
    func acknowledger(pool: PostgresPool) throws -> GoogleAcknowledger {
        GoogleAcknowledger(play: try requireGoogle(), pool: pool, retry: configuration.googleAcknowledgementRetry)
    }

    func checkPackage(_ name: String) throws {
        let allowed = configuration.googlePackageNames
        if !allowed.isEmpty && !allowed.contains(name) {
            throw JobError.badInput("package_name \(name) is not one of RECEIPTS_GOOGLE_PACKAGE_NAMES")
        }
    }
}

/// Registration of the receipt jobs.
public enum ReceiptJobs {
    public static let classNames = [ValidateReceiptJob.className, AppStoreNotificationJob.className,
                                    PlayNotificationJob.className, SubscriptionExpirySweepJob.className,
                                    GoogleAcknowledgementSweepJob.className, StoreReconciliationJob.className]

    /// Registers `ValidateReceiptJob`, `AppStoreNotificationJob`, `PlayNotificationJob`,
    /// `SubscriptionExpirySweepJob`, `GoogleAcknowledgementSweepJob` and `StoreReconciliationJob`, sharing one set of store clients (and one Google token cache).
    ///
    /// A configuration that cannot be turned into clients (an unparsable root certificate) is a start-up error:
    /// it is reported by `ReceiptServices.init`; this function then registers stand-ins (`UnusableAreaJob`) whose
    /// every run fails with that reason (retried, so the jobs wait in `retry`), and the worker still runs the
    /// other areas' jobs.
    public static func register(into registry: inout JobRegistry, configuration: ReceiptsConfiguration, http: HTTPClient) {
        do {
            register(into: &registry, services: try ReceiptServices(configuration: configuration, http: http))
        } catch {
            let broken = StoreUnavailable("receipts", "receipts configuration unusable: \(error)")
            registry.register(UnusableAreaJob<ValidateReceiptArguments>(failure: broken), as: ValidateReceiptJob.className)
            registry.register(UnusableAreaJob<AppStoreNotificationArguments>(failure: broken), as: AppStoreNotificationJob.className)
            registry.register(UnusableAreaJob<PlayNotificationArguments>(failure: broken), as: PlayNotificationJob.className)
            registry.register(UnusableAreaJob<SubscriptionExpirySweepJob.Arguments>(failure: broken), as: SubscriptionExpirySweepJob.className)
            registry.register(UnusableAreaJob<GoogleAcknowledgementSweepJob.Arguments>(failure: broken), as: GoogleAcknowledgementSweepJob.className)
            registry.register(UnusableAreaJob<StoreReconciliationJob.Arguments>(failure: broken), as: StoreReconciliationJob.className)
        }
    }

    /// Registers the jobs with services already built (tests use this to share them).
    public static func register(into registry: inout JobRegistry, services: ReceiptServices) {
        registry.register(ValidateReceiptJob(services: services))
        registry.register(AppStoreNotificationJob(services: services))
        registry.register(PlayNotificationJob(services: services))
        registry.register(SubscriptionExpirySweepJob(services: services))
        registry.register(GoogleAcknowledgementSweepJob(services: services))
        registry.register(StoreReconciliationJob(services: services))
    }
}
