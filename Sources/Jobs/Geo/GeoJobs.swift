import HTTP
import Logging
import Queue
import Workers

/// Registers the Offline/Geolocation jobs: `ReverseGeocodeJob` and `LocationAnonymizationJob`.
///
/// `redis` is the pool the geocoding cache and the fleet-wide rate limiter use (jobs get no Redis
/// connection from the runtime). Give it at least as many connections as you expect concurrent
/// geocoding jobs to touch it at once; connections are held for one command, never while waiting.
public enum GeoJobs {
    /// Refuses (throws, registering nothing) a configuration without a contact in the User-Agent, as
    /// Nominatim's usage policy asks (`GeoConfiguration.validate()`). Logs `usagePolicyWarning` (a production
    /// start with the public OSMF server) on `logger`, once per registration.
    public static func register(into registry: inout JobRegistry, configuration: GeoConfiguration, http: HTTPClient,
                                redis: RedisPool, logger: Logger = Logger(label: "jobs.geo")) throws(GeoAdsConfigurationError) {
        try configuration.validate()
        if let warning = configuration.usagePolicyWarning {
            logger.warning("\(warning)", metadata: ["variable": "GEO_NOMINATIM_URL",
                                                    "policy": "\(GeoConfiguration.nominatimUsagePolicyURL)"])
        }
        registry.register(ReverseGeocodeJob(geocoder: ReverseGeocoder(configuration: configuration, http: http, redis: redis)))
        registry.register(LocationAnonymizationJob(configuration: configuration))
    }

    public static let classNames = [ReverseGeocodeJob.className, LocationAnonymizationJob.className]
}
