import Foundation
import WorkersClient
import XCTest

/// `BlockingThreads`' bounded queue (review M5): a call past `maxQueued` waiting calls fails at once.
final class BlockingThreadsQueueTests: XCTestCase {
    func testACallPastTheQueueBoundFailsAtOnce() async throws {
        let threads = BlockingThreads(count: 1, name: "BTQTest", maxQueued: 2)
        defer { threads.shutdown() }
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        // One call holds the only thread; two more wait in the queue.
        let running = Task { try await threads.run { started.signal(); release.wait(); return 1 } }
        started.wait()
        let queued = (0..<2).map { index in Task { try await threads.run { index + 10 } } }
        for _ in 0..<2000 where threads.waiting < 2 { try await Task.sleep(for: .milliseconds(5)) }
        XCTAssertEqual(threads.waiting, 2)
        // A third waiting call is refused at once. (Were it queued, `waiting` would reach 3; then everything is
        // released and the probe's result shows it ran: no hang either way.)
        let finished = Finished()
        let probe = Task { () -> Result<Int, any Error> in
            defer { finished.set() }
            do { return .success(try await threads.run { 0 }) } catch { return .failure(error) }
        }
        for _ in 0..<2000 where !finished.value && threads.waiting < 3 { try await Task.sleep(for: .milliseconds(5)) }
        release.signal()
        switch await probe.value {
        case .failure(let error as BlockingThreadsFull): XCTAssertEqual(error, BlockingThreadsFull(name: "BTQTest", queued: 2))
        case let other: XCTFail("the call past the bound was not refused: \(other)")
        }
        let first = try await running.value
        XCTAssertEqual(first, 1)
        var results: [Int] = []
        for task in queued { results.append(try await task.value) }
        XCTAssertEqual(results, [10, 11], "the queued calls still run")
    }
}

private final class Finished: @unchecked Sendable {
    private let lock = NSLock()
    private var done = false
    var value: Bool { lock.withLock { done } }
    func set() { lock.withLock { done = true } }
}
