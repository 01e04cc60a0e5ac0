import Foundation
import WorkersQueue
import XCTest

@testable import Workers

/// `FetchGate`, what a fetcher shares with its waiters: reserved slots keep the buffer within the fetcher's limit
/// however many connections wait, and a reconciliation waits until no reserved call is in flight (else it would take
/// back a job whose reply is still on its way to a waiter, and that job would run twice). No Redis: the gate alone.
final class FetchGateTests: XCTestCase {
    private func job(_ index: Int) -> FetchedJob {
        FetchedJob(queue: "default", raw: Array("{\"jid\":\"\(index)\"}".utf8), workingKey: "working:queue:default:test")
    }

    func testReservationsAndBufferedJobsStayWithinTheLimit() {
        let buffer = JobBuffer(capacity: 100)
        let gate = FetchGate(buffer: buffer)
        buffer.put([job(1), job(2), job(3)])
        XCTAssertEqual(gate.reserve(upTo: 10, limit: 5), 2, "3 buffered, limit 5")
        XCTAssertEqual(gate.reserve(upTo: 1, limit: 5), 0, "2 reserved + 3 buffered = the limit")
        gate.handOver([job(4)], releasing: 2)  // one slot filled, one unused
        XCTAssertEqual(buffer.count, 4)
        XCTAssertEqual(gate.reserve(upTo: 1, limit: 5, keepFree: 1), 0, "a waiter leaves the last slot to the fetcher")
        XCTAssertEqual(gate.reserve(upTo: 1, limit: 5), 1, "the fetcher may take it")
        gate.release(1)
        XCTAssertEqual(gate.reserve(upTo: 1, limit: 100, keepFree: 1), 1)
        XCTAssertEqual(gate.reserve(upTo: 500, limit: 500), 95, "never past the buffer's capacity")
    }

    func testReconciliationWaitsForTheWaitInFlightAndGrantsNothingMeanwhile() {
        let buffer = JobBuffer(capacity: 100)
        let gate = FetchGate(buffer: buffer)
        XCTAssertEqual(gate.reserve(upTo: 1, limit: 10), 1, "a waiter's wait is in flight")
        let handedOver = SharedFlag()
        let reconciled = expectation(description: "reconciled")
        DispatchQueue.global().async {
            gate.reconcile {
                // Runs only once the waiter's job is in the buffer, where reconciliation sees it as held in memory.
                XCTAssertTrue(handedOver.value, "reconciliation ran while a wait was in flight")
                XCTAssertEqual(buffer.count, 1)
                XCTAssertEqual(gate.reserve(upTo: 1, limit: 10), 0, "a slot was granted during reconciliation")
            }
            reconciled.fulfill()
        }
        Thread.sleep(forTimeInterval: 0.2)  // gives reconciliation the chance to run too early, were it allowed to
        handedOver.value = true
        gate.handOver([job(1)], releasing: 1)
        wait(for: [reconciled], timeout: 10)
        XCTAssertEqual(gate.reserve(upTo: 1, limit: 10), 1, "slots are granted again after reconciliation")
    }

    func testAWaiterWaitsOnlyWhileTheQueueIsCaughtUpAndNotPaused() {
        let gate = FetchGate(buffer: JobBuffer(capacity: 10))
        XCTAssertFalse(gate.waitUntilWaitingPays(timeout: 0), "nothing fetched yet")
        gate.noteFetch(caughtUp: false, paused: false)
        XCTAssertFalse(gate.waitUntilWaitingPays(timeout: 0), "a full fetch: a backlog")
        gate.noteFetch(caughtUp: true, paused: false)
        XCTAssertTrue(gate.waitUntilWaitingPays(timeout: 0))
        gate.notePaused()
        XCTAssertFalse(gate.waitUntilWaitingPays(timeout: 0))
    }
}

/// A flag two threads share in a test.
private final class SharedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var stored = false
    var value: Bool {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
