import Foundation
import Logging
import Synchronization

/// Reports a dependency outage once for the whole process — not once per thread per retry —
/// and its end once. Any thread may call it.
final class OutageLog: Sendable {
    private let down = Mutex<Set<String>>([])
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    /// A call to `dependency` failed with a connection error.
    func failed(_ dependency: String, _ error: any Error) {
        RuntimeMetrics.dependencyError(dependency)
        let first = down.withLock { $0.insert(dependency).inserted }
        if first { logger.error("\(dependency) unreachable; retrying with backoff", metadata: ["error": "\(error)"]) }
    }

    /// A call to `dependency` succeeded.
    func succeeded(_ dependency: String) {
        let wasDown = down.withLock { $0.remove(dependency) != nil }
        if wasDown { logger.notice("\(dependency) reachable again") }
    }
}
