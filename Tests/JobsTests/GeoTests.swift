import Foundation
import HTTP
import Jobs
import Queue
import Storage
import TestSupport
import Workers
import XCTest

/// ReverseGeocodeJob and LocationAnonymizationJob against real Redis (db 25) and PostgreSQL and
/// the fake Nominatim.
final class GeoTests: XCTestCase {
    var redis: TestRedis!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var fakes: FakeServers!
    var http: HTTPClient!
    var processes: [WorkerProcess] = []

    override class func setUp() {
        super.setUp()
        CurlRuntime.initialize()
    }

    override func setUpWithError() throws {
        redis = try TestRedis(database: 25)
        try redis.flush()
        fakes = try FakeServers.shared()
        try fakes.reset(.nominatim)
        database = try PostgresTestDatabase.create(prefix: "geo_test")
        pool = PostgresPool(url: database.url, maxConnections: 12)
        _ = try Migrator.bundled().migrate(pool: pool)
        http = HTTPClient(configuration: HTTPClientConfiguration(timeout: .seconds(10)))
    }

    override func tearDown() {
        for process in processes { process.shutdown() }
        processes = []
        pool?.shutdown()
        database?.drop()
    }

    func configuration(requestTimeout: Double = 5) -> GeoConfiguration {
        GeoConfiguration(nominatimBaseURL: fakes.nominatimBaseURL, userAgent: "SwiftWorkers-GeoTests/1.0",
                         contactEmail: "ops@example.org", requestTimeout: requestTimeout, anonymizeBatchSize: 2)
    }

    func runner(_ configuration: GeoConfiguration? = nil) -> GeoAdsRunner {
        var registry = JobRegistry()
        GeoJobs.register(into: &registry, configuration: configuration ?? self.configuration(), http: http, redis: redis.pool)
        return GeoAdsRunner(registry: registry, database: JobDatabase(pool: pool))
    }

    struct Row {
        let countryCode: String?, country: String?, city: String?, geocoded: Bool, error: String?
    }

    func row(_ id: UUID) throws -> Row? {
        try pool.withConnection { connection in
            try connection.queryFirst("""
                SELECT country_code, country, city, geocoded_at IS NOT NULL AS geocoded, geocode_error
                FROM user_locations WHERE id = $1
                """, [id]).map {
                Row(countryCode: try $0.optionalString("country_code"), country: try $0.optionalString("country"),
                    city: try $0.optionalString("city"), geocoded: try $0.bool("geocoded"),
                    error: try $0.optionalString("geocode_error"))
            }
        }
    }

    func args(_ id: UUID) -> [JSONValue] { [.object(["location_id": .string(id.uuidString)])] }

    func reverseRequests() throws -> [FakeRequest] { try fakes.requests(.nominatim, path: "/reverse") }

    // MARK: - Happy paths

    func testGeocodesWithTownFallbackAndIdentifyingUserAgent() throws {
        let user = try GeoAdsSeed.user(pool)
        let id = try GeoAdsSeed.location(pool, user: user, latitude: 45.8992, longitude: 6.1294)
        try runner().run(ReverseGeocodeJob.className, args(id))
        let stored = try XCTUnwrap(try row(id))
        XCTAssertEqual(stored.countryCode, "FR")
        XCTAssertEqual(stored.country, "France")
        XCTAssertEqual(stored.city, "Annecy", "city falls back to town")
        XCTAssertTrue(stored.geocoded)
        XCTAssertNil(stored.error)
        let request = try XCTUnwrap(try reverseRequests().first)
        XCTAssertEqual(request.header("User-Agent"), "SwiftWorkers-GeoTests/1.0 (contact: ops@example.org)")
        XCTAssertTrue(request.query.contains("format=jsonv2"), request.query)
        // The provider is asked about the rounded cell, never the raw coordinates.
        XCTAssertTrue(request.query.contains("lat=45.90") && request.query.contains("lon=6.13"), request.query)
        XCTAssertFalse(request.query.contains("45.8992"))
    }

