import Foundation
import WorkersQueue
import WorkersTestServices
import Workers
import XCTest

/// Every kind of bad input ends in `dead` at once with a readable reason, is never retried, and
/// never takes the worker down.
final class BadInputTests: XCTestCase {
    func testEveryBadPayloadGoesToDeadWithItsReason() throws {
        let redis = try TestRedis(database: 3)
        let harness = WorkerHarness(redis: redis)
        let cases: [(raw: String, reason: String)] = [
            ("this is {not json", "payload is not JSON"),
            (#"["an","array"]"#, "payload must be a JSON object, got array"),
            (#"{"args":[]}"#, #"payload has no "class""#),
            (#"{"class":42,"args":[],"jid":"producer0000000000000001"}"#, #"payload "class" is invalid: expected a string, got integer"#),
            (#"{"class":"","args":[]}"#, #"payload "class" is invalid: empty string"#),
            (#"{"class":"Noop"}"#, #"payload has no "args""#),
            (#"{"class":"Noop","args":{"a":1}}"#, #"payload "args" must be an array, got object"#),
            (#"{"class":"NoSuchJob","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaa1","retry":true}"#, "unknown job class 'NoSuchJob'"),
            (#"{"class":"Sleep","args":["ten"],"jid":"aaaaaaaaaaaaaaaaaaaaaaa2","retry":true}"#, "arguments do not fit Sleep: args[0]"),
            (#"{"class":"Sleep","args":[-5],"jid":"aaaaaaaaaaaaaaaaaaaaaaa3","retry":true}"#, "milliseconds must be within 0...3600000, got -5"),
            (#"{"class":"Sleep","args":[1,2],"jid":"aaaaaaaaaaaaaaaaaaaaaaa4","retry":true}"#, "arguments do not fit Sleep"),
            (#"{"class":"Fail","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaa5","retry":true}"#, "expected exactly one argument, got 0"),
            ("{\"class\":\"Noop\",\"args\":[\"\u{01}\"],\"jid\":\"producer0000000000000002\"}", "payload is not JSON"),
        ]
        for (raw, _) in cases { try redis.command("LPUSH", "queue:default", raw) }
        try redis.command("LPUSH", "queue:default", [UInt8]([0x7b, 0xff, 0xfe, 0x7d]))  // not UTF-8
        try redis.client.enqueue(NewJob("Record", args: ["still alive"]))

        // Grace 0: a class no live process knows goes to dead at once (RollingDeployTests covers the give-back).
        var configuration = harness.configuration(concurrency: 2)
        configuration.unknownClassGrace = .zero
        let process = try harness.start(configuration)
        defer { process.shutdown() }
        XCTAssertTrue(eventually { harness.recorder.all == ["still alive"] })
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == cases.count + 1 })
        let dead = try redis.payloads(zset: Keys.dead)
        let messages = dead.compactMap(\.errorMessage)
        for (raw, reason) in cases {
            XCTAssertTrue(messages.contains { $0.contains(reason) }, "no dead entry says '\(reason)' for \(raw); got \(messages)")
        }
        XCTAssertTrue(messages.contains("payload is not valid UTF-8"), "\(messages)")
        // A payload that does not parse keeps its producer's jid when the bytes hold one (`jobs show JID` finds it).
        let deadJids = Set(dead.compactMap(\.jid))
        XCTAssertTrue(deadJids.isSuperset(of: ["producer0000000000000001", "producer0000000000000002"]), "\(deadJids)")
        // Unreadable payloads are kept, readable, with the original text.
        XCTAssertTrue(dead.contains { $0.fields["raw_payload"]?.stringValue == "this is {not json" })
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry), 0)
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty })
        XCTAssertTrue(process.processedCount >= cases.count + 2)
    }
}
