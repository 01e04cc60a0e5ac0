import Foundation
import WorkersHTTP
import WorkersAppJobs
import WorkersQueue
import WorkersStorage
import Synchronization
import WorkersTestServices
import Workers
import XCTest
import Logging

/// The time `PendingRewardJob` reads (its retry horizon): starts now, moved only by the test. Any thread.
final class RewardClock: Sendable {
    private let current = Mutex(Date())
    var now: Date { current.withLock { $0 } }
    func advance(_ seconds: Double) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
    /// Back to the wall clock: XCTest makes every test's instance (and so its clock) when the suite starts, minutes
    /// before the test runs, while the rewards a test seeds are stamped with PostgreSQL's `now()`.
    func reset() { current.withLock { $0 = Date() } }
}

/// PendingRewardJob and PendingRewardSweepJob against real Redis (db 35) and PostgreSQL and the
/// fake Subscription Service.
final class AdsRewardTests: JobsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "ads_reward_test", connections: 4, redis: 188, fakes: .shared(reset: [.subscription]))
    }

    /// The worker's credential and the Ads Service's: the fake accepts both (the key's scope is the user, not the
    /// credential).
    static let workerCredential = "worker-secret"
    static let adsServiceCredential = "ads-service-secret"

    override func setUpWithError() throws {
        try super.setUpWithError()
        clock.reset()
        try fakes.configure(.subscription, ["api_keys": [Self.workerCredential: "worker",
                                                         Self.adsServiceCredential: "ads-service"]])
    }

    var configuration: AdsConfiguration {
        AdsConfiguration(subscriptionServiceURL: fakes.subscriptionServiceBaseURL,
                         subscriptionAPIKey: Self.workerCredential, requestTimeout: 0.5)
    }

    /// The job's clock; tests move it by each retry's delay (never sleep).
    let clock = RewardClock()
    /// What the jobs logged (alerts).
    let logs = CapturedLogs()

    /// PendingRewardJob as a worker runs it (JobRunner: ledger check on redelivery, retries, dead).
    var driver: JobRunnerDriver { driver(requestTimeout: configuration.requestTimeout) }

    /// The same with another per-request timeout (a test that holds a request in the fake must not time it out).
    func driver(requestTimeout: Double) -> JobRunnerDriver {
        var registry = JobRegistry()
        var configuration = self.configuration
        configuration.requestTimeout = requestTimeout
        let clock = self.clock
        AdsJobs.register(into: &registry, configuration: configuration, http: http, redis: redis.pool,
                         now: { clock.now })
        return JobRunnerDriver(registry: registry, database: fixture.jobDatabase,
                               logger: logs.logger(label: "ads-reward-test", level: .info))
    }

    /// Delivers `payload` and, while the job asks for a retry, moves the clock by the retry's delay and delivers
    /// the retry (what the retry poller does when it is due), until the job is acked or `limit` deliveries.
    /// `before` runs before each delivery (e.g. to end an outage). Returns the delays in order.
    @discardableResult
    func deliverUntilSettled(_ payload: JobPayload, limit: Int = 500, before: (Int) throws -> Void = { _ in })
        throws -> (last: Delivery, delays: [Double]) {
        var delays: [Double] = []
        var next = payload
        for index in 0..<limit {
            try before(index)
            let delivery = try driver.deliver(next)
            guard case .retry(let retry, let delay) = delivery else { return (delivery, delays) }
            XCTAssertEqual(delivery.errorClass, "RetryLater", "every retry is a delay the job chose")
            delays.append(delay)
            clock.advance(delay)
            next = retry
        }
        throw JobRunnerDriver.DriverError("not settled after \(limit) deliveries")
    }

    /// Delivers a job on another thread (its request is then held in the fake); `wait` returns its outcome.
    func deliverInBackground(_ driver: JobRunnerDriver, _ arguments: [JSONValue])
        -> (wait: () -> Delivery?, done: DispatchSemaphore) {
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<Delivery?>(nil)
        Thread.detachNewThread {
            let delivery = try? driver.deliver(PendingRewardJob.className, arguments)
            outcome.withLock { $0 = delivery }
            done.signal()
        }
        return ({ outcome.withLock { $0 } }, done)
    }

    struct Seeded {
        let reward: UUID
        let user: UUID
        let campaign: UUID?
        let reference: String
        let key: String
    }

    func seedReward(source: String, amount: Int, maxAttempts: Int? = nil, ageSeconds: Int = 0,
                    reference: String = UUID().uuidString.lowercased()) throws -> Seeded {
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
            // As the Ads Service records it (UC-ADS-4.1 21c.2): no idempotency_key column, the row derives it.
            try connection.execute("""
                INSERT INTO pending_rewards (id, user_id, amount, source, reference, campaign_id, max_attempts, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, now() - make_interval(secs => $8::int))
                """, [reward, user, amount, source, campaign?.uuidString.lowercased() ?? reference,
                      campaign, maxAttempts, ageSeconds])
        }
        let key = try pool.withConnection {
            try $0.queryFirst("SELECT idempotency_key FROM pending_rewards WHERE id = $1", [reward])!.string("idempotency_key")
        }
        return Seeded(reward: reward, user: user, campaign: campaign,
                      reference: campaign?.uuidString.lowercased() ?? reference, key: key)
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

    func earnRequests() throws -> [FakeRequest] { try fakes.requests(.subscription, path: "/subscription/v1/credits/earn") }

    /// The unique lock of the reward's job (docs/unique-jobs.md): its owner jid, or nil when no job is live.
    func liveJob(_ reward: UUID, queue: String = "default") throws -> String? {
        let lock = UniqueLockKey(className: PendingRewardJob.className, queue: queue, key: reward.uuidString.lowercased())
        return try redis.pool.withConnection { try UniqueAdmin(connection: $0).show(lock)?.jid }
    }

    /// Fails unless `delivery` is a retry the job asked for because the credit is not applied yet (transport
    /// error, 5xx, a 4xx about the request, …), and returns the payload to deliver next.
    func expectUnavailableRetry(_ delivery: Delivery, file: StaticString = #filePath, line: UInt = #line) throws
        -> JobPayload {
        try XCTUnwrap(Failure.settled(delivery, in: .retry, errorClass: "RetryLater", containing: ["credit not applied yet"],
                                      file: file, line: line), file: file, line: line)
    }

    /// The `last_error` / alert check: the reward is failed, `last_error` contains `reason`, and one
    /// `pending_reward_failed` alert was logged.
    func assertFailedWithAlert(_ seeded: Seeded, containing reason: String, file: StaticString = #filePath,
                               line: UInt = #line) throws {
        let state = try reward(seeded.reward)
        XCTAssertEqual(state.status, "failed", file: file, line: line)
        XCTAssertTrue(state.error?.contains(reason) ?? false, state.error ?? "nil", file: file, line: line)
        XCTAssertEqual(logs.alerts, ["pending_reward_failed"], file: file, line: line)
    }

    /// Polls the fake until a request with `key` is stopped by a hold (no sleep-and-hope: the state is asked for).
    func waitUntilHeld(_ key: String) throws {
        for _ in 0..<400 {
            if (try fakes.admin(.subscription, "GET", "subscription/held")["held"] as? [String])?.contains(key) == true { return }
            Thread.sleep(forTimeInterval: 0.025)
        }
        XCTFail("no request with key \(key) reached the fake")
        throw JobRunnerDriver.DriverError("not held")
    }

    func hold(_ key: String, _ stage: String) throws {
        try fakes.admin(.subscription, "POST", "subscription/hold", json: ["key": key, "stage": stage])
    }

    func release() throws { try fakes.admin(.subscription, "POST", "subscription/release") }

    // MARK: The reward contract: the key is the reward's identity, as an sf-string; the body is the seed's

    func testAdRewardIsCreditedOnceWithNotification() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        XCTAssertEqual(seeded.key, "ad_reward:\(seeded.reference)", "derived from the ad request id")
        XCTAssertAck(try driver.deliver(PendingRewardJob.className, args(seeded.reward)))
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
        let credits = try fakes.subscriptionCredits()
        XCTAssertEqual(credits.creditedByKey, [seeded.key: 1])
        let request = try XCTUnwrap(try earnRequests().first)
        // draft-ietf-httpapi-idempotency-key-header, "Syntax": an Item Structured Header whose value is a String.
        XCTAssertEqual(request.header("Idempotency-Key"), "\"\(seeded.key)\"")
        XCTAssertEqual(request.header("X-User-Id"), seeded.user.uuidString.lowercased())
        XCTAssertEqual(request.header("Authorization"), "Bearer \(Self.workerCredential)")
        // The seed's body (004, UC-ADS-4.1 21c: { amount: 1, source: 'ad_reward', reference_id }), sorted keys.
        XCTAssertEqual(request.body, "{\"amount\":1,\"reference_id\":\"\(seeded.reference)\",\"source\":\"ad_reward\"}")
    }

    func testCampaignRewardIsSentAsPromoWithTheCampaignKey() throws {
        let seeded = try seedReward(source: "campaign", amount: 10)
        XCTAssertEqual(seeded.key, "campaign:\(seeded.campaign!.uuidString.lowercased()):\(seeded.user.uuidString.lowercased())")
        XCTAssertAck(try driver.deliver(PendingRewardJob.className, args(seeded.reward)))
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertTrue(try claimed(seeded))
        let request = try XCTUnwrap(try earnRequests().first)
        XCTAssertEqual(request.header("Idempotency-Key"), "\"\(seeded.key)\"")
        // The seed's campaign call (004, UC-ADS-4.4 23c): { amount: 10, source: 'promo', reference: campaign_id }.
        XCTAssertEqual(request.body, "{\"amount\":10,\"reference\":\"\(seeded.campaign!.uuidString.lowercased())\",\"source\":\"promo\"}")
        XCTAssertEqual(try fakes.subscriptionCredits().creditedByKey, [seeded.key: 10])
    }

    /// The Ads Service's own first call, as the seed writes it and the contract completes it — sent by the test with
    /// its own HTTP client and the Ads Service's credential, not by `SubscriptionCreditsClient`: the key quoted,
    /// the user in `X-User-Id`, the seed's members in the seed's order.
    func sendAdsServiceFirstCall(user: UUID, key: String, body: String) -> Int? {
        var request = HTTPRequest(method: .post, url: fakes.subscriptionServiceBaseURL + "/subscription/v1/credits/earn",
                                  headers: ["Content-Type": "application/json", "Idempotency-Key": "\"\(key)\"",
                                            "X-User-Id": user.uuidString.lowercased(),
                                            "Authorization": "Bearer \(Self.adsServiceCredential)"],
                                  body: Data(body.utf8))
        request.timeout = .milliseconds(300)
        return try? HTTPClient().send(request).status
    }

    /// The seed's trigger (UC-ADS-4.1 21c.1): the Ads Service's own call timed out — after the service had credited
    /// the user. Then the reward job runs through the runner with the worker's credential: the user is credited
    /// exactly once. Fails if our key were unquoted (a strict parser: 400) or our body differed (422, another
    /// fingerprint), or if the key's scope included the credential.
    func testAdsServiceFirstCallTimedOutAfterTheCreditAndTheJobCreditsNothingMore() throws {
        for source in ["ad", "campaign"] {
            try fakes.reset(.subscription)
            try fakes.configure(.subscription, ["api_keys": [Self.workerCredential: "worker",
                                                             Self.adsServiceCredential: "ads-service"]])
            let user = try GeoAdsSeed.user(pool)
            let reference = UUID().uuidString.lowercased()
            var campaign: UUID?
            let key: String
            let body: String
            if source == "ad" {
                key = "ad_reward:\(reference)"  // docs/jobs-geo-ads.md, "The reward contract"
                body = #"{ "amount": 1, "source": "ad_reward", "reference_id": "\#(reference)" }"#
            } else {
                let id = UUID()
                campaign = id
                try pool.withConnection { connection in
                    try connection.execute("""
                        INSERT INTO freemium_campaigns (id, app_id, name, campaign_type, reward_amount, starts_at, ends_at)
                        VALUES ($1, $2, 'Watch 5', 'watch_ads', 10, now() - interval '1 day', now() + interval '1 day')
                        """, [id, UUID()])
                    try connection.execute("""
                        INSERT INTO campaign_participations (campaign_id, user_id, progress, completed, completed_at)
                        VALUES ($1, $2, 5, true, now())
                        """, [id, user])
                }
                key = "campaign:\(id.uuidString.lowercased()):\(user.uuidString.lowercased())"
                body = #"{ "amount": 10, "source": "promo", "reference": "\#(id.uuidString.lowercased())" }"#
            }
            // 21c / 23c: the service credits, its answer never arrives in time.
            try hold(key, "after_credit")
            XCTAssertNil(sendAdsServiceFirstCall(user: user, key: key, body: body), "the first call timed out")
            try waitUntilHeld(key)
            try release()
            XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [key: 1], "the service did credit")

            // 21c.2: it records the pending reward (no key given: the row derives it) and enqueues the job.
            let rewardID = UUID()
            try pool.withConnection {
                _ = try $0.execute("""
                    INSERT INTO pending_rewards (id, user_id, amount, source, reference, campaign_id)
                    VALUES ($1, $2, $3, $4, $5, $6)
                    """, [rewardID, user, source == "ad" ? 1 : 10, source, campaign?.uuidString.lowercased() ?? reference,
                          campaign])
            }
            XCTAssertAck(try driver.deliver(PendingRewardJob.className, args(rewardID)), source)
            XCTAssertEqual(try reward(rewardID).status, "credited", source)
            let credits = try fakes.admin(.subscription, "GET", "subscription/credits")
            XCTAssertEqual(credits["applications_by_key"] as? [String: Int], [key: 1], "\(source): credited once in all")
            XCTAssertEqual(credits["clients_by_key"] as? [String: [String]], [key: ["ads-service", "worker"]],
                           "\(source): two clients, one request")
            XCTAssertEqual(credits["balances"] as? [String: Int], [user.uuidString.lowercased(): source == "ad" ? 1 : 10])
            XCTAssertEqual(try notifications(user), ["credits_added"])
        }
    }

    // MARK: Duplicates, redeliveries, 409

    func testDuplicatesAndRedeliveriesCreditOnce() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        // The first answer is lost after the service applied the credit (passthrough + 500).
        try fakes.script(.subscription, ["passthrough": true, "status": 500, "body": "{\"error\":\"lost\"}"])
        let retry = try expectUnavailableRetry(try driver.deliver(PendingRewardJob.className, args(seeded.reward)))
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
        XCTAssertAck(try driver.deliver(retry), "the retry: replayed answer")
        XCTAssertAck(try driver.deliver(retry), "the same delivery again: the ledger holds its jid")
        XCTAssertEqual(try earnRequests().count, 2, "the redelivery did not call the service")
        XCTAssertAck(try driver.deliver(PendingRewardJob.className, args(seeded.reward)), "a duplicate job")
        XCTAssertEqual(try earnRequests().count, 2, "a credited reward is not sent again")
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [seeded.key: 1])
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
    }

    func testRequestWithTheSameKeyInFlightIsRetriedLaterNotFailed() throws {
        let seeded = try seedReward(source: "campaign", amount: 10, maxAttempts: 1)
        try hold(seeded.key, "before_credit")
        let driver = self.driver(requestTimeout: 30)
        let arguments = args(seeded.reward)
        let first = deliverInBackground(driver, arguments)
        try waitUntilHeld(seeded.key)
        // A duplicate job while the first request is in flight: 409, retried later, not an attempt (max_attempts 1
        // would otherwise fail the reward at once).
        let retry = try XCTUnwrap(Failure.isRetryAfter(try driver.deliver(PendingRewardJob.className, arguments),
                                                       seconds: configuration.inFlightRetrySeconds))
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
        XCTAssertEqual(try reward(seeded.reward).attempts, 0, "a 409 is not a failed attempt")

        try release()
        XCTAssertEqual(first.done.wait(timeout: .now() + 30), .success)
        let firstDelivery = try XCTUnwrap(first.wait())
        guard case .ack = firstDelivery else { return XCTFail("first: \(firstDelivery)") }
        XCTAssertAck(try driver.deliver(retry))
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try earnRequests().count, 2)
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [seeded.key: 1])
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
        XCTAssertTrue(try claimed(seeded))
    }

    func testACreditedAnswerSettlesARewardAnotherJobGaveUpOn() throws {
        // Job A's request is being applied; meanwhile job B (a duplicate) gets a 422 (an answer about the request: it
        // counts) on the campaign's only attempt and marks the reward failed. A's 201 must still record the credit.
        let seeded = try seedReward(source: "campaign", amount: 10, maxAttempts: 1)
        try hold(seeded.key, "before_credit")
        let driver = self.driver(requestTimeout: 30)
        let arguments = args(seeded.reward)
        let first = deliverInBackground(driver, arguments)
        try waitUntilHeld(seeded.key)
        try fakes.script(.subscription, ["status": 422, "json": ["error": "invalid_request"]])
        XCTAssertAck(try driver.deliver(PendingRewardJob.className, arguments), "B gives up: failed, alert")
        XCTAssertEqual(try reward(seeded.reward).status, "failed")

        try release()
        XCTAssertEqual(first.done.wait(timeout: .now() + 30), .success)
        let firstDelivery = try XCTUnwrap(first.wait())
        guard case .ack = firstDelivery else { return XCTFail("first: \(firstDelivery)") }
        XCTAssertEqual(try reward(seeded.reward).status, "credited", "no failed row for a credited user")
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
        XCTAssertTrue(try claimed(seeded))
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [seeded.key: 1])
    }

    func testConcurrentDuplicateJobsCreditOnce() throws {
        let seeded = try seedReward(source: "campaign", amount: 10)
        let driver = self.driver
        let arguments = args(seeded.reward)
        let group = DispatchGroup()
        let outcomes = Mutex<[String]>([])
        for _ in 0..<4 {
            group.enter()
            Thread.detachNewThread {
                // Each job is delivered until the runner acks it (a 409 asks for a retry), at most 500 times.
                var delivery = try? driver.deliver(PendingRewardJob.className, arguments)
                for _ in 0..<500 {
                    guard case .retry(let next, _)? = delivery else { break }
                    delivery = try? driver.deliver(next)
                }
                outcomes.withLock { $0.append(delivery.map { "\($0)" } ?? "threw") }
                group.leave()
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(outcomes.withLock { $0 }, ["ack", "ack", "ack", "ack"])
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [seeded.key: 1])
        XCTAssertEqual(try fakes.subscriptionCredits().creditedByKey, [seeded.key: 10])
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
        XCTAssertTrue(try claimed(seeded))
    }

    // MARK: Failures: what counts, the schedule, the time cap

    func testCampaignRewardSucceedsAfterFailures() throws {
        let seeded = try seedReward(source: "campaign", amount: 10)
        try fakes.script(.subscription, ["status": 503, "times": 2])
        var payload = try JobRunnerDriver.payload(PendingRewardJob.className, args(seeded.reward))
        for _ in 0..<2 {
            payload = try expectUnavailableRetry(try driver.deliver(payload))
        }
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
        XCTAssertEqual(try reward(seeded.reward).attempts, 0, "a 503 says nothing about the request: not counted")
        XCTAssertFalse(try claimed(seeded))
        XCTAssertAck(try driver.deliver(payload))
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try reward(seeded.reward).attempts, 1)
        XCTAssertTrue(try claimed(seeded))
        XCTAssertEqual(try fakes.subscriptionCredits().creditedByKey, [seeded.key: 10])
    }

    /// N5: a Subscription Service outage of 30 hours (credentials refused, rate limited, timeouts, 5xx) uses none of
    /// the campaign's 5 attempts; the job keeps retrying (at most an hour apart) and credits when it is over.
    func testCampaignRewardSurvivesAnOutageOfHours() throws {
        let seeded = try seedReward(source: "campaign", amount: 10)
        let start = clock.now
        let outageScripts: [[String: Any]] = [["status": 401, "times": 3], ["status": 403], ["status": 429, "retry_after": 17, "times": 2],
                                              ["hang": true, "delay": 2, "times": 2], ["status": 404], ["status": 503, "times": -1]]
        try fakes.admin(.subscription, "POST", "script", json: outageScripts)
        let outage: Double = 30 * 3600
        var ended = false
        let result = try deliverUntilSettled(try JobRunnerDriver.payload(PendingRewardJob.className, args(seeded.reward))) { _ in
            XCTAssertEqual(try self.reward(seeded.reward).attempts, 0, "an outage counts no attempt")
            if !ended, self.clock.now.timeIntervalSince(start) >= outage {
                try self.fakes.reset(.subscription)  // the service is back
                ended = true
            }
        }
        XCTAssertAck(result.last)
        XCTAssertTrue(ended)
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertTrue(try claimed(seeded))
        XCTAssertEqual(try notifications(seeded.user), ["credits_added"])
        XCTAssertEqual(logs.alerts, [])
        XCTAssertLessThanOrEqual(result.delays.max() ?? 0, 3600 * 1.2, "never more than an hour (±20 %) between tries")
        XCTAssertLessThan(clock.now.timeIntervalSince(start), outage + 3600 * 1.2, "credited within the hour after")
        XCTAssertEqual(try fakes.subscriptionCredits().creditedByKey, [seeded.key: 10])
    }

    /// N5: a 422 is an answer about the request, so it counts; the 5 attempts are spread over hours (1 min, 10 min,
    /// 1 h, 6 h between them); a 503 in between counts nothing; the 5th counted failure → `failed` + alert.
    func testA422CountsAndTheFiveCampaignAttemptsSpreadOverHours() throws {
        let seeded = try seedReward(source: "campaign", amount: 10)
        let rejected: [String: Any] = ["status": 422, "json": ["error": "invalid_request"]]
        let scripts: [[String: Any]] = [rejected, ["status": 503], rejected, rejected, rejected, rejected]
        try fakes.admin(.subscription, "POST", "script", json: scripts)
        let result = try deliverUntilSettled(try JobRunnerDriver.payload(PendingRewardJob.className, args(seeded.reward)))
        XCTAssertAck(result.last, "the 5th counted attempt settles it as failed")
        XCTAssertEqual(result.delays.count, 5)
        XCTAssertEqual(result.delays[0], 60, accuracy: 0.01)
        XCTAssertEqual(result.delays[1], 20, accuracy: 4.01, "the 503: the outage backoff (10 s × 2¹ ±20 %), not the schedule")
        XCTAssertEqual(Array(result.delays[2...]), [600, 3600, 21_600])
        let state = try reward(seeded.reward)
        XCTAssertEqual(state.attempts, 5)
        try assertFailedWithAlert(seeded, containing: "gave up after 5 attempts")
        XCTAssertTrue(state.error?.contains("HTTP 422") ?? false, state.error ?? "nil")
        XCTAssertFalse(try claimed(seeded))
        XCTAssertEqual(try notifications(seeded.user), [])
        XCTAssertAck(try driver.deliver(PendingRewardJob.className, args(seeded.reward)), "a failed reward is left alone")
        XCTAssertEqual(try earnRequests().count, 6)
        XCTAssertEqual(try fakes.subscriptionCredits().applicationsByKey, [:])
    }

    /// L3: retries of any kind stop at the time cap (72 h after the reward was recorded, an hour and more before the
    /// 7-day key lifetime of the contract): `failed` + alert, no request after it. An ad reward has no count limit,
    /// so only the cap ends it.
    func testRetriesStopAtTheHorizonWithAnAlertBeforeTheKeyLifetime() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        let start = clock.now
        let deadline = start.addingTimeInterval(configuration.retryHorizon)
        XCTAssertLessThanOrEqual(configuration.retryHorizon + AdsConfiguration.keyLifetimeMargin, configuration.keyLifetime)
        try fakes.script(.subscription, ["status": 503, "times": -1])
        var sentAt: [Date] = []
        let result = try deliverUntilSettled(try JobRunnerDriver.payload(PendingRewardJob.className, args(seeded.reward)),
                                             limit: 1000) { _ in sentAt.append(self.clock.now) }
        XCTAssertAck(result.last)
        try assertFailedWithAlert(seeded, containing: "retry horizon reached")
        XCTAssertEqual(try earnRequests().count, sentAt.count, "every delivery sent one request")
        XCTAssertLessThan(sentAt.last!, deadline, "no request at or after the horizon")
        XCTAssertGreaterThan(sentAt.last!, deadline.addingTimeInterval(-2 * AdsConfiguration.lastAttemptMargin),
                             "the last try is just before it")
        XCTAssertEqual(try reward(seeded.reward).attempts, 0)

        // A reward found pending after its horizon (e.g. by the sweep, after the workers were down) is failed without
        // a request.
        let stale = try seedReward(source: "ad", amount: 1, ageSeconds: Int(configuration.retryHorizon) + 60)
        try fakes.reset(.subscription)
        logs.clear()
        XCTAssertAck(try driver.deliver(PendingRewardJob.className, args(stale.reward)))
        try assertFailedWithAlert(stale, containing: "not credited within the retry horizon")
        XCTAssertEqual(try earnRequests().count, 0)
    }

    func testAdRewardKeepsRetryingWithCappedBackoff() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        try fakes.script(.subscription, ["status": 502, "times": 7])
        var payload = try JobRunnerDriver.payload(PendingRewardJob.className, args(seeded.reward))
        for _ in 0..<7 { payload = try expectUnavailableRetry(try driver.deliver(payload)) }
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
        XCTAssertEqual(try reward(seeded.reward).attempts, 0)
        XCTAssertEqual(PendingRewardJob.options.maxRetries, 100_000, "the time cap ends the retries, not the count")
        for count in [0, 5, 20, 1000] {
            XCTAssertLessThanOrEqual(PendingRewardJob.options.backoff.delay(retryCount: count).inSeconds, 3600 * 1.2)
        }
        XCTAssertAck(try driver.deliver(payload))
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
    }

    func testRateLimitedAnswerAsksForRetryAfter() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        try fakes.script(.subscription, ["status": 429, "retry_after": 17])
        Failure.isRetryAfter(try driver.deliver(PendingRewardJob.className, args(seeded.reward)), seconds: 17)
        XCTAssertEqual(try reward(seeded.reward).status, "pending")
        XCTAssertEqual(try reward(seeded.reward).attempts, 0, "429 is not counted")
    }

    /// An ad reward's rejected request counts and is retried on the schedule (no count limit: "retry until
    /// success", within the time cap).
    func testRejectedAdRewardIsRetriedOnTheSchedule() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        try fakes.script(.subscription, ["status": 422, "json": ["error": "invalid_request"], "times": 6])
        let result = try deliverUntilSettled(try JobRunnerDriver.payload(PendingRewardJob.className, args(seeded.reward)))
        XCTAssertAck(result.last)
        XCTAssertEqual(result.delays, [60, 600, 3600, 21_600, 86_400, 86_400])
        XCTAssertEqual(try reward(seeded.reward).status, "credited")
        XCTAssertEqual(try reward(seeded.reward).attempts, 7)
        XCTAssertEqual(logs.alerts, [])
    }

    /// A key that cannot be an sf-string (an explicit key the Ads Service stored) is never sent: failed + alert.
    func testAKeyThatIsNoStructuredFieldStringIsNotSent() throws {
        let seeded = try seedReward(source: "ad", amount: 1)
        try pool.withConnection {
            _ = try $0.execute("UPDATE pending_rewards SET idempotency_key = 'ad_reward:é' WHERE id = $1", [seeded.reward])
        }
        XCTAssertAck(try driver.deliver(PendingRewardJob.className, args(seeded.reward)))
        try assertFailedWithAlert(seeded, containing: "cannot be sent as an sf-string")
        XCTAssertEqual(try earnRequests().count, 0)
    }

    func testBadAndMissingRewards() throws {
        for (arguments, reason) in [([JSONValue.object(["pending_reward_id": "42"])], "pending_reward_id must be a UUID"),
                                    ([.object(["reward": "x"])], "pending_reward_id")] {
            Failure.settled(try driver.deliver(PendingRewardJob.className, arguments), in: .dead, errorClass: "BadInput",
                            containing: [reason])
        }
        XCTAssertAck(try driver.deliver(PendingRewardJob.className, args(UUID())), "gone (user deleted): nothing to do")
        XCTAssertEqual(try fakes.requests(.subscription).count, 0)
    }

    // MARK: Migration 0012

    func testMigrationDerivesKeysOnlyWhereNoRequestCarriedTheOldOne() throws {
        let old = try PostgresTestDatabase.create(prefix: "ads_reward_migration")
        let oldPool = PostgresPool(url: old.url, maxConnections: 2)
        defer { oldPool.shutdown(); old.drop() }
        _ = try Migrator(migrations: Migration.bundled().filter { $0.version < 12 }).migrate(pool: oldPool)
        let user = UUID()
        let campaign = UUID()
        func insert(_ reference: String, _ source: String, status: String, attempts: Int) throws -> String {
            try oldPool.withConnection { connection in
                try connection.queryFirst("""
                    INSERT INTO pending_rewards (user_id, amount, source, reference, status, attempts)
                    VALUES ($1, 1, $2, $3, $4, $5) RETURNING idempotency_key
                    """, [user, source, reference, status, attempts])!.string("idempotency_key")
            }
        }
        try oldPool.withConnection { _ = try $0.execute("INSERT INTO users (id, app_id) VALUES ($1, $2)", [user, UUID()]) }
        let fresh = try insert("req-fresh", "ad", status: "pending", attempts: 0)
        let freshCampaign = try insert(campaign.uuidString.lowercased(), "campaign", status: "pending", attempts: 0)
        let tried = try insert("req-tried", "ad", status: "pending", attempts: 2)
        let credited = try insert("req-credited", "ad", status: "credited", attempts: 1)
        let failed = try insert("req-failed", "ad", status: "failed", attempts: 5)
        XCTAssertNotNil(UUID(uuidString: fresh), "the old default: a random uuid")

        _ = try BundledSchema.migrate(pool: oldPool)
        let keys = try oldPool.withConnection { connection in
            Dictionary(uniqueKeysWithValues: try connection.query("SELECT reference, idempotency_key FROM pending_rewards")
                .map { (try $0.string("reference"), try $0.string("idempotency_key")) })
        }
        XCTAssertEqual(keys["req-fresh"], "ad_reward:req-fresh", "never sent: now the key the Ads Service uses")
        XCTAssertEqual(keys[campaign.uuidString.lowercased()],
                       "campaign:\(campaign.uuidString.lowercased()):\(user.uuidString.lowercased())")
        XCTAssertNotEqual(freshCampaign, keys[campaign.uuidString.lowercased()])
        XCTAssertEqual(keys["req-tried"], tried, "an earlier attempt may have been applied under the old key")
        XCTAssertEqual(keys["req-credited"], credited, "the key the service applied stays")
        XCTAssertEqual(keys["req-failed"], failed)
        // New rows get the derived key; an explicit one (the key the Ads Service really sent) is kept.
        XCTAssertEqual(try insert("req-new", "ad", status: "pending", attempts: 0), "ad_reward:req-new")
        let explicit = try oldPool.withConnection { connection in
            try connection.queryFirst("""
                INSERT INTO pending_rewards (user_id, amount, source, reference, idempotency_key)
                VALUES ($1, 1, 'ad', 'req-explicit', 'ads-service-key-1') RETURNING idempotency_key
                """, [user])!.string("idempotency_key")
        }
        XCTAssertEqual(explicit, "ads-service-key-1")
    }

    func testSweepEnqueuesPendingRewardsWithoutALiveJob() throws {
        let orphanA = try seedReward(source: "ad", amount: 1, ageSeconds: 3600)
        let orphanB = try seedReward(source: "campaign", amount: 10, ageSeconds: 3600)
        let live = try seedReward(source: "ad", amount: 1, ageSeconds: 3600)
        let young = try seedReward(source: "ad", amount: 1, ageSeconds: 0)
        let credited = try seedReward(source: "ad", amount: 1, ageSeconds: 3600)
        try pool.withConnection { _ = try $0.execute("UPDATE pending_rewards SET status = 'credited' WHERE id = $1", [credited.reward]) }
        // A live job for `live` (as another sweep or the Ads Service's unique push leaves it): its lock is held.
        let liveJID = try redis.client.enqueueUnique(
            NewJob(PendingRewardJob.className, args: [.object(["pending_reward_id": .string(live.reward.uuidString.uppercased())])]),
            policy: PendingRewardJob.uniquePolicy(seconds: 600)).jid
        try redis.command("DEL", "queue:default")  // the job itself is running elsewhere

        var small = configuration
        small.sweepBatchSize = 1  // walk the rewards one batch at a time
        let sweep = PendingRewardSweepJob(client: redis.client, configuration: small)
        XCTAssertEqual(try sweep.sweep(pool: pool), 2)
        XCTAssertEqual(try sweep.sweep(pool: pool), 0, "the enqueued jobs hold their locks")
        XCTAssertEqual(try liveJob(live.reward), liveJID, "the live job's lock (the key is the lower-cased id)")
        let queued = try redis.payloads(list: "queue:default")
        XCTAssertEqual(queued.map(\.className), [PendingRewardJob.className, PendingRewardJob.className])
        let ids = Set(queued.compactMap { $0.args.first?.objectValue?["pending_reward_id"]?.stringValue })
        XCTAssertEqual(ids, [orphanA.reward.uuidString.lowercased(), orphanB.reward.uuidString.lowercased()])
        XCTAssertEqual(try liveJob(orphanA.reward), queued.first {
            $0.args.first?.objectValue?["pending_reward_id"]?.stringValue == orphanA.reward.uuidString.lowercased()
        }?.jid)
        _ = young

        // The enqueued jobs run (here without Redis: the locks stay); the rewards are credited, so nothing is
        // left to sweep. The release of the locks by a real worker: testRewardJobLockThroughARealWorker.
        for payload in queued { XCTAssertAck(try driver.deliver(payload)) }
        XCTAssertEqual(try reward(orphanB.reward).status, "credited")
        try redis.command("DEL", "queue:default")
        XCTAssertEqual(try sweep.sweep(pool: pool), 0)
        // Through the registry, as the scheduler runs it.
        XCTAssertAck(try driver.deliver(PendingRewardSweepJob.className, []))
    }

    /// The reward's unique lock through a real worker (fetch, settle, retry): the sweep's job holds it while it
    /// waits in `retry` (the sweep then pushes nothing, a plain push of the same reward is dropped at fetch),
    /// and the success releases it.
    func testRewardJobLockThroughARealWorker() throws {
        let seeded = try seedReward(source: "ad", amount: 1, ageSeconds: 3600)
        try fakes.script(.subscription, ["status": 503, "times": 1])
        var registry = JobRegistry()
        AdsJobs.register(into: &registry, configuration: configuration, http: http, redis: redis.pool)
        let sweep = PendingRewardSweepJob(client: redis.client, configuration: configuration)
        XCTAssertEqual(try sweep.sweep(pool: pool), 1)
        let jid = try XCTUnwrap(try liveJob(seeded.reward), "the sweep's push holds the reward's lock")

        let worker = try TestWorker.start(redis: redis, registry: registry, database: fixture.jobDatabase, concurrency: 2)
        defer { worker.shutdown() }
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 }, "the 503 sends it to retry")
        XCTAssertEqual(try liveJob(seeded.reward), jid, "a job waiting for its retry keeps the reward live")
        XCTAssertEqual(try sweep.sweep(pool: pool), 0)
        // The Ads Service's own (plain) push of the same reward while the job waits: dropped when fetched.
        try redis.client.enqueue(NewJob(PendingRewardJob.className, args: args(seeded.reward)))
        XCTAssertTrue(try eventually { try redis.int("GET", Keys.uniqueDropped) == 1 })

        try redis.pool.withConnection { _ = try JobAdmin(connection: $0).perform(.run, jid: jid) }
        XCTAssertTrue(try eventually { try reward(seeded.reward).status == "credited" })
        XCTAssertTrue(try eventually { try liveJob(seeded.reward) == nil }, "the success releases the lock")
        XCTAssertEqual(try fakes.subscriptionCredits().creditedByKey, [seeded.key: 1])
        XCTAssertEqual(try sweep.sweep(pool: pool), 0)
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
        XCTAssertEqual(defaults.inFlightRetrySeconds, 5)
        XCTAssertEqual(defaults.revenueEstimateDays, 7)
        XCTAssertThrowsError(try AdsConfiguration.fromEnvironment(["ADS_CAMPAIGN_MAX_ATTEMPTS": "0"])) { error in
            XCTAssertEqual((error as? GeoAdsConfigurationError)?.variable, "ADS_CAMPAIGN_MAX_ATTEMPTS", "\(error)")
        }
        // The time cap and the key lifetime (the reward contract): 72 h and 7 days, the cap at least an hour short.
        XCTAssertEqual(defaults.retryHorizon, 72 * 3600)
        XCTAssertEqual(defaults.keyLifetime, 7 * 86_400)
        XCTAssertEqual(defaults.attemptDelays, [60, 600, 3600, 21_600, 86_400])
        XCTAssertNoThrow(try AdsConfiguration.fromEnvironment(["ADS_REWARD_RETRY_HORIZON_SECONDS": "86400",
                                                               "ADS_SUBSCRIPTION_KEY_LIFETIME_SECONDS": "90000",
                                                               "ADS_REWARD_ATTEMPT_DELAYS_SECONDS": "30, 300"]))
        XCTAssertThrowsError(try AdsConfiguration.fromEnvironment(["ADS_SUBSCRIPTION_KEY_LIFETIME_SECONDS": "86400"])) { error in
            XCTAssertEqual((error as? GeoAdsConfigurationError)?.variable, "ADS_REWARD_RETRY_HORIZON_SECONDS", "\(error)")
        }
        XCTAssertThrowsError(try AdsConfiguration.fromEnvironment(["ADS_REWARD_ATTEMPT_DELAYS_SECONDS": "60,x"])) { error in
            XCTAssertEqual((error as? GeoAdsConfigurationError)?.variable, "ADS_REWARD_ATTEMPT_DELAYS_SECONDS", "\(error)")
        }
        XCTAssertThrowsError(try AdsConfiguration.fromEnvironment(["ADS_REVENUE_ESTIMATE_DAYS": "0"])) { error in
            XCTAssertEqual((error as? GeoAdsConfigurationError)?.variable, "ADS_REVENUE_ESTIMATE_DAYS", "\(error)")
        }
    }
}
