import Foundation
import HTTP
import Jobs
import Queue
import Storage
import TestSupport
import Workers
import XCTest

/// PendingRewardJob and PendingRewardSweepJob against real Redis (db 26) and PostgreSQL and the
/// fake Subscription Service.
final class AdsRewardTests: XCTestCase {
    var redis: TestRedis!
    var database: PostgresTestDatabase!
    var pool: PostgresPool!
    var fakes: FakeServers!
    var http: HTTPClient!

    override class func setUp() {
        super.setUp()
        CurlRuntime.initialize()
    }

    override func setUpWithError() throws {
        redis = try TestRedis(database: 26)
        try redis.flush()
        fakes = try FakeServers.shared()
        try fakes.reset(.subscription)
        database = try PostgresTestDatabase.create(prefix: "ads_reward_test")
        pool = PostgresPool(url: database.url, maxConnections: 4)
        _ = try Migrator.bundled().migrate(pool: pool)
        http = HTTPClient(configuration: HTTPClientConfiguration(timeout: .seconds(10)))
    }

    override func tearDown() {
        pool?.shutdown()
        database?.drop()
    }

    var configuration: AdsConfiguration {
        AdsConfiguration(subscriptionServiceURL: fakes.subscriptionServiceBaseURL, requestTimeout: 0.5)
    }

    var runner: GeoAdsRunner {
        var registry = JobRegistry()
        AdsJobs.register(into: &registry, configuration: configuration, http: http, redis: redis.pool)
        return GeoAdsRunner(registry: registry, database: JobDatabase(pool: pool))
    }

    struct Seeded {
        let reward: UUID
        let user: UUID
        let campaign: UUID?
        let key: String
    }

    func seedReward(source: String, amount: Int, maxAttempts: Int? = nil, ageSeconds: Int = 0) throws -> Seeded {
        let user = try GeoAdsSeed.user(pool)
        let reward = UUID()
        var campaign: UUID?
        try pool.withConnection { connection in
            if source == "campaign" {
                let id = UUID()
                campaign = id
                try connection.execute("""
                    INSERT INTO freemium_campaigns (id, app_id, name, campaign_type, reward_amount, starts_at, ends_at)
                    VALUES ($1, $2, 'Watch 5', 'watch_ads', $3, now() - interval '1 day', now() + interval '1 day')
                    """, [id, UUID(), amount])
                try connection.execute("""
                    INSERT INTO campaign_participations (campaign_id, user_id, progress, completed, completed_at)
                    VALUES ($1, $2, 5, true, now())
                    """, [id, user])
            }
            try connection.execute("""
                INSERT INTO pending_rewards (id, user_id, amount, source, reference, campaign_id, max_attempts, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, now() - make_interval(secs => $8::int))
                """, [reward, user, amount, source, campaign?.uuidString.lowercased() ?? UUID().uuidString.lowercased(),
                      campaign, maxAttempts, ageSeconds])
        }
        let key = try pool.withConnection {
            try $0.queryFirst("SELECT idempotency_key FROM pending_rewards WHERE id = $1", [reward])!.string("idempotency_key")
        }
        return Seeded(reward: reward, user: user, campaign: campaign, key: key)
    }

    func args(_ id: UUID) -> [JSONValue] { [.object(["pending_reward_id": .string(id.uuidString.lowercased())])] }

    func reward(_ id: UUID) throws -> (status: String, attempts: Int, error: String?) {
        try pool.withConnection { connection in
            let row = try connection.queryFirst("SELECT status, attempts, last_error FROM pending_rewards WHERE id = $1", [id])!
            return (try row.string("status"), try row.int("attempts"), try row.optionalString("last_error"))
        }
    }

    func notifications(_ user: UUID) throws -> [String] {
        try pool.withConnection {
            try $0.query("SELECT type FROM notifications WHERE user_id = $1", [user]).map { try $0.string("type") }
        }
    }

    func claimed(_ seeded: Seeded) throws -> Bool {
        try pool.withConnection {
            try $0.queryFirst("SELECT reward_claimed AND reward_claimed_at IS NOT NULL AS ok FROM campaign_participations WHERE campaign_id = $1 AND user_id = $2",
                              [seeded.campaign!, seeded.user])!.bool("ok")
        }
    }

