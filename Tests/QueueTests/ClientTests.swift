import WorkersQueue
import WorkersTestServices
import XCTest

final class ClientTests: XCTestCase {
    var redis: TestRedis!

    override func setUpWithError() throws { redis = try TestRedis(database: 1) }

    func testScriptIdsAreTheSHA1RedisComputes() throws {
        let long = (0..<40).map { "redis.call('INCR', KEYS[1]) -- line \($0)" }.joined(separator: "\n") + "\nreturn 0"
        for source in ["return 1", "return redis.call('GET', KEYS[1])", long] {
            let script = RedisScript(source)
            XCTAssertEqual(try redis.command("SCRIPT", "LOAD", source).string, script.sha1)
        }
    }

    func testEnqueueWritesSidekiqPayload() throws {
        let jid = try redis.client.enqueue(NewJob("HardJob", args: [1, "a/b", .object(["k": "v"])], queue: "critical"))
        XCTAssertTrue(Identifiers.isValidJID(jid))
        XCTAssertEqual(try redis.command("SMEMBERS", Keys.queues).strings, ["critical"])
        let raw = try XCTUnwrap(redis.command("LINDEX", "queue:critical", 0).string)
        XCTAssertTrue(raw.hasPrefix(#"{"retry":true,"queue":"critical","class":"HardJob","args":[1,"a/b",{"k":"v"}],"jid":"\#(jid)","created_at":"#), raw)
        XCTAssertFalse(raw.contains(" "))
        XCTAssertFalse(raw.contains("\\/"))
        let payload = try JobPayload(parsing: raw)
        XCTAssertEqual(payload.createdAt, payload.enqueuedAt)
        XCTAssertNotNil(payload.enqueuedAt)
    }

    func testBulkEnqueueIsOnePushInOrder() throws {
        let jobs = (1...5).map { NewJob("Bulk", args: [.int(Int64($0))], queue: "bulk") }
        let jids = try redis.client.enqueueMany(jobs)
        XCTAssertEqual(Set(jids).count, 5)
        // The tail is the next to run: job 1 first.
        let tailFirst = try redis.payloads(list: "queue:bulk").reversed().map { $0.args[0] }
        XCTAssertEqual(tailFirst, [1, 2, 3, 4, 5])
    }

    func testScheduledJobsGoToTheScheduleWithoutEnqueuedAt() throws {
        let at = Clock.now() + 3600
        let jid = try redis.client.enqueue(NewJob("Later", retry: 3), at: at)
        let members = try redis.command("ZRANGE", Keys.schedule, 0, -1, "WITHSCORES").strings
        XCTAssertEqual(members.count, 2)
        let payload = try JobPayload(parsing: members[0])
        XCTAssertEqual(payload.jid, jid)
        XCTAssertNil(payload.enqueuedAt)
        XCTAssertNil(payload.fields["at"])
        XCTAssertEqual(payload.retry, .limit(3))
        XCTAssertEqual(try XCTUnwrap(Double(members[1])), at, accuracy: 0.001)
        XCTAssertEqual(try redis.int("EXISTS", "queue:default"), 0)
    }

    func testPastTimeIsPushedNow() throws {
        try redis.client.enqueue(NewJob("Now"), at: Clock.now() - 10)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 1)
        XCTAssertEqual(try redis.int("ZCARD", Keys.schedule), 0)
    }

    func testBadProducerInputIsRefusedBeforeWriting() throws {
        XCTAssertThrowsError(try redis.client.enqueue(NewJob("")))
        XCTAssertThrowsError(try redis.client.enqueue(NewJob("X", queue: "")))
        XCTAssertThrowsError(try redis.client.enqueue(NewJob("X", queue: "a b")))
        XCTAssertThrowsError(try redis.client.enqueue(NewJob("X", retry: .int(-1))))
        XCTAssertThrowsError(try redis.client.enqueue(NewJob("X", retry: "yes")))
        XCTAssertThrowsError(try redis.client.enqueue(NewJob("X"), at: .nan))
        XCTAssertEqual(try redis.int("DBSIZE"), 0)
    }

    func testPipelineAndTransaction() throws {
        let connection = try redis.connection()
        let replies = try connection.pipeline([["SET", "a", "1"], ["INCR", "a"], ["GET", "a"], ["NOSUCHCOMMAND"]])
        XCTAssertEqual(replies[1], .integer(2))
        XCTAssertEqual(replies[2].string, "2")
        if case .error = replies[3] {} else { XCTFail("expected an error reply, got \(replies[3])") }
        let results = try connection.transaction([["INCR", "a"], ["INCR", "a"]])
        XCTAssertEqual(results, [.integer(3), .integer(4)])
    }

    func testBinaryArgumentsRoundTrip() throws {
        let connection = try redis.connection()
        let bytes: [UInt8] = [0, 0xff, 0xfe, 10, 13, 0x22]
        try connection.command("SET", "bin", bytes)
        XCTAssertEqual(try connection.command("GET", "bin").bytes, bytes)
    }
}