    func testVillageFallbackFromRegisteredPlace() throws {
        try fakes.admin(.nominatim, "POST", "nominatim/places", json: [
            "lat": 46.5, "lon": 7.5,
            "result": ["address": ["hamlet": "Kleinweiler", "country": "Schweiz", "country_code": "ch"]],
        ])
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 46.5012, longitude: 7.4987)
        try runner().run(ReverseGeocodeJob.className, args(id))
        let stored = try XCTUnwrap(try row(id))
        XCTAssertEqual(stored.city, "Kleinweiler")
        XCTAssertEqual(stored.countryCode, "CH")
    }

    func testUnableToGeocodeIsAValidEmptyAnswer() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 0.001, longitude: -0.002)
        try runner().run(ReverseGeocodeJob.className, args(id))
        let stored = try XCTUnwrap(try row(id))
        XCTAssertTrue(stored.geocoded)
        XCTAssertNil(stored.countryCode)
        XCTAssertNil(stored.city)
        XCTAssertNil(stored.error)
        XCTAssertEqual(try reverseRequests().count, 1)
    }

    func testSameCellIsServedFromTheCache() throws {
        let user = try GeoAdsSeed.user(pool)
        let first = try GeoAdsSeed.location(pool, user: user, latitude: 48.8566, longitude: 2.3522)
        let second = try GeoAdsSeed.location(pool, user: user, latitude: 48.8589, longitude: 2.3491)
        let runner = runner()
        try runner.run(ReverseGeocodeJob.className, args(first))
        try runner.run(ReverseGeocodeJob.className, args(second))
        XCTAssertEqual(try row(second)?.city, "Paris")
        XCTAssertEqual(try reverseRequests().count, 1, "the second lookup of the cell must come from Redis")
        let keys = try redis.command("KEYS", "geocode:nominatim:*").strings
        XCTAssertEqual(keys, ["geocode:nominatim:2:48.86,2.35"])
        let ttl = try redis.int("TTL", keys[0])
        XCTAssertTrue((86_000...86_400).contains(ttl), "cache TTL \(ttl)")
    }

    func testWithoutConsentNothingIsLookedUpAndTheLocationIsRemoved() throws {
        let refused = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool, consentGeolocation: false),
                                              latitude: 48.85, longitude: 2.35)
        let noSettings = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool, consentGeolocation: nil),
                                                 latitude: 48.85, longitude: 2.35)
        try runner().run(ReverseGeocodeJob.className, args(refused))
        try runner().run(ReverseGeocodeJob.className, args(noSettings))
        XCTAssertNil(try row(refused))
        XCTAssertNil(try row(noSettings))
        XCTAssertEqual(try reverseRequests().count, 0)
    }

    func testRunTwiceAppliesOnceAndAsksOnce() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 52.52, longitude: 13.405)
        let payload = try GeoAdsRunner.payload(ReverseGeocodeJob.className, args(id))
        let runner = runner()
        try runner.run(payload)
        try runner.run(payload)  // the same delivery again: skipped by the ledger
        try runner.run(ReverseGeocodeJob.className, args(id))  // a duplicate job: the row is already geocoded
        XCTAssertEqual(try row(id)?.city, "Berlin")
        XCTAssertEqual(try reverseRequests().count, 1)
    }

    // MARK: - Bad input

    func testBadInputIsRejectedWithAClearReason() throws {
        let user = try GeoAdsSeed.user(pool)
        let cases: [(UUID, String)] = [
            (try GeoAdsSeed.location(pool, user: user, latitude: 91.3, longitude: 2), "latitude out of range"),
            (try GeoAdsSeed.location(pool, user: user, latitude: 10, longitude: -180.4), "longitude out of range"),
            (try GeoAdsSeed.location(pool, user: user, latitude: 10, longitude: 10, accuracy: 1500), "worse than the accepted 1000 m"),
            (try GeoAdsSeed.location(pool, user: user, latitude: 10, longitude: 10, accuracy: nil), "accuracy unknown"),
        ]
        for (id, reason) in cases {
            XCTAssertThrowsError(try runner().run(ReverseGeocodeJob.className, args(id))) { error in
                guard case JobError.badInput(let why) = error else { return XCTFail("\(error)") }
                XCTAssertTrue(why.contains(reason), why)
            }
            XCTAssertEqual(try row(id)?.geocoded, false)
            XCTAssertTrue(try row(id)?.error?.contains(reason) ?? false)
        }
        XCTAssertThrowsError(try runner().run(ReverseGeocodeJob.className, [.object(["location_id": "nope"])])) { error in
            XCTAssertTrue("\(error)".contains("location_id must be a UUID"), "\(error)")
        }
        XCTAssertThrowsError(try runner().run(ReverseGeocodeJob.className, [])) { error in
            XCTAssertTrue(error is DispatchError, "\(error)")
        }
        XCTAssertEqual(try reverseRequests().count, 0)
    }

    func testBadInputEndsInDeadThroughTheWorker() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 10, longitude: 10, accuracy: 5000)
        let workers = GeoAdsWorkers(redis: redis, registry: runner().registry, database: JobDatabase(pool: pool))
        processes.append(try workers.start(concurrency: 2))
        _ = try redis.client.enqueue(NewJob(ReverseGeocodeJob.className, args: args(id)))
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        let dead = try XCTUnwrap(try redis.payloads(zset: Keys.dead).first)
        XCTAssertEqual(dead.fields["error_class"]?.stringValue, "BadInput")
        XCTAssertTrue(dead.fields["error_message"]?.stringValue?.contains("accuracy 5000 m is worse") ?? false)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
    }

    // MARK: - Transient failures

    func testTransientFailuresRetryThenKeepRawCoordinates() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 51.5, longitude: -0.12)
        let runner = runner(configuration(requestTimeout: 0.5))
        // 5xx, a timeout, a truncated body: each is retryable (neither bad input nor permanent).
        try fakes.script(.nominatim, ["status": 503, "body": "busy"])
        try fakes.script(.nominatim, ["hang": true, "delay": 3])
        try fakes.script(.nominatim, ["malformed_json": true])
        for step in ["503", "timeout", "malformed"] {
            XCTAssertThrowsError(try runner.run(ReverseGeocodeJob.className, args(id))) { error in
                switch error {
                case JobError.badInput, JobError.permanent: XCTFail("\(step) must be retryable: \(error)")
                default: break
                }
            }
            XCTAssertEqual(try row(id)?.geocoded, false)
            XCTAssertNotNil(try row(id)?.error, step)
        }
        // 429 with Retry-After: retried after that delay, and the whole fleet pauses.
        try fakes.script(.nominatim, ["status": 429, "retry_after": 2, "body": "slow down"])
        XCTAssertThrowsError(try runner.run(ReverseGeocodeJob.className, args(id))) { error in
            guard case JobError.retryAfter(let seconds, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(seconds, 2, accuracy: 0.01)
        }
        let pausedUntil = try XCTUnwrap(try redis.command("GET", "ratelimit:nominatim:next").integer)
        let redisNow = try redis.command("TIME").strings.first.flatMap { Int64($0) }.map { $0 * 1000 } ?? 0
        XCTAssertGreaterThan(pausedUntil, redisNow, "the limiter must hold the fleet back after a 429")
        try redis.flush()
        // The last attempt (retry_count 5 of 6 retries) fails too: the raw coordinates stay, no dead job.
        try fakes.script(.nominatim, ["status": 502])
        try runner.run(ReverseGeocodeJob.className, args(id), retryCount: 5)
        let stored = try XCTUnwrap(try row(id))
        XCTAssertNil(stored.countryCode)
        XCTAssertNil(stored.city)
        XCTAssertFalse(stored.geocoded)
        XCTAssertTrue(stored.error?.hasPrefix("gave up after 7 attempts") ?? false, stored.error ?? "nil")
        let raw = try pool.withConnection { try $0.queryFirst("SELECT latitude FROM user_locations WHERE id = $1", [id])?.double("latitude") }
        XCTAssertEqual(raw, 51.5)
    }

    func testRefusalByTheProviderIsPermanent() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 51.5, longitude: -0.12)
        try fakes.script(.nominatim, ["status": 403, "body": "Access blocked"])
        XCTAssertThrowsError(try runner().run(ReverseGeocodeJob.className, args(id))) { error in
            guard case JobError.permanent(let why) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("HTTP 403"), why)
        }
        XCTAssertTrue(try row(id)?.error?.contains("403") ?? false)
    }

    // MARK: - Fleet-wide rate limit

    /// 4 worker processes × 10 threads geocode 12 distinct cells at once. The limiter spaces the
    /// requests by 1 s + margin across the fleet, so the fake Nominatim never sees two requests
    /// within one second. Strict bound: no tolerance (the margin absorbs send-time jitter).
    func testFleetWideRateLimitHoldsWithFourProcessesOfTenThreads() throws {
        let user = try GeoAdsSeed.user(pool)
        let ids = try (0..<12).map { try GeoAdsSeed.location(pool, user: user, latitude: 10 + Double($0) * 0.5, longitude: 20) }
        // The fake also answers 429 to a second request within 1 s: a violation would show up as a retry too.
        try fakes.configure(.nominatim, ["rate_limit_per_second": 1])
        let registry = runner().registry
        for _ in 0..<4 {
            let workers = GeoAdsWorkers(redis: redis, registry: registry, database: JobDatabase(pool: pool))
            processes.append(try workers.start(concurrency: 10))
        }
        _ = try redis.client.enqueueMany(ids.map { NewJob(ReverseGeocodeJob.className, args: args($0)) })
        XCTAssertTrue(try eventually(timeout: 90) { try ids.allSatisfy { try row($0)?.geocoded == true } })
        XCTAssertEqual(try reverseRequests().count, 12)
        XCTAssertEqual(try fakes.maxRequestsInWindow(.nominatim, path: "/reverse", window: 1.0), 1)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0,
                       "waiting jobs sleep for their slot instead of burning a retry")
    }

    /// The limiter itself, called by 40 threads: slots are handed out at least one interval apart.
    func testLimiterGrantsSlotsOneIntervalApartAcrossThreads() throws {
        let limiter = ProviderRateLimiter(redis: redis.pool, provider: "limiter-test", minimumInterval: 0.05, maxWait: 30)
        let times = LockedTimes()
        let group = DispatchGroup()
        for _ in 0..<40 {
            group.enter()
            Thread.detachNewThread {
                if (try? limiter.acquire(isCancelled: { false })) != nil { times.append(Date().timeIntervalSince1970) }
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        let sorted = times.all.sorted()
        XCTAssertEqual(sorted.count, 40)
        // 40 slots 50 ms apart span at least 39 intervals, however the threads interleave.
        XCTAssertGreaterThanOrEqual(sorted.last! - sorted.first!, 39 * 0.05 - 0.05)
        // A backlog beyond maxWait is refused without taking a slot.
        let impatient = ProviderRateLimiter(redis: redis.pool, provider: "limiter-test", minimumInterval: 10, maxWait: 1)
        try impatient.acquire(isCancelled: { false })
        XCTAssertThrowsError(try impatient.acquire(isCancelled: { false })) { error in
            guard case ProviderRateLimiter.WaitError.backlog = error else { return XCTFail("\(error)") }
        }
    }

    // MARK: - Anonymisation

    func testLocationsOlderThan90DaysAreAnonymisedInBatches() throws {
        let user = try GeoAdsSeed.user(pool)
        let old = try (0..<5).map { try GeoAdsSeed.location(pool, user: user, latitude: 48.85661 + Double($0), longitude: 2.35222, ageDays: 91 + $0) }
        let recent = try GeoAdsSeed.location(pool, user: user, latitude: 48.85661, longitude: 2.35222, ageDays: 89)
        try runner().run(LocationAnonymizationJob.className, [])
        try runner().run(LocationAnonymizationJob.className, [])  // again: nothing left to do, nothing changes
        for id in old {
            let row = try XCTUnwrap(try pool.withConnection {
                try $0.queryFirst("SELECT user_id, latitude, longitude, accuracy, altitude, anonymized_at FROM user_locations WHERE id = $1", [id])
            })
            XCTAssertNil(try row.optionalUUID("user_id"))
            XCTAssertNil(try row.optionalDouble("accuracy"))
            XCTAssertNil(try row.optionalDouble("altitude"))
            XCTAssertNotNil(try row.optionalDate("anonymized_at"))
            XCTAssertEqual(try row.double("longitude"), 2.4)
            let latitude = try row.double("latitude")
            XCTAssertEqual(latitude, (latitude * 10).rounded() / 10)
        }
        let kept = try XCTUnwrap(try pool.withConnection {
            try $0.queryFirst("SELECT user_id, latitude, anonymized_at FROM user_locations WHERE id = $1", [recent])
        })
        XCTAssertEqual(try kept.optionalUUID("user_id"), user)
        XCTAssertEqual(try kept.double("latitude"), 48.85661)
        XCTAssertNil(try kept.optionalDate("anonymized_at"))
        XCTAssertThrowsError(try runner().run(LocationAnonymizationJob.className, [.int(1)]))
    }

    // MARK: - Configuration

    func testConfigurationFromEnvironment() throws {
        let defaults = try GeoConfiguration.fromEnvironment([:])
        XCTAssertEqual(defaults.nominatimBaseURL, "https://nominatim.openstreetmap.org")
        XCTAssertEqual(defaults.requestsPerSecond, 1)
        XCTAssertEqual(defaults.cacheTTL, 86_400)
        let custom = try GeoConfiguration.fromEnvironment([
            "GEO_NOMINATIM_URL": "http://127.0.0.1:9/", "GEO_CONTACT_EMAIL": "geo@example.org",
            "GEO_RATE_LIMIT_PER_SECOND": "0.5", "GEO_USER_AGENT": "Quiz/2",
        ])
        XCTAssertEqual(custom.nominatimBaseURL, "http://127.0.0.1:9")
        XCTAssertEqual(custom.effectiveUserAgent, "Quiz/2 (contact: geo@example.org)")
        XCTAssertEqual(custom.minimumInterval, 2.1, accuracy: 1e-9)
        XCTAssertThrowsError(try GeoConfiguration.fromEnvironment(["GEO_RATE_LIMIT_PER_SECOND": "fast"]))
        XCTAssertThrowsError(try GeoConfiguration.fromEnvironment(["GEO_NOMINATIM_URL": "ftp://x"]))
    }

    func testNominatimParsing() throws {
        func parse(_ text: String) throws -> GeocodeResult { try NominatimClient.parse(Data(text.utf8)) }
        XCTAssertEqual(try parse(#"{"error":"Unable to geocode"}"#), .empty)
        XCTAssertEqual(try parse(#"{"address":{"municipality":"M","village":"V","country_code":"ar","country":"Argentina"}}"#),
                       GeocodeResult(countryCode: "AR", country: "Argentina", city: "V"))
        XCTAssertEqual(try parse(#"{"address":{"city":"C","town":"T"}}"#).city, "C")
        XCTAssertThrowsError(try parse(#"{"address": {"#))
        XCTAssertThrowsError(try parse("[1]"))
    }
}

final class LockedTimes: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Double] = []
    func append(_ value: Double) { lock.withLock { values.append(value) } }
    var all: [Double] { lock.withLock { values } }
}
