import CWorkersCurl
import Foundation
import WorkersHTTP
import Logging

/// How the SMTP connection is protected.
public enum SMTPSecurity: Sendable, Equatable {
    /// Plain text (local relays, tests).
    case none
    /// Upgrade with STARTTLS when the server offers it, else continue in plain text (`CURLUSESSL_TRY`).
    case startTLSIfAvailable
    /// STARTTLS or fail with `.tls` (`CURLUSESSL_ALL`).
    case startTLS
    /// TLS from the first byte (`smtps://`, usually port 465).
    case implicitTLS
}

/// Where and how to send mail.
public struct SMTPConfiguration: Sendable {
    public var host: String
    public var port: Int
    public var security: SMTPSecurity
    /// Credentials for AUTH (PLAIN/LOGIN/… as the server offers); nil sends no AUTH.
    public var username: String?
    public var password: String?
    /// Name sent in EHLO; nil lets libcurl use the local host name.
    public var localDomain: String?
    /// PEM CA bundle for TLS verification (always on); nil uses the system bundle.
    public var caFile: String?
    public var connectTimeout: Duration
    /// Bound on the whole session (connect, AUTH, MAIL, RCPT, DATA, QUIT).
    public var timeout: Duration
    public var logger: Logger?

    public init(host: String, port: Int = 587, security: SMTPSecurity = .startTLS, username: String? = nil,
                password: String? = nil, localDomain: String? = nil, caFile: String? = nil,
                connectTimeout: Duration = .seconds(10), timeout: Duration = .seconds(60), logger: Logger? = nil) {
        self.host = host
        self.port = port
        self.security = security
        self.username = username
        self.password = password
        self.localDomain = localDomain
        self.caFile = caFile
        self.connectTimeout = connectTimeout
        self.timeout = timeout
        self.logger = logger
    }

    /// `smtp://host:port` or `smtps://host:port` (no credentials): for URLs and error messages.
    public var serverURL: String {
        let scheme = security == .implicitTLS ? "smtps" : "smtp"
        let h = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return "\(scheme)://\(h):\(port)"
    }
}

/// Context of an SMTP failure; holds no credentials and no message content.
public struct SMTPErrorContext: Sendable, CustomStringConvertible {
    public let server: String
    public let message: String
    public let curlCode: Int?
    /// The last SMTP reply code libcurl saw (e.g. 450, 550), when any.
    public let replyCode: Int?

    public var description: String {
        "\(server): \(message)" + (replyCode.map { " (SMTP \($0))" } ?? "") + (curlCode.map { " (curl \($0))" } ?? "")
    }
}

/// Why a message was not delivered to the server.
public enum SMTPError: Error, Sendable, CustomStringConvertible {
    /// The message is unusable (no recipients, bad address, header injection). Permanent.
    case invalidMessage(String)
    /// Connect or session timeout. Retryable.
    case timeout(SMTPErrorContext)
    case connectionRefused(SMTPErrorContext)
    /// DNS failure, unreachable, or the connection dropped before a reply. Retryable.
    case connectionFailed(SMTPErrorContext)
    /// TLS handshake/verification failed, or STARTTLS required but not offered. Permanent until reconfigured.
    case tls(SMTPErrorContext)
    /// AUTH rejected (535) or no usable mechanism. Permanent until reconfigured.
    case authenticationFailed(SMTPErrorContext)
    /// The server answered 4xx (greylisting, mailbox busy, rate limit). Retryable.
    case transientReply(code: Int, SMTPErrorContext)
    /// The server answered 5xx (no such user, rejected content). Permanent.
    case permanentReply(code: Int, SMTPErrorContext)
    /// Connection broke mid-session without a reply code. Retryable.
    case transport(SMTPErrorContext)
    /// Local libcurl failure or bad configuration. Permanent.
    case internalError(SMTPErrorContext)

    public var isRetryable: Bool {
        switch self {
        case .timeout, .connectionRefused, .connectionFailed, .transientReply, .transport: return true
        case .invalidMessage, .tls, .authenticationFailed, .permanentReply, .internalError: return false
        }
    }

    public var description: String {
        switch self {
        case .invalidMessage(let m): "SMTP invalid message: \(m)"
        case .timeout(let c): "SMTP timeout: \(c)"
        case .connectionRefused(let c): "SMTP connection refused: \(c)"
        case .connectionFailed(let c): "SMTP connection failed: \(c)"
        case .tls(let c): "SMTP TLS error: \(c)"
        case .authenticationFailed(let c): "SMTP authentication failed: \(c)"
        case .transientReply(let code, let c): "SMTP transient reply \(code): \(c)"
        case .permanentReply(let code, let c): "SMTP permanent reply \(code): \(c)"
        case .transport(let c): "SMTP transport error: \(c)"
        case .internalError(let c): "SMTP internal error: \(c)"
        }
    }
}

