import Foundation
import WorkersMail

/// Why the privacy configuration could not be built from the environment. Never carries a secret.
public enum PrivacyConfigurationError: Error, Sendable, CustomStringConvertible, Equatable {
    case missing(variable: String)
    case invalid(variable: String, reason: String)
    case unreadableFile(variable: String, path: String, reason: String)

    public var description: String {
        switch self {
        case .missing(let variable): return "\(variable) is not set"
        case .invalid(let variable, let reason): return "\(variable) is invalid: \(reason)"
        case .unreadableFile(let variable, let path, let reason): return "\(variable): cannot read '\(path)': \(reason)"
        }
    }
}

/// Everything the privacy jobs need besides Redis and PostgreSQL. Immutable; shared by all pool threads.
///
/// Invariants (checked by `init` / `fromEnvironment`): `storageDirectory` is absolute; `urlBase` is an absolute
/// http(s) URL without query or fragment; the signing secret is at least 32 bytes; `mailFrom` is a valid address.
public struct PrivacyConfiguration: Sendable {
    /// Where export files are written (created with mode 0700 if missing; files are 0600).
    public var storageDirectory: URL
    /// Public base of the download links, e.g. `https://api.example.com/privacy/exports`; a link is
    /// `<urlBase>/<export_id>.json?expires=<epoch>&signature=<hex>`.
    public var urlBase: String
    /// HMAC-SHA256 key for the download links (the download endpoint verifies with the same key).
    public var signingSecret: Data
    /// How long a link (and the file behind it) stays valid: 7 days by contract.
    public var linkValidity: TimeInterval
    /// The SMTP server the export mail goes through.
    public var smtp: SMTPConfiguration
    /// Sender of the export mail; its domain also names the stable Message-ID.
    public var mailFrom: EmailAddress
    /// Queue the deletion sweep enqueues `AccountDeletionJob` on.
    public var queue: String

    public static let defaultLinkValidity: TimeInterval = 7 * 24 * 3600

    public init(storageDirectory: URL, urlBase: String, signingSecret: Data,
                linkValidity: TimeInterval = PrivacyConfiguration.defaultLinkValidity,
                smtp: SMTPConfiguration, mailFrom: EmailAddress, queue: String = "default") throws(PrivacyConfigurationError) {
        guard storageDirectory.path.hasPrefix("/") else {
            throw .invalid(variable: "PRIVACY_EXPORT_DIR", reason: "must be an absolute path")
        }
        guard let components = URLComponents(string: urlBase), let scheme = components.scheme?.lowercased(),
              scheme == "https" || scheme == "http", components.host?.isEmpty == false,
              components.query == nil, components.fragment == nil else {
            throw .invalid(variable: "PRIVACY_EXPORT_URL_BASE",
                           reason: "expected an absolute http(s) URL without query or fragment")
        }
        guard signingSecret.count >= 32 else {
            throw .invalid(variable: "PRIVACY_EXPORT_SIGNING_SECRET", reason: "must be at least 32 bytes")
        }
        guard linkValidity > 0 else { throw .invalid(variable: "linkValidity", reason: "must be positive") }
        let fromParts = mailFrom.address.split(separator: "@", omittingEmptySubsequences: false)
        guard fromParts.count == 2, !fromParts[0].isEmpty, !fromParts[1].isEmpty,
              !mailFrom.address.contains(where: { $0.isWhitespace || "<>\"".contains($0) }) else {
            throw .invalid(variable: "PRIVACY_MAIL_FROM", reason: "expected local@domain")
        }
        self.storageDirectory = storageDirectory.standardizedFileURL
        self.urlBase = urlBase.hasSuffix("/") ? String(urlBase.dropLast()) : urlBase
        self.signingSecret = signingSecret
        self.linkValidity = linkValidity
        self.smtp = smtp
        self.mailFrom = mailFrom
        self.queue = queue
    }

    /// The domain of `mailFrom` (right of `@`), used in Message-IDs.
    public var mailDomain: String { String(mailFrom.address.split(separator: "@").last ?? "localhost") }

