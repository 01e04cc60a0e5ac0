import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The shard map (docs/sharding.md) and producers' routing by queue. Two shards are two databases
/// of the test Redis (99 = default, 100 = `b`): as far as the keys go, the same as two servers.
final class ShardRoutingTests: XCTestCase {
    var home: TestRedis!
    var other: TestRedis!
    var map: ShardMap!

    override func setUpWithError() throws {
        home = try TestRedis(database: 99)
        other = try TestRedis(database: 100)
        map = try ShardMap.from(environment: ["REDIS_SHARDS": "b=\(other.url)", "QUEUE_SHARDS": "beta=b,gamma=default"],
                                defaultURL: home.url)
    }

    // MARK: The map

    func testEnvironmentFormMapsQueuesAndTheRestGoesToTheDefaultShard() throws {
        XCTAssertEqual(map.shards.map(\.name), ["default", "b"])
        XCTAssertEqual(map.shardIndex(forQueue: "beta"), 1)
        XCTAssertEqual(map.shardIndex(forQueue: "gamma"), 0)
        XCTAssertEqual(map.shardIndex(forQueue: "never-mapped"), 0)
        XCTAssertFalse(map.isSingle)
        let groups = map.group(queues: ["alpha", "beta", "gamma"])
        XCTAssertEqual(groups.map(\.shard), [0, 1])
        XCTAssertEqual(groups.map(\.queues), [["alpha", "gamma"], ["beta"]])
        XCTAssertTrue(try ShardMap.from(environment: [:], defaultURL: home.url).isSingle)
    }

    func testASentinelURLWithCommasIsOneShard() throws {
        let map = try ShardMap.from(environment: [
            "REDIS_SHARDS": "s1=redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/2, s2=redis://127.0.0.1:6379/3",
            "QUEUE_SHARDS": "a=s1,b=s2",
        ], defaultURL: "redis://127.0.0.1:6379/0")
        XCTAssertEqual(map.shards.map(\.name), ["default", "s1", "s2"])
        XCTAssertEqual(map.shards[1].endpoint.sentinel?.masterName, "mymaster")
        XCTAssertEqual(map.shards[1].endpoint.sentinel?.sentinels.count, 2)
        XCTAssertEqual(map.shards[1].endpoint.database, 2)
        XCTAssertEqual(map.shards[2].endpoint.database, 3)
    }

    func testBadMapsAreRefusedWithTheReason() {
        func refused(_ environment: [String: String], _ fragment: String, line: UInt = #line) {
            XCTAssertThrowsError(try ShardMap.from(environment: environment, defaultURL: "redis://127.0.0.1:6379/0"), line: line) { error in
                guard case ShardMapError.invalid(let why) = error else { return XCTFail("expected ShardMapError.invalid, got \(error)", line: line) }
                XCTAssertTrue(why.contains(fragment), "\(why) should say \(fragment)", line: line)
            }
        }
        refused(["QUEUE_SHARDS": "beta=nowhere"], "not configured")
        refused(["REDIS_SHARDS": "b=redis://127.0.0.1/1", "QUEUE_SHARDS": "beta=b,beta=default"], "mapped twice")
        refused(["REDIS_SHARDS": "default=redis://127.0.0.1/1"], "named twice")
        refused(["REDIS_SHARDS": "b=http://127.0.0.1/1"], "shard 'b'")
        refused(["REDIS_SHARDS": "just-a-url"], "not NAME=VALUE")
    }

    // MARK: Producers

    func testEnqueueWritesEachJobOnlyToItsQueuesShard() throws {
        let client = JobClient(shards: ShardPools(map: map))
        let jids = try client.enqueueMany([NewJob("Noop", queue: "alpha"), NewJob("Noop", queue: "beta"),
                                           NewJob("Noop", queue: "beta")])
        XCTAssertEqual(jids.count, 3)
        XCTAssertEqual(try home.int("LLEN", "queue:alpha"), 1)
        XCTAssertEqual(try other.int("LLEN", "queue:beta"), 2)
        XCTAssertEqual(try home.command("KEYS", "*").strings.sorted(), ["queue:alpha", "queues"])
        XCTAssertEqual(try other.command("KEYS", "*").strings.sorted(), ["queue:beta", "queues"])
        XCTAssertEqual(try home.command("SMEMBERS", "queues").strings, ["alpha"])
        XCTAssertEqual(try other.command("SMEMBERS", "queues").strings, ["beta"])

        // Scheduled jobs wait in their shard's `schedule`, where that shard's pollers move them.
        let later = Clock.now() + 3600
        try client.enqueueMany([NewJob("Noop", queue: "alpha"), NewJob("Noop", queue: "beta")], at: [later, later])
        XCTAssertEqual(try home.payloads(zset: Keys.schedule).map(\.queue), ["alpha"])
        XCTAssertEqual(try other.payloads(zset: Keys.schedule).map(\.queue), ["beta"])
    }

    func testUniqueLockLivesOnTheQueuesShard() throws {
        let client = JobClient(shards: ShardPools(map: map))
        let policy = UniquePolicy(for: .seconds(60))
        guard case .enqueued = try client.enqueueUnique(NewJob("Noop", args: [1], queue: "beta"), policy: policy) else {
            return XCTFail("the first push must enqueue")
        }
        guard case .duplicate = try client.enqueueUnique(NewJob("Noop", args: [1], queue: "beta"), policy: policy) else {
            return XCTFail("the second push of the same job must be a duplicate")
        }
        XCTAssertEqual(try other.int("LLEN", "queue:beta"), 1)
        XCTAssertFalse(try other.command("KEYS", "unique*").strings.isEmpty, "the lock is on shard b")
        XCTAssertEqual(try home.command("KEYS", "*").strings, [], "nothing on the default shard")
    }

    func testABatchMustLiveOnOneShard() throws {
        let client = JobClient(shards: ShardPools(map: map))
        XCTAssertThrowsError(try client.createBatch(NewBatch(jobs: [NewJob("Noop", queue: "alpha"), NewJob("Noop", queue: "beta")]))) { error in
            XCTAssertEqual(error as? BatchError, .spansShards(["default", "b"]))
        }
        XCTAssertEqual(try home.command("KEYS", "*").strings, [])
        XCTAssertEqual(try other.command("KEYS", "*").strings, [])
        let created = try client.createBatch(NewBatch(jobs: [NewJob("Noop", queue: "beta")],
                                                      onComplete: BatchCallback("Noop", queue: "beta")))
        XCTAssertEqual(try other.int("EXISTS", Keys.batch(created.bid)), 1)
        XCTAssertEqual(try home.command("KEYS", "*").strings, [])
    }

    func testOneShardMapTakesTheSinglePoolPath() throws {
        let single = JobClient(shards: ShardPools(map: ShardMap(single: try RedisEndpoint(url: home.url))))
        XCTAssertNil(single.shards, "one shard: no routing at all")
        try single.enqueue(NewJob("Noop", queue: "beta"))
        XCTAssertEqual(try home.int("LLEN", "queue:beta"), 1)
    }
}
