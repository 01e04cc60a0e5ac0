import Foundation

/// How a job should treat an HTTP status: the triage the jobs share.
///
/// - `success`: 2xx.
/// - `rateLimited`: 429; `retryAfter` from the `Retry-After` header (seconds or HTTP-date), if any.
/// - `transient`: 5xx and 408 (server trouble; retry with backoff, honouring `retryAfter` when sent, e.g. 503).
/// - `permanent`: other 4xx, and 1xx/3xx (unexpected for these APIs): retrying the same request will not help.
public enum HTTPResponseClass: Sendable, Equatable {
    case success
    case rateLimited(retryAfter: TimeInterval?)
    case transient(retryAfter: TimeInterval?)
    case permanent

    /// Classifies `status`, reading `Retry-After` from `headers` relative to `now`.
    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), now: Date = Date()) {
        let retryAfter = headers["Retry-After"].flatMap { RetryAfter(headerValue: $0) }?.delay(from: now)
        switch status {
        case 200...299: self = .success
        case 429: self = .rateLimited(retryAfter: retryAfter)
        case 408, 500...599: self = .transient(retryAfter: retryAfter)
        default: self = .permanent
        }
    }

    public var isRetryable: Bool {
        switch self {
        case .rateLimited, .transient: return true
        case .success, .permanent: return false
        }
    }

    /// The server-requested delay, when it sent one.
    public var retryAfter: TimeInterval? {
        switch self {
        case .rateLimited(let r), .transient(let r): return r
        case .success, .permanent: return nil
        }
    }
}
