import Foundation
import WorkersHTTP
@testable import WorkersAppJobs
import Logging
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// The receipt jobs inside a real worker process: Redis (database 20), PostgreSQL, the Apple fake.
final class ReceiptsWorkerTests: ReceiptsTestCase {
    var process: WorkerProcess?

    override func makeFixture() throws -> JobsFixture {
        try JobsFixture(prefix: "receipts_test", redis: 20, fakes: .own([.apple]))
    }

    override func tearDown() {
        process?.shutdown()
        super.tearDown()
    }

    func start() throws {
        var registry = JobRegistry()
        ReceiptJobs.register(into: &registry, configuration: appleConfiguration(),
                             http: HTTPClient(configuration: HTTPClientConfiguration(userAgent: "receipts-test")))
        process = try TestWorker.start(redis: redis, registry: registry, database: fixture.jobDatabase, concurrency: 4)
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

    /// The store-call cap (`StoreCallLimits`, docs/limiters.md) through the real runner: with all 20 Apple slots held
    /// (leases of other processes), a validation is rescheduled — `overrated`, no failure fields, no effect — and once
    /// the slots come free it runs and applies.
    func testValidationOverTheStoreCallCapWaitsWithoutFailingAndRunsOnceASlotIsFree() throws {
        let user = try db.newUser()
        let expires = String(Int64(Date().addingTimeInterval(20 * 86400).timeIntervalSince1970 * 1000))
        try fakes.admin(.apple, "POST", "apple/receipts", json: [
            "receipt-data": "r-cap", "status": 0,
            "latest_receipt_info": [["product_id": ReceiptsDatabase.appleProduct, "transaction_id": "7000101",
                                     "original_transaction_id": "7000101", "expires_date_ms": expires]]])
        let farFuture = (Clock.now() + 3600) * 1000
        for holder in 0..<StoreCallLimits.maxConcurrent {
            try redis.command("ZADD", "limit:store-calls:apple", farFuture, "other-process-\(holder)")
        }
        let jid = try redis.client.enqueue(NewJob("ValidateReceiptJob", args: try args(user: user, receipt: "r-cap", transaction: "7000101")))
        try start()

        XCTAssertTrue(try eventually { try redis.payloads(zset: Keys.schedule).contains { $0.jid == jid } })
        let waiting = try XCTUnwrap(try redis.payloads(zset: Keys.schedule).first { $0.jid == jid })
        XCTAssertEqual(waiting.fields["overrated"]?.intValue, 1)
        XCTAssertNil(waiting.fields["retry_count"])
        XCTAssertNil(waiting.fields["error_message"])
        XCTAssertEqual(try db.userStatus(user), "free", "no effect while over the cap")
        XCTAssertEqual(try redis.failed(), 0)

        try redis.command("DEL", "limit:store-calls:apple")
        XCTAssertTrue(try eventually(timeout: 60) { try db.userStatus(user) == "premium" })
        XCTAssertEqual(try db.events(key: "7000101"), ["subscription_started"])
        XCTAssertEqual(try redis.failed(), 0)
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0)
    }
}
