import Foundation

/// Settings of the reverse-geocoding and location jobs. Read once at start-up; immutable after.
public struct GeoConfiguration: Sendable {
    /// Nominatim base URL (the `/reverse` endpoint is appended).
    public var nominatimBaseURL: String
    /// Identifies this application to the provider (Nominatim's usage policy requires it). May carry the
    /// contact itself, e.g. `Quiz/2 (+https://quiz.example/contact)`.
    public var userAgent: String
    /// Contact address sent as Nominatim's `email` parameter and in the User-Agent; nil = none (then
    /// `userAgent` must hold a contact: see `validate()`).
    public var contactEmail: String?
    /// `accept-language` parameter (BCP 47 list, e.g. "en" or "de-CH,de"): the language of the stored
    /// country and city names. Part of the cache key.
    public var acceptLanguage: String
    /// Nominatim `zoom`: the level of detail of the answer (10 city, 12 town/borough, 13 village/suburb,
    /// 18 building). A settlement level is enough for a city and cheaper for the provider. Part of the cache key.
    public var zoom: Int
    /// After a 403 (the provider blocks us), how long the whole fleet sends nothing; then one probe.
    public var blockPause: Double
    /// Name of the provider in Redis keys (rate limit and cache are per provider).
    public var provider: String
    /// Fleet-wide requests per second to the provider, across all processes and threads.
    public var requestsPerSecond: Double
    /// Extra spacing added to `1 / requestsPerSecond` between two granted requests, so that the
    /// jitter between being granted a slot and the request reaching the provider cannot put two
    /// requests into one second.
    public var rateLimitMargin: Double
    /// Longest a job waits for its slot before it gives the slot up and retries later.
    public var maxRateLimitWait: Double
    /// How long a geocoding answer stays in the Redis cache. Default 4 weeks: the answer is the settlement and
    /// country of a ~1.1 km cell (`cellDecimals` 2), which do not move; what changes is an occasional OSM edit (a
    /// renamed or newly mapped village), and serving that a few weeks late costs nothing, while every day of TTL
    /// cut means the cells users keep reporting from are asked again (the usage policy's "periodic requests").
    public var cacheTTL: Int
    /// Decimals kept when rounding coordinates to a cache cell (2 ≈ 1.1 km). The provider is
    /// asked about the cell's centre, never about the raw coordinates.
    public var cellDecimals: Int
    /// Worst acceptable accuracy in metres.
    public var maxAccuracyMeters: Double
    /// Per-request timeout for the provider.
    public var requestTimeout: Double
    /// Locations older than this are anonymised by `LocationAnonymizationJob`.
    public var anonymizeAfterDays: Int
    /// Rows per anonymisation transaction.
    public var anonymizeBatchSize: Int
    /// Decimals kept in anonymised coordinates (1 ≈ 11 km).
    public var anonymizedDecimals: Int

    /// The deployment environment, `WORKERS_ENV` (`production`, `staging`, `development`, …; nil = not said).
    /// Decides whether the public OSMF server may be the provider (`usagePolicyRefusal`): only in one of
    /// `nonProductionEnvironments`; unset counts as production.
    public var deploymentEnvironment: String?

    /// The public OSMF server: the default, for development. Its usage policy
    /// (https://operations.osmfoundation.org/policies/nominatim/) calls periodic requests from apps bulk geocoding
    /// ("strongly discouraged") and counts "the sum of traffic by all your users": a production fleet must use an
    /// own instance or a commercial provider.
    public static let productionNominatimURL = "https://nominatim.openstreetmap.org"
    public static let publicNominatimHost = "nominatim.openstreetmap.org"
    public static let nominatimUsagePolicyURL = "https://operations.osmfoundation.org/policies/nominatim/"
    /// 4 weeks (see `cacheTTL`).
    public static let defaultCacheTTL = 2_419_200