/// Sends one message per call through libcurl's SMTP client.
///
/// Thread rules: a value type with no shared state; each `send` uses its own curl easy handle and connection
/// (opened and closed per message), so any number of threads may send at once. `send` blocks for at most
/// `timeout`. Delivery is at-least-once: a reply lost after the server accepted DATA looks like a failure and a
/// retry sends the message again (same `Message-ID`, so receivers can de-duplicate).
public struct SMTPSender: Sendable {
    public let configuration: SMTPConfiguration

    public init(configuration: SMTPConfiguration) {
        self.configuration = configuration
    }

    /// Hands `message` to the server (envelope sender = `from`, recipients = to + cc + bcc).
    public func send(_ message: EmailMessage) throws(SMTPError) {
        let data = try message.rendered()
        let config = configuration
        let server = config.serverURL
        func context(_ message: String, _ code: CURLcode?, _ reply: Int?) -> SMTPErrorContext {
            SMTPErrorContext(server: server, message: message, curlCode: code.map { Int($0.rawValue) },
                             replyCode: reply)
        }
        guard CurlRuntime.initialize() else { throw .internalError(context("curl_global_init failed", nil, nil)) }
        guard let h = curl_easy_init() else { throw .internalError(context("curl_easy_init failed", nil, nil)) }
        defer { curl_easy_cleanup(h) }
        let state = CurlTransferState()
        state.upload = data
        var recipients: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(recipients) }
        for r in message.envelopeRecipients { recipients = curl_slist_append(recipients, "<\(r)>") }

        let code: CURLcode = withExtendedLifetime(state) {
            let path = config.localDomain.map { "/" + $0 } ?? ""
            _ = ccurl_setopt_str(h, CURLOPT_URL, server + path)
            _ = ccurl_setopt_str(h, CURLOPT_PROTOCOLS_STR, "smtp,smtps")
            _ = ccurl_setopt_long(h, CURLOPT_NOSIGNAL, 1)
            _ = ccurl_setopt_long(h, CURLOPT_CONNECTTIMEOUT_MS, config.connectTimeout.curlMilliseconds)
            _ = ccurl_setopt_long(h, CURLOPT_TIMEOUT_MS, config.timeout.curlMilliseconds)
            _ = ccurl_setopt_long(h, CURLOPT_SSL_VERIFYPEER, 1)
            _ = ccurl_setopt_long(h, CURLOPT_SSL_VERIFYHOST, 2)
            if let ca = config.caFile { _ = ccurl_setopt_str(h, CURLOPT_CAINFO, ca) }
            switch config.security {
            case .none, .implicitTLS: break
            case .startTLSIfAvailable: _ = ccurl_setopt_long(h, CURLOPT_USE_SSL, Int(CURLUSESSL_TRY.rawValue))
            case .startTLS: _ = ccurl_setopt_long(h, CURLOPT_USE_SSL, Int(CURLUSESSL_ALL.rawValue))
            }
            if let u = config.username { _ = ccurl_setopt_str(h, CURLOPT_USERNAME, u) }
            if let p = config.password { _ = ccurl_setopt_str(h, CURLOPT_PASSWORD, p) }
            _ = ccurl_setopt_str(h, CURLOPT_MAIL_FROM, "<\(message.from.address)>")
            _ = ccurl_setopt_slist(h, CURLOPT_MAIL_RCPT, recipients)
            _ = ccurl_setopt_long(h, CURLOPT_UPLOAD, 1)
            _ = ccurl_setopt_off(h, CURLOPT_INFILESIZE_LARGE, curl_off_t(data.count))
            state.install(on: h, readsUpload: true)
            return curl_easy_perform(h)
        }
        if code == CURLE_OK {
            config.logger?.debug("smtp sent", metadata: ["server": "\(server)",
                                                         "message_id": "\(message.normalizedMessageID)"])
            return
        }
        var reply = 0
        _ = ccurl_getinfo_long(h, CURLINFO_RESPONSE_CODE, &reply)
        let replyCode: Int? = reply > 0 ? reply : nil
        let ctx = context(CurlFailure.message(code, state: state), code, replyCode)
        config.logger?.debug("smtp failed", metadata: ["server": "\(server)", "error": "\(ctx)"])
        let failure = CurlFailure.classify(code, handle: h, state: state)
        switch failure {
        case .timeout: throw .timeout(ctx)
        case .connectionRefused: throw .connectionRefused(ctx)
        case .connectionFailed: throw .connectionFailed(ctx)
        case .tls: throw .tls(ctx)
        case .loginDenied: throw .authenticationFailed(ctx)
        case .invalidURL, .internalError, .cancelled, .tooLarge, .transport:
            // libcurl reports a rejected MAIL/RCPT/DATA as a send/receive error; the reply code tells which kind.
            switch replyCode {
            case .some(400...499): throw .transientReply(code: replyCode!, ctx)
            case .some(530), .some(534), .some(535): throw .authenticationFailed(ctx)
            case .some(500...599): throw .permanentReply(code: replyCode!, ctx)
            default: break
            }
            if failure == .transport { throw .transport(ctx) }
            throw .internalError(ctx)
        }
    }
}
