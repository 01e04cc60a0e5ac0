import Foundation

/// Which Apple API `ValidateReceiptJob` uses for `store: "apple"`.
public enum AppleValidationMode: String, Sendable {
    /// The App Store Server API when its credentials (issuer id, key id, bundle id, `.p8` key) are configured,
    /// else the legacy verifyReceipt endpoint.
    case auto
    /// Legacy `verifyReceipt` (deprecated by Apple, still working).
    case verifyReceipt = "verify_receipt"
    /// App Store Server API: Get Transaction Info + Get All Subscription Statuses, signed JWS verified.
    case serverAPI = "server_api"
}

/// Credentials for the App Store Server API (App Store Connect in-app purchase key).
public struct AppStoreServerAPICredentials: Sendable {
    public var issuerID: String
    public var keyID: String
    /// The `.p8` file's PEM text (PKCS#8 P-256 private key).
    public var privateKey: Secret

    public init(issuerID: String, keyID: String, privateKey: Secret) {
        self.issuerID = issuerID
        self.keyID = keyID
        self.privateKey = privateKey
    }
}

/// Everything the receipt jobs need to reach Apple and Google. Immutable after start-up; shared by all threads.
///
/// URLs default to the real production endpoints; tests and the demo point them at the loopback fakes.
/// Secrets are `Secret` values: they never appear in `description` or logs.
public struct ReceiptsConfiguration: Sendable {
    // MARK: Apple
    public var appleVerifyReceiptProductionURL = "https://buy.itunes.apple.com/verifyReceipt"
    public var appleVerifyReceiptSandboxURL = "https://sandbox.itunes.apple.com/verifyReceipt"
    /// App-specific shared secret sent as `password` to verifyReceipt (required for auto-renewables).
    public var appleSharedSecret: Secret?
    public var appleServerAPIProductionURL = "https://api.storekit.apple.com"
    public var appleServerAPISandboxURL = "https://api.storekit-sandbox.apple.com"
    public var appleCredentials: AppStoreServerAPICredentials?
    /// The app's bundle id: checked in every signed JWS and sent as `bid` in the API JWT.
    public var appleBundleID: String?
    /// The numeric App Apple ID; notifications from Production must carry it. Required whenever Production signed
    /// data is accepted (`appleSignedDataProblem`).
    public var appleAppAppleID: Int64?
    /// DER of the trusted roots for `x5c` chains. Default: Apple Root CA - G3.
    public var appleRootCertificates: [[UInt8]] = [AppleRootCertificates.appleRootCAG3]
    /// DER of the trusted roots for StoreKit 1 app receipts (PKCS#7, `AppleAppReceiptVerifier`). Default: Apple Root
    /// CA (the 2006 RSA root of the receipt-signing chain).
    public var appleReceiptRootCertificates: [[UInt8]] = [AppleRootCertificates.appleRootCA]
    /// Store environments accepted in signed data (`Production`, `Sandbox`; `Xcode`/`LocalTesting` for tests).
    public var appleAllowedEnvironments: Set<String> = ["Production", "Sandbox"]
    public var appleValidation: AppleValidationMode = .auto
    /// Days an Apple subscription past its end date stays in `grace_period` (billing retry) before `expired`.
    public var appleGracePeriodDays = 16

    // MARK: Google
    /// OAuth2 token endpoint; default: the service account's `token_uri`, else Google's.
    public var googleTokenURL: String?
    public var googlePlayAPIURL = "https://androidpublisher.googleapis.com"
    public var googleServiceAccount: GoogleServiceAccount?
    /// When non-empty, only these package names are accepted (arguments and RTDN).
    public var googlePackageNames: Set<String> = []
    /// Days the expiry sweep keeps a renewing Google subscription past its `end_date` while no word from Google
    /// (RTDN) has arrived. Not Google's grace period: that one comes from Google's state (`IN_GRACE_PERIOD`, whose
    /// line item `expiryTime` is the end of grace; its length is set per base plan in the Play Console).
    public var googleGracePeriodDays = 3
    /// Base delay before an owed acknowledgement whose attempt did not settle it is tried again (doubled per
    /// attempt, at most 64×): `GoogleAcknowledgementSweepJob` takes it up once it is due.
    public var googleAcknowledgementRetry: Duration = .seconds(60)

    // MARK: Common
    /// Rows per transaction in the expiry sweep.
    public var sweepBatchSize = 500
    /// Store requests one run of `StoreReconciliationJob` may make (history pages, voided-purchase pages, the
    /// notifications it applies, the rows it re-checks); what is left over waits for the next run.
    public var reconcileCallBudget = 1000
    /// Whole-transfer timeout of each store request.
    public var requestTimeout: Duration = .seconds(15)

    public init() {}

    /// Whether `ValidateReceiptJob` uses the App Store Server API for Apple purchases.
    public var usesAppStoreServerAPI: Bool {
        switch appleValidation {
        case .verifyReceipt: return false
        case .serverAPI: return true
        case .auto: return appleCredentials != nil && appleBundleID != nil
        }
    }

