import Foundation
import WorkersHTTP

/// What `/credits/earn` answered, sorted by what it says about *this* request (docs/jobs-geo-ads.md, "The reward
/// contract"): only `rejected` is an answer about the request and counts as an attempt.
public enum CreditOutcome: Sendable, Equatable {
    /// 2xx: credited now, or earlier under the same idempotency key (a replay: the first answer again,
    /// marked `Idempotent-Replayed: true`) — by this job or by the Ads Service's own first call.
    case credited(replayed: Bool)
    /// 409: a request with the same idempotency key is still being processed (by a duplicate job, or
    /// the Ads Service's original call). Not a failure: ask again later and get the replayed answer
    /// (draft-ietf-httpapi-idempotency-key-header, "Error Scenarios": 409 Conflict for a retried
    /// request whose original is still outstanding). Seconds from Retry-After, if any.
    case inFlight(retryAfter: Double?)
    /// 429 (seconds from Retry-After, if any). Not counted.
    case rateLimited(retryAfter: Double?)
    /// Timeout, connection failure, 5xx, 408, 401/403 (our credentials), 404/405 (the route is missing: a
    /// deploy or our URL): the service, or our access to it, is not working. Says nothing about the request;
    /// not counted.
    case transient(String)
    /// Any other 4xx (400 — e.g. a key a strict parser refuses —, 422 — a key reused with another body, an unknown
    /// `source` —, 413, …): an answer about the request itself. Counted as an attempt.
    case rejected(status: Int, String)
    /// The request could not be built (an idempotency key that is not printable ASCII cannot be an sf-string):
    /// nothing was sent, and nothing we can resend would differ.
    case unsendable(String)
}

/// `POST /subscription/v1/credits/earn` exactly as the seed's Ads Service calls it (004, UC-ADS-4.1 21c:
/// `{ amount: 1, source: 'ad_reward', reference_id: ad_request_id }`; UC-ADS-4.4 23c:
/// `{ amount: 10, source: 'promo', reference: campaign_id }`), with the contract's headers
/// (docs/jobs-geo-ads.md, "The reward contract"):
/// - `Idempotency-Key: "<key>"`, an RFC 8941 sf-string as draft-ietf-httpapi-idempotency-key-header §2.1 requires
///   ("Idempotency-Key is an Item Structured Header … Its value MUST be a String");
/// - `X-User-Id: <user uuid>`: the user credited. The seed's call names the user neither in its path nor in its
///   body (the Ads Service makes it while serving the user's own request); the key is scoped per user;
/// - `Authorization: Bearer <ADS_SUBSCRIPTION_API_KEY>` when configured (our credential, not the Ads Service's:
///   the key's scope does not include the credential).
/// Stateless; safe from any thread.
public struct SubscriptionCreditsClient: Sendable {
    public let http: HTTPClient
    public let configuration: AdsConfiguration

    /// The header naming the credited user (the contract's; the seed names the user nowhere in the call).
    public static let userHeader = "X-User-Id"

    public init(http: HTTPClient, configuration: AdsConfiguration) {
        self.http = http
        self.configuration = configuration
    }

    /// The seed's body of `/credits/earn`, field for field: `amount`, `source`, and the reference under the name
    /// the seed gives it for that source (`reference_id` for `ad_reward`, `reference` for `promo`). No `user_id`:
    /// the seed's call has none (the user is `X-User-Id`). Encoded with sorted keys, no spaces; the service
    /// fingerprints the members' values, so key order does not matter to it.
    public struct EarnRequest: Encodable, Sendable, Equatable {
        public let amount: Int
        public let source: Source
        public let reference: String

        public init(amount: Int, source: Source, reference: String) {
            self.amount = amount
            self.source = source
            self.reference = reference
        }

        private struct Key: CodingKey {
            let stringValue: String
            init(_ name: String) { stringValue = name }
            init?(stringValue: String) { self.stringValue = stringValue }
            var intValue: Int? { nil }
            init?(intValue: Int) { nil }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(amount, forKey: Key("amount"))
            try container.encode(source.rawValue, forKey: Key("source"))
            try container.encode(reference, forKey: Key(source.referenceField))
        }
    }

    /// `source` values of `/credits/earn` this job sends (the credits ledger's vocabulary, 0002_domain.sql).
    public enum Source: String, Sendable {
        /// A rewarded ad (seed 004, UC-ADS-4.1 21c); the reference is the ad request id, as `reference_id`.
        case adReward = "ad_reward"
        /// A campaign reward (seed 004, UC-ADS-4.4 23c); the reference is the campaign id, as `reference`.
        case promo

        /// The body member that carries the reference, as the seed writes each call.
        public var referenceField: String {
            switch self {
            case .adReward: return "reference_id"
            case .promo: return "reference"
            }
        }
    }

    public func earn(_ body: EarnRequest, userID: String, idempotencyKey: String, cancellation: HTTPCancellation?)
        -> CreditOutcome {
        guard let key = StructuredFieldString(idempotencyKey) else {
            return .unsendable("the idempotency key is not printable ASCII, so it cannot be sent as an sf-string")
        }
        var request: HTTPRequest
        do {
            request = try HTTPRequest.json(.post, configuration.subscriptionServiceURL + "/subscription/v1/credits/earn",
                                           body: body)
        } catch {
            return .unsendable(error.description)
        }
        request = request.with(header: "Idempotency-Key", key.serialized).with(header: Self.userHeader, userID)
        if let token = configuration.subscriptionAPIKey { request = request.with(header: "Authorization", "Bearer \(token)") }
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
        case .permanent where response.status == 404 || response.status == 405:
            return .transient("Subscription Service has no /credits/earn route here (HTTP \(response.status)): "
                              + "a deploy in progress, or ADS_SUBSCRIPTION_SERVICE_URL is wrong")
        case .permanent:
            return .rejected(status: response.status, String(response.text.prefix(200)))
        }
    }
}
