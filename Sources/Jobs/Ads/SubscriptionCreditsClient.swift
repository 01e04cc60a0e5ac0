import Foundation
import HTTP

/// What `/credits/earn` answered.
public enum CreditOutcome: Sendable, Equatable {
    /// 2xx: credited now, or earlier under the same idempotency key (a replay: the first answer again,
    /// marked `Idempotent-Replayed: true`) — by this job or by the Ads Service's own first call.
    case credited(replayed: Bool)
    /// 409: a request with the same idempotency key is still being processed (by a duplicate job, or
    /// the Ads Service's original call). Not a failure: ask again later and get the replayed answer
    /// (draft-ietf-httpapi-idempotency-key-header, "Error Scenarios": 409 Conflict for a retried
    /// request whose original is still outstanding). Seconds from Retry-After, if any.
    case inFlight(retryAfter: Double?)
    /// 429 (seconds from Retry-After, if any).
    case rateLimited(retryAfter: Double?)
    /// Timeout, connection failure, 5xx, 408, or 401/403 (credentials can be fixed): try again.
    case transient(String)
    /// Other 4xx (invalid request, unknown `source`, key reused with a different body — 422 in the
    /// draft): the same request never succeeds.
    case rejected(status: Int, String)
}

/// `POST /subscription/v1/credits/earn {amount, reference_id, source, user_id}` with an
/// `Idempotency-Key`: the Subscription Service applies a key once and replays its first answer,
/// so sending the same reward any number of times credits the user once. Field names and `source`
/// values are the seed's (004, UC-ADS-4.1 21c: `source: 'ad_reward', reference_id: ad_request_id`;
/// UC-ADS-4.4 23c: `source: 'promo'` for a campaign reward). The body is encoded with sorted keys
/// so that a retry sends the same bytes as the Ads Service's first call (docs/jobs-geo-ads.md,
/// "Idempotency key"). Stateless; safe from any thread.
public struct SubscriptionCreditsClient: Sendable {
    public let http: HTTPClient
    public let configuration: AdsConfiguration

    public init(http: HTTPClient, configuration: AdsConfiguration) {
        self.http = http
        self.configuration = configuration
    }

    /// The body of `/credits/earn`. `source` is one of `Source`'s values, the vocabulary the
    /// service knows (0002_domain.sql, `'ad_reward', 'promo', 'purchase', 'unlock'`).
    public struct EarnRequest: Encodable, Sendable, Equatable {
        public let user_id: String
        public let amount: Int
        public let source: String
        public let reference_id: String

        public init(user_id: String, amount: Int, source: Source, reference_id: String) {
            self.user_id = user_id
            self.amount = amount
            self.source = source.rawValue
            self.reference_id = reference_id
        }
    }

    /// `source` values of `/credits/earn` this job sends.
    public enum Source: String, Sendable {
        /// A rewarded ad (seed 004, UC-ADS-4.1 21c); `reference_id` = the ad request id.
        case adReward = "ad_reward"
        /// A campaign reward (seed 004, UC-ADS-4.4 23c); `reference_id` = the campaign id.
        case promo
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
        case .permanent where response.status == 409:
            return .inFlight(retryAfter: response.retryAfter?.delay(from: Date()))
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
