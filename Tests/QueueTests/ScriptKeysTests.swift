import WorkersQueue
import WorkersTestServices
import XCTest

/// A Lua script names a key only through `ScriptKeys`: its fixed keys arrive in `KEYS[]` after the caller's, bound to
/// their locals in order, and a key it derives is byte for byte the key type's (`Keys`), whatever the name holds.
/// Writes nothing (Redis database 63, shared with KeyCatalogueTests).
final class ScriptKeysTests: XCTestCase {
    func testFixedKeysFollowTheCallersKeysAndBindTheirLocals() throws {
        let redis = try TestRedis(database: 63)
        let script = RedisScript(keys: ScriptKeys().dead.queues.retry, "return {KEYS[1], KEYS[2], DEAD, QUEUES, RETRY, #KEYS}")
        let reply = try redis.pool.withConnection { try $0.evaluate(script, keys: ["mine", "also-mine"]) }
        XCTAssertEqual(reply.array?.prefix(5).compactMap(\.string), ["mine", "also-mine", Keys.dead, Keys.queues, Keys.retry])
        XCTAssertEqual(reply.array?.last?.integer, 5)
        let fixedOnly = RedisScript(keys: ScriptKeys().dead.queues.retry, "return {DEAD, QUEUES, RETRY, #KEYS}")
        let alone = try redis.pool.withConnection { try $0.evaluate(fixedOnly) }
        XCTAssertEqual(alone.array?.prefix(3).compactMap(\.string), [Keys.dead, Keys.queues, Keys.retry])
        XCTAssertEqual(alone.array?.last?.integer, 3)
    }

    func testEveryDerivationBuildsTheKeyTypesKeyForAnyName() throws {
        let redis = try TestRedis(database: 63)
        let keys = ScriptKeys().queueKey.workingKey.uniqueOwnerKey.statDayKeys.batchKeys
        let body = """
            return {queue_key(ARGV[1]), working_key(ARGV[1], ARGV[2]), unique_owner_key(ARGV[1]),
                    stat_processed_day_key(ARGV[1]), stat_failed_day_key(ARGV[1]), stat_minutely_processed_key(ARGV[1]),
                    stat_minutely_failed_key(ARGV[1]), batch_key(ARGV[1]), batch_jids_key(ARGV[1]), batch_done_key(ARGV[1]),
                    batch_failed_key(ARGV[1]), batch_died_key(ARGV[1])}
            """
        let script = RedisScript(keys: keys, body)
        for name in ["default", "a:b:c", "it's \\ a 'quote' \"and\" ..", "été 🚀", "%s %d ]] --[["] {
            let identity = "host:42:0123456789ab"
            let reply = try redis.pool.withConnection { try $0.evaluate(script, arguments: [name, identity]) }
            XCTAssertEqual(reply.array?.compactMap(\.string), [
                Keys.queue(name), Keys.working(queue: name, identity: identity), Keys.uniqueOwner(name),
                Keys.statProcessed(day: name), Keys.statFailed(day: name), Keys.statMinutelyProcessed(day: name),
                Keys.statMinutelyFailed(day: name), Keys.batch(name), Keys.batchJids(name), Keys.batchDone(name),
                Keys.batchFailed(name), Keys.batchDied(name),
            ], name)
        }
    }
}
