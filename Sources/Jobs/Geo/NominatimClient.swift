import Foundation
import WorkersHTTP
import WorkersQueue
import Workers

/// Why a reverse lookup did not produce an answer, and how the job must treat it.
public enum GeocodeFailure: Error, Sendable, CustomStringConvertible {
    /// 429: the provider asks us to slow down (seconds from Retry-After, or nil).
    case rateLimited(retryAfter: Double?)
    /// Timeout, connection failure, 5xx, 408, a body that is not the JSON we expect: try again.
    case transient(String)
    /// The provider refused the request (4xx other than 408/429): retrying the same request will not help.
    /// A 403 means the provider blocks this client (Nominatim's usage policy): `ReverseGeocoder` turns it
    /// into a fleet-wide `GeocodingBlocked`.
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

/// The provider blocks this client (HTTP 403 under Nominatim's usage policy), or a block is in force
/// fleet-wide (`ProviderBlock`): no lookup was sent. `startedBlock` is true for exactly one call
/// across the fleet per block, the one whose 403 started it: that caller raises the alert.
public struct GeocodingBlocked: Error, Sendable, CustomStringConvertible {
    public let provider: String
    /// Seconds until one probe may call the provider again.
    public let resumeIn: Double
    public let startedBlock: Bool

    public var description: String {
        "geocoding provider \(provider) blocks this client (HTTP 403, usage policy): no lookups fleet-wide for "
            + "\(Int(resumeIn.rounded(.up))) s, then one probe"
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
            ("zoom", String(configuration.zoom)), ("accept-language", configuration.acceptLanguage),
        ]
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

/// Cache, then the provider block switch and the fleet-wide rate limit, then the provider; a fresh answer
/// is cached.
///
/// The rate limit is a `bucket` limit named after the provider (`limit:<provider>`, capacity 1 per
/// `GeoConfiguration.minimumInterval`), taken for every request through a `CallLimiter` (docs/limiters.md):
/// at most one request per interval fleet-wide. A lookup that would wait longer than
/// `GeoConfiguration.maxRateLimitWait` for its turn throws `CallLimitError.overLimit`, and the job is
/// rescheduled (not a failure). A 429 holds the limit back for Retry-After; a 403 throws the block switch.
public struct ReverseGeocoder: Sendable {
    public let client: NominatimClient
    public let cache: GeocodeCache
    /// One request per `minimumInterval`, fleet-wide.
    public let rate: CallLimiter
    /// Nominatim's 403: nobody calls it until one probe gets an answer.
    public let block: ProviderBlock
    public let configuration: GeoConfiguration

    public init(configuration: GeoConfiguration, http: HTTPClient, redis: RedisPool) {
        self.configuration = configuration
        self.client = NominatimClient(http: http, configuration: configuration)
        self.cache = GeocodeCache(redis: redis, provider: configuration.provider, language: configuration.acceptLanguage,
                                  zoom: configuration.zoom, ttl: configuration.cacheTTL)
        self.rate = CallLimiter(Self.rateLimit(configuration), redis: redis,
                                patience: Bounded.duration(seconds: configuration.maxRateLimitWait))
        self.block = ProviderBlock(redis: redis, provider: configuration.provider, patience: configuration.maxRateLimitWait)
    }

    /// The provider's request rate as a limit declaration: a bucket of one token per `minimumInterval`.
    public static func rateLimit(_ configuration: GeoConfiguration) -> LimitDeclaration {
        .bucket(configuration.provider, capacity: 1, per: Bounded.duration(seconds: configuration.minimumInterval))
    }

    public func cell(latitude: Double, longitude: Double) -> GeocodeCell {
        GeocodeCell(latitude: latitude, longitude: longitude, decimals: configuration.cellDecimals)
    }

    /// Throws `GeocodingBlocked` (a 403, or a block in force), `GeocodeFailure`, `CallLimitError` (over the
    /// rate limit past the wait limit: the runner reschedules; cancelled) or a Redis error.
    public func reverse(latitude: Double, longitude: Double, isCancelled: @escaping @Sendable () -> Bool) throws -> GeocodeResult {
        let cell = cell(latitude: latitude, longitude: longitude)
        if let cached = try cache.lookup(cell) { return cached }
        let pass: ProviderBlock.Pass
        do {
            pass = try block.enter(isCancelled: isCancelled)
        } catch let blocked as ProviderBlock.Blocked {
            throw GeocodingBlocked(provider: configuration.provider, resumeIn: blocked.seconds, startedBlock: false)
        }
        do {
            try rate.acquire(isCancelled: isCancelled)
            // A block that started while this caller waited for its turn stops it (the probe itself goes ahead).
            if pass.probeToken == nil, let left = try block.blockedFor() {
                throw GeocodingBlocked(provider: configuration.provider, resumeIn: left, startedBlock: false)
            }
        } catch {
            if let token = pass.probeToken { try? block.releaseProbe(token) }
            throw error
        }
        let result: GeocodeResult
        do {
            result = try client.reverse(cell, cancellation: HTTPCancellation(isCancelled: isCancelled))
        } catch {
            try settle(pass, after: error)
        }
        // Any answer ends a block this request probed.
        if let token = pass.probeToken { try block.liftBlock(probeToken: token) }
        try cache.store(result, for: cell)
        return result
    }

    /// Reports a failed request to the block switch and the rate limit, then throws what the job must handle.
    private func settle(_ pass: ProviderBlock.Pass, after error: GeocodeFailure) throws -> Never {
        switch error {
        case .refused(status: 403, _):
            // Blocked (usage policy): the whole fleet stops; only the call that started the block alerts.
            let started = try block.block(seconds: configuration.blockPause, probeToken: pass.probeToken)
            throw GeocodingBlocked(provider: configuration.provider, resumeIn: configuration.blockPause,
                                   startedBlock: started)
        case .rateLimited(let after):
            // The provider answered: not blocked. A 429 holds the whole fleet back for Retry-After (at least 1 s).
            if let token = pass.probeToken { try block.liftBlock(probeToken: token) }
            try rate.hold(for: Bounded.duration(seconds: after ?? 1))
        case .refused:
            if let token = pass.probeToken { try block.liftBlock(probeToken: token) }
        case .transient:
            // No verdict on the block: the next caller probes.
            if let token = pass.probeToken { try block.releaseProbe(token) }
        }
        throw error
    }
}
