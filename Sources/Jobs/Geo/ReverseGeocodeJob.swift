import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// `ReverseGeocodeJob` `[{"location_id": "<uuid>"}]`: fills `country_code`, `country` and `city`
/// of one `user_locations` row.
///
/// Rules (jobs.md §4): the user's `consent_geolocation` must be true, else nothing is looked up
/// and the location is deleted; latitude/longitude in range and accuracy known and ≤ the limit
/// (1000 m), else bad input (dead). Answers come from the Redis cache or the provider under the
/// fleet-wide rate limit. After the last retry the raw coordinates stay with country/city NULL
/// and `geocode_error` says why: a valid end state, not a dead job. The same end state, at once, when
/// the provider blocks us (403): the fleet stops calling it (`ProviderBlock.block`), one alert
/// is logged fleet-wide, and lookups resume after `GeoConfiguration.blockPause` with one probe.
///
/// Exactly-once: the row update goes through the ledger; the lookup itself is a read, so a
/// repeated lookup costs a provider request (usually a cache hit) but changes nothing twice.
public struct ReverseGeocodeJob: Job {
    /// Over the provider's rate limit (`ReverseGeocoder.rate`, a `CallLimiter`) past the wait limit, the job
    /// is rescheduled for when the limiter says it admits again, plus up to 1 s: not a failure, not a retry.
    public static let options: JobOptions = {
        var options = JobOptions(maxRetries: 6, backoff: .exponential(base: .seconds(30), cap: .seconds(1800), jitter: 0.2),
                                 timeout: .seconds(300), usesLedger: true)
        options.limits = JobLimits([], overLimit: OverLimitPolicy(backoff: OverLimitPolicy.limiterWait(jitter: .seconds(1), cap: .seconds(300))))
        return options
    }()

