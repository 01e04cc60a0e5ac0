import Foundation
import WorkersHTTP
import WorkersQueue
import Workers

/// A store could not answer now (timeout, connection, 5xx, malformed body, billing server down): retried with
/// the job's backoff. Carries no receipt, token or secret.
public struct StoreUnavailable: Error, Sendable, CustomStringConvertible {
    public let service: String
    public let reason: String
    public init(_ service: String, _ reason: String) {
        self.service = service
        self.reason = reason
    }
    public var description: String { "\(service) temporarily unavailable: \(reason)" }
}

/// Sending store requests and triaging their answers, shared by the Apple and Google clients.
///
/// Thread rules: a value holding the shared `HTTPClient`; safe from any thread.
struct StoreHTTP: Sendable {
    let client: HTTPClient
    let timeout: Duration

    /// Sends `request` with the configured timeout and the job's cancellation. Transport failures become
    /// `StoreUnavailable` (retry); non-retryable ones (TLS, invalid URL) `JobError.permanent`.
    func send(_ request: HTTPRequest, service: String, cancellation: HTTPCancellation?) throws -> HTTPResponse {
        var r = request
        r.timeout = timeout
        r.cancellation = cancellation
        do {
            return try client.send(r)
        } catch {
            if error.isRetryable { throw StoreUnavailable(service, error.description) }
            if case .cancelled = error { throw StoreUnavailable(service, "cancelled: the job passed its timeout") }
            throw JobError.permanent("\(service): \(error.description)")
        }
    }

    /// Throws for 429 (`retryAfter`, default 60 s) and 5xx/408 (`retryAfter` when the server sent one, else
    /// `StoreUnavailable`); returns for 2xx and other statuses, which the caller interprets.
    static func throwIfRetryable(_ response: HTTPResponse, service: String) throws {
        switch response.classification() {
        case .rateLimited(let retryAfter):
            throw JobError.retryAfter(Bounded.duration(seconds: max(1, retryAfter ?? 60)), reason: "\(service) rate limited (HTTP 429)")
        case .transient(let retryAfter):
            if let retryAfter {
                throw JobError.retryAfter(Bounded.duration(seconds: max(1, retryAfter)), reason: "\(service) answered HTTP \(response.status)")
            }
            throw StoreUnavailable(service, "HTTP \(response.status)")
        case .success, .permanent:
            return
        }
    }

    /// Decodes a 2xx body; a body that is not the expected JSON is treated as a temporary fault of the store
    /// (truncated or garbled answer), not as proof about the purchase.
    static func decode<T: Decodable>(_ type: T.Type, _ response: HTTPResponse, service: String) throws -> T {
        do { return try response.decode(T.self) } catch {
            throw StoreUnavailable(service, "unreadable answer: \(error.context.message)")
        }
    }
}