    func testAdRewardIsCreditedOnceWithNotification() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        try runner.run(PendingRewardJob.className, args(seeded.reward))
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
        let credits = try fakes.subscriptionCredits()
        XCTAssertEqual(credits.creditedByKey, [seeded.key: 1])
        let request = try XCTUnwrap(try fakes.requests(.subscription, path: "/subscription/v1/credits/earn").first)
        XCTAssertEqual(request.header("Idempotency-Key"), seeded.key)
        let body = try JSONSerialization.jsonObject(with: Data(request.body.utf8)) as? [String: Any]
        XCTAssertEqual(body?["user_id"] as? String, seeded.user.uuidString.lowercased())
        XCTAssertEqual(body?["amount"] as? Int, 1)
        XCTAssertEqual(body?["source"] as? String, "ad_reward")
        XCTAssertFalse(try RewardJobMarker(redis: redis.pool, ttl: 60).isLive(seeded.reward.uuidString))
    }

    func testDuplicatesAndRedeliveriesCreditOnce() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        // The first answer is lost after the service applied the credit (passthrough + 500).
        try fakes.script(.subscription, ["passthrough": true, "status": 500, "body": "{\"error\":\"lost\"}"])
        let payload = try GeoAdsRunner.payload(PendingRewardJob.className, args(seeded.reward))
        XCTAssertThrowsError(try runner.run(payload))
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
        try runner.run(payload)                                              // the retry: replayed answer
        try runner.run(payload)                                              // the same delivery again
        try runner.run(PendingRewardJob.className, args(seeded.reward))     // a duplicate job
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [seeded.key: 1])
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
    }

    func testConcurrentDuplicateJobsCreditOnce() throws {
        let seeded = try seedReward(source: "campaign", amount: 10)
        let runner = self.runner
        let arguments = args(seeded.reward)
        let group = DispatchGroup()
        for _ in 0..<4 {
            group.enter()
            Thread.detachNewThread {
                try? runner.run(PendingRewardJob.className, arguments)
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [seeded.key: 1])
        XCTAssertEqual(try fakes.subscriptionCredits().creditedByKey, [seeded.key: 10])
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
        XCTAssertTrue(try claimed(seeded))
    }

    func testCampaignRewardSucceedsAfterFailures() throws {
        let seeded = try seedReward(source: "campaign", amount: 10)
        try fakes.script(.subscription, ["status": 503, "times": 2])
        for _ in 0..<2 {
            XCTAssertThrowsError(try runner.run(PendingRewardJob.className, args(seeded.reward))) { error in
                XCTAssertTrue(error is RewardCreditUnavailable, "\(error)")
            }
            XCTAssertTrue(try RewardJobMarker(redis: redis.pool, ttl: 60).isLive(seeded.reward.uuidString),
                          "a job waiting for its retry keeps its reward marked live")
        }
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
        XCTAssertFalse(try claimed(seeded))
        try runner.run(PendingRewardJob.className, args(seeded.reward))
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try reward(seeded.reward).attempts, 3)
        XCTAssertTrue(try claimed(seeded))
        XCTAssertEqual(try fakes.subscriptionCredits().creditedByKey, [seeded.key: 10])
        let body = try XCTUnwrap(try fakes.requests(.subscription, path: "/subscription/v1/credits/earn").last?.body)
        XCTAssertTrue(body.contains("\"source\":\"campaign_reward\""), body)
    }

    func testCampaignRewardFailsAfterFiveAttempts() throws {
        let seeded = try seedReward(source: "campaign", amount: 10)
        try fakes.script(.subscription, ["hang": true, "delay": 2, "times": 5])  // timeouts (request timeout 0.5 s)
        for attempt in 1...4 {
            XCTAssertThrowsError(try runner.run(PendingRewardJob.className, args(seeded.reward)), "attempt \(attempt)")
        }
        try runner.run(PendingRewardJob.className, args(seeded.reward))  // the 5th attempt settles it as failed
        let state = try reward(seeded.reward)
        XCTAssertEqual(state.status, "failed")
        XCTAssertEqual(state.attempts, 5)
        XCTAssertTrue(state.error?.contains("gave up after 5 attempts") ?? false, state.error ?? "nil")
        XCTAssertFalse(try claimed(seeded))
        XCTAssertEqual(try notifications(seeded.user), [])
        try runner.run(PendingRewardJob.className, args(seeded.reward))  // a failed reward is left alone
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [:])
    }

    func testAdRewardKeepsRetryingWithCappedBackoff() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        try fakes.script(.subscription, ["status": 502, "times": 7])
        for _ in 0..<7 { XCTAssertThrowsError(try runner.run(PendingRewardJob.className, args(seeded.reward))) }
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
        XCTAssertEqual(try reward(seeded.reward).attempts, 7)
        XCTAssertEqual(PendingRewardJob.options.maxRetries, 100_000)
        for count in [0, 5, 20, 1000] {
            XCTAssertLessThanOrEqual(PendingRewardJob.options.backoff.delay(retryCount: count), 3600 * 1.2)
        }
        try runner.run(PendingRewardJob.className, args(seeded.reward))
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
    }

    func testRateLimitedAnswerAsksForRetryAfter() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        try fakes.script(.subscription, ["status": 429, "retry_after": 17])
        XCTAssertThrowsError(try runner.run(PendingRewardJob.className, args(seeded.reward))) { error in
            guard case JobError.retryAfter(let seconds, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(seconds, 17, accuracy: 0.5)
        }
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
    }

    func testRejectedRequestFailsTheRewardWithAnAlert() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        try fakes.script(.subscription, ["status": 422, "json": ["error": "invalid_request"]])
        try runner.run(PendingRewardJob.className, args(seeded.reward))
        XCTAssertEqual(try reward(seeded.reward).status, "failed")
        XCTAssertTrue(try reward(seeded.reward).error?.contains("HTTP 422") ?? false)
    }

    func testBadAndMissingRewards() throws {
        XCTAssertThrowsError(try runner.run(PendingRewardJob.className, [.object(["pending_reward_id": "42"])])) { error in
            XCTAssertTrue("\(error)".contains("pending_reward_id must be a UUID"), "\(error)")
        }
        XCTAssertThrowsError(try runner.run(PendingRewardJob.className, [.object(["reward": "x"])])) { error in
            XCTAssertTrue(error is DispatchError, "\(error)")
        }
        try runner.run(PendingRewardJob.className, args(UUID()))  // gone (user deleted): nothing to do
        XCTAssertEqual(try fakes.requests(.subscription).count, 0)
    }

    func testSweepEnqueuesPendingRewardsWithoutALiveJob() throws {
        let orphanA = try seedReward(source: "ad", amount: 1, ageSeconds: 3600)
        let orphanB = try seedReward(source: "campaign", amount: 10, ageSeconds: 3600)
        let live = try seedReward(source: "ad", amount: 1, ageSeconds: 3600)
        let young = try seedReward(source: "ad", amount: 1, ageSeconds: 0)
        let credited = try seedReward(source: "ad", amount: 1, ageSeconds: 3600)
        try pool.withConnection { _ = try $0.execute("UPDATE pending_rewards SET status = 'credited' WHERE id = $1", [credited.reward]) }
        let marker = RewardJobMarker(redis: redis.pool, ttl: 600)
        try marker.refresh(live.reward.uuidString, owner: "some-jid")

        var small = configuration
        small.sweepBatchSize = 1  // walk the rewards one batch at a time
        let sweep = PendingRewardSweepJob(client: redis.client, marker: marker, configuration: small)
        XCTAssertEqual(try sweep.sweep(pool: pool), 2)
        XCTAssertEqual(try sweep.sweep(pool: pool), 0, "the enqueued jobs hold their markers")
        let queued = try redis.payloads(list: "queue:default")
        XCTAssertEqual(queued.map(\.className), [PendingRewardJob.className, PendingRewardJob.className])
        let ids = Set(queued.compactMap { $0.args.first?.objectValue?["pending_reward_id"]?.stringValue })
        XCTAssertEqual(ids, [orphanA.reward.uuidString.lowercased(), orphanB.reward.uuidString.lowercased()])
        _ = young

        // The enqueued jobs run, settle and release their markers; nothing is left to sweep.
        for payload in queued { try runner.run(payload) }
        XCTAssertEqual(try reward(orphanB.reward).status, "credited")
        try redis.command("DEL", "queue:default")
        XCTAssertEqual(try sweep.sweep(pool: pool), 0)
        // Through the registry, as the scheduler runs it.
        try runner.run(PendingRewardSweepJob.className, [])
    }

    func testConfigurationFromEnvironment() throws {
        let defaults = try AdsConfiguration.fromEnvironment([:])
        XCTAssertEqual(defaults.campaignMaxAttempts, 5)
        XCTAssertNil(defaults.subscriptionAPIKey)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("ads-key-\(UUID())")
        try "s3cret\n".write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let custom = try AdsConfiguration.fromEnvironment([
            "ADS_SUBSCRIPTION_SERVICE_URL": "http://127.0.0.1:1/", "ADS_SUBSCRIPTION_API_KEY_FILE": file.path,
        ])
        XCTAssertEqual(custom.subscriptionServiceURL, "http://127.0.0.1:1")
        XCTAssertEqual(custom.subscriptionAPIKey, "s3cret")
        XCTAssertThrowsError(try AdsConfiguration.fromEnvironment(["ADS_CAMPAIGN_MAX_ATTEMPTS": "0"]))
    }
}
