import Foundation
import WorkersOutbox
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import XCTest

/// The outbox relay with several Redis shards (docs/sharding.md): each committed row goes to its queue's shard.
/// Shards are two databases of the test Redis (101 = default, 102 = `b`).
final class ShardOutboxTests: XCTestCase {
    var database: PostgresTestDatabase!
    var connection: PostgresConnection!

    override func setUpWithError() throws {
        database = try PostgresTestDatabase.create(prefix: "outbox_shard_test")
        connection = try database.connect()
        try BundledSchema.migrate(on: connection)
    }

    override func tearDown() {
        connection?.close()
        database?.drop()
    }

    func testTheRelayPushesEachRowToItsQueuesShard() throws {
        let home = try TestRedis(database: 101)
        let other = try TestRedis(database: 102)
        let later = Clock.now() + 3600
        let (alpha, beta, scheduled) = try connection.transaction { conn in
            (try Outbox.enqueueMany((0..<3).map { _ in NewJob("Noop", queue: "alpha") }, on: conn),
             try Outbox.enqueueMany((0..<2).map { _ in NewJob("Noop", queue: "beta") }, on: conn),
             try Outbox.enqueue(NewJob("Noop", queue: "beta"), at: Date(timeIntervalSince1970: later), on: conn))
        }
        let relay = try ChildProcess(executable: TestServices.workerctl, arguments: ["relay"], environment: [
            "REDIS_URL": home.url, "REDIS_SHARDS": "b=\(other.url)", "QUEUE_SHARDS": "beta=b",
            "DATABASE_URL": database.url, "LOG_LEVEL": "info"])
        defer { relay.signal(SIGTERM); XCTAssertEqual(relay.wait(), 0, relay.stderr) }
        XCTAssertTrue(try eventually {
            try XCTUnwrap(connection.queryFirst("SELECT count(*)::int AS n FROM job_outbox WHERE pushed_at IS NULL")).int("n") == 0
        }, relay.stderr)
        XCTAssertEqual(Set(try home.payloads(list: "queue:alpha").compactMap(\.jid)), Set(alpha))
        XCTAssertEqual(Set(try other.payloads(list: "queue:beta").compactMap(\.jid)), Set(beta))
        XCTAssertEqual(try other.payloads(zset: Keys.schedule).compactMap(\.jid), [scheduled])
        XCTAssertEqual(try home.command("KEYS", "*").strings.sorted(), ["queue:alpha", "queues"])
        XCTAssertEqual(try other.command("KEYS", "*").strings.sorted(), ["queue:beta", "queues", "schedule"])
    }
}
