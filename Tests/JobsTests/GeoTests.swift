import Foundation
import WorkersHTTP
import WorkersAppJobs
import Logging
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// ReverseGeocodeJob and LocationAnonymizationJob against real Redis (db 25) and PostgreSQL and
/// the fake Nominatim.
final class GeoTests: JobsTestCase {
    var processes: [WorkerProcess] = []

    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "geo_test", connections: 12, redis: 25, fakes: .shared(reset: [.nominatim]))
    }

    override func tearDown() {
        for process in processes { process.shutdown() }
        processes = []
        super.tearDown()
    }

    func configuration(requestTimeout: Double = 5, acceptLanguage: String = "en",
                       blockPause: Double = 3600) -> GeoConfiguration {
        GeoConfiguration(nominatimBaseURL: fakes.nominatimBaseURL, userAgent: "SwiftWorkers-GeoTests/1.0",
                         contactEmail: "ops@example.org", acceptLanguage: acceptLanguage, blockPause: blockPause,
                         requestTimeout: requestTimeout, anonymizeBatchSize: 2)
    }

    /// The geo jobs with `configuration` (default: `configuration()`).
    func registry(_ configuration: GeoConfiguration? = nil) throws -> JobRegistry {
        var registry = JobRegistry()
        try GeoJobs.register(into: &registry, configuration: configuration ?? self.configuration(), http: http,
                             redis: redis.pool)
        return registry
    }

    /// The geo jobs as a worker runs them (JobRunner: ledger check on redelivery, retries, dead).
    func driver(_ configuration: GeoConfiguration? = nil) throws -> JobRunnerDriver {
        fixture.driver(try registry(configuration))
    }

    /// Starts `count` worker processes running the geo jobs with `configuration`, logging (info and above) into `log`.
    func startWorkers(_ count: Int, concurrency: Int, configuration: GeoConfiguration, log: CapturedLogs) throws {
        let registry = try registry(configuration)
        for index in 0..<count {
            processes.append(try TestWorker.start(redis: redis, registry: registry, database: fixture.jobDatabase,
                                                  concurrency: concurrency,
                                                  logger: log.logger(label: "geo-worker-\(index)", level: .info)))
        }
    }

    /// Every job ended: nothing queued, scheduled, retrying or in flight, and `count` runs settled.
    func allSettled(_ count: Int) throws -> Bool {
        try redis.processed() + redis.int("ZCARD", Keys.dead) >= count && redis.int("LLEN", Keys.queue("default")) == 0
            && redis.int("ZCARD", Keys.retry) == 0 && redis.workingKeys().allSatisfy { try redis.int("LLEN", $0) == 0 }
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
        try driver().run(ReverseGeocodeJob.className, args(id))
        let stored = try XCTUnwrap(try row(id))
        XCTAssertEqual(stored.countryCode, "FR")
        XCTAssertEqual(stored.country, "France")
        XCTAssertEqual(stored.city, "Annecy", "city falls back to town")
        XCTAssertTrue(stored.geocoded)
        XCTAssertNil(stored.error)
        let request = try XCTUnwrap(try reverseRequests().first)
        XCTAssertEqual(request.header("User-Agent"), "SwiftWorkers-GeoTests/1.0 (contact: ops@example.org)")
        XCTAssertTrue(request.query.contains("format=jsonv2"), request.query)
        // A settlement-level answer, in the configured language (default en).
        XCTAssertTrue(request.query.contains("zoom=13"), request.query)
        XCTAssertTrue(request.query.contains("accept-language=en"), request.query)
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
        try driver().run(ReverseGeocodeJob.className, args(id))
        let stored = try XCTUnwrap(try row(id))
        XCTAssertEqual(stored.city, "Kleinweiler")
        XCTAssertEqual(stored.countryCode, "CH")
    }

    func testUnableToGeocodeIsAValidEmptyAnswer() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 0.001, longitude: -0.002)
        try driver().run(ReverseGeocodeJob.className, args(id))
        let stored = try XCTUnwrap(try row(id))
        XCTAssertTrue(stored.geocoded)
        XCTAssertNil(stored.countryCode)
        XCTAssertNil(stored.city)
        XCTAssertNil(stored.error)
        XCTAssertEqual(try reverseRequests().count, 1)
        // Open sea (mid-Atlantic): the provider finds nothing near; the same valid empty answer.
        let sea = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 40.0, longitude: -40.0)
        try driver().run(ReverseGeocodeJob.className, args(sea))
        let atSea = try XCTUnwrap(try row(sea))
        XCTAssertTrue(atSea.geocoded)
        XCTAssertNil(atSea.countryCode)
        XCTAssertNil(atSea.city)
        XCTAssertEqual(try reverseRequests().count, 2)
    }

    /// The configured language reaches the provider, and answers in one language are never served for another.
    func testAcceptLanguageReachesTheProviderAndKeysTheCache() throws {
        let user = try GeoAdsSeed.user(pool)
        let english = try GeoAdsSeed.location(pool, user: user, latitude: 52.5201, longitude: 13.4049)
        let german = try GeoAdsSeed.location(pool, user: user, latitude: 52.5202, longitude: 13.4048)  // same cell
        try driver(configuration(acceptLanguage: "en")).run(ReverseGeocodeJob.className, args(english))
        try driver(configuration(acceptLanguage: "de")).run(ReverseGeocodeJob.className, args(german))
        XCTAssertEqual(try row(english)?.country, "Germany")
        XCTAssertEqual(try row(german)?.country, "Deutschland")
        XCTAssertEqual(try row(german)?.countryCode, "DE")
        let queries = try reverseRequests().map(\.query)
        guard queries.count == 2 else { return XCTFail("a cached English answer must not serve a German lookup: \(queries)") }
        XCTAssertTrue(queries[0].contains("accept-language=en") && queries[1].contains("accept-language=de"), "\(queries)")
        XCTAssertEqual(Set(try redis.command("KEYS", "geocode:*").strings),
                       ["geocode:nominatim:en:z13:2:52.52,13.40", "geocode:nominatim:de:z13:2:52.52,13.40"])
    }

    func testSameCellIsServedFromTheCache() throws {
        let user = try GeoAdsSeed.user(pool)
        let first = try GeoAdsSeed.location(pool, user: user, latitude: 48.8566, longitude: 2.3522)
        let second = try GeoAdsSeed.location(pool, user: user, latitude: 48.8589, longitude: 2.3491)
        let driver = try self.driver()
        try driver.run(ReverseGeocodeJob.className, args(first))
        try driver.run(ReverseGeocodeJob.className, args(second))
        XCTAssertEqual(try row(second)?.city, "Paris")
        XCTAssertEqual(try reverseRequests().count, 1, "the second lookup of the cell must come from Redis")
        let keys = try redis.command("KEYS", "geocode:nominatim:*").strings
        XCTAssertEqual(keys, ["geocode:nominatim:en:z13:2:48.86,2.35"])
        let ttl = try redis.int("TTL", keys[0])
        XCTAssertTrue((2_419_000...2_419_200).contains(ttl), "cache TTL \(ttl) (4 weeks)")
    }

    func testWithoutConsentNothingIsLookedUpAndTheLocationIsRemoved() throws {
        let refused = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool, consentGeolocation: false),
                                              latitude: 48.85, longitude: 2.35)
        let noSettings = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool, consentGeolocation: nil),
                                                 latitude: 48.85, longitude: 2.35)
        try driver().run(ReverseGeocodeJob.className, args(refused))
        try driver().run(ReverseGeocodeJob.className, args(noSettings))
        XCTAssertNil(try row(refused))
        XCTAssertNil(try row(noSettings))
        XCTAssertEqual(try reverseRequests().count, 0)
    }

    func testRunTwiceAppliesOnceAndAsksOnce() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 52.52, longitude: 13.405)
        let payload = try JobRunnerDriver.payload(ReverseGeocodeJob.className, args(id))
        let driver = try self.driver()
        try driver.run(payload)
        try driver.redeliverInterrupted(payload)  // the same delivery again: skipped by the ledger
        try driver.run(ReverseGeocodeJob.className, args(id))  // a duplicate job: the row is already geocoded
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
            Failure.settled(try driver().deliver(ReverseGeocodeJob.className, args(id)), in: .dead, errorClass: "BadInput",
                            messagePrefix: "bad input: ", containing: [reason])
            XCTAssertEqual(try row(id)?.geocoded, false)
            XCTAssertTrue(try row(id)?.error?.contains(reason) ?? false)
        }
        Failure.settled(try driver().deliver(ReverseGeocodeJob.className, [.object(["location_id": "nope"])]), in: .dead,
                        errorClass: "BadInput", messagePrefix: "invalid arguments for \(ReverseGeocodeJob.className): ",
                        containing: ["location_id must be a UUID"])
        Failure.dead(try driver().deliver(ReverseGeocodeJob.className, []), errorClass: "BadInput",
                     messagePrefix: "arguments do not fit \(ReverseGeocodeJob.className): ")
        XCTAssertEqual(try reverseRequests().count, 0)
    }

    func testBadInputEndsInDeadThroughTheWorker() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 10, longitude: 10, accuracy: 5000)
        processes.append(try TestWorker.start(redis: redis, registry: try registry(), database: fixture.jobDatabase,
                                              concurrency: 2))
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
        let driver = try self.driver(configuration(requestTimeout: 0.5))
        // 5xx, a timeout, a truncated body: each is a transient provider failure (retried), with its own reason.
        try fakes.script(.nominatim, ["status": 503, "body": "busy"])
        try fakes.script(.nominatim, ["hang": true, "delay": 3])
        try fakes.script(.nominatim, ["malformed_json": true])
        let expected = [("503", "HTTP 503"), ("timeout", "HTTP timeout"), ("malformed", "response is not a JSON object")]
        for (step, reason) in expected {
            // GeocodeFailure.transient(reason): retried, with its own reason.
            Failure.settled(try driver.deliver(ReverseGeocodeJob.className, args(id)), in: .retry,
                            errorClass: Failure.className(of: GeocodeFailure.self),
                            messagePrefix: "geocoding provider unavailable: ", containing: [reason])
            XCTAssertEqual(try row(id)?.geocoded, false)
            XCTAssertNotNil(try row(id)?.error, step)
        }
        // 429 with Retry-After: retried after that delay, and the whole fleet pauses.
        try fakes.script(.nominatim, ["status": 429, "retry_after": 2, "body": "slow down"])
        Failure.isRetryAfter(try driver.deliver(ReverseGeocodeJob.className, args(id)), seconds: 2)
        // The `limit:nominatim` bucket admits nobody for the Retry-After (2 s): asked now, it refuses.
        let rate = ReverseGeocoder.rateLimit(configuration())
        let admission = try redis.pool.withConnection { try LimitStore.admit($0, [(rate.spec, "limit:nominatim")]) }
        guard case .overLimit(_, let waitMilliseconds) = admission else {
            return XCTFail("the limiter must hold the fleet back after a 429, got \(admission)")
        }
        XCTAssertGreaterThan(waitMilliseconds, 1500, "held back for about the Retry-After of 2 s")
        try redis.flush()
        // The last attempt (retry_count 5 of 6 retries) fails too: the raw coordinates stay, no dead job.
        try fakes.script(.nominatim, ["status": 502])
        try driver.run(ReverseGeocodeJob.className, args(id), retryCount: 5)
        let stored = try XCTUnwrap(try row(id))
        XCTAssertNil(stored.countryCode)
        XCTAssertNil(stored.city)
        XCTAssertFalse(stored.geocoded)
        XCTAssertTrue(stored.error?.hasPrefix("gave up after 7 attempts") ?? false, stored.error ?? "nil")
        let raw = try pool.withConnection { try $0.queryFirst("SELECT latitude FROM user_locations WHERE id = $1", [id])?.double("latitude") }
        XCTAssertEqual(raw, 51.5)
    }

    /// A refusal that is not a block (400: our request is wrong) is permanent, and does not block the fleet.
    func testRefusalByTheProviderIsPermanent() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 51.5, longitude: -0.12)
        try fakes.script(.nominatim, ["status": 400, "json": ["error": ["code": 400, "message": "Invalid coordinates."]]])
        Failure.settled(try driver().deliver(ReverseGeocodeJob.className, args(id)), in: .dead,
                        errorClass: "PermanentFailure", containing: ["HTTP 400"])
        XCTAssertTrue(try row(id)?.error?.contains("400") ?? false)
        XCTAssertEqual(try redis.int("EXISTS", "ratelimit:nominatim:blocked"), 0, "a 400 is not a block")
    }

    // MARK: - Blocked by the provider (403)

    /// Nominatim blocks us (403 to every request). 2 worker processes × 3 threads, 8 locations in distinct cells
    /// next to places the provider knows: exactly one request reaches it during the pause, one alert line across
    /// both processes, every row ends with its raw coordinates and no city, nothing in `dead` or `retry`.
    func testBlockStopsTheWholeFleetWithOneAlertAndKeepsRawCoordinates() throws {
        let user = try GeoAdsSeed.user(pool)
        let places: [(Double, Double)] = [(48.8566, 2.3522), (51.5074, -0.1278), (52.52, 13.405), (45.8992, 6.1294),
                                          (47.066, 9.504), (-34.44, -58.70), (48.8766, 2.3022), (51.5274, -0.1078)]
        let ids = try places.map { try GeoAdsSeed.location(pool, user: user, latitude: $0.0, longitude: $0.1) }
        try fakes.configure(.nominatim, ["block_all": true])
        let log = CapturedLogs()
        try startWorkers(2, concurrency: 3, configuration: configuration(blockPause: 3600), log: log)
        _ = try redis.client.enqueueMany(ids.map { NewJob(ReverseGeocodeJob.className, args: args($0)) })

        XCTAssertTrue(try eventually(timeout: 60) { try redis.processed() == ids.count && allSettled(ids.count) })
        XCTAssertEqual(try reverseRequests().count, 1, "after the first 403 no process may call the provider")
        XCTAssertEqual(log.messages(containing: "ALERT geocoding provider blocked").count, 1, "\(log.all)")
        for (id, place) in zip(ids, places) {
            let stored = try XCTUnwrap(try row(id))
            XCTAssertNil(stored.city)
            XCTAssertNil(stored.countryCode)
            XCTAssertFalse(stored.geocoded)
            XCTAssertTrue(stored.error?.contains("blocks this client") ?? false, stored.error ?? "nil")
            let raw = try pool.withConnection {
                try $0.queryFirst("SELECT latitude, longitude FROM user_locations WHERE id = $1", [id])
            }
            XCTAssertEqual(try raw?.double("latitude"), place.0)
            XCTAssertEqual(try raw?.double("longitude"), place.1)
        }
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        XCTAssertEqual(try redis.int("EXISTS", "ratelimit:nominatim:blocked"), 1, "the block stays until a probe succeeds")
    }

    /// Once the pause is over, exactly one probe goes first; the others wait for its answer (the fake holds it
    /// 2 s), then lookups resume. No new alert.
    func testAfterThePauseOneProbeGoesFirstThenLookupsResume() throws {
        let user = try GeoAdsSeed.user(pool)
        let ids = try [(48.8566, 2.3522), (51.5074, -0.1278), (52.52, 13.405), (45.8992, 6.1294)].map {
            try GeoAdsSeed.location(pool, user: user, latitude: $0.0, longitude: $0.1)
        }
        // A block whose pause has just run out, as a 403 leaves it.
        let block = ProviderBlock(redis: redis.pool, provider: "nominatim", patience: 120)
        XCTAssertTrue(try block.block(seconds: 0.001, probeToken: nil), "a new block")
        try fakes.script(.nominatim, ["delay": 2, "json": [
            "place_id": 100000, "lat": "48.8566000", "lon": "2.3522000", "addresstype": "city", "name": "Paris",
            "address": ["city": "Paris", "country": "France", "country_code": "fr"],
        ]])
        let log = CapturedLogs()
        try startWorkers(2, concurrency: 2, configuration: configuration(), log: log)
        _ = try redis.client.enqueueMany(ids.map { NewJob(ReverseGeocodeJob.className, args: args($0)) })

        XCTAssertTrue(try eventually(timeout: 60) { try ids.allSatisfy { try row($0)?.geocoded == true } })
        let times = try reverseRequests().map(\.timestamp).sorted()
        guard times.count == ids.count else { return XCTFail("one request per location expected, got \(times.count)") }
        XCTAssertGreaterThanOrEqual(times[1] - times[0], 2.0, "nobody called the provider before the probe's answer")
        XCTAssertEqual(try redis.int("EXISTS", "ratelimit:nominatim:blocked"), 0, "the probe's answer lifted the block")
        XCTAssertEqual(try redis.int("EXISTS", "ratelimit:nominatim:probe"), 0)
        XCTAssertEqual(log.messages(containing: "ALERT").count, 0)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead) + redis.int("ZCARD", Keys.retry), 0)
    }

    /// The probe meets another 403: the block is re-armed (no second alert) and the job ends in the valid state.
    func testFailedProbeReArmsTheBlockWithoutASecondAlert() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 48.8566, longitude: 2.3522)
        let block = ProviderBlock(redis: redis.pool, provider: "nominatim", patience: 120)
        XCTAssertTrue(try block.block(seconds: 0.001, probeToken: nil))
        try fakes.configure(.nominatim, ["block_all": true])
        let log = CapturedLogs()
        try startWorkers(1, concurrency: 1, configuration: configuration(blockPause: 3600), log: log)
        _ = try redis.client.enqueue(NewJob(ReverseGeocodeJob.className, args: args(id)))
        XCTAssertTrue(try eventually(timeout: 30) { try redis.processed() == 1 })
        XCTAssertEqual(try reverseRequests().count, 1, "the probe")
        XCTAssertEqual(log.messages(containing: "ALERT").count, 0, "the block did not start now: no second alert")
        XCTAssertGreaterThan(try XCTUnwrap(try block.blockedFor()), 3000, "the pause starts again")
        XCTAssertTrue(try row(id)?.error?.contains("blocks this client") ?? false)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
    }

    // MARK: - Fleet-wide rate limit

    /// 4 worker processes × 10 threads geocode 12 distinct cells at once. The `limit:nominatim` bucket (a
    /// `CallLimiter` taken per request) admits one request per 1 s + margin across the fleet, so the fake
    /// Nominatim never sees two requests within one second. The test's margin is 0.5 s (production: 0.1 s) so
    /// that send-time jitter of a loaded machine stays inside it; slowness only spreads the requests further.
    /// The wait limit is 3 s: most lookups cannot get their turn within it and are rescheduled by the runner
    /// (over limit: `overrated`, not a failure) — the path a long queue takes in production.
    func testFleetWideRateLimitHoldsWithFourProcessesOfTenThreads() throws {
        let user = try GeoAdsSeed.user(pool)
        let ids = try (0..<12).map { try GeoAdsSeed.location(pool, user: user, latitude: 10 + Double($0) * 0.5, longitude: 20) }
        // The fake also answers 429 to a second request within 1 s: a violation would show up as a retry too.
        try fakes.configure(.nominatim, ["rate_limit_per_second": 1])
        var configuration = configuration()
        configuration.rateLimitMargin = 0.5
        configuration.maxRateLimitWait = 3
        let registry = try registry(configuration)
        for _ in 0..<4 {
            processes.append(try TestWorker.start(redis: redis, registry: registry, database: fixture.jobDatabase,
                                                  concurrency: 10))
        }
        _ = try redis.client.enqueueMany(ids.map { NewJob(ReverseGeocodeJob.className, args: args($0)) })
        XCTAssertTrue(try eventually(timeout: 120) { try ids.allSatisfy { try row($0)?.geocoded == true } })
        XCTAssertEqual(try reverseRequests().count, 12)
        XCTAssertEqual(try fakes.maxRequestsInWindow(.nominatim, path: "/reverse", window: 1.0), 1)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0,
                       "a lookup waiting for its turn is rescheduled, never retried")
        XCTAssertEqual(try redis.failed(), 0)
        XCTAssertEqual(try redis.command("HGET", LimitKeys.declared, "nominatim").string, "bucket 1 1500",
                       "the limit is published for `workerctl limits ls`")
    }

    /// Over the rate limit past the wait limit (the bucket held back 3 s by a 429 elsewhere, wait limit 1 s): the
    /// runner reschedules the job — `overrated` 1, no failure fields, not counted as failed — and no request is sent
    /// until the bucket admits again; then it runs once.
    func testOverTheRateLimitTheJobIsRescheduledNotFailed() throws {
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 48.8566, longitude: 2.3522)
        var configuration = configuration()
        configuration.maxRateLimitWait = 1
        let rate = CallLimiter(ReverseGeocoder.rateLimit(configuration), redis: redis.pool, patience: .seconds(1))
        try rate.hold(for: .seconds(3))
        try startWorkers(1, concurrency: 1, configuration: configuration, log: CapturedLogs())
        let jid = try redis.client.enqueue(NewJob(ReverseGeocodeJob.className, args: args(id)))

        XCTAssertTrue(try eventually { try redis.payloads(zset: Keys.schedule).contains { $0.jid == jid } })
        let waiting = try XCTUnwrap(try redis.payloads(zset: Keys.schedule).first { $0.jid == jid })
        XCTAssertEqual(waiting.fields["overrated"]?.intValue, 1)
        XCTAssertNil(waiting.fields["retry_count"])
        XCTAssertNil(waiting.fields["error_message"])
        XCTAssertEqual(try reverseRequests().count, 0, "nothing sent while over the limit")
        XCTAssertEqual(try row(id)?.error, nil, "over the limit is not a failure to record")

        XCTAssertTrue(try eventually(timeout: 30) { try row(id)?.geocoded == true })
        XCTAssertEqual(try reverseRequests().count, 1)
        XCTAssertEqual(try redis.failed(), 0)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0)
    }

    /// The call limiter itself, called by 40 threads on a bucket of 1 per 50 ms: every two admissions (Redis
    /// time) are at least 50 ms apart, not only on average. A wait beyond the patience is refused at once.
    func testCallLimiterAdmitsOneIntervalApartAcrossThreads() throws {
        let limiter = CallLimiter(.bucket("limiter-test", capacity: 1, per: .milliseconds(50)), redis: redis.pool, patience: .seconds(30))
        let times = LockedTimes()
        let group = DispatchGroup()
        for _ in 0..<40 {
            group.enter()
            Thread.detachNewThread {
                if let admitted = try? limiter.acquire(isCancelled: { false }) { times.append(admitted.timeIntervalSince1970 * 1000) }
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        let sorted = times.all.sorted()
        XCTAssertEqual(sorted.count, 40)
        let gaps = zip(sorted.dropFirst(), sorted).map { ($0 - $1).rounded() }
        XCTAssertEqual(gaps.count, 39)
        XCTAssertTrue(gaps.allSatisfy { $0 >= 50 }, "gaps \(gaps)")
        let impatient = CallLimiter(.bucket("limiter-test-slow", capacity: 1, per: .seconds(10)), redis: redis.pool, patience: .seconds(1))
        try impatient.acquire(isCancelled: { false })
        XCTAssertThrowsError(try impatient.acquire(isCancelled: { false })) { error in
            guard case CallLimitError.overLimit(let limit, let wait) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(limit, "limiter-test-slow")
            XCTAssertGreaterThan(wait, .seconds(9))
        }
    }

    // MARK: - Anonymisation

    func testLocationsOlderThan90DaysAreAnonymisedInBatches() throws {
        let user = try GeoAdsSeed.user(pool)
        let old = try (0..<5).map { try GeoAdsSeed.location(pool, user: user, latitude: 48.85661 + Double($0), longitude: 2.35222, ageDays: 91 + $0) }
        let recent = try GeoAdsSeed.location(pool, user: user, latitude: 48.85661, longitude: 2.35222, ageDays: 89)
        try driver().run(LocationAnonymizationJob.className, [])
        try driver().run(LocationAnonymizationJob.className, [])  // again: nothing left to do, nothing changes
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
        Failure.settled(try driver().deliver(LocationAnonymizationJob.className, [.int(1)]), in: .dead, errorClass: "BadInput",
                        messagePrefix: "arguments do not fit \(LocationAnonymizationJob.className): ",
                        containing: ["expected no arguments, got 1"])
    }

    // MARK: - Configuration

    /// N7/L-l (domain review 3): the public OSMF server is refused unless `WORKERS_ENV` names a non-production
    /// environment — an unset `WORKERS_ENV` is refused too (a production fleet that forgot to say so); an own instance
    /// starts in any environment. Refused, the geo area registers stand-ins (`DomainJobs`): its jobs never call the
    /// public server. Guarded line: the `throw` of `usagePolicyRefusal` in `GeoConfiguration.validate()`.
    func testThePublicServerIsRefusedOutsideANonProductionEnvironment() throws {
        func refusal(_ environment: [String: String]) -> GeoAdsConfigurationError? {
            do {
                _ = try GeoConfiguration.fromEnvironment(environment.merging(["GEO_CONTACT_EMAIL": "geo@example.org"]) { $1 })
                return nil
            } catch let error as GeoAdsConfigurationError {
                return error
            } catch {
                XCTFail("expected GeoAdsConfigurationError, got \(error)")
                return nil
            }
        }
        for environment in [[:], ["WORKERS_ENV": "production"], ["WORKERS_ENV": "Production"], ["WORKERS_ENV": "prod"],
                            ["WORKERS_ENV": "production", "GEO_NOMINATIM_URL": "https://NOMINATIM.openstreetmap.org/"]] {
            let refused = try XCTUnwrap(refusal(environment), "\(environment)")
            XCTAssertEqual(refused.variable, "GEO_NOMINATIM_URL")
            XCTAssertTrue(refused.reason.contains("https://operations.osmfoundation.org/policies/nominatim/"), refused.reason)
        }
        for environment in [["WORKERS_ENV": "development"], ["WORKERS_ENV": "Staging"], ["WORKERS_ENV": "test"],
                            ["WORKERS_ENV": "production", "GEO_NOMINATIM_URL": "https://geo.internal.example.com"],
                            ["GEO_NOMINATIM_URL": "https://geo.internal.example.com"]] {
            XCTAssertNil(refusal(environment), "\(environment)")
        }
        // Through the registration a worker runs: the geo area is refused and its jobs are stand-ins.
        var registry = JobRegistry()
        let statuses = DomainJobs.register(into: &registry, environment: ["GEO_CONTACT_EMAIL": "geo@example.org",
                                                                          "WORKERS_ENV": "production"],
                                           redis: redis.pool, http: http)
        let geo = try XCTUnwrap(statuses.first { $0.area == "geo" })
        XCTAssertNotNil(geo.problem, "refused in production with the public server")
        XCTAssertFalse(try XCTUnwrap(geo.problem).contains("geo@example.org"), "no contact address in the problem text")
        // L-l: the export tells the person where the place names come from, under which licence.
        let locations = try XCTUnwrap(ProcessingInformation.categories["locations"])
        XCTAssertTrue(locations.source.contains("© OpenStreetMap contributors"), locations.source)
        XCTAssertTrue(locations.source.contains("Open Database License"), locations.source)
    }

    func testConfigurationFromEnvironment() throws {
        let defaults = try GeoConfiguration.fromEnvironment(["GEO_CONTACT_EMAIL": "geo@example.org", "WORKERS_ENV": "development"])
        XCTAssertEqual(defaults.nominatimBaseURL, "https://nominatim.openstreetmap.org")
        XCTAssertEqual(defaults.requestsPerSecond, 1)
        XCTAssertEqual(defaults.cacheTTL, 4 * 7 * 86_400, "weeks: a ~1.1 km cell's town does not move")
        XCTAssertEqual(defaults.deploymentEnvironment, "development")
        XCTAssertEqual(defaults.acceptLanguage, "en")
        XCTAssertEqual(defaults.zoom, 13)
        XCTAssertEqual(defaults.blockPause, 3600)
        let custom = try GeoConfiguration.fromEnvironment([
            "GEO_NOMINATIM_URL": "http://127.0.0.1:9/", "GEO_CONTACT_EMAIL": "geo@example.org",
            "GEO_RATE_LIMIT_PER_SECOND": "0.5", "GEO_USER_AGENT": "Quiz/2", "GEO_ACCEPT_LANGUAGE": "de-CH,de",
            "GEO_ZOOM": "10", "GEO_BLOCK_PAUSE_SECONDS": "600",
        ])
        XCTAssertEqual(custom.nominatimBaseURL, "http://127.0.0.1:9")
        XCTAssertEqual(custom.effectiveUserAgent, "Quiz/2 (contact: geo@example.org)")
        XCTAssertEqual(custom.minimumInterval, 2.1, accuracy: 1e-9)
        XCTAssertEqual(custom.acceptLanguage, "de-CH,de")
        XCTAssertEqual(custom.zoom, 10)
        XCTAssertEqual(custom.blockPause, 600)
        func assertRefused(_ environment: [String: String], _ variable: String, line: UInt = #line) {
            XCTAssertThrowsError(try GeoConfiguration.fromEnvironment(environment), line: line) { error in
                guard let refused = error as? GeoAdsConfigurationError else {
                    return XCTFail("expected GeoAdsConfigurationError, got \(error)", line: line)
                }
                XCTAssertEqual(refused.variable, variable, "\(refused)", line: line)
            }
        }
        let contact = ["GEO_CONTACT_EMAIL": "geo@example.org"]
        assertRefused(contact.merging(["GEO_RATE_LIMIT_PER_SECOND": "fast"]) { $1 }, "GEO_RATE_LIMIT_PER_SECOND")
        assertRefused(contact.merging(["GEO_NOMINATIM_URL": "ftp://x"]) { $1 }, "GEO_NOMINATIM_URL")
        assertRefused(contact.merging(["GEO_ZOOM": "19"]) { $1 }, "GEO_ZOOM")
        assertRefused(contact.merging(["GEO_ACCEPT_LANGUAGE": "en\r\nX: y"]) { $1 }, "GEO_ACCEPT_LANGUAGE")
    }

    /// Nominatim's usage policy asks for a contact in the User-Agent: without one (e-mail or URL) the geo area
    /// does not start; its jobs stay `UnconfiguredJob` (retried, visible) and never call the provider.
    func testGeoAreaRefusesToStartWithoutAContact() throws {
        func assertNoContact(_ environment: [String: String], line: UInt = #line) {
            XCTAssertThrowsError(try GeoConfiguration.fromEnvironment(environment), line: line) { error in
                guard let refused = error as? GeoAdsConfigurationError else {
                    return XCTFail("expected GeoAdsConfigurationError, got \(error)", line: line)
                }
                XCTAssertEqual(refused.variable, "GEO_CONTACT_EMAIL", line: line)
                XCTAssertTrue(refused.reason.contains("contact (e-mail or URL)"), refused.reason, line: line)
            }
        }
        assertNoContact([:])                                             // the default User-Agent has none
        assertNoContact(["GEO_CONTACT_EMAIL": "nobody"])                 // not an address
        assertNoContact(["GEO_USER_AGENT": "python-requests/2.31"])
        // A URL or an address in the User-Agent itself is a contact.
        XCTAssertEqual(try GeoConfiguration.fromEnvironment(["GEO_USER_AGENT": "Quiz/2 (+https://quiz.example/contact)",
                                                             "WORKERS_ENV": "development"])
            .effectiveUserAgent, "Quiz/2 (+https://quiz.example/contact)")
        XCTAssertNoThrow(try GeoConfiguration.fromEnvironment(["GEO_USER_AGENT": "Quiz/2 (ops@quiz.example)",
                                                                "WORKERS_ENV": "development"]))

        let noContact = GeoConfiguration(nominatimBaseURL: fakes.nominatimBaseURL)
        XCTAssertThrowsError(try {
            var registry = JobRegistry()
            try GeoJobs.register(into: &registry, configuration: noContact, http: http, redis: redis.pool)
        }()) { error in
            XCTAssertEqual((error as? GeoAdsConfigurationError)?.variable, "GEO_CONTACT_EMAIL", "\(error)")
        }
        var domain = JobRegistry()
        let statuses = DomainJobs.register(into: &domain, environment: ["GEO_NOMINATIM_URL": fakes.nominatimBaseURL],
                                           redis: redis.pool, http: http)
        let geo = try XCTUnwrap(statuses.first { $0.area == "geo" })
        XCTAssertTrue(geo.problem?.contains("contact (e-mail or URL)") ?? false, geo.problem ?? "nil")
        // A worker with that registry: the job waits in `retry` with the reason, and the provider is never called.
        let id = try GeoAdsSeed.location(pool, user: try GeoAdsSeed.user(pool), latitude: 48.8566, longitude: 2.3522)
        processes.append(try TestWorker.start(redis: redis, registry: domain, database: fixture.jobDatabase, concurrency: 1))
        _ = try redis.client.enqueue(NewJob(ReverseGeocodeJob.className, args: args(id)))
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        let waiting = try XCTUnwrap(try redis.payloads(zset: Keys.retry).first)
        XCTAssertEqual(waiting.className, ReverseGeocodeJob.className)
        let reason = waiting.fields["error_message"]?.stringValue ?? ""
        XCTAssertTrue(reason.contains("the geo jobs are not configured") && reason.contains("contact (e-mail or URL)"), reason)
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 0)
        XCTAssertEqual(try row(id)?.geocoded, false)
        XCTAssertEqual(try reverseRequests().count, 0)
    }

    func testNominatimParsing() throws {
        func parse(_ text: String) throws -> GeocodeResult { try NominatimClient.parse(Data(text.utf8)) }
        XCTAssertEqual(try parse(#"{"error":"Unable to geocode"}"#), .empty)
        XCTAssertEqual(try parse(#"{"address":{"municipality":"M","village":"V","country_code":"ar","country":"Argentina"}}"#),
                       GeocodeResult(countryCode: "AR", country: "Argentina", city: "V"))
        XCTAssertEqual(try parse(#"{"address":{"city":"C","town":"T"}}"#).city, "C")
        for body in [#"{"address": {"#, "[1]"] {
            XCTAssertThrowsError(try parse(body)) { error in
                guard case GeocodeFailure.transient(let why) = error else {
                    return XCTFail("expected GeocodeFailure.transient, got \(error)")
                }
                XCTAssertEqual(why, "response is not a JSON object")
            }
        }
    }
}

final class LockedTimes: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Double] = []
    func append(_ value: Double) { lock.withLock { values.append(value) } }
    var all: [Double] { lock.withLock { values } }
}
