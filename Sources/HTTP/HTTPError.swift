import Foundation

/// Where and how a request failed. Never holds a query string, userinfo, header values or bodies.
public struct HTTPErrorContext: Sendable, CustomStringConvertible {
    /// The request method, e.g. "GET".
    public let method: String
    /// The request URL without userinfo, query, fragment or secret path segments (see `URLRedaction`).
    public let url: String
    /// libcurl's message (its error buffer) or our own explanation.
    public let message: String
    /// The `CURLcode`, when libcurl reported the failure.
    public let curlCode: Int?

    public init(method: String, url: String, message: String, curlCode: Int? = nil) {
        self.method = method
        self.url = url
        self.message = message
        self.curlCode = curlCode
    }

    public var description: String {
        "\(method) \(url): \(message)" + (curlCode.map { " (curl \($0))" } ?? "")
    }
}

/// A request that produced no usable HTTP response (or a body that could not be decoded).
///
/// HTTP status codes are *not* errors here: a 404 or 503 is an `HTTPResponse`; use
/// `HTTPResponse.classification` to triage it. `isRetryable` says whether the same request may succeed later.
public enum HTTPError: Error, Sendable, CustomStringConvertible {
    /// The URL is malformed or uses a scheme other than http/https. Permanent.
    case invalidURL(HTTPErrorContext)
    /// The request itself is unusable (header with CR/LF, body that cannot be encoded). Permanent.
    case invalidRequest(HTTPErrorContext)
    /// Connect or total timeout elapsed. Retryable.
    case timeout(HTTPErrorContext)
    /// The peer refused the TCP connection (nothing listening). Retryable.
    case connectionRefused(HTTPErrorContext)
    /// Host name did not resolve, network unreachable, or the connection failed before a response. Retryable.
    case connectionFailed(HTTPErrorContext)
    /// TLS handshake or certificate verification failed. Permanent until configuration changes.
    case tls(HTTPErrorContext)
    /// The connection broke mid-transfer (reset, empty reply, truncated body, HTTP/2 stream error). Retryable.
    case transport(HTTPErrorContext)
    /// `HTTPCancellation` asked for the transfer to stop (job deadline, shutdown). Not retried by the client.
    case cancelled(HTTPErrorContext)
    /// The response body exceeded the configured limit. Permanent.
    case responseTooLarge(HTTPErrorContext)
    /// The response body is not the expected JSON / type. Permanent (the same request gives the same body).
    case decoding(HTTPErrorContext)
    /// libcurl failed for a local reason (out of memory, bad option). Permanent.
    case internalError(HTTPErrorContext)

    public var context: HTTPErrorContext {
        switch self {
        case .invalidURL(let c), .invalidRequest(let c), .timeout(let c), .connectionRefused(let c),
             .connectionFailed(let c), .tls(let c), .transport(let c), .cancelled(let c),
             .responseTooLarge(let c), .decoding(let c), .internalError(let c):
            return c
        }
    }

    /// Whether retrying the same request later can succeed (timeouts, refused/failed connections, broken transfers).
    public var isRetryable: Bool {
        switch self {
        case .timeout, .connectionRefused, .connectionFailed, .transport: return true
        case .invalidURL, .invalidRequest, .tls, .cancelled, .responseTooLarge, .decoding, .internalError: return false
        }
    }

    /// A short name for the case, for logs and metrics ("timeout", "tls", ...).
    public var kind: String {
        switch self {
        case .invalidURL: "invalid_url"
        case .invalidRequest: "invalid_request"
        case .timeout: "timeout"
        case .connectionRefused: "connection_refused"
        case .connectionFailed: "connection_failed"
        case .tls: "tls"
        case .transport: "transport"
        case .cancelled: "cancelled"
        case .responseTooLarge: "response_too_large"
        case .decoding: "decoding"
        case .internalError: "internal"
        }
    }

    public var description: String { "HTTP \(kind): \(context)" }
}

/// Removes secrets from URLs before they reach errors and logs.
public enum URLRedaction {
    /// What a secret path segment is replaced with.
    public static let placeholder = "…"

    /// `redact(url)`, and every path segment that is one of `secretPathSegments` (compared raw and percent-decoded,
    /// so a token is found however it was encoded; a `:method` suffix such as Google's `:acknowledge` is kept)
    /// replaced by `placeholder`.
    public static func redact(_ url: String, secretPathSegments: [String]) -> String {
        let base = redact(url)
        let forms = secretForms(in: base, secretPathSegments: secretPathSegments)
        guard !forms.isEmpty else { return base }
        let pathStart = self.pathStart(of: base)
        let segments = base[pathStart...].split(separator: "/", omittingEmptySubsequences: false).map { segment -> String in
            for form in forms where segment == form || segment.hasPrefix(form + ":") {
                return placeholder + segment.dropFirst(form.count)
            }
            return String(segment)
        }
        return String(base[..<pathStart]) + segments.joined(separator: "/")
    }

    /// The exact texts in `url`'s path that carry one of `secretPathSegments` (raw, percent-encoded as `url`
    /// encodes it), plus the plain and unreserved-encoded forms of each secret: what must not appear in any
    /// message about the request.
    public static func secretForms(in url: String, secretPathSegments: [String]) -> [String] {
        let secrets = secretPathSegments.filter { !$0.isEmpty }
        guard !secrets.isEmpty else { return [] }
        var forms = Set(secrets + secrets.map(encoded))
        let path = url[pathStart(of: url)...].prefix { $0 != "?" && $0 != "#" }
        for segment in path.split(separator: "/") {
            let head = String(segment.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first ?? segment)
            for candidate in [String(segment), head] {
                // Without `%` the text is its own decoding (`removingPercentEncoding` returns it unchanged).
                let decoded = candidate.contains("%") ? candidate.removingPercentEncoding : candidate
                if let decoded, secrets.contains(decoded) { forms.insert(candidate) }
            }
        }
        // Longest first, so a replacement never leaves a tail of a longer form behind.
        return forms.sorted { $0.count > $1.count }
    }

    private static func pathStart(of url: String) -> String.Index {
        guard let schemeEnd = url.range(of: "://") else { return url.startIndex }
        return url[schemeEnd.upperBound...].firstIndex(of: "/") ?? url.endIndex
    }

    /// `value` with everything but RFC 3986 unreserved characters percent-encoded (a path segment).
    static func encoded(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? value
    }
    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    /// `scheme://host:port/path` — userinfo, query and fragment removed. Strings without "://" are cut at
    /// the first `?` or `#` as well.
    public static func redact(_ url: String) -> String {
        var s = Substring(url)
        if let cut = s.firstIndex(where: { $0 == "?" || $0 == "#" }) { s = s[..<cut] }
        guard let schemeEnd = s.range(of: "://") else { return String(s) }
        let authorityStart = schemeEnd.upperBound
        let authorityEnd = s[authorityStart...].firstIndex(of: "/") ?? s.endIndex
        let authority = s[authorityStart..<authorityEnd]
        if let at = authority.lastIndex(of: "@") {
            return String(s[..<authorityStart]) + String(authority[authority.index(after: at)...])
                + String(s[authorityEnd...])
        }
        return String(s)
    }
}
