import Foundation
import WorkersQueue
import WorkersTestServices
@testable import Workers
import WorkersTestSupport
import XCTest

/// A worker never runs a payload over its fetch size limit, whichever way it was fetched — the fetch script (which
/// buries it in Redis) or a blocking wait (`BLMOVE`, which hands it over whole: the fetcher settles it as dead) —
/// and the jobs after it run. The payloads here are `Record` jobs a worker would run if they got through.
final class FetchSizeLimitWorkerTests: XCTestCase {
    static let twoMiB = 2 << 20

    /// A `Record` payload of exactly `bytes` bytes whose argument starts with `label`.
    static func record(_ label: String, bytes: Int, jid: String) -> String {
        let frame = #"{"retry":true,"queue":"default","class":"Record","args":["\#(label)"],"jid":"\#(jid)"}"#
        let filler = String(repeating: "x", count: bytes - frame.utf8.count)
        return #"{"retry":true,"queue":"default","class":"Record","args":["\#(label)\#(filler)"],"jid":"\#(jid)"}"#
    }

    /// The dead set's entries as JSON objects (a stub has no `args`: it is not a `JobPayload`).
    private func stubs(_ redis: TestRedis) throws -> [JSONObject] {
        try (redis.command("ZRANGE", Keys.dead, 0, -1).array ?? []).compactMap(\.bytes).compactMap {
            try JSONValue.parse(String(decoding: $0, as: UTF8.self)).objectValue
        }
    }

    /// Two queues served: no blocking wait, every job comes through the fetch script, which buries the oversized
    /// ones. (`FetchSizeLimitTests` hold the script alone; the fetcher's own check stands behind it, so this fails
    /// only with both broken.)
    func testAWorkerNeverRunsAnOversizedPayloadButRunsOneOfExactlyTheLimitAndTheJobAfter() throws {
        let redis = try TestRedis(database: 167)
        try redis.flush()
        let harness = WorkerHarness(redis: redis)
        try redis.command("LPUSH", Keys.queue("default"), Self.record("big", bytes: Self.twoMiB, jid: "aaaaaaaaaaaaaaaaaaaaaab1"))
        try redis.command("LPUSH", Keys.queue("default"), [UInt8](repeating: 0xFE, count: Self.twoMiB))  // not JSON
        let exact = Self.record("exact", bytes: JobClient.maxPayloadBytes, jid: "aaaaaaaaaaaaaaaaaaaaaab2")
        try redis.command("LPUSH", Keys.queue("default"), exact)
        try redis.client.enqueue(NewJob("Record", args: ["after"]))
        let process = try harness.start(harness.configuration(concurrency: 2, queues: [QueueWeight(name: "default"),
                                                                                      QueueWeight(name: "other")]))
        defer { process.shutdown() }
        XCTAssertTrue(eventually { harness.recorder.all.count == 2 })
        XCTAssertEqual(Set(harness.recorder.all.map { String($0.prefix(5)) }), ["exact", "after"],
                       "the payload of exactly the limit and the job after the oversized ones ran; those did not")
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 2 })
        XCTAssertTrue(try stubs(redis).contains { $0["jid"]?.stringValue == "aaaaaaaaaaaaaaaaaaaaaab1" })
        XCTAssertEqual(Set(try stubs(redis).compactMap { $0["error_class"]?.stringValue }), [OversizedJob.errorClass])
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty })
    }

    /// One queue served and drained: the fetcher waits in `BLMOVE`, which hands the next push over whole. The
    /// fetcher settles it as dead with the same stub; the job after it runs.
    func testAnOversizedPayloadABlockingWaitBroughtGoesToDeadAndTheJobAfterItRuns() throws {
        let redis = try TestRedis(database: 167)
        try redis.flush()
        let harness = WorkerHarness(redis: redis)
        var configuration = harness.configuration(concurrency: 2)
        configuration.blockingFetchTimeout = .seconds(3)  // the wait outlasts the test's push, not the test
        let process = try harness.start(configuration)
        defer { process.shutdown() }
        XCTAssertTrue(try eventually { try redis.clientsWaitingInBLMOVE() >= 1 })
        try redis.command("LPUSH", Keys.queue("default"), Self.record("big", bytes: Self.twoMiB, jid: "aaaaaaaaaaaaaaaaaaaaaab3"))
        XCTAssertTrue(try eventually { try redis.int("ZCARD", Keys.dead) == 1 })
        try redis.client.enqueue(NewJob("Record", args: ["after"]))
        XCTAssertTrue(eventually { harness.recorder.all == ["after"] })
        let stub = try XCTUnwrap(try stubs(redis).first)
        XCTAssertEqual(stub["jid"]?.stringValue, "aaaaaaaaaaaaaaaaaaaaaab3")
        XCTAssertEqual(stub["error_class"]?.stringValue, OversizedJob.errorClass)
        XCTAssertEqual(stub["payload_bytes"], .int(Int64(Self.twoMiB)))
        XCTAssertNil(stub["args"])
        XCTAssertTrue(try eventually { try redis.failed() == 1 })
        XCTAssertTrue(try eventually { try redis.workingKeys().isEmpty })
    }

    /// The split itself: jobs within the limit kept in order, the others dead settlements counted as a death.
    func testOversizedWaitsSplitKeepsOrderAndSettlesTheOthersAsDead() {
        let small = FetchedJob(queue: "q", raw: Array(#"{"class":"A","args":[]}"#.utf8), workingKey: "w")
        let big = FetchedJob(queue: "q", raw: Array(Self.record("b", bytes: 5000, jid: "aaaaaaaaaaaaaaaaaaaaaab4").utf8), workingKey: "w")
        let split = OversizedWaits.split([small, big, small], limit: 4999)
        XCTAssertEqual(split.run.map(\.raw), [small.raw, small.raw])
        XCTAssertEqual(split.buried.map(\.jid), ["aaaaaaaaaaaaaaaaaaaaaab4"])
        XCTAssertEqual(split.buried.first?.item.counts, RunCounts([.processed, .failed]))
        XCTAssertEqual(split.buried.first?.item.job.uniqueJid, "aaaaaaaaaaaaaaaaaaaaaab4")
        guard case .dead(let payload)? = split.buried.first?.item.settlement else { return XCTFail("not dead") }
        XCTAssertTrue(payload.contains(#""error_class":"PayloadTooLarge""#))
        let none = OversizedWaits.split([small], limit: small.raw.count)
        XCTAssertTrue(none.buried.isEmpty && none.run.count == 1, "a job of exactly the limit is kept")
    }
}
