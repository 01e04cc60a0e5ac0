import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The fetch script measures each payload (issue 51, review L7): one over the limit goes to dead as a stub — jid,
/// class, queue, size and its first 1 KB — in the same atomic call that takes it off its queue; it is never in an
/// in-flight list nor in the reply, and the jobs around it are fetched as usual.
final class FetchSizeLimitTests: XCTestCase {
    let identity = "size-host:1:abcdef"
    static let twoMiB = 2 << 20

    /// A Sidekiq payload of exactly `bytes` bytes (Ruby's key order: the jid after the args).
    static func payload(bytes: Int, jid: String, className: String = "Record") -> String {
        let frame = #"{"retry":true,"queue":"default","class":"\#(className)","args":[""],"jid":"\#(jid)","created_at":1.5}"#
        let filler = String(repeating: "x", count: bytes - frame.utf8.count)
        return #"{"retry":true,"queue":"default","class":"\#(className)","args":["\#(filler)"],"jid":"\#(jid)","created_at":1.5}"#
    }

    /// The stub `dead` holds for `jid`, parsed.
    private func stub(_ redis: TestRedis, jid: String) throws -> JSONObject {
        let members = try redis.command("ZRANGE", Keys.dead, 0, -1).array?.compactMap(\.bytes) ?? []
        for member in members {
            if let object = try JSONValue.parse(String(decoding: member, as: UTF8.self)).objectValue,
               object["jid"]?.stringValue == jid { return object }
        }
        throw XCTSkip("no dead entry with jid \(jid) among \(members.count)")
    }

