import Foundation
import Logging
import WorkersQueue
import WorkersStorage
import Workers

/// `LocationAnonymizationJob` `[]` (nightly): locations older than `anonymizeAfterDays` (90) lose
/// their link to the user (`user_id` NULL), their precision (coordinates rounded to
/// `anonymizedDecimals`, ≈ 11 km) and accuracy/altitude; `anonymized_at` is set. Country and city
/// stay (they are not identifying on their own and keep aggregate statistics possible).
///
/// Batches of `anonymizeBatchSize` rows, one short transaction each (`FOR UPDATE SKIP LOCKED`, so
/// two runs at once share the work instead of blocking). Idempotent by its WHERE clause, so it
/// does not use the ledger; a run cut short is finished by the next one.
public struct LocationAnonymizationJob: Job {
    /// `args: []`.
    public struct Arguments: NoJobArguments, Equatable {
        public static let className = "LocationAnonymizationJob"
        public init() {}
    }
    public static let options = JobOptions(maxRetries: 5, backoff: .sidekiq, timeout: .seconds(3600), usesLedger: false)

    let configuration: GeoConfiguration

    public init(configuration: GeoConfiguration) { self.configuration = configuration }

    public func perform(_ arguments: Arguments, context: JobContext) throws {
        var total = 0
        while true {
            if context.isCancelled { throw GeoAdsCancelled(job: Self.className) }
            let count = try context.withConnection { try anonymizeBatch($0) }
            total += count
            if count < configuration.anonymizeBatchSize { break }
        }
        context.logger.info("locations anonymised", metadata: ["rows": "\(total)"])
    }

    /// Anonymises at most one batch; returns how many rows it changed.
    public func anonymizeBatch(_ connection: PostgresConnection) throws -> Int {
        try connection.transaction { connection in
            try connection.execute("""
                WITH batch AS (
                    SELECT id FROM user_locations
                    WHERE anonymized_at IS NULL AND created_at < now() - make_interval(days => $1::int)
                    ORDER BY created_at
                    LIMIT $2::int
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE user_locations l
                SET user_id = NULL,
                    latitude = round(l.latitude::numeric, $3::int)::double precision,
                    longitude = round(l.longitude::numeric, $3::int)::double precision,
                    accuracy = NULL, altitude = NULL, geocode_error = NULL, anonymized_at = now()
                FROM batch WHERE l.id = batch.id
                """, [configuration.anonymizeAfterDays, configuration.anonymizeBatchSize, configuration.anonymizedDecimals])
        }
    }
}