    /// Why signed App Store data cannot be verified safely with these settings, or nil.
    ///
    /// Apple's `SignedDataVerifier` refuses to be built for Production without the app's App Apple ID
    /// (`SignedDataVerifier.swift`, `init`: `guard !(environment == .production && appAppleId == nil) else { throw
    /// ConfigurationError.INVALID_APP_APPLE_ID }`): without it a Production notification is not tied to our app.
    /// Signed data is verified when a bundle id is configured; Production is accepted unless
    /// `appleAllowedEnvironments` leaves it out.
    public var appleSignedDataProblem: ReceiptsConfigurationError? {
        guard appleBundleID != nil, appleAllowedEnvironments.contains("Production"), appleAppAppleID == nil else { return nil }
        return .invalid(variable: "RECEIPTS_APPLE_APP_APPLE_ID",
                        reason: "required when Production signed data is accepted (RECEIPTS_APPLE_ENVIRONMENTS includes "
                            + "Production, the default, and RECEIPTS_APPLE_BUNDLE_ID is set): Apple's SignedDataVerifier "
                            + "refuses Production without the app's numeric App Apple ID (App Store Connect, App Information); "
                            + "set it, or accept only Sandbox on a non-production worker")
    }

    /// The token endpoint actually used.
    public var effectiveGoogleTokenURL: String {
        googleTokenURL ?? googleServiceAccount?.tokenURI ?? "https://oauth2.googleapis.com/token"
    }

