import Queue
import TestSupport
import XCTest

/// `ReliableQueue.reclaimUnknown`: jobs a lost fetch reply left in our in-flight list go back.
final class ReclaimTests: XCTestCase {
    func testJobsTheProcessDoesNotHoldGoBackAndHeldOnesStay() throws {
        let redis = try TestRedis(database: 8)
        let identity = "host:1:abcdef"
        let key = Keys.working(queue: "default", identity: identity)
        let held = #"{"class":"A","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}"#
        let lost = #"{"class":"B","args":[],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb"}"#
        // The same bytes twice (a producer pushed one payload twice): we hold only one copy.
        try redis.command("LPUSH", key, held, lost, held)
        let connection = try redis.connection()
        let reclaimed = try ReliableQueue.reclaimUnknown(connection, identity: identity, queues: ["default"]) {
            [Array(held.utf8)]
        }
        XCTAssertEqual(reclaimed, 2)
        XCTAssertEqual(try redis.command("LRANGE", key, 0, -1).strings, [held])
        XCTAssertEqual(Set(try redis.command("LRANGE", "queue:default", 0, -1).strings), [held, lost])
        // A job settled between the read of the list and the read of memory is not pushed again.
        try redis.command("DEL", key, "queue:default")
        try redis.command("LPUSH", key, lost)
        let again = try ReliableQueue.reclaimUnknown(connection, identity: identity, queues: ["default"]) {
            _ = try? connection.command("LREM", key, 1, lost)  // the settler wrote it meanwhile
            return []
        }
        XCTAssertEqual(again, 0)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0)
    }
}
