import Foundation
import WorkersAppJobs
import WorkersQueue
import WorkersTestServices
import XCTest

/// The privacy purge with several Redis shards (docs/sharding.md): a user's jobs are removed from every shard,
/// each unique lock released on its own shard. Shards are databases 176 (default) and 177 (`b`) of the test
/// Redis, shared with ShardRoutingTests (test classes run one after the other; each flushes them first).
final class ShardPurgeTests: XCTestCase {
    func testThePurgeReachesEveryShard() throws {
        let home = try TestRedis(database: 176)
        let other = try TestRedis(database: 177)
        let map = try ShardMap.from(environment: ["REDIS_SHARDS": "b=\(other.url)", "QUEUE_SHARDS": "beta=b"],
                                    defaultURL: home.url)
        let shards = ShardPools(map: map)
        let client = JobClient(shards: shards)
        let user = UUID().uuidString.lowercased(), stranger = UUID().uuidString.lowercased()
        try client.enqueueMany([NewJob("RewardJob", args: [.string(user)], queue: "alpha"),
                                NewJob("RewardJob", args: [.string(user)], queue: "beta"),
                                NewJob("RewardJob", args: [.string(stranger)], queue: "beta")])
        let mine = try client.enqueueUnique(NewJob("RewardJob", args: [.string(user)], queue: "beta"),
                                            policy: UniquePolicy(for: .seconds(600)), at: Clock.now() + 3600).jid

        let report = try RedisJobPurger(shards: shards).purge(userID: try XCTUnwrap(UUID(uuidString: user)))

        XCTAssertEqual(report.total, 3)
        XCTAssertEqual(try home.int("LLEN", "queue:alpha"), 0)
        XCTAssertEqual(try other.payloads(list: "queue:beta").map { $0.args.first?.stringValue }, [stranger])
        XCTAssertEqual(try other.int("ZCARD", Keys.schedule), 0)
        XCTAssertEqual(try other.int("EXISTS", Keys.uniqueOwner(mine)), 0, "the lock is released on its own shard")
    }
}