    public init(nominatimBaseURL: String = GeoConfiguration.productionNominatimURL,
                userAgent: String = "SwiftWorkers-Geo/1.0", contactEmail: String? = nil, acceptLanguage: String = "en",
                zoom: Int = 13, blockPause: Double = 3600, provider: String = "nominatim", requestsPerSecond: Double = 1, rateLimitMargin: Double = 0.1,
                maxRateLimitWait: Double = 120, cacheTTL: Int = GeoConfiguration.defaultCacheTTL, cellDecimals: Int = 2,
                maxAccuracyMeters: Double = 1000, requestTimeout: Double = 10, anonymizeAfterDays: Int = 90,
                anonymizeBatchSize: Int = 1000, anonymizedDecimals: Int = 1, deploymentEnvironment: String? = nil) {
        self.nominatimBaseURL = nominatimBaseURL
        self.userAgent = userAgent
        self.contactEmail = contactEmail
        self.acceptLanguage = acceptLanguage
        self.zoom = zoom
        self.blockPause = blockPause
        self.provider = provider
        self.requestsPerSecond = requestsPerSecond
        self.rateLimitMargin = rateLimitMargin
        self.maxRateLimitWait = maxRateLimitWait
        self.cacheTTL = cacheTTL
        self.cellDecimals = cellDecimals
        self.maxAccuracyMeters = maxAccuracyMeters
        self.requestTimeout = requestTimeout
        self.anonymizeAfterDays = anonymizeAfterDays
        self.anonymizeBatchSize = anonymizeBatchSize
        self.anonymizedDecimals = anonymizedDecimals
        self.deploymentEnvironment = deploymentEnvironment
    }

    /// `WORKERS_ENV` values that name a non-production deployment (compared case-insensitively): the only ones in
    /// which the public OSMF server may be the provider.
    public static let nonProductionEnvironments: Set<String> = ["development", "dev", "local", "test", "testing", "ci",
                                                                "staging", "demo"]

    /// Why this configuration may not start (review 3 N7/L-l): the provider is the public OSMF server and
    /// `WORKERS_ENV` does not name a non-production environment (`production`, another name, or unset — an unset
    /// environment is how a production fleet forgets to say it). nil for an own instance or a commercial provider,
    /// and for the public server in development, test or staging. `validate()` throws it, so the geo area does not
    /// start (its jobs stay `UnconfiguredJob`: retried and visible, never calling the public server).
    public var usagePolicyRefusal: String? {
        guard URL(string: nominatimBaseURL)?.host?.lowercased() == Self.publicNominatimHost else { return nil }
        if let environment = deploymentEnvironment?.lowercased(), Self.nonProductionEnvironments.contains(environment) {
            return nil
        }
        return "GEO_NOMINATIM_URL is the public OSMF Nominatim server and WORKERS_ENV does not name a non-production "
            + "environment (\(Self.nonProductionEnvironments.sorted().joined(separator: ", "))): its usage policy "
            + "(\(Self.nominatimUsagePolicyURL)) calls periodic requests from apps bulk geocoding and counts the traffic "
            + "of all users together; it is for development. Point GEO_NOMINATIM_URL at an own instance or a commercial "
            + "provider, or set WORKERS_ENV=development"
    }

    /// The User-Agent actually sent: the configured one plus the contact, when given.
    public var effectiveUserAgent: String {
        guard let contactEmail else { return userAgent }
        return "\(userAgent) (contact: \(contactEmail))"
    }

    /// Nominatim's usage policy asks for a User-Agent that identifies the application *with contact details*, and
    /// keeps its public server for development: throws unless `effectiveUserAgent` holds an e-mail address or an
    /// http(s) URL, and on `usagePolicyRefusal`. The geo area refuses to start on either (`fromEnvironment`,
    /// `GeoJobs.register`).
    public func validate() throws(GeoAdsConfigurationError) {
        guard Self.containsContact(effectiveUserAgent) else {
            throw GeoAdsConfigurationError(
                variable: "GEO_CONTACT_EMAIL",
                reason: "Nominatim's usage policy requires a contact (e-mail or URL) in the User-Agent: set "
                    + "GEO_CONTACT_EMAIL, or put a URL or address in GEO_USER_AGENT")
        }
        if let refusal = usagePolicyRefusal {
            throw GeoAdsConfigurationError(variable: "GEO_NOMINATIM_URL", reason: refusal)
        }
        guard (3...18).contains(zoom) else {
            throw GeoAdsConfigurationError(variable: "GEO_ZOOM", reason: "expected 3...18")
        }
    }