    /// `[{"location_id": "<uuid>"}]` (a value that is not a UUID: `JobError.badInput`, dead at once).
    public struct Arguments: JobArguments, Equatable {
        public static let className = "ReverseGeocodeJob"
        public let locationID: UUID
        public init(locationID: UUID) { self.locationID = locationID }
        enum CodingKeys: String, CodingKey { case location_id }
        public init(from decoder: any Decoder) throws {
            let text = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .location_id)
            locationID = try ArgumentUUID.parse(text, field: "location_id")
        }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encodeUUID(locationID, forKey: .location_id)
        }
    }

    let geocoder: ReverseGeocoder
    let configuration: GeoConfiguration

    public init(geocoder: ReverseGeocoder) {
        self.geocoder = geocoder
        self.configuration = geocoder.configuration
    }

    /// The location as read before the lookup.
    struct Location {
        let userID: UUID?
        let latitude: Double
        let longitude: Double
        let accuracy: Double?
        let geocoded: Bool
        let anonymized: Bool
        let consent: Bool
    }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        let id = arguments.locationID
        guard let location = try context.withConnection({ try Self.load(id, $0) }) else {
            context.logger.info("location no longer exists; nothing to geocode")
            return
        }
        if location.anonymized || location.userID == nil {
            context.logger.info("location already anonymised; nothing to geocode")
            return
        }
        if !location.consent {
            try context.transaction { connection in
                try connection.execute("DELETE FROM user_locations WHERE id = $1", [id])
            }
            context.logger.info("no geolocation consent: location deleted without lookup")
            return
        }
        if location.geocoded {
            context.logger.info("location already geocoded")
            return
        }
        if let problem = validate(location) {
            try context.withConnection { try Self.recordError(id, "bad input: \(problem)", $0) }
            throw JobError.badInput(problem)
        }

        let result: GeocodeResult
        do {
            let cancellation = context.cancellation
            result = try geocoder.reverse(latitude: location.latitude, longitude: location.longitude,
                                          isCancelled: { cancellation.isCancelled })
        } catch {
            try handleFailure(error, id: id, context: context)
            return
        }
        try context.transaction { connection in
            if try ErasedUser.skips(location.userID, on: connection, context) { return }  // erasure stays erased (ErasedUser)
            // Consent is checked again under the row lock: a revocation during the lookup wins.
            let row = try connection.queryFirst("""
                SELECT coalesce(p.consent_geolocation, false) AS consent
                FROM user_locations l LEFT JOIN privacy_settings p ON p.user_id = l.user_id
                WHERE l.id = $1 FOR UPDATE OF l
                """, [id])
            guard let row else { return }
            if try !row.bool("consent") {
                try connection.execute("DELETE FROM user_locations WHERE id = $1", [id])
                return
            }
            try connection.execute("""
                UPDATE user_locations SET country_code = $2, country = $3, city = $4, geocoded_at = now(),
                       geocode_error = NULL
                WHERE id = $1 AND anonymized_at IS NULL
                """, [id, result.countryCode, result.country, result.city])
        }
        context.logger.info("location geocoded", metadata: ["found": "\(result != .empty)"])
    }

    /// Range and accuracy checks; nil when the location is acceptable.
    func validate(_ location: Location) -> String? {
        guard location.latitude.isFinite, (-90...90).contains(location.latitude) else {
            return "latitude out of range -90...90"
        }
        guard location.longitude.isFinite, (-180...180).contains(location.longitude) else {
            return "longitude out of range -180...180"
        }
        guard let accuracy = location.accuracy else {
            return "accuracy unknown; at most \(Int(configuration.maxAccuracyMeters)) m is accepted"
        }
        guard accuracy.isFinite, accuracy >= 0, accuracy <= configuration.maxAccuracyMeters else {
            return "accuracy \(Int(accuracy.rounded())) m is worse than the accepted \(Int(configuration.maxAccuracyMeters)) m"
        }
        return nil
    }

    /// Retryable failures are retried until the last attempt, which keeps the raw coordinates
    /// (country/city NULL, `geocode_error` set) and succeeds. A block (403) ends the job the same way at
    /// once: retrying within this job's horizon cannot help, and every retry would be one more call
    /// against a provider that has banned us. Another refusal (4xx) goes to dead.
    func handleFailure(_ error: any Error, id: UUID, context: JobContext) throws {
        // Over the rate limit: the runner reschedules the job; not a failure, nothing to record.
        if case CallLimitError.overLimit = error { throw error }
        let message = "\(error)"
        if let blocked = error as? GeocodingBlocked {
            if blocked.startedBlock {
                // Once per block, fleet-wide (the Redis block key decides who started it): an operator must act.
                context.logger.error("ALERT geocoding provider blocked this client (HTTP 403): lookups paused fleet-wide",
                                     metadata: ["alert": "geocoding_provider_blocked", "provider": "\(blocked.provider)",
                                                "pause_seconds": "\(Int(blocked.resumeIn.rounded(.up)))"])
            }
            try context.transaction { connection in
                try connection.execute("UPDATE user_locations SET geocode_error = $2 WHERE id = $1 AND geocoded_at IS NULL",
                                       [id, "not geocoded, raw coordinates kept: \(message)"])
            }
            context.logger.warning("geocoding provider blocks this client; raw coordinates kept")
            return
        }
        if case GeocodeFailure.refused = error {
            try context.withConnection { try Self.recordError(id, message, $0) }
            context.logger.error("geocoding provider refused the request", metadata: ["error": "\(message)"])
            throw JobError.permanent(message)
        }
        if Self.isLastAttempt(context) {
            try context.transaction { connection in
                try connection.execute("""
                    UPDATE user_locations SET geocode_error = $2 WHERE id = $1
                    """, [id, "gave up after \(context.attempt) attempts: \(message)"])
            }
            context.logger.warning("geocoding gave up; raw coordinates kept", metadata: ["error": "\(message)"])
            return
        }
        try context.withConnection { try Self.recordError(id, message, $0) }
        switch error {
        case GeocodeFailure.rateLimited(let after):
            throw JobError.retryAfter(Bounded.duration(seconds: after ?? 1), reason: message)
        default:
            throw error
        }
    }

    /// Whether a failure of this run would exhaust the retries (the runtime's rule: a run with
    /// retry count n fails into dead when n + 1 ≥ max retries).
    static func isLastAttempt(_ context: JobContext) -> Bool {
        let maxRetries: Int
        switch context.payload.retry {
        case .disabled: maxRetries = 0
        case .limit(let n): maxRetries = n
        case .enabled, .unspecified: maxRetries = options.maxRetries
        }
        return context.attempt - 1 >= maxRetries
    }

    static func load(_ id: UUID, _ connection: PostgresConnection) throws -> Location? {
        guard let row = try connection.queryFirst("""
            SELECT l.user_id, l.latitude, l.longitude, l.accuracy, l.geocoded_at IS NOT NULL AS geocoded,
                   l.anonymized_at IS NOT NULL AS anonymized, coalesce(p.consent_geolocation, false) AS consent
            FROM user_locations l LEFT JOIN privacy_settings p ON p.user_id = l.user_id
            WHERE l.id = $1
            """, [id]) else { return nil }
        return Location(userID: try row.optionalUUID("user_id"), latitude: try row.double("latitude"),
                        longitude: try row.double("longitude"), accuracy: try row.optionalDouble("accuracy"),
                        geocoded: try row.bool("geocoded"), anonymized: try row.bool("anonymized"),
                        consent: try row.bool("consent"))
    }

    /// The last failure, outside the ledger (a note, not an effect).
    static func recordError(_ id: UUID, _ message: String, _ connection: PostgresConnection) throws {
        try connection.execute("UPDATE user_locations SET geocode_error = $2 WHERE id = $1 AND geocoded_at IS NULL",
                               [id, String(message.prefix(500))])
    }
}