    func testAPayloadOverTheLimitGoesToDeadAsAStubAndTheJobsAroundItAreFetched() throws {
        let redis = try TestRedis(database: 166)
        try redis.flush()
        let small1 = #"{"class":"Record","args":["first"],"jid":"aaaaaaaaaaaaaaaaaaaaaaa1"}"#
        let big = Self.payload(bytes: Self.twoMiB, jid: "bbbbbbbbbbbbbbbbbbbbbbb2", className: "Interop::BigJob")
        var hostile = [UInt8](repeating: 0xFF, count: Self.twoMiB)  // not JSON, not UTF-8
        hostile.replaceSubrange(0..<12, with: Array("not json \u{e9}".utf8) + [0xE2, 0x82])  // a character cut short
        let small2 = #"{"class":"Record","args":["last"],"jid":"aaaaaaaaaaaaaaaaaaaaaaa3"}"#
        // Oldest first: RPUSH in this order leaves small1 at the tail, where a fetch starts.
        for payload in [small2, big] { try redis.command("LPUSH", Keys.queue("default"), payload) }
        try redis.command("RPUSH", Keys.queue("default"), small1)
        try redis.command("LPUSH", Keys.queue("default"), hostile)
        let connection = try redis.connection()
        let now = Clock.now()
        let reply = try ReliableQueue.fetch(connection, identity: identity, queues: ["default"], limit: 10, now: now)

        XCTAssertEqual(reply.jobs.map { String(decoding: $0.raw, as: UTF8.self) }, [small1, small2],
                       "the jobs around the oversized ones are fetched, in order")
        XCTAssertEqual(reply.buried.map(\.queue), ["default", "default"])
        XCTAssertEqual(reply.buried.map(\.bytes), [Int64(big.utf8.count), Int64(hostile.count)])
        XCTAssertEqual(reply.buried.first?.jid, "bbbbbbbbbbbbbbbbbbbbbbb2")
        let working = try redis.command("LRANGE", Keys.working(queue: "default", identity: identity), 0, -1).strings
        XCTAssertEqual(working, [small2, small1], "only the small jobs are in flight")
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("default")), 0, "the oversized ones left their queue too")

        let named = try stub(redis, jid: "bbbbbbbbbbbbbbbbbbbbbbb2")
        XCTAssertEqual(named["class"]?.stringValue, "Interop::BigJob")
        XCTAssertEqual(named["queue"]?.stringValue, "default")
        XCTAssertEqual(named["error_class"]?.stringValue, OversizedJob.errorClass)
        XCTAssertEqual(named["error_message"]?.stringValue, OversizedJob.message(bytes: big.utf8.count, limit: JobClient.maxPayloadBytes))
        XCTAssertEqual(named["payload_bytes"], .int(Int64(big.utf8.count)))
        XCTAssertEqual(named["payload_head"]?.stringValue, String(big.prefix(1024)))
        XCTAssertEqual(named["retry"], .bool(false))
        XCTAssertEqual(named["retry_count"], .int(0))
        XCTAssertNil(named["args"], "no args: no retry path can run the stub")
        XCTAssertEqual(named["failed_at"]?.doubleValue ?? 0, now, accuracy: 0.01)

        // The hostile one: no jid or class to read, still a stub, with a jid of its own and a valid UTF-8 head.
        let madeUp = try XCTUnwrap(reply.buried.last?.jid)
        XCTAssertEqual(madeUp.count, 24)
        let unnamed = try stub(redis, jid: madeUp)
        XCTAssertEqual(unnamed["class"]?.stringValue, UnreadableJob.className)
        XCTAssertEqual(unnamed["payload_bytes"], .int(Int64(hostile.count)))
        XCTAssertEqual(unnamed["payload_head"]?.stringValue, String(decoding: hostile.prefix(1024), as: UTF8.self))
        XCTAssertTrue(unnamed["payload_head"]?.stringValue?.hasPrefix("not json \u{e9}\u{FFFD}\u{FFFD}") == true)

        XCTAssertEqual(try redis.failed(), 2, "each counted failed, as a death is")
        XCTAssertEqual(try redis.processed(), 2)
        XCTAssertEqual(try redis.int("GET", Keys.statFailed(day: Clock.utcDay(now))), 2)
    }

    func testAPayloadOfExactlyTheLimitIsFetchedAndOneByteMoreIsNot() throws {
        let redis = try TestRedis(database: 166)
        try redis.flush()
        let limit = JobClient.maxPayloadBytes
        let exact = Self.payload(bytes: limit, jid: "cccccccccccccccccccccccc")
        let over = Self.payload(bytes: limit + 1, jid: "dddddddddddddddddddddddd")
        XCTAssertEqual(exact.utf8.count, limit)
        try redis.command("LPUSH", Keys.queue("default"), exact)
        try redis.command("LPUSH", Keys.queue("default"), over)
        let reply = try ReliableQueue.fetch(try redis.connection(), identity: identity, queues: ["default"], limit: 10)
        XCTAssertEqual(reply.jobs.map(\.raw.count), [limit])
        XCTAssertEqual(reply.buried.map(\.jid), ["dddddddddddddddddddddddd"])
        // A configured limit is the script's argument.
        try redis.command("LPUSH", Keys.queue("default"), exact)
        let lower = try ReliableQueue.fetch(try redis.connection(), identity: identity, queues: ["default"], limit: 10,
                                            limits: FetchLimits(maxPayloadBytes: limit - 1))
        XCTAssertEqual(lower.jobs.count, 0)
        XCTAssertEqual(lower.buried.map(\.jid), ["cccccccccccccccccccccccc"])
    }

    /// The admin behind `workerctl jobs dead` / `jobs show` and the dashboard reads the stub; its retry is refused
    /// (no args: not a job), so the stub never runs.
    func testTheStubIsReadableByTheAdminAndNotRetried() throws {
        let redis = try TestRedis(database: 166)
        try redis.flush()
        let jid = "eeeeeeeeeeeeeeeeeeeeeeee"
        try redis.command("LPUSH", Keys.queue("critical"), Self.payload(bytes: Self.twoMiB, jid: jid))
        let connection = try redis.connection()
        _ = try ReliableQueue.fetch(connection, identity: identity, queues: ["critical"], limit: 5)
        let admin = JobAdmin(connection: connection)
        let page = try admin.list(.dead, page: try PageRequest())
        XCTAssertEqual(page.items.count, 1)
        let record = try admin.findOne(jid: jid)
        XCTAssertEqual(record.state, .dead)
        XCTAssertEqual(record.className, "Record")
        XCTAssertEqual(record.queue, "critical")
        XCTAssertEqual(record.item?["error_class"]?.stringValue, OversizedJob.errorClass)
        XCTAssertThrowsError(try admin.perform(.retry, on: record), "a stub has no payload to run")
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("critical")), 0)
    }

    /// The stub a blocking wait's job gets (built in Swift) has the fields the script's has, for named, unnamed,
    /// hostile and cut-UTF-8 payloads; only `failed_at`'s form and a made-up jid differ.
    func testTheSwiftStubMatchesTheScriptStub() throws {
        let redis = try TestRedis(database: 166)
        try redis.flush()
        let limit = 1024
        var generator = SystemRandomNumberGenerator()
        var payloads: [[UInt8]] = [
            Array(Self.payload(bytes: 1500, jid: "ffffffffffffffffffffffff", className: "A::B").utf8),
            Array(Self.payload(bytes: 9000, jid: "ffffffffffffffffffffff01", className: "Far").utf8),  // jid in the tail
            Array((#"{"class":"Sp\#u{e9}cial","args":["\#(String(repeating: "\u{e9}", count: 700))"],"jid":"j\"1"}"#).utf8),
            Array(("{\"jid\" : \"spaced-1\", \"class\":\t\"T\", \"args\":[\"" + String(repeating: "\u{1F600}", count: 400) + "\"]}").utf8),
        ]
        for _ in 0..<30 { payloads.append((0..<Int.random(in: 1025...3000, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }) }
        for payload in payloads { try redis.command("RPUSH", Keys.queue("default"), payload) }
        let reply = try ReliableQueue.fetch(try redis.connection(), identity: identity, queues: ["default"],
                                            limit: payloads.count, limits: FetchLimits(maxPayloadBytes: limit))
        XCTAssertEqual(reply.buried.count, payloads.count)
        let stubs = try redis.command("ZRANGE", Keys.dead, 0, -1).array?.compactMap(\.bytes) ?? []
        var scriptStubs: [String: JSONObject] = [:]
        for member in stubs {
            let object = try XCTUnwrap(try JSONValue.parse(String(decoding: member, as: UTF8.self)).objectValue)
            scriptStubs[try XCTUnwrap(object["jid"]?.stringValue)] = object
        }
        for (payload, buried) in zip(payloads.reversed(), reply.buried) {  // the oldest (the list's tail) first
            let script = try XCTUnwrap(scriptStubs[buried.jid])
            let swift = try XCTUnwrap(try JSONValue.parse(OversizedJob.deadEntry(raw: payload, queue: "default", limit: limit).entry).objectValue)
            for key in ["retry", "queue", "class", "error_class", "error_message", "retry_count", "payload_bytes", "payload_head"] {
                XCTAssertEqual(script[key], swift[key], "\(key) of a payload of \(payload.count) bytes")
            }
            if let jid = OversizedJob.jid(in: payload) { XCTAssertEqual(script["jid"], .string(jid)) }
            XCTAssertEqual(Set(script.map(\.key)), Set(swift.map(\.key)))
        }
        XCTAssertEqual(scriptStubs["ffffffffffffffffffffff01"]?["class"]?.stringValue, "Far")
        XCTAssertEqual(scriptStubs["spaced-1"]?["class"]?.stringValue, "T")
    }

    /// A batch job buried at fetch is counted dead for its batch (its `complete` callback fires), as any death is.
    func testABuriedBatchJobCountsDeadForItsBatch() throws {
        let redis = try TestRedis(database: 166)
        try redis.flush()
        let connection = try redis.connection()
        let batch = try Batches.create(connection, NewBatch(jobs: [NewJob("Noop", args: [.string(String(repeating: "q", count: 2000))])],
                                                            onComplete: BatchCallback("Done", queue: "cb")))
        let reply = try ReliableQueue.fetch(connection, identity: identity, queues: ["default"], limit: 5,
                                            limits: FetchLimits(maxPayloadBytes: 1024))
        XCTAssertEqual(reply.buried.count, 1)
        let summary = try XCTUnwrap(try BatchAdmin.summary(connection, bid: batch.bid))
        XCTAssertEqual([summary.total, summary.pending, summary.dead], [1, 1, 1])
        XCTAssertEqual(try redis.int("LLEN", "queue:cb"), 1, "complete fired")
    }
}
