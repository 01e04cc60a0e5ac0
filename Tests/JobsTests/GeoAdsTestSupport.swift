import Foundation
import HTTP
import Jobs
import Logging
import Queue
import Storage
import TestSupport
import Workers
import XCTest

/// Runs jobs of the Geo and Ads areas the way the runtime does (registry → decode → validate →
/// perform with a real `JobContext` and PostgreSQL), without a worker process.
struct GeoAdsRunner {
    let registry: JobRegistry
    let database: JobDatabase

    /// A payload for `className` with `args`; `retryCount` makes it a retried delivery
    /// (attempt = retryCount + 2, as the runtime counts).
    static func payload(_ className: String, _ args: [JSONValue], jid: String = Identifiers.jid(),
                        retryCount: Int? = nil) throws -> JobPayload {
        var payload = try JobClient.payload(for: NewJob(className, args: args), jid: jid, createdAt: Clock.now(),
                                            enqueuedAt: Clock.now())
        if let retryCount { payload.fields["retry_count"] = .int(Int64(retryCount)) }
        return payload
    }

    /// Prepares and runs `payload`. Skips the run (like the runtime) when the ledger already holds its jid.
    func run(_ payload: JobPayload, cancellation: CancellationFlag = CancellationFlag()) throws {
        let prepared = try registry.prepare(payload)
        if prepared.options.usesLedger, let jid = payload.jid, try database.isApplied(jid: jid) { return }
        var logger = Logger(label: "geo-ads-test")
        logger.logLevel = .critical
        let attempt = (payload.retryCount ?? -1) + 2
        let context = JobContext(jid: payload.jid ?? "-", className: payload.className, queue: "default", attempt: attempt,
                                 payload: payload, deadline: Date().addingTimeInterval(prepared.options.timeout),
                                 cancellation: cancellation, logger: logger, database: database)
        try prepared.run(context)
    }

    func run(_ className: String, _ args: [JSONValue], retryCount: Int? = nil) throws {
        try run(try Self.payload(className, args, retryCount: retryCount))
    }
}

/// Rows the tests create.
enum GeoAdsSeed {
    @discardableResult
    static func user(_ pool: PostgresPool, consentGeolocation: Bool? = true) throws -> UUID {
        let id = UUID()
        try pool.withConnection { connection in
            try connection.execute("INSERT INTO users (id, app_id) VALUES ($1, $2)", [id, UUID()])
            if let consentGeolocation {
                try connection.execute("INSERT INTO privacy_settings (user_id, consent_geolocation) VALUES ($1, $2)",
                                       [id, consentGeolocation])
            }
        }
        return id
    }

    static func location(_ pool: PostgresPool, user: UUID?, latitude: Double, longitude: Double, accuracy: Double? = 25,
                         ageDays: Int = 0) throws -> UUID {
        let id = UUID()
        try pool.withConnection { connection in
            try connection.execute("""
                INSERT INTO user_locations (id, user_id, latitude, longitude, accuracy, altitude, source, created_at)
                VALUES ($1, $2, $3, $4, $5, 120, 'gps', now() - make_interval(days => $6::int))
                """, [id, user, latitude, longitude, accuracy, ageDays])
        }
        return id
    }
}

/// Builds worker processes that run the Geo and Ads jobs.
struct GeoAdsWorkers {
    let redis: TestRedis
    let registry: JobRegistry
    let database: JobDatabase

    /// `logger`: where the processes and their jobs log (default: nothing below critical).
    func start(concurrency: Int, logger: Logger? = nil) throws -> WorkerProcess {
        var configuration = WorkerConfiguration()
        configuration.redisURL = redis.url
        configuration.concurrency = concurrency
        configuration.heartbeatInterval = 0.2
        configuration.fetcherHeartbeatTTL = 1
        configuration.orphanSweepInterval = 0.3
        configuration.pollInterval = 0.2
        configuration.shutdownTimeout = 2
        var quiet = Logger(label: "geo-ads-worker")
        quiet.logLevel = .critical
        let logger = logger ?? quiet
        let process = try WorkerProcess(configuration: configuration, registry: registry, database: database, logger: logger)
        try process.start()
        return process
    }
}
