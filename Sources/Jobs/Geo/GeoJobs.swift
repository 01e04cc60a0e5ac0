import WorkersHTTP
import Logging
import WorkersQueue
import Workers

/// Registers the Offline/Geolocation jobs: `ReverseGeocodeJob` and `LocationAnonymizationJob`.
///
/// `redis` is the pool the geocoding cache and the fleet-wide rate limiter use (jobs get no Redis
/// connection from the runtime). Give it at least as many connections as you expect concurrent
/// geocoding jobs to touch it at once; connections are held for one command, never while waiting.
public enum GeoJobs {
    /// Refuses (throws, registering nothing) a configuration without a contact in the User-Agent, or with the public
    /// OSMF server outside a non-production `WORKERS_ENV`, as Nominatim's usage policy asks
    /// (`GeoConfiguration.validate()`).
    public static func register(into registry: inout JobRegistry, configuration: GeoConfiguration, http: HTTPClient,
                                redis: RedisPool) throws(GeoAdsConfigurationError) {
        try configuration.validate()
        registry.register(ReverseGeocodeJob(geocoder: ReverseGeocoder(configuration: configuration, http: http, redis: redis)))
        registry.register(LocationAnonymizationJob(configuration: configuration))
    }

    public static let classNames = [ReverseGeocodeJob.className, LocationAnonymizationJob.className]
}
