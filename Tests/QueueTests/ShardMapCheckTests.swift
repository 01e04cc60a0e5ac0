import WorkersQueue
import WorkersTestServices
import XCTest

/// `ShardMapCheck` (review M12): a process using another shard map, and jobs waiting on a shard where the map sends
/// no worker, are found on the shard itself (database 20 stands for shard `default`).
final class ShardMapCheckTests: XCTestCase {
    func testAnotherMapInUseAndStrandedJobsAreFoundAndAgreeingMapsAreNot() throws {
        let redis = try TestRedis(database: 179)
        let url = redis.url
        let current = try ShardMap(defaultURL: url, shards: [("b", url)], queues: [("bq", "b")])
        // The same map reached through another URL (passwords and host names differ between processes) agrees.
        let sameElsewhere = try ShardMap(defaultURL: "redis://:secret@localhost:6390/20", shards: [("b", url)], queues: [("bq", "b")])
        let stale = try ShardMap(defaultURL: url, shards: [("b", url)], queues: [])
        XCTAssertEqual(current.digest, sameElsewhere.digest)
        XCTAssertNotEqual(current.digest, stale.digest)
        XCTAssertNotEqual(current.digest, ShardMap(single: try RedisEndpoint(url: url)).digest)

        let connection = try redis.connection()
        XCTAssertEqual(try ShardMapCheck.check(connection, map: current, shard: 0, now: 1_000), ShardMapCheck.Finding())
        XCTAssertTrue(try ShardMapCheck.check(connection, map: sameElsewhere, shard: 0, now: 1_001).isEmpty)

        // A producer with the stale map pushed `bq` here, on the default shard: stranded, and its map is seen.
        try redis.command("SADD", Keys.queues, "bq", "default")
        try redis.command("LPUSH", Keys.queue("bq"), "{}", "{}")
        try redis.command("LPUSH", Keys.queue("default"), "{}")
        _ = try ShardMapCheck.check(connection, map: stale, shard: 0, now: 1_002)
        let finding = try ShardMapCheck.check(connection, map: current, shard: 0, now: 1_003)
        XCTAssertEqual(finding.otherMaps, [stale.digest])
        XCTAssertEqual(finding.stranded, [ShardMapCheck.Stranded(queue: "bq", jobs: 2, mappedTo: "b")])

        // Once the stale process is gone its entry stops counting, and is deleted after the retention.
        XCTAssertEqual(try ShardMapCheck.check(connection, map: current, shard: 0, freshness: 120, now: 1_200).otherMaps, [])
        _ = try ShardMapCheck.check(connection, map: current, shard: 0, now: 1_003 + ShardMapCheck.retention + 1)
        XCTAssertEqual(try redis.command("HKEYS", ShardMapCheck.key).strings, [current.digest])
        // Drained, nothing is stranded.
        try redis.command("DEL", Keys.queue("bq"))
        XCTAssertTrue(try ShardMapCheck.check(connection, map: current, shard: 0, now: 5_000).isEmpty)
    }
}
