import Foundation
import Queue
import TestSupport
import XCTest

@testable import Workers

/// With several shards, each heartbeat reads its own shard's `cancels`: a beat of a shard without cancels does not
/// hide another shard's (mutation sample 2026-12-07, survivor E5: the process-wide flag must follow every shard's
/// set, not the one that beat last). Two test Redis databases stand for shards 0 and 1 (80 and 83).
final class RunSteeringShardTests: XCTestCase {
    func testACancelOnOneShardOutlivesABeatOfAnotherShardWithoutCancels() throws {
        let shard0 = try TestRedis(database: 80)
        let shard1 = try TestRedis(database: 83)
        try shard0.flush()
        try shard1.flush()
        defer { try? shard0.flush(); try? shard1.flush() }
        let jid = "cancelacross000000000001"
        try shard0.command("ZADD", JobCancels.set, Clock.now() + 3600, jid)
        let payload = try JobClient.payload(for: NewJob("Noop"), jid: jid, createdAt: Clock.now(), enqueuedAt: Clock.now())

        let steering = RunSteering()
        try steering.beat(shard0.connection(), shard: 0, executions: [], now: Clock.now())
        XCTAssertTrue(steering.isCancelled(payload, shard: 0))
        try steering.beat(shard1.connection(), shard: 1, executions: [], now: Clock.now())
        XCTAssertTrue(steering.isCancelled(payload, shard: 0), "shard 1's beat without cancels keeps shard 0's")
        XCTAssertFalse(steering.isCancelled(payload, shard: 1), "a jid is looked up on the shard its job came from")
        try shard0.command("ZREM", JobCancels.set, jid)
        try steering.beat(shard0.connection(), shard: 0, executions: [], now: Clock.now())
        XCTAssertFalse(steering.isCancelled(payload, shard: 0), "withdrawn on its shard")
    }
}
