import Foundation
import HTTP

/// What `/credits/earn` answered.
public enum CreditOutcome: Sendable, Equatable {
    /// 2xx: credited now, or earlier under the same idempotency key (a replay).
    case credited(replayed: Bool)
    /// 429 (seconds from Retry-After, if any).
    case rateLimited(retryAfter: Double?)
    /// Timeout, connection failure, 5xx, 408, or 401/403 (credentials can be fixed): try again.
    case transient(String)
    /// Other 4xx (invalid request, key reused with other parameters): the same request never succeeds.
    case rejected(status: Int, String)
}

/// `POST /subscription/v1/credits/earn {user_id, amount, source, reference}` with an
/// `Idempotency-Key`: the Subscription Service applies a key once and replays its first answer,
/// so sending the same reward any number of times credits the user once. The body is encoded
/// with sorted keys so that a retry sends the same bytes. Stateless; safe from any thread.
public struct SubscriptionCreditsClient: Sendable {
    public let http: HTTPClient
    public let configuration: AdsConfiguration

    public init(http: HTTPClient, configuration: AdsConfiguration) {
        self.http = http
        self.configuration = configuration
    }

    public struct EarnRequest: Encodable, Sendable, Equatable {
        public let user_id: String
        public let amount: Int
        public let source: String
        public let reference: String
    }

    public func earn(_ body: EarnRequest, idempotencyKey: String, cancellation: HTTPCancellation?) -> CreditOutcome {
        var request: HTTPRequest
        do {
            request = try HTTPRequest.json(.post, configuration.subscriptionServiceURL + "/subscription/v1/credits/earn",
                                           body: body)
        } catch {
            return .rejected(status: 0, error.description)
        }
        request = request.with(header: "Idempotency-Key", idempotencyKey)
        if let key = configuration.subscriptionAPIKey { request = request.with(header: "Authorization", "Bearer \(key)") }
        request.timeout = .milliseconds(Int(configuration.requestTimeout * 1000))
        request.cancellation = cancellation
        let response: HTTPResponse
        do {
            response = try http.send(request)
        } catch {
            return .transient(error.description)
        }
        switch response.classification() {
        case .success:
            return .credited(replayed: response.headers["Idempotent-Replayed"]?.lowercased() == "true")
        case .rateLimited(let after):
            return .rateLimited(retryAfter: after)
        case .transient:
            return .transient("Subscription Service answered HTTP \(response.status)")
        case .permanent where response.status == 401 || response.status == 403:
            return .transient("Subscription Service refused our credentials (HTTP \(response.status))")
        case .permanent:
            return .rejected(status: response.status, String(response.text.prefix(200)))
        }
    }
}
