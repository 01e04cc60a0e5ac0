import Foundation
import Queue
import TestSupport
import XCTest

/// Two rounds (`ReliableQueue.sendRound`) in flight on one connection (`RedisConnection.sendWithoutReading` /
/// `readReply`): Redis runs the second as soon as the first one's wait is served, and the replies come back in order.
/// Real Redis (database 103).
final class RoundsInFlightTests: XCTestCase {
    let identity = "rounds-host:1:abcdef"
    var redis: TestRedis!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 103)
        try redis.flush()
    }

    override func tearDown() { try? redis.flush() }

    func testTheSecondRoundRunsAsSoonAsTheFirstWaitIsServedAndRepliesComeInOrder() throws {
        let connection = try redis.connection()
        let first = try ReliableQueue.sendRound(connection, identity: identity, queue: "default", fetching: 0, timeout: 5)
        let second = try ReliableQueue.sendRound(connection, identity: identity, queue: "default", fetching: 5, timeout: 0.2)
        XCTAssertEqual(connection.unreadReplies, 6)
        // Another method reads replies of its own: refused while these are due, and the link stays usable.
        XCTAssertThrowsError(try connection.command("PING"))
        XCTAssertEqual(connection.unreadReplies, 6)

        let checked = try ReliableQueue.receiveFetch(first, on: connection, identity: identity)
        XCTAssertEqual(checked.jobs.count, 0, "a wait round fetches nothing")
        XCTAssertFalse(checked.paused)
        // One push of three: the first round's wait takes the oldest and counts the two left; the second round, queued
        // behind it, runs in the same iteration and its fetch takes them.
        XCTAssertTrue(try eventually(timeout: 10) { try redis.clientsWaitingInBLMOVE() == 1 })
        try redis.command("LPUSH", "queue:default", "a", "b", "c")
        let waited = try ReliableQueue.receiveWait(first, on: connection)
        XCTAssertEqual(waited.job.map { String(decoding: $0.raw, as: UTF8.self) }, "a")
        XCTAssertEqual(waited.left, 2)
        let next = try ReliableQueue.receiveFetch(second, on: connection, identity: identity)
        XCTAssertEqual(next.jobs.map { String(decoding: $0.raw, as: UTF8.self) }, ["b", "c"])
        let last = try ReliableQueue.receiveWait(second, on: connection)
        XCTAssertNil(last.job, "nothing left for the second wait")
        XCTAssertNil(last.left, "a fetch round does not count")
        XCTAssertEqual(connection.unreadReplies, 0)
        XCTAssertThrowsError(try connection.readReply(), "no reply is due")
        XCTAssertEqual(try connection.command("LLEN", Keys.working(queue: "default", identity: identity)).integer, 3)
        XCTAssertEqual(try connection.command("PING").string, "PONG")
    }

    func testARoundSentWhileThePreviousWaitBlocksSeesAPauseMadeMeanwhile() throws {
        let connection = try redis.connection()
        let first = try ReliableQueue.sendRound(connection, identity: identity, queue: "default", fetching: 0, timeout: 5)
        let second = try ReliableQueue.sendRound(connection, identity: identity, queue: "default", fetching: 5, timeout: 0.2)
        XCTAssertFalse(try ReliableQueue.receiveFetch(first, on: connection, identity: identity).paused)
        XCTAssertTrue(try eventually(timeout: 10) { try redis.clientsWaitingInBLMOVE() == 1 })
        try redis.command("SADD", Keys.paused, "default")
        try redis.command("LPUSH", "queue:default", "a", "b")
        // The first wait was blocked before the pause; the second round's check runs after it, and its fetch moves
        // nothing from the paused queue, though its wait (sent before the answer was known) takes the next job.
        XCTAssertNotNil(try ReliableQueue.receiveWait(first, on: connection).job)
        let next = try ReliableQueue.receiveFetch(second, on: connection, identity: identity)
        XCTAssertTrue(next.paused)
        XCTAssertEqual(next.jobs.count, 0)
        XCTAssertEqual(try ReliableQueue.receiveWait(second, on: connection).job.map { String(decoding: $0.raw, as: UTF8.self) }, "b")
    }
}