    /// Reads the configuration from environment variables (see `docs/jobs-receipts.md`).
    ///
    /// A secret comes from `NAME` or from the file named by `NAME_FILE` (not both). Throws with the variable's name
    /// (never its value) when something is malformed or a named file cannot be read.
    public static func fromEnvironment(_ env: [String: String]) throws(ReceiptsConfigurationError) -> ReceiptsConfiguration {
        let reader = EnvironmentReader(env: env)
        var c = ReceiptsConfiguration()
        if let v = reader.string("RECEIPTS_APPLE_VERIFY_RECEIPT_URL") { c.appleVerifyReceiptProductionURL = v }
        if let v = reader.string("RECEIPTS_APPLE_VERIFY_RECEIPT_SANDBOX_URL") { c.appleVerifyReceiptSandboxURL = v }
        c.appleSharedSecret = try reader.secret("RECEIPTS_APPLE_SHARED_SECRET")
        if let v = reader.string("RECEIPTS_APPLE_SERVER_API_URL") { c.appleServerAPIProductionURL = v }
        if let v = reader.string("RECEIPTS_APPLE_SERVER_API_SANDBOX_URL") { c.appleServerAPISandboxURL = v }
        c.appleBundleID = reader.string("RECEIPTS_APPLE_BUNDLE_ID")
        let issuer = reader.string("RECEIPTS_APPLE_ISSUER_ID")
        let keyID = reader.string("RECEIPTS_APPLE_KEY_ID")
        let key = try reader.secret("RECEIPTS_APPLE_PRIVATE_KEY")
        switch (issuer, keyID, key) {
        case let (i?, k?, p?):
            c.appleCredentials = AppStoreServerAPICredentials(issuerID: i, keyID: k, privateKey: p)
            do { _ = try AppStoreJWT.signingKey(p) } catch {
                throw .invalid(variable: "RECEIPTS_APPLE_PRIVATE_KEY", reason: "not a PKCS#8 P-256 private key (.p8)")
            }
        case (nil, nil, nil): break
        default:
            throw .invalid(variable: "RECEIPTS_APPLE_ISSUER_ID/KEY_ID/PRIVATE_KEY",
                           reason: "set all three App Store Server API credentials or none")
        }
        if let v = reader.string("RECEIPTS_APPLE_APP_APPLE_ID") {
            guard let n = Int64(v) else { throw .invalid(variable: "RECEIPTS_APPLE_APP_APPLE_ID", reason: "not an integer") }
            c.appleAppAppleID = n
        }
        if let v = reader.string("RECEIPTS_APPLE_ROOT_CA_FILES") {
            var roots: [[UInt8]] = []
            for path in v.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !path.isEmpty {
                roots.append(try reader.certificate(path: path, variable: "RECEIPTS_APPLE_ROOT_CA_FILES"))
            }
            guard !roots.isEmpty else { throw .invalid(variable: "RECEIPTS_APPLE_ROOT_CA_FILES", reason: "no file named") }
            c.appleRootCertificates = roots
        }
        if let v = reader.string("RECEIPTS_APPLE_RECEIPT_ROOT_CA_FILES") {
            var roots: [[UInt8]] = []
            for path in v.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !path.isEmpty {
                roots.append(try reader.certificate(path: path, variable: "RECEIPTS_APPLE_RECEIPT_ROOT_CA_FILES"))
            }
            guard !roots.isEmpty else { throw .invalid(variable: "RECEIPTS_APPLE_RECEIPT_ROOT_CA_FILES", reason: "no file named") }
            c.appleReceiptRootCertificates = roots
        }
        if let v = reader.string("RECEIPTS_APPLE_ENVIRONMENTS") {
            c.appleAllowedEnvironments = Set(v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        }
        if let v = reader.string("RECEIPTS_APPLE_VALIDATION") {
            guard let mode = AppleValidationMode(rawValue: v) else {
                throw .invalid(variable: "RECEIPTS_APPLE_VALIDATION", reason: "expected auto, verify_receipt or server_api")
            }
            c.appleValidation = mode
        }
        if c.appleValidation == .serverAPI && (c.appleCredentials == nil || c.appleBundleID == nil) {
            throw .invalid(variable: "RECEIPTS_APPLE_VALIDATION",
                           reason: "server_api needs RECEIPTS_APPLE_ISSUER_ID, _KEY_ID, _PRIVATE_KEY and _BUNDLE_ID")
        }
        c.appleGracePeriodDays = try reader.int("RECEIPTS_APPLE_GRACE_PERIOD_DAYS", default: 16, range: 0...90)
        if let problem = c.appleSignedDataProblem { throw problem }

        c.googleTokenURL = reader.string("RECEIPTS_GOOGLE_TOKEN_URL")
        if let v = reader.string("RECEIPTS_GOOGLE_PLAY_API_URL") { c.googlePlayAPIURL = v }
        if let json = try reader.secret("RECEIPTS_GOOGLE_SERVICE_ACCOUNT") {
            do { c.googleServiceAccount = try GoogleServiceAccount(json: json) } catch {
                throw .invalid(variable: "RECEIPTS_GOOGLE_SERVICE_ACCOUNT", reason: error.description)
            }
        }
        if let v = reader.string("RECEIPTS_GOOGLE_PACKAGE_NAMES") {
            c.googlePackageNames = Set(v.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        }
        c.googleGracePeriodDays = try reader.int("RECEIPTS_GOOGLE_GRACE_PERIOD_DAYS", default: 3, range: 0...90)
        c.googleAcknowledgementRetry = .seconds(try reader.int("RECEIPTS_GOOGLE_ACK_RETRY_SECONDS", default: 60, range: 1...3600))
        c.sweepBatchSize = try reader.int("RECEIPTS_SWEEP_BATCH_SIZE", default: 500, range: 1...100_000)
        c.reconcileCallBudget = try reader.int("RECEIPTS_RECONCILE_CALL_BUDGET", default: 1000, range: 1...100_000)
        c.requestTimeout = .seconds(try reader.int("RECEIPTS_HTTP_TIMEOUT_SECONDS", default: 15, range: 1...300))
        return c
    }
}

/// A configuration variable that is malformed or names an unreadable file. Never quotes a value.
public enum ReceiptsConfigurationError: Error, Sendable, CustomStringConvertible {
    case invalid(variable: String, reason: String)
    case unreadableFile(variable: String, path: String, reason: String)

    public var description: String {
        switch self {
        case .invalid(let v, let r): return "\(v): \(r)"
        case .unreadableFile(let v, let p, let r): return "\(v): cannot read \(p): \(r)"
        }
    }
}

/// Typed access to environment variables; empty values count as unset.
struct EnvironmentReader {
    let env: [String: String]

    func string(_ name: String) -> String? {
        guard let v = env[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !v.isEmpty else { return nil }
        return v
    }

    func int(_ name: String, default value: Int, range: ClosedRange<Int>) throws(ReceiptsConfigurationError) -> Int {
        guard let text = string(name) else { return value }
        guard let n = Int(text), range.contains(n) else {
            throw .invalid(variable: name, reason: "expected an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return n
    }

    /// `NAME` or the contents of the file `NAME_FILE` names (`EnvironmentSecret`).
    func secret(_ name: String) throws(ReceiptsConfigurationError) -> Secret? {
        do { return try EnvironmentSecret.readText(name, from: env).map { Secret($0) } } catch {
            switch error {
            case .bothSet: throw .invalid(variable: name, reason: "set \(name) or \(name)_FILE, not both")
            case .unreadable(let variable, let path, let reason): throw .unreadableFile(variable: variable, path: path, reason: reason)
            }
        }
    }

    /// DER bytes of a certificate file (DER, or PEM with one CERTIFICATE block).
    func certificate(path: String, variable: String) throws(ReceiptsConfigurationError) -> [UInt8] {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw .unreadableFile(variable: variable, path: path, reason: "\((error as NSError).localizedDescription)")
        }
        if let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN CERTIFICATE-----") {
            let body = text.components(separatedBy: "-----BEGIN CERTIFICATE-----")[1]
                .components(separatedBy: "-----END CERTIFICATE-----")[0]
                .components(separatedBy: .whitespacesAndNewlines).joined()
            guard let der = Data(base64Encoded: body) else {
                throw .invalid(variable: variable, reason: "\(path) is not a readable PEM certificate")
            }
            return Array(der)
        }
        return Array(data)
    }
}
