import Foundation
import WorkersTelemetry
import Tracing

/// A fixed set of dedicated threads that run blocking calls (hiredis' blocking API, the pool's
/// waits) for async callers, so that no Swift concurrency cooperative-pool thread ever blocks on
/// the network or on a lock wait.
///
/// Threading: `work` and `isShutDown` are read and written only while holding `condition`; the
/// closures run on one of the `count` threads named `<name>-<i>`, one at a time per thread, in
/// the order they were submitted. After `shutdown()` the threads finish what is queued, then
/// exit; later submissions fail with `WorkersClientError.shutDown`.
///
/// Invariant: at most `maxQueued` calls wait for a thread; a call past that fails at once with
/// `BlockingThreadsFull` (a web server answers 503) instead of growing the queue without bound.
///
/// Public so that other blocking clients of an async program (libpq calls of the web dashboard) run the
/// same way instead of on a second kind of thread pool.
package final class BlockingThreads: @unchecked Sendable {
    public let count: Int
    public let name: String
    /// The most calls that may wait for a thread (not counting those running).
    public let maxQueued: Int
    private let condition = NSCondition()
    private var work: [@Sendable () -> Void] = []
    private var isShutDown = false

    public init(count: Int, name: String, maxQueued: Int = .max) {
        self.count = max(1, count)
        self.name = name
        self.maxQueued = max(0, maxQueued)
        for index in 0..<self.count {
            let threadName = "\(name)-\(index)"
            // Named from inside (a name set before start() does not reach the OS thread on Linux; 15 bytes at
            // most). Foundation passes a name on to the OS thread only once `start()` has recorded the thread's handle,
            // which races with the new thread's first steps: named before that, the thread kept its creator's OS
            // name (seen in 4 of 40 runs). So the thread waits for `start()` to return, then names itself.
            let started = DispatchSemaphore(value: 0)
            let thread = Thread { [self] in
                started.wait()
                Thread.current.name = threadName
                loop()
            }
            thread.start()
            started.signal()
        }
    }

    /// Runs `body` on one of the threads and resumes the caller with its result. A task already
    /// cancelled is not submitted (`CancellationError`); once submitted, the call runs to its end
    /// (a Redis command cannot be taken back half-way). Throws `BlockingThreadsFull` when
    /// `maxQueued` calls already wait.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try Task.checkCancellation()
        // The caller's span (a task-local) is bound again on the thread, so an enqueue span descends from it.
        let context = JobTracing.isEnabled ? ServiceContext.current : nil
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted = submit {
                continuation.resume(with: Result {
                    guard let context else { return try body() }
                    return try ServiceContext.withValue(context) { try body() }
                })
            }
            switch accepted {
            case .accepted: break
            case .shutDown: continuation.resume(throwing: WorkersClientError.shutDown)
            case .full: continuation.resume(throwing: BlockingThreadsFull(name: name, queued: maxQueued))
            }
        }
    }

    /// Calls waiting for a thread now (not counting those running).
    public var waiting: Int {
        condition.lock()
        defer { condition.unlock() }
        return work.count
    }

    /// Stops the threads once the queued work is done. Idempotent.
    public func shutdown() {
        condition.lock()
        isShutDown = true
        condition.broadcast()
        condition.unlock()
    }

    private enum Submission { case accepted, shutDown, full }

    private func submit(_ item: @escaping @Sendable () -> Void) -> Submission {
        condition.lock()
        defer { condition.unlock() }
        if isShutDown { return .shutDown }
        if work.count >= maxQueued { return .full }
        work.append(item)
        condition.signal()
        return .accepted
    }

    private func loop() {
        while true {
            condition.lock()
            while work.isEmpty && !isShutDown { condition.wait() }
            if work.isEmpty {  // shut down and drained
                condition.unlock()
                return
            }
            let item = work.removeFirst()
            condition.unlock()
            item()
        }
    }
}

/// `BlockingThreads.run` refused a call: `queued` calls already wait for one of the `name` threads. Says nothing
/// about the call itself (no argument, no data).
public struct BlockingThreadsFull: Error, Sendable, Equatable, CustomStringConvertible {
    public let name: String
    public let queued: Int

    public init(name: String, queued: Int) {
        self.name = name
        self.queued = queued
    }

    public var description: String { "\(name): \(queued) calls already wait for a thread; try again later" }
}
