import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The dead set is bounded by bytes as well as by count and age (`DeadSetLimits.maxBytes`, docs/redis-full.md): the
/// trim removes the oldest entries until the set's Redis memory is within the limit, and leaves a set already within
/// it alone. Redis database 31.
final class DeadSetBytesTests: XCTestCase {
    func testTheDeadSetIsTrimmedOldestFirstToItsByteLimit() throws {
        let redis = try TestRedis(database: 185)
        try redis.flush()
        defer { try? redis.flush() }
        let entry = String(repeating: "d", count: 2000)
        for start in stride(from: 0, to: 2000, by: 500) {
            var command: [any RedisArgument] = ["ZADD", Keys.dead]
            for index in start..<(start + 500) { command += [Double(index), "{\"jid\":\"\(index)\",\"pad\":\"\(entry)\"}"] }
            try redis.connection().send(command).checked()
        }
        let before = try redis.int("MEMORY", "USAGE", Keys.dead, "SAMPLES", 0)
        XCTAssertGreaterThan(before, 4_000_000)

        XCTAssertEqual(try ReliableQueue.trimDead(redis.connection(), maxBytes: before * 2), 0, "within the limit: untouched")
        let removed = try ReliableQueue.trimDead(redis.connection(), maxBytes: 1 << 20)
        let after = try redis.int("MEMORY", "USAGE", Keys.dead, "SAMPLES", 0)
        // The trim stops on Redis's sampled estimate (`MEMORY USAGE … SAMPLES 32`, O(32) per step), this reads the exact
        // size (SAMPLES 0): the two may differ by a little; one CI run saw 1,049,928 against 1,048,576. Allowed: 1 %.
        XCTAssertLessThanOrEqual(after, (1 << 20) + (1 << 20) / 100, "within 1 MiB (and the estimate's error) after the trim")
        XCTAssertGreaterThan(after, 1 << 19, "not emptied: about the share that was over went")
        XCTAssertEqual(try redis.int("ZCARD", Keys.dead), 2000 - removed)
        // The newest stay: the lowest score left is the removed count (scores 0…1999 in order).
        let lowest = try redis.command("ZRANGE", Keys.dead, 0, 0, "WITHSCORES").array?.last?.string
        XCTAssertEqual(lowest.flatMap(Double.init), Double(removed))
        XCTAssertEqual(try ReliableQueue.trimDead(redis.connection(), maxBytes: 0), 0, "0: no byte limit")
    }
}
