import Foundation
@testable import WorkersAppJobs
import Logging
import WorkersMail
@testable import WorkersOutbox
import WorkersQueue
import WorkersStorage
import Synchronization
import WorkersTestServices
import Workers
import XCTest

/// Erasure stays erased (issue 33 point 4, review N6; docs/jobs-privacy.md, "After the erasure"): a validation
/// enqueued through `workers_enqueue` that waits in `retry` when its user is erased does not come back through the
/// lost-job finder, and a validation that still runs for an erased user changes nothing. Real PostgreSQL, Redis
/// database 38, the Apple fake; jobs through a real worker (`TestWorker`) or the runner (`JobRunnerDriver`), the
/// relay's batch and the finder's round in process (`@testable Outbox`), time moved by the test (`pushed_at`).
final class ErasureStaysErasedTests: ReceiptsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "erasure_test", redis: 189, fakes: .own([.apple]))
    }

    let logger = Logger(label: "erasure-test")
    static let email = "zqerased.pii@example.org"
    static let receipt = "zqreceipt-erased-blob"

    /// The receipt jobs (verifyReceipt against the fake) and the privacy jobs, as one worker registers them.
    func registry(_ receipts: ReceiptsConfiguration? = nil) throws -> JobRegistry {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, services: try ReceiptServices(configuration: receipts ?? appleConfiguration(),
                                                                            http: http))
        let privacy = try PrivacyConfiguration(
            storageDirectory: FileManager.default.temporaryDirectory.appendingPathComponent("erasure-test-\(UUID().uuidString)"),
            urlBase: "https://downloads.example.test/privacy/exports",
            signingSecret: Data("test-signing-secret-0123456789-abcdefghijklmnop".utf8),
            smtp: SMTPConfiguration(host: "127.0.0.1", port: 9, security: .none, connectTimeout: .seconds(1), timeout: .seconds(1)),
            mailFrom: EmailAddress("privacy@example.test", name: "Privacy Team"))
        PrivacyJobs.register(into: &registry, configuration: privacy, redis: redis.pool)
        return registry
    }

    func appleArgs(user: UUID, receipt: String, transaction: String) -> String {
        jsonString([["user_id": user.uuidString.lowercased(), "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString,
                     "store": "apple", "receipt_data": receipt, "transaction_id": transaction]])
    }

    /// verifyReceipt answers `receipt` as a valid purchase of the plan's product, transaction `transaction`.
    func registerValid(receipt: String, transaction: String) throws {
        let ms = { (d: Date) in String(Int64(d.timeIntervalSince1970 * 1000)) }
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": receipt, "status": 0, "environment": "Production",
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": transaction,
                                     "original_transaction_id": transaction,
                                     "purchase_date_ms": ms(Date().addingTimeInterval(-86400)),
                                     "expires_date_ms": ms(Date().addingTimeInterval(20 * 86400)), "is_trial_period": "false"]],
            "pending_renewal_info": [["original_transaction_id": transaction, "auto_renew_status": "1"]],
        ])
    }

    /// A user of the plan's app with an address and a due deletion request (as the Auth Service records it).
    func userWithDueDeletion() throws -> (user: UUID, request: UUID) {
        let user = try db.newUser()
        let request = try pool.withConnection { c in
            try c.execute("""
                UPDATE users SET email = $2, delete_requested = true, delete_scheduled_at = now() - interval '1 minute'
                WHERE id = $1
                """, [user, Self.email])
            return try c.queryFirst("""
                INSERT INTO deletion_requests (user_id, requested_at, scheduled_at)
                VALUES ($1, now() - interval '28 days', now() - interval '1 minute') RETURNING id
                """, [user])!.uuid("id")
        }
        return (user, request)
    }

    func erase(_ user: UUID, request: UUID, driver: JobRunnerDriver) throws {
        try driver.run(AccountDeletionJob.className, PrivacyJobs.deletionJob(userID: user, requestID: request).args)
    }

    /// `workers_enqueue(className, args)` (migration 0014), in an hour when `later`; the jid.
    func enqueueThroughSQL(_ args: String, className: String = "ValidateReceiptJob", later: Bool = false) throws -> String {
        try pool.withConnection { c in
            try c.queryFirst("SELECT workers_enqueue($1, $2::jsonb, at => CASE WHEN $3::boolean THEN now() + interval '1 hour' END) AS jid",
                             [className, args, later])!.string("jid")
        }
    }

    /// Every key of the test's Redis database with its members or value, as text.
    func redisContents() throws -> [String: [String]] {
        var contents: [String: [String]] = [:]
        for key in try redis.command("KEYS", "*").strings {
            switch try redis.command("TYPE", key).string {
            case "list": contents[key] = try redis.command("LRANGE", key, 0, -1).strings
            case "zset": contents[key] = try redis.command("ZRANGE", key, 0, -1).strings
            case "hash": contents[key] = try redis.command("HGETALL", key).strings
            case "set": contents[key] = try redis.command("SMEMBERS", key).strings
            case "string": contents[key] = [try redis.command("GET", key).string ?? ""]
            default: contents[key] = []
            }
        }
        return contents
    }

    /// `key: member` of every Redis entry whose text holds `needle` (any case).
    func redisEntries(naming needle: String) throws -> [String] {
        try redisContents().flatMap { key, members in
            ([key] + members).filter { $0.lowercased().contains(needle.lowercased()) }.map { "\(key): \($0)" }
        }
    }

    /// Public tables whose row text holds `needle`.
    func tables(holding needle: String) throws -> [String] {
        try pool.withConnection { c in
            let tables = try c.query("""
                SELECT quote_ident(table_name::text) AS t FROM information_schema.tables
                WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1
                """).map { try $0.string("t") }
            return try tables.filter { table in
                try c.queryFirst("SELECT count(*)::int AS n FROM \(table) t WHERE strpos(t::text, $1) > 0", [needle])!.int("n") > 0
            }
        }
    }

    // MARK: - The scenario

    /// N6 (a): a `ValidateReceiptJob` enqueued through `workers_enqueue` is pushed by the relay, fails into `retry`
    /// (Apple answers 503) in a real worker; the user is erased meanwhile (the real runner); the lost-job finder's
    /// interval passes and it runs a round. Nothing of the user comes back: no `job_outbox` row names the user, the
    /// finder pushes nothing, no Redis entry names the user, no subscription or receipt is linked to them, the
    /// receipt is stored nowhere. Another user's outbox job is left alone.
    func testAValidationWaitingInRetryDoesNotComeBackAfterTheErasure() throws {
        let (user, request) = try userWithDueDeletion()
        let other = try db.newUser()
        let u = user.uuidString.lowercased()
        let jid = try enqueueThroughSQL(appleArgs(user: user, receipt: Self.receipt, transaction: "71000001"))
        let otherJid = try enqueueThroughSQL(appleArgs(user: other, receipt: "zqother-receipt", transaction: "71000002"),
                                             later: true)
        // A mail job naming the user only by address, and one for an address that merely ends with it.
        let mailJid = try enqueueThroughSQL(jsonString([["to": "Zq <\(Self.email)>"]]), className: "SendMailJob", later: true)
        let jimJid = try enqueueThroughSQL(jsonString([["to": "jim.\(Self.email)"]]), className: "SendMailJob", later: true)
        let shards = OutboxShards(map: ShardMap(single: try RedisEndpoint(url: redis.url)), logger: logger)
        defer { shards.close() }
        let relayed = try pool.withConnection { try OutboxRelay.relayBatch(database: $0, redis: shards, limit: 500) }
        XCTAssertEqual(relayed.taken, 4)
        XCTAssertEqual(try redis.payloads(list: Keys.queue("default")).compactMap(\.jid), [jid])
        XCTAssertEqual(Set(try redis.payloads(zset: Keys.schedule).compactMap(\.jid)), [otherJid, mailJid, jimJid])

        // Apple is down: the worker's run fails into `retry` (not due for ~15 s; the worker stops before).
        try registerValid(receipt: Self.receipt, transaction: "71000001")
        try fakes.script(.apple, ["match": ["path": "/verifyReceipt"], "status": 503, "times": 100])
        let registry = try registry()
        let worker = try TestWorker.start(redis: redis, registry: registry, database: fixture.jobDatabase, concurrency: 1)
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.retry) == 1 })
        worker.shutdown()
        XCTAssertEqual(try redis.payloads(zset: Keys.retry).first?.jid, jid)
        XCTAssertEqual(try redis.payloads(zset: Keys.retry).first?.fields["error_message"]?.stringValue?.contains("503"), true)

        // The erasure, through the runner.
        let driver = fixture.driver(registry)
        try erase(user, request: request, driver: driver)

        // The finder's interval passes (the rows were pushed two minutes ago), and it runs a round.
        try pool.withConnection { _ = try $0.execute("UPDATE job_outbox SET pushed_at = pushed_at - interval '2 minutes'") }
        var finder = LostJobFinder(settings: LostJobSettings(interval: .seconds(60), ledgerClasses: [ValidateReceiptJob.className]),
                                   logger: logger)
        let report = try pool.withConnection { try finder.round(database: $0, redis: shards) }
        XCTAssertTrue(report.ran)
        XCTAssertEqual(report.pushedAgain, 0, "the finder pushes nothing back")
        // Apple is back: whatever Redis holds now runs (nothing of the user's should).
        try fakes.reset(.apple)
        try registerValid(receipt: Self.receipt, transaction: "71000001")
        for payload in try redis.payloads(list: Keys.queue("default")) { _ = try driver.deliver(payload) }

        // PostgreSQL: no outbox row names the user (by id or address); the other rows are still there.
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM job_outbox WHERE strpos(lower(args::text), $1) > 0", [u]), 0)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM job_outbox WHERE jid IN ($1, $2)", [jid, mailJid]), 0)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM job_outbox WHERE jid IN ($1, $2)", [otherJid, jimJid]), 2)
        XCTAssertEqual(try db.scalar("""
            SELECT count(*) FROM audit_logs WHERE action = 'account_deleted' AND (details->'deleted_rows'->>'job_outbox')::int = 2
            """), 1, "the audit entry counts the outbox rows")
        // Nothing is linked to the user, the receipt is stored nowhere, the address is gone.
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM users WHERE id = $1 AND subscription_id IS NULL AND anonymized_at IS NOT NULL", [user]), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions WHERE user_id = $1 OR store_transaction_id = '71000001'", [user]), 0)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM iap_receipts WHERE user_id = $1 OR transaction_id = '71000001'", [user]), 0)
        XCTAssertEqual(try tables(holding: Self.receipt), [])
        XCTAssertEqual(try tables(holding: "<" + Self.email), [])
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM users WHERE email IS NOT NULL"), 0)
        // Redis: no entry names the user (by id, any case, or by address); the other user's job is still scheduled.
        XCTAssertEqual(try redisEntries(naming: u), [])
        XCTAssertEqual(try redisEntries(naming: Self.email).filter { !$0.contains("jim.") }, [])
        XCTAssertEqual(Set(try redis.payloads(zset: Keys.schedule).compactMap(\.jid)), [otherJid, jimJid])
    }

    /// The race the lock closes (LostJobFinder, "Erased users"): the finder has read the user's row as a candidate
    /// when the erasure starts. The erasure's DELETE of that row waits for the finder's round to commit, so the
    /// finder still finds the job in `retry` (nothing to push) and the purge after the erasure's commit removes it.
    /// Without the lock the erasure would commit and purge in between, the finder would find the job missing and
    /// push it back.
    func testAnErasureDuringAFinderRoundWaitsForItAndNothingComesBack() throws {
        let (user, request) = try userWithDueDeletion()
        let u = user.uuidString.lowercased()
        let jid = try enqueueThroughSQL(appleArgs(user: user, receipt: Self.receipt, transaction: "73000001"))
        let shards = OutboxShards(map: ShardMap(single: try RedisEndpoint(url: redis.url)), logger: logger)
        defer { shards.close() }
        _ = try pool.withConnection { try OutboxRelay.relayBatch(database: $0, redis: shards, limit: 500) }
        // The runner fails it (Apple 503); the worker's settlement puts the retry payload in `retry`.
        try fakes.script(.apple, ["match": ["path": "/verifyReceipt"], "status": 503, "times": 100])
        let driver = fixture.driver(try registry())
        let queued = try XCTUnwrap(redis.payloads(list: Keys.queue("default")).first)
        XCTAssertEqual(queued.jid, jid)
        guard case .retry(let next, _) = try driver.deliver(queued) else { return XCTFail("not a retry") }
        try redis.command("DEL", Keys.queue("default"))
        try redis.command("ZADD", Keys.retry, Clock.now() + 3600, next.serialized())
        try pool.withConnection { _ = try $0.execute("UPDATE job_outbox SET pushed_at = pushed_at - interval '2 minutes'") }

        let erased = DispatchSemaphore(value: 0)
        let finished = Mutex(false)
        let watcher = try fixture.database.connect()
        defer { watcher.close() }
        func erasureWaitsOnALock() throws -> Bool {
            try watcher.queryFirst("""
                SELECT count(*)::int AS n FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock'
                """)!.int("n") > 0
        }
        var finder = LostJobFinder(settings: LostJobSettings(interval: .seconds(60), ledgerClasses: [ValidateReceiptJob.className]),
                                   logger: logger)
        var candidates: [String] = []
        finder.afterCandidates = { jids in
            candidates = jids
            Thread.detachNewThread {
                try? driver.run(AccountDeletionJob.className, PrivacyJobs.deletionJob(userID: user, requestID: request).args)
                finished.withLock { $0 = true }
                erased.signal()
            }
            // Until the erasure either finished (no lock) or waits for the finder's row lock.
            _ = eventually { finished.withLock { $0 } || ((try? erasureWaitsOnALock()) ?? false) }
        }
        let report = try pool.withConnection { try finder.round(database: $0, redis: shards) }
        XCTAssertEqual(erased.wait(timeout: .now() + 60), .success, "the erasure finished")
        XCTAssertEqual(candidates, [jid], "the user's row was a candidate when the erasure started")
        XCTAssertEqual(report.pushedAgain, 0)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM users WHERE id = $1 AND anonymized_at IS NOT NULL", [user]), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM job_outbox"), 0)
        XCTAssertEqual(try redisEntries(naming: u), [])
    }

    // MARK: - A job for an erased user changes nothing

    /// A validation for an already-anonymised user, with Apple answering that the purchase is valid, run by the
    /// runner: it succeeds once as a no-op (ledger row written, so a redelivery is skipped); the user stays free,
    /// no subscription is created or linked, no receipt row holds the receipt.
    func testAValidationForAnErasedUserChangesNothing() throws {
        let (user, request) = try userWithDueDeletion()
        let driver = fixture.driver(try registry())
        try erase(user, request: request, driver: driver)
        try registerValid(receipt: Self.receipt, transaction: "72000001")

        let payload = try driver.run("ValidateReceiptJob", appleArgs(user: user, receipt: Self.receipt, transaction: "72000001"))

        XCTAssertEqual(try db.scalar("SELECT count(*) FROM job_ledger WHERE jid = $1", [payload.jid]), 1, "done, once")
        XCTAssertEqual(try db.userStatus(user), "free")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM users WHERE id = $1 AND subscription_id IS NULL", [user]), 1)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM subscriptions"), 0)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM iap_receipts"), 0)
        XCTAssertEqual(try tables(holding: Self.receipt), [])
        XCTAssertEqual(try fakes.requests(.apple, path: "/verifyReceipt").count, 1, "the fake would have validated it")
    }

    /// Store notifications name no user: they reach one through `subscriptions.user_id`, which the erasure clears. A
    /// notification that read the subscription just before the erasure committed still holds the user's id when it
    /// grants (the state made here by pointing the detached subscription at the erased user again): the grant does
    /// not link the erased account (`SubscriptionStore.applyEntitlement`).
    func testARenewalNotificationDoesNotLinkAnErasedUser() throws {
        let signer = try TestAppleSigner()
        var configuration = appleConfiguration()
        configuration.appleRootCertificates = [signer.rootDER]
        let driver = fixture.driver(try registry(configuration))
        let (user, request) = try userWithDueDeletion()
        try registerValid(receipt: Self.receipt, transaction: "74000001")
        try driver.run("ValidateReceiptJob", appleArgs(user: user, receipt: Self.receipt, transaction: "74000001"))
        XCTAssertEqual(try db.userStatus(user), "premium")
        try erase(user, request: request, driver: driver)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM users WHERE id = $1 AND subscription_id IS NULL", [user]), 1)
        try pool.withConnection { _ = try $0.execute("UPDATE subscriptions SET user_id = $1 WHERE store_transaction_id = '74000001'", [user]) }

        let now = Date()
        let transaction: [String: Any] = [
            "transactionId": "74000002", "originalTransactionId": "74000001", "bundleId": "com.example",
            "productId": ReceiptsDatabase.appleProduct, "purchaseDate": TestAppleSigner.ms(now.addingTimeInterval(-3600)),
            "expiresDate": TestAppleSigner.ms(now.addingTimeInterval(30 * 86400)), "environment": "Sandbox",
            "signedDate": TestAppleSigner.ms(now)]
        let payload: [String: Any] = [
            "notificationType": "DID_RENEW", "notificationUUID": UUID().uuidString, "version": "2.0",
            "signedDate": TestAppleSigner.ms(now),
            "data": ["bundleId": "com.example", "environment": "Sandbox", "appAppleId": 1234, "status": 1,
                     "signedTransactionInfo": try signer.sign(transaction)] as [String: Any]]
        try driver.run("AppStoreNotificationJob", jsonString([["signedPayload": try signer.sign(payload)]]))

        XCTAssertEqual(try db.events(key: "74000001").last, "renewed", "the accounting row follows the store")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM users WHERE id = $1 AND subscription_id IS NULL", [user]), 1,
                       "the erased account is not linked to the subscription again")
    }
}

