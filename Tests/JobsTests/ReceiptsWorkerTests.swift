import Foundation
import HTTP
@testable import Jobs
import Logging
import Queue
import Storage
import TestSupport
import Workers
import XCTest

/// The receipt jobs inside a real worker process: Redis (database 20), PostgreSQL, the Apple fake.
final class ReceiptsWorkerTests: XCTestCase {
    var db: ReceiptsDatabase!
    var redis: TestRedis!
    var fakes: FakeServers!
    var process: WorkerProcess?

    override class func setUp() { CurlRuntime.initialize() }

    override func setUpWithError() throws {
        db = try ReceiptsDatabase()
        redis = try TestRedis(database: 20)
        fakes = try FakeServers([.apple])
    }

    override func tearDown() {
        process?.shutdown()
        fakes?.stop()
        db?.close()
    }

    func start() throws {
        var c = ReceiptsConfiguration()
        c.appleVerifyReceiptProductionURL = fakes.appleVerifyReceiptProductionURL
        c.appleVerifyReceiptSandboxURL = fakes.appleVerifyReceiptSandboxURL
        c.appleBundleID = "com.example"
        c.appleAppAppleID = 1234
        c.appleValidation = .verifyReceipt
        c.requestTimeout = .seconds(2)
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, configuration: c,
                             http: HTTPClient(configuration: HTTPClientConfiguration(userAgent: "receipts-test")))
        var configuration = WorkerConfiguration()
        configuration.redisURL = redis.url
        configuration.concurrency = 4
        configuration.heartbeatInterval = 0.2
        configuration.fetcherHeartbeatTTL = 1
        configuration.orphanSweepInterval = 0.3
        configuration.pollInterval = 0.2
        configuration.shutdownTimeout = 2
        var logger = Logger(label: "receipts-worker-test")
        logger.logLevel = .critical
        let p = try WorkerProcess(configuration: configuration, registry: registry, database: JobDatabase(pool: db.pool), logger: logger)
        try p.start()
        process = p
    }

    func args(user: UUID, receipt: String, transaction: String) throws -> [JSONValue] {
        guard case .array(let a) = try JSONValue.parse(jsonString([[
            "user_id": user.uuidString, "app_id": db.appID.uuidString, "plan_id": db.planID.uuidString,
            "store": "apple", "receipt_data": receipt, "transaction_id": transaction]])) else { return [] }
        return a
    }

    func testDuplicateDeliveryAppliesOnceAndInvalidReceiptsGoDeadWithTheirReason() throws {
        let user = try db.newUser(), other = try db.newUser()
        let expires = String(Int64(Date().addingTimeInterval(20 * 86400).timeIntervalSince1970 * 1000))
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "r1", "status": 0,
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "7000001",
                                     "original_transaction_id": "7000001", "expires_date_ms": expires]]])
        // The same payload pushed twice (a redelivery): one subscription, one event, one ledger row.
        let payload = try JobClient.payload(for: NewJob("ValidateReceiptJob", args: try args(user: user, receipt: "r1", transaction: "7000001")),
                                            createdAt: Clock.now(), enqueuedAt: Clock.now())
        try redis.command("LPUSH", "queue:default", payload.serialized(), payload.serialized())
        _ = try redis.client.enqueue(NewJob("ValidateReceiptJob", args: try args(user: other, receipt: "status:21003", transaction: "7000002")))
        _ = try redis.client.enqueue(NewJob("ValidateReceiptJob", args: [.object(["store": .string("apple")])]))
        try fakes.script(.apple, ["match": ["contains": "r5xx"], "status": 503, "times": -1])
        _ = try redis.client.enqueue(NewJob("ValidateReceiptJob", args: try args(user: other, receipt: "r5xx", transaction: "7000003")))
        try start()

        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 2 && redis.int("ZCARD", Keys.retry) == 1 })
        XCTAssertTrue(try eventually { try redis.processed() >= 5 })  // both deliveries of the duplicate ran
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM job_ledger WHERE jid = $1", [payload.jid]), 1)
        XCTAssertEqual(try db.events(key: "7000001"), ["subscription_started"])
        XCTAssertEqual(try db.userStatus(user), "premium")
        XCTAssertEqual(try db.userStatus(other), "free")
        let reasons = try redis.payloads(zset: Keys.dead).compactMap(\.errorMessage)
        XCTAssertTrue(reasons.contains { $0.contains("RCV-21003") }, "\(reasons)")
        XCTAssertTrue(reasons.contains { $0.contains("user_id") }, "\(reasons)")
        let retried = try XCTUnwrap(redis.payloads(zset: Keys.retry).first)
        XCTAssertTrue(retried.errorMessage?.contains("temporarily unavailable") == true, "\(retried.errorMessage ?? "")")
    }
}