    /// True when `text` holds an e-mail address (`local@domain.tld`) or an `http://` / `https://` URL.
    static func containsContact(_ text: String) -> Bool {
        let separators = CharacterSet.whitespaces.union(CharacterSet(charactersIn: "()<>,;[]\"\""))
        return text.components(separatedBy: separators).contains { token in
            let lowered = token.lowercased()
            for scheme in ["http://", "https://"] {
                // `+https://…` is the usual way to put a URL in a User-Agent comment.
                if let found = lowered.range(of: scheme) {
                    let host = lowered[found.upperBound...].prefix { $0 != "/" }
                    return host.count > 3 && host.contains(".") && !host.hasPrefix(".") && !host.hasSuffix(".")
                }
            }
            let parts = token.split(separator: "@", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty else { return false }
            let domain = parts[1].split(separator: ".", omittingEmptySubsequences: false)
            return domain.count >= 2 && domain.allSatisfy { !$0.isEmpty }
        }
    }

    /// Seconds between two granted requests, fleet-wide.
    public var minimumInterval: Double { 1 / requestsPerSecond + rateLimitMargin }

    /// Every variable has a default, but a contact is required (GEO_CONTACT_EMAIL, or a URL or address in
    /// GEO_USER_AGENT): see `validate()` and docs/jobs-geo-ads.md.
    public static func fromEnvironment(_ environment: [String: String]) throws -> GeoConfiguration {
        let env = GeoAdsEnvironment(environment)
        let provider = env.string("GEO_PROVIDER", default: "nominatim")
        guard provider.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw GeoAdsConfigurationError(variable: "GEO_PROVIDER", reason: "letters, digits, '-' and '_' only")
        }
        let language = env.string("GEO_ACCEPT_LANGUAGE", default: "en")
        guard language.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-,;=.* ".contains($0)) }) else {
            throw GeoAdsConfigurationError(variable: "GEO_ACCEPT_LANGUAGE", reason: "expected language tags such as 'en' or 'de-CH,de'")
        }
        let configuration = GeoConfiguration(
            nominatimBaseURL: try env.url("GEO_NOMINATIM_URL", default: productionNominatimURL),
            userAgent: env.string("GEO_USER_AGENT", default: "SwiftWorkers-Geo/1.0"),
            contactEmail: env.string("GEO_CONTACT_EMAIL"),
            acceptLanguage: language,
            zoom: try env.int("GEO_ZOOM", default: 13, range: 3...18),
            blockPause: try env.double("GEO_BLOCK_PAUSE_SECONDS", default: 3600, range: 1...604_800),
            provider: provider,
            requestsPerSecond: try env.double("GEO_RATE_LIMIT_PER_SECOND", default: 1, range: 0.001...100),
            rateLimitMargin: try env.double("GEO_RATE_LIMIT_MARGIN_SECONDS", default: 0.1, range: 0...10),
            maxRateLimitWait: try env.double("GEO_RATE_LIMIT_MAX_WAIT_SECONDS", default: 120, range: 1...3600),
            cacheTTL: try env.int("GEO_CACHE_TTL_SECONDS", default: defaultCacheTTL, range: 1...31_536_000),
            cellDecimals: try env.int("GEO_CACHE_CELL_DECIMALS", default: 2, range: 0...5),
            maxAccuracyMeters: try env.double("GEO_MAX_ACCURACY_METERS", default: 1000, range: 1...100_000),
            requestTimeout: try env.double("GEO_REQUEST_TIMEOUT_SECONDS", default: 10, range: 0.1...120),
            anonymizeAfterDays: try env.int("GEO_ANONYMIZE_AFTER_DAYS", default: 90, range: 1...3650),
            anonymizeBatchSize: try env.int("GEO_ANONYMIZE_BATCH_SIZE", default: 1000, range: 1...100_000),
            anonymizedDecimals: try env.int("GEO_ANONYMIZED_DECIMALS", default: 1, range: 0...3),
            deploymentEnvironment: env.string("WORKERS_ENV"))
        try configuration.validate()
        return configuration
    }
}
