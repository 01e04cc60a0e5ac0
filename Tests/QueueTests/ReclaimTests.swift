import WorkersQueue
import WorkersTestServices
import XCTest

/// `ReliableQueue.unknownInFlight`: the jobs a lost fetch reply left in our in-flight list, which the fetcher puts back
/// through the settler (a `requeue` each, as `SettlementQueue.giveBack` writes it).
final class ReclaimTests: XCTestCase {
    private func putBack(_ jobs: [FetchedJob], on connection: RedisConnection) throws -> Int {
        try ReliableQueue.settle(connection, jobs.map { ($0, .requeue(payload: String(decoding: $0.raw, as: UTF8.self)), []) })
    }

    func testJobsTheProcessDoesNotHoldGoBackAndHeldOnesStay() throws {
        let redis = try TestRedis(database: 8)
        let identity = "host:1:abcdef"
        let key = Keys.working(queue: "default", identity: identity)
        let held = #"{"class":"A","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}"#
        let lost = #"{"class":"B","args":[],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb"}"#
        // The same bytes twice (a producer pushed one payload twice): we hold only one copy.
        try redis.command("LPUSH", key, held, lost, held)
        let connection = try redis.connection()
        let unknown = try ReliableQueue.unknownInFlight(connection, identity: identity, queues: ["default"]) {
            [Array(held.utf8)]
        }
        XCTAssertEqual(unknown.map { String(decoding: $0.raw, as: UTF8.self) }.sorted(), [held, lost])
        XCTAssertEqual(try redis.command("LLEN", key).integer, 3, "read only")
        XCTAssertEqual(try putBack(unknown, on: connection), 2)
        XCTAssertEqual(try redis.command("LRANGE", key, 0, -1).strings, [held])
        XCTAssertEqual(Set(try redis.command("LRANGE", "queue:default", 0, -1).strings), [held, lost])
        // A job settled between the read of the list and the read of memory is not pushed again.
        try redis.command("DEL", key, "queue:default")
        try redis.command("LPUSH", key, lost)
        let again = try ReliableQueue.unknownInFlight(connection, identity: identity, queues: ["default"]) {
            _ = try? connection.command("LREM", key, 1, lost)  // the settler wrote it meanwhile
            return []
        }
        XCTAssertEqual(again.count, 1, "unknown here")
        XCTAssertEqual(try putBack(again, on: connection), 0, "but no longer in flight: not put back")
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0)
    }
}