/// The same no-op for the other domain jobs that name a user: `PendingRewardJob` (Ads) and `ReverseGeocodeJob`
/// (Geo), each with a row for an anonymised user that the job would otherwise settle (the Ads Service or the app
/// wrote it after the erasure). Real PostgreSQL, Redis database 39, the shared Subscription and Nominatim fakes.
final class ErasedUserDomainJobsTests: JobsTestCase {
    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "erased_domain_test", connections: 4, redis: 190, fakes: .shared(reset: [.subscription, .nominatim]))
    }

    func driver() throws -> JobRunnerDriver {
        var registry = JobRegistry()
        AdsJobs.register(into: &registry, configuration: AdsConfiguration(subscriptionServiceURL: fakes.subscriptionServiceBaseURL,
                                                                          requestTimeout: 2),
                         http: http, redis: redis.pool)
        try GeoJobs.register(into: &registry, configuration: GeoConfiguration(
            nominatimBaseURL: fakes.nominatimBaseURL, userAgent: "SwiftWorkers-ErasureTests/1.0", contactEmail: "ops@example.org",
            requestTimeout: 5), http: http, redis: redis.pool)
        return fixture.driver(registry)
    }

    func count(_ sql: String, _ parameters: [(any PostgresBindable)?] = []) throws -> Int {
        try pool.withConnection { try $0.queryFirst("SELECT (\(sql))::int AS n", parameters)!.int("n") }
    }

    /// An anonymised user (with a geolocation consent row, so that only the erasure check stops the geocoding).
    func erasedUser() throws -> UUID {
        let user = try GeoAdsSeed.user(pool, consentGeolocation: true)
        try pool.withConnection { _ = try $0.execute("UPDATE users SET anonymized_at = now() WHERE id = $1", [user]) }
        return user
    }

    func testARewardForAnErasedUserCreditsNothingAndGoes() throws {
        let user = try erasedUser()
        let reward = UUID()
        try pool.withConnection { c in
            try c.execute("""
                INSERT INTO pending_rewards (id, user_id, amount, source, reference) VALUES ($1, $2, 10, 'ad', $3)
                """, [reward, user, UUID().uuidString.lowercased()])
        }
        try driver().run(PendingRewardJob.className, [.object(["pending_reward_id": .string(reward.uuidString.lowercased())])])
        XCTAssertEqual(try count("SELECT count(*) FROM notifications WHERE user_id = $1", [user]), 0, "no 'credits added' notification")
        XCTAssertEqual(try count("SELECT count(*) FROM pending_rewards WHERE user_id = $1", [user]), 0,
                       "the late reward row goes as the erasure's would (no sweep brings it back)")
    }

    func testALocationOfAnErasedUserIsNotGeocoded() throws {
        let user = try erasedUser()
        let location = try GeoAdsSeed.location(pool, user: user, latitude: 48.8566, longitude: 2.3522)
        try driver().run(ReverseGeocodeJob.className, [.object(["location_id": .string(location.uuidString.lowercased())])])
        XCTAssertEqual(try count("SELECT count(*) FROM user_locations WHERE id = $1 AND geocoded_at IS NULL AND city IS NULL",
                                 [location]), 1)
    }
}