    /// Reads the configuration from environment variables (documented in docs/jobs-privacy.md):
    ///
    /// - `PRIVACY_EXPORT_DIR` (required): storage directory.
    /// - `PRIVACY_EXPORT_URL_BASE` (required): base of the signed links.
    /// - `PRIVACY_EXPORT_SIGNING_SECRET` or `PRIVACY_EXPORT_SIGNING_SECRET_FILE` (one required, ≥ 32 bytes;
    ///   a file's trailing newline is ignored).
    /// - `PRIVACY_MAIL_FROM` (required), `PRIVACY_MAIL_FROM_NAME` (optional display name).
    /// - `SMTP_HOST` (required), `SMTP_PORT` (default 587), `SMTP_SECURITY` (`starttls` default,
    ///   `starttls-optional`, `tls`, `none`), `SMTP_USERNAME`, `SMTP_PASSWORD` or `SMTP_PASSWORD_FILE`,
    ///   `SMTP_CA_FILE`, `SMTP_HELO_DOMAIN`, `SMTP_TIMEOUT_SECONDS` (default 60).
    /// - `PRIVACY_QUEUE` (default `default`).
    /// A secret given directly in `name` or in the file `name_FILE` names (`EnvironmentSecret`).
    static func readSecret(_ name: String, from env: [String: String]) throws(PrivacyConfigurationError) -> Data? {
        do { return try EnvironmentSecret.read(name, from: env) } catch {
            switch error {
            case .bothSet: throw .invalid(variable: name, reason: "set \(name) or \(name)_FILE, not both")
            case .unreadable(let variable, let path, let reason): throw .unreadableFile(variable: variable, path: path, reason: reason)
            }
        }
    }

    /// Only what checking links needs (URL base and signing secret), for `workerctl export verify-url`.
    public static func urlSigner(fromEnvironment env: [String: String]) throws(PrivacyConfigurationError) -> ExportURLSigner {
        guard let base = env["PRIVACY_EXPORT_URL_BASE"]?.trimmingCharacters(in: .whitespaces), !base.isEmpty else {
            throw .missing(variable: "PRIVACY_EXPORT_URL_BASE")
        }
        guard let secret = try readSecret("PRIVACY_EXPORT_SIGNING_SECRET", from: env) else {
            throw .missing(variable: "PRIVACY_EXPORT_SIGNING_SECRET or PRIVACY_EXPORT_SIGNING_SECRET_FILE")
        }
        return ExportURLSigner(base: base, secret: secret)
    }

    public static func fromEnvironment(_ env: [String: String]) throws(PrivacyConfigurationError) -> PrivacyConfiguration {
        func value(_ name: String) -> String? {
            guard let v = env[name]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
            return v
        }
        func required(_ name: String) throws(PrivacyConfigurationError) -> String {
            guard let v = value(name) else { throw .missing(variable: name) }
            return v
        }
        func secret(_ name: String) throws(PrivacyConfigurationError) -> Data? { try readSecret(name, from: env) }

        let directory = try required("PRIVACY_EXPORT_DIR")
        guard directory.hasPrefix("/") else {
            throw .invalid(variable: "PRIVACY_EXPORT_DIR", reason: "must be an absolute path")
        }
        let base = try required("PRIVACY_EXPORT_URL_BASE")
        guard let signing = try secret("PRIVACY_EXPORT_SIGNING_SECRET") else {
            throw .missing(variable: "PRIVACY_EXPORT_SIGNING_SECRET or PRIVACY_EXPORT_SIGNING_SECRET_FILE")
        }
        let from = EmailAddress(try required("PRIVACY_MAIL_FROM"), name: value("PRIVACY_MAIL_FROM_NAME"))

        let host = try required("SMTP_HOST")
        var port = 587
        if let text = value("SMTP_PORT") {
            guard let p = Int(text), (1...65535).contains(p) else {
                throw .invalid(variable: "SMTP_PORT", reason: "expected 1...65535")
            }
            port = p
        }
        let security: SMTPSecurity
        switch value("SMTP_SECURITY")?.lowercased() ?? "starttls" {
        case "starttls": security = .startTLS
        case "starttls-optional": security = .startTLSIfAvailable
        case "tls", "smtps": security = .implicitTLS
        case "none": security = .none
        case let other: throw .invalid(variable: "SMTP_SECURITY", reason: "'\(other)' is not starttls, starttls-optional, tls or none")
        }
        var timeout = 60
        if let text = value("SMTP_TIMEOUT_SECONDS") {
            guard let t = Int(text), (1...600).contains(t) else {
                throw .invalid(variable: "SMTP_TIMEOUT_SECONDS", reason: "expected 1...600")
            }
            timeout = t
        }
        let password = try secret("SMTP_PASSWORD").map { String(decoding: $0, as: UTF8.self) }
        let smtp = SMTPConfiguration(host: host, port: port, security: security, username: value("SMTP_USERNAME"),
                                     password: password, localDomain: value("SMTP_HELO_DOMAIN"),
                                     caFile: value("SMTP_CA_FILE"), timeout: .seconds(timeout))
        return try PrivacyConfiguration(storageDirectory: URL(fileURLWithPath: directory), urlBase: base,
                                        signingSecret: signing, smtp: smtp, mailFrom: from,
                                        queue: value("PRIVACY_QUEUE") ?? "default")
    }

    /// Seconds a recorded mail intent blocks another run from sending: longer than one SMTP session can take.
    var mailLeaseSeconds: Int {
        let components = smtp.timeout.components
        return max(120, Int(components.seconds) * 2 + 30)
    }
}
