import XCTest

@testable import Workers

/// `FetchStep`, the fetcher's choice of round trip for one pass: fetch and wait in one round trip only for one
/// queue not last seen paused, with room for a fetched job and the wait's; otherwise the plain fetch (which, for
/// one queue, checks for a pause before it waits). No Redis: the choice alone.
final class FetchStepTests: XCTestCase {
    func testFetchThenWaitOnlyForOneUnpausedQueueWithRoomForTwo() {
        XCTAssertEqual(FetchStep(single: "default", pausedSeen: false, held: 2), .fetchThenWait(queue: "default"))
        XCTAssertEqual(FetchStep(single: "default", pausedSeen: false, held: 1), .fetch, "no room for the wait's job")
        XCTAssertEqual(FetchStep(single: "default", pausedSeen: true, held: 5), .fetch, "a paused queue is probed first")
        XCTAssertEqual(FetchStep(single: nil, pausedSeen: false, held: 5), .fetch, "several queues: no wait")
        XCTAssertEqual(FetchStep(single: "default", pausedSeen: false, held: 5, redisFull: true), .fetch,
                       "a full Redis refuses BLMOVE: no wait (docs/redis-full.md)")
    }
}
