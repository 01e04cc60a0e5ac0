import Foundation
import WorkersStorage
import Synchronization

/// Runs `count` closures on `count` dedicated threads (not `concurrentPerform`, which would use only as
/// many threads as cores), releasing them together, and returns their results in index order.
func runOnThreads<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) -> T) -> [T] {
    let results = Mutex<[Int: T]>([:])
    let ready = DispatchGroup()
    let done = DispatchGroup()
    let start = DispatchSemaphore(value: 0)
    for index in 0..<count {
        ready.enter()
        done.enter()
        let thread = Thread {
            ready.leave()
            start.wait()
            let value = body(index)
            results.withLock { $0[index] = value }
            done.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    ready.wait()
    for _ in 0..<count { start.signal() }
    done.wait()
    return results.withLock { dictionary in (0..<count).compactMap { dictionary[$0] } }
}

/// A test's own error, to check that errors thrown by a body come back unchanged.
struct TestFailure: Error, Equatable {
    let reason: String
}

/// Outcome of a closure run on another thread, as a Sendable value.
enum ThreadOutcome<T: Sendable>: Sendable {
    case success(T)
    case failure(String, isConnectionFailure: Bool)

    init(_ body: () throws -> T) {
        do { self = .success(try body()) } catch { self = .failure("\(error)", isConnectionFailure: PostgresError.isConnectionFailure(error)) }
    }

    var value: T? {
        if case .success(let value) = self { return value }
        return nil
    }
}
