import Foundation
import HTTP
import Queue

/// Why a reverse lookup did not produce an answer, and how the job must treat it.
public enum GeocodeFailure: Error, Sendable, CustomStringConvertible {
    /// 429: the provider asks us to slow down (seconds from Retry-After, or nil).
    case rateLimited(retryAfter: Double?)
    /// Timeout, connection failure, 5xx, 408, a body that is not the JSON we expect: try again.
    case transient(String)
    /// The provider refused the request (4xx other than 408/429), e.g. a blocked User-Agent:
    /// retrying the same request will not help.
    case refused(status: Int, String)

    public var isRetryable: Bool {
        if case .refused = self { return false }
        return true
    }

    public var description: String {
        switch self {
        case .rateLimited(let after):
            return "geocoding provider answered 429" + (after.map { " (Retry-After \(Int($0.rounded(.up))) s)" } ?? "")
        case .transient(let why): return "geocoding provider unavailable: \(why)"
        case .refused(let status, let why): return "geocoding provider refused the request (HTTP \(status)): \(why)"
        }
    }
}

/// Nominatim's `/reverse?format=jsonv2`. One request per call; no caching or rate limiting here
/// (see `ReverseGeocoder`). Stateless; safe from any thread.
public struct NominatimClient: Sendable {
    public let http: HTTPClient
    public let configuration: GeoConfiguration

    public init(http: HTTPClient, configuration: GeoConfiguration) {
        self.http = http
        self.configuration = configuration
    }

    public func request(for cell: GeocodeCell) -> HTTPRequest {
        var query: [(String, String)] = [
            ("lat", cell.latitudeText), ("lon", cell.longitudeText), ("format", "jsonv2"), ("addressdetails", "1"),
        ]
        if let language = configuration.acceptLanguage { query.append(("accept-language", language)) }
        if let email = configuration.contactEmail { query.append(("email", email)) }
        var request = HTTPRequest.get(configuration.nominatimBaseURL + "/reverse", query: query)
            .with(header: "User-Agent", configuration.effectiveUserAgent)
            .with(header: "Accept", "application/json")
        request.timeout = .milliseconds(Int(configuration.requestTimeout * 1000))
        return request
    }

    public func reverse(_ cell: GeocodeCell, cancellation: HTTPCancellation?) throws(GeocodeFailure) -> GeocodeResult {
        var request = request(for: cell)
        request.cancellation = cancellation
        let response: HTTPResponse
        do {
            response = try http.send(request)
        } catch {
            throw .transient(error.description)
        }
        switch response.classification() {
        case .success:
            return try Self.parse(response.body)
        case .rateLimited(let after):
            throw .rateLimited(retryAfter: after)
        case .transient:
            throw .transient("HTTP \(response.status)")
        case .permanent:
            throw .refused(status: response.status, String(response.text.prefix(200)))
        }
    }

    /// Parses a jsonv2 answer. `{"error": "Unable to geocode"}` (no coverage) is a valid empty
    /// answer; a body that is not a JSON object is transient (a truncated or proxied response).
    public static func parse(_ body: Data) throws(GeocodeFailure) -> GeocodeResult {
        guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            throw .transient("response is not a JSON object")
        }
        if object["error"] != nil { return .empty }
        guard let address = object["address"] as? [String: Any] else { return .empty }
        func text(_ key: String) -> String? {
            guard let value = address[key] as? String else { return nil }
            let trimmed = value.trimmingCharacters(in: .whitespacesAndNewlines)
            return trimmed.isEmpty ? nil : trimmed
        }
        let city = ["city", "town", "village", "municipality", "hamlet"].lazy.compactMap(text).first
        return GeocodeResult(countryCode: text("country_code")?.uppercased(), country: text("country"), city: city)
    }
}

/// Cache, then the fleet-wide rate limit, then the provider; a fresh answer is cached.
public struct ReverseGeocoder: Sendable {
    public let client: NominatimClient
    public let cache: GeocodeCache
    public let limiter: ProviderRateLimiter
    public let configuration: GeoConfiguration

    public init(configuration: GeoConfiguration, http: HTTPClient, redis: RedisPool) {
        self.configuration = configuration
        self.client = NominatimClient(http: http, configuration: configuration)
        self.cache = GeocodeCache(redis: redis, provider: configuration.provider, ttl: configuration.cacheTTL)
        self.limiter = ProviderRateLimiter(redis: redis, provider: configuration.provider,
                                           minimumInterval: configuration.minimumInterval,
                                           maxWait: configuration.maxRateLimitWait)
    }

    public func cell(latitude: Double, longitude: Double) -> GeocodeCell {
        GeocodeCell(latitude: latitude, longitude: longitude, decimals: configuration.cellDecimals)
    }

    /// Throws `GeocodeFailure`, `ProviderRateLimiter.WaitError` or a Redis error.
    public func reverse(latitude: Double, longitude: Double, isCancelled: @escaping @Sendable () -> Bool) throws -> GeocodeResult {
        let cell = cell(latitude: latitude, longitude: longitude)
        if let cached = try cache.lookup(cell) { return cached }
        try limiter.acquire(isCancelled: isCancelled)
        let result: GeocodeResult
        do {
            result = try client.reverse(cell, cancellation: HTTPCancellation(isCancelled: isCancelled))
        } catch {
            // A 429 pauses the whole fleet for Retry-After (at least 1 s) before it is rethrown.
            if case .rateLimited(let after) = error { try limiter.pause(seconds: after ?? 1) }
            throw error
        }
        try cache.store(result, for: cell)
        return result
    }
}
